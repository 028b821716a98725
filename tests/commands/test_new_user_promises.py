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
from command_process import COMMAND, wide_terminal
from command_process import run_tool as run
from imagegen import make_collection
from PIL import Image


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


def _wait_for_the_commands_code(pid: int) -> None:
    """Waits until the command's own modules are loading: Python's startup (its `site`, before
    any of a package's code runs) is Python's, and a Ctrl-C in it ends any program with its
    traceback. `math`'s shared library loads once the command's imports are under way (as
    `tempfile` and `importlib.metadata` load it), a few hundred milliseconds before they end."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/maps") as f:
                if "/math.cpython" in f.read():
                    return
        except FileNotFoundError:
            return  # the process ended (the assertions say how)
        time.sleep(0.002)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
@pytest.mark.parametrize("command", ["build", "verify"])
def test_6_ctrl_c_while_starting_is_one_line(shapes, many_records, tmp_path, command, delay):
    args = ["--input", str(shapes), "--output", str(tmp_path / "x")]
    process = subprocess.Popen(
        [*COMMAND, command, *(args if command == "build" else [str(many_records)])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    _wait_for_the_commands_code(process.pid)
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
        wide_terminal()  # the whole progress line, whatever the terminal it runs from says
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
        # Noise: its resized records are larger than planning estimates. Large enough that
        # writing them outlasts a progress frame or two (under 64 MB: no shard processes).
        pixels = rng.integers(0, 256, (480, 640, 3), np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=90)
    return root


def test_7_the_eta_of_a_resized_build_stays_until_every_image_is_written(noise, tmp_path):
    args = ["build", "--input", str(noise), "--output", "out", "--resize", "320"]
    # One image at a time (no read-ahead threads): an idle machine wrote them all between two
    # frames of the progress line, which redraws twice a second. Planned on estimates, as when
    # this was found: a build that measures first has resized every image before it writes,
    # and copied them into their shards between two frames (a CI run saw no frame of writing).
    # Encoded as PNG at 320 px, the writing takes 5 to 7 frames here.
    args += ["--read-ahead", "0", "--min-shard-size", "1MB", "--max-shard-size", "3MB"]
    args += ["--transformed-sizes", "estimate", "--encode", "png"]
    status, output = _run_in_pty(args, tmp_path)
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


# 8. The small ones, each a line users meet.


@pytest.fixture(scope="module")
def built(shapes, tmp_path_factory) -> Path:
    """A finished build of the shapes, in a folder of its own, named `out`."""
    where = tmp_path_factory.mktemp("built")
    done = run("build", "--input", str(shapes), "--output", "out", cwd=where)
    assert done.returncode == 0, done.stderr
    return where


def test_8_resume_of_another_plan_does_not_say_it_found_no_shards(shapes, tmp_path):
    args = ["build", "--input", str(shapes), "--output", "out"]
    assert run(*args, cwd=tmp_path).returncode == 0
    (tmp_path / "out" / "manifest.json").unlink()
    # Its record of its settings would refuse another name (tests/test_resume_settings.py): as
    # a folder an earlier version built, which has none.
    (tmp_path / "out" / "build-settings.json").unlink()
    done = run(*args, "--name", "other", "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    resumed = [line for line in done.stdout.splitlines() if "resumed:" in line]
    assert len(resumed) == 1 and resumed[0].startswith(
        "  resumed: kept none: removed 3 finished shards of another plan"
    ), done.stdout


def test_8_a_bit_flipped_jpeg_is_corrupt_and_a_cut_one_truncated(shapes, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(shapes, src)
    whole = (src / "circle" / "circle_0000.jpg").read_bytes()

    def flipped() -> bytes:
        """One bit flipped in the scan, near its end, that makes a marker (0xFF, then a byte
        naming a segment) whose segment length runs past the end of the file: a whole file,
        which read as a short one."""
        for at in range(len(whole) - 5, len(whole) // 2, -1):
            for bit in range(8):
                marker = whole[at + 1]
                if whole[at] ^ (1 << bit) != 0xFF or whole[at - 1] == 0xFF:
                    continue
                if marker in (0x00, 0x01, 0xFF) or 0xD0 <= marker <= 0xD9:
                    continue
                if at + 2 + int.from_bytes(whole[at + 2 : at + 4], "big") > len(whole):
                    data = bytearray(whole)
                    data[at] ^= 1 << bit
                    return bytes(data)
        raise AssertionError("no such flip in this image")

    (src / "circle" / "flipped.jpg").write_bytes(flipped())
    (src / "circle" / "cut.jpg").write_bytes(whole[: len(whole) // 2])
    done = run("build", "--input", str(src), "--output", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = [json.loads(line) for line in (tmp_path / "out" / "report.jsonl").open()]
    reasons = {r["relpath"]: r["reason"] for r in report}
    assert reasons == {"circle/flipped.jpg": "corrupt", "circle/cut.jpg": "truncated"}, reasons


def test_8_images_extensions_leave_out_are_counted(shapes, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(shapes, src)
    for i in range(3):
        Image.new("RGB", (20, 20), (i * 60, 0, 0)).save(src / "square" / f"drawn{i}.png")
    args = ["build", "--input", str(src), "--output", "out", "--extensions", "jpg"]
    done = run(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        "NOTE: 3 image files of other kinds were not taken (.png: 3): --extensions jpg leaves "
        "them out"
    ) in done.stdout.splitlines()
    plain = run("build", "--input", str(src), "--output", "all", cwd=tmp_path)
    assert "NOTE" not in plain.stdout


def test_8_a_size_without_a_unit_is_named_with_the_unit_meant(shapes, tmp_path):
    done = run("build", "--input", str(shapes), "--output", "out", "--max-shard-size", "10",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "beam-tfrecord build: error: --max-shard-size: 10 is 10 bytes (a size without a unit "
        "is bytes), below --min-shard-size's default, 100.0 MB; did you mean 10MB, with "
        "--min-shard-size set too?\n"
    )


def test_8_a_python_caller_is_told_the_setting_not_the_flag(shapes, built):
    script = (
        "from beam_tfrecord.beam.pipeline import build\n"
        "from beam_tfrecord.config import BuildConfig, ConfigError\n"
        "try:\n"
        f"    build(BuildConfig(inputs=({str(shapes)!r},), output='out'))\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=built, timeout=300)  # fmt: skip
    assert done.stdout == (
        "--output: 'out' already holds an earlier build; pass overwrite=True to replace it\n"
    ), done.stderr
    cli = run("build", "--input", str(shapes), "--output", "out", cwd=built)
    assert "pass --overwrite to replace it" in cli.stderr


def test_8_preview_names_an_unknown_split_before_the_sheet_in_the_way(built):
    (built / "preview.png").write_bytes(b"a sheet made before")
    done = run("preview", "out", "--split", "tset", cwd=built)
    assert done.returncode == 2
    assert done.stderr == (
        "beam-tfrecord preview: error: --split: no split 'tset' in out; it has train, "
        "validation, test\n"
    )


def test_8_verify_prints_a_folders_files_as_it_was_given(built):
    folder = run("verify", "out", cwd=built)
    one = run("verify", "out/out-test.tfrecord-00000-of-00001", cwd=built)
    assert folder.returncode == 0 and one.returncode == 0, folder.stdout + one.stdout
    assert "OK       out/out-test.tfrecord-00000-of-00001: " in folder.stdout
    assert one.stdout.splitlines()[0] in folder.stdout.splitlines()
    assert str(built) not in folder.stdout
