"""What the trials of 2026-11-29 (a new user's local builds, a data engineer's tooling,
scheduled bucket builds) found broken, each through the command line as the trial ran it: the
command that showed it, and the promise it broke."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from command_process import run_tool as run
from imagegen import make_collection


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "shapes"
    make_collection(root, {"circle": 4, "square": 4}, seed=5, size=(16, 24))
    return root


def _report(out: Path) -> dict[str, tuple[str, str]]:
    lines = (out / "report.jsonl").read_text().splitlines()
    return {r["relpath"]: (r["reason"], r["message"]) for r in map(json.loads, lines)}


def test_a_loop_of_links_among_the_images_is_reported_not_fatal(shapes, tmp_path):
    """`ln -s b a; ln -s a b` anywhere below --input stopped the whole build: "--input: ...
    cannot be listed: [Errno 40] Too many levels of symbolic links"."""
    data = tmp_path / "data"
    shutil.copytree(shapes, data)
    for one, other in (("a", "b"), ("x.jpg", "y.jpg")):
        (data / "circle" / one).symlink_to(other)
        (data / "circle" / other).symlink_to(one)
    for pattern in ("data", "data/**", "data/**/*.jpg"):
        out = tmp_path / "out"
        done = run("build", "--input", pattern, "--output", "out", "--overwrite", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert _report(out) == {
            f"circle/{name}": ("read_error", "a link in a loop of links, to no file")
            for name in ("x.jpg", "y.jpg")
        }, pattern
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["inputs"]["written"] == 8, pattern


def test_an_image_too_wide_for_jpeg_is_reported_as_such(tmp_path):
    """`--encode jpeg` of a 70000x4 PNG was reported as `corrupt`: "the png decode failed:
    OSError: broken data stream when writing image file", whose advice is to copy the file
    again. The file is fine; a JPEG cannot be that wide."""
    from PIL import Image

    (tmp_path / "in" / "x").mkdir(parents=True)
    Image.new("RGB", (70_000, 4), "red").save(tmp_path / "in" / "x" / "long.png")
    Image.new("RGB", (8, 4), "red").save(tmp_path / "in" / "x" / "short.png")
    args = ["build", "--input", "in", "--output", "out", "--splits", "train=1"]
    done = run(*args, "--encode", "jpeg", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _report(tmp_path / "out")["x/long.png"] == (
        "unsupported",
        "a 70000x4 image is larger than a JPEG can be (65,500 pixels a side); PNG can hold it",
    )


def test_dedup_says_when_a_copy_left_out_had_another_label(shapes, tmp_path):
    """--dedup keeps the copy of the smallest relative path with its own label: a copy filed
    under another class (a mislabelled image) was said only in report.jsonl."""
    data = tmp_path / "data"
    shutil.copytree(shapes, data)
    shutil.copy(data / "square" / "square_0001.jpg", data / "circle" / "zz_copy.jpg")
    shutil.copy(data / "square" / "square_0002.jpg", data / "square" / "zz_same.jpg")
    done = run("build", "--input", "data", "--output", "out", "--dedup", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        "WARNING: 1 duplicate left out by --dedup had another label than the copy written, "
        "which keeps its own (report.jsonl, reason duplicate, says which)"
    ) in done.stdout.splitlines()
    report = _report(tmp_path / "out")
    assert report["circle/zz_copy.jpg"][0] == "duplicate"


def test_a_value_starting_with_a_dash_gets_a_hint_not_only_argparse_s_words(tmp_path):
    """`--min-shard-size -5MB` said only "expected one argument": argparse takes the value for
    a flag. Given with '=', it gets the size's own refusal."""
    done = run("build", "--input", "x", "--output", "y", "--min-shard-size", "-5MB", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "beam-tfrecord build: error: argument --min-shard-size: expected one argument; a value "
        "that starts with '-' is given as --min-shard-size=VALUE (see beam-tfrecord build --help)\n"
    )
    done = run("build", "--input", "x", "--output", "y", "--min-shard-size=-5MB", cwd=tmp_path)
    assert done.returncode == 2 and "got '-5MB'" in done.stderr
    done = run("build", "--input", cwd=tmp_path)  # no value at all: no such hint
    assert done.stderr.endswith(
        "argument --input: expected one argument (see beam-tfrecord build --help)\n"
    )


def test_a_name_the_terminal_cannot_show_is_escaped_not_a_traceback(shapes, tmp_path):
    """With an output encoding that has no 'é' (PYTHONIOENCODING=ascii, a cron job's or an old
    container's locale), `inspect` of a class named `café` ended in a UnicodeEncodeError
    traceback."""
    shutil.copytree(shapes / "circle", tmp_path / "data" / "café")
    done = run("build", "--input", "data", "--output", "out", "--splits", "train=1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shard = "out/out-train.tfrecord-00000-of-00001"
    done = run("inspect", "-n", "1", shard, cwd=tmp_path, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    assert '    image/class/text   bytes  "caf\\xe9"' in done.stdout.splitlines()


@pytest.mark.parametrize(
    ("setting", "typed", "meant"),
    [
        ("--output", "s3:/bucket/ds", "s3://bucket/ds"),
        ("--output", "gs//bucket/ds", "gs://bucket/ds"),
        ("--input", "gs:/bucket/photos", "gs://bucket/photos"),
    ],
)
def test_a_store_url_missing_a_slash_is_refused_not_built_on_this_disk(
    shapes, tmp_path, setting, typed, meant
):
    """Bucket trial: `build --input photos --output s3:/bucket/ds` (or `s3//bucket/ds`) built, exit status 0,
    into a folder `s3:/bucket/ds` below the current one: a nightly build into a bucket went to
    the launching machine's disk, and said "Built 'ds' in s3:/bucket/ds"."""
    places = {"--input": str(shapes), "--output": "out"} | {setting: typed}
    done = run("build", "--input", places["--input"], "--output", places["--output"], cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip().splitlines() == [
        f"beam-tfrecord build: error: {setting}: {typed!r}: a mistyped URL, taken for a path on "
        f"this disk; did you mean {meant!r}?"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_reading_command_names_the_url_a_mistyped_one_meant(tmp_path, command):
    """Bucket trial: `verify s3:/dst/ds1` said only 'no such file or directory', where a build
    given the same says which URL was meant."""
    done = run(command, "s3:/dst/ds1", cwd=tmp_path)
    assert done.returncode == 1
    assert (
        f"beam-tfrecord {command}: error: s3:/dst/ds1: a mistyped URL, taken for a path on this "
        "disk; did you mean 's3://dst/ds1'?"
    ) in done.stderr.splitlines()
