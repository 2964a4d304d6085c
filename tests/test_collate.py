"""fast_collate and FastDetDataPreprocessor against mmengine's pseudo_collate + mmdet's
DetDataPreprocessor; never mutating the samples it gets (a collate function that converts the
dataset's own annotation dicts in place corrupts every later epoch)."""
import copy

import numpy as np
import pytest
import torch
from mmdet.datasets.transforms import PackDetInputs
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmengine.dataset import pseudo_collate
from mmengine.model.utils import stack_batch
from torch.utils.data import DataLoader

from helpers.build import needs_native_decoding
from helpers.torch_features import requires_opcheck
from mmdet_ext import (FastDetDataPreprocessor, LazyCocoDataset, LoadLazyAnnotations,
                       NativeLoadResizeFlip, fast_collate, ops)

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
# Odd output sizes so images in a batch differ and padding is visible.
PIPELINE = [
    LoadLazyAnnotations(with_bbox=True, with_mask=True),
    NativeLoadResizeFlip(scale=(301, 211), keep_ratio=True),
    PackDetInputs(),
]
PREPROCESSOR = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                    bgr_to_rgb=True, pad_size_divisor=32, pad_mask=True)


def _dataset(root, pipeline=PIPELINE) -> LazyCocoDataset:
    return LazyCocoDataset(data_root=str(root), ann_file='annotations/instances_train.json',
                           data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                           pipeline=pipeline)


def _mixed_size_batch(dataset) -> list[dict]:
    """Four samples whose images differ in size: the toy set's landscape, portrait, square and
    wide images."""
    batch = [dataset[i] for i in range(4)]
    assert len({tuple(sample['inputs'].shape) for sample in batch}) == 4
    return batch


@needs_native_decoding
def test_pads_like_stack_batch_and_keeps_every_other_key(toy_coco_root):
    batch = _mixed_size_batch(_dataset(toy_coco_root))
    out = fast_collate(batch)
    expected = stack_batch([s['inputs'] for s in batch])  # to the largest image, zeros
    assert out['inputs'].dtype == torch.uint8
    assert torch.equal(out['inputs'], expected)
    assert out['input_shapes'] == [tuple(s['inputs'].shape[1:]) for s in batch]
    assert [id(s) for s in out['data_samples']] == [id(s['data_samples']) for s in batch]


@needs_native_decoding
def test_never_mutates_the_samples_it_receives(toy_coco_root):
    batch = _mixed_size_batch(_dataset(toy_coco_root))
    snapshot = [(sample['inputs'].clone(), copy.deepcopy(sample['data_samples']))
                for sample in batch]
    keys = [sorted(sample) for sample in batch]
    out = fast_collate(batch)
    # The caller then does what a preprocessor or an in-place collate function does: write into
    # the batch, mutate the containers, modify the data samples' own tensors.
    out['inputs'].zero_()
    out['data_samples'].clear()
    assert len(batch) == 4 and [sorted(sample) for sample in batch] == keys
    for sample, (inputs, data_sample) in zip(batch, snapshot):
        assert torch.equal(sample['inputs'], inputs)
        assert torch.equal(sample['data_samples'].gt_instances.bboxes.tensor,
                           data_sample.gt_instances.bboxes.tensor)


@needs_native_decoding
def test_batches_without_the_fast_path_are_collated_as_pseudo_collate_does(toy_coco_root):
    batch = _mixed_size_batch(_dataset(toy_coco_root))
    batch[2]['inputs'] = batch[2]['inputs'][:1]  # one batch, two channel counts
    out = fast_collate(batch)
    assert 'input_shapes' not in out and isinstance(out['inputs'], list)
    for ours, reference in zip(out['inputs'], pseudo_collate(batch)['inputs']):
        assert torch.equal(ours, reference)
    with pytest.raises(ValueError, match='empty'):
        fast_collate([])


