"""What a trial of scheduled bucket builds found broken (2026-11-29), each through the command
line as the trial ran it: the command that showed it, and the promise it broke."""

from __future__ import annotations

from pathlib import Path

import pytest
from command_process import run_tool as run
from imagegen import make_collection


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "shapes"
    make_collection(root, {"circle": 3, "square": 3}, seed=5, size=(16, 24))
    return root


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
    """`build --input photos --output s3:/bucket/ds` (or `s3//bucket/ds`) built, exit status 0,
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
