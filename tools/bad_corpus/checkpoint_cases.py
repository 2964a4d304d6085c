"""Checkpoint kinds of the corpus: what ``load_from`` and ``--resume PATH`` may be handed.

Malicious pickles try to create ``PWNED`` in the case directory; the judge fails the case if
the file appears (code ran), whatever the loader then said.
"""
import io
import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from mmengine.logging import HistoryBuffer

from .case import Case

CKPT = 'ckpt.pth'


def _mmengine_checkpoint() -> dict:
    """What mmengine 0.10.7's CheckpointHook saves, in small."""
    history = HistoryBuffer()
    history.update(0.5)
    return {'meta': {'epoch': 1, 'iter': 10, 'mmengine_version': '0.10.7'},
            'state_dict': OrderedDict(weight=torch.ones(2, 2), bias=torch.zeros(2)),
            'optimizer': {'state': {}, 'param_groups': [{'lr': 0.01, 'params': [0, 1]}]},
            'message_hub': {'log_scalars': {'train/loss': history},
                            'runtime_info': {'iter': np.int64(10)}}}


def _saved(make: Callable[[], object], **save) -> Callable[[Path], dict]:
    def build(case_dir: Path) -> dict:
        torch.save(make(), case_dir / CKPT, **save)
        return {'file': CKPT}
    return build


def _valid_bytes(**save) -> bytes:
    out = io.BytesIO()
    torch.save(_mmengine_checkpoint(), out, **save)
    return out.getvalue()


def _raw(make_bytes: Callable[[Path], bytes]) -> Callable[[Path], dict]:
    def build(case_dir: Path) -> dict:
        (case_dir / CKPT).write_bytes(make_bytes(case_dir))
        return {'file': CKPT}
    return build


def _special(make: Callable[[Path], None]) -> Callable[[Path], dict]:
    def build(case_dir: Path) -> dict:
        make(case_dir / CKPT)
        return {'file': CKPT}
    return build


class _Payload:
    """Unpickling this runs ``exec``: creates the PWNED marker if a loader lets it."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f'open({self.marker!r}, "w").close()',)


def _malicious(case_dir: Path, **save) -> dict:
    torch.save({'state_dict': {'w': torch.ones(1)}, 'meta': _Payload(case_dir / 'PWNED')},
               case_dir / CKPT, **save)
    return {'file': CKPT}


def _plain_pickle_payload(case_dir: Path) -> bytes:
    return pickle.dumps(_Payload(case_dir / 'PWNED'), protocol=2)


def _rewrite_zip(edit: Callable[[str, bytes], bytes]) -> Callable[[Path], bytes]:
    """A valid checkpoint zip with every entry passed through ``edit(name, data)``."""
    def make(case_dir: Path) -> bytes:
        source = zipfile.ZipFile(io.BytesIO(_valid_bytes()))
        out = io.BytesIO()
        with zipfile.ZipFile(out, 'w', zipfile.ZIP_STORED) as target:
            for info in source.infolist():
                target.writestr(info, edit(info.filename, source.read(info.filename)))
        return out.getvalue()
    return make


def _short_storage(name: str, data: bytes) -> bytes:
    return data[:3] if '/data/' in name and not name.endswith('.pkl') else data


def _future_version(name: str, data: bytes) -> bytes:
    return b'99\n' if name.endswith('/version') else data


def _unrelated_zip(case_dir: Path) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, 'w') as archive:
        archive.writestr('readme.txt', 'not a checkpoint')
    return out.getvalue()


CHECKPOINT_CASES = [
    Case('mmengine 0.10 checkpoint', 'checkpoint', 'loads', _saved(_mmengine_checkpoint)),
    Case('pre-zip (torch < 1.6) checkpoint', 'checkpoint', 'loads',
         _saved(_mmengine_checkpoint, _use_new_zipfile_serialization=False)),
    Case('mmcv 1.x / mmdet 2.x style checkpoint', 'checkpoint', 'loads',
         _saved(lambda: {'meta': {'mmcv_version': '1.7.1', 'CLASSES': ('person', 'car'),
                                  'epoch': 12, 'iter': 7330},
                         'state_dict': OrderedDict(weight=torch.ones(2)),
                         'optimizer': {'state': {}, 'param_groups': [{'lr': 0.02}]}})),
    Case('bare state_dict', 'checkpoint', 'loads',
         _saved(lambda: OrderedDict(weight=torch.ones(2), bias=torch.zeros(2)))),
    Case('checkpoint from a newer torch format version', 'checkpoint', 'error',
         _raw(_rewrite_zip(_future_version)), (CKPT,),
         note='the zip says format version 99'),
    Case('truncated checkpoint', 'checkpoint', 'error',
         _raw(lambda d: _valid_bytes()[:len(_valid_bytes()) // 2]), (CKPT, 'truncated')),
    Case('empty checkpoint file', 'checkpoint', 'error', _raw(lambda d: b''), (CKPT, 'empty')),
    Case('text file as checkpoint (--resume PATH)', 'checkpoint', 'error',
         _raw(lambda d: b'epoch_12.pth\n'), (CKPT, 'not a PyTorch checkpoint')),
    Case('HTML error page as checkpoint', 'checkpoint', 'error',
         _raw(lambda d: b'<!DOCTYPE html><html>404</html>'), (CKPT,)),
    Case('tensors claim more bytes than stored', 'checkpoint', 'error',
         _raw(_rewrite_zip(_short_storage)), (CKPT,)),
    Case('zip that is not a checkpoint', 'checkpoint', 'error', _raw(_unrelated_zip), (CKPT,)),
    Case('malicious pickle (zip checkpoint)', 'checkpoint', 'error', _malicious,
         (CKPT, 'allowlist')),
    Case('malicious pickle (pre-zip checkpoint)', 'checkpoint', 'error',
         lambda d: _malicious(d, _use_new_zipfile_serialization=False), (CKPT,)),
    Case('malicious plain pickle', 'checkpoint', 'error', _raw(_plain_pickle_payload), (CKPT,)),
    Case('named pipe as checkpoint', 'checkpoint', 'error', _special(os.mkfifo),
         (CKPT, 'named pipe')),
    Case('directory as checkpoint', 'checkpoint', 'error', _special(lambda p: p.mkdir()),
         (CKPT, 'directory')),
    Case('checkpoint missing', 'checkpoint', 'error', _special(lambda p: None), (CKPT,),
         is_a='FileNotFoundError'),
]
