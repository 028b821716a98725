"""The shard sink: temporary name then publish, idempotent retries, and no overshoot of the plan."""

from __future__ import annotations

import errno
import threading
import time
import zlib
from dataclasses import replace
from pathlib import Path

import crc32c
import numpy as np
import pytest
from imagegen import make_collection, png_bytes

from beam_tfrecord import shard_writer
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.framing import framed_size
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.entries import ImageEntry, ShardSpec
from beam_tfrecord.images import ImageError, ImagePolicy, check_image
from beam_tfrecord.images.policy import Resize
from beam_tfrecord.planning import Preparer
from beam_tfrecord.report import shard_report_name
from beam_tfrecord.shard_processes import ShardThreads
from beam_tfrecord.shard_writer import write_shard
from beam_tfrecord.splits import shuffle_key

POLICY = ImagePolicy()


def _entries(root, images):
    """Entries as the build plans them: from each file's name and size, nothing read."""
    entries = []
    for relpath, data in sorted(images.items()):
        label = relpath.split("/")[0]
        entries.append(
            ImageEntry(
                url=str(root / relpath),
                relpath=relpath,
                source_size=len(data),
                split="train",
                shuffle_key=shuffle_key(relpath, 0),
                label=label,
                class_id=0,
                record_size=Preparer.record_size(len(data), relpath, 0, label),
            )
        )
    return entries


def _record_sizes(url):
    return [framed_size(len(r)) for r in read_records(url)]


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
    assert result.bytes == len(data)
    # A planned size is the record's with its image-dependent fields at their largest.
    ordered = sorted(entries, key=lambda e: e.sort_key)
    for entry, size in zip(ordered, _record_sizes(spec.url), strict=True):
        assert 0 <= entry.record_size - size <= 6, entry.relpath
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
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        spec.file_name,
        "index",
        "reports",
    ]
    assert [p.name for p in (tmp_path / "out" / "index").iterdir()] == [f"{spec.file_name}.index"]
    assert [p.name for p in (tmp_path / "out" / "reports").iterdir()] == [f"{spec.file_name}.jsonl"]


def test_interrupted_write_leaves_no_file_under_the_final_name(planned, tmp_path, monkeypatch):
    spec, entries, _ = planned
    import beam_tfrecord.shard_writer as shard_writer

    calls = []
    real_read = shard_writer.read_source

    def failing_read(url):
        calls.append(url)
        if len(calls) == 6:
            raise KeyboardInterrupt  # the worker dies half-way through the shard
        return real_read(url)

    monkeypatch.setattr(shard_writer, "read_source", failing_read)
    with pytest.raises(KeyboardInterrupt):
        write_shard(spec, entries, POLICY)
    assert list((tmp_path / "out").iterdir()) == [], "neither a partial final file nor a temporary"


def test_a_full_disk_fails_the_shard_not_its_index_once_the_shard_is_there(
    planned, tmp_path, monkeypatch
):
    """The index was written after the shard was published: a disk that filled up in between
    left a shard under its final name with no index (found by a new-user trial on a small
    tmpfs). It is now written first and only named after the shard."""
    from fsspec.implementations.local import LocalFileSystem

    spec, entries, _ = planned
    real = LocalFileSystem.pipe_file

    def full_for_the_index(self, path, value, *args, **kwargs):
        if "/index/" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, value, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "pipe_file", full_for_the_index)
    with pytest.raises(OSError, match="No space left"):
        write_shard(spec, entries, POLICY)
    left = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*"))
    assert left == ["index"], "no shard, report lines or temporary file"


class _SetAfter:
    """A stop event that is found set from its `n`th look on, as if set while the shard was
    being written."""

    def __init__(self, n: int):
        self.looks = 0
        self._n = n

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > self._n


@pytest.mark.parametrize("after", [0, 5, 12])
def test_a_stopped_shard_is_abandoned_not_finished(planned, tmp_path, after):
    """A build that stops (Ctrl-C) ends the shards its threads are writing rather than wait for
    them: 7 s after a Ctrl-C on a gs:// build at 50 ms a request, as long as a shard takes on a
    slow link. Stopped before an image, or once all are framed (12) but before it is published,
    the shard leaves nothing behind."""
    spec, entries, _ = planned
    stop = _SetAfter(after)
    with pytest.raises(shard_writer.ShardStopped, match=spec.file_name):
        write_shard(spec, entries, POLICY, stop=stop)
    assert stop.looks == after + 1  # it stopped at the first look that found it set
    leftovers = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert leftovers == [], "neither a partial final file nor a temporary"
    # Not set: the same shard is written whole.
    result, _ = write_shard(spec, entries, POLICY, stop=_SetAfter(len(entries) + 1))
    assert result.examples == len(entries)


