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
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Iterator

from beam_tfrecord.compat import process_running

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

_LOG = logging.getLogger(__name__)

__all__ = ["Held", "hold", "spooling"]

_PREFIX = "beam-tfrecord-spool-"
_INLINE, _SPOOLED = b"\0", b"\1"
_REF = struct.Struct("<QI")  # offset, length


class _Spool:
    """A file that bytes are appended to, each part read back by its offset and length.

    Its process holds an exclusive lock on it (where the system has `flock`) while it is
    open: a folder whose spool nobody locks is one to sweep, whatever process numbers say
    (they are not unique across containers that share a temp folder)."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, "spool")
        self.pid = os.getpid()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
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
        """Closes the file and removes its folder: what it held is gone. Only in the process
        that opened it: a child forked meanwhile shares the file, not its end."""
        if os.getpid() != self.pid:
            return
        with _open_lock:
            _open.pop(self.path, None)
            os.close(self._fd)
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


# The spool each thread writes to while it runs a build (`spooling`): the runner's own thread,
# where an in-process runner with one worker runs every bundle. Another thread of the process
# (another build, a pipeline being built, a runner's worker threads) keeps its bytes in its
# elements: its references would outlive the spool, or leave the machine.
_thread = threading.local()
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
    """`data`, in the spool this thread has open (`spooling`), else as it is. A spool that
    cannot take it (its disk full) leaves it as it is, as no spool would."""
    spool = getattr(_thread, "spool", None)
    if spool is None or spool.pid != os.getpid():  # none, or a parent's, forked with it
        return Held(data)
    try:
        return Held(None, spool.path, spool.put(data), len(data))
    except OSError as err:
        _thread.spool = None
        _LOG.debug("the spool %s takes no more (%s): batches are held in memory", spool.path, err)
        return Held(data)


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
    """While within, `hold` on this thread keeps bytes in a spool file of its own, which goes
    at the end; within that, a build within a build (tests) shares it. The spools of builds
    that ended without removing theirs (killed) go when one starts. Without a usable temp
    folder, bytes are held as they are, as without a spool."""
    if not enabled or getattr(_thread, "spool", None) is not None:
        yield
        return
    spool = _opened()
    _thread.spool = spool
    try:
        yield
    finally:
        _thread.spool = None
        if spool is not None:
            spool.close()


def _opened() -> _Spool | None:
    _sweep()
    try:
        folder = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    except OSError as err:
        _LOG.debug("no spool (%s): batches are held in memory", err)
        return None
    try:
        return _Spool(folder)
    except OSError as err:
        shutil.rmtree(folder, ignore_errors=True)
        _LOG.debug("no spool in %s (%s): batches are held in memory", folder, err)
        return None


def _sweep() -> None:
    """Removes the spool folders of builds that are gone: their spool unlocked (or, without
    `flock`, their process ended)."""
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if name.startswith(_PREFIX) and _abandoned(os.path.join(root, name)):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _abandoned(folder: str) -> bool:
    if fcntl is None:
        pid = os.path.basename(folder)[len(_PREFIX) :].partition("-")[0]
        return pid.isdigit() and not process_running(int(pid))
    try:
        fd = os.open(os.path.join(folder, "spool"), os.O_RDONLY)
    except FileNotFoundError:  # being made, or its file already gone: its folder's age says
        return time.time() - os.path.getmtime(folder) > _UNFINISHED_SECONDS
    except OSError:  # another user's: not ours to judge
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # locked: a build is using it
        return False
    finally:
        os.close(fd)
    return True


# A spool folder without its file for this long was left by a build killed as it made it.
_UNFINISHED_SECONDS = 3600
