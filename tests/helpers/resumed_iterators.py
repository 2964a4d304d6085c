"""An iteration-based loop's data iterator as ExactResumeHook restarts it on resume, and what
an uninterrupted run draws from it: the reference for the fork's ``skip_iter`` resume protocol
(``PrepaidIterator.skip_iter``, ``DevicePrefetcher.skip_iter``)."""
import functools
import itertools

from mmengine.dataset import DefaultSampler
from mmengine.runner.loops import _InfiniteDataloaderIterator
from torch.utils.data import DataLoader, Dataset

from mmdet_ext._compat import restart_infinite_iterator
from mmdet_ext.datasets.sample_seeds import install_resumable_loading


class SampleIds(Dataset):
    """Sample i is the number i: a batch shows which samples it holds, in which order."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> int:
        return index


def loop_iterator(resume_at: int = 0) -> tuple[_InfiniteDataloaderIterator, int]:
    """An iteration-based loop's iterator over a real DataLoader (24 shuffled samples, batches
    of 4: 6 per data epoch) with ExactResumeHook's resumable loading, restarted at batch
    ``resume_at`` of the run as the hook restarts it on resume; and that batch's data epoch."""
    loader = DataLoader(SampleIds(), batch_size=4,
                        sampler=DefaultSampler(SampleIds(), shuffle=True, seed=5))
    iterator = _InfiniteDataloaderIterator(loader)
    batches = install_resumable_loading(loader, seed=5, rank=0)
    epoch, skip = divmod(resume_at, len(loader))
    restart_infinite_iterator(iterator, epoch, batches, skip)
    return iterator, epoch


def ids(batches) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


@functools.cache
def uninterrupted_ids() -> list[list[int]]:
    """The first 16 batches (sample ids) of the run, across data epochs 0-2 (call it under
    conftest's ``no_dataloader_restart_pause``: mmengine sleeps at each data epoch's end)."""
    iterator, _ = loop_iterator()
    batches = ids(itertools.islice(iterator, 16))
    assert len({tuple(batch) for batch in batches}) == 16  # a wrong order cannot pass
    return batches
