"""A slow disk for benchmarks: a FUSE file system over a directory whose writes are throttled.

Why: the checkpoint benchmark (``checkpoint_stall.py``) measures saves on a target as slow as a
busy NFS share or a network disk. This machine has no device-mapper (no ``dm-delay``) and cgroup
v1 does not throttle buffered writes; a FUSE mount does: every ``write`` reaching it is paced to
``MB_PER_S`` (FUSE writes go through the server, not the page cache), and ``fsync`` and
``rename`` pass through to the directory below.

    python throttled_fs.py BACKING_DIR MOUNTPOINT MB_PER_S     (runs in the foreground)

Needs ``fusepy`` and libfuse 2 (``apt-get install fuse libfuse2``); a benchmark-only tool, never
a dependency of the plugin (``checkpoint_stall.py`` runs it with the python given there).
"""
import errno
import os
import sys
import threading
import time

from fuse import FUSE, FuseOSError, Operations


class ThrottledPassthrough(Operations):
    """The directory ``root``, with writes paced to ``bytes_per_s`` in total."""

    def __init__(self, root: str, bytes_per_s: float) -> None:
        self.root = root
        self.bytes_per_s = bytes_per_s
        self._lock = threading.Lock()
        self._free_at = time.monotonic()  # when the throttled link is next free

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip('/'))

    def __call__(self, op, path, *args):
        try:
            return super().__call__(op, path, *args)
        except OSError as err:
            raise FuseOSError(err.errno or errno.EIO) from err

    def access(self, path, mode):
        if not os.access(self._path(path), mode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        return {key: getattr(st, key) for key in ('st_atime', 'st_ctime', 'st_gid', 'st_mode',
                                                  'st_mtime', 'st_nlink', 'st_size', 'st_uid')}

    def readdir(self, path, fh):
        return ['.', '..', *os.listdir(self._path(path))]

    def statfs(self, path):
        st = os.statvfs(self._path(path))
        return {key: getattr(st, key) for key in ('f_bavail', 'f_bfree', 'f_blocks', 'f_bsize',
                                                  'f_favail', 'f_ffree', 'f_files', 'f_flag',
                                                  'f_frsize', 'f_namemax')}

    def chmod(self, path, mode):
        os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._path(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._path(path), times)

    def mkdir(self, path, mode):
        os.mkdir(self._path(path), mode)

    def rmdir(self, path):
        os.rmdir(self._path(path))

    def unlink(self, path):
        os.unlink(self._path(path))

    def rename(self, old, new):
        os.replace(self._path(old), self._path(new))

    def open(self, path, flags):
        return os.open(self._path(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        with self._lock:
            start = max(self._free_at, time.monotonic())
            self._free_at = start + len(data) / self.bytes_per_s
            wait = self._free_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._path(path), length)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        os.fsync(fh)

    def fsyncdir(self, path, datasync, fh):
        fd = os.open(self._path(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def release(self, path, fh):
        os.close(fh)


if __name__ == '__main__':
    backing, mountpoint, mb_per_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    FUSE(ThrottledPassthrough(os.path.abspath(backing), mb_per_s * 1e6), mountpoint,
         foreground=True, nothreads=True, big_writes=True, max_write=1 << 20)
