"""Batches of metadata: many listed files or planned images as one element, coded column by column.

A build moves its metadata (what was listed, how each image is planned) between the steps of a
pipeline, and every element a runner moves costs it microseconds of its own at each step and
shuffle, whatever its size: at a hundred million images, a per-image element is the pipeline's
cost. A batch is a list of up to `BATCH` entries that a runner moves as one element, coded in one
piece (`to_bytes`, `from_bytes`), where a list of entries would be coded, and sized, entry by
entry by the runner.

Batches are plain lists, so code that takes entries takes a batch as it is.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterable, Iterator
from itertools import accumulate, groupby, pairwise
from typing import TypeVar

from beam_tfrecord.entries import ImageEntry, ReportEntry
from beam_tfrecord.listing import SourceFile
from beam_tfrecord.spool import Held

__all__ = [
    "BATCH",
    "EntryBatch",
    "LabelledBatch",
    "PackedEntries",
    "SourceBatch",
    "batched",
    "in_placing_order",
    "in_shard_order",
]

# Entries per batch at most: a batch's columns then stay within a few hundred kilobytes.
BATCH = 2048

_COUNT = struct.Struct("<I")
_ENCODING = ("utf-8", "surrogateescape")

B = TypeVar("B", bound=list)


def batched(items: Iterable, kind: type[B], size: int = BATCH) -> Iterator[B]:
    """`items` in consecutive batches of `kind`, of at most `size` each."""
    batch = kind()
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = kind()
    if batch:
        yield batch


def _join(parts: list[bytes]) -> bytes:
    """Items' bytes as one: their count, each one's length, then the bytes back to back."""
    return _COUNT.pack(len(parts)) + array("I", map(len, parts)).tobytes() + b"".join(parts)


# A batch's bytes are compressed, fast: its paths share most of their text (a folder's files,
# a bucket's prefix), so a batch takes 6-10 times less, for under a microsecond an entry each
# way. An in-process runner (the DirectRunner) holds every batch between its stages as these
# bytes, so they are what a local build's memory grows by with each image.
_LEVEL = 1


def _compressed(parts: list[bytes]) -> bytes:
    return zlib.compress(_join(parts), _LEVEL)


def _decompressed(data: bytes) -> list[bytes]:
    return _split(zlib.decompress(data))


def _overhead(items) -> int:
    """What `_join` adds to its items' bytes."""
    return _COUNT.size * (1 + len(items))


# Items sized one by one at most, when a batch is sized: Beam sizes the elements it outputs (for
# its element-size metrics, not to place or cut anything), and sizing a whole batch would cost
# about what coding it does.
_SIZED = 16


def _estimated(items: list, size_of) -> int:
    """The items' encoded sizes, added up: exact for a few items (exact when their texts are
    ASCII), extrapolated from the first `_SIZED` for more."""
    sized = sum(map(size_of, items[:_SIZED]))
    return sized if len(items) <= _SIZED else sized * len(items) // _SIZED


def _labelled_size(item) -> int:
    source, label = item
    return source.encoded_size() + 1 + (len(label) if isinstance(label, str) else 0)


def _layout(data: bytes) -> tuple[array, int]:
    """Of bytes `_join` joined: each item's length, and where the first item starts."""
    (count,) = _COUNT.unpack_from(data)
    lengths = array("I")
    start = _COUNT.size + lengths.itemsize * count
    lengths.frombytes(data[_COUNT.size : start])
    return lengths, start


def _split(data: bytes) -> list[bytes]:
    """The items' bytes that `_join` joined."""
    lengths, start = _layout(data)
    ends = list(accumulate(lengths, initial=start))
    return [data[a:b] for a, b in pairwise(ends)]


# Each item keeps the compact encoding of its own kind (`to_bytes`, what a shuffle of single
# items carried before): a batch only saves the runner's cost per element. Row by row measured
# faster than column by column here: one C-level encode per item beats five per field.


