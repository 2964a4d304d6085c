"""_compat.choose_flip_direction draws as RandomFlip._choose_direction does, same RNG use."""
import numpy as np
import pytest
from mmcv.transforms import RandomFlip as MmcvRandomFlip
from mmcv.transforms.utils import cache_random_params
from mmdet.datasets.transforms import RandomFlip

from mmdet_ext._compat import choose_flip_direction

FLIPS = [dict(prob=0.5), dict(prob=0.0), dict(prob=1.0), dict(prob=0.3, direction='vertical'),
         dict(prob=0.75, direction=['horizontal', 'vertical', 'diagonal']),
         dict(prob=[0.3, 0.2], direction=['horizontal', 'vertical']),
         dict(prob=[0.0, 0.5, 0.5], direction=['horizontal', 'vertical', 'diagonal']),
         dict(prob=[0.1, 0.2, 0.3], direction=['diagonal', 'vertical', 'horizontal'])]


def _draws(draw, flip, seed: int, count: int = 400) -> tuple[list, float]:
    """``count`` draws under ``seed``, and the global RNG's next number after them."""
    np.random.seed(seed)
    directions = [draw(flip) for _ in range(count)]
    return directions, np.random.random_sample()


@pytest.mark.parametrize('flip_type', [RandomFlip, MmcvRandomFlip])
@pytest.mark.parametrize('arguments', FLIPS)
@pytest.mark.parametrize('seed', [0, 7, 2024])
def test_same_draws_and_rng_use_as_mmcv(flip_type, arguments, seed) -> None:
    flip = flip_type(**arguments)
    ours, next_after_ours = _draws(choose_flip_direction, flip, seed)
    mmcv_draws, next_after_mmcv = _draws(lambda f: f._choose_direction(), flip, seed)
    assert ours == mmcv_draws
    assert [type(d) for d in ours] == [type(d) for d in mmcv_draws]
    assert next_after_ours == next_after_mmcv


def test_a_changed_probability_is_drawn_with_it() -> None:
    flip = RandomFlip(prob=0.5)
    choose_flip_direction(flip)
    flip.prob = 1.0
    assert _draws(choose_flip_direction, flip, 0)[0] == ['horizontal'] * 400


def test_probabilities_numpy_refuses_raise_as_in_mmcv() -> None:
    flip = RandomFlip(prob=[0.3, 0.2], direction=['horizontal', 'vertical'])
    flip.prob = [0.9, 0.9]  # after __init__'s check: the draw itself refuses it
    with pytest.raises(ValueError) as mmcv_error:
        flip._choose_direction()
    with pytest.raises(ValueError) as our_error:
        choose_flip_direction(flip)
    assert str(our_error.value) == str(mmcv_error.value)


def test_cached_draws_are_mmcvs() -> None:
    flip = RandomFlip(prob=0.5)
    np.random.seed(1)
    with cache_random_params(flip):
        draws = {choose_flip_direction(flip) for _ in range(50)}
    assert len(draws) == 1, 'inside cache_random_params every draw is the first one'
    np.random.seed(1)
    first = flip._choose_direction()
    assert draws == {first}


class _AlwaysVertical(RandomFlip):
    def _choose_direction(self) -> str:
        return 'vertical'


def test_an_overridden_draw_is_called() -> None:
    flip = _AlwaysVertical(prob=0.5)
    assert _draws(choose_flip_direction, flip, 0)[0] == ['vertical'] * 400
