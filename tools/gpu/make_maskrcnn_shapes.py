"""Writes maskrcnn_r50_fpn_shapes.json: every tensor of mmdet's Mask R-CNN R50-FPN state dict.

Run once where mmdet and mmcv's compiled ops are installed (CPU is enough; building the model
needs ``mmcv.ops`` to import, not to run):

    python tools/gpu/make_maskrcnn_shapes.py

The json is committed so the GPU harness can rebuild the same tensors without building the model.
"""
import json
from importlib import metadata
from pathlib import Path

from mmdet.registry import MODELS
from mmdet.utils import register_all_modules
from mmengine.hub import get_config

CONFIG = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
OUT = Path(__file__).with_name('maskrcnn_r50_fpn_shapes.json')


def main() -> None:
    register_all_modules()
    cfg = get_config(CONFIG)
    model = MODELS.build(cfg.model)  # init_weights() is not called: no pretrained download
    model.train()  # ResNet freezes its stem and first stage (frozen_stages=1) in train()
    parameters = dict(model.named_parameters())
    tensors = []
    for name, value in model.state_dict().items():
        is_parameter = name in parameters
        tensors.append(dict(name=name, shape=list(value.shape),
                            dtype=str(value.dtype).removeprefix('torch.'),
                            kind='parameter' if is_parameter else 'buffer',
                            requires_grad=bool(is_parameter and parameters[name].requires_grad)))
    source = f'mmdet {metadata.version("mmdet")} {CONFIG}, built on CPU, model.train()'
    lines = ',\n'.join(json.dumps(t) for t in tensors)  # a tensor a line: readable diffs
    OUT.write_text(f'{{"source": {json.dumps(source)},\n"tensors": [\n{lines}\n]}}\n')
    trainable = sum(v.numel() for v in parameters.values() if v.requires_grad)
    print(f'{OUT}: {len(tensors)} tensors, {sum(p.numel() for p in parameters.values()):,} '
          f'parameters ({trainable:,} trainable)')


if __name__ == '__main__':
    main()