def test_shard_threads_shut_down_cancelled_stop_the_shards_they_write():
    """What a build's teardown does when it stops: shards running on its threads are told to
    stop (and abandon themselves), those not started are dropped; it no longer waits for them
    to finish."""
    threads = ShardThreads(1)
    running = threading.Event()

    def endless_shard(*, framed, stop):  # a shard whose reads never end, as on a silent store
        running.set()
        while not stop.is_set():
            time.sleep(0.005)
        raise shard_writer.ShardStopped("endless")

    first = threads.submit(endless_shard, stop=threads.stopping)
    assert running.wait(5)
    shutting = threading.Thread(target=threads.shutdown, kwargs={"cancel": True})
    shutting.start()
    shutting.join(5)
    assert not shutting.is_alive(), "shutdown waited for shards that never end"
    assert isinstance(first.exception(), shard_writer.ShardStopped)


def test_vanished_and_changed_sources_are_reported_not_written(planned):
    spec, entries, _ = planned
    ordered = sorted(entries, key=lambda e: e.sort_key)
    gone, changed = ordered[2], ordered[5]
    import os

    os.remove(gone.url)
    with open(changed.url, "ab") as f:
        f.write(b"\0" * 5000)  # grew since it was listed: writing it would overshoot the plan
    result, skipped = write_shard(spec, entries, POLICY)
    assert {(s.relpath, s.reason) for s in skipped} == {
        (gone.relpath, "vanished"),
        (changed.relpath, "source_changed"),
    }
    assert result.examples == len(entries) - 2
    assert result.bytes == Path(spec.url).stat().st_size == sum(_record_sizes(spec.url))
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


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        ({}, None),
        ({"class_id": 1}, "has class id 0, where this build gives 1"),  # --classes changed
        ({"label": "b", "class_id": 0}, "labels or --classes changed"),  # another labelling
        ({"label": None, "class_id": None}, "has a class, and this build has no labels"),
        ({"policy": ImagePolicy(color="gray")}, "image settings"),
        ({"policy": ImagePolicy(encode="png")}, "image settings"),
        ({"policy": ImagePolicy(store="raw")}, "image settings"),
        ({"policy": ImagePolicy(resize=Resize.parse("exact:20x20"))}, "image settings"),
        ({"policy": ImagePolicy(jpeg_quality=80)}, None),  # not in a record (docs/guide/resume.md)
    ],
    ids=[
        "same",
        "class-id",
        "class-name",
        "unlabelled",
        "gray",
        "png",
        "raw",
        "resize",
        "jpeg-quality",
    ],
)
def test_resume_keeps_a_shard_only_if_its_records_say_what_this_build_would(planned, change, kept):
    """A resumed build with other --classes, labels or image settings plans the same images in
    the same shards; keeping those shards mixed class ids under the new labels.txt, or gray
    images with RGB ones, and verify found nothing wrong. A shard replaced says why
    (`kept`: None when it is kept, else part of its reason)."""
    spec, entries, _ = planned
    first, _ = write_shard(spec, entries, POLICY)
    policy = change.get("policy", POLICY)
    fields = {k: v for k, v in change.items() if k != "policy"}
    resumed, _ = write_shard(spec, [replace(e, **fields) for e in entries], policy, resume=True)
    assert resumed.resumed is (kept is None)
    assert (resumed.crc32c == first.crc32c) is (kept is None)
    if kept is None:
        assert resumed.replaced == ""
    else:
        assert kept in resumed.replaced


def test_resume_rewrites_a_shard_whose_image_changed_in_place_to_the_same_size(planned):
    """An image rewritten after its shard, to other bytes of the same size, moves nothing in the
    plan: --resume kept the shard and its old image, and verify found nothing wrong."""
    spec, entries, _ = planned
    first, _ = write_shard(spec, entries, POLICY)
    assert write_shard(spec, entries, POLICY, resume=True)[0].resumed, "unchanged: kept"
    time.sleep(0.05)  # the file system's clock ticks in milliseconds: the edit comes after
    edited = sorted(entries, key=lambda e: e.sort_key)[4]
    data = bytearray(Path(edited.url).read_bytes())
    assert data[6:11] == b"JFIF\0"
    data[15] ^= 0x03  # its JFIF pixel density: other bytes, the same size, still a JPEG
    Path(edited.url).write_bytes(bytes(data))

    redone, report = write_shard(spec, entries, POLICY, resume=True)
    assert not redone.resumed and report == []
    assert f"the file of its image {edited.relpath} changed" in redone.replaced
    assert redone.crc32c != first.crc32c
    records = {
        decode_example(r)["image/filename"][0].decode(): decode_example(r)
        for r in read_records(spec.url)
    }
    assert records[edited.relpath]["image/encoded"] == [bytes(data)]
    # Written again, it is kept again.
    assert write_shard(spec, entries, POLICY, resume=True)[0].resumed


