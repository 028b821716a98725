"""Duplicate control and grouped splits: no image content, and no subject, in two splits."""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from imagegen import jpeg_bytes, make_collection

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.config import BuildConfig, ConfigError
from beam_tfrecord.splits import assign_split

pytestmark = pytest.mark.slow
SPLITS = (("train", 0.5), ("test", 0.5))
SHARD_RE = re.compile(r"-(?P<split>[a-z]+)\.tfrecord-\d{5}-of-\d{5}$")


def _written(out: Path) -> list[tuple[str, str, str]]:
    """(split, relpath, sha256 of the image) of every record."""
    rows = []
    for path in sorted(out.iterdir()):
        m = SHARD_RE.search(path.name)
        if m:
            for record in read_records(str(path)):
                f = decode_example(record)
                rows.append(
                    (
                        m["split"],
                        f["image/filename"][0].decode(),
                        hashlib.sha256(f["image/encoded"][0]).hexdigest(),
                    )
                )
    return rows


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """A collection with copies that sit in different folders and would fall into different splits."""
    src = tmp_path_factory.mktemp("src")
    make_collection(src, {"cat": 12, "dog": 12}, seed=6)
    rng = np.random.default_rng(11)
    copies = []
    k = 0
    while len(copies) < 3:
        a, b = f"cat/dup_{k}.jpg", f"dog/old/dup_copy_{k}.jpg"
        if assign_split(a, SPLITS, 0) != assign_split(b, SPLITS, 0):
            data = jpeg_bytes(rng, 60, 40)
            for rel in (a, b):
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_bytes(data)
            copies.append((a, b))
        k += 1
    # A third copy of the first pair, in yet another folder.
    (src / "dog" / "zz_third.jpg").write_bytes((src / copies[0][0]).read_bytes())
    return src, copies


def _config(src: Path, out: Path, **settings) -> BuildConfig:
    return BuildConfig.from_settings(
        dict(inputs=(f"{src}/**",), output=str(out), splits=SPLITS, min_shard_size="30KB",
             max_shard_size="90KB", labels="regex:^(cat|dog)/", **settings)
    )  # fmt: skip


def test_without_dedup_copies_leak_across_splits(collection, tmp_path):
    src, _ = collection
    build(_config(src, tmp_path / "out"), [])
    splits_of = defaultdict(set)
    for split, _, digest in _written(tmp_path / "out"):
        splits_of[digest].add(split)
    assert any(len(s) > 1 for s in splits_of.values()), "the test collection really has the problem"


def test_dedup_writes_one_copy_and_reports_every_copy(collection, tmp_path):
    src, copies = collection
    out = tmp_path / "out"
    result = build(_config(src, out, dedup=True), [])
    rows = _written(out)
    digests = [digest for _, _, digest in rows]
    assert len(digests) == len(set(digests)), "each content is written once, so in one split"
    written = {relpath for _, relpath, _ in rows}
    for kept, dropped in copies:
        assert kept in written and dropped not in written  # the smallest relative path is kept
    assert "dog/zz_third.jpg" not in written

    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    dropped = {
        r["relpath"]: r for r in report if r["reason"] == "duplicate" and r["action"] == "skipped"
    }
    kept = {r["relpath"]: r for r in report if r["reason"] == "duplicate" and r["action"] == "kept"}
    assert set(dropped) == {b for _, b in copies} | {"dog/zz_third.jpg"}
    assert set(kept) == {a for a, _ in copies}
    assert copies[0][0] in dropped["dog/zz_third.jpg"]["message"]
    assert "labelled 'cat' there, 'dog' here" in dropped[copies[1][1]]["message"]
    assert result.manifest["inputs"]["skipped_by_reason"] == {"duplicate": 4}
    assert result.counters["duplicates_dropped"] == 4


def test_split_by_keeps_each_subject_in_one_split(tmp_path):
    src = tmp_path / "src"
    rng = np.random.default_rng(2)
    for patient in range(40):
        for scan in range(4):
            path = src / ("sick" if patient % 2 else "well") / f"p{patient:03d}_scan{scan}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(jpeg_bytes(rng, 24, 24))

    def splits_per_patient(out: Path) -> dict[str, set[str]]:
        found = defaultdict(set)
        for split, relpath, _ in _written(out):
            found[re.search(r"p\d{3}", relpath)[0]].add(split)
        return found

    build(BuildConfig(inputs=(f"{src}/**",), output=str(tmp_path / "plain"), splits=SPLITS), [])
    assert any(len(s) > 1 for s in splits_per_patient(tmp_path / "plain").values())
    build(BuildConfig(inputs=(f"{src}/**",), output=str(tmp_path / "grouped"), splits=SPLITS,
                      split_by=r"(p\d+)_scan"), [])  # fmt: skip
    grouped = splits_per_patient(tmp_path / "grouped")
    assert len(grouped) == 40 and all(len(s) == 1 for s in grouped.values())
    assert {next(iter(s)) for s in grouped.values()} == {"train", "test"}


def test_split_by_must_have_a_group():
    with pytest.raises(
        ConfigError, match=re.escape("--split-by: regex 'p[0-9]+' has no capture group")
    ):
        BuildConfig(inputs=("a",), output="o", split_by="p[0-9]+")
    with pytest.raises(ConfigError, match=re.escape("--split-by: regex '(p' does not compile")):
        BuildConfig(inputs=("a",), output="o", split_by="(p")


def test_a_local_build_hashes_in_its_processes_and_drops_what_any_runner_drops(
    tmp_path, monkeypatch, caplog
):
    """--dedup's hashing runs on a local build's shard processes, a run of images each, and
    keeps and reports exactly what the multi-process DirectRunner (hashing in its workers'
    threads) keeps and reports."""
    import logging
    import multiprocessing

    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_tfrecord.beam import pipeline, writing

    src = tmp_path / "src"
    make_collection(src, {"cat": 30, "dog": 30}, seed=8)
    copies = sorted(src.rglob("*.jpg"))[:12]
    for n, original in enumerate(copies):
        other = src / ("dog" if "cat" in original.parent.name else "cat") / f"copy{n}.jpg"
        other.write_bytes(original.read_bytes())
    monkeypatch.setattr(pipeline, "PROCESSES_MIN_BYTES", 1)  # start them for a small build
    monkeypatch.setattr(writing, "PROCESSES_MIN_BYTES", 1)
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    config = BuildConfig.from_settings(
        {"inputs": [str(src)], "output": str(tmp_path / "here"), "dedup": True}
    )
    if not pipeline.shard_processes(config, PipelineOptions([])):
        pytest.skip("this machine gives the build no shard processes")
    here = build(config)
    assert "hashing in" in caplog.text
    assert multiprocessing.active_children() == []
    elsewhere = BuildConfig.from_settings(
        {
            "inputs": [str(src)],
            "output": str(tmp_path / "there"),
            "dedup": True,
            "name": config.name,
        }
    )
    there = build(elsewhere, ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    assert here.manifest["inputs"] == there.manifest["inputs"]
    assert here.manifest["inputs"]["skipped_by_reason"] == {"duplicate": 12}
    for name in ("report.jsonl",):
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "there" / name).read_bytes()
    assert _written(tmp_path / "here") == _written(tmp_path / "there")
