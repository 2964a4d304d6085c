"""Load + Resize + RandomFlip as one transform: decode (reduced-size when the target allows it),
then resize and flip in one native call."""
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import mmcv
import numpy as np
import torch
from mmcv.transforms import BaseTransform
from mmdet.datasets.transforms import RandomFlip, Resize
from mmdet.structures.bbox import autocast_box_type

from .._compat import (choose_flip_direction, draw_resize_scale, record_homography,
                       resize_annotations, scale_size)
from ..io import DEFAULT_MAX_PIXELS, ImageHeader
from ..moved_settings import warn_once
from ..ops import FLIP_CODES, warp_image
from ..registry import TRANSFORMS
from ..rounding import JPEG_SCALE_DENOMS, reduced_size
from .box_geometry import (FLIP_DIRECTIONS, fast_boxes, flip_boxes, rescale_and_clip,
                           resizes_boxes_as_mmdet)
from .loading import ImageLoadError, decode_file_bytes, read_image_bytes

# Where the pixels are finished, the one knob: None, decoded, resized and flipped here (in the
# DataLoader worker); 'resize', decoded here, resized and flipped by the data preprocessor on the
# model's device (resize_normalize_batch, these interpolations bit for bit); 'decode', decoded
# there too (nvJPEG on a GPU, ops/gpu_decode.py): the sample carries the file's bytes.
DEFER = (None, 'resize', 'decode')
DEVICE_INTERPOLATIONS = ('bilinear', 'nearest')
# The spellings before `defer` (still accepted, with a warning once per process):
# (pixels_on, decode_on) -> defer.
_OLD_SPELLINGS = {('worker', 'worker'): None, ('device', 'worker'): 'resize',
                  ('device', 'device'): 'decode'}
_ZERO_BYTE = np.zeros(1, np.uint8)
# The record of what remains to be done to a deferred image; PackDetInputs must carry it.
PENDING_WARP_KEY = 'pending_warp'
# In that record, with decode_on='device': the (h, w, c) the sample's bytes decode to.
DECODED_SHAPE_KEY = 'decoded_shape'
# PackDetInputs' default meta_keys plus that record.
DEFERRED_META_KEYS = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor', 'flip',
                      'flip_direction', PENDING_WARP_KEY)

# Channels a planned decode produces, per color_type ('unchanged': only the decoder knows).
PLANNED_CHANNELS = {'color': 3, 'color_ignore_orientation': 3, 'grayscale': 1,
                    'grayscale_ignore_orientation': 1}


class PixelStage(NamedTuple):
    """How far a sample's pixels get in the DataLoader worker, read from ``defer`` once
    (``STAGES``): resized and flipped there (``warped``, ``defer=None``), decoded only (the
    sample then carries its ``pending_warp`` record: ``'resize'``), or not even decoded (the
    file's bytes: ``encoded``, ``'decode'``). The loader's plan and ``finish`` and the batch
    engine's layout (warped images in the slots of a padded batch, anything else one after
    another in one flat buffer) all follow from it; nothing else reads ``defer``."""
    name: str
    warped: bool
    encoded: bool


STAGES = {None: PixelStage('warped', True, False), 'resize': PixelStage('decoded', False, False),
          'decode': PixelStage('encoded', False, True)}


class Warp(NamedTuple):
    """The resize and flip one decoded image takes: to (out_h, out_w) with ``interpolation``,
    of which the part ``keep`` is kept (y, x, h, w: mmdet's ``RandomCrop`` planned between the
    resize and the flip; None: all of it), then flipped (``flip``: mmdet's direction, or None).
    The one record of them in Python: the batched fetch's decode takes it
    (``PendingDecode.warp``), a deferred sample carries it as ``record()`` (its ``pending_warp``
    metainfo; never with a crop, which is planned only where the pixels are finished in the
    worker), and ``fast_collate`` makes the batch's tensors from those."""
    out_h: int
    out_w: int
    flip: Optional[str]
    interpolation: str
    keep: Optional[tuple[int, int, int, int]] = None

    @property
    def shape(self) -> tuple[int, int]:
        """The (h, w) of the image it makes: the part kept."""
        return (self.out_h, self.out_w) if self.keep is None else self.keep[2:]

    def record(self) -> dict:
        """The ``pending_warp`` metainfo of a deferred sample (picklable, mmengine's types)."""
        if self.keep is not None:  # the device's resize has no crop: never silently drop it
            raise ValueError('a warp with a crop cannot be deferred to the model\'s device')
        return {'out_shape': (self.out_h, self.out_w), 'flip_direction': self.flip,
                'interpolation': self.interpolation}

    def submitted(self) -> list[int]:
        """``DecodeQueue.submit``'s ``warp``: (out_h, out_w, flip code[, y, x, h, w])."""
        return [self.out_h, self.out_w, FLIP_CODES[self.flip], *(self.keep or ())]

    def apply(self, image: torch.Tensor) -> torch.Tensor:
        """``image`` (HxWxC uint8) resized, cropped and flipped: CxHxW (``warp_image``)."""
        return warp_image(image, (self.out_h, self.out_w), self.interpolation, self.flip,
                          self.keep)


