"""mmdet's own loading steps -- image, annotations, resize, crop, flip -- planned as one loader, so
that the batched fetch decodes, resizes, crops and flips their batches in one native call.

Why: a config adopted from mmdet (``adopt.py``) keeps mmdet's train pipeline:
``NativeLoadImageFromFile``, ``LoadLazyAnnotations``, ``Resize`` (or ``RandomResize``,
``RandomChoiceResize``: multi-scale training), ``RandomFlip``, ``PackDetInputs``; with large
scale jitter (LSJ), a ``RandomCrop`` and ``FilterAnnotations`` between the resize and the flip.
The batched fetch plans with a ``NativeLoadResizeFlip`` (``plan``/``finish``);
``fuse_mmdet_loading`` finds that sequence in a pipeline and makes it one (``mmdet_loading_plan``:
the one planner, a second front end) of the pipeline's own transform objects: their arguments,
their random draws in their order, mmdet's own annotation maths, their error messages. The
pixels are decoded at full size (the per-sample path does not reduce the decode) and resized
and flipped by ``warp_image``'s code, which gives mmcv's ``imresize`` + ``imflip`` bit for bit
(``EXACT_INTERPOLATIONS``), of the part the crop keeps (a view of the resized image: the crop
itself copies nothing): a batch is exactly what the per-sample path makes. The crop's draws,
box, mask and ignore-flag maths are ``RandomCrop``'s own, run on a stand-in image of the resized
shape.
"""
from typing import Optional, Sequence, Union

from mmcv.transforms import RandomChoiceResize, RandomResize
from mmdet.datasets.transforms import (FilterAnnotations, LoadAnnotations, RandomCrop,
                                       RandomFlip, Resize)

from .fused_loading import NativeLoadResizeFlip
from .lazy_annotations import LoadLazyAnnotations
from .loading import NativeLoadImageFromFile

# The interpolations whose native resize gives cv2.resize's bits (mmcv.imresize's). Not bicubic:
# the OpenCV the extension links (Debian's 4.6) rounds some bicubic pixels one off from the cv2
# wheel's 4.11 (tests/test_fused_loading.py::test_warp_image_op_equals_mmcv).
EXACT_INTERPOLATIONS = ('nearest', 'bilinear', 'area', 'lanczos')
# Exact types, not subclasses: a subclass may change what the step does to the image.
ANNOTATION_LOADERS = (LoadAnnotations, LoadLazyAnnotations)
RANDOM_RESIZES = (RandomResize, RandomChoiceResize)
ResizeStep = Union[Resize, RandomResize, RandomChoiceResize]


def mmdet_loading_plan(image_loader: NativeLoadImageFromFile,
                       annotation_loaders: Sequence[LoadAnnotations], resize_step: ResizeStep,
                       flip: Optional[RandomFlip], crop_steps: Sequence = ()
                       ) -> NativeLoadResizeFlip:
    """``NativeLoadImageFromFile``, annotation loaders, a resize step, optional crop steps (a
    ``RandomCrop``, then any ``FilterAnnotations``) and an optional ``RandomFlip``, planned as
    one ``NativeLoadResizeFlip`` (``plan`` and ``finish``).

    Its ``plan`` does what the steps do, in their order: read the file and its header (the image
    loader's keys and errors), load the annotations, draw the scale (a random resize step),
    resize the annotations, run the crop steps, draw the flip and flip the annotations;
    ``finish`` takes the pixels decoded at full size (no reduced decode: the per-sample path has
    none), resized, cropped and flipped as ``PendingDecode.warp`` says. Its resize, crop steps
    and flip are the steps' own objects.
    """
    loader = NativeLoadResizeFlip.from_transforms(
        _resize_of(resize_step), flip, color_type=image_loader.color_type,
        backend_args=image_loader.backend_args, ignore_empty=image_loader.ignore_empty,
        max_pixels=image_loader.max_pixels, reduced_decode=False)
    loader.read_as = 'NativeLoadImageFromFile'
    loader.annotation_loaders = list(annotation_loaders)
    loader.scale_step = resize_step if isinstance(resize_step, RANDOM_RESIZES) else None
    loader.crop_steps = list(crop_steps)
    return loader


def _resize_of(step: object) -> Optional[Resize]:
    """The mmdet ``Resize`` a resize step resizes with, or None for any other transform."""
    if type(step) is Resize:
        return step
    if type(step) in RANDOM_RESIZES and type(step.resize) is Resize:
        return step.resize
    return None


def fuse_mmdet_loading(transforms: Sequence
                       ) -> tuple[Optional[tuple[int, int, NativeLoadResizeFlip]], str]:
    """((start, end, loader), '') when ``transforms[start:end]`` is ``NativeLoadImageFromFile``,
    any annotation loaders, a ``Resize``/``RandomResize``/``RandomChoiceResize``, optionally a
    ``RandomCrop`` and any ``FilterAnnotations``, and an optional ``RandomFlip``, that
    ``mmdet_loading_plan`` makes exactly; else (None, why not). Exact types: a subclass may
    change what the step does to the image."""
    starts = [i for i, t in enumerate(transforms) if type(t) is NativeLoadImageFromFile]
    if len(starts) != 1:
        return None, ('the pipeline has no NativeLoadResizeFlip or NativeLoadImageFromFile'
                      if not starts else 'the pipeline has more than one NativeLoadImageFromFile')
    start = starts[0]
    if any(type(t) in ANNOTATION_LOADERS for t in transforms[:start]):
        # Their masks would take the json's size, not the decoded image's.
        return None, 'annotations are loaded before NativeLoadImageFromFile'
    image_loader = transforms[start]
    if image_loader.to_float32:
        return None, 'NativeLoadImageFromFile has to_float32=True (the resize then works on floats)'
    end = start + 1
    while end < len(transforms) and type(transforms[end]) in ANNOTATION_LOADERS:
        end += 1
    annotation_loaders = transforms[start + 1:end]
    resize = _resize_of(transforms[end]) if end < len(transforms) else None
    if resize is None:
        found = type(transforms[end]).__name__ if end < len(transforms) else 'nothing'
        return None, (f'{found} follows NativeLoadImageFromFile and its annotation loaders (mmdet '
                      'Resize, RandomResize or RandomChoiceResize may)')
    if resize.backend != 'cv2' or resize.interpolation not in EXACT_INTERPOLATIONS:
        return None, (f'the resize has backend={resize.backend!r}, '
                      f'interpolation={resize.interpolation!r} (cv2 with one of '
                      f'{", ".join(EXACT_INTERPOLATIONS)} is batched exactly)')
    resize_step = transforms[end]
    end += 1
    crop_steps = []
    if end < len(transforms) and type(transforms[end]) is RandomCrop:
        crop_steps.append(transforms[end])
        end += 1
        while end < len(transforms) and type(transforms[end]) is FilterAnnotations:
            crop_steps.append(transforms[end])
            end += 1
    flip = None
    if end < len(transforms) and type(transforms[end]) is RandomFlip:
        flip = transforms[end]
        end += 1
    return (start, end, mmdet_loading_plan(image_loader, annotation_loaders, resize_step,
                                           flip, crop_steps)), ''
