"""Metadata a build holds between its steps, kept in a file instead of memory (a spool).

An in-process runner (the DirectRunner's FnApiRunner, in memory) keeps every element a step
outputs until the next step has read them all: the whole listing, then the whole plan, grouped
by planning bucket, then by shard, each as compressed batches of about 20 bytes an image, and
each held in two or three copies while a step reads it. At a million images that was 150 MB of
the launcher's memory at once, growing with the collection. With a spool open (`spooling`), a
batch's bytes go to a file as they are made (`hold`), and what the runner holds and copies is a
reference of a few dozen bytes to them, read back where a step needs the batch: the launcher's
memory stays flat in the collection's size, and the page cache keeps what is read soon.

A spool serves one build on one machine: its references name a file of this machine, which the
build's worker processes read too. Without a spool (a distributed runner, whose shuffles keep
their data off the heap anyway), `hold` keeps the bytes themselves, and a reference carries
them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Iterator

from beam_tfrecord.compat import process_running

__all__ = ["Held", "hold", "spooling"]

_PREFIX = "beam-tfrecord-spool-"
_INLINE, _SPOOLED = b"\0", b"\1"
_REF = struct.Struct("<QI")  # offset, length


class _Spool:
    """A file that bytes are appended to, each part read back by its offset and length."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, "spool")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self._end = 0
        self._lock = threading.Lock()
        _open[self.path] = self._fd

    def put(self, data: bytes) -> int:
        with self._lock:  # each writer its own range; the writes themselves run at once
            offset = self._end
            self._end += len(data)
        written = os.pwrite(self._fd, data, offset)
        while written < len(data):
            written += os.pwrite(self._fd, memoryview(data)[written:], offset + written)
        return offset

    def close(self) -> None:
        """Closes the file and removes its folder: what it held is gone."""
        _open.pop(self.path, None)
        os.close(self._fd)
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


# The spool this process writes to, while one is open (`spooling`).
_current: _Spool | None = None
# Spool files this process reads, by path: opened once each (a worker process reads the
# launcher's), and the open one of this process's own spool.
_open: dict[str, int] = {}
_open_lock = threading.Lock()


class Held:
    """Bytes as `hold` kept them: here, or in a spool file, read on each `data`."""

    __slots__ = ("_data", "_length", "_offset", "_path")

    def __init__(self, data: bytes | None, path: str = "", offset: int = 0, length: int = 0):
        self._data = data
        self._path, self._offset = path, offset
        self._length = len(data) if data is not None else length

    @property
    def data(self) -> bytes:
        if self._data is not None:
            return self._data
        return _read(self._path, self._offset, self._length)

    def __len__(self) -> int:
        return self._length

    def encoded(self) -> bytes:
        """What a runner holds and moves of it: a reference, or the bytes themselves."""
        if self._data is not None:
            return _INLINE + self._data
        return _SPOOLED + _REF.pack(self._offset, self._length) + os.fsencode(self._path)

    def encoded_size(self) -> int:
        """len(self.encoded()), without encoding."""
        if self._data is not None:
            return 1 + self._length
        return 1 + _REF.size + len(os.fsencode(self._path))

    @classmethod
    def decoded(cls, encoded: bytes) -> Held:
        if encoded[:1] == _INLINE:
            return cls(encoded[1:])
        offset, length = _REF.unpack_from(encoded, 1)
        return cls(None, os.fsdecode(encoded[1 + _REF.size :]), offset, length)

    def __reduce__(self):
        return Held.decoded, (self.encoded(),)

    def __eq__(self, other) -> bool:
        return isinstance(other, Held) and self.data == other.data

    def __repr__(self) -> str:
        where = "here" if self._data is not None else f"{self._path}@{self._offset}"
        return f"Held(<{self._length} bytes {where}>)"


def hold(data: bytes) -> Held:
    """`data`, in the spool this process has open (`spooling`), else as it is."""
    spool = _current
    if spool is None:
        return Held(data)
    return Held(None, spool.path, spool.put(data), len(data))


def _read(path: str, offset: int, length: int) -> bytes:
    fd = _open.get(path)
    if fd is None:
        with _open_lock:
            fd = _open.get(path)
            if fd is None:
                fd = _open[path] = os.open(path, os.O_RDONLY)
    data = os.pread(fd, length, offset)
    while len(data) < length:  # a pread of a regular file is short only at its end
        more = os.pread(fd, length - len(data), offset + len(data))
        if not more:
            raise OSError(f"{path}: {length} bytes at {offset} were never written")
        data += more
    return data


@contextlib.contextmanager
def spooling(enabled: bool = True) -> Iterator[None]:
    """While within, `hold` keeps bytes in this process's spool file. Builds that run at once in
    one process (a program's threads, a test's build within a build) share it, and it goes with
    the last of them; the spools of processes that ended without removing theirs (killed) go
    when one starts."""
    if not enabled:
        yield
        return
    _enter()
    try:
        yield
    finally:
        _leave()


_users = 0
_users_lock = threading.Lock()


def _enter() -> None:
    global _current, _users
    with _users_lock:
        if _current is None:
            _sweep()
            folder = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
            try:
                _current = _Spool(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
        _users += 1


def _leave() -> None:
    global _current, _users
    with _users_lock:
        _users -= 1
        if _users or _current is None:
            return
        spool, _current = _current, None
    spool.close()


def _sweep() -> None:
    """Removes the spool folders of processes that are gone."""
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if not name.startswith(_PREFIX):
                continue
            pid = name[len(_PREFIX) :].partition("-")[0]
            if pid.isdigit() and not process_running(int(pid)):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
