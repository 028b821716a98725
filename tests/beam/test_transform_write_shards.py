"""WriteShards alone: the planned shards written whole and readable, the images it cannot write
reported, and nothing published under a final name that is not whole."""

from __future__ import annotations

import posixpath
from collections import Counter
from dataclasses import replace

import apache_beam as beam
import crc32c
import fsspec
import pytest
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to
from fsspec.implementations.memory import MemoryFileSystem

from beam_tfrecord.beam.writing import WriteShards
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.codec.record_index import index_file_name
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import Reason, ReportEntry
from beam_tfrecord.reader import Dataset, parse_record
from beam_tfrecord.report import shard_report_name
from beam_tfrecord.shard_names import shard_file_name
from beam_tfrecord.sharding import SplitPlan
from beam_tfrecord.storage import TEMP_MARKER

pytestmark = pytest.mark.slow

OUT = "memory://out"
SPLITS = (("train", 0.5), ("test", 0.5))
MAX_RECORD = 1 << 20
POLICY = BuildConfig(inputs=("memory://src/**",), output=OUT).image


class PoisonedFileSystem(MemoryFileSystem):
    """The memory filesystem, under a protocol of its own, where reading any file whose name
    holds "poison" fails with an error no image check expects (a bug, a worker dying)."""

    protocol = "poisoned"

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("poisoned://"):
            path = "memory://" + path[len("poisoned://") :]
        return super()._strip_protocol(path)

    def cat_file(self, path, start=None, end=None, **kwargs):
        if "poison" in path:
            raise RuntimeError(f"poisoned read of {path}")
        return super().cat_file(path, start, end, **kwargs)


fsspec.register_implementation("poisoned", PoisonedFileSystem, clobber=True)


def _shards(entries, per_split: int):
    """((split, index), entries) for each split dealt into `per_split` shards, and the plan the
    shard writers read (each split's shard count): PlanShards' two outputs, for any placement."""
    shards, plan = [], {}
    for split in sorted({e.split for e in entries}):
        ordered = sorted((e for e in entries if e.split == split), key=lambda e: e.sort_key)
        count = min(per_split, len(ordered))
        for index in range(count):
            shards.append(((split, index), ordered[index::count]))
        plan[split] = SplitPlan(
            records=len(ordered),
            bytes=sum(e.record_size for e in ordered),
            max_record=max(e.record_size for e in ordered),
            shards=count,
            bucket_offsets=(0,),
        )
    return shards, plan


def _write(p, shards, plan, **options):
    plan_pc = p | "Plan" >> beam.Create([plan])
    return (
        p
        | "Shards" >> beam.Create(shards)
        | WriteShards(OUT, "ds", POLICY, plan_pc, max_record_size=MAX_RECORD, **options)
    )


def _files(memfs) -> set[str]:
    return {posixpath.relpath(path, "/out") for path in memfs.find("/out")}


