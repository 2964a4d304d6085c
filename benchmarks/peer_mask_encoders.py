"""Binary masks to COCO RLE: ours against the peers' encoders, on the same predicted masks (CPU).

Issue 54, item 5. The masks are what a Mask R-CNN test step hands its metric: the synthetic
detections of ``benchmarks/coco_eval_speed.synthetic_images`` (jittered copies of the ground
truth's star-shaped outlines plus spurious boxes, 28x28 logit blobs) pasted to full size and
thresholded by mmdet's ``FCNMaskHead`` (CPU form), as (N, H, W) bool tensors, one image at a time.
Every encoder gets the same tensors and must return pycocotools' compressed counts for each mask,
byte for byte (checked before anything is timed).

Encoders:
- ours: ``mmdet_ext.ops.masks.rle_encode_batch`` (runs from the row-major masks in one call) then
  ``to_coco_rles`` (the compressed strings);
- pycocotools 2.0.x ``mask.encode`` of the image's (H, W, N) Fortran-ordered uint8 copy (mmdet's
  ``encode_mask_results`` makes that copy one mask at a time);
- ultralytics: the two closures of ``SegmentationValidator.pred_to_json``
  (``ultralytics/models/yolo/segment/val.py``: ``multi_encode`` on the column-major flattened
  (N, H*W) masks, ``to_string``), taken from the installed file with ``ast``: the package
  itself cannot be imported without torchvision (``ultralytics/utils/__init__.py`` asks for its
  version), which this project never installs;
- roboflow inference-models: ``inference_models/models/common/rle_utils.py::
  torch_mask_to_coco_rle`` (one (H, W) mask a call), imported with its parent packages' heavy
  ``__init__`` files skipped (a sibling module imports torchvision);
- supervision: ``supervision/detection/utils/converters.py::mask_to_rle`` (numpy, one mask a call),
  imported the same way;
- hotcoco ``mask.encode`` one mask at a time: what rf-detr's training metric does since it made
  hotcoco its default (rf-detr PR #1402, through TorchMetrics' per-mask loop);
- faster-coco-eval ``mask.encode`` one mask at a time (ultralytics <= 8.3.228's path).

The peers' packages are benchmark-only: a venv that sees this machine's torch, with the packages
installed without their dependencies (nothing of theirs is a dependency of the project):

    python3 -m venv --system-site-packages ~/.cache/mmdet_ext/venvs/peers
    ~/.cache/mmdet_ext/venvs/peers/bin/pip install --no-deps ultralytics==8.4.190 \\
        inference-models==0.39.6 supervision==0.31.2
    PYTHONPATH=. ~/.cache/mmdet_ext/venvs/peers/bin/python benchmarks/peer_mask_encoders.py \\
        [--images 20] [--out benchmarks/results/peer_mask_encoders.md]

An encoder whose package is missing is reported as such, not timed. One torch thread, every
encoder on every image in turn (interleaved), best of ``--rounds`` per encoder and image, summed
over the images. The floor: one read of the masks' bytes (a max over them), the least any
encoder must do.
"""
import argparse
import ast
import importlib
import importlib.util
import os
import platform
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from mmengine.config import ConfigDict

from benchmarks import write_report
from benchmarks.coco_eval_speed import synthetic_images
from benchmarks.predicted_masks_metric import THRESHOLD, ordered_boxes

SIZES = {'640x480': (480, 640), '1333x800': (800, 1333)}
DETECTIONS = 100


def predicted_masks(images: int, height: int, width: int) -> list[torch.Tensor]:
    """The (N, H, W) bool masks mmdet's FCNMaskHead pastes for each synthetic image."""
    from mmdet.models.roi_heads.mask_heads import FCNMaskHead
    head = FCNMaskHead(num_convs=0, num_classes=1, class_agnostic=True)
    masks = []
    for _, _, (boxes, labels, logits, _) in synthetic_images(
            np.random.default_rng(0), images, DETECTIONS, height, width):
        pasted = head._predict_by_feat_single(
            torch.from_numpy(logits)[:, None], ordered_boxes(boxes),
            torch.zeros(len(boxes), dtype=torch.long),
            dict(ori_shape=(height, width), scale_factor=(1.0, 1.0)),
            ConfigDict(mask_thr_binary=THRESHOLD), rescale=True)
        masks.append(pasted.bool().contiguous())
    return masks


# --- the encoders: each (N, H, W) bool tensor -> list of compressed counts (bytes) -------------

def ours(masks: torch.Tensor) -> list[bytes]:
    from mmdet_ext.ops.masks import rle_encode_batch, to_coco_rles
    counts, run_counts = rle_encode_batch(masks)
    return [rle['counts'] for rle in to_coco_rles(counts, run_counts, *masks.shape[1:])]


