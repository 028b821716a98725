"""Batches of metadata: many listed files or planned images as one element, coded in one piece."""

from __future__ import annotations

import zlib
from dataclasses import replace

from entry_strategies import entries, sources, texts
from hypothesis import given
from hypothesis import strategies as st

from beam_tfrecord.batches import (
    EntryBatch,
    LabelledBatch,
    PackedEntries,
    SourceBatch,
    batched,
    in_placing_order,
    in_shard_order,
)
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry
from beam_tfrecord.listing import SourceFile

reports = st.builds(
    ReportEntry, texts, texts, st.sampled_from(list(Reason)), texts, label=st.none() | texts
)


@given(st.lists(sources, max_size=40))
def test_listed_files_survive_their_batch_coding(items):
    batch = SourceBatch(items)
    decoded = SourceBatch.from_bytes(batch.to_bytes())
    assert type(decoded) is SourceBatch and decoded == items


@given(st.lists(entries, max_size=40))
def test_planned_images_survive_their_batch_coding(items):
    batch = EntryBatch(items)
    decoded = EntryBatch.from_bytes(batch.to_bytes())
    assert type(decoded) is EntryBatch and decoded == items


@given(st.lists(st.lists(entries, max_size=8), max_size=5))
def test_packed_entries_give_their_batches_entries_and_survive_their_coding(batches):
    packed = PackedEntries(EntryBatch(batch).to_bytes() for batch in batches)
    assert list(packed) == [entry for batch in batches for entry in batch]
    again = PackedEntries.from_bytes(packed.to_bytes())
    assert again == packed and list(again) == list(packed)
    assert packed.encoded_size() == len(packed.to_bytes())


@given(st.lists(st.tuples(sources, st.none() | texts | reports), max_size=40))
def test_labelled_files_survive_their_batch_coding(items):
    """A label is a class name, None (labels off) or the report entry saying why there is none."""
    decoded = LabelledBatch.from_bytes(LabelledBatch(items).to_bytes())
    assert decoded == items


def test_a_small_batch_is_sized_exactly_without_coding_it():
    """Sized as its bytes before compression: what Beam's element-size metrics count."""
    files = [SourceFile(f"/data/cat/{i}.jpg", f"cat/{i}.jpg", 1000 + i) for i in range(10)]
    planned = [
        ImageEntry(s.url, s.relpath, s.size, "train", 7 * i, "cat", 0, s.size + 200)
        for i, s in enumerate(files)
    ]
    labelled = [(s, "cat") for s in files[:5]] + [(s, None) for s in files[5:]]
    for batch in (SourceBatch(files), EntryBatch(planned), LabelledBatch(labelled)):
        assert batch.encoded_size() == len(zlib.decompress(batch.to_bytes()))


def test_a_large_batch_is_sized_from_a_sample_close_to_its_bytes():
    files = [
        SourceFile(f"/data/c{i % 7}/{i:06d}.jpg", f"c{i % 7}/{i:06d}.jpg", i) for i in range(2048)
    ]
    batch = SourceBatch(files)
    raw = len(zlib.decompress(batch.to_bytes()))
    assert abs(batch.encoded_size() - raw) < 0.05 * raw


def test_a_batch_of_one_folders_files_takes_a_fraction_of_its_entries_bytes():
    """What an in-process runner holds between its stages for every image: files of one folder
    share most of their path, and their batch is compressed."""
    files = [
        SourceFile(f"/data/photos/class07/img{i:07d}.png", f"class07/img{i:07d}.png", 1800 + i % 97)
        for i in range(2048)
    ]
    planned = EntryBatch(
        ImageEntry(s.url, s.relpath, s.size, "train", 7919 * i, "class07", 7, s.size + 200)
        for i, s in enumerate(files)
    )
    for batch in (SourceBatch(files), planned):
        assert len(batch.to_bytes()) < batch.encoded_size() / 4


def test_batched_cuts_items_into_consecutive_batches_of_at_most_the_size():
    batches = list(batched(range(10), SourceBatch, size=4))
    assert [list(b) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all(type(b) is SourceBatch for b in batches)
    assert list(batched([], EntryBatch)) == []


@given(st.lists(entries, max_size=30), st.integers(1, 4), st.integers(1, 7))
def test_entries_are_placed_from_their_bytes_in_sort_key_order(items, keys, per_batch):
    """Placing reads the shuffle key and size from an entry's bytes; entries whose keys tie
    (few keys here, so many do) are ordered by the rest of their sort key, as objects are."""
    tied = [replace(entry, shuffle_key=entry.shuffle_key % keys) for entry in items]
    batches = [EntryBatch(b).to_bytes() for b in batched(tied, EntryBatch, size=per_batch)]
    placed = list(in_placing_order([*batches, EntryBatch().to_bytes()]))  # an empty one too
    expected = sorted(tied, key=lambda entry: entry.sort_key)
    assert [ImageEntry.from_bytes(data) for _, data in placed] == expected
    assert [size for size, _ in placed] == [entry.record_size for entry in expected]


@given(
    st.lists(entries, max_size=40),
    st.integers(1, 7),
    st.sampled_from(["placed", "shuffled", "tied", "overlapping"]),
    st.randoms(use_true_random=False),
)
def test_a_shards_batches_are_put_in_order_as_placing_orders_their_entries(
    items, per_batch, kind, random
):
    """A shard's batches as placing makes them (sorted runs that do not overlap, in any order
    after the shuffle) are ordered by their first keys; batches of tied keys, or whose runs
    overlap, entry by entry: the same order as `in_placing_order` either way."""
    ordered = sorted(items, key=lambda entry: entry.sort_key)
    if kind == "tied":
        ordered = sorted(
            (replace(entry, shuffle_key=entry.shuffle_key % 3) for entry in items),
            key=lambda entry: entry.sort_key,
        )
    runs = list(batched(ordered, EntryBatch, size=per_batch))
    if kind == "overlapping":
        # Each run in key order, but their key ranges interleave.
        runs = [
            EntryBatch(sorted(run, key=lambda entry: entry.sort_key))
            for run in batched(items, EntryBatch, size=per_batch)
        ]
    if kind != "placed":
        random.shuffle(runs)
    batches = [run.to_bytes() for run in runs] + [EntryBatch().to_bytes()]
    assert in_shard_order(batches) == [data for _, data in in_placing_order(batches)]
    assert in_shard_order(iter(batches)) == in_shard_order(batches), "any iterable"


def test_a_planned_batch_gives_its_entries_bytes_back_undecoded():
    planned = [ImageEntry(f"/d/{i}.png", f"{i}.png", 10, "train", i, "c", 0, 99) for i in range(5)]
    data = EntryBatch(planned).to_bytes()
    assert EntryBatch.entries_bytes(data) == [entry.to_bytes() for entry in planned]
    assert (
        EntryBatch.from_bytes(EntryBatch.from_entries_bytes(EntryBatch.entries_bytes(data)))
        == planned
    )
