"""A COCO annotation file as a memory-mapped, read-only store shared by every process.

Why: datasets that keep annotations as Python lists/dicts pay for them in every DataLoader worker
(reference counting dirties the copy-on-write pages, seed 001) and on every DDP rank; mmengine's
``serialize_data`` still keeps one private copy per rank and unpickles a sample on every access.
Here the annotations are flat arrays in one file, mapped read-only: all workers and all ranks on a
machine share a single copy in the page cache, and nothing at rest is a per-sample Python object.

The store is built on first use from the json and cached, keyed on the json's content (SHA-256):
next to the annotation file when that directory is writable, else in ``~/.cache/mmdet_ext``.
``tools/build_store.py`` builds it ahead of time with a progress bar. A truncated, corrupt or
outdated store file is detected (header, size and checksum) and rebuilt, never read as garbage.

With ``validation`` (``validate_coco`` arguments), the json and its files are checked first and
the store holds the cleaned data; the cache key then also covers those arguments (another policy
is another store), and the report is written next to the store as ``<store>.problems.jsonl``.
"""
import fcntl
import hashlib
import json
import os
import os.path as osp
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

import numpy as np
import torch
from mmengine import fileio
from mmengine.logging import print_log

from .._native import _C
from .coco_store_layout import LAYOUT_VERSION, coco_to_sections
from .validation import validate_coco

StoreError = _C.StoreError
STORE_SUFFIX = '.mdxstore'
PROBLEMS_SUFFIX = '.problems.jsonl'


class AnnotationStore:
    """Read-only view of one store file: named numpy arrays backed by a shared mapping.

    Pickles as its path (workers started with ``spawn`` re-map the same file; forked ones
    inherit the mapping), never as its data.
    """

    def __init__(self, path: str, verify: bool = True) -> None:
        self.path = path
        self._mapped = _C.MappedStore(path, verify)
        self.key = self._mapped.key()
        self.arrays: dict[str, np.ndarray] = {}
        for name, tensor in self._mapped.sections():
            array = tensor.numpy()
            array.flags.writeable = False  # the mapping is read-only; fail loudly, not SIGSEGV
            self.arrays[name] = array
        version = self.arrays.get('layout_version')
        if version is None or int(version[0]) != LAYOUT_VERSION:
            raise StoreError(f'annotation store {path}: layout version '
                             f'{None if version is None else int(version[0])}, this build reads '
                             f'{LAYOUT_VERSION}')

    def __getstate__(self) -> dict:
        return {'path': self.path}

    def __setstate__(self, state: dict) -> None:
        # Already validated in the process that pickled it; skip the payload checksum.
        self.__init__(state['path'], verify=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    @property
    def num_images(self) -> int:
        return len(self.arrays['image_id'])

    @property
    def num_instances(self) -> int:
        return len(self.arrays['ann_id'])

    @property
    def nbytes(self) -> int:
        """Size of the store file in bytes."""
        return int(self._mapped.file_size)

    def text(self, bytes_name: str, start: int, end: int) -> str:
        return self.arrays[bytes_name][start:end].tobytes().decode()


def write_store(path: str, sections: dict[str, np.ndarray], key: bytes) -> None:
    """Atomically write ``sections`` (named 1-D/2-D arrays) to a store file."""
    tensors = [(name, torch.from_numpy(np.ascontiguousarray(array)))
               for name, array in sections.items()]
    _C.write_store(path, tensors, key)


def _default_store_path(ann_file: str, key: bytes, cache_dir: Optional[str]) -> str:
    name = f'{osp.basename(ann_file)}.{key.hex()[:16]}{STORE_SUFFIX}'
    for directory in (cache_dir, osp.dirname(osp.abspath(ann_file)),
                      osp.join(osp.expanduser('~'), '.cache', 'mmdet_ext', 'stores')):
        if directory is None:
            continue
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return osp.join(directory, name)
    raise OSError(f'no writable directory to cache the annotation store of {ann_file}')


@contextmanager
def _exclusive(lock_path: str) -> Iterator[None]:
    """One builder per store across workers, ranks and jobs on this machine; others wait."""
    with open(lock_path, 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_store(ann_bytes: bytes, store_path: str, key: bytes,
                progress: Optional[Callable[[int, int], None]] = None,
                validation: Optional[dict] = None,
                backend_args: Optional[dict] = None) -> AnnotationStore:
    """Parse a COCO json's bytes, validate it if asked, and write its store to ``store_path``."""
    coco = json.loads(ann_bytes)
    if validation is not None:
        coco, report = validate_coco(coco, backend_args=backend_args, **validation)
        report.write_jsonl(store_path + PROBLEMS_SUFFIX)
        print_log(f'Annotation store {store_path}: {report.summary()}'
                  + (f'; details in {store_path + PROBLEMS_SUFFIX}' if report.problems else ''),
                  logger='current', level=30 if report.problems else 20)
    write_store(store_path, coco_to_sections(coco, progress), key)
    return AnnotationStore(store_path)


def open_store(ann_file: str, cache_dir: Optional[str] = None,
               backend_args: Optional[dict] = None,
               progress: Optional[Callable[[int, int], None]] = None,
               validation: Optional[dict] = None) -> AnnotationStore:
    """The store of ``ann_file``: opened from the cache, or built (once) if missing or invalid.

    Args:
        ann_file: a COCO instances json (any mmengine file backend).
        cache_dir: where to keep the store; default next to ``ann_file`` (else ~/.cache).
        backend_args: mmengine file backend arguments for reading ``ann_file``.
        progress: called as ``progress(done, total)`` (annotations) while building.
        validation: ``validate_coco`` keyword arguments (json-serializable), or None to store the
            json unchecked.
    """
    ann_bytes = fileio.get(ann_file, backend_args=backend_args)
    digest = hashlib.sha256(ann_bytes)
    if validation is not None:
        digest.update(json.dumps(validation, sort_keys=True).encode())
    key = digest.digest()
    store_path = _default_store_path(ann_file, key, cache_dir)
    with _exclusive(store_path + '.lock'):
        if osp.exists(store_path):
            try:
                store = AnnotationStore(store_path)
                if store.key == key:
                    return store
                problem = 'it was built from different annotations'
            except StoreError as err:
                problem = str(err)
            print_log(f'Rebuilding the annotation store {store_path}: {problem}',
                      logger='current', level=30)
        return build_store(ann_bytes, store_path, key, progress, validation, backend_args)
