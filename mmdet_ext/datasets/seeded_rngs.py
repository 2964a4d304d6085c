"""One sample's random draws from its own seed: python ``random``, numpy's global RNG and torch's
CPU RNG seeded, and put back afterwards (``sample_seeds.py`` says why and where the seeds come
from)."""
import contextlib
import random
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch


def sample_seed(seed: int, epoch: int, index: int, occurrence: int) -> int:
    """A 32-bit seed for one sample, from what it is in the run (all arguments >= 0): the run's
    sampler seed, the epoch, the dataset index and how many times this index came before in the
    epoch on this rank (a sampler's padding repeats some). Not from the rank or the batch, so a
    sample is augmented the same on any number of ranks."""
    return int(np.random.SeedSequence([seed, epoch, index, occurrence]).generate_state(1)[0])


def seed_rngs(seed: int) -> None:
    """Seed python ``random``, numpy's global RNG and torch's CPU RNG (the caller restores them:
    ``seeded_rngs`` per sample, the batched fetch once per batch)."""
    random.seed(seed)
    np.random.seed(seed)
    # The CPU generator only, the one restored afterwards. torch.manual_seed would also reseed
    # the CUDA generators (the model's dropout, with num_workers=0) and, before CUDA is
    # initialised, queue that call with a formatted stack trace: ~1 ms per sample.
    torch.default_generator.manual_seed(seed)


@contextlib.contextmanager
def seeded_rngs(seed: int) -> Iterator[None]:
    """Seed python ``random``, numpy's global RNG and torch's CPU RNG; restore them afterwards."""
    python, numpy, torch_cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    seed_rngs(seed)
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(torch_cpu)


def load_seeded(load: Callable[[int], Any], index: int, seed: Optional[int]) -> Any:
    """``load(index)`` (a dataset's ``__getitem__``, or its per-sample path), under
    ``seeded_rngs(seed)`` when a seed is given."""
    if seed is None:
        return load(index)
    with seeded_rngs(seed):
        return load(index)


def load_one_by_one(load: Callable[[int], Any], indices: Sequence[int],
                    seeds: Optional[Sequence[Optional[int]]] = None) -> list:
    """``[load(i) for i in indices]``, each under its seed where ``seeds`` gives one
    (``load_seeded``): the one per-sample path of a batch, for a dataset that does not batch,
    a pipeline the batch engine does not recognise and a batch it cannot make exactly."""
    seeds = [None] * len(indices) if seeds is None else seeds
    return [load_seeded(load, index, seed) for index, seed in zip(indices, seeds)]