@pytest.mark.parametrize("read_ahead", [0, 4])
def test_the_planned_shards_are_written_whole_and_readable(
    pipeline, memfs, put_images, planned, read_ahead
):
    images = put_images("/src", {"cat": 9, "dog": 7})
    entries = planned("/src", images, splits=SPLITS)
    shards, plan = _shards(entries, per_split=2)
    names = {key: shard_file_name("ds", key[0], key[1], plan[key[0]].shards) for key, _ in shards}
    expected = [
        (
            split,
            index,
            names[(split, index)],
            len(group),
            sum(e.record_size for e in group),
            tuple(sorted(Counter(e.label for e in group).items())),
        )
        for (split, index), group in shards
    ]
    with pipeline as p:
        written = _write(p, shards, plan, read_ahead=read_ahead)
        results = written["results"] | beam.Map(
            lambda r: (r.split, r.index, r.file_name, r.examples, r.planned_bytes, r.class_counts)
        )
        assert_that(results, equal_to(expected), label="Results")
        assert_that(written["report"], equal_to([]), label="Report")
    # Each shard, its record index and its report lines; no temporary left behind.
    assert _files(memfs) == {
        f for name in names.values() for f in (name, index_file_name(name), shard_report_name(name))
    }
    for (split, index), group in shards:
        name = names[(split, index)]
        records = [parse_record(r) for r in read_records(f"{OUT}/{name}")]
        # The planned images, in shuffle-key order, each the source's very bytes.
        ordered = sorted(group, key=lambda e: e.sort_key)
        assert [r["image/filename"] for r in records] == [e.relpath for e in ordered]
        assert [r["image/encoded"] for r in records] == [images[e.relpath] for e in ordered]
        assert [r["image/class/label"] for r in records] == [e.class_id for e in ordered]
        assert memfs.cat_file(f"/out/{shard_report_name(name)}") == b""
        assert len(memfs.cat_file(f"/out/{index_file_name(name)}").splitlines()) == len(group)
    # And the reader finds them by name (there is no manifest yet: read loosely, as an
    # unfinished build's) and reads every record.
    for split in plan:
        dataset = Dataset(OUT, split, loose=True)
        read = sorted(item["image/filename"] for item in dataset)
        assert read == sorted(e.relpath for e in entries if e.split == split)


def _describe_the_files(results):
    """A matcher: each ShardResult's size and CRC32C are its file's (read in this process,
    where LocalRunner's workers wrote them)."""
    memfs = fsspec.filesystem("memory")
    for result in results:
        data = memfs.cat_file(f"/out/{result.file_name}")
        if (result.bytes, result.crc32c) != (len(data), f"{crc32c.crc32c(data):08x}"):
            raise BeamAssertException(f"{result.file_name}: {result} for {len(data)} bytes")


def test_the_results_describe_the_files(pipeline, memfs, put_images, planned):
    images = put_images("/src", {"cat": 5, "dog": 5})
    shards, plan = _shards(planned("/src", images, splits=SPLITS), per_split=2)
    with pipeline as p:
        written = _write(p, shards, plan)
        assert_that(written["results"], _describe_the_files)


def test_images_that_cannot_be_written_are_reported_and_left_out(
    pipeline, memfs, put_images, planned
):
    images = put_images("/src", {"cat": 8})
    # Broken in ways only a read finds: cut short, gone, changed since it was planned.
    memfs.pipe_file("/src/cat/cut.jpg", images["cat/cat_0000.jpg"][:200])
    images["cat/cut.jpg"] = images["cat/cat_0000.jpg"][:200]
    images["cat/gone.jpg"] = images["cat/cat_0001.jpg"]
    images["cat/changed.jpg"] = images["cat/cat_0002.jpg"]
    entries = planned("/src", images, splits=(("train", 1.0),))
    memfs.pipe_file("/src/cat/changed.jpg", images["cat/cat_0002.jpg"] + b"more")
    shards, plan = _shards(entries, per_split=1)
    name = shard_file_name("ds", "train", 0, 1)
    bad = {"cat/cut.jpg", "cat/gone.jpg", "cat/changed.jpg"}
    with pipeline as p:
        written = _write(p, shards, plan, read_ahead=4)
        counts = written["results"] | beam.Map(lambda r: (r.examples, r.planned_bytes))
        # Its planned bytes stay those of the plan: the shard is that much smaller than planned.
        planned_bytes = sum(e.record_size for e in entries)
        assert_that(counts, equal_to([(8, planned_bytes)]), label="Results")
        reported = written["report"] | beam.Map(lambda r: (r.relpath, r.action, r.split, r.label))
        expected = [(relpath, "skipped", "train", "cat") for relpath in sorted(bad)]
        assert_that(reported, equal_to(expected), label="Report")
        reasons = written["report"] | "Reasons" >> beam.Map(lambda r: (r.relpath, r.reason))
        assert_that(
            reasons | beam.Filter(lambda r: r[0] != "cat/cut.jpg"),
            equal_to(
                [("cat/gone.jpg", Reason.VANISHED), ("cat/changed.jpg", Reason.SOURCE_CHANGED)]
            ),
            label="Reasons",
        )
    names = [parse_record(r)["image/filename"] for r in read_records(f"{OUT}/{name}")]
    assert sorted(names) == sorted(set(images) - bad)
    # The shard's report lines are published beside it, for a resumed build to find.
    lines = memfs.cat_file(f"/out/{shard_report_name(name)}").decode().splitlines()
    assert sorted(ReportEntry.from_json(line).relpath for line in lines) == sorted(bad)