class SourceBatch(list):
    """Listed files (SourceFile), moved as one element."""

    def to_bytes(self) -> bytes:
        return _compressed(self._parts())

    def _parts(self) -> list[bytes]:
        return [source.to_bytes() for source in self]

    def encoded_size(self) -> int:
        """About its bytes before compression, without encoding (`_estimated`): what Beam
        sizes an element by, for its metrics only."""
        return _overhead(self) + _estimated(self, SourceFile.encoded_size)

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceBatch:
        return cls._from_parts(_decompressed(data))

    @classmethod
    def _from_parts(cls, parts: list[bytes]) -> SourceBatch:
        return cls(map(SourceFile.from_bytes, parts))


class EntryBatch(list):
    """Planned images (ImageEntry), moved as one element."""

    def to_bytes(self) -> bytes:
        return _compressed([entry.to_bytes() for entry in self])

    def encoded_size(self) -> int:
        """About its bytes before compression, without encoding (`_estimated`): what Beam
        sizes an element by, for its metrics only."""
        return _overhead(self) + _estimated(self, ImageEntry.encoded_size)

    @classmethod
    def from_bytes(cls, data: bytes) -> EntryBatch:
        return cls(map(ImageEntry.from_bytes, _decompressed(data)))

    @staticmethod
    def entries_bytes(data: bytes) -> list[bytes]:
        """Each entry's own bytes (ImageEntry.to_bytes) of a batch's bytes, none decoded."""
        return _decompressed(data)

    @staticmethod
    def from_entries_bytes(entries: list[bytes]) -> bytes:
        """The bytes of the batch of these entries' bytes (`entries_bytes` reversed)."""
        return _compressed(entries)


