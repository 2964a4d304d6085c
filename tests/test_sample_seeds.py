"""``seeded_rngs``: a sample's draws come from its seed alone, and every generator it touches
is put back; the CUDA generators (the model's dropout with ``num_workers=0``) are not touched."""
import random

import numpy as np
import pytest
import torch

from mmdet_ext.datasets.seeded_rngs import seeded_rngs


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_draws_come_from_the_seed_and_the_states_come_back():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    before = _draws()
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    with seeded_rngs(1234):
        inside = _draws()
    assert _draws() == before  # the outer streams go on as if nothing happened
    random.seed(1234)
    np.random.seed(1234)
    torch.manual_seed(1234)
    assert inside == _draws()  # the same numbers as seeding every generator by hand


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a GPU')
def test_cuda_generators_are_left_alone():
    torch.cuda.manual_seed_all(7)
    state = torch.cuda.get_rng_state()
    with seeded_rngs(1234):
        pass
    assert torch.equal(torch.cuda.get_rng_state(), state)