def test_a_shard_that_fails_leaves_nothing_under_its_final_name(
    pipeline, memfs, put_images, planned
):
    images = put_images("/src", {"cat": 10})
    entries = [
        replace(e, url=e.url.replace("memory://", "poisoned://"))
        for e in planned("/src", images, splits=(("train", 1.0),))
    ]
    ordered = sorted(entries, key=lambda e: e.sort_key)
    # The read fails half-way through the shard, after some records are in its file.
    middle = ordered[5]
    memfs.pipe_file("/src/cat/poison.jpg", images[middle.relpath])
    ordered[5] = replace(middle, url="poisoned:///src/cat/poison.jpg")
    shards = [(("train", 0), ordered)]
    plan = {"train": SplitPlan(records=10, bytes=0, max_record=0, shards=1, bucket_offsets=(0,))}
    with pytest.raises(Exception, match="poisoned read"), pipeline as p:
        _write(p, shards, plan, read_ahead=0)
    # Not the shard, nor its index or report lines, nor a temporary.
    assert _files(memfs) == set()
    assert not [path for path in memfs.find("/") if TEMP_MARKER in path]


def test_a_resumed_write_keeps_the_finished_shards(
    pipeline, new_pipeline, memfs, put_images, planned
):
    images = put_images("/src", {"cat": 6, "dog": 4})
    shards, plan = _shards(planned("/src", images, splits=SPLITS), per_split=2)
    with pipeline as p:
        _write(p, shards, plan)
    before = {path: memfs.cat_file(path) for path in memfs.find("/out")}
    with new_pipeline() as p:
        written = _write(p, shards, plan, resume=True)
        assert_that(
            written["results"] | beam.Map(lambda r: r.resumed),
            equal_to([True] * len(shards)),
        )
    assert {path: memfs.cat_file(path) for path in memfs.find("/out")} == before


@pytest.mark.parametrize(("cores", "inline"), [(1, True), (2, False)])
def test_a_worker_with_one_core_checks_each_shard_on_the_thread_that_writes_it(
    pipeline, memfs, put_images, planned, monkeypatch, cores, inline
):
    """Threads checking images beside the shard's own only take turns with it at the GIL on one
    core: a worker with one core's share writes its shards `inline`, with the same bytes."""
    from beam_tfrecord.beam import writing

    monkeypatch.setattr(writing, "usable_cores", lambda: cores)
    seen = []
    real = writing.write_shard

    def spied(*args, **kwargs):
        seen.append(kwargs.get("inline", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(writing, "write_shard", spied)
    images = put_images("/src", {"cat": 9, "dog": 7})
    shards, plan = _shards(planned("/src", images, splits=SPLITS), per_split=2)
    with pipeline as p:
        _write(p, shards, plan, read_ahead=4, shards_at_once=2)
    assert seen == [inline] * len(shards)
    for (split, index), group in shards:
        name = shard_file_name("ds", split, index, plan[split].shards)
        records = [parse_record(r) for r in read_records(f"{OUT}/{name}")]
        ordered = sorted(group, key=lambda e: e.sort_key)
        assert [r["image/encoded"] for r in records] == [images[e.relpath] for e in ordered]
