"""``FastDetDataPreprocessor``: mmdet's ``DetDataPreprocessor`` for ``fast_collate`` batches."""
from typing import Optional

import torch
import torch.nn.functional as F
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmdet.models.utils.misc import samplelist_boxtype2tensor

from .._compat import preprocessor_normalizes, preprocessor_swaps_channels
from ..ops import has_kernel, normalize_batch
from ..registry import MODELS
from ..rounding import padded_size


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
    """

    def forward(self, data: dict, training: bool = False) -> dict:
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

    def _normalize_natively(self, inputs: torch.Tensor, reverse: bool,
                            input_shapes: list) -> torch.Tensor:
        """One pass over the batch (``mmdet_ext::normalize_batch``)."""
        channels = inputs.shape[1]
        if preprocessor_normalizes(self):
            mean, std = self.mean.view(-1).expand(channels), self.std.view(-1).expand(channels)
        else:
            mean, std = inputs.new_zeros(channels, dtype=torch.float), \
                inputs.new_ones(channels, dtype=torch.float)
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
