"""The output folder's lock on its own: taken, refused, released, and the race of a lock file
removed by its holder while another build has it open."""

from __future__ import annotations

import errno
import fcntl
import os

import pytest

from beam_tfrecord import output_lock
from beam_tfrecord.config import ConfigError
from beam_tfrecord.output_lock import LOCK_FILE, is_lockable, lock_output, release_output


def _locked_elsewhere(path) -> bool:
    """Whether another open file description cannot take the lock at `path` now."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        assert err.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        return True
    finally:
        os.close(fd)
    return False


def test_the_lock_is_taken_in_a_new_folder_and_its_file_goes_with_it(tmp_path):
    out = tmp_path / "a" / "out"
    lock_output(str(out))
    try:
        assert _locked_elsewhere(out / LOCK_FILE)
        assert (out / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        lock_output(str(out))  # held by this process already: kept, not refused
    finally:
        release_output(str(out))
    assert list(out.iterdir()) == []
    release_output(str(out))  # not held: nothing


def test_a_failed_build_removes_the_folder_its_lock_made_only_if_it_is_empty(tmp_path):
    made, kept, existing = tmp_path / "made", tmp_path / "kept", tmp_path / "existing"
    existing.mkdir()
    for out in (made, kept, existing):
        lock_output(str(out))
    (kept / "report.part").write_text("written before the failure\n")
    for out in (made, kept, existing):
        release_output(str(out), failed=True)
    assert not made.exists()
    assert [p.name for p in kept.iterdir()] == ["report.part"]
    assert existing.is_dir() and list(existing.iterdir()) == []
    # A build that ends well keeps the folder it made, empty or not.
    lock_output(str(made))
    release_output(str(made))
    assert made.is_dir()


def test_a_folder_locked_by_another_holder_is_refused_naming_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"77\n")
        with pytest.raises(ConfigError, match=r"another build \(process 77\) is writing there"):
            lock_output(str(out))
        assert (out / LOCK_FILE).read_text() == "77\n"
    finally:
        os.close(fd)


def test_a_lock_on_a_file_its_holder_removed_meanwhile_does_not_count(tmp_path, monkeypatch):
    """Build A ends (removes the lock file, then releases) between B's open and B's lock: B
    then locks a file that is no longer at the name, where C would make and lock a new one.
    B must see that and lock the file at the name."""
    out = tmp_path / "out"
    out.mkdir()
    path = out / LOCK_FILE
    a = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(a, fcntl.LOCK_EX)
    opened = output_lock._open

    def open_then_a_ends(name):
        fd = opened(name)
        if a_open:
            os.unlink(path)  # what release_output does, in this order
            os.close(a)
            a_open.clear()
        return fd

    a_open = [True]
    monkeypatch.setattr(output_lock, "_open", open_then_a_ends)
    lock_output(str(out))
    try:
        assert not a_open, "the race did not happen"
        assert path.exists(), "B holds a lock on a file no other build can see"
        assert _locked_elsewhere(path), "a build C could take the lock beside B"
    finally:
        release_output(str(out))


def test_object_stores_are_not_locked():
    assert is_lockable("relative/out") and is_lockable("file:///tmp/out")
    assert not is_lockable("memory://out")
    assert not is_lockable("gs://bucket/out")


def test_without_flock_the_package_still_imports_and_no_output_is_lockable(tmp_path):
    """Where `fcntl` does not exist (not POSIX), a build goes on unlocked: importing the lock
    module, and with it every build, must not fail."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['fcntl'] = None\n"  # `import fcntl` then raises ImportError
        "from beam_tfrecord.output_lock import is_lockable\n"
        "import beam_tfrecord.checks, beam_tfrecord.commands.build\n"
        f"print(is_lockable({str(tmp_path)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
