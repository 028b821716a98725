"""Reading a local source: a file's bytes to its end, and never a wait on what is not a file."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from beam_tfrecord.storage import read_source, special_file_kind


def _read_in_time(path: str) -> bytes | OSError:
    """read_source(path), or the OSError it raised; fails the test if it is still reading after
    5 s (a named pipe opened the plain way waits for a writer for ever)."""
    outcome: list[bytes | OSError] = []

    def read() -> None:
        try:
            outcome.append(read_source(path))
        except OSError as err:
            outcome.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    assert outcome, f"read_source({path!r}) was still reading after 5 s"
    return outcome[0]


@pytest.mark.parametrize("size", [0, 1, 2047, 100_000, 3_000_001])
def test_a_file_is_read_whole(tmp_path, size):
    data = os.urandom(size)
    (tmp_path / "x.jpg").write_bytes(data)
    assert read_source(str(tmp_path / "x.jpg")) == data


def test_a_file_that_grew_since_it_was_sized_is_read_to_its_end(tmp_path, monkeypatch):
    """The first read asks for the size `fstat` gave; bytes appended after it are read too, so
    that the writer sees the file changed (its size is not the listed one)."""
    path = tmp_path / "grows.jpg"
    path.write_bytes(b"a" * 1000)
    real_fstat = os.fstat

    def fstat_then_grow(fd):
        found = real_fstat(fd)
        with open(path, "ab") as f:
            f.write(b"b" * 3_000_000)
        return found

    monkeypatch.setattr(os, "fstat", fstat_then_grow)
    assert read_source(str(path)) == b"a" * 1000 + b"b" * 3_000_000


def test_a_folder_is_an_error_as_open_gives_it(tmp_path):
    err = _read_in_time(str(tmp_path))
    assert isinstance(err, IsADirectoryError) and str(tmp_path) in str(err)


def test_a_named_pipe_is_refused_at_once_and_never_read(tmp_path):
    pipe = tmp_path / "pipe.jpg"
    os.mkfifo(pipe)
    err = _read_in_time(str(pipe))
    assert isinstance(err, OSError)
    assert str(err) == f"{str(pipe)!r} is a named pipe, not a file"
    assert special_file_kind(str(pipe)) == "a named pipe"


def test_a_device_or_socket_is_refused(tmp_path):
    assert str(_read_in_time("/dev/zero")) == "'/dev/zero' is a character device, not a file"
    path = str(tmp_path / "s.jpg")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(path)
        assert special_file_kind(path) == "a socket"
        assert isinstance(_read_in_time(path), OSError)


def test_files_folders_and_missing_paths_are_not_special(tmp_path):
    (tmp_path / "x.jpg").write_bytes(b"x")
    assert special_file_kind(str(tmp_path / "x.jpg")) is None
    assert special_file_kind(str(tmp_path)) is None
    assert special_file_kind(str(tmp_path / "missing.jpg")) is None
    assert isinstance(_read_in_time(str(tmp_path / "missing.jpg")), FileNotFoundError)
