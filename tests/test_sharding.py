"""Shard planning on metadata alone: counts for realistic datasets and the size-bounds guarantee."""

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from beam_tfrecord.sharding import (
    SplitPlan,
    SplitStats,
    bucket_of,
    num_buckets,
    num_shards,
    plan_splits,
)

MB = 10**6
GiB = 2**30


@pytest.mark.parametrize(
    ("total", "max_record", "expected"),
    [
        (0, 0, 0),
        (5 * MB, 1 * MB, 1),  # below the minimum: one shard
        (150 * MB, 1 * MB, 1),
        (200 * MB, 1 * MB, 1),  # exactly the maximum still fits in one
        (450 * MB, 1 * MB, 3),
        # ImageNet-1k train, 137 GiB of ~110 KB JPEGs: ~980 shards of ~150 MB.
        (137 * GiB, 15 * MB, 981),
        # 1.5 TB: shard count scales, average stays mid-range.
        (1_500_000 * MB, 5 * MB, 10_000),
    ],
)
def test_num_shards_realistic(total, max_record, expected):
    assert num_shards(total, max_record, 100 * MB, 200 * MB) == expected


def test_num_shards_keeps_average_inside_bounds_for_every_total():
    record = 2 * MB
    for total in range(200 * MB + 1, 5000 * MB, 7 * MB + 12345):
        n = num_shards(total, record, 100 * MB, 200 * MB)
        assert 100 * MB <= total / n <= 200 * MB, total
        # Whenever some count keeps one record's margin inside both bounds, that count is chosen.
        if any(102 * MB <= total / k <= 198 * MB for k in range(1, 60)):
            assert 102 * MB <= total / n <= 198 * MB, total


def _plan(sizes, min_size, max_size, buckets=1, seed=0):
    """Plans records as PlanShards does: per-bucket stats, plan_splits, each bucket placed alone."""
    rng = random.Random(seed)
    records = [((rng.getrandbits(64), f"img{i:06d}.jpg"), size) for i, size in enumerate(sizes)]
    per_bucket: dict[int, list] = {}
    for key, size in records:
        per_bucket.setdefault(bucket_of(key[0], buckets), []).append((key, size, (key, size)))
    stats = {
        ("train", b): SplitStats(len(rs), sum(r[1] for r in rs), max(r[1] for r in rs))
        for b, rs in per_bucket.items()
    }
    plan = plan_splits(stats, buckets, min_size, max_size)["train"]
    shards: dict[int, list] = {}
    for b, rs in per_bucket.items():
        for shard, payload in plan.place(b, rs):
            shards.setdefault(shard, []).append(payload)
    return plan.shards, shards


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=400),
    min_size=st.integers(1000, 20_000),
    spread=st.integers(2, 5),
    buckets=st.integers(1, 9),
)
def test_every_shard_within_bounds_when_bounds_allow(sizes, min_size, spread, buckets):
    max_size = spread * min_size
    assume(max(sizes) <= max_size)  # larger records are reported by the pipeline, never planned
    n, shards = _plan(sizes, min_size, max_size, buckets)
    total = sum(sizes)
    assert sorted(shards) == list(range(n)), "every shard index gets records, none is empty"
    assert sum(len(v) for v in shards.values()) == len(sizes), "every record placed exactly once"
    biggest = max(sizes)
    for records in shards.values():
        shard_bytes = sum(size for _, size in records)
        if total >= min_size and max_size >= 2 * (min_size + biggest):
            # The guarantee: within bounds whenever the split holds at least the minimum.
            assert min_size <= shard_bytes <= max_size
        assert shard_bytes <= max(max_size, total)


def test_bucketing_does_not_change_the_plan():
    sizes = [random.Random(i).randint(1000, 200_000) for i in range(3000)]
    _, one = _plan(sizes, 5 * MB, 12 * MB, buckets=1)
    _, many = _plan(sizes, 5 * MB, 12 * MB, buckets=37)
    assert {k: sorted(v) for k, v in one.items()} == {k: sorted(v) for k, v in many.items()}


def test_records_in_a_shard_follow_shuffle_key_order_not_name_order():
    sizes = [100] * 1000
    _, shards = _plan(sizes, 10_000, 30_000)
    for records in shards.values():
        keys = [key for key, _ in records]
        assert keys == sorted(keys)
        names = [key[1] for key in keys]
        assert names != sorted(names), "names in a shard come in random order"


def test_bucket_of_is_monotonic_and_in_range():
    keys = sorted([0, 2**64 - 1, *(random.Random(3).getrandbits(64) for _ in range(10_000))])
    buckets = [bucket_of(k, 17) for k in keys]
    assert buckets == sorted(buckets)
    assert buckets[0] == 0 and buckets[-1] == 16


def test_num_buckets():
    assert num_buckets(0, 1000) == 1
    assert num_buckets(1000, 1000) == 1
    assert num_buckets(1001, 1000) == 2
    assert num_buckets(100_000_000, 200_000) == 500


def test_plan_splits_is_data_per_split_from_bucket_stats():
    # ImageNet-like: 1.28M records of ~110 KB in train over 3 buckets, 50k in validation over 1.
    stats = {
        ("train", 0): SplitStats(400_000, 44 * GiB, 900_000),
        ("train", 2): SplitStats(480_000, 52 * GiB, 1_200_000),
        ("train", 1): SplitStats(400_000, 41 * GiB, 800_000),
        ("validation", 1): SplitStats(50_000, 6 * GiB, 700_000),
    }
    plans = plan_splits(stats, 3, 100 * MB, 200 * MB)
    assert list(plans) == ["train", "validation"]
    train = plans["train"]
    assert train == SplitPlan(
        records=1_280_000,
        bytes=137 * GiB,
        max_record=1_200_000,
        shards=num_shards(137 * GiB, 1_200_000, 100 * MB, 200 * MB),
        bucket_offsets=(0, 44 * GiB, 85 * GiB),
    )
    assert 100 * MB <= train.bytes / train.shards <= 200 * MB and train.buckets == 3
    assert plans["validation"].bucket_offsets == (0, 0, 6 * GiB)
    with pytest.raises(AttributeError):
        train.shards = 1  # frozen: the plan is a side input every worker shares