def test_resume_replaces_a_shard_whose_report_names_an_input_no_longer_planned(planned):
    """A file a shard left out (truncated), since deleted: kept, the shard's report counted an
    input the build no longer lists, and the build failed with "-1 ... inputs were neither
    written nor reported", its manifest published all the same."""
    spec, plan, broken, first, report = _written_with_one_truncated(planned)
    Path(broken.url).unlink()
    rest = [e for e in plan if e.url != broken.url]
    redone, report = write_shard(spec, rest, POLICY, resume=True)
    assert not redone.resumed and report == []
    assert redone.replaced == (
        f"its report names {broken.relpath}, which this build does not plan for it "
        "(inputs, seed, splits or shard sizes changed)"
    )
    assert redone.examples == first.examples


def test_resume_replaces_a_shard_whose_image_is_not_its_files_size_any_more(planned):
    """A file that changed size after its shard (on an object store, where no file's times are
    looked at) moved nothing in the plan unless the shard's cut moved: the shard was kept."""
    spec, entries, _ = planned
    write_shard(spec, entries, POLICY)
    grown = sorted(entries, key=lambda e: e.sort_key)[6]
    plan = [replace(e, source_size=e.source_size + 10) if e is grown else e for e in entries]
    redone, _ = write_shard(spec, plan, POLICY, resume=True)
    assert not redone.resumed
    assert redone.replaced == (
        f"its record of {grown.relpath} holds {grown.source_size} bytes of image, where the "
        f"file has {grown.source_size + 10} now: it changed"
    )


def test_two_inputs_of_one_relative_path_keep_one_order_whatever_order_they_come_in(planned):
    """The same names below two --input folders share a relative path, so a shuffle key: their
    order, and the shard's bytes, were the order the runner handed them over in."""
    spec, entries, images = planned
    other = Path(spec.output_dir).parent / "other"
    twins = []
    for entry, lookalike in zip(entries[:3], entries[-3:], strict=True):
        twin = other / entry.relpath  # the same name, another image
        twin.parent.mkdir(parents=True, exist_ok=True)
        twin.write_bytes(images[lookalike.relpath])
        twins.append(replace(entry, url=str(twin), source_size=lookalike.source_size))
    write_shard(spec, [*entries, *twins], POLICY)
    once = Path(spec.url).read_bytes()
    write_shard(spec, [*reversed(twins), *reversed(entries)], POLICY)
    assert Path(spec.url).read_bytes() == once


def test_resume_replaces_a_shard_with_more_or_fewer_records_than_planned_and_says_so(planned):
    spec, entries, _ = planned
    ordered = sorted(entries, key=lambda e: e.sort_key)
    write_shard(spec, ordered[:-1], POLICY)
    fewer, _ = write_shard(spec, ordered, POLICY, resume=True)  # one record short of the plan
    assert not fewer.resumed
    assert fewer.replaced.startswith(f"it does not hold the {len(ordered)} records")
    more, _ = write_shard(spec, ordered[:-1], POLICY, resume=True)  # one record past it
    assert not more.resumed
    assert more.replaced.startswith(f"it does not hold the {len(ordered) - 1} records")


def test_resume_tries_again_the_images_a_shard_could_not_read(planned, monkeypatch):
    """A read error may be the store's passing trouble: a resumed build rewrites the shard, and
    the image is written; keeping the shard made the loss permanent."""
    spec, entries, _ = planned
    lost = sorted(entries, key=lambda e: e.sort_key)[2]
    real_read = shard_writer.read_source

    def failing(url):
        if url == lost.url:
            raise OSError(errno.EIO, "injected 503")
        return real_read(url)

    monkeypatch.setattr(shard_writer, "read_source", failing)
    first, report = write_shard(spec, entries, POLICY)
    assert [(r.relpath, r.reason) for r in report] == [(lost.relpath, "read_error")]
    monkeypatch.setattr(shard_writer, "read_source", real_read)
    resumed, report = write_shard(spec, entries, POLICY, resume=True)
    assert not resumed.resumed and report == [] and resumed.examples == first.examples + 1
    assert resumed.replaced == "it left out an image that could not be read, to be read again"


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
    assert header_only.width > 0, "its header is intact"
    listed = replace(broken, source_size=len(damaged))  # as listed after the damage
    plan = [listed if e is broken else e for e in entries]
    result, skipped = write_shard(spec, plan, POLICY, read_ahead=4)
    assert [(s.relpath, s.reason) for s in skipped] == [(broken.relpath, "truncated")]
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

    def counting(url):
        reads.append(url)
        return real(url)

    monkeypatch.setattr(shard_writer, "read_source", counting)
    write_shard(spec, entries, POLICY, read_ahead=3)
    assert sorted(reads) == sorted(e.url for e in entries)


