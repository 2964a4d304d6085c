"""box_geometry's numpy resize, clip and flip against mmdet's HorizontalBoxes methods, bit-equal."""
import numpy as np
import pytest
import torch
from mmcv.transforms import RandomFlip
from mmdet.datasets.transforms import Resize
from mmdet.structures.bbox import HorizontalBoxes

from mmdet_ext.transforms.box_geometry import (FLIP_DIRECTIONS, fast_boxes, flip_boxes,
                                               rescale_and_clip, resizes_boxes_as_mmdet)

# Scale factors as Resize computes them (out / in, python floats) and awkward ones.
SCALE_FACTORS = [(1067 / 640, 800 / 480), (1333 / 2560, 800 / 1920), (0.5, 2.0), (1.0, 1.0),
                 (1 / 3, 7 / 9), (1e-3, 123.456)]
# (0, 0): a bound of zero, where only -0.0 tells torch's clamp (keeps it) from one that sets
# values >= the bound (turns it into 0.0).
IMG_SHAPES = [(800, 1067), (800, 1333), (1, 1), (480, 640), (0, 0)]


def _boxes(seed: int, count: int = 37) -> torch.Tensor:
    """float32 [count, 4] boxes across and beyond any image, with the values that test a clamp's
    edge cases: NaN, infinities, both zeros, the bounds themselves."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(-300, 2000, size=(count, 4)).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 800, 1067, 1333, 1e-30, -1e-30],
                        np.float32)
    picks = rng.integers(0, count * 4, size=20)
    values.reshape(-1)[picks] = rng.choice(specials, size=20)
    return torch.from_numpy(values)


def _bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().numpy().view(np.int32)


@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('scale_factor', SCALE_FACTORS)
@pytest.mark.parametrize('img_shape', IMG_SHAPES + [None])
def test_rescale_and_clip_equals_mmdet_bits(seed, scale_factor, img_shape) -> None:
    tensor = _boxes(seed)
    reference = HorizontalBoxes(tensor.clone())
    reference.rescale_(scale_factor)
    if img_shape is not None:
        reference.clip_(img_shape)
    ours = HorizontalBoxes(tensor.clone())
    before = ours.tensor
    rescale_and_clip(ours, scale_factor, img_shape)
    assert ours.tensor.dtype == torch.float32 and ours.tensor.shape == tensor.shape
    np.testing.assert_array_equal(_bits(ours.tensor), _bits(reference.tensor))
    assert ours.tensor is not before and torch.equal(_bits_tensor(before), _bits_tensor(tensor)), \
        'rescale_ makes a new tensor: the one before is left as it was'


def _bits_tensor(tensor: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(_bits(tensor))


@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('direction', FLIP_DIRECTIONS)
@pytest.mark.parametrize('img_shape', IMG_SHAPES)
def test_flip_equals_mmdet_bits(seed, direction, img_shape) -> None:
    tensor = _boxes(seed)
    reference = HorizontalBoxes(tensor.clone())
    reference.flip_(img_shape, direction)
    ours = HorizontalBoxes(tensor.clone())
    before = ours.tensor
    flip_boxes(ours, img_shape, direction)
    assert ours.tensor is before, 'flip_ works in place'
    np.testing.assert_array_equal(_bits(ours.tensor), _bits(reference.tensor))


def test_flip_of_a_strided_view_writes_through_it() -> None:
    base = _boxes(0, 8)
    reference = HorizontalBoxes(base.clone()[::2])
    reference.flip_((800, 1067), 'horizontal')
    view = base.clone()
    ours = HorizontalBoxes(view[::2], clone=False)
    flip_boxes(ours, (800, 1067), 'horizontal')
    np.testing.assert_array_equal(_bits(view[::2]), _bits(reference.tensor))
    np.testing.assert_array_equal(_bits(view[1::2]), _bits(base[1::2]))


def test_empty_boxes() -> None:
    ours = HorizontalBoxes(torch.zeros((0, 4)))
    rescale_and_clip(ours, (2.0, 3.0), (10, 10))
    flip_boxes(ours, (10, 10), 'diagonal')
    assert ours.tensor.shape == (0, 4) and ours.tensor.dtype == torch.float32


class _OwnBoxes(HorizontalBoxes):
    pass


@pytest.mark.parametrize('boxes, fast', [
    (HorizontalBoxes(torch.zeros((2, 4))), True),
    (HorizontalBoxes(torch.zeros((0, 4))), True),
    (_OwnBoxes(torch.zeros((2, 4))), False),                       # a subclass may override
    (HorizontalBoxes(torch.zeros((2, 4), dtype=torch.float64)), False),
    (HorizontalBoxes(torch.zeros((2, 4), requires_grad=True)), False),
    (HorizontalBoxes(torch.zeros((3, 2, 4))), False),              # batched boxes
    (torch.zeros((2, 4)), False),
    (None, False),
])
def test_fast_boxes_only_where_numpy_is_exact(boxes, fast) -> None:
    assert fast_boxes(boxes) is fast


class _OwnBoxResize(Resize):
    def _resize_bboxes(self, results: dict) -> None:
        results['gt_bboxes'].tensor.zero_()


class _PlainResize(Resize):
    pass


def test_a_resize_that_resizes_boxes_its_own_way_keeps_it() -> None:
    assert resizes_boxes_as_mmdet(Resize(scale=(10, 10)))
    assert resizes_boxes_as_mmdet(_PlainResize(scale=(10, 10)))
    assert not resizes_boxes_as_mmdet(_OwnBoxResize(scale=(10, 10)))


def test_the_fast_flip_directions_are_every_direction_mmdet_flips() -> None:
    """``FLIP_DIRECTIONS`` (the directions ``NativeLoadResizeFlip`` flips in numpy, and those the
    bit tests above are parametrised with) is the set RandomFlip accepts, in RandomFlip's order."""
    valid = ['horizontal', 'vertical', 'diagonal']
    RandomFlip(prob=[0.1] * 3, direction=valid)  # mmcv asserts each is a valid direction
    with pytest.raises(AssertionError):
        RandomFlip(prob=0.5, direction='sideways')
    assert list(FLIP_DIRECTIONS) == valid