class PendingDecode(NamedTuple):
    """An image ``NativeLoadResizeFlip.plan`` left to decode: its bytes (None when ``plan``
    decoded it itself, into ``decoded``), the JPEG reduction, the (C, H, W) it decodes to and,
    resized in the worker (``defer=None``), the ``Warp`` that follows."""
    filename: str
    encoded: Optional[torch.Tensor]
    scale_denom: int
    shape: tuple[int, int, int]
    decoded: Optional[torch.Tensor] = None
    warp: Optional[Warp] = None

    @property
    def out_shape(self) -> tuple[int, int, int]:
        """The (C, H, W) ``finish`` takes: as decoded, or after the warp."""
        return self.shape if self.warp is None else (self.shape[0], *self.warp.shape)


def stand_in_image(height: int, width: int) -> np.ndarray:
    """A read-only uint8 array of ``height`` x ``width`` zeros that takes no memory (zero
    strides): ``img`` of a sample whose pixels come later, for code that reads only its shape.
    Made directly, not with ``np.broadcast_to`` (15 us of argument checks per sample)."""
    image = np.ndarray((height, width), np.uint8, _ZERO_BYTE, strides=(0, 0))
    image.flags.writeable = False
    return image


def resize_target(resize: Resize, width: int, height: int) -> tuple[tuple, tuple[int, int]]:
    """``results['scale']`` and the output (w, h) of mmdet's ``resize`` for an image of
    ``width`` x ``height``, computed as it computes them (``mmcv.imrescale``'s size)."""
    scale = resize.scale or scale_size((width, height), resize.scale_factor)
    if resize.keep_ratio:
        return scale, mmcv.rescale_size((width, height), scale)
    return scale, tuple(scale)


def crop_on_stand_in(crop: Any, filters: Sequence, results: dict,
                     owner: str) -> Optional[tuple[int, int, int, int]]:
    """Run mmdet's own ``crop`` (a ``RandomCrop``), then ``filters`` (``FilterAnnotations``), on
    ``results``, whose ``img`` is a stand-in of the resized image's shape: their random draws,
    annotation maths and keys are theirs. Returns the part of the resized image the crop keeps,
    (y, x, h, w), or None where a step returned None. The crop's offset is read from the
    homography matrix it records (a translation by (-x, -y)), which is then composed as it
    composes it. ``owner`` names the caller in the error a crop of another kind raises."""
    before = results.get('homography_matrix', None)
    results['homography_matrix'] = None
    if crop(results) is None:
        return None
    moved = results['homography_matrix']
    if not (moved[:2, :2] == np.eye(2)).all():
        raise RuntimeError(f'{owner}: {type(crop).__name__} recorded {moved.tolist()}, not a '
                           'translation')
    results['homography_matrix'] = moved if before is None else moved @ before
    height, width = results['img'].shape[:2]
    keep = (int(-moved[1, 2]), int(-moved[0, 2]), height, width)
    for step in filters:
        if step(results) is None:
            return None
    return keep


def plannable(header: Optional[ImageHeader], color_type: str, results: dict) -> bool:
    """Whether the decoded size of an image can be told before decoding it: its format has a
    header reader, ``color_type`` says the channel count, and ``results`` declare no other size
    than the header's."""
    return header is not None and color_type in PLANNED_CHANNELS and \
        not _declared_size_differs(header, results)


