"""The lock a build holds on its local output folder: no two builds write into one at once.

The lock is the kernel's (`flock`) on a hidden file in the folder, `.beam-tfrecord.lock`: it
is released when the process holding it ends, however it ends, so a crashed or killed build
never leaves a folder that refuses the next build. The file is removed when the build ends,
so that a finished dataset holds no stray file: its holder removes it while still holding the
lock, and a build that takes the lock checks that the file it locked is still the one at that
name (a build that opened the file before it was removed would otherwise hold a lock on a file
no one else can see, beside a second build holding the new one). A killed build leaves the file
behind, unlocked; it is hidden, neither a build nor `verify` takes it for part of a dataset,
and the next build into the folder takes it over and removes it when done.

Object stores have no such lock; their outputs are not locked (docs/guide/output-lock.md).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import threading

import fsspec

from beam_tfrecord.config import ConfigError
from beam_tfrecord.locations import is_local_url
from beam_tfrecord.manifest import SETTINGS_FILE

try:
    import fcntl
except ImportError:  # not POSIX: no flock, and no lock (see `is_lockable`)
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "is_lockable", "lock_output", "release_output"]

_LOG = logging.getLogger(__name__)

LOCK_FILE = ".beam-tfrecord.lock"

# The locks this process holds: the lock file's path -> its open descriptor, and the thread
# whose build holds it. The kernel's lock is the process's: a build on another thread (a
# scheduler's, a notebook's) must be refused here, or it would write beside the first.
_held: dict[str, int] = {}
_holders: dict[str, threading.Thread] = {}
# The lock files whose folders `lock_output` created: a build that fails before it writes
# anything leaves no empty folder behind (`release_output`).
_made: set[str] = set()
_guard = threading.Lock()
# Each retry follows another build's end (or a folder removed): a few are plenty.
_ATTEMPTS = 10


def is_lockable(output: str) -> bool:
    """Whether `output` is a folder on a local filesystem, which the kernel can lock."""
    return fcntl is not None and is_local_url(output)


def _lock_path(output: str) -> str:
    _, path = fsspec.core.url_to_fs(output)
    return os.path.join(os.path.realpath(path), LOCK_FILE)


def lock_output(output: str) -> None:
    """Takes the lock on the local folder `output` for this process, creating the folder.

    Nothing in the folder is written or removed but the lock file. If this thread holds the
    lock already, it keeps it; a build on another thread of this process is refused as one in
    another process is. A filesystem that cannot lock (some network mounts) gets a
    warning, and the build goes on unlocked.

    Raises:
        ConfigError: another process, or another thread of this one, holds the lock, or the
            folder cannot be created.
    """
    path = _lock_path(output)
    with _guard:
        if _held_here(output, path):
            return
        _make_folder(output, path)
        for attempt in itertools.count():
            try:
                fd = _open(path)
            except FileNotFoundError as err:
                if attempt >= _ATTEMPTS:
                    raise ConfigError("output", f"{output!r} cannot be locked: {err}") from None
                os.makedirs(os.path.dirname(path), exist_ok=True)  # removed meanwhile
                continue
            except OSError as err:
                raise ConfigError("output", f"{output!r} is not writable: {err}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = _holder(fd)
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise ConfigError(
                        "output",
                        f"{output!r}: another build{holder} is writing there; wait for it to "
                        "end, or build into another folder",
                    ) from None
                _LOG.warning(
                    "cannot lock %s (%s): another build could write there at the same time",
                    output,
                    err,
                )
                return
            # The holder before us may have removed the file between our open and our lock:
            # then the lock is on a file no other build will open, and does not count.
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            opened = os.fstat(fd)
            if current is not None and (current.st_dev, current.st_ino) == (
                opened.st_dev,
                opened.st_ino,
            ):
                break
            os.close(fd)
            if attempt >= _ATTEMPTS:
                raise ConfigError(
                    "output",
                    f"{output!r}: another build is writing there (its lock file keeps "
                    "being replaced)",
                )
        try:  # who holds it, for the message of a build refused meanwhile
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # opened read-only: the message names no process
            pass
        _held[path] = fd
        _holders[path] = threading.current_thread()


def _held_here(output: str, path: str) -> bool:
    """Whether this thread holds the lock file `path` already (taking it over from a thread
    that has ended: the checks' own, which took it for this build); refused if a live thread
    of this process holds it, as the kernel refuses another process."""
    holder = _holders.get(path)
    if holder is None:
        return False
    if _another_live(holder):
        raise ConfigError(
            "output",
            f"{output!r}: another build in this process (thread {holder.name!r}) is writing "
            "there; wait for it to end, or build into another folder",
        )
    _holders[path] = threading.current_thread()
    return True


def _another_live(holder: threading.Thread | None) -> bool:
    """Whether `holder` is another thread of this process than this one, still running: its
    build holds the lock, which this thread may neither take nor release."""
    return holder is not None and holder is not threading.current_thread() and holder.is_alive()


def _make_folder(output: str, path: str) -> None:
    """Creates the folder of the lock file `path`, if it is not there (`_made` notes it)."""
    try:
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _made.add(path)
    except OSError as err:
        raise ConfigError("output", f"{output!r} is not writable: {err}") from None


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError as err:
        # Left by another user's build that was killed: a read-only descriptor locks as well,
        # and removing the file needs only the folder to be writable.
        try:
            return os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # none there: the folder is not writable
            raise err from None


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (process {pid})" if pid.isdigit() else ""


def release_output(output: str, *, failed: bool = False) -> None:
    """Removes the lock file and releases the lock, if this process holds it for no other
    thread's build; else nothing (a build refused on one thread leaves another's lock alone).

    A build that `failed`, in a folder its lock created, removes the folder too if nothing is
    left in it but the record of its settings: a job its runner refused (an unreachable
    cluster, say) leaves no trace.
    """
    path = _lock_path(output)
    with _guard:
        if _another_live(_holders.get(path)):
            return
        _holders.pop(path, None)
        fd = _held.pop(path, None)
        made = path in _made
        _made.discard(path)
        if fd is None:
            return
        try:
            os.unlink(path)  # while still held: see the module's docstring
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
        if failed and made:
            folder = os.path.dirname(path)
            with contextlib.suppress(OSError):
                # The record of the build's settings, written as it started, alone: no work.
                if os.listdir(folder) == [SETTINGS_FILE]:
                    os.unlink(os.path.join(folder, SETTINGS_FILE))
            with contextlib.suppress(OSError):  # not empty: what the build wrote stays
                os.rmdir(folder)
