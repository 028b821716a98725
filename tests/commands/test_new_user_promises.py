"""What a new user meets first, through the command line as they run it (issue 31): each test
shows one promise that broke, with the command that showed it."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from imagegen import make_collection
from PIL import Image

_SCRIPT = Path(sys.executable).parent / "beam-tfrecord"
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "beam_tfrecord.cli"]


def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "shapes"
    make_collection(root, {"circle": 10, "square": 10, "triangle": 10}, seed=5, size=(16, 24))
    return root


def _claims(out: Path) -> list[str]:
    return [n for n in ("manifest.json", "labels.txt", "dataset_info.json") if (out / n).exists()]


# 4. A --classes name no input has fails the build, unless allowed.


def test_4_a_classes_typo_fails_the_build_and_keeps_the_hint(shapes, tmp_path):
    out = tmp_path / "out"
    args = ["build", "--input", str(shapes), "--output", str(out)]
    done = run(*args, "--classes", "circle,sqare,triangle", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _claims(out) == []
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "beam-tfrecord build: error: --classes names 1 class no input is labelled with: 'sqare'; "
        "nothing was published"
    ), line
    assert "--classes left out the label 'square' (10 inputs; --classes has 'sqare': a typo?)" in (
        line
    )
    assert "--allow-missing-classes" in line
    # Asked for, the same build publishes, keeping the shards the withheld run finished.
    allowed = run(*args, "--classes", "circle,sqare,triangle", "--resume", "--allow-missing-classes",
                  cwd=tmp_path)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert "resumed: kept 3 of 3 finished shards" in allowed.stdout
    assert "did you mean 'square'?" in allowed.stdout
    assert json.loads((out / "manifest.json").read_text())["config"]["allow_missing_classes"]
    # From a config file too, declared as every other setting is.
    config = tmp_path / "build.yaml"
    config.write_text(f"input: {shapes}\noutput: {tmp_path / 'yaml'}\nclasses: [circle, sqare]\n"
                      "allow_missing_classes: true\n")  # fmt: skip
    assert run("build", "--config", str(config), cwd=tmp_path).returncode == 0


# 5. --resume is offered only where it can help.


def _without_access(path: Path) -> list[str]:
    """Takes every access to `path` away; returns the prefix that runs a command as a user the
    folder refuses (root reads anything: in a user namespace, a folder owned by an unmapped
    user is refused to it too)."""
    path.chmod(0)
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        pytest.skip("running as root, and no unshare to run as a user a folder refuses")
    os.chown(path, 65534, 65534)
    return ["unshare", "--user", "--map-root-user"]


def test_5_a_folder_without_permission_says_what_to_fix_not_resume(tmp_path):
    data = tmp_path / "data"
    make_collection(data, {"ok": 4, "zlocked": 4}, seed=6, size=(16, 24))
    prefix = _without_access(data / "zlocked")
    try:
        done = subprocess.run(
            [*prefix, *COMMAND, "build", "--input", str(data), "--output", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
    finally:
        (data / "zlocked").chmod(0o755)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert "Permission denied" in line and str(data / "zlocked") in line, line
    assert line.endswith(
        "give the build access to that path, then build again (nothing was written)"
    ), line
    assert "--resume" not in done.stderr


# 3. A flat folder under --labels dir: one class named after the folder, and a line that says so.


def test_3_a_flat_folder_labelled_by_dir_says_so_with_the_fix(tmp_path):
    flat = tmp_path / "flat"
    make_collection(tmp_path / "made", {"x": 6}, seed=7, size=(16, 24))
    flat.mkdir()
    for i, image in enumerate(sorted((tmp_path / "made" / "x").iterdir())):
        name = ("apple", "banana_", "cherry")[i % 3] + f"{i:02d}.jpg"
        image.rename(flat / name)
    done = run("build", "--input", str(flat), "--output", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "classes: 1 (labels.txt)" in done.stdout
    assert (
        "WARNING: the images are right in the --input folder 'flat', so --labels dir (the "
        "default) gave them all one class, 'flat'; if the class is in the file names "
        "(apple01.jpg), build with --labels 'regex:^([a-z]+)'"
    ) in done.stdout.splitlines()
    # The fix it shows works, and the line goes.
    fixed = run(
        "build", "--input", str(flat), "--output", str(tmp_path / "fixed"),
        "--labels", "regex:^([a-z]+)", cwd=tmp_path,
    )  # fmt: skip
    assert "classes: 3 (labels.txt)" in fixed.stdout and "--input folder" not in fixed.stdout
    # A folder of class folders says nothing.
    make_collection(tmp_path / "made", {"x": 3, "y": 3}, seed=8, size=(16, 24))
    folders = run("build", "--input", str(tmp_path / "made"), "--output", str(tmp_path / "o2"),
                  cwd=tmp_path)  # fmt: skip
    assert folders.returncode == 0 and "--input folder" not in folders.stdout


# 6. Ctrl-C while a command starts: one line, exit 130, on every subcommand.


@pytest.fixture(scope="module")
def many_records(tmp_path_factory) -> Path:
    """A TFRecord file that `verify` takes a while over, so that it is stopped, not done."""
    from beam_tfrecord.codec.example import encode_example
    from beam_tfrecord.codec.writer import TFRecordWriter

    path = tmp_path_factory.mktemp("records") / "many.tfrecord"
    record = encode_example({"n": [1, 2, 3], "text": [b"x" * 64]})
    with path.open("wb") as f, TFRecordWriter(f) as writer:
        for _ in range(200_000):
            writer.write(record)
    return path


@pytest.mark.parametrize("delay", [0.1, 0.2, 0.4])
@pytest.mark.parametrize("command", ["build", "verify"])
def test_6_ctrl_c_while_starting_is_one_line(shapes, many_records, tmp_path, command, delay):
    args = ["--input", str(shapes), "--output", str(tmp_path / "x")]
    process = subprocess.Popen(
        [*COMMAND, command, *(args if command == "build" else [str(many_records)])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.splitlines() == [f"beam-tfrecord {command}: interrupted"], err


def test_6_a_program_importing_the_command_line_keeps_its_own_ctrl_c():
    done = subprocess.run(
        [sys.executable, "-c", "import signal, beam_tfrecord.commands.cli; "
         "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout == "True\n", done.stderr


# 2. The output-inside-input check compares resolved paths.


def test_2_an_output_inside_a_linked_input_is_refused(shapes, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(shapes, data / "shapes")
    (tmp_path / "link").symlink_to(data / "shapes")
    for pattern in ("link", "link/**"):
        done = run("build", "--input", pattern, "--output", "data/shapes/out", cwd=tmp_path)
        assert done.returncode == 2, done.stdout
        assert done.stderr == (
            f"beam-tfrecord build: error: --output: 'data/shapes/out' is inside input "
            f"{pattern!r}; the build would read its own output\n"
        )
        assert not (data / "shapes" / "out").exists()
    # An --input-list entry inside the output (here through a link to it), on a rebuild.
    out = data / "shapes" / "out"
    out.mkdir()
    shutil.copy(data / "shapes" / "circle" / "circle_0000.jpg", out / "old.jpg")
    (tmp_path / "outlink").symlink_to(out)
    (tmp_path / "list.txt").write_text("data/shapes/circle/circle_0001.jpg\noutlink/old.jpg\n")
    done = run(
        "build", "--input-list", "list.txt", "--output", "data/shapes/out", "--overwrite",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert "names " in done.stderr and "inside --output 'data/shapes/out'" in done.stderr


# 7. Progress counts what this run does, and estimates from what it has measured.


def _run_in_pty(args: list[str], cwd: Path) -> tuple[int, str]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the build, its stdout and stderr the terminal
        os.chdir(cwd)
        os.execv(COMMAND[0], [*COMMAND, *args])
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
    return os.waitstatus_to_exitcode(status), output.decode()


_FRAME = re.compile(
    r"written (\d+)(?: \(and (\d+) kept\))? of (\d+) images.*\| ([\d:]+) elapsed(.*)"
)


def _frames(output: str) -> list[tuple[int, int, int, str]]:
    """(written, kept, to write, what follows the elapsed time) of each progress frame."""
    found = []
    for frame in output.split("\r"):
        match = _FRAME.search(frame)
        if match:
            written, kept, total, _, tail = match.groups()
            found.append((int(written), int(kept or 0), int(total), tail.strip()))
    return found


@pytest.fixture(scope="module")
def noise(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("noise")
    rng = np.random.default_rng(0)
    for i in range(160):
        folder = root / ("a" if i % 2 == 0 else "b")
        folder.mkdir(exist_ok=True)
        pixels = rng.integers(0, 256, (240, 320, 3), np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=90)
    return root


def test_7_the_eta_of_a_resized_build_stays_until_every_image_is_written(noise, tmp_path):
    args = ["build", "--input", str(noise), "--output", "out", "--resize", "160"]
    status, output = _run_in_pty([*args, "--min-shard-size", "1MB", "--max-shard-size", "3MB"],
                                 tmp_path)  # fmt: skip
    assert status == 0, output
    writing = [f for f in _frames(output) if 0 < f[0] < f[2]]
    assert writing, output
    # Before: planned on underestimated bytes, the ETA went at a third of the writing.
    assert all(tail.startswith(", ETA ") for *_, tail in writing), writing


def test_7_resume_counts_the_kept_shards_apart(shapes, tmp_path):
    args = ["build", "--input", str(shapes), "--output", "out"]
    args += ["--min-shard-size", "4KB", "--max-shard-size", "12KB"]
    assert run(*args, cwd=tmp_path).returncode == 0
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    gone = manifest["shards"][0]
    (out / "manifest.json").unlink()
    (out / gone["file"]).unlink()
    status, output = _run_in_pty([*args, "--resume"], tmp_path)
    assert status == 0, output
    written, kept, total, _ = _frames(output)[-1]
    assert (written, kept, total) == (gone["examples"], 30 - gone["examples"], 30), output
