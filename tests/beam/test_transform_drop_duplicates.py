"""DropDuplicates alone: one of each content kept, the same one in any order, the rest reported."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord.batches import EntryBatch
from beam_tfrecord.beam.transforms import DropDuplicates
from beam_tfrecord.entries import ImageEntry, Reason
from beam_tfrecord.splits import shuffle_key

pytestmark = pytest.mark.slow


def _entry(relpath: str, content: str, split: str = "train") -> ImageEntry:
    label = relpath.split("/")[0]
    return ImageEntry(
        url=f"memory:///src/{relpath}",
        relpath=relpath,
        source_size=1000,
        split=split,
        shuffle_key=shuffle_key(relpath, 0),
        label=label,
        class_id=0,
        record_size=1100,
        source_sha256=content * 64,
    )


# Content "a" three times, in three folders and both splits; "b" once; "c" twice, in two
# classes; "d" twice under one folder.
ENTRIES = [
    _entry("dog/x.jpg", "a", "test"),
    _entry("cat/y.jpg", "a", "train"),
    _entry("cat/z/deeper.jpg", "a", "test"),
    _entry("cat/only.jpg", "b"),
    _entry("dog/1.jpg", "c", "test"),
    _entry("cat/1.jpg", "c", "train"),
    _entry("owl/b.jpg", "d"),
    _entry("owl/a.jpg", "d"),
]
KEPT = ["cat/y.jpg", "cat/only.jpg", "cat/1.jpg", "owl/a.jpg"]
NAMES = [e.relpath for e in ENTRIES]


def _drop(p, entries: list[ImageEntry]) -> dict:
    """DropDuplicates over the entries in three batches, cut into ranges of two records' worth
    of hashes (several ranges: copies must meet in theirs); its entries one an element."""
    batches = [EntryBatch(entries[i::3]) for i in range(3)]
    most = p | "Most" >> beam.Create([len(entries)])
    unique = p | beam.Create(batches) | DropDuplicates(2, most)
    return {"entries": unique["entries"] | "Each" >> beam.FlatMap(iter), "report": unique["report"]}


def _line(report_entry):
    """(relpath, action, reason, split, label, the other paths its message names)."""
    named = tuple(
        sorted(n for n in NAMES if n != report_entry.relpath and repr(n) in report_entry.message)
    )
    return (
        report_entry.relpath,
        report_entry.action,
        report_entry.reason,
        report_entry.split,
        report_entry.label,
        named,
    )


EXPECTED_REPORT = [
    # Each copy dropped, with the split and label it would have had, naming the one kept.
    ("dog/x.jpg", "skipped", Reason.DUPLICATE, "test", "dog", ("cat/y.jpg",)),
    ("cat/z/deeper.jpg", "skipped", Reason.DUPLICATE, "test", "cat", ("cat/y.jpg",)),
    ("dog/1.jpg", "skipped", Reason.DUPLICATE, "test", "dog", ("cat/1.jpg",)),
    ("owl/b.jpg", "skipped", Reason.DUPLICATE, "train", "owl", ("owl/a.jpg",)),
    # The one kept, naming its copies; a content with no copy is not reported.
    ("cat/y.jpg", "kept", Reason.DUPLICATE, "train", "cat", ("cat/z/deeper.jpg", "dog/x.jpg")),
    ("cat/1.jpg", "kept", Reason.DUPLICATE, "train", "cat", ("dog/1.jpg",)),
    ("owl/a.jpg", "kept", Reason.DUPLICATE, "train", "owl", ("owl/b.jpg",)),
]


@pytest.mark.parametrize("order", range(4))
def test_one_of_each_content_is_kept_the_same_whatever_the_order(pipeline, order):
    entries = list(ENTRIES)
    random.Random(order).shuffle(entries)
    with pipeline as p:
        unique = _drop(p, entries)
        # The smallest relative path of each content: the same on every runner and in any
        # order, so a rebuild never moves an image between splits.
        kept = [e for e in ENTRIES if e.relpath in KEPT]
        assert_that(unique["entries"], equal_to(kept), label="Entries")
        assert_that(unique["report"] | beam.Map(_line), equal_to(EXPECTED_REPORT), "Report")


def test_a_copy_labelled_otherwise_says_both_labels(pipeline):
    with pipeline as p:
        unique = _drop(p, ENTRIES)
        messages = unique["report"] | beam.Map(lambda r: (r.relpath, r.action, r.message))
        assert_that(
            messages | beam.Filter(lambda m: m[0] == "dog/1.jpg"),
            equal_to(
                [
                    (
                        "dog/1.jpg",
                        "skipped",
                        "byte-identical to 'cat/1.jpg', which was written instead "
                        "(labelled 'cat' there, 'dog' here)",
                    )
                ]
            ),
        )


def test_no_duplicates_changes_nothing_and_reports_nothing(pipeline):
    distinct = [_entry(f"cat/{i}.jpg", f"{i:x}") for i in range(12)]
    with pipeline as p:
        unique = _drop(p, distinct)
        assert_that(unique["entries"], equal_to(distinct), label="Entries")
        assert_that(unique["report"], equal_to([]), label="Report")
