"""A local build's head start: shards listed, planned and written by its worker processes while
Beam starts, taken by the pipeline only where its own plan is the same (`head_start`,
`early_start`)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from dataclasses import replace
from pathlib import Path

import pytest
from command_process import group_is_gone, run_command
from imagegen import make_collection
from PIL import Image

from beam_tfrecord import early_start
from beam_tfrecord.beam import pipeline, writing
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.shard_processes import started

pytestmark = pytest.mark.skipif(usable_cores() < 2, reason="a head start needs two cores")

_MULTI = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _built_files(folder: Path) -> dict[str, bytes]:
    """The shards, their indexes and report lines, the report and the labels: all a build
    writes but its manifest and dataset info (which name the output folder)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
        and p.name not in ("manifest.json", "dataset_info.json", ".beam-tfrecord.lock")
    }


@pytest.fixture
def small_head_start(monkeypatch):
    """A head start for a build of a few small images, which a real one leaves to the pipeline."""
    for module in (early_start, pipeline, writing):
        monkeypatch.setattr(module, "PROCESSES_MIN_BYTES", 1)
    monkeypatch.setattr(early_start, "MIN_MEAN_BYTES", 0)
    yield
    assert multiprocessing.active_children() == [], "the build ends the processes it started"


def _collection(src: Path) -> None:
    make_collection(src, {"cat": 14, "dog": 12, "owl": 9}, seed=11, size=(64, 160))
    # One the build reports (not an image) and one it normalizes (CMYK, which TF cannot read).
    (src / "dog" / "dog_broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    Image.new("CMYK", (70, 50), (10, 200, 30, 0)).save(src / "owl" / "owl_cmyk.jpg")


def _config(src: Path, out: Path, **settings) -> BuildConfig:
    return BuildConfig.from_settings(
        {
            "inputs": [str(src)],
            "output": str(out),
            "name": "zoo",
            "max_shard_size": "40KB",
            "min_shard_size": "10KB",
            **settings,
        }
    )


def test_the_pipeline_takes_every_shard_of_a_head_start_and_writes_what_it_would_without(
    tmp_path, small_head_start, caplog
):
    src = tmp_path / "src"
    _collection(src)
    config = _config(src, tmp_path / "here")
    assert early_start.start_before_beam(config)
    pool = started()
    planned = pool.head_start_shards()
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    result = pipeline.build(config)
    # Its processes write the head start's shards: the pipeline lists here, not behind them.
    assert "listing folders in" not in caplog.text
    shards = [s["file"] for s in result.manifest["shards"]]
    assert len(shards) > 4 and sorted(planned) == sorted(shards)
    assert pool.taken_from_head_start == len(shards), "every shard written once, early"
    assert result.manifest["inputs"]["written"] == 36
    assert result.manifest["inputs"]["skipped"] == 1  # the broken one, reported

    pipeline.build(_config(src, tmp_path / "there"), _MULTI)  # no head start, no processes
    here, there = _built_files(tmp_path / "here"), _built_files(tmp_path / "there")
    assert len(here) > 10 and here == there


def test_a_head_start_that_planned_otherwise_is_rewritten_and_leaves_no_stale_shard(
    tmp_path, small_head_start
):
    """Images added after the head start listed: its shards are not the pipeline's; those the
    plan names are written anew, the others removed, and the build is the one of the images
    the pipeline listed."""
    src = tmp_path / "src"
    _collection(src)
    config = _config(src, tmp_path / "here")
    assert early_start.start_before_beam(config)
    planned = started().head_start_shards()
    deadline = time.monotonic() + 60
    while not all((tmp_path / "here" / name).exists() for name in planned):
        assert time.monotonic() < deadline, "the head start wrote its shards"
        time.sleep(0.05)
    make_collection(src, {"cat": 20, "eel": 6}, seed=12, size=(64, 160), start=100)
    pool = started()
    result = pipeline.build(config)
    assert result.manifest["inputs"]["written"] == 62
    assert pool.taken_from_head_start < len(planned)

    pipeline.build(_config(src, tmp_path / "there"), _MULTI)
    here, there = _built_files(tmp_path / "here"), _built_files(tmp_path / "there")
    assert here == there


def test_a_build_whose_images_are_small_or_many_has_no_head_start(tmp_path, monkeypatch):
    """Planning twice costs little only next to writing large images; and a head start holds
    its whole listing, so large collections are the pipeline's alone."""
    from beam_tfrecord import head_start

    src = tmp_path / "src"
    _collection(src)
    assert early_start.head_start_for(_config(src, tmp_path / "out")) is None, "small images"
    monkeypatch.setattr(early_start, "MIN_MEAN_BYTES", 0)
    start = early_start.head_start_for(_config(src, tmp_path / "out"))
    assert start is not None
    assert head_start.plan_shards(replace(start, min_bytes=1, min_mean_bytes=10**6)) == []
    assert len(head_start.plan_shards(replace(start, min_bytes=1))) > 4
    monkeypatch.setattr(head_start, "MAX_IMAGES", 10)
    assert head_start.plan_shards(replace(start, min_bytes=1)) == []


@pytest.mark.parametrize(
    "settings",
    [{"dedup": True}, {"resume": True}, {"resize": 32, "encode": "jpeg"}, {"inputs": ["a", "b"]}],
)
def test_builds_that_read_images_to_plan_or_resume_have_no_head_start(tmp_path, settings):
    inputs = [str(tmp_path / name) for name in settings.pop("inputs", ["src"])]
    config = BuildConfig.from_settings(
        {"inputs": inputs, "output": str(tmp_path / "out"), **settings}
    )
    assert early_start.head_start_for(config) is None


def test_the_command_line_starts_writing_before_beam_is_imported(tmp_path):
    """A plain `beam-tfrecord build` of 64 MB of photographs: checked, locked and its worker
    processes started before Beam's import, every shard taken from the head start; Beam
    imported without what a local build never uses, and the same files as a build in a process
    that imported all of Beam."""
    from beam_tfrecord.cli import main
    from beam_tfrecord.compat import BEAM_UNUSED_BY_A_LOCAL_BUILD

    src = tmp_path / "src"
    make_collection(src, {"a": 50, "b": 50, "c": 50}, seed=3, size=(900, 1000))
    assert sum(p.stat().st_size for p in src.rglob("*.jpg")) > 64 * 10**6
    out = tmp_path / "out"
    flags = ["--input", str(src), "--name", "zoo", "--max-shard-size", "20MB",
             "--min-shard-size", "5MB"]  # fmt: skip
    done, modules = run_command(["build", *flags, "--output", str(out), "-v"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "apache_beam.runners.direct" in modules
    assert modules.isdisjoint(BEAM_UNUSED_BY_A_LOCAL_BUILD)
    assert main(["build", *flags, "--output", str(tmp_path / "whole")]) == 0
    assert _built_files(out) == _built_files(tmp_path / "whole")
    log = done.stderr
    assert "before Beam's import" in log
    shards = json.loads((out / "manifest.json").read_text())["shards"]
    assert len(shards) > 3
    assert log.count("written by the head start") == len(shards)
    assert log.index("before Beam's import") < log.index("writing shards in")


_STOPPED_AFTER_BEAMS_IMPORT = """
import os, runpy, signal, sys, time
from beam_tfrecord import early_start
from beam_tfrecord.commands import build

early_start.PROCESSES_MIN_BYTES = 1  # a head start for a few small images
early_start.MIN_MEAN_BYTES = 0
lean_import, calls = build._imported_lean_beam, []

def stopped_once_beam_is_imported(extra):
    calls.append(extra)
    imported = lean_import(extra)
    if len(calls) == 2:  # the build's own settings, after the head start's import of Beam
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # the signal's handler ends this
    return imported

build._imported_lean_beam = stopped_once_beam_is_imported
sys.argv = ["beam-tfrecord", *{args!r}]
runpy.run_module("beam_tfrecord.cli", run_name="__main__", alter_sys=True)
"""


def test_a_build_stopped_between_its_head_start_and_its_pipeline_ends_as_a_stopped_build(tmp_path):
    """Its worker processes are writing from before Beam's import: a Ctrl-C after that import,
    before the pipeline's run, ends them, removes the lock, keeps the finished shards and says
    how to go on, whose command finishes the build as a build never stopped would have."""
    import subprocess
    import sys

    from beam_tfrecord.cli import main
    from beam_tfrecord.output_lock import LOCK_FILE
    from beam_tfrecord.storage import TEMP_MARKER

    src, out = tmp_path / "src", tmp_path / "out"
    _collection(src)
    flags = ["--input", str(src), "--name", "zoo", "--max-shard-size", "40KB",
             "--min-shard-size", "10KB"]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_AFTER_BEAMS_IMPORT.format(
            args=["build", *flags, "--output", str(out)])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    stopped, go_on = err.splitlines()
    assert stopped.startswith("beam-tfrecord build: interrupted (SIGINT) after "), err
    assert stopped.endswith(f"kept in {out}, no manifest.json yet."), err
    assert go_on.startswith("To go on: ") and go_on.endswith(" --resume"), err
    assert group_is_gone(process.pid), "its worker processes end with it"
    left = [p.name for p in out.rglob("*")]
    assert LOCK_FILE not in left and not [n for n in left if TEMP_MARKER in n], left
    assert "manifest.json" not in left

    assert main(["build", *flags, "--output", str(out), "--resume"]) == 0
    assert main(["build", *flags, "--output", str(tmp_path / "whole")]) == 0
    assert _built_files(out) == _built_files(tmp_path / "whole")


def test_a_build_of_few_shards_has_one_head_start_shard_a_process_and_the_rest_in_segments(
    tmp_path, small_head_start
):
    """With as few shards as the pipeline prepares in segments (at most two a process), the
    head start writes one shard a process and no more: the rest are prepared by every
    process as they come free, not written whole by one while the others idle (3 shards on
    2 processes took two shards' time)."""
    src = tmp_path / "src"
    _collection(src)
    config = _few_shards(src, tmp_path / "here")
    assert early_start.start_before_beam(config)
    pool = started()
    planned = pool.head_start_shards()
    result = pipeline.build(config)
    shards = [s["file"] for s in result.manifest["shards"]]
    assert 2 < len(shards) <= 4 and sorted(planned) == sorted(shards)
    assert pool.taken_from_head_start == 2

    pipeline.build(_few_shards(src, tmp_path / "there"), _MULTI)  # no head start, no processes
    here, there = _built_files(tmp_path / "here"), _built_files(tmp_path / "there")
    assert len(here) > 6 and here == there


def _few_shards(src: Path, out: Path) -> BuildConfig:
    return _config(src, out, max_shard_size="120KB", min_shard_size="60KB", splits={"train": 1.0})
