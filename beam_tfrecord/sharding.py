"""Shard planning on metadata only: how many shards a split gets and which shard each record is in.

A split's records are ordered by their shuffle key and cut into contiguous runs of nearly equal
bytes. The cut is decided from each record's byte offset in that order, so it can be computed in
parallel: records are bucketed by key range, each bucket learns the bytes of the buckets before it,
and then places its own records without seeing anyone else's. No worker ever needs the metadata
of the whole split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "SplitPlan",
    "SplitStats",
    "bucket_of",
    "bucket_offsets",
    "num_buckets",
    "num_shards",
    "place_in_order",
    "place_records",
    "plan_splits",
    "shard_index",
]

T = TypeVar("T")


@dataclass(frozen=True)
class SplitStats:
    """What planning needs to know about a whole split: three numbers, combinable in parallel."""

    records: int = 0
    bytes: int = 0
    max_record: int = 0

    def merge(self, other: SplitStats) -> SplitStats:
        return SplitStats(
            self.records + other.records,
            self.bytes + other.bytes,
            max(self.max_record, other.max_record),
        )


def num_shards(total_bytes: int, max_record: int, min_size: int, max_size: int) -> int:
    """The shard count for a split of `total_bytes`, whose largest record is `max_record` bytes.

    Cutting at equal byte offsets makes every shard `total/n` bytes give or take less than one
    record, so the count is chosen to keep `total/n` at least one record inside both bounds,
    as near their middle as possible. A split smaller than `max_size` is a single shard.
    """
    if total_bytes <= 0:
        return 0
    if total_bytes <= max_size:
        return 1
    ideal = total_bytes / ((min_size + max_size) / 2)

    # Every byte range at least one record long holds a record's start, so no more shards than
    # total // max_record can ever leave a shard empty.
    most = max(1, total_bytes // max(max_record, 1))

    def clamp(lo: int, hi: int) -> int:
        return min(max(round(ideal), lo), hi, most)

    if max_record < max_size:
        lo = math.ceil(total_bytes / (max_size - max_record))
        hi = math.floor(total_bytes / (min_size + max_record))
        if lo <= hi:
            return clamp(lo, hi)
    # The bounds are too close for a guarantee at this record size; aim the average inside them.
    lo, hi = math.ceil(total_bytes / max_size), math.floor(total_bytes / min_size)
    if lo <= hi:
        return clamp(lo, hi)
    # No count puts the average inside (max < 2 * min and the split falls between): keep shards
    # under the maximum, which readers and object stores care about more.
    return min(lo, most)


def shard_index(offset: int, total_bytes: int, shards: int) -> int:
    """The shard of a record that starts `offset` bytes into its split's shuffled order."""
    # Integer arithmetic: the same answer on every machine, whatever its floating point.
    return offset * shards // total_bytes


def num_buckets(records: int, bucket_records: int) -> int:
    """How many key-range buckets split the planning of `records` records."""
    return max(1, math.ceil(records / bucket_records))


def bucket_of(key: int, buckets: int) -> int:
    """The bucket of a 64-bit shuffle key: buckets are contiguous key ranges, in key order."""
    return (key * buckets) >> 64


def bucket_offsets(bucket_bytes: Mapping[int, int], buckets: int) -> list[int]:
    """The byte offset at which each bucket starts, from each bucket's total bytes."""
    offsets, running = [], 0
    for bucket in range(buckets):
        offsets.append(running)
        running += bucket_bytes.get(bucket, 0)
    return offsets


def place_records(
    records: Iterable[tuple[tuple[int, str], int, T]],
    start_offset: int,
    total_bytes: int,
    shards: int,
) -> Iterator[tuple[int, T]]:
    """Assigns one bucket's records to shards.

    Args:
        records: (sort key, size in bytes, payload) for every record of the bucket, in any order.
            The sort key is (shuffle key, relative path, URL): the path breaks the rare hash
            tie, and the URL that of two inputs with one relative path.
        start_offset: the bytes of all records in earlier buckets.
        total_bytes: the bytes of the whole split.
        shards: the split's shard count.

    Yields:
        (shard index, payload), in sort-key order.
    """
    in_order = ((size, payload) for _, size, payload in sorted(records, key=lambda r: r[0]))
    return place_in_order(in_order, start_offset, total_bytes, shards)


def place_in_order(
    records: Iterable[tuple[int, T]], start_offset: int, total_bytes: int, shards: int
) -> Iterator[tuple[int, T]]:
    """`place_records` for records already in sort-key order, each (size in bytes, payload)."""
    offset = start_offset
    for size, payload in records:
        yield shard_index(offset, total_bytes, shards), payload
        offset += size


@dataclass(frozen=True)
class SplitPlan:
    """How one split is cut into shards: its totals, its shard count, and where each bucket starts.

    Attributes:
        records: the split's records.
        bytes: their planned bytes, summed.
        max_record: the largest record's planned bytes.
        shards: how many shards the split is cut into (num_shards).
        bucket_offsets: per key-range bucket, the bytes of the split's records in the buckets
            before it; a bucket places its records from there on its own.
    """

    records: int
    bytes: int
    max_record: int
    shards: int
    bucket_offsets: tuple[int, ...]

    @property
    def buckets(self) -> int:
        return len(self.bucket_offsets)

    def place(
        self, bucket: int, records: Iterable[tuple[tuple[int, str], int, T]]
    ) -> Iterator[tuple[int, T]]:
        """Assigns one bucket's records to shards of this split (see place_records)."""
        return place_records(records, self.bucket_offsets[bucket], self.bytes, self.shards)

    def place_in_order(
        self, bucket: int, records: Iterable[tuple[int, T]]
    ) -> Iterator[tuple[int, T]]:
        """`place` for records already in sort-key order, each (size in bytes, payload)."""
        return place_in_order(records, self.bucket_offsets[bucket], self.bytes, self.shards)


def plan_splits(
    bucket_stats: Mapping[tuple[str, int], SplitStats],
    buckets: int,
    min_size: int,
    max_size: int,
) -> dict[str, SplitPlan]:
    """The plan of every split, from the records, bytes and largest record of each (split, bucket).

    The one function the pipeline (PlanShards) and the tests plan with.

    Args:
        bucket_stats: SplitStats per (split name, bucket); buckets holding nothing may be left out.
        buckets: how many key-range buckets each split was cut into (num_buckets).
        min_size: the smallest shard wanted, in bytes.
        max_size: the largest shard wanted, in bytes.

    Returns:
        A SplitPlan per split name, in name order.
    """
    per_split: dict[str, dict[int, SplitStats]] = {}
    for (split, bucket), stats in bucket_stats.items():
        per_split.setdefault(split, {})[bucket] = stats
    plans = {}
    for split, by_bucket in sorted(per_split.items()):
        total = SplitStats()
        for stats in by_bucket.values():
            total = total.merge(stats)
        plans[split] = SplitPlan(
            records=total.records,
            bytes=total.bytes,
            max_record=total.max_record,
            shards=num_shards(total.bytes, total.max_record, min_size, max_size),
            bucket_offsets=tuple(
                bucket_offsets({b: stats.bytes for b, stats in by_bucket.items()}, buckets)
            ),
        )
    return plans
