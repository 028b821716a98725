"""ConvertImages, the whole build as one transform, on memory:// from end to end: every listed
input written or reported, once, and the manifest, report, shards and counters agreeing."""

from __future__ import annotations

import apache_beam as beam
import fsspec
import pytest
from apache_beam.metrics import MetricsFilter
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from beam_tfrecord.beam.pipeline import ConvertImages
from beam_tfrecord.beam.transforms import METRICS_NAMESPACE
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import Reason, ReportEntry
from beam_tfrecord.manifest import read_manifest
from beam_tfrecord.reader import Dataset
from beam_tfrecord.storage import TEMP_MARKER

pytestmark = pytest.mark.slow

OUT = "memory://out"
MIN, MAX = 6_000, 18_000  # a few KB an image: several shards in the larger splits


@pytest.fixture
def collection(memfs, put_images):
    """30 images in 3 classes, a broken one, a copy, and files no listing returns."""
    images = put_images("/src", {"cat": 12, "dog": 10, "fox": 8}, seed=2)
    extra = {
        "dog/broken.jpg": images["dog/dog_0000.jpg"][:300],  # found broken when written
        "fox/copy.jpg": images["cat/cat_0004.jpg"],  # the same bytes as a cat
    }
    for relpath, data in extra.items():
        memfs.pipe_file(f"/src/{relpath}", data)
    memfs.pipe_file("/src/cat/notes.txt", b"not an image")
    memfs.pipe_file("/src/cat/.hidden.jpg", images["cat/cat_0001.jpg"])
    return images | extra


def _config(**settings) -> BuildConfig:
    return BuildConfig.from_settings(dict(
        inputs=("memory://src/**",), output=OUT, name="pets", seed=7, min_shard_size=MIN,
        max_shard_size=MAX, **settings,
    ))  # fmt: skip


def _counters(result) -> dict[str, int]:
    query = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    counters: dict[str, int] = {}
    for counter in query["counters"]:
        name = counter.key.metric.name
        counters[name] = counters.get(name, 0) + counter.committed
    return counters


@pytest.mark.parametrize("dedup", [False, True])
def test_every_input_is_written_or_reported_once_and_the_books_balance(
    pipeline, memfs, collection, dedup
):
    left_out = {"dog/broken.jpg"} | ({"fox/copy.jpg"} if dedup else set())
    written = set(collection) - left_out
    outputs = pipeline | ConvertImages(_config(dedup=dedup))
    by_reason = {"truncated": 1} | ({Reason.DUPLICATE: 1} if dedup else {})
    expected_inputs = {
        "listed": len(collection),
        "written": len(written),
        "skipped": len(left_out),
        "skipped_by_reason": dict(sorted(by_reason.items())),
        "modified": 0,
        "unaccounted": 0,
    }
    assert_that(outputs["summary"], equal_to([expected_inputs]), label="Summary")
    skipped = outputs["report"] | beam.Filter(lambda r: r.action == "skipped")
    assert_that(
        skipped | beam.Map(lambda r: r.relpath), equal_to(sorted(left_out)), label="Skipped"
    )
    result = pipeline.run()
    result.wait_until_finish()

    manifest = read_manifest(OUT)
    assert manifest["inputs"] == expected_inputs
    # Every written image is in exactly one record of one split, with its very bytes.
    read = []
    for split, stats in manifest["splits"].items():
        items = list(Dataset(OUT, split))
        assert len(items) == stats["examples"]
        read += [(item["image/filename"], item["image/encoded"]) for item in items]
    assert sorted(name for name, _ in read) == sorted(written)
    assert all(collection[name] == data for name, data in read)
    # report.jsonl holds every left-out input, sorted, and is all the report said.
    lines = memfs.cat_file("/out/report.jsonl").decode("utf-8").splitlines()
    report = [ReportEntry.from_json(line) for line in lines]
    assert sorted(r.relpath for r in report if r.action == "skipped") == sorted(left_out)
    assert report == sorted(report, key=lambda r: r.sort_key)
    # What the counters saw is what the manifest says.
    counters = _counters(result)
    assert counters["images_listed"] == manifest["inputs"]["listed"]
    assert counters["images_written"] == manifest["inputs"]["written"]
    assert counters["images_skipped"] == manifest["inputs"]["skipped"]
    assert counters["shards_written"] == len(manifest["shards"])
    # Nothing of the build's work in progress is left.
    assert not [path for path in memfs.find("/out") if TEMP_MARKER in path]


def _files_as_described(results):
    """A matcher: each shard result's file is there, of the size the result says."""
    memfs = fsspec.filesystem("memory")
    for result in results:
        if len(memfs.cat_file(f"/out/{result.file_name}")) != result.bytes:
            raise BeamAssertException(f"{result.file_name} is not {result.bytes} bytes")


def test_shards_hold_what_the_manifest_says_within_the_bounds(pipeline, memfs, collection):
    outputs = pipeline | ConvertImages(_config())
    assert_that(outputs["shards"], _files_as_described)
    pipeline.run().wait_until_finish()
    manifest = read_manifest(OUT)
    assert len(manifest["shards"]) >= 3
    for shard in manifest["shards"]:
        assert len(memfs.cat_file(f"/out/{shard['file']}")) == shard["bytes"]
        # A kept image is planned a few bytes over its record, never under it; a shard stays
        # within the bounds unless its split is smaller than the minimum (one shard).
        assert shard["bytes"] <= shard["planned_bytes"] <= MAX
        alone = manifest["splits"][shard["split"]]["shards"] == 1
        assert alone or shard["planned_bytes"] >= MIN
    # labels.txt and the class counts: the classes listed, in sorted order.
    assert memfs.cat_file("/out/labels.txt").decode() == "cat\ndog\nfox\n"
    counts = {}
    for stats in manifest["splits"].values():
        for name, n in stats["class_counts"].items():
            counts[name] = counts.get(name, 0) + n
    assert counts == {"cat": 12, "dog": 10, "fox": 9}


def test_a_build_that_writes_nothing_leaves_only_its_report(pipeline, memfs):
    memfs.pipe_file("/src/cat/broken.jpg", b"\xff\xd8\xff not a jpeg")
    outputs = pipeline | ConvertImages(_config())
    assert_that(
        outputs["summary"] | beam.Map(lambda s: (s["listed"], s["written"], s["unaccounted"])),
        equal_to([(1, 0, 0)]),
    )
    pipeline.run().wait_until_finish()
    # No manifest: nothing may take the folder for a finished dataset.
    assert sorted(memfs.find("/out")) == ["/out/report.jsonl"]
