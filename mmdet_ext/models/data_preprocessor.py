"""``FastDetDataPreprocessor``: mmdet's ``DetDataPreprocessor`` for ``fast_collate`` batches."""
import logging
from typing import Optional

import torch
import torch.nn.functional as F
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmdet.models.utils.misc import samplelist_boxtype2tensor
from mmengine.logging import print_log

from .._compat import preprocessor_normalizes, preprocessor_swaps_channels
from ..ops import (decode_encoded_batch, deferred_pixels_device, gpu_decodes_on, has_kernel,
                   normalize_batch, nvjpeg_problem, resize_normalize_batch)
from ..moved_settings import warn_once
from ..registry import MODELS
from ..rounding import padded_size
from ..transforms.fused_loading import PENDING_WARP_KEY


@MODELS.register_module()
class FastDetDataPreprocessor(DetDataPreprocessor):
    """Normalise a padded uint8 batch from ``fast_collate`` exactly as mmdet would the list.

    Same arguments as ``DetDataPreprocessor``; anything that is not a ``fast_collate`` batch (a
    list of images from ``pseudo_collate``, or what ``fast_collate`` hands on unchanged from
    ``pseudo_collate``) goes to ``DetDataPreprocessor`` unchanged. ``pad_size_divisor`` is set
    here only: the batch is cropped or padded to this divisor whatever ``fast_collate`` padded
    to, so the model sees mmdet's batch shape.

    Why a subclass: ``fast_collate`` pads uint8 images before normalisation, so with the stock
    preprocessor the padding would hold ``(pad_value - mean) / std`` instead of mmdet's
    ``pad_value``, and every image's ``pad_shape`` would be the batch's. Here the whole batch is
    converted and normalised in one op, then the padding is reset to ``pad_value`` and each image
    gets its own ``pad_shape`` -- the same tensors and metainfo the list path produces. That is one
    native pass (``normalize_batch``, on the CPU or, in a CUDA build, on the GPU) instead of
    mmdet's six per image.

    A deferred batch (``NativeLoadResizeFlip(pixels_on='device')``: decoded pixels in one flat
    buffer) is copied to the model's device as uint8 (``non_blocking`` when it is pinned) and
    resized, flipped, normalised and padded there in one op (``resize_normalize_batch``); on a
    device this build has no kernel for, the op runs on the CPU and the float batch is copied.
    Its output is float32, as mmdet's (``out_dtype`` is ignored with a warning once: no
    measurement showed a win for a float16 batch, which only a model under autocast can take).
    A deferred batch of encoded files (``decode_on='device'``) is decoded first, on that device:
    with nvJPEG on a GPU where it may (``ops/gpu_decode.py``), on the CPU otherwise (logged once).
    """

    def __init__(self, *args, out_dtype: Optional[str] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if out_dtype is not None:
            warn_once('out_dtype', 'FastDetDataPreprocessor: out_dtype is ignored: its inputs '
                      'are float32, as DetDataPreprocessor\'s (autocast casts them where a '
                      'model runs in lower precision)')
        self._said_cpu_decode = False

    def forward(self, data: dict, training: bool = False) -> dict:
        if data.get(PENDING_WARP_KEY) is not None:
            return self._forward_deferred(data, training)
        input_shapes: Optional[list] = data.get('input_shapes')
        if input_shapes is None or not isinstance(data['inputs'], torch.Tensor):
            return super().forward(data, training)
        data = self.cast_data(dict(inputs=data['inputs'], data_samples=data.get('data_samples')))
        inputs, data_samples = data['inputs'], data['data_samples']
        # The batch size is this preprocessor's to decide (pad_size_divisor, as mmdet's
        # stack_batch): whatever fast_collate padded to is cropped or padded to it.
        divisor = self.pad_size_divisor
        height = padded_size(max(h for h, _ in input_shapes), divisor)
        width = padded_size(max(w for _, w in input_shapes), divisor)
        inputs = inputs[:, :, :height, :width]
        reverse = preprocessor_swaps_channels(self) and inputs.shape[1] == 3
        if inputs.dtype == torch.uint8 and has_kernel('normalize_batch', inputs.device):
            inputs = self._normalize_natively(inputs.contiguous(), reverse, input_shapes)
        else:
            inputs = self._normalize_with_torch(inputs, reverse, input_shapes)
        pad_h, pad_w = height - inputs.shape[2], width - inputs.shape[3]
        if pad_h or pad_w:
            inputs = F.pad(inputs, (0, pad_w, 0, pad_h), 'constant', self.pad_value)
        pad_shapes = [(padded_size(h, divisor), padded_size(w, divisor)) for h, w in input_shapes]
        return self._finish(inputs, data_samples, pad_shapes, training)

    def _forward_deferred(self, data: dict, training: bool) -> dict:
        """A ``fast_collate`` batch of decoded images: everything in one op on the device."""
        warp = data[PENDING_WARP_KEY]
        data_samples = self.cast_data(data.get('data_samples'))
        flat: torch.Tensor = data['inputs']
        device = deferred_pixels_device(self.device)
        if warp.get('encoded_sizes') is not None:
            flat = self._decode(flat, warp, device, data_samples)
        else:
            flat = flat.to(device, non_blocking=flat.is_pinned())
        channels = int(warp['image_shapes'][0, 2]) if len(warp['image_shapes']) else 3
        reverse = preprocessor_swaps_channels(self) and channels == 3
        mean, std = self._mean_std(channels, device)
        inputs = resize_normalize_batch(
            flat, warp['image_shapes'], warp['out_shapes'], warp['flips'], mean, std, reverse,
            interpolation=warp['interpolation'], pad_size_divisor=self.pad_size_divisor,
            pad_value=self.pad_value).to(self.device)
        divisor = self.pad_size_divisor
        pad_shapes = [(padded_size(h, divisor), padded_size(w, divisor))
                      for h, w in data['input_shapes']]
        return self._finish(inputs, data_samples, pad_shapes, training)

    def _decode(self, encoded: torch.Tensor, warp: dict, device: torch.device,
                data_samples) -> torch.Tensor:
        """The batch's files decoded on ``device``, packed as decoded pixels are."""
        if not gpu_decodes_on(device) and not self._said_cpu_decode:
            self._said_cpu_decode = True
            why = nvjpeg_problem() if device.type == 'cuda' else f'the pixels go to {device}'
            print_log("FastDetDataPreprocessor: decode_on='device' batches are decoded on the CPU "
                      f'in the training process ({why}); logged once', logger='current',
                      level=logging.WARNING)
        shapes = [(int(c), int(h), int(w)) for h, w, c in warp['image_shapes'].tolist()]
        names = [sample.metainfo.get('img_path') for sample in data_samples] \
            if data_samples is not None else None
        return decode_encoded_batch(encoded.cpu(), warp['encoded_sizes'].tolist(), shapes,
                                    device, names)

    def _mean_std(self, channels: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """mean and std per output channel (0 and 1 when this preprocessor does not normalise)."""
        if preprocessor_normalizes(self):
            return (self.mean.view(-1).expand(channels).to(device),
                    self.std.view(-1).expand(channels).to(device))
        return (torch.zeros(channels, device=device), torch.ones(channels, device=device))

    def _normalize_natively(self, inputs: torch.Tensor, reverse: bool,
                            input_shapes: list) -> torch.Tensor:
        """One pass over the batch (``mmdet_ext::normalize_batch``)."""
        mean, std = self._mean_std(inputs.shape[1], inputs.device)
        sizes = torch.tensor(input_shapes, dtype=torch.int64).view(-1, 2)
        return normalize_batch(inputs, mean, std, reverse, sizes, self.pad_value)

    def _normalize_with_torch(self, inputs: torch.Tensor, reverse: bool,
                              input_shapes: list) -> torch.Tensor:
        """The same with torch ops (a float batch from ``to_float32`` pipelines, or a device this
        build has no kernel for)."""
        if reverse:
            inputs = inputs[:, [2, 1, 0], ...]
        inputs = inputs.float()
        if preprocessor_normalizes(self):
            inputs = (inputs - self.mean) / self.std
        for image, (height, width) in zip(inputs, input_shapes):
            image[:, height:, :] = self.pad_value
            image[:, :height, width:] = self.pad_value
        return inputs

    def _finish(self, inputs: torch.Tensor, data_samples, pad_shapes: list,
                training: bool) -> dict:
        """``DetDataPreprocessor.forward`` after its call to ``super().forward``."""
        if data_samples is not None:
            batch_input_shape = tuple(inputs[0].size()[-2:])
            for data_sample, pad_shape in zip(data_samples, pad_shapes):
                data_sample.set_metainfo({'batch_input_shape': batch_input_shape,
                                          'pad_shape': pad_shape})
            if self.boxtype2tensor:
                samplelist_boxtype2tensor(data_samples)
            if self.pad_mask and training:
                self.pad_gt_masks(data_samples)
            if self.pad_seg and training:
                self.pad_gt_sem_seg(data_samples)
        if training and self.batch_augments is not None:
            for batch_aug in self.batch_augments:
                inputs, data_samples = batch_aug(inputs, data_samples)
        return {'inputs': inputs, 'data_samples': data_samples}
