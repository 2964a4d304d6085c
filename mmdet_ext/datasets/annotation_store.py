"""A COCO annotation file as a memory-mapped, read-only store shared by every process.

Why: datasets that keep annotations as Python lists/dicts pay for them in every DataLoader worker
(merely reading a Python object updates its reference count, which dirties the copy-on-write page
it lies on, so forked workers slowly copy the whole dataset) and on every DDP rank; mmengine's
``serialize_data`` still keeps one private copy per rank and unpickles a sample on every access.
Here the annotations are flat arrays in one file, mapped read-only: all workers and all ranks on a
machine share a single copy in the page cache, and nothing at rest is a per-sample Python object.

Where stores live: the store is built on first use from the json and cached as
``<json name>.<json sha256[:12]>[-<validation args sha256[:8]>].mdxstore``, next to the json when
that directory is writable (on a shared filesystem every machine then uses the same store), else
in ``~/.cache/mmdet_ext/stores``; ``cache_dir`` overrides both. Away from the json, the name also
carries a digest of the json's path (``<json name>.<path sha256[:8]>.<...>``), so jsons of the
same name from different datasets never share or prune each other's stores. The key stored inside
is the SHA-256 of the json bytes (plus the validation arguments): a truncated, corrupt or outdated
store file is detected (header, size and checksum) and rebuilt, never read as garbage.
``tools/build_store.py`` builds it ahead of time with a progress bar.

What is cleaned: nothing but stores (and problem reports) is left in the folder. One process
checks or builds at a time per folder (an ``flock`` on the folder itself, no lock files); the
others wait, then open the built store. Every open ``AnnotationStore`` holds a shared ``flock`` on
its file, and each ``open_store`` deletes the stores of the same json name whose json digest is no
longer the json's (the json was edited: they can never be used again) once no process holds them,
with their reports and any temporary file a killed builder left. Stores of the same json with other
validation arguments (train vs ``test_mode``) are used side by side and kept.

With ``validation`` (``validate_coco`` arguments), the json and its files are checked first and
the store holds the cleaned data; the cache key then also covers those arguments (another policy
is another store), and when problems were found they are written next to the store as
``<store>.problems.jsonl`` (no problems, no file).

A validated store never serves a decision taken on files that have changed since: it records the
size and modification time of every local image and mask file it judged (missing ones too), and
opening it re-checks them with one ``stat`` per file (no reads); if any differs (an image added,
repaired, replaced or removed) the store is rebuilt. Files behind a remote backend (``s3://``...)
are not re-checked: delete the store after changing them.
"""
import errno
import fcntl
import hashlib
import json
import os
import os.path as osp
import re
import stat
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Callable, Iterator, Optional, Union

import numpy as np
from mmengine import fileio
from mmengine.logging import print_log

from .._native import _C
from .coco_columns import (IMAGE_NAME_SOURCES, CocoColumns, name_images, native_reader_available,
                           read_columns, validate_columns)
from .coco_store_layout import (IMAGE_ID_JSON_BYTES, IMAGE_ID_JSON_OFFSETS, LAYOUT_VERSION,
                                coco_to_columns, columns_to_sections)
from ..io import open_regular_file
from .validation import AnnotationFileError, DuplicateIdError, parse_coco_json

StoreError = _C.StoreError
STORE_SUFFIX = '.mdxstore'
# Sections a validated store carries beside the COCO layout (see _validation_sections).
CHECKED_FILES = 'checked_file_bytes'  # the judged files' paths, NUL-separated
CHECKED_STATES = 'checked_file_state'  # [N, 2] int64: size, mtime_ns; -1, -1 when missing
MISSING_IMAGES = 'missing_images'  # [missing, checked] int64
MISSING_EXAMPLE = 'missing_image_example'  # one missing path, bytes
# [listed images, listed instances, dropped images, dropped instances] int64: what the json
# lists and what validation left out (the store holds the rest).
VALIDATION_COUNTS = 'validation_counts'
PROBLEMS_SUFFIX = '.problems.jsonl'
# Only where the folder itself cannot be locked (NFS); removed by its holder before it lets go.
FOLDER_LOCK_NAME = '.mdxstore.lock'
# Which json reader builds stores: 'native' (rapidjson streaming, the default where the build has
# it) or 'python' (json.loads, the reference; also what a build without rapidjson uses).
JSON_READER_ENV = 'MMDET_EXT_JSON_READER'
HASH_CHUNK = 8 << 20
# The json's identity when its store was built (see _find_by_identity): int64 [5].
JSON_IDENTITY = 'json_identity'
IDENTITY_SETTLE_S = 2.0
LOCK_NOTE_INTERVAL_S = 30.0


