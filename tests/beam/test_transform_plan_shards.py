"""PlanShards alone: every entry in one shard, shards within the bounds, the same plan in any order.

The plan is computed in buckets spread over workers; it must equal the plan of the whole split
cut in one pass (sort by shuffle key, cut at equal byte offsets), whatever the bucketing.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

import apache_beam as beam
import pytest
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from beam_tfrecord.batches import EntryBatch, batched
from beam_tfrecord.beam.transforms import PlanShards
from beam_tfrecord.entries import ImageEntry
from beam_tfrecord.sharding import num_shards
from beam_tfrecord.splits import assign_split, shuffle_key

pytestmark = pytest.mark.slow

MIN, MAX = 10_000, 40_000
SPLITS = (("train", 0.7), ("validation", 0.25), ("test", 0.05))


def _entries(count: int, seed: int = 0) -> list[ImageEntry]:
    rng = random.Random(seed)
    entries = []
    for i in range(count):
        relpath = f"c{i % 3}/img_{i:04d}.jpg"
        entries.append(
            ImageEntry(
                url=f"memory:///src/{relpath}",
                relpath=relpath,
                source_size=0,
                split=assign_split(relpath, SPLITS, seed),
                shuffle_key=shuffle_key(relpath, seed),
                label=f"c{i % 3}",
                class_id=i % 3,
                record_size=rng.randint(300, 3_000),
            )
        )
    return entries


def _one_pass_plan(entries: list[ImageEntry]) -> dict[tuple[str, int], list[str]]:
    """The plan of each split in one pass: in sort-key order, the record starting at byte
    `offset` of `total` goes to shard `offset * shards // total`."""
    by_split = defaultdict(list)
    for entry in entries:
        by_split[entry.split].append(entry)
    plan = defaultdict(list)
    for split, records in by_split.items():
        records.sort(key=lambda e: e.sort_key)
        total = sum(e.record_size for e in records)
        shards = num_shards(total, max(e.record_size for e in records), MIN, MAX)
        offset = 0
        for entry in records:
            plan[(split, offset * shards // total)].append(entry.relpath)
            offset += entry.record_size
    return dict(plan)


def _batches(entries: list[ImageEntry]) -> list[EntryBatch]:
    """The entries as PlanImages gives them: in batches (small ones, so that there are many)."""
    return list(batched(entries, EntryBatch, size=7))


def _shard_names(element):
    (split, index), entries = element
    return (split, index), [e.relpath for e in sorted(entries, key=lambda e: e.sort_key)]


def _check_shards(entries: list[ImageEntry]):
    """What a plan promises whatever its algorithm: every entry in exactly one shard, unchanged;
    each split's shards numbered 0..n-1, in sort-key order; every shard at most MAX bytes, and
    at least MIN unless its split is a single shard."""

    def check(shards):
        placed = [e for _, group in shards for e in group]
        if sorted(placed, key=lambda e: e.relpath) != sorted(entries, key=lambda e: e.relpath):
            raise BeamAssertException("the shards do not hold every entry exactly once")
        by_split = defaultdict(dict)
        for (split, index), group in shards:
            by_split[split][index] = sorted(group, key=lambda e: e.sort_key)
        for split, groups in by_split.items():
            if sorted(groups) != list(range(len(groups))):
                raise BeamAssertException(f"{split}: shard indices {sorted(groups)}")
            for index, group in groups.items():
                size = sum(e.record_size for e in group)
                if size > MAX or (size < MIN and len(groups) > 1):
                    raise BeamAssertException(f"{split} shard {index}: {size} bytes")
            for a, b in itertools.pairwise(sorted(groups)):
                if groups[a][-1].sort_key >= groups[b][0].sort_key:
                    raise BeamAssertException(f"{split}: shards {a} and {b} overlap in key order")

    return check


@pytest.mark.parametrize(
    ("bucket_records", "order"),
    [(10_000, 0), (10_000, 1), (16, 0), (16, 2), (3, 3), (1, 4)],
)
def test_the_bucketed_plan_is_the_one_pass_plan_in_any_order(pipeline, bucket_records, order):
    entries = _entries(90)
    shuffled = list(entries)
    random.Random(order).shuffle(shuffled)
    expected = _one_pass_plan(entries)
    assert len(expected) > 5  # several shards in the large splits
    with pipeline as p:
        # `most`, as the pipeline gives it: the listed count, which no split exceeds.
        most = p | "Most" >> beam.Create([len(entries) + 7])
        planned = p | beam.Create(_batches(shuffled)) | PlanShards(MIN, MAX, bucket_records, most)
        assert_that(planned["shards"], _check_shards(entries), label="Promises")
        assert_that(
            planned["shards"] | beam.Map(_shard_names),
            equal_to(list(expected.items())),
            label="OnePassPlan",
        )


@pytest.mark.parametrize(
    ("chunk", "held", "bucket_records"), [(3, 7, 16), (1, 1, 10_000), (5, 40, 1)]
)
def test_entries_planned_in_small_chunks_make_the_same_plan(
    pipeline, monkeypatch, chunk, held, bucket_records
):
    """Entries cross the planning shuffles in chunks (of one bucket, then of one shard): chunks
    cut short, and bundles that output all they hold early, change nothing in the plan."""
    from beam_tfrecord.beam import transforms

    # The pipeline runs in this process (LocalRunner), so its DoFns see these.
    monkeypatch.setattr(transforms, "_CHUNK_ENTRIES", chunk)
    monkeypatch.setattr(transforms, "_HELD_ENTRIES", held)
    entries = _entries(90, seed=2)
    with pipeline as p:
        most = p | "Most" >> beam.Create([len(entries)])
        planned = p | beam.Create(_batches(entries)) | PlanShards(MIN, MAX, bucket_records, most)
        assert_that(planned["shards"], _check_shards(entries), label="Promises")
        assert_that(
            planned["shards"] | beam.Map(_shard_names),
            equal_to(list(_one_pass_plan(entries).items())),
            label="OnePassPlan",
        )


def test_the_plan_gives_each_split_its_records_bytes_and_shard_count(pipeline):
    entries = _entries(60, seed=5)
    expected = []
    for split in sorted({e.split for e in entries}):
        records = [e for e in entries if e.split == split]
        total = sum(e.record_size for e in records)
        shards = num_shards(total, max(e.record_size for e in records), MIN, MAX)
        expected.append((split, len(records), total, shards))
    with pipeline as p:
        most = p | "Most" >> beam.Create([len(entries)])
        planned = p | beam.Create(_batches(entries)) | PlanShards(MIN, MAX, 8, most)
        totals = planned["plan"] | beam.FlatMap(
            lambda plan: [(s, v.records, v.bytes, v.shards) for s, v in plan.items()]
        )
        assert_that(totals, equal_to(expected))


def test_a_split_smaller_than_the_maximum_is_one_shard(pipeline):
    entries = [e for e in _entries(30) if e.split == "train"][:4]
    assert sum(e.record_size for e in entries) < MIN
    with pipeline as p:
        most = p | "Most" >> beam.Create([30])
        planned = p | beam.Create(_batches(entries)) | PlanShards(MIN, MAX, 2, most)
        expected = [(("train", 0), [e.relpath for e in sorted(entries, key=lambda e: e.sort_key)])]
        assert_that(planned["shards"] | beam.Map(_shard_names), equal_to(expected))
