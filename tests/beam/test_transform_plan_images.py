"""PlanImages alone: each listed file labelled, split and sized from its listing, nothing read."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord.batches import SourceBatch, batched
from beam_tfrecord.beam.pipeline import preparer
from beam_tfrecord.beam.transforms import Census, PlanImages
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry, Reason
from beam_tfrecord.labels import ClassMap
from beam_tfrecord.listing import SourceFile
from beam_tfrecord.planning import Preparer
from beam_tfrecord.splits import assign_split, shuffle_key

pytestmark = pytest.mark.slow

SPLITS = (("train", 0.5), ("test", 0.5))
SEED = 3


def _preparer(**settings) -> Preparer:
    settings = {"splits": SPLITS, "seed": SEED, **settings}
    return preparer(
        BuildConfig.from_settings(
            dict(inputs=("memory://src/**",), output="memory://out", **settings)
        )
    )


def _source(relpath: str, size: int = 5_000, label: str | None = None) -> SourceFile:
    return SourceFile(f"memory:///src/{relpath}", relpath, size, label)


def _planned(source: SourceFile, label: str | None, class_id: int | None, size=None):
    """The entry the plan must give: split and order from the path, size from the listing."""
    size = source.size if size is None else size
    return ImageEntry(
        url=source.url,
        relpath=source.relpath,
        source_size=size,
        split=assign_split(source.relpath, SPLITS, SEED),
        shuffle_key=shuffle_key(source.relpath, SEED),
        label=label,
        class_id=class_id,
        record_size=Preparer.record_size(size, source.relpath, class_id, label),
    )


def _batches(sources: list[SourceFile]) -> list[SourceBatch]:
    """The files as ListImages gives them: in batches (small ones here, so that there are several)."""
    return list(batched(sources, SourceBatch, size=3))


def _entries(planned):
    """The planned images, one element each (PlanImages gives them in batches)."""
    return planned["entries"] | "Entries of batches" >> beam.FlatMap(iter)


def _reasons(report):
    return report | "Reasons" >> beam.Map(lambda r: (r.relpath, r.reason, r.action, r.split))


def test_each_file_is_labelled_split_and_sized_without_being_read(pipeline, memfs):
    # None of these files exists: a plan that read one would fail or report it.
    sources = [_source(f"zebra/z{i}.jpg", 1_000 + 37 * i) for i in range(4)]
    sources += [_source(f"ant/a{i}.png", 2_000 + 11 * i) for i in range(3)]
    sources += [_source("cow/c.jpeg", 123)]
    # Class ids are the sorted class names' order, whatever order the files are listed in.
    ids = {"ant": 0, "cow": 1, "zebra": 2}
    expected = [_planned(s, s.relpath.split("/")[0], ids[s.relpath.split("/")[0]]) for s in sources]
    assert {e.split for e in expected} == {"train", "test"}
    with pipeline as p:
        planned = p | beam.Create(_batches(sources)) | PlanImages(_preparer())
        assert_that(_entries(planned), equal_to(expected), label="Entries")
        assert_that(
            planned["census"], equal_to([Census(8, ClassMap(["ant", "cow", "zebra"]))]), "Census"
        )
        assert_that(planned["report"], equal_to([]), label="Report")
    assert memfs.find("/") == []


def test_an_unlabelled_file_is_reported_and_still_counted(pipeline):
    sources = [
        _source("cat/a.jpg"),
        _source("dog/b.jpg"),
        _source("loose.jpg"),  # no folder: the regex finds no label
        _source(" cat/c.jpg"),  # a label labels.txt could not give back
    ]
    expected = [_planned(sources[0], "cat", 0), _planned(sources[1], "dog", 1)]
    with pipeline as p:
        planned = (
            p | beam.Create(_batches(sources)) | PlanImages(_preparer(labels="regex:^([^/]+)/"))
        )
        assert_that(_entries(planned), equal_to(expected), label="Entries")
        # The census counts every listed input (the books balance against it), and takes its
        # classes from the inputs that have a usable label.
        assert_that(planned["census"], equal_to([Census(4, ClassMap(["cat", "dog"]))]), "Census")
        reported = [
            ("loose.jpg", Reason.NO_LABEL, "skipped", None),
            (" cat/c.jpg", Reason.BAD_CLASS_NAME, "skipped", None),
        ]
        assert_that(_reasons(planned["report"]), equal_to(reported), label="Report")


def test_fixed_classes_keep_their_order_and_report_any_other_label(pipeline):
    sources = [_source("cat/a.jpg"), _source("dog/b.jpg"), _source("fox/c.jpg")]
    with pipeline as p:
        planned = (
            p
            | beam.Create(_batches(sources))
            | PlanImages(_preparer(classes=("dog", "cat", "owl")))
        )
        expected = [_planned(sources[0], "cat", 1), _planned(sources[1], "dog", 0)]
        assert_that(_entries(planned), equal_to(expected), label="Entries")
        classes = ClassMap(["dog", "cat", "owl"])
        # How the labels met --classes, for the summary: owl has no input, fox is not listed.
        census = Census(3, classes, not_found=("owl",), other_labels=("fox",), other_label_count=1)
        assert_that(planned["census"], equal_to([census]), label="Census")
        reported = [("fox/c.jpg", Reason.UNKNOWN_CLASS, "skipped", None)]
        assert_that(_reasons(planned["report"]), equal_to(reported), label="Report")


def test_a_class_list_typo_finds_the_label_it_meant_among_all_left_out(pipeline):
    """The manifest keeps the first 100 left-out labels by name; the label a --classes typo
    meant is looked for among all of them (zebra sorts after label_000 ... label_149)."""
    sources = [_source(f"label_{i:03d}/a.jpg") for i in range(150)] + [_source("zebra/z.jpg")]
    with pipeline as p:
        planned = (
            p
            | beam.Create(_batches(sources))
            | PlanImages(_preparer(classes=("label_000", "zebar")))
        )
        census = planned["census"] | beam.Map(
            lambda c: (c.not_found, c.meant, len(c.other_labels), c.other_label_count)
        )
        assert_that(census, equal_to([(("zebar",), (("zebar", "zebra"),), 100, 150)]))


def test_a_file_whose_record_fits_in_no_shard_is_reported_with_its_split(pipeline):
    sources = [_source("cat/small.jpg", 1_000), _source("cat/huge.jpg", 50_000)]
    prep = _preparer(min_shard_size=2_000, max_shard_size=10_000)
    with pipeline as p:
        planned = p | beam.Create(_batches(sources)) | PlanImages(prep)
        assert_that(_entries(planned), equal_to([_planned(sources[0], "cat", 0)]), "Entries")
        split = assign_split("cat/huge.jpg", SPLITS, SEED)
        reported = [("cat/huge.jpg", Reason.TOO_LARGE, "skipped", split)]
        assert_that(_reasons(planned["report"]), equal_to(reported), label="Report")


def test_an_input_list_entry_gets_its_size_looked_up_or_is_reported_gone(pipeline, memfs):
    # An input list gives no sizes (-1) and may give labels, which win over the folder's.
    memfs.pipe_file("/src/cat/there.jpg", b"x" * 777)
    there = _source("cat/there.jpg", -1, label="tabby")
    gone = _source("cat/gone.jpg", -1, label="tabby")
    with pipeline as p:
        planned = p | beam.Create(_batches([there, gone])) | PlanImages(_preparer())
        expected = [_planned(there, "tabby", 0, size=777)]
        assert_that(_entries(planned), equal_to(expected), label="Entries")
        assert_that(planned["census"], equal_to([Census(2, ClassMap(["tabby"]))]), "Census")
        split = assign_split("cat/gone.jpg", SPLITS, SEED)
        reported = [("cat/gone.jpg", Reason.VANISHED, "skipped", split)]
        assert_that(_reasons(planned["report"]), equal_to(reported), label="Report")


def test_without_labels_there_are_no_classes(pipeline):
    sources = [_source("cat/a.jpg"), _source("b.jpg")]
    with pipeline as p:
        planned = p | beam.Create(_batches(sources)) | PlanImages(_preparer(labels="none"))
        assert_that(
            _entries(planned), equal_to([_planned(s, None, None) for s in sources]), "Entries"
        )
        assert_that(planned["census"], equal_to([Census(2, ClassMap([]))]), label="Census")
        assert_that(planned["report"], equal_to([]), label="Report")


def test_an_empty_listing_plans_nothing_and_counts_zero(pipeline):
    with pipeline as p:
        planned = (
            p
            | beam.Create([], reshuffle=False).with_output_types(SourceBatch)
            | PlanImages(_preparer())
        )
        assert_that(_entries(planned), equal_to([]), label="Entries")
        assert_that(planned["census"], equal_to([Census(0, ClassMap([]))]), label="Census")