class AnnotationStore:
    """Read-only view of one store file: named numpy arrays backed by a shared mapping.

    Pickles as its path (workers started with ``spawn`` re-map the same file; forked ones
    inherit the mapping), never as its data. While it lives it holds a shared ``flock`` on the
    file, which tells ``open_store`` not to prune it: forked workers inherit the descriptor and so
    the lock, spawned ones take their own when they re-open the path.
    """

    def __init__(self, path: str, verify: bool = True) -> None:
        self.path = path
        # Lock, then map: open_store prunes a store only while nobody holds this lock.
        fd = _open_locked_shared(path)
        try:
            self._mapped = _C.MappedStore(path, verify)
            self.key = self._mapped.key()
            self.arrays: dict[str, np.ndarray] = {}
            for name, array in self._mapped.sections():
                array.flags.writeable = False  # the mapping is read-only; fail loudly, not SIGSEGV
                self.arrays[name] = array
            version = self.arrays.get('layout_version')
            if version is None or int(version[0]) != LAYOUT_VERSION:
                raise StoreError(f'annotation store {path}: layout version '
                                 f'{None if version is None else int(version[0])}, this build '
                                 f'reads {LAYOUT_VERSION}')
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        if fd is not None:
            weakref.finalize(self, os.close, fd)

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

    def image_id(self, row: int) -> Union[int, str, float, bool, None]:
        """The json's id of image ``row``, as mmdet's ``CocoDataset`` gives it in ``img_id``
        (a string stays a string; ``coco_store_layout``'s layout 3)."""
        if IMAGE_ID_JSON_BYTES not in self.arrays:
            return int(self.arrays['image_id'][row])
        offsets = self.arrays[IMAGE_ID_JSON_OFFSETS]
        return json.loads(self.text(IMAGE_ID_JSON_BYTES, int(offsets[row]), int(offsets[row + 1])))

    def file_name(self, row: int) -> str:
        """``file_name`` of image ``row``."""
        offsets = self.arrays['file_name_offsets']
        return self.text('file_name_bytes', int(offsets[row]), int(offsets[row + 1]))


def write_store(path: str, sections: dict[str, np.ndarray], key: bytes) -> None:
    """Atomically write ``sections`` (named 1-D/2-D arrays) to a store file."""
    # np.require copies only what is not C-contiguous already.
    _C.write_store(path, [(name, np.require(array, requirements=['C']))
                          for name, array in sections.items()], key)


def _open_locked_shared(path: str) -> Optional[int]:
    """A descriptor of ``path`` holding a shared ``flock``; None if it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # _C.MappedStore names the problem
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        pass  # a filesystem without flock: the pruner cannot lock either, so it deletes nothing
    return fd


def _store_location(ann_file: str, cache_dir: Optional[str]) -> tuple[str, str]:
    """The directory for ``ann_file``'s stores and the stem of their names (see module doc)."""
    json_dir = None if '://' in ann_file else osp.dirname(osp.abspath(ann_file))
    for directory in (cache_dir, json_dir,
                      osp.join(osp.expanduser('~'), '.cache', 'mmdet_ext', 'stores')):
        if directory is None:
            continue
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError:
            continue
        if not os.access(directory, os.W_OK):
            continue
        stem = osp.basename(ann_file)
        if json_dir is None or not osp.samefile(directory, json_dir):
            source = ann_file if json_dir is None else osp.realpath(ann_file)
            stem += '.' + hashlib.sha256(source.encode()).hexdigest()[:8]
        return directory, stem
    raise OSError(f'no writable directory to cache the annotation store of {ann_file}')


def _store_name(stem: str, json_hex: str, args_hex: Optional[str]) -> str:
    """``<stem>.<json sha256[:12]>[-<validation args sha256[:8]>].mdxstore``"""
    args = '' if args_hex is None else f'-{args_hex[:8]}'
    return f'{stem}.{json_hex[:12]}{args}{STORE_SUFFIX}'


