"""The spool: a build's metadata between its steps kept in a file, the runner holding references."""

from __future__ import annotations

import errno
import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from beam_tfrecord import spool
from beam_tfrecord.spool import Held, hold, spooling


def test_without_a_spool_the_bytes_are_held_as_they_are():
    held = hold(b"abc" * 100)
    assert held.data == b"abc" * 100
    assert Held.decoded(held.encoded()).data == b"abc" * 100
    assert held.encoded_size() == len(held.encoded())


def test_in_a_spool_a_reference_is_held_and_the_bytes_read_back():
    parts = [bytes([n]) * (1000 + 37 * n) for n in range(50)]
    with spooling():
        helds = [hold(part) for part in parts]
        encoded = [held.encoded() for held in helds]
        # A reference whatever the size: what the runner holds and copies.
        assert max(map(len, encoded)) < 100
        assert [len(e) for e in encoded] == [held.encoded_size() for held in helds]
        assert [Held.decoded(e).data for e in encoded] == parts
        assert [pickle.loads(pickle.dumps(held)).data for held in helds] == parts
        (folder,) = _spool_folders()
    assert not os.path.exists(folder), "the spool outlived its build"


def test_many_threads_hold_at_once_and_each_reads_its_own():
    with spooling(), ThreadPoolExecutor(8) as pool:
        parts = [os.urandom(n % 97 + 1) * 50 for n in range(400)]
        helds = list(pool.map(hold, parts))
        assert list(pool.map(lambda held: held.data, helds)) == parts


def _read_in_a_process(held: Held) -> bytes:
    return held.data


def test_a_worker_process_reads_what_the_launcher_held():
    """A shard's plan goes to the worker process that writes it as references, read there."""
    with spooling():
        held = hold(b"planned entries" * 1000)
        context = multiprocessing.get_context("spawn")
        with context.Pool(1) as pool:
            assert pool.apply(_read_in_a_process, (held,)) == b"planned entries" * 1000


def test_the_spools_of_killed_builds_go_and_a_running_ones_stay(tmp_path, monkeypatch):
    """A spool's file is locked while its build runs, in whatever process (a container's
    process numbers are its own): an unlocked one was left by a build killed outright."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"{spool._PREFIX}1-x1"
    other = tmp_path / "someone-elses"
    for folder in (dead, other):
        folder.mkdir()
        (folder / "spool").write_bytes(b"x")
    running = subprocess.Popen(
        [sys.executable, "-c", _A_RUNNING_BUILD, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        alive = Path(running.stdout.readline().strip())
        with spooling():
            assert not dead.exists()
            assert alive.exists() and other.exists()
    finally:
        running.communicate("")
    assert not alive.exists()


# A build in another process: its spool open until its standard input ends.
_A_RUNNING_BUILD = """
import os, sys, tempfile
tempfile.tempdir = sys.argv[1]
from beam_tfrecord.spool import hold, spooling
with spooling():
    print(os.path.dirname(hold(b"x")._path), flush=True)
    sys.stdin.read()
"""


def test_a_build_within_a_build_shares_its_spool():
    with spooling():
        first = hold(b"one")
        with spooling():
            second = hold(b"two")
        assert first.data == b"one" and second.data == b"two"
        assert len(_spool_folders()) == 1


def test_each_build_thread_has_its_spool_and_other_threads_keep_their_bytes():
    """One build's end must not take the spool from under another still running; and a thread
    that runs no build (a pipeline being made, a runner's own threads) holds its bytes, whose
    references could outlive the spool or leave the machine."""
    first_in, first_out = threading.Event(), threading.Event()
    seen = []

    def first_build():
        with spooling():
            seen.append(hold(b"first's"))
            first_in.set()
            first_out.wait(10)

    thread = threading.Thread(target=first_build)
    thread.start()
    first_in.wait(10)
    assert hold(b"no build here").encoded()[:1] == b"\0"
    with spooling():
        second = hold(b"second's")
        assert len(_spool_folders()) == 2
        first_out.set()
        thread.join(10)  # the first build ended
        assert second.data == b"second's"
        assert len(_spool_folders()) == 1
    assert seen[0].encoded()[:1] == b"\1"
    assert _spool_folders() == []


def test_a_child_forked_during_a_build_neither_writes_nor_removes_its_spool():
    with spooling():
        before = hold(b"parent's")
        pid = os.fork()
        if pid == 0:  # the child: its bytes stay its own, and its end leaves the spool
            code = 0 if hold(b"child's").encoded()[:1] == b"\0" else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert before.data == b"parent's" and hold(b"after").data == b"after"


def test_a_spool_that_takes_no_more_leaves_the_bytes_held_as_they_are(monkeypatch):
    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with spooling():
        monkeypatch.setattr(spool._Spool, "put", full)
        held = hold(b"kept here")
        assert held.data == b"kept here" and held.encoded()[:1] == b"\0"


def test_without_a_temp_folder_to_write_a_build_holds_its_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "not-there"))
    with spooling():
        assert hold(b"kept here").encoded()[:1] == b"\0"


def _spool_folders() -> list[str]:
    root = tempfile.gettempdir()
    mine = f"{spool._PREFIX}{os.getpid()}-"
    return [os.path.join(root, name) for name in os.listdir(root) if name.startswith(mine)]