def read_for_plan(loader: Any, owner: str, results: dict,
                  decode: Optional[Callable[[torch.Tensor, Optional[ImageHeader]], Any]] = None,
                  decode_now: bool = False) -> Optional[tuple[torch.Tensor, Optional[ImageHeader],
                                                              Any]]:
    """Read ``results['img_path']`` and its header, and decode it now (``decode(bytes,
    header)``; default: at full size, HxWxC) where the header does not tell its decoded size
    (``plannable``) or ``decode_now``: (bytes, header, what ``decode`` returned, or None). The
    one place a planning loader reads its file. ``loader``: the transform whose
    ``backend_args``, ``max_pixels``, ``color_type`` and ``ignore_empty`` apply (None returned
    where it skips the file); errors keep their type, their message prefixed with ``owner``."""
    filename = results['img_path']
    try:
        encoded, header = read_image_bytes(filename, loader.backend_args, loader.max_pixels)
        if not decode_now and plannable(header, loader.color_type, results):
            decoded = None
        elif decode is None:
            decoded = decode_file_bytes(encoded, filename, loader.color_type,
                                        max_pixels=loader.max_pixels)
        else:
            decoded = decode(encoded, header)
    except ImageLoadError as err:
        if loader.ignore_empty:
            return None
        raise type(err)(f'{owner}: {err}') from err  # keeps the subclass
    return encoded, header, decoded


def _declared_size_differs(header: ImageHeader, results: dict) -> bool:
    """Whether the masks or the annotation file declare another size than the header's.

    Why: an EXIF orientation that swaps width and height (photos straight from a phone) makes
    the decoded image the declared size and the header's the other way round; ``plan`` cannot
    take its target from the header then, and decodes the image itself, as ``transform`` does.
    """
    masks = results.get('gt_masks', None)
    declared = (masks.height, masks.width) if masks is not None else (results.get('height'),
                                                                      results.get('width'))
    return None not in declared and tuple(declared) != (header.height, header.width)


