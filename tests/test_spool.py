"""The spool: a build's metadata between its steps kept in a file, the runner holding references."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

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
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = tmp_path / f"{spool._PREFIX}{int(gone.stdout)}-x1"
    alive = tmp_path / f"{spool._PREFIX}{os.getppid()}-x2"
    other = tmp_path / "someone-elses"
    for folder in (dead, alive, other):
        folder.mkdir()
        (folder / "spool").write_bytes(b"x")
    with spooling():
        assert not dead.exists()
        assert alive.exists() and other.exists()


def test_a_build_within_a_build_shares_its_spool():
    with spooling():
        first = hold(b"one")
        with spooling():
            second = hold(b"two")
        assert first.data == b"one" and second.data == b"two"
        assert len(_spool_folders()) == 1


def test_builds_that_overlap_in_threads_share_the_spool_until_the_last_ends():
    """One build's end must not take the spool from under another still running."""
    first_in, first_out = threading.Event(), threading.Event()
    held = []

    def first_build():
        with spooling():
            first_in.set()
            first_out.wait(10)

    thread = threading.Thread(target=first_build)
    thread.start()
    first_in.wait(10)
    with spooling():
        held.append(hold(b"second's"))
        first_out.set()
        thread.join(10)  # the first build ended
        assert held[0].data == b"second's"
        assert len(_spool_folders()) == 1
    assert _spool_folders() == []


def _spool_folders() -> list[str]:
    root = tempfile.gettempdir()
    mine = f"{spool._PREFIX}{os.getpid()}-"
    return [os.path.join(root, name) for name in os.listdir(root) if name.startswith(mine)]
