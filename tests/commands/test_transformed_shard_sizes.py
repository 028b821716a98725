"""Shard sizes on transformed images, through the command line: every shard within the bounds.

A --resize, --encode or --store raw build plans each transformed image on its record's measured
size (`beam_tfrecord.measurement`), so noise, which compresses three times worse than the size
model's photographs, keeps --max-shard-size as photographs do. Output stays byte-identical
across runs and worker counts, and --resume keeps what an earlier run finished.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hostile_images import hostile_corpus, photo
from PIL import Image

_REPO = Path(__file__).resolve().parents[2]
_MULTI = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    return subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "build", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def _jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=quality)
    return out.getvalue()


@pytest.fixture(scope="module")
def noise(tmp_path_factory) -> Path:
    """The issue's noise set, smaller: JPEGs of uniform noise in two class folders."""
    root = tmp_path_factory.mktemp("noise")
    rng = np.random.default_rng(0)
    for i in range(120):
        folder = root / ("a" if i % 2 == 0 else "b")
        folder.mkdir(exist_ok=True)
        (folder / f"{i:04d}.jpg").write_bytes(_jpeg(rng.integers(0, 256, (240, 320, 3), np.uint8)))
    return root


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    for i in range(90):
        folder = root / ("cat" if i % 3 else "dog")
        folder.mkdir(exist_ok=True)
        (folder / f"{i:04d}.jpg").write_bytes(_jpeg(photo(320, 240, seed=i)))
    return root


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    for copy in range(4):
        for case in hostile_corpus():
            folder = root / case.name
            folder.mkdir(parents=True, exist_ok=True)
            stem, dot, suffix = Path(case.filename).name.rpartition(".")
            (folder / f"{stem}-{copy}{dot}{suffix}").write_bytes(case.data)
    return root


def _within_bounds(out: Path, low: int, high: int) -> dict:
    manifest = json.loads((out / "manifest.json").read_text())
    last = {}
    for shard in manifest["shards"]:
        last[shard["split"]] = max(last.get(shard["split"], -1), shard["index"])
    for shard in manifest["shards"]:
        size = (out / shard["file"]).stat().st_size
        assert size <= high, (shard["file"], size)
        if shard["index"] < last[shard["split"]]:
            assert size >= low, (shard["file"], size)
    return manifest


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecord-*"))}


@pytest.mark.parametrize(
    "transform",
    [["--resize", "160"], ["--encode", "png"]],
    ids=["resize", "encode-png"],
)
def test_noise_transformed_keeps_every_shard_within_the_bounds(noise, tmp_path, transform):
    low, high = 500_000, 1_500_000
    out = tmp_path / "out"
    done = _cli(
        "--input", str(noise), "--output", str(out), *transform,
        "--min-shard-size", str(low), "--max-shard-size", str(high),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = _within_bounds(out, low, high)
    assert manifest["splits"]["train"]["shards"] > 1
    assert "WARNING" not in done.stdout, done.stdout


def test_hostile_corpus_resized_keeps_the_bounds_or_names_the_shards_outside(hostile, tmp_path):
    # Bounds two of the largest records (107 KB resized) apart, which keep every shard inside.
    # Narrower ones held only while planning refused the images it estimated over 60 KB,
    # which measured 23-42 KB.
    low, high = 20_000, 250_000
    out = tmp_path / "out"
    done = _cli(
        "--input", f"{hostile}/**", "--output", str(out), "--resize", "256",
        "--min-shard-size", str(low), "--max-shard-size", str(high),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Broken images are found while planning, so no shard is written short of its plan.
    _within_bounds(out, low, high)
    assert "outside --min-shard-size" not in done.stdout, done.stdout


def test_clean_photos_resized_keep_the_bounds_and_the_same_bytes_on_any_worker_count(
    photos, tmp_path
):
    low, high = 60_000, 180_000
    bounds = ["--min-shard-size", str(low), "--max-shard-size", str(high)]
    args = ["--input", str(photos), "--resize", "128", *bounds]
    one = _cli(*args, "--output", str(tmp_path / "one"))
    two = _cli(*args, "--output", str(tmp_path / "two"), "--name", "one", *_MULTI)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    _within_bounds(tmp_path / "one", low, high)
    assert _shard_bytes(tmp_path / "one") == _shard_bytes(tmp_path / "two")
    # Kept photographs (no transform) keep the bounds too, as they always did.
    kept = _cli("--input", str(photos), "--output", str(tmp_path / "kept"), *bounds)
    assert kept.returncode == 0, kept.stderr
    _within_bounds(tmp_path / "kept", low, high)


def test_resume_of_a_measured_build_keeps_its_finished_shards(noise, tmp_path):
    out = tmp_path / "out"
    args = ["--input", str(noise), "--output", str(out), "--resize", "160"]
    args += ["--min-shard-size", "500000", "--max-shard-size", "1500000"]
    assert _cli(*args).returncode == 0
    before = _shard_bytes(out)
    # As an interrupted run leaves it: no manifest, one shard not finished.
    (out / "manifest.json").unlink()
    gone = sorted(before)[0]
    (out / gone).unlink()
    done = _cli(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert f"kept {len(before) - 1} of {len(before) - 1}" in done.stdout, done.stdout
    assert _shard_bytes(out) == before


def test_an_estimated_build_names_its_shards_outside_the_bounds(noise, tmp_path):
    low, high = 500_000, 1_500_000
    out = tmp_path / "out"
    done = _cli(
        "--input", str(noise), "--output", str(out), "--resize", "160",
        "--min-shard-size", str(low), "--max-shard-size", str(high),
        "--transformed-sizes", "estimate",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    over = [s["file"] for s in manifest["shards"] if s["bytes"] > high]
    assert over, "the size model underestimates noise: its shards are over the maximum"
    (line,) = [line for line in done.stdout.splitlines() if "outside --min-shard-size" in line]
    assert all(name in line for name in over[:5]), line
    assert "on estimated sizes; --transformed-sizes measure keeps the bounds" in line
