"""The shard sink: temporary name then publish, idempotent retries, and no overshoot of the plan."""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import crc32c
import numpy as np
import pytest
from imagegen import make_collection, png_bytes

from beam_tfrecord import shard_writer
from beam_tfrecord.catalog import ImageEntry
from beam_tfrecord.example import decode_example
from beam_tfrecord.images import ImageError, ImagePolicy, check_image
from beam_tfrecord.records import image_record_size
from beam_tfrecord.shard_writer import ShardSpec, write_shard
from beam_tfrecord.splits import shuffle_key
from beam_tfrecord.tfrecord import read_records

POLICY = ImagePolicy()


def _entries(root, images, policy=POLICY):
    entries = []
    for relpath, data in sorted(images.items()):
        info = check_image(data, policy)
        label = relpath.split("/")[0]
        fields = dict(
            image_format=info.format,
            height=info.height,
            width=info.width,
            channels=info.channels,
            filename=relpath,
            label=0,
            label_text=label,
        )
        entries.append(
            ImageEntry(
                url=str(root / relpath),
                relpath=relpath,
                source_size=len(data),
                split="train",
                shuffle_key=shuffle_key(relpath, 0),
                label=label,
                class_id=0,
                image_format=info.format,
                height=info.height,
                width=info.width,
                channels=info.channels,
                reencode=info.reencode,
                encoded_size=info.encoded_size,
                record_size=image_record_size(info.encoded_size, **fields),
            )
        )
    return entries


@pytest.fixture
def planned(tmp_path):
    src = tmp_path / "src"
    images = make_collection(src, {"a": 12}, seed=5)
    out = tmp_path / "out"
    spec = ShardSpec(str(out), "ds-train.tfrecord-00000-of-00001", "train", 0, 1)
    return spec, _entries(src, images), images


def test_shard_holds_the_plan_in_shuffle_order(planned):
    spec, entries, _ = planned
    result, skipped = write_shard(spec, reversed(entries), POLICY)
    assert skipped == []
    data = Path(spec.url).read_bytes()
    assert result.bytes == len(data) == sum(e.record_size for e in entries)
    assert result.crc32c == f"{crc32c.crc32c(data):08x}"
    names = [decode_example(r)["image/filename"][0].decode() for r in read_records(spec.url)]
    assert names == [e.relpath for e in sorted(entries, key=lambda e: e.sort_key)]
    assert result.class_counts == (("a", 12),)


def test_retry_rewrites_identical_bytes_and_leaves_no_temporaries(planned, tmp_path):
    spec, entries, _ = planned
    first, _ = write_shard(spec, entries, POLICY)
    data = Path(spec.url).read_bytes()
    second, _ = write_shard(spec, entries[::-1], POLICY)
    assert Path(spec.url).read_bytes() == data
    assert first == second
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [spec.file_name, "index"]
    assert [p.name for p in (tmp_path / "out" / "index").iterdir()] == [f"{spec.file_name}.index"]


def test_interrupted_write_leaves_no_file_under_the_final_name(planned, tmp_path, monkeypatch):
    spec, entries, _ = planned
    import beam_tfrecord.shard_writer as shard_writer

    calls = []
    real_read = shard_writer.read_source

    def failing_read(url, length=None):
        calls.append(url)
        if len(calls) == 6:
            raise KeyboardInterrupt  # the worker dies half-way through the shard
        return real_read(url, length)

    monkeypatch.setattr(shard_writer, "read_source", failing_read)
    with pytest.raises(KeyboardInterrupt):
        write_shard(spec, entries, POLICY)
    assert list((tmp_path / "out").iterdir()) == [], "neither a partial final file nor a temporary"


def test_vanished_and_changed_sources_are_reported_not_written(planned):
    spec, entries, _ = planned
    ordered = sorted(entries, key=lambda e: e.sort_key)
    gone, changed = ordered[2], ordered[5]
    import os

    os.remove(gone.url)
    with open(changed.url, "ab") as f:
        f.write(b"\0" * 5000)  # grew since planning: writing it would overshoot the plan
    result, skipped = write_shard(spec, entries, POLICY)
    assert {(s.relpath, s.reason) for s in skipped} == {
        (gone.relpath, "vanished"),
        (changed.relpath, "source_changed"),
    }
    assert result.examples == len(entries) - 2
    assert (
        result.bytes == sum(e.record_size for e in entries) - gone.record_size - changed.record_size
    )
    written = {decode_example(r)["image/filename"][0].decode() for r in read_records(spec.url)}
    assert gone.relpath not in written and changed.relpath not in written