@contextmanager
def _folder_lock(directory: str) -> Iterator[None]:
    """One process checks, builds and prunes stores in ``directory`` at a time (workers, ranks,
    jobs); the others wait.

    The lock is an ``flock`` on the directory itself, so nothing is left behind. NFS emulates
    ``flock`` with a write lock, which needs a descriptor open for writing (a directory never is);
    there a lock file is used instead, deleted by its holder before it lets go.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _wait_for_lock(fd, directory)
    except OSError as err:
        os.close(fd)
        if err.errno not in (errno.EBADF, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        lock_path = osp.join(directory, FOLDER_LOCK_NAME)
        fd = _lock_file(lock_path)
        try:
            yield
        finally:
            try:
                os.unlink(lock_path)
            finally:
                os.close(fd)
        return
    try:
        yield
    finally:
        os.close(fd)


def _wait_for_lock(fd: int, what: str) -> None:
    """Take an exclusive ``flock`` on ``fd``, saying so while another process holds it (a rank
    building a large store can take a minute; a silent wait looks like a hang).

    The wait itself is a blocking ``flock`` (the kernel wakes the waiter the moment the lock is
    free, and /proc/locks shows it blocked); a thread writes the notes meanwhile.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    start = time.monotonic()
    done = threading.Event()

    def note_while_waiting() -> None:
        while True:
            print_log(f'Waiting for another process (worker, rank or job) to finish checking or '
                      f'building an annotation store in {what} '
                      f'({time.monotonic() - start:.0f} s so far)', logger='current', level=20)
            if done.wait(LOCK_NOTE_INTERVAL_S):
                return

    notes = threading.Thread(target=note_while_waiting, name='StoreLockNotes', daemon=True)
    notes.start()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        done.set()
        notes.join()
    print_log(f'Done waiting for {what} after {time.monotonic() - start:.1f} s',
              logger='current', level=20)


def _lock_file(path: str) -> int:
    """A descriptor holding an exclusive ``flock`` on the file now at ``path`` (created if need be).

    A waiter may get the lock on a file its holder has just deleted; it then starts again.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _wait_for_lock(fd, path)
            if osp.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _prune(directory: str, stem: str, json_hex: str) -> None:
    """Delete the stores in ``directory`` of earlier contents of this json, unless in use.

    Runs under the folder lock: a temporary file of a store (``<store>.tmp.<pid>``) is then one a
    killed builder left. A store whose json digest is not ``json_hex`` can never be opened again;
    it is deleted only if no process holds it (an exclusive ``flock`` succeeds), its problem
    report with it. Stores of this json built with other validation arguments are kept.
    """
    pattern = re.compile(rf'{re.escape(stem)}\.([0-9a-f]{{12}})(?:-[0-9a-f]{{8}})?'
                         rf'{re.escape(STORE_SUFFIX)}(\.tmp\.\d+|{re.escape(PROBLEMS_SUFFIX)})?')
    matches = [match for match in map(pattern.fullmatch, os.listdir(directory)) if match]
    for match in sorted(matches, key=lambda m: m.group(2) is not None):  # stores first
        path = osp.join(directory, match.group(0))
        tail = match.group(2)
        if tail is not None and tail.startswith('.tmp.'):
            _delete(path)
        elif match.group(1) == json_hex[:12]:
            continue
        elif tail is None:
            if _delete_unless_in_use(path):
                print_log(f'Deleted the annotation store {path}: its json has changed',
                          logger='current', level=20)
        elif not osp.exists(path[:-len(tail)]):
            _delete(path)  # the report of a deleted store


def _delete(path: str) -> None:
    with suppress(OSError):  # gone already, or not ours to delete: it stays
        os.unlink(path)


def _delete_unless_in_use(path: str) -> bool:
    """Delete ``path`` if no process holds an ``flock`` on it; True if it was deleted."""
    try:
        # Open for writing where allowed: NFS needs it for the exclusive lock.
        fd = os.open(path, os.O_RDWR if os.access(path, os.W_OK) else os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
    except OSError:
        return False  # in use, or no way to tell: keep it
    finally:
        os.close(fd)
    return True


def _changed_file(store: AnnotationStore) -> Optional[str]:
    """A file the store's validation judged that differs now (see module doc), or None.

    One ``stat`` per file, in a tight loop over the stored bytes (COCO-train: 118k files; the
    per-file Python overhead used to cost more than the stats).
    """
    if CHECKED_STATES not in store.arrays:
        return None
    if not len(store[CHECKED_FILES]):
        return None
    paths = store[CHECKED_FILES].tobytes().split(b'\0')
    states = store[CHECKED_STATES]
    stat_file = os.stat
    for path, size, mtime in zip(paths, states[:, 0].tolist(), states[:, 1].tolist()):
        try:
            st = stat_file(path)
        except OSError:
            if size != -1:
                return os.fsdecode(path)
            continue
        if st.st_size != size or st.st_mtime_ns != mtime:
            return os.fsdecode(path)
    return None


def _open_cached(store_path: str, key: bytes) -> Optional[AnnotationStore]:
    """The store at ``store_path`` if it is sound, holds ``key`` and its judged files are as they
    were; else None (logged)."""
    if not osp.exists(store_path):
        return None
    try:
        store = AnnotationStore(store_path)
        changed = _changed_file(store)
        if store.key != key:
            problem = 'it was built from different annotations'
        elif changed is not None:
            problem = (f'{changed} has changed since the store was built (added, removed or '
                       'rewritten), so its validation is out of date')
        else:
            return store
    except StoreError as err:
        problem = str(err)
    print_log(f'Rebuilding the annotation store {store_path}: {problem}',
              logger='current', level=30)
    return None


def _validation_sections(report) -> dict[str, np.ndarray]:
    """What a validated store keeps of its validation: judged files' states, missing images."""
    paths = list(report.file_states)
    return {
        CHECKED_FILES: np.frombuffer(b'\0'.join(os.fsencode(p) for p in paths), dtype=np.uint8),
        CHECKED_STATES: np.array([report.file_states[p] for p in paths],
                                 dtype=np.int64).reshape(-1, 2),
        MISSING_IMAGES: np.array([report.missing_images, report.images_checked], dtype=np.int64),
        VALIDATION_COUNTS: np.array([report.listed_images, report.listed_instances,
                                     report.dropped_images, report.dropped_instances],
                                    dtype=np.int64),
        MISSING_EXAMPLE: np.frombuffer(report.missing_example.encode('utf-8', 'surrogateescape'),
                                       dtype=np.uint8),
    }


