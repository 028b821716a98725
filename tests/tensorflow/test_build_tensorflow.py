"""TensorFlow's own reader on a build's output: every record parses and every image decodes as stated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sample_build(tmp_path_factory):
    """The README's first command, run as a user runs it (with -v), into a temporary folder."""
    out = tmp_path_factory.mktemp("build") / "fruits"
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.images_to_tfrecord", "--config", "configs/sample.yaml",
         "--output", str(out), "-v"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_summary_and_report_of_the_sample(sample_build):
    out, proc = sample_build
    assert "Built 'fruits'" in proc.stdout
    assert "1 of 46 inputs was NOT written (truncated: 1)" in proc.stdout
    assert "wrote shard fruits-train.tfrecord-00000-of-" in proc.stderr, (
        "with -v, a line per shard is shown while it runs"
    )
    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    by_path = {r["relpath"]: r for r in report}
    assert by_path["cherry/cherry_truncated.jpg"]["action"] == "skipped"
    assert by_path["cherry/cherry_truncated.jpg"]["reason"] == "truncated"
    for fixed in (
        "apple/apple_cmyk.jpg",
        "banana/banana_rotated.jpg",
        "cherry/cherry_transparent.png",
    ):
        assert by_path[fixed]["action"] == "modified", fixed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == {
        "listed": 46, "written": 45, "skipped": 1,
        "skipped_by_reason": {"truncated": 1}, "modified": 3, "unaccounted": 0,
    }  # fmt: skip
    assert manifest["splits"]["train"]["shards"] >= 2


def test_tensorflow_reads_every_record_and_decodes_every_image(sample_build, tf):
    out, _ = sample_build
    manifest = json.loads((out / "manifest.json").read_text())
    classes = (out / "labels.txt").read_text().splitlines()
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/channels": tf.io.FixedLenFeature([], tf.int64),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/key/sha256": tf.io.FixedLenFeature([], tf.string),
    }
    seen = {}
    for split, info in manifest["splits"].items():
        files = sorted(str(p) for p in out.glob(f"fruits-{split}.tfrecord-*"))
        assert len(files) == info["shards"]
        count = 0
        for record in tf.data.TFRecordDataset(files):
            f = tf.io.parse_single_example(record, spec)
            image = tf.io.decode_image(
                f["image/encoded"], channels=int(f["image/channels"]), expand_animations=False
            )
            shape = (int(f["image/height"]), int(f["image/width"]), int(f["image/channels"]))
            assert tuple(image.shape) == shape
            name = f["image/filename"].numpy().decode()
            assert classes[int(f["image/class/label"])] == f["image/class/text"].numpy().decode()
            assert name.split("/")[0] == f["image/class/text"].numpy().decode()
            seen[name] = shape
            count += 1
        assert count == info["examples"]
    assert len(seen) == 45
    # The EXIF-rotated 128x96 photo is stored upright: TensorFlow ignores EXIF, so we applied it.
    assert seen["banana/banana_rotated.jpg"] == (128, 96, 3)
    assert seen["apple/apple_cmyk.jpg"] == (96, 120, 3)