def pycocotools_batched(masks: torch.Tensor) -> list[bytes]:
    from pycocotools import mask as mask_utils
    fortran = np.asfortranarray(masks.numpy().transpose(1, 2, 0).astype(np.uint8))
    return [rle['counts'] for rle in mask_utils.encode(fortran)]


def _package_dir(name: str) -> Path:
    """Where an installed package's files are, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f'{name} is not installed')
    return Path(list(spec.submodule_search_locations)[0])


def _skip_package_inits(top: str, packages: list[str]) -> None:
    """Register ``packages`` (dotted, under ``top``) as empty packages over their real folders, so
    that a submodule imports without running the packages' ``__init__`` files."""
    root = _package_dir(top).parent
    for name in packages:
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [str(root / name.replace('.', '/'))]
            sys.modules[name] = module


def ultralytics_encoder():
    path = _package_dir('ultralytics') / 'models' / 'yolo' / 'segment' / 'val.py'
    tree = ast.parse(path.read_text())
    validator = next(node for node in tree.body
                     if isinstance(node, ast.ClassDef) and node.name == 'SegmentationValidator')
    method = next(node for node in validator.body
                  if isinstance(node, ast.FunctionDef) and node.name == 'pred_to_json')
    closures = {node.name: node for node in method.body if isinstance(node, ast.FunctionDef)}
    # The closures read the image's h and w from pred_to_json's scope: a factory takes them.
    factory = ast.FunctionDef(
        name='closures', args=ast.arguments(posonlyargs=[], args=[ast.arg('h'), ast.arg('w')],
                                            kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[closures['to_string'], closures['multi_encode'],
              ast.Return(ast.Tuple([ast.Name('multi_encode', ast.Load()),
                                    ast.Name('to_string', ast.Load())], ast.Load()))],
        decorator_list=[], returns=None, type_params=[])
    module = ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[]))
    namespace = {'np': np, 'torch': torch}
    exec(compile(module, str(path), 'exec'), namespace)  # noqa: S102 -- the peer's own code

    def encode(masks: torch.Tensor) -> list[bytes]:
        # pred_to_json's own steps: uint8 masks, flattened column-major on their device.
        masks = masks.to(torch.uint8)
        flat = masks.transpose(2, 1).contiguous().view(len(masks), -1)
        multi_encode, to_string = namespace['closures'](*masks.shape[1:])
        return [to_string(counts).encode() for counts in multi_encode(flat)]
    return encode


def inference_models_encoder():
    _skip_package_inits('inference_models', [
        'inference_models', 'inference_models.models', 'inference_models.models.base',
        'inference_models.models.common'])
    encode_one = importlib.import_module(
        'inference_models.models.common.rle_utils').torch_mask_to_coco_rle
    return lambda masks: [encode_one(mask)['counts'] for mask in masks]


def supervision_encoder():
    _skip_package_inits('supervision', [
        'supervision', 'supervision.detection', 'supervision.detection.utils'])
    mask_to_rle = importlib.import_module('supervision.detection.utils.converters').mask_to_rle
    return lambda masks: [mask_to_rle(mask, compressed=True).encode()
                          for mask in masks.numpy()]


def per_mask_encoder(module_name: str, stacked: bool):
    """A package's ``mask.encode`` called once per (H, W) uint8 mask, Fortran-ordered; ``stacked``:
    it takes (H, W, N) and returns a list, as pycocotools' (faster-coco-eval), else (H, W) and
    one dict (hotcoco)."""
    encode_one = importlib.import_module(module_name).encode
    if stacked:
        return lambda masks: [encode_one(np.asfortranarray(mask[:, :, None]))[0]['counts']
                              for mask in masks.numpy().astype(np.uint8)]
    return lambda masks: [encode_one(np.asfortranarray(mask))['counts']
                          for mask in masks.numpy().astype(np.uint8)]


PEERS = {  # name: (how it is made, where it comes from)
    'ultralytics 8.4 (SegmentationValidator.pred_to_json)': (ultralytics_encoder, 'ultralytics'),
    'roboflow inference-models (torch_mask_to_coco_rle)': (inference_models_encoder,
                                                           'inference-models'),
    'supervision (mask_to_rle)': (supervision_encoder, 'supervision'),
    'hotcoco mask.encode per mask (rf-detr)': (
        lambda: per_mask_encoder('hotcoco.mask', stacked=False), 'hotcoco'),
    'faster-coco-eval mask.encode per mask': (
        lambda: per_mask_encoder('faster_coco_eval.core.mask', stacked=True), 'faster-coco-eval'),
}


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(distribution)
    except PackageNotFoundError:
        return 'not installed'


