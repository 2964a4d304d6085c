"""What a dataset does when a sample cannot be loaded: raise a clear error, or skip and count.

Why: a decoder or mask codec failing inside a DataLoader worker used to surface as a bare
OpenCV/pycocotools message with no file name, and one corrupt sample could stop (or, with retries,
silently thin out) a long run. ``BadSampleHandler`` turns the exception into an error naming the
image and the cause (``'raise'``), or (``'skip'``) counts it, logs it once, appends it to
``bad_samples.jsonl`` and lets mmengine's refetch pick another sample -- until the fraction of bad
samples this process has seen exceeds ``max_bad_fraction``, which stops the run with a summary.

Each DataLoader worker counts on its own (no shared state to corrupt or lock); the fraction is per
process over the samples it has tried, so the stop works with any number of workers.
"""
import json
import logging
import math
import os
import os.path as osp
from typing import Optional

from mmengine.logging import MMLogger, print_log

BAD_SAMPLES_FILE = 'bad_samples.jsonl'


class BadSampleError(RuntimeError):
    """A sample could not be loaded; the message names its index, image id, file and cause."""


class MissingFileBadSampleError(BadSampleError, FileNotFoundError):
    """A sample whose file is missing; also a ``FileNotFoundError``, as mmcv raises for it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)  # OSError's (errno, strerror) form would hide the message

    def __str__(self) -> str:
        return self.args[0]


class TooManyBadSamplesError(RuntimeError):
    """More than ``max_bad_fraction`` of the samples tried so far were bad."""


def log_dir() -> Optional[str]:
    """The running mmengine logger's directory (``work_dir/<timestamp>``), if it writes a file."""
    if not MMLogger.check_instance_created(MMLogger.get_current_instance().instance_name):
        return None
    for handler in MMLogger.get_current_instance().handlers:
        if isinstance(handler, logging.FileHandler):
            return osp.dirname(handler.baseFilename)
    return None


class BadSampleHandler:
    """What ``on_bad_sample`` does with a sample that failed to load, with per-process counts.

    (Not a "policy": that word is kept for the store-time policy of validation.py, which
    decides per problem kind what happens to bad annotations before training starts.)

    Args:
        on_bad_sample: ``'raise'`` or ``'skip'``.
        max_bad_fraction: under ``'skip'``, stop once more than this fraction of the samples tried
            by this process were bad; checked only after ``ceil(1 / max_bad_fraction)`` samples so
            that one early bad sample does not stop a run.
        work_dir: where to append ``bad_samples.jsonl``; default the current mmengine logger's
            directory, and no file when there is none.
    """

    def __init__(self, on_bad_sample: str = 'raise', max_bad_fraction: float = 0.1,
                 work_dir: Optional[str] = None) -> None:
        if on_bad_sample not in ('raise', 'skip'):
            raise ValueError(f"on_bad_sample must be 'raise' or 'skip', got {on_bad_sample!r}")
        if not 0 < max_bad_fraction <= 1:
            raise ValueError(f'max_bad_fraction must be in (0, 1], got {max_bad_fraction}')
        self.on_bad_sample = on_bad_sample
        self.max_bad_fraction = max_bad_fraction
        self.work_dir = work_dir
        self.tried = 0
        self.bad: dict[int, str] = {}  # sample index -> cause, one entry per distinct sample
        self.bad_count = 0

    def __getstate__(self) -> dict:
        # Counts start afresh in every worker process.
        return {**self.__dict__, 'tried': 0, 'bad': {}, 'bad_count': 0}

    def tried_one(self) -> None:
        self.tried += 1

    def handle(self, err: Exception, idx: int, img_id: Optional[int],
               img_path: Optional[str]) -> None:
        """Raise ``BadSampleError`` (raise) or record the bad sample (skip)."""
        cause = f'{type(err).__name__}: {err}'
        where = f'sample {idx} (img_id={img_id}, img_path={img_path})'
        if self.on_bad_sample == 'raise':
            error = MissingFileBadSampleError if isinstance(err, FileNotFoundError) \
                else BadSampleError
            raise error(f'cannot load {where}: {cause}') from err
        self.bad_count += 1
        if idx not in self.bad:
            self.bad[idx] = cause
            print_log(f'Skipping bad {where}: {cause}', logger='current', level=logging.WARNING)
            self._append({'sample_idx': idx, 'img_id': img_id, 'img_path': img_path,
                          'error': cause, 'pid': os.getpid()})
        if self.tried >= math.ceil(1 / self.max_bad_fraction) \
                and self.bad_count > self.max_bad_fraction * self.tried:
            listing = '\n  '.join(f'sample {i}: {c}' for i, c in list(self.bad.items())[:10])
            raise TooManyBadSamplesError(
                f'{self.bad_count} of the {self.tried} samples this process tried were bad '
                f'(> max_bad_fraction={self.max_bad_fraction}); {len(self.bad)} distinct:\n  '
                f'{listing}')

    def _append(self, record: dict) -> None:
        directory = self.work_dir or log_dir()
        if directory is None:
            return
        os.makedirs(directory, exist_ok=True)
        # One short line per write in append mode: lines from several workers do not interleave.
        with open(osp.join(directory, BAD_SAMPLES_FILE), 'a') as f:
            f.write(json.dumps(record) + '\n')