def json_reader() -> str:
    """'native' or 'python': which reader builds stores (``MMDET_EXT_JSON_READER`` decides)."""
    wanted = os.environ.get(JSON_READER_ENV, '')
    if wanted not in ('', 'native', 'python'):
        raise ValueError(f'{JSON_READER_ENV}={wanted!r}; expected native or python')
    if wanted == 'python' or not native_reader_available():
        if wanted == 'native':
            raise RuntimeError(f'{JSON_READER_ENV}=native but this build of mmdet_ext has no '
                               'rapidjson (apt-get install rapidjson-dev, then rebuild)')
        return 'python'
    return 'native'


def _read_native(source: Union[bytes, str], store_path: str, ann_file: str,
                 record_starts: bool,
                 progress: Optional[Callable[[int, int], None]],
                 image_names: str = 'file_name') -> CocoColumns:
    """Columns of a json file, or of json bytes (written to a temporary file beside the store)."""
    if isinstance(source, str):
        return read_columns(source, record_starts, progress, image_names)
    temporary = f'{store_path}.json.tmp.{os.getpid()}'
    try:
        with open(temporary, 'wb') as f:
            f.write(source)
        try:
            return read_columns(temporary, record_starts, progress, image_names)
        except AnnotationFileError as err:
            raise AnnotationFileError(str(err).replace(temporary, ann_file)) from None
    finally:
        _delete(temporary)


def _with_mmdet_duplicate_message(error: DuplicateIdError, ann_file: str) -> DuplicateIdError:
    """``error``, led by mmdet's own words when annotation ids repeat.

    mmdet's ``CocoDataset``/``LVISV1Dataset`` assert ``Annotation ids in '{ann_file}' are not
    unique!`` (read from mmdet 3.3.0) and code and tests match that text; ours keeps its listing
    of every duplicate after it. Duplicate image ids alone (mmdet does not check them) keep our
    message only. The listing names the first 20 problems, images first: with more than 20
    duplicate image ids, repeated annotation ids are not seen here.
    """
    if 'duplicate_ann_id:' not in str(error):
        return error
    return DuplicateIdError(f"Annotation ids in '{ann_file}' are not unique! {error}")


