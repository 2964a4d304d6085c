"""A model with exactly Mask R-CNN R50-FPN's parameters and buffers, and no layers.

Why: resume memory depends only on which tensors a checkpoint holds and how big they are, while
building mmdet's real ``MaskRCNN`` and training it a step on the GPU needs mmcv's CUDA ops. The
shapes, dtypes and trainable flags come from ``maskrcnn_r50_fpn_shapes.json``, written from
mmdet's own config by ``make_maskrcnn_shapes.py``; state-dict keys equal the real model's, and a
training step gives every trainable tensor a gradient, so SGD keeps a momentum buffer for the
same tensors as in real training (the frozen stem and first stage get none).
"""
import json
from pathlib import Path
from typing import Any

import torch
from mmengine.model import BaseModel
from torch import nn

SHAPES_FILE = Path(__file__).with_name('maskrcnn_r50_fpn_shapes.json')


def load_shapes(path: Path = SHAPES_FILE) -> dict:
    """``{'source': str, 'tensors': [{'name', 'shape', 'dtype', 'kind', 'requires_grad'}]}``."""
    return json.loads(path.read_text())


def _owner(root: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    """The submodule that holds ``dotted`` (created on the way), and the tensor's own name."""
    *path, leaf = dotted.split('.')
    module = root
    for name in path:
        if not hasattr(module, name):
            module.add_module(name, nn.Module())
        module = getattr(module, name)
    return module, leaf


class MaskRCNNShapeModel(BaseModel):
    """Mask R-CNN R50-FPN's tensors; the loss touches each trainable one once (sum of p * x)."""

    def __init__(self, shapes: dict) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        for spec in shapes['tensors']:
            module, name = _owner(self, spec['name'])
            dtype = getattr(torch, spec['dtype'])
            if dtype.is_floating_point:
                value = torch.randn(spec['shape'], generator=generator).to(dtype) * 0.01
            else:
                value = torch.zeros(spec['shape'], dtype=dtype)
            if spec['kind'] == 'parameter':
                module.register_parameter(
                    name, nn.Parameter(value, requires_grad=spec['requires_grad']))
            else:
                module.register_buffer(name, value)

    def forward(self, inputs: Any, data_samples: Any = None, mode: str = 'loss') -> Any:
        scale = torch.stack(list(inputs)).float().mean()
        loss = sum((p * scale).sum() for p in self.parameters() if p.requires_grad)
        return dict(loss=loss) if mode == 'loss' else [loss]


class OneInputDataset(torch.utils.data.Dataset):
    """``length`` samples of ``{'inputs': tensor(1.)}``: just enough for the training loop."""

    def __init__(self, length: int = 4) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        return dict(inputs=torch.ones(1))
