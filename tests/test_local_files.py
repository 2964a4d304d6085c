"""Reading local files: whole regular files only, never blocking on a pipe or reading a device."""
import os

import pytest

from mmdet_ext import ImageLoadError
from mmdet_ext.io import NotRegularFileError, read_regular_file, read_whole_regular_file
from mmdet_ext.transforms.loading import ImageFileNotFoundError, read_image_bytes

READERS = [lambda path: read_regular_file(path)[0], read_whole_regular_file]


@pytest.mark.parametrize('size', [0, 1, 4095, 4096, 50_000, 3 << 20])
def test_whole_file_is_read(tmp_path, size) -> None:
    data = os.urandom(size)
    path = tmp_path / 'file.bin'
    path.write_bytes(data)
    assert read_whole_regular_file(str(path)) == data
    assert read_regular_file(str(path)) == (data, size)


def test_head_and_tail_of_a_large_file(tmp_path) -> None:
    data = os.urandom(10_000)
    path = tmp_path / 'file.bin'
    path.write_bytes(data)
    assert read_regular_file(str(path), head=100, tail=10) == (data[:100] + data[-10:], 10_000)


@pytest.mark.parametrize('read', READERS)
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path, read) -> None:
    fifo = tmp_path / 'pipe.jpg'
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match='named pipe'):
        read(str(fifo))


@pytest.mark.parametrize('read', READERS)
def test_a_directory_and_a_device_are_refused(tmp_path, read) -> None:
    with pytest.raises(NotRegularFileError, match='directory'):
        read(str(tmp_path))
    with pytest.raises(NotRegularFileError, match='character device'):
        read('/dev/zero')


@pytest.mark.parametrize('read', READERS)
def test_nothing_there_is_file_not_found(tmp_path, read) -> None:
    with pytest.raises(FileNotFoundError):
        read(str(tmp_path / 'missing.jpg'))


def test_image_loading_names_the_file_it_cannot_read(tmp_path) -> None:
    fifo = tmp_path / 'pipe.jpg'
    os.mkfifo(fifo)
    with pytest.raises(ImageLoadError, match=f'cannot load {fifo}: .*named pipe'):
        read_image_bytes(str(fifo), None, 1 << 20)
    missing = tmp_path / 'missing.jpg'
    with pytest.raises(ImageFileNotFoundError, match=f'cannot load {missing}: no such file'):
        read_image_bytes(str(missing), None, 1 << 20)
