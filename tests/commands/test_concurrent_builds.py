"""Two builds never write into one local output folder at the same time: the second is refused
before it writes or removes anything, and the first goes on untouched.

Every test runs the real command in subprocesses, on real files. A build is held in the middle
of writing by an image that is a named pipe, read as a stalled file (tests/stalling_disk): its
shard waits for data the test sends when it is done looking.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from command_process import with_stalling_disk
from imagegen import make_collection

from beam_tfrecord.output_lock import LOCK_FILE
from beam_tfrecord.readahead import usable_cores

from test_command_line import COMMAND, run  # isort: skip

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe"),
]


@pytest.fixture(autouse=True)
def _stalling_disk(monkeypatch):
    """Every build here reads the named pipe as a file whose read stalls until it gets its
    image (a build of its own refuses pipes): see tests/stalling_disk."""
    monkeypatch.setenv("PYTHONPATH", with_stalling_disk(dict(os.environ))["PYTHONPATH"])


# One shard, written one image at a time: once the shard waits on the pipe, nothing in the
# folder changes until the pipe gets its data.
ONE_SHARD = ["--splits", "train=1", "--read-ahead", "0"]
MULTI_PROCESSING = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


@pytest.fixture
def src(tmp_path) -> Path:
    """Images, a list naming them and a named pipe `a/stuck.jpg` (input lists are not checked
    for file types); the pipe's JPEG is in `stuck.bytes`."""
    root = tmp_path / "src"
    images = make_collection(root, {"a": 8, "b": 8}, seed=4)
    os.mkfifo(root / "a" / "stuck.jpg")
    (tmp_path / "stuck.bytes").write_bytes(images["a/a_0000.jpg"])
    _write_list(tmp_path, root)
    return root


def _write_list(tmp_path: Path, root: Path) -> None:
    names = sorted(str(p.relative_to(tmp_path)) for p in root.rglob("*.jpg"))
    (tmp_path / "list.txt").write_text("".join(f"{name}\n" for name in names))


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file below `folder`, hidden ones included, with its content's digest."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


