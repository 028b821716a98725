"""The command line as a new user meets it, one test (or a few) per finding of issue 13.

Every test runs the real command in a subprocess and checks its exit status, what it printed
and what it left on disk.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from command_process import COMMAND, group_is_gone, wide_terminal
from command_process import run_tool as run
from imagegen import make_collection

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[2]


def files_below(path: Path) -> list[str]:
    if not path.exists():
        return []
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def shards_in(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.tfrecord-*") if not p.name.startswith("."))


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src")
    make_collection(root, {"cat": 6, "dog": 6}, seed=3)
    return root


# 1. Typos are refused, before anything is written.


@pytest.mark.parametrize(
    ("flags", "named", "suggested"),
    [
        (["--sed", "3"], "--sed", "--seed"),
        (["--split", "train=0.5,test=0.5"], "--split", "--splits"),
        (["--direct_num_worker=2"], "--direct_num_worker", "--direct_num_workers"),
    ],
    ids=["sed", "split", "beam_option"],
)
def test_1_an_unknown_flag_is_refused_with_the_nearest_one(src, tmp_path, flags, named, suggested):
    out = tmp_path / "out"
    done = run("build", "--input", str(src), "--output", str(out), *flags, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert named in lines[0] and f"did you mean {suggested}?" in lines[0]
    assert not out.exists()


def test_1_the_beam_driver_refuses_typos_too(src, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.images_to_tfrecord", "--input", str(src),
         "--output", str(out), "--sed", "3"],
        cwd=_REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "beam-tfrecord build: error: --sed: no such flag, of this tool or of Beam; "
        "did you mean --seed?"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "typo", "says"),
    [
        ("verify", "--lose", "--lose: no such flag; did you mean --loose?"),
        ("spec", "--jsn", "--jsn: no such flag; did you mean --json?"),
        ("preview", "--colums=3", "--colums: no such flag; did you mean --columns?"),
        ("inspect", "--n=2", "--n: no such flag; did you mean -n?"),
        # Dashes count for nothing in the likeness: --verbose is not --loose, --ab not --scan.
        ("verify", "--verbose", "--verbose: no such flag"),
        ("spec", "--ab", "--ab: no such flag"),
        ("verify", "--zzzz --lose", "no such flags: --zzzz, --lose (did you mean --loose?)"),
    ],
    ids=["verify", "spec", "preview", "short_flag", "nothing_near", "dashes", "two_flags"],
)
def test_1_the_other_commands_name_the_flag_a_typo_meant(src, tmp_path, command, typo, says):
    done = run(command, str(src), *typo.split(), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"beam-tfrecord {command}: error: {says} (see beam-tfrecord {command} --help)\n"
    )


@pytest.mark.parametrize(
    ("command", "abbreviated", "says"),
    [
        ("inspect", "--rec 1", "--rec: no such flag; did you mean --records?"),
        ("inspect", "--rec=1", "--rec: no such flag; did you mean --records?"),
        ("verify", "--loo", "--loo: no such flag; did you mean --loose?"),
        ("spec", "--sc 5", "--sc: no such flag; did you mean --scan?"),
        ("preview", "--over", "--over: no such flag; did you mean --overwrite?"),
        # Too short for the likeness of `nearest`: the flag it begins is named.
        ("inspect", "--comp GZIP", "--comp: no such flag; did you mean --compression?"),
    ],
    ids=["inspect", "inspect_with_equals", "verify", "spec", "preview", "begins_one"],
)
def test_1_every_command_refuses_an_abbreviated_flag_as_build_does(
    src, tmp_path, command, abbreviated, says
):
    """`inspect out/x --rec 1` was taken as --records 1, where `build --split` is refused
    (an abbreviation there could swallow a Beam flag: `test_1_an_unknown_flag_...`): a habit
    one command took, the other refused."""
    done = run(command, str(src), *abbreviated.split(), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"beam-tfrecord {command}: error: {says} (see beam-tfrecord {command} --help)\n"
    )
    assert list(tmp_path.iterdir()) == []


# 2. A bad Beam option or runner: one line, exit 2, nothing created.


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--runner=DirectRunnr"], "Beam has no runner 'DirectRunnr'; did you mean DirectRunner?"),
        (["--direct_num_workers=two"], "--direct_num_workers: invalid int value: 'two'"),
        (["--direct_running_mode", "parallel"], "--direct_running_mode: invalid choice"),
    ],
    ids=["runner", "int_option", "choice_option"],
)
def test_2_a_bad_beam_option_is_one_line_and_creates_nothing(src, tmp_path, flags, says):
    out = tmp_path / "out"
    done = run("build", "--input", str(src), "--output", str(out), *flags, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"beam-tfrecord build: error: {says}"] or (
        len(done.stderr.strip().splitlines()) == 1 and says in done.stderr
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


# 3, 4 and 5: an interrupted build, the same command again, and verify on what it left.


@pytest.fixture(scope="module")
def big_src(tmp_path_factory) -> Path:
    """Enough images, in small enough shards, that a build is still writing after its first
    shard appears."""
    root = tmp_path_factory.mktemp("big")
    make_collection(root, {"a": 150, "b": 150}, seed=5, size=(200, 320))
    return root


BIG_FLAGS = ["--min-shard-size", "40KB", "--max-shard-size", "80KB", "--splits", "train=1"]


def _interrupt(big_src: Path, cwd: Path, out: Path, signum: int, whole_group: bool, *flags):
    """Starts a build, waits for its first finished shard, sends `signum`; returns its result
    and the shards there were when the signal was sent."""
    process = subprocess.Popen(
        [*COMMAND, "build", "--input", str(big_src), "--output", str(out), *BIG_FLAGS, *flags],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell's foreground job has
    )
    deadline = time.monotonic() + 240
    while not shards_in(out) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the build ended before it could be interrupted"
    before = shards_in(out)
    if whole_group:  # Ctrl-C at a terminal: the whole foreground process group gets SIGINT
        os.killpg(process.pid, signum)
    else:  # `kill PID`: the launcher alone, its workers must still go
        os.kill(process.pid, signum)
    stdout, stderr = process.communicate(timeout=60)
    return process.returncode, stdout, stderr, before, process.pid


def _assert_clean_interruption(status, stdout, stderr, before, out, expected_status, name):
    assert status == expected_status, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    # Not on a terminal, a long build logs a progress line every 15 s; then come the two lines.
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("listed ")]
    assert 1 <= len(lines) <= 2, stderr
    assert f"interrupted ({name})" in lines[0]
    assert "finished shard" in lines[0] and "kept in" in lines[0]
    assert lines[-1].startswith("To go on: ") and lines[-1].endswith("--resume")
    # What it finished is kept, and nothing half-written is left under a shard's name.
    kept = shards_in(out)
    assert set(before) <= set(kept)
    assert not (out / "manifest.json").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    return kept, lines[-1][len("To go on: ") :]


@pytest.fixture(scope="module")
def interrupted(big_src, tmp_path_factory):
    """A build stopped by Ctrl-C (SIGINT to its process group) while writing shards."""
    cwd = tmp_path_factory.mktemp("interrupted")
    out = cwd / "out"
    status, stdout, stderr, before, pid = _interrupt(big_src, cwd, out, signal.SIGINT, True)
    assert group_is_gone(pid)
    return cwd, out, status, stdout, stderr, before


def test_3_ctrl_c_keeps_finished_shards_and_says_how_to_go_on(interrupted):
    _cwd, out, status, stdout, stderr, before = interrupted
    _assert_clean_interruption(status, stdout, stderr, before, out, 130, "SIGINT")


def test_3_sigterm_to_the_launcher_ends_its_workers_too(big_src, tmp_path):
    out = tmp_path / "out"
    status, stdout, stderr, before, pid = _interrupt(
        big_src, tmp_path, out, signal.SIGTERM, False, "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
    )  # fmt: skip
    _assert_clean_interruption(status, stdout, stderr, before, out, 143, "SIGTERM")
    # The workers were started in the launcher's process group; none of them is left.
    assert group_is_gone(pid)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_3_a_stop_before_the_build_starts_says_so_in_one_line(tmp_path, signum, status):
    """Stopped while it still reads its settings (here a config file that never arrives: a
    named pipe nobody writes to), a build has written nothing and says so. SIGTERM used to end
    it without a word, where Ctrl-C said "interrupted"."""
    config = tmp_path / "settings.yaml"
    os.mkfifo(config)
    process = subprocess.Popen(
        [*COMMAND, "build", "--config", str(config)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            # Opening a pipe no one writes to waits in the kernel's wait_for_partner: the build
            # is reading its settings. (Without /proc, the deadline stands in.)
            with contextlib.suppress(OSError), open(f"/proc/{process.pid}/wchan") as f:
                if f.read().strip() == "wait_for_partner":
                    break
            time.sleep(0.02)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (process.returncode, stdout, stderr) == (
        status,
        "",
        "beam-tfrecord build: interrupted\n",
    )
    assert files_below(tmp_path) == []  # nothing written (the pipe is not a file)


def test_3_a_build_started_ignoring_ctrl_c_goes_on_ignoring_it(big_src, tmp_path):
    """A job started in the background from a script (`cmd &`) ignores SIGINT, as its starter
    meant; the build used to take Ctrl-C back once it had loaded Beam, and stop."""
    out = tmp_path / "out"
    process = subprocess.Popen(
        [*COMMAND, "build", "--input", str(big_src), "--output", str(out), *BIG_FLAGS],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not shards_in(out) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the build ended before the signal could be sent"
    process.send_signal(signal.SIGINT)
    _stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    assert "interrupted" not in stderr
    assert (out / "manifest.json").exists()


def test_4_running_the_same_command_again_points_to_resume(interrupted, big_src):
    cwd, out, *_ = interrupted
    before = files_below(out)
    done = run("build", "--input", str(big_src), "--output", str(out), *BIG_FLAGS, cwd=cwd)
    assert done.returncode == 2
    assert "holds an interrupted build" in done.stderr
    assert "pass --resume to finish it" in done.stderr
    assert files_below(out) == before


def test_5_verify_calls_a_folder_without_manifest_an_incomplete_build(interrupted):
    cwd, out, *_ = interrupted
    before = files_below(out)
    done = run("verify", str(out), cwd=cwd)
    assert done.returncode == 1
    assert f"INCOMPLETE {out}: a build folder without manifest.json" in done.stdout
    # The shard names say how many there are per split; the missing ones are named.
    assert re.search(r"\d+ shards? missing by their names", done.stdout)
    assert "MISSING" in done.stdout
    assert "1 INCOMPLETE" in done.stdout.splitlines()[-1]
    loose = run("verify", "--loose", str(out), cwd=cwd)
    assert loose.returncode == 0, loose.stdout
    assert "INCOMPLETE" not in loose.stdout
    assert files_below(out) == before


def test_5_verify_given_the_shards_one_by_one_still_calls_the_folder_incomplete(interrupted):
    """`verify 'out/*.tfrecord*'` (or a shell's expansion of it) checked each shard on its own
    and passed an interrupted build, exit 0, where `verify out` calls it INCOMPLETE."""
    cwd, out, *_ = interrupted
    shards = sorted(
        str(p) for p in out.iterdir() if re.search(r"\.tfrecord-\d{5}-of-\d{5}$", p.name)
    )
    assert shards, "the interrupted build kept no shard"
    for given in ([f"{out}/*.tfrecord*"], shards):
        done = run("verify", *given, cwd=cwd)
        assert done.returncode == 1, done.stdout
        assert f"INCOMPLETE {out}: a build folder without manifest.json" in done.stdout
        assert done.stdout.splitlines()[-1].endswith(", 1 INCOMPLETE")
    loose = run("verify", "--loose", *shards, cwd=cwd)
    assert loose.returncode == 0, loose.stdout
    assert "INCOMPLETE" not in loose.stdout


def test_5_verify_names_shards_of_another_build_not_gaps_they_seem_to_leave(interrupted, tmp_path):
    """A shard named -of-N+1 beside a split's -of-N shards (left by another build) made verify
    list N phantom MISSING shards of that other build; which set is this build's the names
    cannot say, so verify says the split is mixed, and how complete each set is."""
    cwd, out, *_ = interrupted
    folder = tmp_path / "out"
    shutil.copytree(out, folder)
    shard = next(p for p in sorted(folder.iterdir()) if re.search(r"-\d{5}-of-\d{5}$", p.name))
    stem, count = re.match(r"(.+)-\d{5}-of-(\d{5})$", shard.name).groups()
    stray = f"{stem}-00000-of-{int(count) + 1:05d}"
    shutil.copy(shard, folder / stray)
    done = run("verify", str(folder), cwd=cwd)
    assert done.returncode == 1
    mixed = [line for line in done.stdout.splitlines() if line.startswith("MIXED")]
    assert mixed == [
        f"MIXED    {folder}/{stem}-*: shards of more than one build "
        f"(-of-{count}: {{}} of {int(count)} there; -of-{int(count) + 1:05d}: 1 of "
        f"{int(count) + 1} there); a reader globbing them reads them all: remove the set "
        "that is not this build's".format(
            "all"
            if len(list(folder.glob(f"{stem}-*-of-{count}"))) == int(count)
            else len(list(folder.glob(f"{stem}-*-of-{count}")))
        )
    ]
    missing = [line for line in done.stdout.splitlines() if line.startswith("MISSING")]
    assert not [line for line in missing if stem in line], missing
    assert done.stdout.splitlines()[-1].endswith(", 1 INCOMPLETE, 1 MIXED")


def test_3_the_command_printed_goes_on_with_the_build(interrupted, big_src):
    """Runs last of the interrupted build's tests: it finishes the build."""
    cwd, out, _status, _stdout, stderr, _before = interrupted
    command = stderr.strip().splitlines()[-1][len("To go on: ") :]
    assert command.endswith(" --resume")
    finished = len(shards_in(out))
    done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # Every shard the interrupted run finished is kept, and the summary says so.
    assert f"  resumed: kept {finished} of {finished} finished shard" in done.stdout
    # Its images are as large as its bounds are apart: the summary names the shards past them.
    warnings = [line for line in done.stdout.splitlines() if line.startswith("WARNING")]
    assert all("outside --min-shard-size" in line for line in warnings), warnings
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["written"] == 300
    assert run("verify", str(out), cwd=cwd).returncode == 0


# 9. A large local build writes its shards in worker processes of its own (the cores it has);
# they write the same bytes, and an interrupt ends them as cleanly as the launcher.


@pytest.fixture(scope="module")
def large_src(tmp_path_factory) -> Path:
    """About 70 MB of noise JPEGs: more than a build needs to start its shard processes."""
    import io

    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("large")
    rng = np.random.default_rng(9)
    for i in range(440):
        pixels = rng.integers(0, 256, (420, 420, 3), dtype=np.uint8)
        encoded = io.BytesIO()
        Image.fromarray(pixels).save(encoded, "JPEG", quality=90)
        path = root / ("ab"[i % 2]) / f"{i:03d}.jpg"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(encoded.getvalue())
    return root


LARGE_FLAGS = ["--min-shard-size", "2MB", "--max-shard-size", "4MB", "--splits", "train=1"]
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
_PROCESSES_LINE = re.compile(r"writing shards in (\d+) worker processes")


def _digests(out: Path) -> dict[str, str]:
    import hashlib

    return {
        name: hashlib.sha256((out / name).read_bytes()).hexdigest()
        for name in files_below(out)
        if name != "manifest.json"
    }


@pytest.mark.skipif((_CORES or 1) < 2, reason="one core: a build writes in-process")
def test_9_a_large_local_build_writes_in_worker_processes_the_same_bytes(large_src, tmp_path):
    pooled = run("build", "--input", str(large_src), "--output", str(tmp_path / "pooled"),
                 *LARGE_FLAGS, "--name", "ds", "-v", cwd=tmp_path)  # fmt: skip
    assert pooled.returncode == 0, pooled.stderr
    assert [int(n) for n in _PROCESSES_LINE.findall(pooled.stderr)] == [_CORES]
    # Started while the build listed and planned (70 MB below the input folder), then taken.
    assert f"starting {_CORES} worker processes while the build lists" in pooled.stderr
    assert "worker processes (started early)" in pooled.stderr
    # Beam's multi-threaded mode: every shard written in the launcher, by Beam's own threads.
    threaded = run("build", "--input", str(large_src), "--output", str(tmp_path / "threaded"),
                   *LARGE_FLAGS, "--name", "ds", "-v", "--direct_running_mode=multi_threading",
                   cwd=tmp_path)  # fmt: skip
    assert threaded.returncode == 0, threaded.stderr
    assert not _PROCESSES_LINE.search(threaded.stderr)
    written = _digests(tmp_path / "pooled")
    assert len(shards_in(tmp_path / "pooled")) >= 16
    assert written == _digests(tmp_path / "threaded")
    manifest = json.loads((tmp_path / "pooled" / "manifest.json").read_text())
    assert manifest["inputs"]["written"] == 440
    assert manifest["work"]["reads"] == 440, "each image read once, in whichever process"
    # Resumed with another seed: each shard a shard process replaces is named on the build's
    # stderr, as the summary says (a shard process's own log went nowhere the user sees).
    (tmp_path / "pooled" / "manifest.json").unlink()
    # Its record of its settings would refuse another seed (tests/test_resume_settings.py): as
    # a folder an earlier version built, which has none.
    (tmp_path / "pooled" / "build-settings.json").unlink()
    resumed = run("build", "--input", str(large_src), "--output", str(tmp_path / "pooled"),
                  *LARGE_FLAGS, "--name", "ds", "--resume", "--seed", "3", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "the build's log names each, with why" in resumed.stdout
    named = re.findall(r"--resume replaces the finished shard (\S+): (.+)", resumed.stderr)
    assert len(named) >= 16, resumed.stderr
    assert all("changed" in why for _, why in named), named


@pytest.mark.skipif((_CORES or 1) < 2, reason="one core: a build writes in-process")
@pytest.mark.parametrize(
    ("signum", "whole_group", "status"),
    [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
    ids=["ctrl_c", "sigterm"],
)
def test_9_an_interrupt_ends_the_shard_processes_cleanly(
    large_src, tmp_path, signum, whole_group, status
):
    out = tmp_path / "out"
    code, _stdout, stderr, before, pid = _interrupt(
        large_src, tmp_path, out, signum, whole_group, *LARGE_FLAGS[:4]
    )
    _assert_clean_interruption(code, _stdout, stderr, before, out, status, signum.name)
    assert group_is_gone(pid), "a shard process outlived the build"
    resumed = run("build", "--input", str(large_src), "--output", str(out), *LARGE_FLAGS,
                  "--resume", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert run("verify", str(out), cwd=tmp_path).returncode == 0


def _process_tree(root: int) -> dict[int, tuple[int, str, float, int]]:
    """Every process below `root` now: pid -> (parent pid, command line, CPU seconds so far,
    blocked signals' mask)."""
    found: dict[int, tuple[int, str, float, int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError, StopIteration):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            cpu = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            status = Path(f"/proc/{entry}/status").read_text().splitlines()
            blocked = int(next(s for s in status if s.startswith("SigBlk:")).split()[1], 16)
            found[int(entry)] = (int(fields[1]), command, cpu, blocked)
    below, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, *rest) in found.items():
            if ppid == parent and pid not in below:
                below[pid] = (ppid, *rest)
                frontier.append(pid)
    return below


@pytest.mark.skipif((_CORES or 1) < 2, reason="one core: a build writes in-process")
def test_9_the_commands_worker_processes_fork_from_one_server(large_src, tmp_path):
    """The command's worker processes are forked from one fork server, which imported their
    modules once (`fork_from_server`), not spawned to import them each; their CPU time is the
    command's children's (what `time` reports), as spawned ones' is; and the build is the one a
    program's spawned processes write."""
    out = tmp_path / "out"
    process = subprocess.Popen(
        [*COMMAND, "build", "--input", str(large_src), "--output", str(out), *LARGE_FLAGS,
         "--name", "ds", "-v"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seen: dict[int, tuple[int, str, float, int]] = {}
    while process.poll() is None:
        for pid, now in _process_tree(process.pid).items():
            # An ended process (a zombie) shows no command line and no mask: kept as last seen.
            seen[pid] = now if now[1] or pid not in seen else (*seen[pid][:2], now[2], seen[pid][3])
        time.sleep(0.02)
    _, stderr = process.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert process.returncode == 0, stderr
    workers_line = _PROCESSES_LINE.search(stderr)
    assert workers_line, stderr
    servers = [
        pid
        for pid, (ppid, command, *_) in seen.items()
        if ppid == process.pid and "multiprocessing.forkserver" in command
    ]
    assert len(servers) == 1, [(pid, ppid, cmd[:70]) for pid, (ppid, cmd, *_) in seen.items()]
    forked = [pid for pid, (ppid, *_) in seen.items() if ppid == servers[0]]
    assert len(forked) >= int(workers_line.group(1)), seen
    assert not [command for _, command, *_ in seen.values() if "spawn_main" in command], seen
    # The server, and so each worker from its start, blocks SIGINT (Ctrl-C is the launcher's to
    # handle) and not SIGTERM (how the launcher ends them when a build stops, at once).
    for pid in (servers[0], *forked):
        blocked = seen[pid][3]
        assert blocked & 1 << (signal.SIGINT - 1), (pid, hex(blocked))
        assert not blocked & 1 << (signal.SIGTERM - 1), (pid, hex(blocked))
    # The workers' CPU as last seen (less than they used) is in the command's children's.
    reported = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    workers = sum(seen[pid][2] for pid in forked)
    assert workers > 0.5
    assert reported > workers + seen[servers[0]][2], (reported, workers)
    assert group_is_gone(process.pid), "the fork server outlived the build"
    # A program's build (spawned processes) writes the same shards.
    script = tmp_path / "make_dataset.py"
    script.write_text(
        "from beam_tfrecord.beam.pipeline import build\n"
        "from beam_tfrecord.config import BuildConfig\n"
        "if __name__ == '__main__':\n"
        f"    build(BuildConfig.from_settings({{'input': {str(large_src)!r}, 'output': "
        f"{str(tmp_path / 'program')!r}, 'min_shard_size': '2MB', 'max_shard_size': '4MB', "
        "'splits': 'train=1', 'name': 'ds'}))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert _digests(out) == _digests(tmp_path / "program")


@pytest.mark.skipif((_CORES or 1) < 2, reason="one core: a build writes in-process")
def test_9_a_script_without_a_main_guard_builds_once(large_src, tmp_path):
    """The shard processes do not import the launcher's `__main__` again (as `spawn` would):
    a script that builds at its top level, no `if __name__ == "__main__":`, builds once."""
    out = tmp_path / "out"
    script = tmp_path / "make_dataset.py"
    script.write_text(
        "import logging, sys\n"
        "from beam_tfrecord.beam.pipeline import build\n"
        "from beam_tfrecord.config import BuildConfig\n"
        "logging.basicConfig(stream=sys.stderr, format='%(message)s')\n"
        "logging.getLogger('beam_tfrecord').setLevel(logging.DEBUG)\n"
        "print('building', flush=True)\n"
        f"config = BuildConfig.from_settings({{'input': {str(large_src)!r}, 'output': {str(out)!r},"
        " 'min_shard_size': '2MB', 'max_shard_size': '4MB', 'splits': 'train=1'})\n"
        "print('written', build(config).manifest['inputs']['written'], flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["building", "written 440"]
    assert _PROCESSES_LINE.search(done.stderr), done.stderr
    assert "Traceback" not in done.stderr


# 6. Writes to a closed pipe end quietly, in every command.


@pytest.fixture(scope="module")
def built(src, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / "ds"
    done = run("build", "--input", str(src), "--output", str(out), cwd=out.parent)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "{shard}", "-n", "0"],
        ["inspect", "--json", "{shard}", "-n", "0"],
        ["verify", "{out}"],
        ["spec", "{out}"],
        ["preview", "{out}", "-o", "{tmp}/sheet.png"],
        ["--help"],
    ],
    ids=["inspect", "inspect_json", "verify", "spec", "preview", "help"],
)
def test_6_a_closed_pipe_ends_quietly(built, tmp_path, command):
    shard = sorted(built.glob("*-train.tfrecord-*"))[0]
    args = [a.format(shard=shard, out=built, tmp=tmp_path) for a in command]
    process = subprocess.Popen(
        [*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    process.stdout.close()  # the reader is gone before the first line is written
    stderr = process.stderr.read().decode()
    status = process.wait(timeout=120)
    assert stderr == ""
    assert status in (0, 141)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_6_a_full_stdout_is_named_as_such_and_the_build_is_whole(src, tmp_path):
    """`> /dev/full` was reported as "[Errno 28] No space left on device", which reads as the
    output folder's disk being full; the build it ran was complete."""
    out = tmp_path / "out"
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*COMMAND, "build", "--input", str(src), "--output", str(out)],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=300,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "beam-tfrecord build: error: cannot write to standard output: No space left on device"
    ]
    assert run("verify", str(out), cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    "command", [["inspect", "{out}"], ["build", "--input", "{src}", "--output", "{new}"]]
)
def test_6_a_closed_stdout_prints_nowhere_and_fails_nothing(src, built, tmp_path, command):
    """Started with stdout closed (`>&-`), a command failed on its first print with an
    AttributeError traceback: it now prints nowhere, as to /dev/null."""
    args = [a.format(out=built, src=src, new=tmp_path / "new") for a in command]
    done = subprocess.run(
        [*COMMAND, *args], stdin=subprocess.DEVNULL, stdout=None, stderr=subprocess.PIPE,
        text=True, cwd=tmp_path, timeout=300, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


# 7. Quiet by default; -v shows Beam's lines.


def test_7_a_multi_process_build_prints_only_its_summary(src, tmp_path):
    out = tmp_path / "out"
    done = run(
        "build", "--input", str(src), "--output", str(out),
        "--direct_num_workers=2", "--direct_running_mode=multi_processing", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Nothing but, should the build take over 15 s, its progress lines.
    assert [line for line in done.stderr.splitlines() if not line.startswith("listed ")] == []
    assert done.stdout.startswith("Built 'out' in ")
    assert len(done.stdout.splitlines()) <= 6
    assert (out / "manifest.json").exists()
    verbose = run(
        "build", "--input", str(src), "--output", str(tmp_path / "v"), "-v",
        "--direct_num_workers=2", "--direct_running_mode=multi_processing", cwd=tmp_path,
    )  # fmt: skip
    assert verbose.returncode == 0
    assert "apache_beam" in verbose.stderr  # Beam's own log lines
    assert "wrote shard" in verbose.stderr  # and ours, one per shard
    assert "type hint" not in verbose.stderr  # but not Beam's note on each string annotation


# 8. Live progress on a terminal, and every 10-30 s elsewhere.


def _run_in_pty(args: list[str], cwd: Path) -> tuple[int, str, float]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the build, its stdout and stderr the terminal
        os.chdir(cwd)
        wide_terminal()  # the whole progress line, whatever the terminal it runs from says
        os.execv(COMMAND[0], [*COMMAND, *args])
    started = time.monotonic()
    output = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 300)
        if not ready:
            break
        try:
            data = os.read(fd, 65536)
        except OSError:  # the terminal closes when the build exits
            break
        if not data:
            break
        output += data
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(), time.monotonic() - started


@pytest.mark.parametrize(
    "mode",
    [
        ["--direct_running_mode=in_memory"],
        ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    ],
    ids=["in_process", "multi_process"],
)
def test_8_progress_is_redrawn_on_a_terminal(big_src, tmp_path, mode):
    out = tmp_path / "out"
    status, output, seconds = _run_in_pty(
        ["build", "--input", str(big_src), "--output", str(out), *BIG_FLAGS, *mode], tmp_path
    )
    assert status == 0, output
    updates = [u for u in output.split("\r") if u.startswith("listed ")]
    # Drawn at the start and redrawn in place to the end, at least once a second (by the time
    # the last one shows), of the counts gathered from every worker process. (An in-process
    # build of these 300 images can end within its first second now.)
    minutes, secs = re.search(r"(\d+):(\d\d) elapsed", updates[-1]).groups()
    shown = int(minutes) * 60 + int(secs)
    assert len(updates) >= max(shown, 2), (len(updates), shown, updates)
    final = [u for u in updates if "planned 300 of 300" in u]
    assert final, updates[-3:]
    assert re.search(r"written \d+ of 300 images, [\d.]+ [KM]?B, [\d.]+ MB/s", final[-1])
    assert "elapsed" in final[-1]
    # The summary follows on a clean line, and its time is the whole run's.
    summary = re.search(r"Built 'out' in \S+: 300 of 300 images in ([\d.]+) s", output)
    assert summary, output[-500:]
    assert float(summary.group(1)) <= seconds
    assert float(summary.group(1)) >= max(0.0, seconds - 5)


# 9. A plain local build: the DirectRunner's in-process mode (docs/guide/local-builds.md), its
# books still checked.


def test_9_a_plain_build_runs_in_process_and_balances_its_books(src, tmp_path):
    out = tmp_path / "out"
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        process = subprocess.Popen(
            [*COMMAND, "build", "--input", str(src), "--output", str(out), "-v"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        workers = set()
        while process.poll() is None:  # no worker process is started: the work runs in threads
            workers.update(_python_children(process.pid))
            time.sleep(0.1)
    stderr = log.read_text()
    assert process.returncode == 0, stderr
    assert workers == set()
    assert "Beam options: --direct_running_mode=in_memory" in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["unaccounted"] == 0
    assert manifest["inputs"]["written"] == 12


def _python_children(pid: int) -> set[int]:
    from beam_tfrecord.commands.console import _children

    found = set()
    for child in _children(pid):
        try:
            if b"sdk_worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.add(child)
        except OSError:
            pass
    return found


# 10. A placeholder bucket is refused at once; an unreachable store in one line.


def test_10_the_default_config_placeholder_is_refused(tmp_path):
    done = run("build", "--config", str(_REPO / "configs" / "default.yaml"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "beam-tfrecord build: error: --input: 'gs://YOUR-BUCKET/images/**': bucket names are "
        "lowercase, so 'YOUR-BUCKET' is a placeholder; put the name of your bucket there"
    ]
    assert files_below(tmp_path) == []


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("gs://YOUR-BUCKET/out", True),
        ("gcs://My-Bucket/out", "names none; did you mean 'my-bucket'?"),
        ("gs://your-bucket/out", False),
        # S3 buckets made in us-east-1 before March 2018 may hold capitals: the store judges.
        ("s3://Legacy-Bucket/out", False),
    ],
)
def test_10_only_a_gcs_bucket_with_capitals_is_a_placeholder(url, refused):
    from beam_tfrecord.checks import refuse_placeholders
    from beam_tfrecord.config import BuildConfig, ConfigError

    config = BuildConfig(inputs=("data/**",), output=url)
    if refused:
        says = "is a placeholder" if refused is True else refused
        with pytest.raises(ConfigError) as err:
            refuse_placeholders(config)
        assert says in str(err.value)
    else:
        refuse_placeholders(config)


def test_10_an_unreachable_store_fails_in_one_line(src, tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run(
        "build", "--input", str(src), "--output", "gs://some-bucket/out", cwd=tmp_path,
        env={"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "FSSPEC_GS_TOKEN": "anon"},
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("beam-tfrecord build: error: --output: ")
    assert "gs://some-bucket/out" in lines[0]


# 11. Plurals.


def test_11_counts_of_one_are_singular(tmp_path):
    src = tmp_path / "src"
    make_collection(src, {"cat": 1}, seed=4)
    # One CMYK JPEG: written, but re-encoded so that TensorFlow decodes it.
    from PIL import Image

    Image.new("CMYK", (16, 16), (0, 255, 0, 0)).save(src / "cat" / "cmyk.jpg", "JPEG")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("not a build")
    refused = run("build", "--input", str(src), "--output", str(out), cwd=tmp_path)
    assert refused.returncode == 2
    assert "already holds 1 file;" in refused.stderr
    done = run(
        "build", "--input", str(src), "--output", str(out), "--overwrite",
        "--splits", "train=0.5,test=0.5", "--seed", "1", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert re.search(r"\b2 of 2 images\b", text)
    assert "1 image was re-encoded so TensorFlow decodes it" in text
    counts = re.findall(r"(\d+) (examples?) +(\d+) (shards?)", text)
    assert counts
    for examples, noun, shards, shard_noun in counts:
        assert (noun == "example") == (examples == "1")
        assert (shard_noun == "shard") == (shards == "1")
    assert not re.search(r"\b1 (images|files|examples|shards|records|inputs)\b", text)


# 12. preview -o does not replace a file unless told to.


def test_12_preview_refuses_to_replace_a_file_without_overwrite(built, tmp_path):
    sheet = tmp_path / "sheet.png"
    sheet.write_bytes(b"my own picture")
    refused = run("preview", str(built), "-o", str(sheet), cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"beam-tfrecord preview: error: -o {sheet}: the file exists; pass --overwrite to replace it"
    ]
    assert sheet.read_bytes() == b"my own picture"
    assert files_below(tmp_path) == ["sheet.png"]
    done = run("preview", str(built), "-o", str(sheet), "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {sheet}: ")
    assert sheet.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(
    ("name", "starts"),
    [("sheet.jpg", b"\xff\xd8\xff"), ("sheet.webp", b"RIFF"), ("sheet", b"\x89PNG")],
)
def test_12_preview_writes_the_format_its_file_name_says(built, tmp_path, name, starts):
    """`-o sheet.jpg` held PNG bytes under a JPEG's name."""
    done = run("preview", str(built), "-o", str(tmp_path / name), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / name).read_bytes().startswith(starts)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--size", "5000"], "argument --size: must be 1,024 or less, got 5,000"),
        (["--columns", "x"], "argument --columns: expected a whole number, got 'x'"),
        (["-n", "x"], "argument -n/--images: expected a whole number, got 'x'"),
    ],
)
def test_12_preview_sizes_are_bounded_and_named(built, tmp_path, flags, says):
    """`--size 5000` made a sheet of 20,000 pixels a side; `-n x` named an internal function."""
    done = run("preview", str(built), "-o", str(tmp_path / "s.png"), *flags, cwd=tmp_path)
    assert done.returncode == 2
    assert f"beam-tfrecord preview: error: {says}" in done.stderr
    assert not (tmp_path / "s.png").exists()


def test_12_preview_to_standard_output_writes_the_png_there(built, tmp_path):
    """`-o -` wrote a file named `-`; it is standard output, as to other tools."""
    done = subprocess.run(
        [*COMMAND, "preview", str(built), "-o", "-", "-n", "3"],
        cwd=tmp_path, capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"\x89PNG\r\n\x1a\n")
    from PIL import Image

    with Image.open(io.BytesIO(done.stdout)) as sheet:
        assert sheet.format == "PNG" and sheet.size == (3 * 128, 148)
    assert done.stderr.decode().splitlines() == [
        "wrote the sheet to standard output: 3 images of split 'train' (1 row of 3, 384x148 pixels)"
    ]
    assert files_below(tmp_path) == []


def test_12_preview_to_standard_output_refuses_a_terminal(built, tmp_path):
    """A PNG's bytes on a terminal scramble it and show nothing: refused, nothing read."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*COMMAND, "preview", str(built), "-o", "-"],
            cwd=tmp_path, stdout=follower, stderr=subprocess.PIPE, timeout=300,
        )  # fmt: skip
        os.close(follower)
        shown = b""
        while select.select([leader], [], [], 0.5)[0]:
            try:
                piece = os.read(leader, 65536)
            except OSError:  # the terminal's other end closed: all of it read
                break
            if not piece:
                break
            shown += piece
    finally:
        os.close(leader)
    assert done.returncode == 2
    assert shown == b""
    assert done.stderr.decode().splitlines() == [
        "beam-tfrecord preview: error: -o -: standard output is a terminal; send it to a file "
        "or a program (> sheet.png, | display), or name a file"
    ]


def test_12_inspect_names_a_count_that_is_not_one(built, tmp_path):
    done = run("inspect", str(built), "-n", "x", cwd=tmp_path)
    assert done.returncode == 2
    assert "argument -n/--records: expected a whole number, got 'x'" in done.stderr
    assert "non_negative_int" not in done.stderr


def test_12_preview_refuses_the_default_file_too(built, tmp_path):
    (tmp_path / "preview.png").write_bytes(b"an earlier sheet")
    refused = run("preview", str(built), cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "beam-tfrecord preview: error: -o preview.png: the file exists; pass --overwrite to "
        "replace it"
    ]
    assert (tmp_path / "preview.png").read_bytes() == b"an earlier sheet"


@pytest.mark.parametrize("where", ["a_folder", "below_a_file"])
def test_12_preview_to_a_place_it_cannot_write_is_one_line(built, tmp_path, where):
    (tmp_path / "sheets").mkdir()
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    target = tmp_path / "sheets" if where == "a_folder" else tmp_path / "notes.txt" / "sheet.png"
    done = run("preview", str(built), "-o", str(target), cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"beam-tfrecord preview: error: -o {target}: ")
    assert "Traceback" not in done.stderr
    assert files_below(tmp_path) == ["notes.txt"]


def test_12_preview_into_a_folder_that_is_not_there_is_refused_and_makes_none(built, tmp_path):
    """`-o /nonexistdir/x.png` made every folder on the way, wherever it pointed."""
    target = tmp_path / "nodir" / "deeper" / "sheet.png"
    done = run("preview", str(built), "-o", str(target), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"beam-tfrecord preview: error: -o {target}: no such folder {target.parent}; make it, or "
        "name a file in a folder that is"
    ]
    assert not (tmp_path / "nodir").exists()
    # As the user typed it: a relative path is named relative.
    done = run("preview", str(built), "-o", "nodir/sheet.png", cwd=tmp_path)
    assert done.returncode == 2
    assert "error: -o nodir/sheet.png: no such folder nodir; make it," in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_12_preview_of_a_missing_dataset_says_so_before_the_sheet_in_the_way(tmp_path):
    """With ./preview.png there, `preview nonexist` said "the file exists; pass --overwrite",
    and with --overwrite it would only then have said the dataset is not there."""
    (tmp_path / "preview.png").write_bytes(b"an earlier sheet")
    done = run("preview", "nonexist", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["beam-tfrecord preview: error: nonexist: no such folder"]
    assert (tmp_path / "preview.png").read_bytes() == b"an earlier sheet"


# 13. A header-only check says, once, what it does not catch.


@pytest.fixture(scope="module")
def src_with_truncated(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("truncated")
    images = make_collection(root, {"cat": 3, "dog": 3}, seed=6)
    whole = images["cat/cat_0000.jpg"]
    (root / "cat" / "download.jpg").write_bytes(whole[: len(whole) * 2 // 3])  # cut off
    return root


@pytest.mark.parametrize(
    ("validate", "checked"), [("header", "by header only"), ("none", "not at all")]
)
def test_13_a_header_only_build_says_truncated_data_is_not_detected(
    src_with_truncated, tmp_path, validate, checked
):
    out = tmp_path / "out"
    done = run(
        "build", "--input", str(src_with_truncated), "--output", str(out),
        "--validate", validate, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stdout.splitlines() if f"--validate {validate}" in line]
    assert notes == [
        f"NOTE: images were checked {checked} (--validate {validate}): truncated or corrupt "
        "image data is not detected; --validate decode finds it"
    ]
    # What is written does not change: the truncated file is among the images written.
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["written"] == 7
    assert manifest["inputs"]["skipped"] == 0


def test_13_a_decoding_build_has_no_such_note(src_with_truncated, tmp_path):
    out = tmp_path / "out"
    done = run("build", "--input", str(src_with_truncated), "--output", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "NOTE:" not in done.stdout
    assert "--validate" not in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["written"] == 6
    assert manifest["inputs"]["skipped_by_reason"] == {"truncated": 1}


# 14. --resume says how many finished shards it kept, and why it kept no more.

RESUME_FLAGS = ["--min-shard-size", "5KB", "--max-shard-size", "15KB", "--splits", "train=1"]


@pytest.fixture(scope="module")
def unfinished(src, tmp_path_factory) -> Path:
    """A build folder as an interrupted build leaves it: its shards, their indexes and report
    lines, and no manifest.json (here every shard is finished: the build's last step is not)."""
    out = tmp_path_factory.mktemp("unfinished") / "ds"
    done = run("build", "--input", str(src), "--output", str(out), *RESUME_FLAGS, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    for path in out.iterdir():
        if path.is_file() and path.name not in shards_in(out):
            path.unlink()
    assert len(shards_in(out)) >= 3
    return out


def _copy_of(folder: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(folder, tmp_path / folder.name))


def _resume(src: Path, out: Path, *flags: str):
    return run(
        "build", "--input", str(src), "--output", str(out), *RESUME_FLAGS, *flags, "--resume",
        cwd=out.parent,
    )  # fmt: skip


def _resume_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("  resumed:", "WARNING: --"))]


def test_14_resume_says_how_many_finished_shards_it_kept(unfinished, src, tmp_path):
    out = _copy_of(unfinished, tmp_path)
    shards = shards_in(out)
    before = {name: (out / name).stat().st_mtime_ns for name in shards}
    done = _resume(src, out)
    assert done.returncode == 0, done.stderr
    assert _resume_lines(done.stdout) == [
        f"  resumed: kept {len(shards)} of {len(shards)} finished shards"
    ]
    # Kept, not written again: the very files are there.
    assert {name: (out / name).stat().st_mtime_ns for name in shards_in(out)} == before
    assert (out / "manifest.json").exists()


def test_14_resume_with_other_settings_says_none_was_kept_and_why(unfinished, src, tmp_path):
    out = _copy_of(unfinished, tmp_path)
    found = len(shards_in(out))
    done = _resume(src, out, "--seed", "1")
    assert done.returncode == 0, done.stderr
    said = _resume_lines(done.stdout)
    assert said == [
        f"WARNING: --resume kept none of the {found} finished shards in {out}: they did not "
        "match this build's plan (settings or inputs changed since they were written, or one "
        "was damaged or held an image that could not be read, to be tried again) and were "
        "replaced; the build's log names each, with why"
    ]
    named = [line for line in done.stderr.splitlines() if "--resume replaces" in line]
    assert named and all("changed" in line for line in named), done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 1 and manifest["inputs"]["written"] == 12
    assert shards_in(out) == sorted(s["file"] for s in manifest["shards"])


def test_14_resume_counts_a_stray_shard_as_removed_not_as_one_it_replaced(
    unfinished, src, tmp_path
):
    """A shard under a name this build does not write (another build's -of-N) was counted among
    the finished shards and said to be replaced, though the build removed it as stale."""
    out = _copy_of(unfinished, tmp_path)
    shards = shards_in(out)
    stem, total = re.match(r"(.+)-\d{5}-of-(\d{5})$", shards[0]).groups()
    stray = f"{stem}-00000-of-{int(total) + 1:05d}"
    shutil.copy(out / shards[0], out / stray)
    done = _resume(src, out)
    assert done.returncode == 0, done.stderr
    assert _resume_lines(done.stdout) == [
        f"  resumed: kept {len(shards)} of {len(shards)} finished shards",
        "  resumed: removed 1 finished shard of another plan, under names this build does not "
        "write (seed, splits or shard sizes changed, or left by another build)",
    ]
    assert not (out / stray).exists()


def test_14_resume_keeps_the_shards_that_still_match(unfinished, src, tmp_path):
    out = _copy_of(unfinished, tmp_path)
    shards = shards_in(out)
    damaged = out / shards[1]
    whole = damaged.read_bytes()
    data = bytearray(whole)
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    done = _resume(src, out)
    assert done.returncode == 0, done.stderr
    said = _resume_lines(done.stdout)
    assert said == [
        f"WARNING: --resume kept {len(shards) - 1} of the {len(shards)} finished shards in "
        f"{out}: the other 1 did not match this build's plan (settings or inputs changed since "
        "it was written, or it was damaged or held an image that could not be read, to be "
        "tried again) and was replaced; the build's log names it, with why"
    ]
    assert f"--resume replaces the finished shard {shards[1]}: it is damaged" in done.stderr
    assert damaged.read_bytes() == whole  # written again, as it was


# 15. Wording: a count of one is singular in every command's output.


def test_15_inspect_says_1_byte_of_a_one_byte_record(tmp_path):
    from beam_tfrecord.codec.writer import open_writer

    path = tmp_path / "tiny.tfrecord"
    with open_writer(str(path)) as writer:
        writer.write(b"x")
        writer.write(b"xy")
    done = run("inspect", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  record 0, byte offset 0, 1 byte\n" in done.stdout
    assert "  record 1, byte offset 17, 2 bytes\n" in done.stdout


def test_15_preview_of_one_bad_record_is_singular(built, tmp_path):
    out = _copy_of(built, tmp_path)
    shard = sorted(out.glob("*-train.tfrecord-*"))[-1]
    data = bytearray(shard.read_bytes())
    data[-30] ^= 0xFF  # in the last record's payload: its CRC no longer matches
    shard.write_bytes(bytes(data))
    done = run("preview", str(out), "-o", str(tmp_path / "sheet.png"), cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(
        r"beam-tfrecord preview: error: 1 of \d+ records could not be shown as it states "
        r"\(its tile says why\)",
        lines[0],
    ), lines


# 16. A build that skips more than --max-skipped-fraction allows publishes nothing.


def test_16_too_many_skipped_publishes_nothing_and_resume_publishes_it(
    src_with_truncated, tmp_path
):
    import shlex

    out = tmp_path / "out"
    first = run("build", "--input", str(src_with_truncated), "--output", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert (out / "manifest.json").exists() and (out / "dataset_info.json").exists()
    # 1 of the 7 inputs is truncated: 14.3%, more than 10%. The earlier build's claims go too.
    done = run(
        "build", "--input", str(src_with_truncated), "--output", str(out), "--overwrite",
        "--max-skipped-fraction", "0.1", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Built" not in done.stdout
    error, hint = done.stderr.splitlines()
    assert error == (
        "beam-tfrecord build: error: 1 of 7 inputs (14.3%) was skipped (truncated: 1), more "
        "than --max-skipped-fraction 0.1 allows; nothing was published (the finished shards "
        f"are kept), see {out}/report.jsonl"
    )
    assert hint.startswith("To publish it anyway: ")
    command = shlex.split(hint.removeprefix("To publish it anyway: "))
    assert "--resume" in command and "--max-skipped-fraction" not in command
    assert "--overwrite" not in command
    shards = shards_in(out)
    assert shards
    # Only what an interrupted build leaves: shards, their indexes and report lines, the report,
    # and the record of the settings the shards were made with (for the --resume to hold to).
    assert files_below(out) == sorted(
        ["build-settings.json", "report.jsonl"]
        + shards
        + [f"index/{name}.index" for name in shards]
        + [f"reports/{name}.jsonl" for name in shards]
    )
    verified = run("verify", str(out), cwd=tmp_path)
    assert verified.returncode == 1
    assert "INCOMPLETE" in verified.stdout
    # The way out it printed publishes the build without writing its shards again.
    before = {name: (out / name).stat().st_mtime_ns for name in shards}
    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"  resumed: kept {len(shards)} of {len(shards)} finished shards" in resumed.stdout
    assert {name: (out / name).stat().st_mtime_ns for name in shards_in(out)} == before
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["skipped_by_reason"] == {"truncated": 1}
    assert (out / "labels.txt").exists() and (out / "dataset_info.json").exists()
    assert run("verify", str(out), cwd=tmp_path).returncode == 0


def test_16_the_way_out_it_prints_works_when_a_config_file_says_overwrite(
    src_with_truncated, tmp_path
):
    """`overwrite: true` in the file (as configs/sample.yaml has it) and the printed command's
    --resume: the flag answers what the file answered, as any flag does, rather than clash."""
    import shlex

    out = tmp_path / "out"
    config = tmp_path / "build.yaml"
    config.write_text(
        f"input: {src_with_truncated}\noutput: {out}\noverwrite: true\nmax_skipped_fraction: 0.1\n"
    )
    done = run("build", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    hint = done.stderr.splitlines()[-1]
    assert hint.startswith("To publish it anyway: ")
    command = shlex.split(hint.removeprefix("To publish it anyway: "))
    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "  resumed: kept " in resumed.stdout
    assert run("verify", str(out), cwd=tmp_path).returncode == 0


# 17. A path an input list names that does not exist is reported as not found, not as gone.


def _build_listed_with(src: Path, tmp_path: Path, line: str):
    """A build from an input list of every image below `src` by its folder, and `line`."""
    images = sorted(p.relative_to(src) for p in src.rglob("*.jpg"))
    listing = tmp_path / "list.csv"
    lines = [f"{src / p},{p.parent}" for p in images] + [line]
    listing.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    done = run("build", "--input-list", str(listing), "--output", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return images, out, done


def test_17_a_missing_path_in_an_input_list_is_reported_not_found(src, tmp_path):
    images, out, done = _build_listed_with(src, tmp_path, f"{src}/cat/never_there.jpg,cat")
    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    missing = [r for r in report if r["relpath"].endswith("never_there.jpg")]
    assert [(r["action"], r["reason"], r["message"]) for r in missing] == [
        ("skipped", "vanished", "not found (named in --input-list)")
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["written"] == len(images)
    assert "vanished: 1" in done.stdout
    assert "got no image written" not in done.stdout  # cat has its other images


def test_17_a_class_whose_only_input_is_missing_keeps_its_id_and_is_warned_about(src, tmp_path):
    """The class map comes from what is listed, so a class whose only file is missing keeps
    its id (no other class moves when the file comes back); but a model trained on the split
    never sees it, and the summary said only that an input vanished."""
    _, out, done = _build_listed_with(src, tmp_path, f"{src}/gone.jpg,aardvark")
    assert (out / "labels.txt").read_text().splitlines()[0] == "aardvark"
    assert (
        "WARNING: 1 class in labels.txt got no image written: 'aardvark' (its inputs are in "
        "report.jsonl)"
    ) in done.stdout.splitlines()


def test_17_a_mistyped_name_in_classes_is_warned_about_with_the_label_meant(src, tmp_path):
    """`--classes cat,dgo`: every dog is skipped as unknown_class and 'dgo' gets an id and no
    image. Allowed (a class list kept across versions may name a class a version lacks), the
    build publishes, and the summary names the label the typo meant."""
    out = tmp_path / "out"
    done = run(
        "build", "--input", str(src), "--output", str(out), "--classes", "cat,dgo,owl",
        "--allow-missing-classes", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "WARNING: 2 classes of --classes have no input labelled with them, so no image: 'dgo' "
        "(did you mean 'dog'? its inputs were skipped as unknown_class), 'owl'"
    ) in done.stdout.splitlines()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["given_classes"] == {
        "not_found": ["dgo", "owl"],
        "meant": {"dgo": "dog"},
        "other_labels": ["dog"],
        "other_label_count": 1,
    }
    # A build without --classes has no such field: its classes are the labels found.
    plain = tmp_path / "plain"
    assert run("build", "--input", str(src), "--output", str(plain), cwd=tmp_path).returncode == 0
    assert "given_classes" not in json.loads((plain / "manifest.json").read_text())


def test_17_a_file_an_input_list_labels_two_ways_is_reported_and_the_books_balance(src, tmp_path):
    """A file on two lines of a list is one input: labelled once and unlabelled once, it is
    written with the one label (this crashed the build: None against a str); labelled two ways,
    it is reported, not guessed, and counted as listed."""
    src = Path(shutil.copytree(src, tmp_path / "src"))  # the list goes beside the images
    images = sorted(p.relative_to(src) for p in src.rglob("*.jpg"))
    agree, disagree = images[0], images[1]
    listing = src / "twice.csv"
    lines = [f"{p},{p.parent}" for p in images] + [f"{agree}", f"{disagree},zebra"]
    listing.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    done = run("build", "--input-list", str(listing), "--output", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    labels = sorted([str(disagree.parent), "zebra"])
    assert [(r["relpath"], r["reason"], r["message"]) for r in report] == [
        (
            str(disagree),
            "conflicting_labels",
            f"the input list gives it 2 labels ({labels[0]!r}, {labels[1]!r}); give it one",
        )
    ]
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert (inputs["listed"], inputs["written"], inputs["skipped"]) == (
        len(images),
        len(images) - 1,
        1,
    )
    assert "conflicting_labels: 1" in done.stdout


# 18. Paths no flag takes (an unquoted pattern the shell expanded) get a hint.


def test_18_paths_from_an_unquoted_pattern_are_refused_with_a_hint(src, tmp_path):
    # What the shell makes of `--input SRC/cat/*` unquoted: the first path goes to --input.
    paths = sorted(str(p) for p in (src / "cat").glob("*.jpg"))
    out = tmp_path / "out"
    done = run("build", "--input", *paths, "--output", str(out), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"beam-tfrecord build: error: unexpected argument {paths[1]!r} "
        f"(and {len(paths) - 2} more); if the shell expanded a pattern, quote it so that it "
        "does not (--input 'DIR/**'), or give --input once per path"
    ]
    assert not out.exists()


def test_18_a_stray_word_gets_no_path_hint(src, tmp_path):
    out = tmp_path / "out"
    done = run("build", "--input", str(src), "--output", str(out), "stray", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["beam-tfrecord build: error: unexpected argument 'stray'"]
    assert not out.exists()


# 19. Removing an earlier build's stale files is housekeeping: quiet unless -v.


def test_19_stale_files_are_removed_quietly_and_named_with_verbose(src, tmp_path):
    out = tmp_path / "out"
    common = ["build", "--input", str(src), "--output", str(out), "--splits", "train=1"]
    small = ["--min-shard-size", "5KB", "--max-shard-size", "15KB"]
    first = run(*common, *small, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(shards_in(out)) >= 3
    done = run(*common, "--overwrite", cwd=tmp_path)  # one shard now: the others are stale
    assert done.returncode == 0, done.stderr
    assert "stale" not in done.stderr and " INFO " not in done.stderr, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert shards_in(out) == [s["file"] for s in manifest["shards"]]  # the stale ones went
    again = run(*common, *small, "--overwrite", "-v", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    said = [line for line in again.stderr.splitlines() if "stale file" in line]
    assert len(said) == 1
    assert re.search(
        r"DEBUG beam_tfrecord\.beam\.pipeline: removed \d+ stale files? of an", said[0]
    )


# 20. A bad --resize is named once.


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "the shorter side must be a positive integer, got 0"),
        ("0x5", "fit needs a positive WxH, got 0x5"),
    ],
)
def test_20_a_bad_resize_names_the_flag_once(src, tmp_path, value, problem):
    out = tmp_path / "out"
    done = run("build", "--input", str(src), "--output", str(out), "--resize", value, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"beam-tfrecord build: error: --resize: {problem}"]
    assert not out.exists()


# 21. preview refuses a split the build does not have as a bad value: exit 2, named.


def test_21_preview_of_a_split_that_does_not_exist_is_refused(built, tmp_path):
    sheet = tmp_path / "sheet.png"
    done = run("preview", str(built), "--split", "nosuch", "-o", str(sheet), cwd=tmp_path)
    assert done.returncode == 2
    splits = ", ".join(json.loads((built / "manifest.json").read_text())["splits"])
    assert done.stderr.splitlines() == [
        f"beam-tfrecord preview: error: --split: no split 'nosuch' in {built}; it has {splits}"
    ]
    assert not sheet.exists()


# 22. Every command names itself in its error lines, as a usage error does: a line read among
# others (a script's log) says which command it came from.


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["inspect"], "no such file or directory"),
        (["verify"], "no such file or directory"),
        (["spec"], "no such folder"),
        (["preview", "-o", "sheet.png"], "no such folder"),
    ],
    ids=["inspect", "verify", "spec", "preview"],
)
def test_22_a_missing_path_is_one_line_naming_the_command(tmp_path, command, says):
    missing = tmp_path / "missing"
    name, *flags = command
    done = run(name, str(missing), *flags, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"beam-tfrecord {name}: error: {missing}: {says}"]
    assert not (tmp_path / "sheet.png").exists()


@pytest.mark.parametrize("command", ["inspect", "verify", "spec", "preview"])
def test_22_an_empty_path_is_a_bad_value_not_the_working_folder(tmp_path, command):
    """`verify ""` (a script's unset variable) checked every file below the working folder, and
    `spec ""` said ": no manifest.json and no shards", naming nothing."""
    (tmp_path / "notes.jpg").write_bytes(b"not a record")
    done = run(command, "", cwd=tmp_path)
    assert done.returncode == 2
    name = {"inspect": "FILE", "verify": "PATH"}.get(command, "OUTPUT")
    assert done.stderr.splitlines() == [
        f"beam-tfrecord {command}: error: argument {name}: an empty path names no file or "
        f"folder (see beam-tfrecord {command} --help)"
    ]
    assert done.stdout == ""


@pytest.mark.parametrize(
    "command",
    [
        ["build", "--input", "{src}", "--output", "foo://bar/ds"],
        ["verify", "foo://bar/ds"],
        ["inspect", "foo://bar/ds"],
        ["preview", "{src}", "-o", "foo://bar/sheet.png"],
    ],
    ids=["build", "verify", "inspect", "preview"],
)
def test_22_a_url_no_filesystem_opens_is_one_line(src, tmp_path, command):
    """A protocol fsspec does not know (or whose package is missing) ended in its traceback."""
    done = run(*(arg.format(src=src) for arg in command), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"beam-tfrecord {command[0]}: error: ")
    assert "foo" in line and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "given", "says"),
    [
        (["inspect"], "folder", "a folder with no TFRecord files below it (hidden files and "
         "sidecars are skipped)"),
        (["verify"], "folder", "a folder with no TFRecord files below it (hidden files and "
         "sidecars are skipped)"),
        (["spec"], "file", "a file, not a build folder"),
        (["preview", "-o", "sheet.png"], "file", "a file, not a build folder"),
    ],
    ids=["inspect", "verify", "spec", "preview"],
)  # fmt: skip
def test_22_a_path_of_the_wrong_kind_says_what_it_is(tmp_path, command, given, says):
    """An empty folder is not 'no such file', and a file given for a build folder is not an
    operating-system error about a path the user never typed."""
    path = tmp_path / "given"
    if given == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("not a record")
    else:
        path.write_text("not a build")
    name, *flags = command
    done = run(name, str(path), *flags, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"beam-tfrecord {name}: error: {path}: {says}"]
