"""Mask R-CNN R50-FPN training step: mmdet's stock data path vs the plugin's, on the same data.

stock: ``BitmapMasks`` (``LoadAnnotations(poly2mask=True)``), ``pseudo_collate``,
``DetDataPreprocessor``. plugin: ``LazyInstanceMasks`` (``LoadLazyAnnotations``),
``fast_collate``, ``FastDetDataPreprocessor``. Same images, boxes, labels and polygons, same
initial weights (random: no pretrained download), same seed before each variant's first step.

Timed: ``model.train_step`` (preprocessing, forward, backward, SGD step), device synced, after
warm-up; collation happens beforehand, as in a DataLoader worker. Peak memory: the most GPU
memory allocated during the timed steps, model and optimizer included.
"""
import copy
import logging

import numpy as np
import torch
from mmdet.datasets.transforms import PackDetInputs
from mmdet.registry import MODELS
from mmdet.structures.bbox import HorizontalBoxes
from mmdet.utils import register_all_modules
from mmengine.hub import get_config
from mmengine.logging import MMLogger
from mmengine.dataset import pseudo_collate
from mmengine.optim import OptimWrapper

from coco_like import AnnotatedImage, coco_like_images
from mask_targets import bitmap_masks, lazy_masks
from mmdet_ext import fast_collate
from report import NO_CUDA, Row, mib, skipped
from timing import median_seconds, release_memory

MEASUREMENT = 'c. Mask R-CNN R50-FPN train step'
CONFIG = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
VARIANTS = {
    # name: (mask structure, collate, data preprocessor type)
    'stock (BitmapMasks, DetDataPreprocessor)': (bitmap_masks, pseudo_collate,
                                                 'DetDataPreprocessor'),
    'plugin (LazyInstanceMasks, fast_collate)': (lazy_masks, fast_collate,
                                                 'FastDetDataPreprocessor'),
}


def packed_sample(image: AnnotatedImage, index: int, make_masks) -> dict:
    """A training sample as ``PackDetInputs`` emits it after loading, resizing and flipping."""
    rng = np.random.default_rng(index)
    pixels = rng.integers(0, 256, (image.height, image.width, 3), dtype=np.uint8)
    labels = rng.integers(0, 80, len(image.polygons))
    shape = (image.height, image.width)
    results = dict(img=pixels, img_id=index, img_path=f'synthetic_{index}.jpg', ori_shape=shape,
                   img_shape=shape, scale_factor=(1.0, 1.0), flip=False, flip_direction=None,
                   gt_bboxes=HorizontalBoxes(torch.from_numpy(image.boxes)),
                   gt_bboxes_labels=labels, gt_ignore_flags=np.zeros(len(labels), dtype=bool),
                   gt_masks=make_masks(image))
    return PackDetInputs().transform(results)


def build_model(preprocessor: str, device: str, state: dict | None = None) -> torch.nn.Module:
    cfg = get_config(CONFIG)
    cfg.model.backbone.init_cfg = None  # no internet: random weights, the same for both variants
    cfg.model.data_preprocessor.type = preprocessor
    model = MODELS.build(cfg.model)
    if state is None:
        model.init_weights()
    else:
        model.load_state_dict(state)
    return model.to(device).train()


def run_variant(name: str, images: list, device: str, state: dict, warmup: int,
                repeat: int) -> tuple[float, int, dict]:
    """Median seconds per step, peak bytes (CUDA) and the first step's losses."""
    make_masks, collate, preprocessor = VARIANTS[name]
    model = build_model(preprocessor, device, state)
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9,
                                         weight_decay=0.0001))
    samples = [packed_sample(image, k, make_masks) for k, image in enumerate(images)]
    batches = iter([collate(samples) for _ in range(warmup + repeat)])

    def step() -> dict:
        return model.train_step(next(batches), optim)

    torch.manual_seed(0)  # the samplers draw the same proposals in both variants
    first = {k: float(v.detach()) for k, v in step().items()}
    for _ in range(warmup - 1):
        step()
    if device == 'cuda':
        torch.cuda.reset_peak_memory_stats()
    seconds = median_seconds(step, device, repeat, warmup=0)
    peak = torch.cuda.max_memory_allocated() if device == 'cuda' else 0
    return seconds, peak, first


def measure(device: str, mmcv_cuda_ops: bool, num_images: int = 2, height: int = 800,
            width: int = 1333, warmup: int = 3, repeat: int = 10) -> list[Row]:
    """One row per variant; on CUDA only with mmcv's CUDA ops (RoIAlign, nms)."""
    if device == 'cuda' and not torch.cuda.is_available():
        return [Row(MEASUREMENT, name, notes=NO_CUDA) for name in VARIANTS]
    if device == 'cuda' and not mmcv_cuda_ops:
        return [skipped(MEASUREMENT, name, 'mmcv ops not built with CUDA (RoIAlign, nms); '
                        'bash tools/gpu/build_mmcv_ops.sh') for name in VARIANTS]
    register_all_modules()
    MMLogger.get_current_instance().setLevel(logging.WARNING)  # no per-parameter init report
    images = coco_like_images(num_images, height, width)
    state = copy.deepcopy(build_model('DetDataPreprocessor', 'cpu').state_dict())
    results = {}
    for name in VARIANTS:
        results[name] = run_variant(name, images, device, state, warmup, repeat)
        release_memory()  # the first variant's model must not count in the second's peak
    rows = []
    for name, (seconds, peak, first) in results.items():
        losses = ', '.join(f'{k} {first[k]:.4f}' for k in ('loss_mask', 'loss_cls') if k in first)
        rows.append(Row(MEASUREMENT, name, f'{seconds * 1e3:,.1f} ms/step',
                        mib(peak) if device == 'cuda' else '-',
                        f'{num_images} images {width}x{height}, median of {repeat} steps; '
                        f'first step {losses}'))
    return rows