def build_store(source: Union[bytes, str, CocoColumns], store_path: str, key: bytes,
                progress: Optional[Callable[[int, int], None]] = None,
                validation: Optional[dict] = None,
                backend_args: Optional[dict] = None,
                ann_file: Optional[str] = None,
                json_identity: Optional[tuple[int, ...]] = None,
                image_names: str = 'file_name') -> AnnotationStore:
    """Read a COCO json (a local path, its bytes, or its columns), validate it if asked, and
    write its store.

    ``image_names``: where image file names come from (``coco_columns.name_images``; columns
    passed in must have been read with the same value).

    The native reader (``json_reader()``) streams the file into columns and validates them
    without per-record Python objects (``coco_columns``); the Python reader parses it with
    ``json.loads``. Both give the same store and the same report.

    With ``validation``, problems found are written to ``<store_path>.problems.jsonl``; when none
    are, a report left by an earlier build of this store is deleted.

    Raises:
        AnnotationFileError: the bytes are not a COCO json (the message names ``ann_file``).
    """
    ann_file = ann_file or (source if isinstance(source, str) else store_path)
    if isinstance(source, CocoColumns):  # read already (open_store reads while it hashes)
        columns = source
        source = None  # the columns are freed as soon as the sections exist
    elif json_reader() == 'native':
        columns = _read_native(source, store_path, ann_file, validation is not None, progress,
                               image_names)
    else:
        data = source if isinstance(source, bytes) else _read_bytes(source)
        columns = coco_to_columns(parse_coco_json(data, ann_file), ann_file)
        del data
        name_images(columns, image_names, from_file=False)
    keep_images = keep_anns = None
    extra: dict[str, np.ndarray] = {}
    if validation is not None:
        try:
            keep_images, keep_anns, report = validate_columns(columns, backend_args=backend_args,
                                                              **validation)
        except DuplicateIdError as error:
            raise _with_mmdet_duplicate_message(error, ann_file) from None
        extra = _validation_sections(report)
        problems_path = store_path + PROBLEMS_SUFFIX
        if report.problems:
            report.write_jsonl(problems_path)
        else:
            _delete(problems_path)
        print_log(f'Annotation store {store_path}: {report.summary()}'
                  + (f'; details in {problems_path}' if report.problems else ''),
                  logger='current', level=30 if report.problems else 20)
    sections = columns_to_sections(columns, keep_images, keep_anns)
    del columns
    if json_identity is not None:
        extra[JSON_IDENTITY] = np.array(json_identity, dtype=np.int64)
    sections.update(extra)
    write_store(store_path, sections, key)
    del sections  # before the store's pages are mapped and checked
    return AnnotationStore(store_path)


def _read_bytes(path: str) -> bytes:
    with os.fdopen(open_regular_file(path), 'rb') as f:
        return f.read()


def _hash_file(path: str) -> tuple['hashlib._Hash', tuple[int, ...]]:
    """SHA-256 of a local regular file read in chunks (never all in memory), and its identity.

    Raises what ``open_regular_file`` raises for a missing file, a pipe, a device, a directory.
    """
    digest = hashlib.sha256()
    with os.fdopen(open_regular_file(path), 'rb') as f:
        identity = _identity(os.fstat(f.fileno()))
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest, identity


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """What changes whenever a file's contents may have: device, inode, size, mtime, ctime.

    ctime cannot be set back by the user (``touch -d`` and ``os.utime`` set it to now), so an
    equal identity means an unwritten file; see ``_find_by_identity`` for the racy case.
    """
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _find_by_identity(directory: str, stem: str, args_hex: Optional[str],
                      identity: tuple[int, ...]) -> Optional[tuple[str, str]]:
    """(path, json digest[:12]) of a store built from the json whose identity is ``identity``.

    Why: hashing the json on every open costs 2 s per GB (more than everything else a cached open
    does); a store records the json's identity (``JSON_IDENTITY``) when it was built, and an equal
    identity now means the same bytes. Stores built while the json was written within the last
    ``IDENTITY_SETTLE_S`` seconds record none (a write in the same timestamp tick could go unseen),
    and the json is hashed as before.
    """
    args = '' if args_hex is None else f'-{args_hex[:8]}'
    pattern = re.compile(rf'{re.escape(stem)}\.([0-9a-f]{{12}}){re.escape(args)}'
                         rf'{re.escape(STORE_SUFFIX)}')
    for name in os.listdir(directory):
        match = pattern.fullmatch(name)
        if match is None:
            continue
        path = osp.join(directory, name)
        try:
            recorded = AnnotationStore(path, verify=False).arrays.get(JSON_IDENTITY)
        except StoreError:
            continue
        if recorded is not None and tuple(int(v) for v in recorded) == identity:
            return path, match.group(1)
    return None