def test_resume_keeps_an_intact_shard_and_rewrites_a_damaged_one(planned):
    spec, entries, _ = planned
    first, _ = write_shard(spec, entries, POLICY)
    kept, _ = write_shard(spec, entries, POLICY, resume=True)
    assert kept.resumed and kept.crc32c == first.crc32c and kept.examples == first.examples
    data = bytearray(Path(spec.url).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(spec.url).write_bytes(bytes(data))
    redone, _ = write_shard(spec, entries, POLICY, resume=True)
    assert not redone.resumed and redone.crc32c == first.crc32c


def _damage_scan(data: bytes) -> bytes:
    """The JPEG cut in the middle of its entropy-coded data, as an interrupted download is.

    The header is intact, so a header check plans it; only reading to the end finds the damage.
    """
    scan = data.index(b"\xff\xda")
    return data[: scan + (len(data) - scan) // 2]


def test_decode_validation_runs_on_the_written_bytes_and_reports_failures(planned):
    spec, entries, _ = planned
    ordered = sorted(entries, key=lambda e: e.sort_key)
    broken = ordered[4]
    damaged = _damage_scan(Path(broken.url).read_bytes())
    Path(broken.url).write_bytes(damaged)
    with pytest.raises(ImageError):
        check_image(damaged, POLICY)
    header_only = check_image(damaged, ImagePolicy(validate="header"))
    planned_entry = replace(
        broken,
        source_size=len(damaged),
        encoded_size=len(damaged),
        record_size=broken.record_size - broken.encoded_size + len(damaged),
    )
    assert (header_only.width, header_only.height) == (broken.width, broken.height)
    plan = [planned_entry if e is broken else e for e in entries]
    result, skipped = write_shard(spec, plan, POLICY, read_ahead=4)
    assert [(s.relpath, s.reason) for s in skipped] == [(broken.relpath, "truncated")]
    assert "when its shard was written" in skipped[0].message
    written = [decode_example(r)["image/filename"][0].decode() for r in read_records(spec.url)]
    assert written == [e.relpath for e in ordered if e is not broken]
    assert result.examples == len(entries) - 1

    # With header validation the same plan writes it: the damage is only in the pixels.
    header_spec = replace(spec, output_dir=spec.output_dir + "-header")
    _, skipped = write_shard(header_spec, plan, ImagePolicy(validate="header"))
    assert skipped == []


def test_each_source_is_read_once_when_written(planned, monkeypatch):
    spec, entries, _ = planned
    reads = []
    real = shard_writer.read_source

    def counting(url, length=None):
        reads.append((url, length))
        return real(url, length)

    monkeypatch.setattr(shard_writer, "read_source", counting)
    write_shard(spec, entries, POLICY, read_ahead=3)
    assert sorted(reads) == sorted((e.url, None) for e in entries)


def test_an_image_the_full_decode_must_re_encode_is_left_out_not_written_as_is(tmp_path):
    """A PNG chunk libpng refuses, after the image data: planning from the header cannot see it."""
    plain = png_bytes(np.random.default_rng(8), 24, 18)
    iend = plain.rindex(b"IEND") - 4
    body = b"vendor"
    chunk = len(body).to_bytes(4, "big") + b"VENd" + body
    late = plain[:iend] + chunk + zlib.crc32(b"VENd" + body).to_bytes(4, "big") + plain[iend:]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "late.png").write_bytes(late)
    entries = _entries(tmp_path / "src", {"late.png": late}, ImagePolicy(validate="header"))
    assert not entries[0].reencode, "the header alone says it can be kept"
    spec = ShardSpec(str(tmp_path / "out"), "ds-train.tfrecord-00000-of-00001", "train", 0, 1)
    result, skipped = write_shard(spec, entries, POLICY)
    assert [(s.relpath, s.reason) for s in skipped] == [("late.png", "unsupported")]
    assert result.examples == 0