@needs_native_decoding
def test_preprocessor_output_equals_mmdet(toy_coco_root):
    """Same images, metainfo and padded masks as pseudo_collate + DetDataPreprocessor."""
    dataset = _dataset(toy_coco_root)
    ours = FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(_mixed_size_batch(dataset)),
                                                   training=True)
    reference = DetDataPreprocessor(**PREPROCESSOR)(pseudo_collate(_mixed_size_batch(dataset)),
                                                    training=True)
    assert torch.equal(ours['inputs'], reference['inputs'])
    for mine, theirs in zip(ours['data_samples'], reference['data_samples']):
        assert mine.batch_input_shape == theirs.batch_input_shape
        assert mine.pad_shape == theirs.pad_shape
        np.testing.assert_array_equal(mine.gt_instances.masks.to_ndarray(),
                                      theirs.gt_instances.masks.to_ndarray())
        assert torch.equal(mine.gt_instances.bboxes, theirs.gt_instances.bboxes)


@needs_native_decoding
def test_preprocessor_passes_lists_to_mmdet(toy_coco_root):
    dataset = _dataset(toy_coco_root)
    ours = FastDetDataPreprocessor(**PREPROCESSOR)(pseudo_collate(_mixed_size_batch(dataset)))
    reference = DetDataPreprocessor(**PREPROCESSOR)(pseudo_collate(_mixed_size_batch(dataset)))
    assert torch.equal(ours['inputs'], reference['inputs'])


@pytest.mark.parametrize('num_workers', [0, 2])
@needs_native_decoding
def test_dataloader_batches_equal_in_process_and_in_workers(toy_coco_root, num_workers):
    dataset = _dataset(toy_coco_root)
    expected = [fast_collate([dataset[i] for i in range(start, start + 3)])
                for start in range(0, len(dataset) - 2, 3)]
    loader = DataLoader(dataset, batch_size=3, drop_last=True, collate_fn=fast_collate,
                        num_workers=num_workers, persistent_workers=num_workers > 0)
    for _ in range(2):  # a second epoch: persistent workers, and nothing was mutated
        got = list(loader)
        assert len(got) == len(expected)
        for batch, want in zip(got, expected):
            assert torch.equal(batch['inputs'], want['inputs'])
            assert batch['input_shapes'] == want['input_shapes']
            assert [s.img_id for s in batch['data_samples']] == \
                [s.img_id for s in want['data_samples']]


@needs_native_decoding
def test_padding_and_pinning_are_the_models_and_the_dataloaders_alone(toy_coco_root, tmp_path,
                                                                       monkeypatch):
    """fast_collate's old pad_size_divisor, pad_value and pin_memory change nothing (the same
    batch, nothing pinned) and it says once where each setting lives."""
    from mmengine.logging import MMLogger

    from mmdet_ext import moved_settings
    monkeypatch.setattr(moved_settings, '_warned', set())
    log = tmp_path / 'run.log'
    MMLogger.get_instance(f'pin_{tmp_path.name}', log_file=str(log), log_level='INFO')
    batch = _mixed_size_batch(_dataset(toy_coco_root))
    old = [fast_collate(batch, pin_memory=True, pad_size_divisor=32, pad_value=7),
           fast_collate(batch, pin_memory=False), fast_collate(batch, pad_size_divisor=1)]
    assert all(not collated['inputs'].is_pinned() for collated in old)
    assert all(torch.equal(collated['inputs'], fast_collate(batch)['inputs']) for collated in old)
    assert log.read_text().count(
        'fast_collate: pad_size_divisor=32, pad_value=7, pin_memory=True ignored: the padding is '
        "the model data preprocessor's (its pad_size_divisor and pad_value), pin_memory the "
        "DataLoader's; logged once") == 1
    assert log.read_text().count('fast_collate:') == 1