def encoders() -> tuple[dict, dict]:
    """(name: encode, for those that load), (name: why not, for those that do not)."""
    found = {'ours (rle_encode_batch + to_coco_rles)': ours,
             'pycocotools mask.encode (batched, Fortran copy)': pycocotools_batched}
    missing = {}
    for name, (make, distribution) in PEERS.items():
        try:
            found[f'{name} {_version(distribution)}'] = make()
        except Exception as err:  # noqa: BLE001 -- reported in the table
            missing[name] = f'{type(err).__name__}: {err}'
    return found, missing


def floor(masks: torch.Tensor) -> int:
    """One read of the masks' bytes (a max over them: 19 GB/s here, where ``count_nonzero``
    of a bool tensor is several times slower than the encoders)."""
    return int(masks.view(torch.uint8).max())


def measure(masks: list[torch.Tensor], found: dict, rounds: int) -> dict:
    """Seconds per encoder, summed over the images (best of ``rounds`` per image)."""
    for image in masks:
        reference = pycocotools_batched(image)
        for name, encode in found.items():
            if encode(image) != reference:
                raise SystemExit(f'{name} does not give pycocotools\' counts')
    totals = dict.fromkeys([*found, 'floor'], 0.0)
    for image in masks:
        best = dict.fromkeys(totals, float('inf'))
        for _ in range(rounds):
            for name, encode in [*found.items(), ('floor', floor)]:
                start = time.perf_counter()
                encode(image)
                best[name] = min(best[name], time.perf_counter() - start)
        for name in totals:
            totals[name] += best[name]
    return totals


def report(measured: dict, missing: dict, args, counts: dict, load: tuple) -> list[str]:
    lines = [
        '# Binary masks to COCO RLE: ours and the peers\' encoders, the same masks (CPU)', '',
        f'Command: `PYTHONPATH=. {sys.executable.replace(os.path.expanduser("~"), "~")} '
        f'benchmarks/peer_mask_encoders.py --images {args.images} --rounds {args.rounds}` in the '
        'benchmark-only venv of the script\'s docstring (`--system-site-packages`; the peers '
        'installed `--no-deps`).', '',
        f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python '
        f'{platform.python_version()}, torch {torch.__version__}, 1 torch thread; load average '
        f'{load[0]:.2f} before, {load[1]:.2f} after.', '',
        f'{args.images} images per size, {DETECTIONS} detections each: mmdet\'s FCNMaskHead '
        'pastes of the synthetic detections of benchmarks/coco_eval_speed.py (bool (N, H, W) '
        'tensors on the CPU). Every encoder returned pycocotools\' compressed counts for every '
        'mask, byte for byte, before timing. Best of the rounds per encoder and image, summed. '
        'Floor: one read of the masks\' bytes (a max over them); "floor / it" is the floor\'s time '
        'over the encoder\'s (1 = the encoder runs at the speed of reading its input once).', '']
    for size, totals in measured.items():
        lines += [f'## {size}, {counts[size]} masks', '',
                  '| encoder | ms / image | vs ours | floor / it |', '|---|---:|---:|---:|']
        base = totals['ours (rle_encode_batch + to_coco_rles)']
        for name, seconds in sorted(totals.items(), key=lambda item: item[1]):
            if name == 'floor':
                continue
            lines.append(f'| {name} | {seconds / args.images * 1e3:.2f} | '
                         f'{seconds / base:.2f}x | {totals["floor"] / seconds:.3f} |')
        lines += ['', f'Floor: {totals["floor"] / args.images * 1e3:.2f} ms / image.', '']
    if missing:
        lines += ['## Not measured', '']
        lines += [f'- {name}: {why}' for name, why in missing.items()]
        lines.append('')
    lines += [
        'Not measured here: the peers\' GPU forms (ultralytics and inference-models run their '
        'run-length step on the masks\' device, as ours does for a CUDA tensor: '
        'csrc/masks/cuda/rle_encode_kernels.cu; docs/gpu.md, measurement d, is the plan). '
        'Their designs are for a GPU; this is what each costs where a test step runs on the CPU.']
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=20)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--out', default='benchmarks/results/peer_mask_encoders.md')
    args = parser.parse_args()
    torch.set_num_threads(1)
    found, missing = encoders()
    load_before = os.getloadavg()[0]
    measured, counts = {}, {}
    for size, (height, width) in SIZES.items():
        masks = predicted_masks(args.images, height, width)
        counts[size] = sum(len(m) for m in masks)
        measured[size] = measure(masks, found, args.rounds)
    write_report(Path(args.out), report(measured, missing, args, counts,
                                        (load_before, os.getloadavg()[0])))


if __name__ == '__main__':
    main()