class _BlockedBuild:
    """A build stuck on the named pipe: started, and waited for until its shard reads the pipe."""

    def __init__(self, tmp_path: Path, out: Path, *flags: str):
        self.pipe = tmp_path / "src" / "a" / "stuck.jpg"
        self.lock = out / LOCK_FILE
        self.data = (tmp_path / "stuck.bytes").read_bytes()
        self.process = subprocess.Popen(
            [*COMMAND, "build", "--input-list", "list.txt", "--output", str(out), *flags],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.writer = None
        deadline = time.monotonic() + 240
        while self.writer is None and self.process.poll() is None:
            assert time.monotonic() < deadline, "the build never read the pipe"
            try:  # opening the pipe to write succeeds once a reader has it open
                self.writer = os.open(self.pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as err:
                if err.errno != errno.ENXIO:
                    raise
                time.sleep(0.05)
        assert self.writer is not None, self.process.communicate()[1]

    def finish(self) -> subprocess.CompletedProcess:
        """Sends the pipe its image; returns the build's result."""
        os.set_blocking(self.writer, True)
        os.write(self.writer, self.data)
        os.close(self.writer)
        stdout, stderr = self.process.communicate(timeout=240)
        return subprocess.CompletedProcess(
            self.process.args, self.process.returncode, stdout, stderr
        )

    def kill(self) -> None:
        """SIGKILL to the launcher alone: no handler runs, nothing is cleaned up."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.communicate(timeout=60)
        if os.path.isdir("/proc"):
            # Worker processes it started may outlive it: none of them holds the lock.
            assert _holders(self.lock) == set()
        os.close(self.writer)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.communicate(timeout=60)


def _holders(lock: Path) -> set[int]:
    """The processes that have `lock` open (from /proc)."""
    target = os.path.realpath(lock)
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    found.add(int(pid))
            except OSError:
                continue
    return found


def _assert_refused(done: subprocess.CompletedProcess, out: Path) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"'{out}'" in line and "another build" in line and "is writing there" in line, line


@pytest.mark.parametrize(
    "flags",
    [[], MULTI_PROCESSING],
    ids=["in_memory", "multi_processing"],
)
def test_a_second_build_into_a_folder_being_written_is_refused_and_the_first_completes(
    src, tmp_path, flags
):
    out = tmp_path / "out"
    first = _BlockedBuild(tmp_path, out, *ONE_SHARD, *flags)
    try:
        before = _snapshot(out)
        assert LOCK_FILE in before and any(".tmp-" in name for name in before), before
        if os.path.isdir("/proc"):
            # The launcher alone holds the lock, not the workers it started.
            assert _holders(out / LOCK_FILE) == {first.process.pid}
        # Even --overwrite, which would first discard a finished build's manifest.
        second = run("build", "--input-list", "list.txt", "--output", str(out), "--seed", "3",
                     "--overwrite", *ONE_SHARD, *flags, cwd=tmp_path)  # fmt: skip
        _assert_refused(second, out)
        assert _snapshot(out) == before, "the refused build changed the folder"
        done = first.finish()
    finally:
        first.close()
    assert done.returncode == 0, done.stderr
    # The pipe was listed as empty (its size, 0), so what it then sent is reported as changed.
    assert ": 16 of 17 images" in done.stdout and "source_changed: 1" in done.stdout, done.stdout
    verified = run("verify", str(out), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout
    assert "16 records" in verified.stdout.splitlines()[-1], verified.stdout
    # The lock file went with the build: a finished dataset holds no hidden file.
    assert not [name for name in _snapshot(out) if name.startswith(".")]


@pytest.mark.skipif(usable_cores() < 2, reason="one core: a build writes in-process")
def test_the_lock_stays_with_the_launcher_when_shard_processes_write(src, tmp_path):
    """A plan of 64 MB and more is written by the launcher's own shard processes: two sparse
    40 MB files (they cost no disk, and are reported as no image) make this one that large."""
    for name in ("big0.jpg", "big1.jpg"):
        with open(src / "b" / name, "wb") as f:
            f.truncate(40 * 10**6)
    _write_list(tmp_path, src)
    out = tmp_path / "out"
    sizes = ["--min-shard-size", "30MB", "--max-shard-size", "60MB"]
    first = _BlockedBuild(tmp_path, out, *ONE_SHARD, *sizes, "-v")
    try:
        if os.path.isdir("/proc"):
            assert _holders(out / LOCK_FILE) == {first.process.pid}
        second = run("build", "--input-list", "list.txt", "--output", str(out), "--overwrite",
                     *ONE_SHARD, *sizes, cwd=tmp_path)  # fmt: skip
        _assert_refused(second, out)
        done = first.finish()
    finally:
        first.close()
    assert done.returncode == 0, done.stderr
    assert "writing shards in" in done.stderr and "worker processes" in done.stderr
    assert ": 16 of 19 images" in done.stdout, done.stdout
    verified = run("verify", str(out), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout
    assert not [name for name in _snapshot(out) if name.startswith(".")]


def test_a_build_is_refused_while_another_process_holds_the_lock(src, tmp_path):
    """The lock is the kernel's: held here, by the test, a build is refused and a finished
    build in the folder is left exactly as it was, manifest included; released, it goes on."""
    (src / "a" / "stuck.jpg").unlink()
    _write_list(tmp_path, src)
    out = tmp_path / "out"
    built = run("build", "--input-list", "list.txt", "--output", str(out), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    before = _snapshot(out)
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242\n")
        refused = run("build", "--input-list", "list.txt", "--output", str(out), "--overwrite",
                      "--seed", "3", cwd=tmp_path)  # fmt: skip
        _assert_refused(refused, out)
        assert "(process 4242)" in refused.stderr
        assert _snapshot(out) == {**before, LOCK_FILE: hashlib.sha256(b"4242\n").hexdigest()}
    finally:
        os.close(fd)  # the kernel releases the lock
    rebuilt = run("build", "--input-list", "list.txt", "--output", str(out), "--overwrite",
                  "--seed", "3", cwd=tmp_path)  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert run("verify", str(out), cwd=tmp_path).returncode == 0
    assert LOCK_FILE not in _snapshot(out)


@pytest.mark.parametrize(
    "flags",
    [[], MULTI_PROCESSING],
    ids=["in_memory", "multi_processing"],
)
def test_a_build_killed_with_sigkill_leaves_a_folder_resume_can_finish(src, tmp_path, flags):
    out = tmp_path / "out"
    first = _BlockedBuild(tmp_path, out, *ONE_SHARD, *flags)
    try:
        first.kill()
    finally:
        first.close()
    # The killed build's lock file stays, unlocked: it refuses nothing.
    assert (out / LOCK_FILE).exists()
    pipe = src / "a" / "stuck.jpg"
    data = (tmp_path / "stuck.bytes").read_bytes()
    pipe.unlink()
    pipe.write_bytes(data)
    resumed = run("build", "--input-list", "list.txt", "--output", str(out), "--resume",
                  *ONE_SHARD, *flags, cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    verified = run("verify", str(out), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout
    assert "17 records" in verified.stdout.splitlines()[-1], verified.stdout
    assert not [name for name in _snapshot(out) if name.startswith(".")]


def test_a_killed_build_that_wrote_nothing_else_leaves_a_folder_a_plain_build_takes(src, tmp_path):
    """A build killed right after it took the lock leaves only the (hidden, unlocked) lock file:
    the next build, without --overwrite or --resume, is not refused for it."""
    (src / "a" / "stuck.jpg").unlink()
    _write_list(tmp_path, src)
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
            str(out / LOCK_FILE),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait(timeout=60)
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    built = run("build", "--input-list", "list.txt", "--output", str(out), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert run("verify", str(out), cwd=tmp_path).returncode == 0
    assert LOCK_FILE not in _snapshot(out)


def test_an_interrupted_build_removes_partial_files_only_from_a_folder_it_holds(tmp_path):
    """Interrupted before it took the lock (while it still checked its inputs), a build wrote
    nothing: the half-written files in the folder are the holder's, not its to remove. (No
    real build can be stopped at that point on cue, so this asks the command's check.)"""
    from beam_tfrecord.commands.build import _owns_output
    from beam_tfrecord.output_lock import release_output

    out = tmp_path / "out"
    assert not _owns_output(str(out)), "no folder: nothing of this build's is there"
    assert not out.exists()
    out.mkdir()
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert not _owns_output(str(out))
    finally:
        os.close(fd)
    try:
        assert _owns_output(str(out))  # free: taken, and held through the clean-up
        assert _owns_output(str(out))
    finally:
        release_output(str(out))
    assert _owns_output("gs://bucket/out"), "no lock on object stores: unchanged"