def test_an_image_the_full_decode_must_re_encode_is_re_encoded_and_reported(tmp_path):
    """A PNG chunk libpng refuses, after the image data: only the full decode sees it, and the
    writer, which decodes it, re-encodes it then and there."""
    plain = png_bytes(np.random.default_rng(8), 24, 18)
    iend = plain.rindex(b"IEND") - 4
    body = b"vendor"
    chunk = len(body).to_bytes(4, "big") + b"VENd" + body
    late = plain[:iend] + chunk + zlib.crc32(b"VENd" + body).to_bytes(4, "big") + plain[iend:]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "late.png").write_bytes(late)
    assert not check_image(late, ImagePolicy(validate="header")).reencode, "its header is plain"
    entries = _entries(tmp_path / "src", {"late.png": late})
    spec = ShardSpec(str(tmp_path / "out"), "ds-train.tfrecord-00000-of-00001", "train", 0, 1)
    result, report = write_shard(spec, entries, POLICY)
    assert [(r.relpath, r.reason, r.action) for r in report] == [
        ("late.png", "normalized", "modified")
    ]
    assert result.examples == 1
    (record,) = read_records(spec.url)
    assert decode_example(record)["image/encoded"][0] != late


def test_a_record_over_the_shard_limit_is_reported_when_written(planned):
    spec, entries, _ = planned
    largest = max(entries, key=lambda e: e.source_size)
    limit = largest.record_size - 10  # the plan let it through; the real record is too large
    result, report = write_shard(spec, entries, POLICY, max_record_size=limit)
    assert [(r.relpath, r.reason) for r in report] == [
        (largest.relpath, "larger_than_max_shard_size")
    ]
    assert result.examples == len(entries) - 1


def _written_with_one_truncated(planned):
    """The shard written with its fourth image cut short: (spec, plan, that entry, result,
    report)."""
    spec, entries, _ = planned
    broken = sorted(entries, key=lambda e: e.sort_key)[3]
    damaged = _damage_scan(Path(broken.url).read_bytes())
    Path(broken.url).write_bytes(damaged)
    plan = [replace(e, source_size=len(damaged)) if e is broken else e for e in entries]
    first, report = write_shard(spec, plan, POLICY)
    assert [(r.relpath, r.reason) for r in report] == [(broken.relpath, "truncated")]
    return spec, plan, plan[entries.index(broken)], first, report


def test_resume_keeps_a_shard_with_left_out_images_and_its_report(planned):
    spec, plan, _, first, report = _written_with_one_truncated(planned)
    kept, kept_report = write_shard(spec, plan, POLICY, resume=True)
    assert kept.resumed and kept.crc32c == first.crc32c and kept.examples == first.examples
    assert kept_report == report
    part = Path(spec.output_dir) / shard_report_name(spec.file_name)
    part.unlink()  # without its report lines a shard cannot be kept: what it left out is unknown
    redone, redone_report = write_shard(spec, plan, POLICY, resume=True)
    assert not redone.resumed and redone.crc32c == first.crc32c and redone_report == report


def test_small_images_go_to_the_threads_in_runs_and_large_ones_alone():
    sizes = [10] * 100 + [70_000, 10, 64 * 1024 - 10, 10, 5]
    entries = [
        ImageEntry(url=f"/x/{i}.png", relpath=f"{i}.png", source_size=size, split="train",
                   shuffle_key=i)
        for i, size in enumerate(sizes)
    ]  # fmt: skip
    runs = list(shard_writer._runs(entries))
    assert [entry for run in runs for entry in run] == entries
    # 64 images at most; a run closes at the image that brings it to 64 KiB.
    assert [len(run) for run in runs] == [64, 37, 2, 2]


def test_a_failure_inside_a_run_leaves_out_that_image_only(planned):
    spec, entries, _ = planned
    ordered = sorted(entries, key=lambda e: e.sort_key)
    gone = ordered[5]
    Path(gone.url).unlink()
    result, skipped = write_shard(spec, entries, POLICY, read_ahead=2)
    assert [(s.relpath, s.reason) for s in skipped] == [(gone.relpath, "vanished")]
    written = [decode_example(r)["image/filename"][0].decode() for r in read_records(spec.url)]
    assert written == [e.relpath for e in ordered if e is not gone]
    assert result.examples == len(entries) - 1
