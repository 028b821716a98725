"""Sharing a split's records among readers: parts within one record of each other, exactly."""

from __future__ import annotations

import pytest

from beam_tfrecord.parts import Part, split_parts


def _shards(counts: list[int]) -> list[Part]:
    return [Part(f"s{i}", examples) for i, examples in enumerate(counts)]


def _records(parts: list[Part]) -> list[tuple[str, int]]:
    return [(part.url, number) for part in parts for number in part.records()]


# (records per shard, readers): the shapes a user met, more readers than shards or records,
# shards of very different sizes, and one reader.
CASES = [
    ([10 + i % 2 for i in range(24)], 16),  # 24 shards of 10-11 records, 16 ways: 8 got 2x
    ([11, 11, 11], 3),
    ([9, 15, 9], 2),
    ([33], 3),
    ([40, 3, 1, 1], 3),
    ([5, 7, 2], 7),  # more readers than shards
    ([3, 2], 8),  # more readers than records
    ([0, 4, 0, 4], 3),
    ([100], 1),
    ([1] * 10, 4),
    ([], 3),
]


@pytest.mark.parametrize(("counts", "readers"), CASES)
def test_parts_differ_by_a_record_at_most_and_hold_every_record_once_in_order(counts, readers):
    shards = _shards(counts)
    parts = [split_parts(shards, index, readers) for index in range(readers)]
    sizes = [len(_records(part)) for part in parts]
    assert max(sizes) - min(sizes) <= 1, sizes
    assert sum(sizes) == sum(counts)
    together = [record for part in parts for record in _records(part)]
    assert together == _records(shards), "every record once, in the split's order"


@pytest.mark.parametrize(("counts", "readers"), CASES)
def test_a_part_split_again_is_that_part_exactly(counts, readers):
    """Per machine, then per DataLoader worker: each level within one record too."""
    shards = _shards(counts)
    for machine in range(readers):
        part = split_parts(shards, machine, readers)
        again = [split_parts(part, worker, 3) for worker in range(3)]
        sizes = [len(_records(p)) for p in again]
        assert max(sizes) - min(sizes) <= 1
        assert [r for p in again for r in _records(p)] == _records(part)


def test_a_part_crosses_shards_where_it_must():
    shards = _shards([10 + i % 2 for i in range(24)])
    parts = [split_parts(shards, index, 16) for index in range(16)]
    assert sorted(len(_records(p)) for p in parts) == [15] * 4 + [16] * 12  # 252 records
    assert parts[0] == [Part("s0", 10, 0, 10), Part("s1", 11, 0, 5)]
    assert parts[1] == [Part("s1", 11, 5, 11), Part("s2", 10, 0, 10)]


def test_without_counts_readers_take_whole_shards_or_every_kth_record():
    """No manifest.json and no record indexes: nothing says where a part would end."""
    shards = [Part("a"), Part("b"), Part("c")]
    assert split_parts(shards, 1, 2) == [Part("b")]
    assert split_parts(shards, 0, 2) == [Part("a"), Part("c")]
    assert split_parts(shards, 4, 6) == [Part("b", start=1, step=2)]
    with pytest.raises(ValueError, match="record count is unknown"):
        Part("a").records()