@requires_opcheck
def test_normalize_batch_opcheck():
    images = torch.randint(0, 256, (3, 3, 37, 45), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    mean, std = torch.tensor([123.675, 116.28, 103.53]), torch.tensor([58.395, 57.12, 57.375])
    sizes = torch.tensor([[37, 45], [20, 45], [1, 3]])
    torch.library.opcheck(torch.ops.mmdet_ext.normalize_batch.default,
                          (images, mean, std, False, sizes, 0.0))


def test_normalize_batch_op_equals_torch_and_checks_its_inputs():
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (3, 3, 37, 45), dtype=torch.uint8, generator=generator)
    mean, std = torch.tensor([123.675, 116.28, 103.53]), torch.tensor([58.395, 57.12, 57.375])
    sizes = torch.tensor([[37, 45], [20, 45], [1, 3]])
    out = ops.normalize_batch(images, mean, std, True, sizes, pad_value=-3.0)
    expected = (images[:, [2, 1, 0]].float() - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
    for image, (height, width) in zip(expected, sizes.tolist()):
        image[:, height:, :] = -3.0
        image[:, :height, width:] = -3.0
    assert torch.equal(out, expected)
    with pytest.raises(RuntimeError, match=r'image 1 is 38x45, outside the 37x45 batch'):
        ops.normalize_batch(images, mean, std, True, torch.tensor([[1, 1], [38, 45], [1, 1]]))
    with pytest.raises(RuntimeError, match='one value per channel'):
        ops.normalize_batch(images, mean[:2], std, True, sizes)


@needs_native_decoding
def test_preprocessor_without_normalisation_or_channel_swap(toy_coco_root):
    options = dict(pad_size_divisor=32, pad_value=5)
    dataset = _dataset(toy_coco_root)
    ours = FastDetDataPreprocessor(**options)(fast_collate(_mixed_size_batch(dataset)))
    reference = DetDataPreprocessor(**options)(pseudo_collate(_mixed_size_batch(dataset)))
    assert torch.equal(ours['inputs'], reference['inputs'])


def _slot_batch():
    """A FetchedBatch of two images in the top left of their 8x8 slots, and its buffer."""
    from mmdet_ext.collate import FetchedBatch
    buffer = torch.randint(1, 256, (2, 3, 8, 8), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    views = [buffer[0, :, :5, :6], buffer[1, :, :7, :4]]
    return FetchedBatch([{'inputs': view} for view in views], buffer, views), buffer


def test_a_fetched_batch_is_collated_to_its_buffer_and_a_list_of_the_same_views_is_copied():
    """The batched fetch hands its batch by type: fast_collate takes the buffer (only the
    padding written, zeros). The same views in a plain list, or a sample whose inputs was
    replaced: copied, the same pixels."""
    batch, buffer = _slot_batch()
    images = [view.clone() for view in batch.views]
    collated = fast_collate(batch)
    assert collated['inputs'].data_ptr() == buffer.data_ptr()
    assert collated['input_shapes'] == [(5, 6), (7, 4)]
    for slot, image in zip(collated['inputs'], images):
        h, w = image.shape[1:]
        assert torch.equal(slot[:, :h, :w], image)
        assert (slot[:, h:, :] == 0).all() and (slot[:, :h, w:] == 0).all()
    fetched, _ = _slot_batch()
    replaced, _ = _slot_batch()
    replaced[1] = {'inputs': replaced.views[1].clone()}
    for copied in (fast_collate(list(fetched)), fast_collate(replaced)):
        assert copied['inputs'].data_ptr() != buffer.data_ptr()
        assert tuple(copied['inputs'].shape) == (2, 3, 7, 6)  # the largest image's size
        for slot, image in zip(copied['inputs'], images):
            assert torch.equal(slot[:, :image.shape[1], :image.shape[2]], image)


def test_a_fetched_flat_batch_of_deferred_images_is_collated_to_its_buffer():
    """Deferred images one after another in one buffer: that buffer is the batch's inputs; the
    same views in a plain list are concatenated into a new one."""
    from mmdet.structures import DetDataSample

    from mmdet_ext.collate import FetchedBatch
    buffer = torch.arange(3 * 2 * 2 + 3 * 3 * 2, dtype=torch.uint8)
    views = [buffer[:12].view(3, 2, 2), buffer[12:].view(3, 3, 2)]
    samples = [{'inputs': view, 'data_samples': DetDataSample(metainfo={'pending_warp': {
        'out_shape': (4, 4), 'flip_direction': None, 'interpolation': 'bilinear'}})}
        for view in views]
    collated = fast_collate(FetchedBatch(samples, buffer, views))
    assert collated['inputs'].data_ptr() == buffer.data_ptr()
    assert collated['pending_warp']['image_shapes'].tolist() == [[2, 2, 3], [3, 2, 3]]
    copied = fast_collate(list(samples))
    assert copied['inputs'].data_ptr() != buffer.data_ptr()
    assert torch.equal(copied['inputs'], buffer)
