"""The annotation store file: round trip, corruption detection, caching, sharing across
processes."""
import errno
import fcntl
import gc
import hashlib
import json
import multiprocessing
import os
import pickle
import stat
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

from mmdet_ext import _C
from mmdet_ext.datasets import AnnotationStore, StoreError, open_store
from mmdet_ext.datasets import annotation_store
from mmdet_ext.datasets.annotation_store import PROBLEMS_SUFFIX, write_store
from mmdet_ext.datasets.coco_store_layout import LAYOUT_VERSION
from mmdet_ext.engine.process_exit import exit_process
from helpers.tiny_runner import record_mmengine_log

KEY = bytes(range(32))
REGRESSIONS = Path(__file__).parent / 'regressions'
HEADER_VERSION_OFFSET = 8  # magic[8], then uint32 version


def _sections() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        'layout_version': np.array([LAYOUT_VERSION], dtype=np.int64),
        'floats': rng.normal(size=(1000, 4)),
        'bytes': rng.integers(0, 256, 777, dtype=np.uint8),
        'ints': rng.integers(-5, 5, 31, dtype=np.int32),
        'empty': np.zeros(0, dtype=np.int64),
        'coords': rng.integers(0, 2**16, (9, 2), dtype=np.uint16),  # torch < 2.3 has no such tensor
        'offsets': rng.integers(0, 2**32, 5, dtype=np.uint32),
    }


@pytest.fixture
def store_file(tmp_path):
    path = str(tmp_path / 'a.mdxstore')
    write_store(path, _sections(), KEY)
    return path


def test_element_type_codes_are_the_formats_own(tmp_path):
    """The file records c10::ScalarType's codes, which the format's first writer stored, whatever
    torch the extension is built against: stores written before read everywhere."""
    path = tmp_path / 'codes.mdxstore'
    write_store(str(path), {'a': np.zeros(2, np.uint16), 'b': np.zeros(2, np.uint32),
                            'c': np.zeros(2, np.float32), 'd': np.zeros(2, np.int64)}, KEY)
    header_bytes, entry_bytes, dtype_offset = 72, 72, 32  # store_format.h: Header, SectionEntry
    raw = path.read_bytes()
    codes = [struct.unpack_from('<i', raw, header_bytes + i * entry_bytes + dtype_offset)[0]
             for i in range(4)]
    assert codes == [27, 28, 6, 4]


def test_round_trip_is_exact_and_read_only(store_file):
    store = AnnotationStore(store_file)
    assert store.key == KEY
    assert set(store.arrays) == set(_sections())
    for name, expected in _sections().items():
        np.testing.assert_array_equal(store[name], expected)
        assert store[name].dtype == expected.dtype
    with pytest.raises(ValueError, match='read-only'):
        store['floats'][0, 0] = 1.0


def test_no_temporary_file_is_left_behind(store_file):
    assert os.listdir(os.path.dirname(store_file)) == ['a.mdxstore']


def _rewrite(path: str, offset: int, data: bytes) -> None:
    with open(path, 'r+b') as f:
        f.seek(offset)
        f.write(data)


@pytest.mark.parametrize('damage, message', [
    (lambda p: os.truncate(p, os.path.getsize(p) - 10), 'truncated'),
    (lambda p: os.truncate(p, 20), 'smaller than the header'),
    (lambda p: _rewrite(p, os.path.getsize(p) - 100, b'\xff\x00\xff'), 'payload checksum'),
    (lambda p: _rewrite(p, 0, b'NOTSTORE'), 'bad magic'),
    (lambda p: _rewrite(p, HEADER_VERSION_OFFSET, struct.pack('<I', 99)), 'format version 99'),
    (lambda p: _rewrite(p, 24, b'\x01'), 'corrupt header'),
    (lambda p: open(p, 'ab').write(b'junk'), 'truncated or padded'),
])
def test_damaged_store_is_detected_and_named(store_file, damage, message):
    damage(store_file)
    with pytest.raises(StoreError, match=message) as info:
        AnnotationStore(store_file)
    assert store_file in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match='cannot open'):
        AnnotationStore(str(tmp_path / 'nope.mdxstore'))


