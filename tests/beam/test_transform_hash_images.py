"""HashImages alone: each entry gets the SHA-256 of its file's bytes, or is reported unreadable."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord.batches import EntryBatch
from beam_tfrecord.beam.transforms import HashImages
from beam_tfrecord.entries import Reason

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("read_ahead", [0, 1, 4, 16])
def test_every_entry_gets_the_sha256_of_its_bytes(pipeline, memfs, put_images, planned, read_ahead):
    images = put_images("/src", {"cat": 12, "dog": 9})
    # Two files with the same bytes: the same hash, whatever their names.
    images["dog/copy_of_cat.jpg"] = images["cat/cat_0003.jpg"]
    memfs.pipe_file("/src/dog/copy_of_cat.jpg", images["dog/copy_of_cat.jpg"])
    entries = planned("/src", images)
    expected = [
        replace(e, source_sha256=hashlib.sha256(images[e.relpath]).hexdigest()) for e in entries
    ]
    with pipeline as p:
        hashed = p | beam.Create([EntryBatch(entries)]) | HashImages(read_ahead=read_ahead)
        hashed["entries"] = hashed["entries"] | beam.FlatMap(iter)
        # Nothing else of an entry changes; the planned entry is all the hash adds to.
        assert_that(hashed["entries"], equal_to(expected), label="Entries")
        assert_that(hashed["report"], equal_to([]), label="Report")


@pytest.mark.parametrize("read_ahead", [0, 4])
def test_an_unreadable_file_is_reported_and_the_rest_hashed(
    pipeline, memfs, put_images, planned, tmp_path, read_ahead
):
    images = put_images("/src", {"cat": 6})
    entries = planned("/src", images)
    gone = replace(entries[0], url="memory:///src/cat/gone.jpg", relpath="cat/gone.jpg")
    # A folder where a file was listed: opening it fails, and not because it is gone.
    (tmp_path / "cat" / "folder.jpg").mkdir(parents=True)
    folder = replace(entries[1], url=str(tmp_path / "cat" / "folder.jpg"), relpath="cat/folder.jpg")
    expected = [
        replace(e, source_sha256=hashlib.sha256(images[e.relpath]).hexdigest()) for e in entries
    ]
    with pipeline as p:
        hashed = (
            p
            | beam.Create([EntryBatch([gone, *entries[:3]]), EntryBatch([folder, *entries[3:]])])
            | HashImages(read_ahead=read_ahead)
        )
        hashed["entries"] = hashed["entries"] | beam.FlatMap(iter)
        assert_that(hashed["entries"], equal_to(expected), label="Entries")
        # Each with the split and label it was planned with, so the report can say where it
        # would have gone.
        reported = hashed["report"] | beam.Map(
            lambda r: (r.relpath, r.reason, r.action, r.split, r.label, "cannot read" in r.message)
        )
        assert_that(
            reported,
            equal_to(
                [
                    ("cat/gone.jpg", Reason.VANISHED, "skipped", gone.split, "cat", False),
                    ("cat/folder.jpg", Reason.READ_ERROR, "skipped", folder.split, "cat", True),
                ]
            ),
            label="Report",
        )
