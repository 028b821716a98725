"""A transformed image is read, decoded and encoded once when its shard is written on this
machine: measuring its size keeps its record (`measure_into`), and the shard writer copies it.
The shard is the same, byte for byte, as the one written by transforming each image again."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from hostile_images import hostile_corpus, photo
from PIL import Image
from written_shards import file_digests, one_shard

from beam_tfrecord.beam import pipeline, writing
from beam_tfrecord.beam.pipeline import preparer
from beam_tfrecord.codec.records import image_record_size
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry
from beam_tfrecord.images.decode import encode_for_tensorflow
from beam_tfrecord.listing import SourceFile
from beam_tfrecord.measurement import Prepared, measure_into, measured
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.shard_writer import write_shard

CONFIG = BuildConfig.from_settings(
    {"inputs": ["unused"], "output": "unused", "resize": 64, "encode": "jpeg"}
)
POLICY = CONFIG.image
MAX = 1 << 20


@pytest.fixture
def images(tmp_path) -> list[ImageEntry]:
    """The hostile corpus (normalized, reported and kept images) and a few photographs, planned
    into one shard with keys out of file order."""
    files = {f"{n:02d}/{case.filename}": case.data for n, case in enumerate(hostile_corpus())}
    for n in range(6):
        data = _jpeg(photo(160 + 8 * n, 120, seed=n))
        files[f"photos/{n}.jpg"] = data
    entries = []
    for number, (relpath, data) in enumerate(sorted(files.items())):
        path = tmp_path / "src" / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        key = (number * 7919) % 211
        entries.append(ImageEntry(str(path), relpath, len(data), "train", key, "x", 0, 1))
    return entries


def _jpeg(pixels: np.ndarray) -> bytes:
    import io

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return out.getvalue()


def _measured_from_sources(entries: list[ImageEntry]) -> list[ImageEntry | ReportEntry]:
    out = []
    for entry in entries:
        try:
            data: bytes | OSError = Path(entry.url).read_bytes()
        except OSError as err:
            data = err
        out.append(measured(entry, data, POLICY, MAX))
    return out


def test_a_kept_record_makes_the_shard_transforming_again_makes(images, tmp_path):
    reference = _measured_from_sources(images)
    kept = measure_into(images, POLICY, MAX, str(tmp_path / "kept.records"))
    # Measuring says the same whether it keeps the record or not: sizes and reasons.
    assert [
        dataclasses.replace(k, prepared="") if isinstance(k, ImageEntry) else k for k in kept
    ] == (reference)
    assert any(isinstance(k, ReportEntry) for k in kept)
    planned = [k for k in kept if isinstance(k, ImageEntry)]
    assert all(k.prepared for k in planned)
    expected, expected_report = write_shard(
        one_shard(tmp_path / "again"),
        [r for r in reference if isinstance(r, ImageEntry)],
        POLICY,
        max_record_size=MAX,
    )
    assert {r.action for r in expected_report} == {"modified"}
    # The sources are gone: a writer that read them again would report every image.
    for entry in images:
        os.remove(entry.url)
    result, report = write_shard(one_shard(tmp_path / "kept"), planned, POLICY, max_record_size=MAX)
    assert file_digests(tmp_path / "kept") == file_digests(tmp_path / "again")
    assert report == expected_report
    # The books say one read, decode and encode an image, as the writer's own would.
    assert result == expected
    assert result.reads == len(planned) and result.encodes > 0


def test_a_damaged_kept_record_is_reported_and_the_shard_written(images, tmp_path):
    path = tmp_path / "kept.records"
    planned = [k for k in measure_into(images, POLICY, MAX, str(path)) if isinstance(k, ImageEntry)]
    damaged = Prepared.from_text(planned[0].prepared)
    data = bytearray(path.read_bytes())
    data[damaged.offset + damaged.length // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    result, report = write_shard(one_shard(tmp_path / "out"), planned, POLICY, max_record_size=MAX)
    skipped = [r for r in report if r.action == "skipped"]
    assert [(r.relpath, r.reason) for r in skipped] == [(planned[0].relpath, Reason.READ_ERROR)]
    assert "damaged" in skipped[0].message
    assert result.examples == len(planned) - 1


def test_a_prepared_locator_survives_the_compact_encoding(images, tmp_path):
    planned = [
        k
        for k in measure_into(images, POLICY, MAX, str(tmp_path / "k"))
        if isinstance(k, ImageEntry)
    ]
    for entry in planned:
        assert ImageEntry.from_bytes(entry.to_bytes()) == entry
        where = Prepared.from_text(entry.prepared)
        assert Prepared.from_text(where.to_text()) == where


@pytest.mark.skipif(usable_cores() < 2, reason="shard processes need two cores")
def test_a_local_build_measures_in_its_processes_and_leaves_no_kept_records(
    tmp_path, monkeypatch, caplog
):
    """A local build with shard processes measures in them, keeps each record for its writer,
    makes the shards a build without processes makes (transforming every image twice), and
    removes the records it kept when it ends."""
    src = tmp_path / "src"
    for n in range(40):
        path = src / ("cat" if n % 2 else "dog") / f"{n:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_jpeg(photo(200, 150, seed=n)))
    monkeypatch.setattr(pipeline, "PROCESSES_MIN_BYTES", 1)  # start them for a small build
    monkeypatch.setattr(writing, "PROCESSES_MIN_BYTES", 1)
    kept_in = tmp_path / "temp"
    kept_in.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(kept_in))
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    settings = {"inputs": [str(src)], "resize": 64, "encode": "jpeg", "max_shard_size": "60KB"}
    settings["min_shard_size"] = "20KB"
    config = BuildConfig.from_settings({**settings, "output": str(tmp_path / "here")})
    if not pipeline.shard_processes(config, PipelineOptions([])):
        pytest.skip("this machine gives the build no shard processes")
    pipeline.build(config)
    assert "measuring in" in caplog.text and "writing shards in" in caplog.text
    assert list(kept_in.iterdir()) == []  # the kept records went with the build
    assert multiprocessing.active_children() == []
    elsewhere = BuildConfig.from_settings(
        {**settings, "output": str(tmp_path / "elsewhere"), "name": config.name}
    )
    multi = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    pipeline.build(elsewhere, multi)
    here = {p.name: p.read_bytes() for p in (tmp_path / "here").glob("*.tfrecord-*")}
    there = {p.name: p.read_bytes() for p in (tmp_path / "elsewhere").glob("*.tfrecord-*")}
    assert len(here) > 3 and here == there


@pytest.mark.parametrize("sizes", ["measure", "estimate"])
def test_a_transformed_image_is_refused_for_its_records_size_not_an_estimate(tmp_path, sizes):
    """Planning estimates a PNG re-encoding far above what these photographs take: each is
    written, as its record fits --max-shard-size. A noise image whose record does not fit is
    reported with the size its record really has, not the estimate."""
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    for n in range(3):
        Image.fromarray(photo(128, 96, seed=n)).save(src / f"{n}.jpg", quality=90)
    noise = np.random.default_rng(0).integers(0, 256, (400, 400, 3), dtype=np.uint8)
    Image.fromarray(noise).save(src / "noise.jpg", quality=95)
    settings = {"inputs": [str(tmp_path / "src")], "output": str(tmp_path / "out")}
    settings |= {"resize": 256, "encode": "png", "transformed_sizes": sizes}
    config = BuildConfig.from_settings(
        {**settings, "max_shard_size": "120KB", "min_shard_size": "1KB"}
    )
    planned = preparer(config).plan(
        SourceFile(str(src / "0.jpg"), "c/0.jpg", (src / "0.jpg").stat().st_size), "c", 0
    )
    assert planned.record_size > 120_000  # the estimate, which planning used to refuse it by
    pipeline.build(config)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sum(split["examples"] for split in manifest["splits"].values()) == 3
    report = [json.loads(line) for line in (tmp_path / "out" / "report.jsonl").open()]
    (refused,) = [entry for entry in report if entry["reason"] == Reason.TOO_LARGE]
    assert refused["relpath"] == "c/noise.jpg"
    encoded, info = encode_for_tensorflow((src / "noise.jpg").read_bytes(), config.image)
    record = image_record_size(
        len(encoded),
        image_format=info.format,
        height=info.height,
        width=info.width,
        channels=info.channels,
        filename="c/noise.jpg",
        label=0,
        label_text="c",
    )
    assert f"its record is {record} bytes" in refused["message"]