def open_store(ann_file: str, cache_dir: Optional[str] = None,
               backend_args: Optional[dict] = None,
               progress: Optional[Callable[[int, int], None]] = None,
               validation: Optional[dict] = None,
               image_names: str = 'file_name') -> AnnotationStore:
    """The store of ``ann_file``: opened from the cache, or built (once) if missing or invalid.

    Stores of earlier contents of ``ann_file`` that no process holds are deleted (module doc).

    Args:
        ann_file: a COCO instances json (any mmengine file backend).
        cache_dir: where to keep the store; default next to ``ann_file`` (else ~/.cache).
        backend_args: mmengine file backend arguments for reading ``ann_file``.
        progress: called as ``progress(done, total)`` while building: bytes of the json read
            (native reader), or annotations stored (Python reader).
        validation: ``validate_coco`` keyword arguments (json-serializable), or None to store the
            json unchecked.
        image_names: ``'file_name'`` (COCO) or ``'coco_url'`` (LVIS v1: the name is the url
            without ``http://images.cocodataset.org/``, as mmdet's ``LVISV1Dataset`` makes it);
            see ``coco_columns.name_images``. Part of the store's key and name when not the
            default, so both kinds of store of one json live side by side.
    """
    if image_names not in IMAGE_NAME_SOURCES:
        raise ValueError(f'image_names must be one of {IMAGE_NAME_SOURCES}, not {image_names!r}')
    args_hex = args = None
    if validation is not None:
        args = json.dumps(validation, sort_keys=True).encode()
    if image_names != 'file_name':  # default stores keep their existing keys and names
        args = (args or b'') + b'\0image_names=' + image_names.encode()
    if args is not None:
        args_hex = hashlib.sha256(args).hexdigest()
    directory, stem = _store_location(ann_file, cache_dir)
    local = not ('://' in ann_file or backend_args)
    try:
        current = _identity(os.stat(ann_file)) if local else None
    except OSError:
        current = None  # _hash_file names the problem
    with _folder_lock(directory):
        if current is not None:  # a store recording the json's identity: no need to hash it
            found = _find_by_identity(directory, stem, args_hex, current)
            if found is not None:
                path, json_hex = found
                store = _open_cached(path, AnnotationStore(path, verify=False).key)
                if store is not None:
                    _prune(directory, stem, json_hex)
                    return store
        # Hash the json and, at the same time, read it natively in a thread (both release the
        # GIL): the read is needed unless a store of this content exists (its json was touched or
        # copied), which is rare. Only a regular file: reading a pipe could block for ever.
        pool = speculative = None
        if current is not None and stat.S_ISREG(os.stat(ann_file).st_mode) \
                and json_reader() == 'native':
            pool = ThreadPoolExecutor(1, thread_name_prefix='mmdet_ext_json')
            speculative = pool.submit(read_columns, ann_file, validation is not None, progress,
                                      image_names)
        try:
            source: Union[bytes, str, CocoColumns]
            identity = None
            if not local:
                source = fileio.get(ann_file, backend_args=backend_args)
                json_digest = hashlib.sha256(source)
            else:  # never blocks on a pipe, never reads a device or a directory, never holds it
                source = ann_file
                json_digest, identity = _hash_file(ann_file)
            key_digest = json_digest.copy()
            if args is not None:
                key_digest.update(args)
            key = key_digest.digest()
            store_path = osp.join(directory, _store_name(stem, json_digest.hexdigest(), args_hex))
            record = None
            if identity is not None and time.time_ns() - identity[4] > IDENTITY_SETTLE_S * 1e9:
                record = identity
            store = _open_cached(store_path, key)
            if store is None:
                if speculative is not None:
                    source = speculative.result()
                    speculative = None  # the future held the columns too
                # Passed on without keeping a reference here: build_store frees the columns.
                box = [source]
                del source
                store = build_store(box.pop(), store_path, key, progress, validation,
                                    backend_args, ann_file, record, image_names)
                if identity is not None and _identity(os.stat(ann_file)) != identity:
                    # The json was rewritten while it was hashed and read: the store may hold
                    # another version than its key says. Start over (new contents, new key).
                    del store
                    _delete(store_path)
                    raise StoreError(f'{ann_file} changed while its annotation store was being '
                                     'built; open it again once it is written')
            _prune(directory, stem, json_digest.hexdigest())
        finally:
            if pool is not None:
                pool.shutdown(wait=True)  # a read we did not need still runs to its end
    return store