@TRANSFORMS.register_module()
class NativeLoadResizeFlip(BaseTransform):
    """``NativeLoadImageFromFile`` + mmdet's ``Resize`` + ``RandomFlip`` in one transform.

    Takes the arguments of the three (``scale``, ``scale_factor``, ``keep_ratio``,
    ``clip_object_border``, ``interpolation``; ``prob``, ``direction``; ``color_type``,
    ``to_float32``, ``backend_args``, ``ignore_empty``, ``max_pixels``) and writes the same
    result keys: ``img``, ``img_shape``, ``ori_shape``, ``scale``, ``scale_factor``,
    ``keep_ratio``, ``flip``, ``flip_direction``, ``homography_matrix``. Boxes, masks (lazy
    ones stay lazy) and segmentation maps already in ``results`` are resized and flipped by
    mmdet's own code, so place it *after* ``LoadLazyAnnotations``. ``prob=None`` means no flip
    (a test pipeline). The flip direction is drawn exactly as ``RandomFlip`` draws it.

    Why faster: the image is decoded once in C++ and resized, flipped and laid out channel-planar
    in one more native call (``img`` is an HxWxC view of CxHxW memory, so ``PackDetInputs`` does
    not copy it). With ``reduced_decode`` (default on), a JPEG larger than twice the target is
    decoded by libjpeg at 1/2, 1/4 or 1/8 size -- never smaller than the target -- and resized
    from there; the result differs from a full-size decode + ``cv2.resize`` only by the low-pass
    libjpeg's scaled IDCT applies (``benchmarks/results/pipeline.md`` has the measured difference).
    Only 8-bit images (``to_float32`` converts at the end) and the cv2 backend are supported.

    ``defer`` says where the pixels are finished (docs/deferred_pixels.md): None (the default)
    here, in the DataLoader worker. ``defer='resize'``: ``img`` stays as decoded (uint8, BGR,
    the reduced-size decode still applies; an HxWxC view of channel-planar memory, so
    ``PackDetInputs`` copies nothing) and every other key is what the default writes
    (``img_shape``, ``scale_factor``, ``flip``, boxes, masks, homography: the final geometry).
    ``results['pending_warp']`` records what remains, ``{'out_shape': (h, w),
    'flip_direction': ..., 'interpolation': ...}``, which ``PackDetInputs`` must carry in its
    ``meta_keys`` (``LazyCocoDataset`` adds it; elsewhere list ``DEFERRED_META_KEYS``) so that
    ``fast_collate`` packs the batch for ``FastDetDataPreprocessor``, which resizes, flips,
    normalises and pads it in one op on the model's device. Nothing may touch ``img`` in
    between; bilinear and nearest only, no ``to_float32``. ``defer='decode'``
    (``color_type='color'``) leaves the decode to the training process too: ``img`` is then the
    file's bytes (a 1xN uint8 array, so ``inputs`` is Tensor[1, 1, N]) and
    ``pending_warp['decoded_shape']`` the (h, w, 3) they decode to (from the header; a file
    whose header does not tell is decoded here to learn it).
    ``FastDetDataPreprocessor`` decodes the batch on the GPU with nvJPEG where it may
    (``ops/gpu_decode.py``), else on the CPU. No reduced-size decode: full size, as mmdet. The
    spellings before ``defer`` -- ``pixels_on='device'`` for ``'resize'``, with
    ``decode_on='device'`` for ``'decode'`` -- keep working, with a warning once per process.
    """

    def __init__(self, scale: Optional[Union[int, tuple[int, int]]] = None,
                 scale_factor: Optional[Union[float, tuple[float, float]]] = None,
                 keep_ratio: bool = False, clip_object_border: bool = True,
                 interpolation: str = 'bilinear',
                 prob: Optional[Union[float, list[float]]] = None,
                 direction: Union[str, list[str]] = 'horizontal',
                 color_type: str = 'color', to_float32: bool = False,
                 backend_args: Optional[dict] = None, ignore_empty: bool = False,
                 max_pixels: int = DEFAULT_MAX_PIXELS, reduced_decode: bool = True,
                 defer: Optional[str] = None, pixels_on: Optional[str] = None,
                 decode_on: Optional[str] = None) -> None:
        if pixels_on is not None or decode_on is not None:
            defer = _defer_from_old_spelling(defer, pixels_on, decode_on)
        if defer not in DEFER:
            raise ValueError(f'NativeLoadResizeFlip: defer must be one of {DEFER}, got {defer!r}')
        if defer == 'decode' and color_type != 'color':
            raise ValueError("NativeLoadResizeFlip: defer='decode' needs color_type='color', got "
                             f'color_type={color_type!r}')
        if defer is not None and (to_float32 or interpolation not in DEVICE_INTERPOLATIONS):
            raise ValueError(
                f'NativeLoadResizeFlip: defer={defer!r} needs uint8 images (to_float32=False) '
                f'and an interpolation in {DEVICE_INTERPOLATIONS}, got to_float32={to_float32}, '
                f'interpolation={interpolation!r}')
        # mmdet's own transforms hold the arguments, validate them and do the annotation maths.
        self.resize = Resize(scale=scale, scale_factor=scale_factor, keep_ratio=keep_ratio,
                             clip_object_border=clip_object_border, interpolation=interpolation)
        self.flip = None if prob is None else RandomFlip(prob=prob, direction=direction)
        self.color_type = color_type
        self.to_float32 = to_float32
        self.backend_args = None if backend_args is None else backend_args.copy()
        self.ignore_empty = ignore_empty
        self.max_pixels = max_pixels
        self.reduced_decode = reduced_decode
        self.defer = defer
        # Set only where it plans mmdet's own loading steps (fused_mmdet_loading.py): the image
        # loader whose read it stands for (its name in errors), the annotation loaders between
        # the read and the resize, a random resize step whose scale is drawn before it, and the
        # steps between the resize and the flip (a RandomCrop, then FilterAnnotations).
        self.read_as = 'NativeLoadResizeFlip'
        self.annotation_loaders: list = []
        self.scale_step: Optional[BaseTransform] = None
        self.crop_steps: list = []

    @property
    def stage(self) -> PixelStage:
        """What ``defer`` makes of each image (the one reading of it)."""
        return STAGES[self.defer]

    # `defer` in the spellings before it, read back as they were written.
    @property
    def pixels_on(self) -> str:
        """'device' where the resize and flip are left to the model's device, else 'worker'."""
        return 'worker' if self.stage.warped else 'device'

    @property
    def decode_on(self) -> str:
        """'device' where the decode is left to the model's device too, else 'worker'."""
        return 'device' if self.stage.encoded else 'worker'

    @classmethod
    def from_transforms(cls, resize: Resize, flip: Optional[RandomFlip],
                        **loader_args) -> 'NativeLoadResizeFlip':
        """A loader whose resize and flip are these mmdet transform objects themselves, not
        copies: a ``RandomResize`` sets its ``Resize``'s scale before each sample
        (``scale_step``), and the loader resizes to it. ``loader_args``: the other arguments
        (``color_type``, ...)."""
        loader = cls(scale=0, interpolation=resize.interpolation, **loader_args)
        loader.resize = resize
        loader.flip = flip
        return loader

    def _target_size(self, width: int, height: int) -> tuple[tuple, tuple[int, int]]:
        return resize_target(self.resize, width, height)

    def _scale_denom(self, header: Optional[ImageHeader], out_w: int, out_h: int) -> int:
        """The largest JPEG reduction whose output still covers the target size."""
        if not self.reduced_decode or header is None or header.format != 'jpeg':
            return 1
        for denom in reversed(JPEG_SCALE_DENOMS):  # the largest first
            height, width = reduced_size(header.height, header.width, denom)
            if height >= out_h and width >= out_w:
                return denom
        return 1  # an enlarging target: full size

    @autocast_box_type()
    def transform(self, results: dict) -> Optional[dict]:
        """``plan`` with the image decoded now, then ``finish``: one sample is a batch of one,
        the same code and the same bytes."""
        pending = self._plan(results, decode_now=True)
        return None if pending is None else self.finish(results, pending.decoded)

    @autocast_box_type()
    def plan(self, results: dict) -> Optional[PendingDecode]:
        """Everything ``transform`` does but decoding (and, with ``pixels_on='worker'``, the
        resize and flip of the pixels).

        Reads the file and its header, draws the flip and writes every key ``transform`` writes,
        ``img`` excepted; returns what remains to do, or None where ``transform`` would return
        None. ``finish(results, image)`` with the image decoded (and warped, as the returned
        ``warp`` says) then leaves ``results`` exactly as ``transform`` would. Why: the batched
        fetch (``datasets/batched_fetch.py``) decodes a whole batch in one native call between
        the two. A file whose size the header does not tell (no header reader for its format, or
        a ``color_type`` whose channel count only the decoder knows) is decoded here, as
        ``transform`` decodes it.
        """
        return self._plan(results, decode_now=False)

    def _plan(self, results: dict, decode_now: bool) -> Optional[PendingDecode]:
        """``plan``; ``decode_now``: decode the image here whatever the header says (then
        ``PendingDecode.decoded`` holds it, warped as ``finish`` takes it)."""
        filename = results['img_path']
        if self.stage.encoded:
            return self._plan_encoded(results)
        read = read_for_plan(self, self.read_as, results,
                             lambda encoded, header: self._decode(encoded, header, filename),
                             decode_now)
        if read is None:
            return None
        encoded, header, decoded = read
        image = None
        if decoded is not None:
            image, size = decoded
            encoded = None
        else:
            size = (header.width, header.height)
        drawn = self._steps_before_resize(results, size)
        if drawn is None:
            return None
        scale, out_size = self._target_size(*size)
        if image is not None:
            denom, shape = 1, (image.shape[2], *image.shape[:2])
        else:
            denom = self._scale_denom(header, *out_size)
            shape = (PLANNED_CHANNELS[self.color_type],
                     *reduced_size(header.height, header.width, denom))
        warp = self._apply(results, size, scale, out_size)
        if warp is None:
            return None
        results.update(drawn)
        if not self.stage.warped:
            return PendingDecode(filename, encoded, denom, shape,
                                 None if image is None else image.permute(2, 0, 1))
        decoded = None if image is None else warp.apply(image)
        return PendingDecode(filename, encoded, denom, shape, decoded, warp)

    def _plan_encoded(self, results: dict) -> Optional[PendingDecode]:
        """``plan`` with ``decode_on='device'``: every result key but ``img``, with the (h, w, 3)
        the file decodes to in ``pending_warp['decoded_shape']`` (from the header where it
        tells, ``plannable``, else from a decode); the file's bytes are the 'image' (1, 1, N)
        that goes into the batch's buffer."""
        filename = results['img_path']
        read = read_for_plan(self, 'NativeLoadResizeFlip', results)
        if read is None:
            return None
        encoded, header, image = read
        size = (header.width, header.height) if image is None else (image.shape[1],
                                                                    image.shape[0])
        self._apply(results, size, *self._target_size(*size))
        width, height = size
        results[PENDING_WARP_KEY][DECODED_SHAPE_KEY] = (height, width, 3)
        shape = (1, 1, encoded.numel())
        return PendingDecode(filename, None, 1, shape, encoded.view(shape))

    def _steps_before_resize(self, results: dict, size: tuple[int, int]) -> Optional[dict]:
        """Where this plans mmdet's own steps: what the image loader writes (``img`` a stand-in:
        nothing before the resize reads its pixels), then the annotation loaders, then the scale
        draw, in their order. Returns what the draw writes after the resize (``scale_idx`` of
        a ``RandomChoiceResize``), or None where an annotation loader returned None."""
        if not self.annotation_loaders and self.scale_step is None:
            return {}
        width, height = size
        results['img'] = stand_in_image(height, width)
        results['img_shape'] = results['ori_shape'] = (height, width)
        for transform in self.annotation_loaders:
            if transform(results) is None:
                return None
        scale_idx = None if self.scale_step is None else draw_resize_scale(self.scale_step)
        return {} if scale_idx is None else {'scale_idx': scale_idx}

    def finish(self, results: dict, image: torch.Tensor) -> dict:
        """``results`` of ``plan`` with its image (Tensor[C, H, W] uint8 of the shape ``plan``
        said, ``PendingDecode.out_shape``): as ``transform`` leaves them."""
        if self.stage.encoded:
            results['img'] = image[0].numpy()  # the bytes, 1xN
        elif not self.stage.warped:
            self._set_deferred_image(results, image.numpy().transpose(1, 2, 0))
        else:
            self._set_warped_image(results, image.numpy())
        return results

    def _apply(self, results: dict, size: tuple[int, int], scale: tuple,
               out_size: tuple[int, int]) -> Optional[Warp]:
        """Write every result key but the pixels (``finish`` puts them in) for an image of
        ``size`` (w, h) resized to ``out_size``; returns the image's warp, or None where a step
        between the resize and the flip returned None."""
        width, height = size
        out_w, out_h = out_size
        filename = results['img_path']
        masks = results.get('gt_masks', None)
        if masks is not None and (masks.height, masks.width) != (height, width):
            raise ImageLoadError(
                f'NativeLoadResizeFlip: {filename} is {width}x{height} but its masks are '
                f'{masks.width}x{masks.height} (the annotation file declares another image size; '
                'tools/validate_coco.py lists such images)')
        results['img'] = stand_in_image(out_h, out_w)  # the flip code reads img's shape
        results['ori_shape'] = (height, width)
        results['img_shape'] = (out_h, out_w)
        results['scale'] = scale
        results['scale_factor'] = (out_w / width, out_h / height)
        results['keep_ratio'] = self.resize.keep_ratio
        self._resize_annotations(results)
        record_homography(self.resize, results)
        keep = None
        if self.crop_steps:
            keep = self._crop(results)
            if keep is None:
                return None
        direction = choose_flip_direction(self.flip) if self.flip is not None else None
        warp = Warp(out_h, out_w, direction, self.resize.interpolation, keep)
        if self.flip is not None:
            results['flip'] = direction is not None
            results['flip_direction'] = direction
        if direction is not None:
            self._flip_annotations(results, direction)
        if not self.stage.warped:
            results[PENDING_WARP_KEY] = warp.record()
        return warp

    def _crop(self, results: dict) -> Optional[tuple[int, int, int, int]]:
        """``crop_on_stand_in`` of the steps between the resize and the flip (``crop_steps``:
        mmdet's own ``RandomCrop``, then ``FilterAnnotations``)."""
        crop, *filters = self.crop_steps
        return crop_on_stand_in(crop, filters, results, type(self).__name__)

    def _set_warped_image(self, results: dict, planar: np.ndarray) -> None:
        """``img`` of a sample resized here, from its CxHxW pixels: an HWC view of them. Why:
        mmdet's transforms see the usual HxWxC array, and PackDetInputs' transpose back to CHW
        is already contiguous: it copies nothing."""
        img = planar[0] if planar.shape[0] == 1 else planar.transpose(1, 2, 0)
        results['img'] = img.astype(np.float32) if self.to_float32 else img

    @staticmethod
    def _set_deferred_image(results: dict, decoded: np.ndarray) -> None:
        """``img`` of a deferred sample: the decoded HxWxC pixels (HxW for one channel)."""
        results['img'] = decoded[..., 0] if decoded.shape[2] == 1 else decoded

    def _decode(self, encoded: torch.Tensor, header: Optional[ImageHeader], filename: str
                ) -> tuple[torch.Tensor, tuple[int, int]]:
        """(image, original (w, h)), reduced when allowed.

        The reduction follows the target the header's size implies; if the decoded image is not
        the size that implies -- EXIF orientation swapped width and height -- decode again at
        full size, so the result is always mmdet's.
        """
        # Deferred pixels go from here to PackDetInputs untouched: decoded channel-planar, the
        # HWC view it receives is already laid out as the CHW tensor it makes, so it copies nothing.
        planar = not self.stage.warped
        if header is not None:
            denom = self._scale_denom(header, *self._target_size(header.width, header.height)[1])
            image = decode_file_bytes(encoded, filename, self.color_type, denom, self.max_pixels,
                                      planar)
            if tuple(image.shape[:2]) == reduced_size(header.height, header.width, denom):
                return image, (header.width, header.height)
            if denom == 1:
                return image, (image.shape[1], image.shape[0])
        image = decode_file_bytes(encoded, filename, self.color_type, max_pixels=self.max_pixels,
                                  planar=planar)
        return image, (image.shape[1], image.shape[0])

    def _resize_annotations(self, results: dict) -> None:
        """What ``Resize`` does to the annotations; boxes in numpy where that is exact."""
        boxes = results.get('gt_bboxes', None)
        in_numpy = fast_boxes(boxes) and resizes_boxes_as_mmdet(self.resize)
        if in_numpy:
            clip_to = results['img_shape'] if self.resize.clip_object_border else None
            rescale_and_clip(boxes, results['scale_factor'], clip_to)
        resize_annotations(self.resize, results, boxes=not in_numpy)

    def _flip_annotations(self, results: dict, direction: str) -> None:
        """What ``RandomFlip._flip`` does after flipping the image (flipped natively here)."""
        img_shape = results['img'].shape[:2]
        boxes = results.get('gt_bboxes', None)
        if fast_boxes(boxes) and direction in FLIP_DIRECTIONS:
            flip_boxes(boxes, img_shape, direction)  # flip_'s arithmetic, in numpy
        elif boxes is not None:
            boxes.flip_(img_shape, direction)
        if results.get('gt_masks', None) is not None:
            results['gt_masks'] = results['gt_masks'].flip(direction)
        if results.get('gt_seg_map', None) is not None:
            results['gt_seg_map'] = mmcv.imflip(results['gt_seg_map'], direction=direction)
        record_homography(self.flip, results)

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(resize={self.resize!r}, flip={self.flip!r}, '
                f'color_type={self.color_type!r}, reduced_decode={self.reduced_decode}, '
                f'defer={self.defer!r})')


def _defer_from_old_spelling(defer: Optional[str], pixels_on: Optional[str],
                             decode_on: Optional[str]) -> Optional[str]:
    """``defer`` for the spellings before it (``pixels_on``, ``decode_on``), warned about once
    per process; refused where they say something ``defer`` cannot, or contradict it."""
    spelled = (pixels_on or 'worker', decode_on or 'worker')
    if spelled not in _OLD_SPELLINGS:
        raise ValueError(f'NativeLoadResizeFlip: pixels_on={pixels_on!r}, decode_on='
                         f"{decode_on!r} is not a setting (decode_on='device' needs "
                         "pixels_on='device'); use defer=None, 'resize' or 'decode'")
    meant = _OLD_SPELLINGS[spelled]
    if defer is not None and defer != meant:
        raise ValueError(f'NativeLoadResizeFlip: defer={defer!r} contradicts pixels_on='
                         f'{pixels_on!r}, decode_on={decode_on!r} (defer={meant!r}); set defer '
                         'alone')
    warn_once('NativeLoadResizeFlip.pixels_on', f'NativeLoadResizeFlip: pixels_on={pixels_on!r}, '
              f'decode_on={decode_on!r} is spelled defer={meant!r} now (the old spelling keeps '
              'working)')
    return meant