def in_placing_order(batches: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """The entries of these batches (EntryBatch.to_bytes) in sort-key order, each as (its record
    size, its bytes, ImageEntry.to_bytes): what placing a planning bucket in shards reads.

    Each entry's shuffle key and size are read in place; only entries whose keys tie are
    decoded, to be ordered by the rest of their sort key. The entries wait as their bytes back
    to back in one buffer, ordered as one integer each (key, then position): a bucket of a few
    hundred thousand takes about half the memory of a bytes object and a tuple per entry, and
    it is the largest thing planning holds at once.
    """
    held = bytearray()
    starts = array("Q")
    for data in batches:
        raw = zlib.decompress(data)
        lengths, head = _layout(raw)
        starts.extend(accumulate(lengths[:-1], initial=len(held)) if lengths else ())
        held += memoryview(raw)[head:]
    count = len(starts)
    starts.append(len(held))
    view = memoryview(held)
    placed_by = ImageEntry.placed_by
    bits = count.bit_length()
    order = sorted(placed_by(view, at)[0] << bits | i for i, at in enumerate(starts[:-1]))

    def entry_bytes(i: int) -> bytes:
        return bytes(view[starts[i] : starts[i + 1]])

    position = (1 << bits) - 1
    for _, run in groupby(order, key=lambda keyed: keyed >> bits):
        tied = [keyed & position for keyed in run]
        if len(tied) > 1:
            tied.sort(key=lambda i: ImageEntry.from_bytes(entry_bytes(i)).sort_key)
        for i in tied:
            at = starts[i]
            yield placed_by(view, at)[1], bytes(view[at : starts[i + 1]])


def in_shard_order(batches: Iterable[bytes]) -> list[bytes]:
    """The entries' bytes (ImageEntry.to_bytes) of a shard's batches (EntryBatch.to_bytes), in
    sort-key order: what `in_placing_order` gives, without sorting the entries.

    Placing (PlanShards) makes a shard's batches so: each holds a run of entries in key order,
    and no two runs overlap. Such batches are put in order by their first keys, no entry decoded.
    Batches that are not (keys tied within or across them) are ordered entry by entry.
    """
    batches = list(batches)
    runs: list[tuple[int, int, list[bytes]]] = []
    placed_by = ImageEntry.placed_by
    for data in batches:
        entries = _decompressed(data)
        if not entries:
            continue
        keys = [placed_by(entry)[0] for entry in entries]
        if any(a >= b for a, b in pairwise(keys)):
            return [entry for _, entry in in_placing_order(batches)]
        runs.append((keys[0], keys[-1], entries))
    runs.sort(key=lambda run: run[0])
    if any(before[1] >= after[0] for before, after in pairwise(runs)):
        return [entry for _, entry in in_placing_order(batches)]
    return [entry for _, _, entries in runs for entry in entries]


class PackedEntries:
    """Planned images held as the compressed bytes of the batches they came in
    (EntryBatch.to_bytes), as `hold` kept them, each batch read and decoded only as it is
    iterated over.

    What a shard's writer is handed: about 22 bytes an image, against about 700 as ImageEntry
    objects, in the process that passes the shard on (the launcher, which holds every shard's
    plan at once on an in-process runner) and on its way to the process that writes it; a few
    dozen bytes a batch where a spool keeps them (`spool`). Iterating gives the entries, batch
    after batch, in no particular order.
    """

    __slots__ = ("batches",)

    def __init__(self, batches: Iterable[bytes | Held]):
        self.batches = [held if isinstance(held, Held) else Held(held) for held in batches]

    def each_batch(self) -> Iterator[bytes]:
        """Each batch's bytes (EntryBatch.to_bytes), read as it is reached."""
        for held in self.batches:
            yield held.data

    def __iter__(self) -> Iterator[ImageEntry]:
        for data in self.each_batch():
            yield from EntryBatch.from_bytes(data)

    def __eq__(self, other) -> bool:
        return isinstance(other, PackedEntries) and list(self.each_batch()) == list(
            other.each_batch()
        )

    def __repr__(self) -> str:
        return f"PackedEntries(<{len(self.batches)} batches>)"

    def to_bytes(self) -> bytes:
        """The batches as `hold` kept them: references to a spool's, or the bytes themselves."""
        return _join([held.encoded() for held in self.batches])

    def encoded_size(self) -> int:
        return _overhead(self.batches) + sum(held.encoded_size() for held in self.batches)

    @classmethod
    def from_bytes(cls, data: bytes) -> PackedEntries:
        return cls(map(Held.decoded, _split(data)))


# How a label is coded in a LabelledBatch: its kind, then its text.
_STR, _NO_LABEL, _REPORTED = b"s", b"n", b"r"


class LabelledBatch(list):
    """Listed files each with its label: a class name, None (an unlabelled build), or the
    ReportEntry saying why it has none (rare: coded as its report line)."""

    def to_bytes(self) -> bytes:
        labels = [
            _NO_LABEL
            if label is None
            else _STR + label.encode(*_ENCODING)
            if isinstance(label, str)
            else _REPORTED + label.to_json().encode("utf-8")
            for _, label in self
        ]
        sources = SourceBatch(source for source, _ in self)._parts()
        return _compressed([_join(sources), _join(labels)])

    def encoded_size(self) -> int:
        """About its bytes before compression, without encoding (`_estimated`; a report line is
        guessed at)."""
        return 3 * _overhead(()) + 2 * _overhead(self) + _estimated(self, _labelled_size)

    @classmethod
    def from_bytes(cls, data: bytes) -> LabelledBatch:
        sources, labels = _decompressed(data)
        return cls(
            zip(SourceBatch._from_parts(_split(sources)), map(_label, _split(labels)), strict=True)
        )


def _label(data: bytes) -> str | ReportEntry | None:
    kind = data[:1]
    if kind == _STR:
        return data[1:].decode(*_ENCODING)
    if kind == _NO_LABEL:
        return None
    return ReportEntry.from_json(data[1:].decode("utf-8"))
