"""WriteReport alone: every line once, in parts that compose into the sorted report, and its tally."""

from __future__ import annotations

import posixpath
import random

import apache_beam as beam
import pytest
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from beam_tfrecord.beam.writing import WriteReport
from beam_tfrecord.entries import ReportEntry
from beam_tfrecord.report import PARTS_DIR, ReportTally, compose_report, report_key

pytestmark = pytest.mark.slow

OUT = "memory://out"


def _entries(count: int, seed: int = 0) -> list[ReportEntry]:
    """Report lines as a build makes them: skipped and modified, across folders, with file
    names that are not UTF-8 and one input reported twice (a duplicate kept, then normalized)."""
    rng = random.Random(seed)
    entries = []
    for i in range(count):
        folder = rng.choice(["a", "b", "b/c", "z", "é", "caf\udce9"])
        relpath = f"{folder}/{i:04d}.jpg"
        if rng.random() < 0.5:
            reason, action = rng.choice(["truncated", "corrupt", "no_label"]), "skipped"
        else:
            reason, action = "normalized", "modified"
        entries.append(
            ReportEntry(f"memory:///src/{relpath}", relpath, reason, f"message {i}", action)
        )
    first = entries[0]
    entries.append(ReportEntry(first.url, first.relpath, "duplicate", "kept", "kept"))
    return entries


def _sorted_report(entries: list[ReportEntry]) -> list[str]:
    """report.jsonl's lines: by relative path, then URL and reason (`report_key`)."""
    return [line for _, line in sorted((report_key(e), e.to_json()) for e in entries)]


def _written_parts(memfs) -> list[int]:
    names = memfs.find(f"/out/{PARTS_DIR}")
    return [int(posixpath.basename(n)[len("part-") : -len(".jsonl")]) for n in names]


def _at_most_one_part_per_index(parts):
    indices = [index for index, _ in parts]
    if len(indices) != len(set(indices)):
        raise BeamAssertException(f"a part was written twice: {sorted(indices)}")


@pytest.mark.parametrize("part_lines", [1_000, 20, 7, 1])
def test_the_parts_compose_into_the_sorted_report_whatever_the_cut(pipeline, memfs, part_lines):
    entries = _entries(80)
    shuffled = list(entries)
    random.Random(part_lines).shuffle(shuffled)
    with pipeline as p:
        written = p | beam.Create(shuffled) | WriteReport(OUT, part_lines)
        assert_that(written["tally"], equal_to([ReportTally.of(entries)]), label="Tally")
        # Every line in exactly one part: the parts' line counts add up to the report's.
        total = written["parts"] | beam.Map(lambda part: part[1]) | beam.CombineGlobally(sum)
        assert_that(total, equal_to([len(entries)]), label="Lines")
        assert_that(written["parts"], _at_most_one_part_per_index, label="OnePartEach")
    parts = _written_parts(memfs)
    if part_lines >= len(entries):
        assert len(parts) == 1
    else:
        assert len(parts) >= 2
    # Each part sorted, and each after the one before: key ranges, not arbitrary groups.
    keyed = []
    for part in sorted(parts):
        text = memfs.cat_file(f"/out/{PARTS_DIR}/part-{part:05d}.jsonl").decode("utf-8")
        lines = [(report_key(ReportEntry.from_json(line)), line) for line in text.splitlines()]
        assert lines == sorted(lines)
        keyed += lines
    assert keyed == sorted(keyed)
    # Composed as the build's last step does, the parts are the sorted report, byte for byte the
    # same however they were cut.
    compose_report(OUT, parts, "report.jsonl")
    lines = memfs.cat_file("/out/report.jsonl").decode("utf-8").splitlines()
    assert lines == _sorted_report(entries)
    assert [ReportEntry.from_json(line) for line in lines] == sorted(
        entries, key=lambda e: (report_key(e), e.to_json())
    )


def test_an_empty_report_tallies_nothing_and_writes_no_part(pipeline, memfs):
    with pipeline as p:
        empty = p | beam.Create([]).with_output_types(ReportEntry)
        written = empty | WriteReport(OUT, 10)
        assert_that(written["tally"], equal_to([ReportTally()]), label="Tally")
        assert_that(written["parts"], equal_to([]), label="Parts")
    assert memfs.find("/out") == []


def test_the_tally_counts_skipped_by_reason_and_modified(pipeline, memfs):
    entries = [
        ReportEntry("/s/a.jpg", "a.jpg", "truncated", "cut"),
        ReportEntry("/s/b.jpg", "b.jpg", "truncated", "cut"),
        ReportEntry("/s/c.jpg", "c.jpg", "no_label", "none"),
        ReportEntry("/s/d.jpg", "d.jpg", "normalized", "cmyk", "modified"),
        ReportEntry("/s/e.jpg", "e.jpg", "duplicate", "copies", "kept"),
    ]
    with pipeline as p:
        written = p | beam.Create(entries) | WriteReport(OUT, 2)
        counts = written["tally"] | beam.Map(
            lambda t: (t.lines, t.skipped, dict(t.skipped_by_reason), t.modified)
        )
        assert_that(counts, equal_to([(5, 3, {"truncated": 2, "no_label": 1}, 1)]))