# Store files with a valid header and checksums but a corrupt section table (tools/fuzz/
# fuzz_native.py annotation_store on the coverage-instrumented build; docs/fuzzing.md). Each is the
# writer's output for five small sections with one table field changed. Before the fix the first
# three escaped as UnicodeDecodeError / TypeError instead of StoreError (so open_store did not
# rebuild), and the last two gave numpy views far past the end of the mapping.
@pytest.mark.parametrize('name, message', [
    ('store_section_name_not_utf8', 'not UTF-8'),
    ('store_section_dtype_quint4x2', 'unsupported dtype 16'),
    ('store_duplicate_section_name', "two sections named 'pairs'"),
    ('store_1d_section_past_the_end', "section 'empty' lies outside the file"),
    ('store_section_size_overflows', "section 'pairs' lies outside the file"),
])
def test_corrupt_section_table_is_a_store_error(tmp_path, name, message):
    path = tmp_path / f'{name}.mdxstore'
    shutil.copy(REGRESSIONS / f'{name}.mdxstore', path)
    for verify in (True, False):
        with pytest.raises(StoreError, match=message):
            AnnotationStore(str(path), verify=verify)


@pytest.mark.parametrize('shape, offset', [((10**6, 4), None), (None, 2**20)])
def test_a_section_past_the_end_of_the_file_is_a_store_error(store_file, shape, offset):
    """A table entry that agrees with itself (nbytes = product of the shape and the item size)
    but points past the end of the file: only the reader's bounds check refuses it. Neither
    regression store above reaches that check (the C++ hand mutation dropping it survived them;
    benchmarks/results/mutation.md). Opened without the payload checksum, as a store unpickled
    in a worker is (AnnotationStore.__setstate__); with it, the checksum refuses the edit first.
    """
    header_bytes, entry_bytes = 72, 72  # store_format.h: Header, SectionEntry
    raw = bytearray(Path(store_file).read_bytes())
    num_sections = struct.unpack_from('<I', raw, 12)[0]
    names = [raw[header_bytes + i * entry_bytes:][:32].rstrip(b'\0').decode()
             for i in range(num_sections)]
    entry = header_bytes + names.index('floats') * entry_bytes
    _dtype, _ndim, rows, cols, old_offset, _nbytes = struct.unpack_from('<iiqqQQ', raw, entry + 32)
    rows, cols = shape or (rows, cols)
    struct.pack_into('<qqQQ', raw, entry + 40, rows, cols, offset or old_offset, rows * cols * 8)
    Path(store_file).write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="section 'floats' lies outside the file"):
        AnnotationStore(store_file, verify=False)
    with pytest.raises(StoreError, match='payload checksum'):
        AnnotationStore(store_file)


@pytest.mark.parametrize('sections, message', [
    ([('x', np.zeros(3, dtype=bool))], 'has dtype bool'),
    ([('x', np.zeros(3, dtype=np.complex64))], 'has dtype complex64'),
    ([('x', np.zeros(3, dtype='>u2'))], 'has dtype >u2'),  # not native byte order
    ([('x', np.zeros(3)), ('x', np.ones(2))], "two sections named 'x'"),
    ([('x', np.zeros((2, 2, 2)))], 'must be a 1-D or 2-D array'),
    ([('x', np.zeros((4, 4))[:, 1])], 'not C-contiguous'),
])
def test_writer_refuses_what_the_reader_refuses(tmp_path, sections, message):
    with pytest.raises(StoreError, match=message):
        _C.write_store(str(tmp_path / 'a.mdxstore'), sections, KEY)


def test_pickles_as_its_path_not_its_data(store_file):
    store = AnnotationStore(store_file)
    payload = pickle.dumps(store)
    assert len(payload) < 300
    clone = pickle.loads(payload)
    np.testing.assert_array_equal(clone['floats'], store['floats'])


