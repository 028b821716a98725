"""The parts a dataset's records are shared out in among readers: ranges of its shards' records."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Part", "split_parts"]


@dataclass(frozen=True)
class Part:
    """The records ``start, start + step, ...`` before ``stop`` of one shard: what a reader is
    given to read.

    Attributes:
        url: The shard's path or fsspec URL.
        examples: The records the shard holds, None when unknown; a reader that reads the shard
            to its end holds it to this count.
        start: The first record's number in the shard, from 0.
        stop: The number after the last record's; None for the shard's end.
        step: Every ``step``-th record from ``start``.
        counted_by: What ``examples`` comes from: None for manifest.json, else the record index.
    """

    url: str
    examples: int | None = None
    start: int = 0
    stop: int | None = None
    step: int = 1
    counted_by: str | None = None

    def records(self) -> range:
        """The numbers of the part's records in its shard (its count known)."""
        if self.examples is None:
            raise ValueError(f"{self.url}: its record count is unknown")
        end = self.examples if self.stop is None else min(self.stop, self.examples)
        return range(self.start, end, self.step)


def split_parts(parts: Sequence[Part], index: int, count: int) -> list[Part]:
    """Part ``index`` of ``count`` disjoint parts whose union is ``parts``, in their order.

    With every record count known, the records of ``parts`` taken one after another are cut
    into ``count`` runs whose lengths differ by one at most, a run crossing from shard to shard
    where it must: a reader reads only its own records, and no reader of a data-parallel job
    waits for another with more to read. Without counts, `_split_by_shards`.
    """
    if any(part.examples is None for part in parts):
        return _split_by_shards(parts, index, count)
    ranges = [part.records() for part in parts]
    total = sum(map(len, ranges))
    # The k-th cut at k * total // count: the runs' lengths are total // count or one more.
    first, last = index * total // count, (index + 1) * total // count
    mine = []
    at = 0  # the number, in all of `parts`, of the part's first record
    for part, records in zip(parts, ranges, strict=True):
        taken = records[max(first - at, 0) : max(last - at, 0)]
        if taken:
            mine.append(
                dataclasses.replace(part, start=taken.start, stop=taken.stop, step=taken.step)
            )
        at += len(records)
    return mine


def _split_by_shards(parts: Sequence[Part], index: int, count: int) -> list[Part]:
    """Part ``index`` of ``count``, when a shard's record count is unknown (no manifest.json and
    no record index): the parts can then differ by up to a shard's records.

    With at least as many shards as readers, readers take whole shards in turn. With fewer,
    readers share shards and take every k-th record of one, so that no reader sits idle; each
    shard is then read by as few readers as can be.
    """
    if len(parts) >= count or not parts:
        return list(parts[index::count])
    which = index % len(parts)
    sharers = len(range(which, count, len(parts)))
    part = parts[which]
    start = part.start + index // len(parts) * part.step
    return [dataclasses.replace(part, start=start, step=part.step * sharers)]