def _ann_file(toy_coco_root, tmp_path, name='instances_train.json'):
    dest = tmp_path / name
    shutil.copy(toy_coco_root / 'annotations' / name, dest)
    return str(dest)


def test_open_store_builds_once_and_reuses_the_cache(toy_coco_root, tmp_path):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    first = open_store(ann_file)
    assert first.path.startswith(str(tmp_path)) and first.path.endswith('.mdxstore')
    built_at = os.stat(first.path).st_mtime_ns
    second = open_store(ann_file)
    assert second.path == first.path and os.stat(second.path).st_mtime_ns == built_at
    coco = json.load(open(ann_file))
    assert second.num_images == len(coco['images'])
    assert second.num_instances == len(coco['annotations'])
    assert second.key == hashlib.sha256(open(ann_file, 'rb').read()).digest()


def test_changed_json_gets_a_new_store(toy_coco_root, tmp_path):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    before = open_store(ann_file)
    coco = json.load(open(ann_file))
    coco['annotations'] = coco['annotations'][:3]
    json.dump(coco, open(ann_file, 'w'))
    after = open_store(ann_file)
    assert after.path != before.path and after.num_instances == 3


def test_corrupt_cached_store_is_rebuilt(toy_coco_root, tmp_path):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    path = open_store(ann_file).path
    os.truncate(path, os.path.getsize(path) // 2)
    rebuilt = open_store(ann_file)
    assert rebuilt.path == path and rebuilt.num_instances > 0


class _StoreRows(Dataset):
    def __init__(self, store: AnnotationStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return self.store.num_images

    def __getitem__(self, row: int) -> torch.Tensor:
        start, end = self.store['instance_offsets'][row:row + 2]
        return torch.from_numpy(self.store['bbox'][start:end].sum(axis=0, dtype=np.int64))


def test_two_workers_read_the_same_store(toy_coco_root, tmp_path):
    store = open_store(_ann_file(toy_coco_root, tmp_path))
    dataset = _StoreRows(store)
    expected = torch.stack([dataset[i] for i in range(len(dataset))])
    loaded = torch.cat(list(DataLoader(dataset, batch_size=2, num_workers=2,
                                       multiprocessing_context='spawn')))
    torch.testing.assert_close(loaded, expected)


def _rank_reads_store(rank: int, world_size: int, ann_file: str, port: int) -> None:
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                            world_size=world_size)
    store = open_store(ann_file)
    digest = torch.tensor([float(store['bbox'].sum()), float(store.num_instances)],
                          dtype=torch.float64)
    gathered = [torch.zeros_like(digest) for _ in range(world_size)]
    dist.all_gather(gathered, digest)
    assert all(torch.equal(g, gathered[0]) for g in gathered)
    exit_process(0)  # as tools/train.py ends a rank: never SIGABRT from gloo's threads at exit


def test_two_gloo_ranks_share_one_store_file(toy_coco_root, tmp_path):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    port = 29500 + os.getpid() % 1000
    mp.spawn(_rank_reads_store, args=(2, ann_file, port), nprocs=2, join=True)
    stores = [f for f in os.listdir(tmp_path) if f.endswith('.mdxstore')]
    assert len(stores) == 1, stores


# Stores of a json's earlier contents, lock files and empty reports must not pile up beside it.

def _edit_json(ann_file: str, num_annotations: int) -> None:
    coco = json.load(open(ann_file))
    coco['annotations'] = coco['annotations'][:num_annotations]
    with open(ann_file, 'w') as f:
        json.dump(coco, f)


def test_superseded_stores_are_deleted_and_nothing_else_is_left(toy_coco_root, tmp_path):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    first = open_store(ann_file).path
    leftover = Path(first + '.tmp.4242')  # what a builder killed mid-write leaves
    leftover.write_bytes(b'half a store')
    _edit_json(ann_file, 5)
    second = open_store(ann_file).path
    _edit_json(ann_file, 3)
    with record_mmengine_log() as records:
        newest = open_store(ann_file)
    digest = hashlib.sha256(open(ann_file, 'rb').read()).hexdigest()
    assert os.path.basename(newest.path) == f'instances_train.json.{digest[:12]}.mdxstore'
    assert sorted(os.listdir(tmp_path)) == sorted(['instances_train.json',
                                                   os.path.basename(newest.path)])
    assert newest.num_instances == 3 and newest.key == bytes.fromhex(digest)
    assert [r.getMessage() for r in records if r.getMessage().startswith('Deleted')] == [
        f'Deleted the annotation store {second}: its json has changed']
    # A builder of the current json killed mid-write: its leftover goes at the next open.
    Path(newest.path + '.tmp.4343').write_bytes(b'half a store')
    open_store(ann_file)
    assert sorted(os.listdir(tmp_path)) == sorted(['instances_train.json',
                                                   os.path.basename(newest.path)])


def test_a_store_open_in_this_process_is_kept_until_released(toy_coco_root, tmp_path):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    old = open_store(ann_file)
    _edit_json(ann_file, 3)
    new = open_store(ann_file)
    assert os.path.exists(old.path) and old.num_instances > new.num_instances == 3
    old_path = old.path
    del old
    gc.collect()
    assert open_store(ann_file).path == new.path
    assert not os.path.exists(old_path)


def _hold_store(store: AnnotationStore, ready, release) -> None:
    assert store.num_instances > 3
    ready.set()
    release.wait(120)


@pytest.mark.parametrize('start_method', ['fork', 'spawn'])
def test_a_store_open_in_a_live_child_is_kept(toy_coco_root, tmp_path, start_method):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    ctx = multiprocessing.get_context(start_method)
    ready, release = ctx.Event(), ctx.Event()
    store = open_store(ann_file)
    old_path = store.path
    # fork: the child inherits this store's descriptor; spawn: it re-opens the path.
    child = ctx.Process(target=_hold_store, args=(store, ready, release))
    child.start()
    try:
        assert ready.wait(120), 'the child did not open the store'
        del store
        gc.collect()
        _edit_json(ann_file, 3)
        open_store(ann_file)
        assert os.path.exists(old_path)
    finally:
        release.set()
        child.join(120)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    open_store(ann_file)
    assert not os.path.exists(old_path)


def test_problem_report_only_when_validation_finds_problems(toy_coco_root, tmp_path):
    ann_dir = tmp_path / 'annotations'
    ann_dir.mkdir()
    ann_file = _ann_file(toy_coco_root, ann_dir)
    shutil.copytree(toy_coco_root / 'train', tmp_path / 'train')
    image = tmp_path / 'train' / '000000.jpg'
    image.rename(tmp_path / 'aside.jpg')
    validation = {'img_prefix': str(tmp_path / 'train')}
    dirty = open_store(ann_file, validation=validation)
    report = Path(dirty.path + PROBLEMS_SUFFIX)
    assert [json.loads(line)['kind'] for line in report.read_text().splitlines()] == [
        'image_missing']
    # The image is back and the store is rebuilt: the old report goes.
    (tmp_path / 'aside.jpg').rename(image)
    os.truncate(dirty.path, 100)
    del dirty
    clean = open_store(ann_file, validation=validation)
    assert not report.exists() and clean.num_images == 8
    # Another policy of the same json is used side by side: both stay, with no report.
    test_mode = open_store(ann_file, validation={**validation, 'policy': {'image_missing':
                                                                          'report'}})
    plain = open_store(ann_file)
    assert sorted(os.listdir(ann_dir)) == sorted(
        ['instances_train.json'] + [os.path.basename(s.path) for s in (clean, test_mode, plain)])


def _open_and_report(ann_file: str, barrier, results, notes: str) -> None:
    """Open the store as one of two ranks. The one that builds it holds the build until the
    other has said it waits on the folder lock (``notes``/waiting), so the two overlap on any
    machine; with a lock that lets both in, each builds (after its wait runs out)."""
    import logging

    from mmengine.logging import MMLogger
    waiting = os.path.join(notes, 'waiting')

    class NoteWaiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if 'Waiting for another process' in record.getMessage():
                open(waiting, 'w').close()

    MMLogger.get_current_instance().addHandler(NoteWaiting())
    builds = []
    build_store = annotation_store.build_store

    def build_once_the_other_waits(*args):
        builds.append(1)
        deadline = time.monotonic() + 120
        while not os.path.exists(waiting) and time.monotonic() < deadline:
            time.sleep(0.01)
        return build_store(*args)

    annotation_store.build_store = build_once_the_other_waits
    barrier.wait(120)
    store = open_store(ann_file)
    results.put((store.path, store.num_instances, float(store['bbox'].sum()), len(builds)))


def test_concurrent_builders_make_one_store(toy_coco_root, tmp_path, tmp_path_factory):
    ann_file = _ann_file(toy_coco_root, tmp_path)
    notes = tmp_path_factory.mktemp('notes')
    ctx = multiprocessing.get_context('spawn')
    barrier, results = ctx.Barrier(2), ctx.Queue()
    children = [ctx.Process(target=_open_and_report, args=(ann_file, barrier, results, str(notes)))
                for _ in range(2)]
    for child in children:
        child.start()
    try:
        got = [results.get(timeout=300) for _ in children]
    finally:
        for child in children:
            child.join(60)
            if child.is_alive():
                child.kill()
    assert [child.exitcode for child in children] == [0, 0]
    assert (notes / 'waiting').exists()  # one of them did wait for the other's build
    assert got[0][:3] == got[1][:3] and got[0][1] > 0
    assert got[0][3] + got[1][3] == 1, 'the store was built more than once'
    assert sorted(os.listdir(tmp_path)) == sorted(['instances_train.json',
                                                   os.path.basename(got[0][0])])


def test_same_named_jsons_in_one_cache_dir_keep_their_stores(toy_coco_root, tmp_path):
    cache_dir = str(tmp_path / 'cache')
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    ann_a = _ann_file(toy_coco_root, tmp_path / 'a')
    ann_b = _ann_file(toy_coco_root, tmp_path / 'b')
    _edit_json(ann_b, 3)
    store_a = open_store(ann_a, cache_dir).path
    store_b = open_store(ann_b, cache_dir).path
    assert open_store(ann_a, cache_dir).path == store_a
    assert sorted(os.listdir(cache_dir)) == sorted(os.path.basename(p) for p in (store_a, store_b))
    assert os.listdir(tmp_path / 'a') == ['instances_train.json']


def test_folder_lock_falls_back_to_a_transient_lock_file(toy_coco_root, tmp_path, monkeypatch):
    flock = fcntl.flock

    def nfs_flock(fd, operation):  # NFS: an exclusive flock needs a descriptor open for writing
        if stat.S_ISDIR(os.fstat(fd).st_mode) and operation & fcntl.LOCK_EX:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return flock(fd, operation)

    monkeypatch.setattr(fcntl, 'flock', nfs_flock)
    ann_file = _ann_file(toy_coco_root, tmp_path)
    open_store(ann_file)
    _edit_json(ann_file, 3)
    store = open_store(ann_file)
    assert sorted(os.listdir(tmp_path)) == sorted(['instances_train.json',
                                                   os.path.basename(store.path)])


def test_a_store_built_with_the_defaults_names_images_by_file_name(toy_coco_root, tmp_path):
    """As tools/fuzz/make_seeds.py builds one: no validation, the json's ``file_name``."""
    ann_file = toy_coco_root / 'annotations' / 'instances_train.json'
    store = annotation_store.build_store(ann_file.read_bytes(), str(tmp_path / 'a.mdxstore'),
                                         bytes(32))
    images = json.loads(ann_file.read_text())['images']
    assert [store.file_name(row) for row in range(store.num_images)] == \
        [image['file_name'] for image in images]
