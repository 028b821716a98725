"""The Beam shell, listing and planning: the composite PTransforms that list the images, plan
each one and cut the splits into shards (the writing ones are in `writing.py`).

Only metadata (paths, sizes, labels, keys) crosses a shuffle. Image bytes are read only by the
worker that writes an image's shard (and, with --dedup, by the one that hashes it), and never
leave either.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from beam_tfrecord import progress
from beam_tfrecord.batches import (
    BATCH,
    EntryBatch,
    LabelledBatch,
    PackedEntries,
    SourceBatch,
    batched,
    in_placing_order,
)
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry
from beam_tfrecord.labels import ClassMap
from beam_tfrecord.listing import (
    ListingTask,
    SourceFile,
    expand_pattern,
    expand_task,
    input_list_chunks,
    left_out_counter,
    one_input,
    read_input_list_chunk,
    split_listing,
    url_key,
)
from beam_tfrecord.locations import is_local_url
from beam_tfrecord.planning import Preparer, hash_source
from beam_tfrecord.readahead import StreamsAhead
from beam_tfrecord.remote import Fetches
from beam_tfrecord.settings import default
from beam_tfrecord.shard_processes import drop_listing, listed, started
from beam_tfrecord.shard_writer import segment_runs
from beam_tfrecord.sharding import (
    SplitPlan,
    SplitStats,
    bucket_of,
    num_buckets,
    plan_splits,
)
from beam_tfrecord.spool import Held, hold
from beam_tfrecord.wording import nearest

__all__ = [
    "METRICS_NAMESPACE",
    "Batched",
    "Census",
    "DropDuplicates",
    "HashImages",
    "ListImages",
    "PlanImages",
    "PlanShards",
]

METRICS_NAMESPACE = "beam_tfrecord"
REPORT = "report"

_LOG = logging.getLogger(__name__)


def in_global_window(output):
    """An output of `finish_bundle`, which must say its window: the global one (tagged or not)."""
    if isinstance(output, pvalue.TaggedOutput):
        return pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
    return GlobalWindows.windowed_value(output)


def metric_counter(name: str):
    """The build's Beam counter `name` (summed across workers; the manifest's counts)."""
    return Metrics.counter(METRICS_NAMESPACE, name)


# Listing tasks one worker lists at once (`StreamsAhead`). On an object store each page of a
# listing waits a round trip, and a DirectRunner lists a bundle's tasks on one thread: a
# bucket's ten class folders, one after another, took ten round trips in a row (0.6 s at 50 ms a
# request), a thousand folders a minute.
LISTINGS_AT_ONCE = 8


class _LeftOut(Counter):
    """The files of one listing that --extensions left out, by suffix (`other_image_suffix`):
    counted on the listing's thread, added to Beam's counters on the DoFn's (its metrics are
    the thread's own)."""


class _ListingFn(beam.DoFn):
    """Lists each task it is given (`_listing`), a store's in the background, `LISTINGS_AT_ONCE`
    at a time, and hands on what they found: files in batches, tagged FILES, and anything else
    (a task's parts) as it is."""

    def __init__(self, extensions: Sequence[str]):
        self._extensions = tuple(extensions)

    def _listing(self, task: ListingTask) -> Iterator[Any]:
        raise NotImplementedError

    def start_bundle(self):
        self._found = SourceBatch()
        self._ahead = StreamsAhead(self._listing, LISTINGS_AT_ONCE)

    def process(self, task: ListingTask):
        if is_local_url(task.pattern):
            # No round trip to hide: listed here, without a thread's hand-offs.
            yield from self._hand_on(self._listing(task))
        else:
            yield from self._hand_on(self._ahead.add(task))

    def finish_bundle(self):
        try:
            for output in self._hand_on(self._ahead.drain()):
                yield in_global_window(output)
            if self._found:
                yield in_global_window(pvalue.TaggedOutput(_FILES, self._found))
        finally:
            self._ahead.close()
        self._found = SourceBatch()

    def teardown(self):
        ahead = getattr(self, "_ahead", None)
        if ahead is not None:
            ahead.close()

    def _hand_on(self, outputs: Iterator[Any]) -> Iterator[Any]:
        for item in outputs:
            if isinstance(item, SourceFile):
                self._found.append(item)
                if len(self._found) >= BATCH:
                    yield pvalue.TaggedOutput(_FILES, self._found)
                    self._found = SourceBatch()
            elif isinstance(item, _LeftOut):
                _count_left_out(item)
            else:
                yield item


def _count_left_out(left: Mapping[str, int]) -> None:
    """Adds a listing's files left out, by suffix, to Beam's counters (this thread's)."""
    for suffix, count in left.items():
        Metrics.counter(METRICS_NAMESPACE, OTHER_EXTENSIONS + suffix).inc(count)


class _SplitFn(_ListingFn):
    """Splits a listing task into parts for other workers; the files its listing already found
    (`split_listing`) go out in batches, tagged FILES."""

    def _listing(self, task: ListingTask) -> Iterator[ListingTask | SourceFile | _LeftOut]:
        left = _LeftOut()
        yield from split_listing(task, self._extensions, left_out_counter(self._extensions, left))
        if left:
            yield left


_FILES = "files"


class _ExpandTaskFn(_ListingFn):
    """Lists the files of each task, in batches (its only output, tagged FILES).

    On a local build whose shard processes have started (`in_processes`) with no head start
    to write, they list its local tasks, two a process at most in flight, while this thread
    (which goes on to label and plan what they found, and plans alone) takes their batches:
    every core lists."""

    def __init__(self, extensions: Sequence[str], in_processes: bool = False):
        super().__init__(extensions)
        self._in_processes = in_processes

    def setup(self):
        processes = started() if self._in_processes else None
        # Not processes writing a head start's shards, which go first: the plan that takes them
        # would wait for every one.
        self._processes = processes if processes is not None and not processes.heading else None
        if self._processes is not None:
            _LOG.debug("listing folders in %d worker processes", self._processes.processes)

    def start_bundle(self):
        super().start_bundle()
        self._listings: deque[Future] = deque()

    def process(self, task: ListingTask):
        processes = self._processes
        if processes is None or not is_local_url(task.pattern):
            yield from super().process(task)
            return
        self._listings.append(processes.submit_listing(task, self._extensions))
        while self._listings and (
            self._listings[0].done() or len(self._listings) > 2 * processes.processes
        ):
            yield from self._taken(self._listings.popleft().result())

    def finish_bundle(self):
        while self._listings:
            for output in self._taken(self._listings.popleft().result()):
                yield in_global_window(output)
        yield from super().finish_bundle()

    def teardown(self):
        # A bundle that failed left listings unread: none of them leaves its file behind.
        for future in getattr(self, "_listings", ()):
            drop_listing(future)
        super().teardown()

    def _taken(self, result: tuple[list[bytes], dict[str, int]] | str) -> Iterator[Any]:
        # Gathered into full batches again: a folder of a few files is a batch of a few.
        batches, left = listed(result)
        _count_left_out(left)
        for data in batches:
            yield from self._hand_on(iter(SourceBatch.from_bytes(data)))

    def _listing(self, task: ListingTask) -> Iterator[SourceFile | _LeftOut]:
        left = _LeftOut()
        yield from expand_task(task, self._extensions, left_out_counter(self._extensions, left))
        if left:
            yield left


# The counters of images --extensions leaves out, one per suffix: `files_other_extensions:.png`.
OTHER_EXTENSIONS = "files_other_extensions:"


class _TallyFn(beam.DoFn):
    """A DoFn that counts its progress per bundle (progress.Tally), not through a lock per image."""

    def start_bundle(self):
        self._tally = progress.Tally()

    def finish_bundle(self):
        self._tally.flush()


class _CountFn(_TallyFn):
    """Counts the files of each batch it passes on."""

    def __init__(self, name: str):
        self._counter = metric_counter(name)

    def process(self, batch: SourceBatch):
        self._counter.inc(len(batch))
        self._tally.add("listed", len(batch))
        yield batch


class _OnePerFileFn(_TallyFn):
    """Of the listings in one range of URL hashes (their chunks' bytes, as GroupChunks gives
    them), one input per file, in batches: overlapping patterns can match one file twice, and
    a list can name it twice. A file an input list labels two ways is reported instead."""

    def __init__(self):
        self._listed = metric_counter("images_listed")

    def process(self, element: tuple[tuple[str, int], Iterable[Held]]):
        _, packed = element
        by_url: dict[str, list[SourceFile]] = {}
        for held in packed:
            for source in SourceBatch.from_bytes(held.data):
                listings = by_url.get(source.url)
                if listings is None:
                    by_url[source.url] = [source]
                else:
                    listings.append(source)
        self._listed.inc(len(by_url))
        self._tally.add("listed", len(by_url))
        conflicts: list[ReportEntry] = []

        def kept_ones() -> Iterator[SourceFile]:
            for listings in by_url.values():
                if len(listings) == 1:  # nearly every file: listed once
                    yield listings[0]
                    continue
                kept, labels = one_input(listings)
                if labels:
                    conflicts.append(_conflicting_labels(kept, labels))
                else:
                    yield kept

        yield from batched(kept_ones(), SourceBatch)
        for report in conflicts:
            yield pvalue.TaggedOutput(REPORT, report)


def _conflicting_labels(kept: SourceFile, labels: tuple[str, ...]) -> ReportEntry:
    return ReportEntry(
        kept.url,
        kept.relpath,
        Reason.CONFLICTING_LABELS,
        f"the input list gives it {len(labels)} labels ({', '.join(map(repr, labels))}); "
        "give it one",
    )


def _url_bucket(source: SourceFile, buckets: int) -> tuple[str, int]:
    """The listing's key: the range of URL hashes the file is in (`url_key`)."""
    return "", bucket_of(url_key(source.url), buckets)


class ListImages(beam.PTransform):
    """Lists the image files that glob patterns (or an input list) name, each file once.

    Returns a dict: `sources` (SourceBatch: listed files, many to an element) and, where a file can be listed more than once (an
    input list, several patterns), `report`: files an input list labels more than one way,
    listed but not to be written (PlanImages reports them, so that they count as listed).

    With `listing="pipeline"` the workers list: each pattern is split by the folders at its first
    wildcards, two levels deep, and the parts are listed in parallel, so no machine ever holds
    the whole listing. With `listing="launcher"` this machine lists everything first (small
    collections, debugging); both give the same files.
    """

    SPLIT_LEVELS = 2

    def __init__(
        self,
        patterns: Sequence[str],
        extensions: Sequence[str],
        *,
        input_list: str | None = None,
        listing: str = "pipeline",
        bucket_records: int = default("planning_bucket_records"),
        in_processes: bool = False,
    ):
        super().__init__()
        self._in_processes = in_processes
        self._patterns = list(patterns)
        self._extensions = tuple(extensions)
        self._input_list = input_list
        self._listing = listing
        self._bucket_records = bucket_records

    def expand(self, pbegin):
        if self._input_list is not None:
            found = (
                pbegin
                | "ListChunks" >> beam.Create(input_list_chunks(self._input_list))
                | "SpreadChunks" >> beam.Reshuffle()
                | "ReadList"
                >> beam.FlatMap(
                    lambda chunk: batched(read_input_list_chunk(chunk), SourceBatch)
                ).with_output_types(SourceBatch)
            )
        elif self._listing == "launcher":
            sources = sorted(s for p in self._patterns for s in expand_pattern(p, self._extensions))
            found = pbegin | "ListedHere" >> beam.Create(
                list(batched(sources, SourceBatch))
            ).with_output_types(SourceBatch)
        else:
            tasks = (
                pbegin
                | "Patterns" >> beam.Create(self._patterns)
                | "Tasks" >> beam.Map(ListingTask.for_pattern)
            )
            found_splitting = []
            for level in range(self.SPLIT_LEVELS):
                split = tasks | f"Split{level}" >> beam.ParDo(
                    _SplitFn(self._extensions)
                ).with_output_types(ListingTask).with_outputs(_FILES, main="parts")
                split[_FILES].element_type = SourceBatch
                found_splitting.append(split[_FILES])
                # Each part is listed by whichever worker takes it, not by the launcher.
                tasks = split.parts | f"Spread{level}" >> beam.Reshuffle()
            expanded = (
                tasks
                | "Expand"
                >> beam.ParDo(_ExpandTaskFn(self._extensions, self._in_processes)).with_outputs(
                    _FILES, main="none"
                )
            )[_FILES]
            expanded.element_type = SourceBatch
            found = (*found_splitting, expanded) | "AllFound" >> beam.Flatten().with_output_types(
                SourceBatch
            )
        if self._input_list is None and len(self._patterns) == 1:
            # The parts of one pattern are disjoint, so no file can be listed twice: no shuffle.
            counted = found | "CountListed" >> beam.ParDo(
                _CountFn("images_listed")
            ).with_output_types(SourceBatch)
            return {"sources": counted}
        sources, report = self._one_per_file(found)
        return {"sources": sources, "report": report}

    def _one_per_file(self, found):
        """Each file once, of listings where a file may be listed twice, with the report of
        files an input list labels two ways.

        A file two patterns (or lines of a list) name is one input. Its listings meet in the
        group of the range of URL hashes it is in, crossing the shuffle in chunks of one range,
        as planning's entries do: as many ranges as it takes for `bucket_records` files each,
        were every listing a file of its own."""
        listings = (
            found | "CountListings" >> beam.Map(len) | "Listings" >> beam.CombineGlobally(sum)
        )
        listed = (
            found
            | "KeyByUrl"
            >> beam.ParDo(
                _BucketFn(self._bucket_records, _url_bucket, SourceBatch),
                most=pvalue.AsSingleton(listings),
            ).with_output_types(tuple[tuple[str, int], SourceBatch])
            | "GroupByUrl" >> GroupChunks()
            | "OnePerFile"
            >> beam.ParDo(_OnePerFileFn())
            .with_output_types(SourceBatch)
            .with_outputs(REPORT, main="sources")
        )
        return listed.sources, listed[REPORT]


class _ImageEntryCoder(beam.coders.Coder):
    """What crosses the planning shuffles: ImageEntry's compact bytes, not a pickled object."""

    def encode(self, value: ImageEntry) -> bytes:
        return value.to_bytes()

    def decode(self, encoded: bytes) -> ImageEntry:
        return ImageEntry.from_bytes(encoded)

    def estimate_size(self, value: ImageEntry) -> int:
        # Beam sizes every element it outputs; the default would encode each one to measure it.
        return value.encoded_size()

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self):
        return ImageEntry


beam.coders.registry.register_coder(ImageEntry, _ImageEntryCoder)


class _SourceFileCoder(beam.coders.Coder):
    """A listed file's compact bytes (SourceFile.to_bytes), not a pickled object."""

    def encode(self, value: SourceFile) -> bytes:
        return value.to_bytes()

    def decode(self, encoded: bytes) -> SourceFile:
        return SourceFile.from_bytes(encoded)

    def estimate_size(self, value: SourceFile) -> int:
        # Beam sizes every element it outputs; the default would encode each one to measure it.
        return value.encoded_size()

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self):
        return SourceFile


beam.coders.registry.register_coder(SourceFile, _SourceFileCoder)


class _BatchCoder(beam.coders.Coder):
    """A batch of metadata (`batches`) in its own compact bytes: one element, coded in one piece.

    Beam sizes every element it outputs, and would encode it to do so: a batch adds up its
    entries' sizes instead.
    """

    kind: type

    def encode(self, value) -> bytes:
        # In a spool while a local build runs (`spool`): the runner holds a reference.
        return hold(self.kind.to_bytes(value)).encoded()

    def decode(self, encoded: bytes):
        return self.kind.from_bytes(Held.decoded(encoded).data)

    def estimate_size(self, value) -> int:
        return value.encoded_size()

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self):
        return self.kind


class _SourceBatchCoder(_BatchCoder):
    kind = SourceBatch


class _EntryBatchCoder(_BatchCoder):
    kind = EntryBatch


class _LabelledBatchCoder(_BatchCoder):
    kind = LabelledBatch


class _PackedEntriesCoder(_BatchCoder):
    """A shard's plan as the references to its batches (`spool`), read where it is written."""

    kind = PackedEntries

    def encode(self, value: PackedEntries) -> bytes:
        return value.to_bytes()

    def decode(self, encoded: bytes) -> PackedEntries:
        return PackedEntries.from_bytes(encoded)


class _HeldCoder(_BatchCoder):
    """Bytes `hold` kept: a reference to them in a spool, or the bytes themselves."""

    kind = Held

    def encode(self, value: Held) -> bytes:
        return value.encoded()

    def decode(self, encoded: bytes) -> Held:
        return Held.decoded(encoded)

    def estimate_size(self, value: Held) -> int:
        return value.encoded_size()


for _coder in (
    _SourceBatchCoder,
    _EntryBatchCoder,
    _LabelledBatchCoder,
    _PackedEntriesCoder,
    _HeldCoder,
):
    beam.coders.registry.register_coder(_coder.kind, _coder)


# Entries per chunk at most, and entries a bundle holds back at most before it outputs its
# chunks: a bound on the memory chunking takes, however many planning buckets there are.
_CHUNK_ENTRIES = BATCH
_HELD_ENTRIES = 8 * _CHUNK_ENTRIES


# ((split, bucket or shard), a chunk of its entries): planning moves entries in chunks, as
# every element costs Beam microseconds of its own at each step and shuffle it crosses.
_Chunk = tuple[tuple[str, int], EntryBatch]


# A shard's planned images: ((split, shard index), its entries, packed).
_Shard = tuple[tuple[str, int], PackedEntries]


# A chunk as it crosses a shuffle: ((split, bucket or shard), EntryBatch.to_bytes() as `hold`
# keeps it).
_Packed = tuple[tuple[str, int], Held]


class GroupChunks(beam.PTransform):
    """GroupByKey for chunks, which cross it as their bytes (EntryBatch.to_bytes): it gives
    (key, iterable of bytes), each an EntryBatch's (`_chunks` decodes them).

    A runner that shuffles in its own process (the DirectRunner) holds every value of a
    shuffle at once, as its coder decodes them: about 700 bytes an image as ImageEntry objects,
    against about 22 as a compressed batch's bytes. Bytes are also what a distributed runner's
    shuffle moves anyway, so packing costs it nothing but the same encode.
    """

    def expand(self, chunks):
        return (
            chunks
            | "Pack" >> beam.Map(_packed).with_output_types(_Packed)
            | "Group" >> beam.GroupByKey()
        )


def _packed(chunk: _Chunk) -> _Packed:
    key, entries = chunk
    return key, hold(entries.to_bytes())


def _chunks(packed: Iterable[Held]) -> Iterator[EntryBatch]:
    """A group's chunks, each decoded as it is reached: one chunk's objects at a time."""
    return (EntryBatch.from_bytes(held.data) for held in packed)


class SpreadBatches(beam.PTransform):
    """Reshuffle for batches of `kind`, which cross it as their bytes (see GroupChunks)."""

    def __init__(self, kind: type[list]):
        super().__init__()
        self._kind = kind

    def expand(self, batches):
        kind = self._kind
        return (
            batches
            | "Pack" >> beam.Map(lambda batch: hold(kind.to_bytes(batch))).with_output_types(Held)
            | "Reshuffle" >> beam.Reshuffle()
            | "Unpack" >> beam.Map(lambda held: kind.from_bytes(held.data)).with_output_types(kind)
        )


@dataclass(frozen=True)
class Census:
    """What the whole listing says, before any image is read: how many inputs, which classes.

    With --classes, also how the listing's labels met that list (manifest.json's
    `given_classes`): the classes no listed input has, and the labels inputs have that the
    list does not name (those inputs are reported as unknown_class), at most
    `OTHER_LABELS_KEPT` of them by name.
    """

    listed: int
    classes: ClassMap
    not_found: tuple[str, ...] = ()
    other_labels: tuple[str, ...] = ()
    other_label_count: int = 0
    meant: tuple[tuple[str, str], ...] = ()  # (a name not found, the left-out label it mistypes)

    OTHER_LABELS_KEPT = 100

    def given_classes(self) -> dict[str, Any]:
        """The manifest's `given_classes`: how the listing's labels met --classes."""
        return {
            "not_found": list(self.not_found),
            "meant": dict(self.meant),
            "other_labels": list(self.other_labels),
            "other_label_count": self.other_label_count,
        }


class _CensusFn(beam.CombineFn):
    """Counts the listed inputs and collects their labels in one combine.

    The class map must be known before the records are sized (a class id is part of a record),
    and the count bounds every split's size for planning; one combine gives both, where separate
    distinct, collect and count steps would each be a stage of their own.
    """

    def __init__(self, preparer: Preparer):
        self._preparer = preparer

    def create_accumulator(self) -> tuple[int, set[str], set[str]]:
        # Inputs listed; their labels; labels --classes does not name (unknown_class).
        return 0, set(), set()

    def add_input(self, accumulator, chunk: LabelledBatch):
        listed, labels, others = accumulator
        for _, label in chunk:
            if isinstance(label, str):
                labels.add(label)
            elif isinstance(label, ReportEntry) and label.reason == Reason.UNKNOWN_CLASS:
                others.add(label.label)
        return listed + len(chunk), labels, others

    def merge_accumulators(self, accumulators):
        listed, labels, others = 0, set(), set()
        for count, more, more_others in accumulators:
            listed += count
            labels |= more
            others |= more_others
        return listed, labels, others

    def extract_output(self, accumulator) -> Census:
        listed, labels, others = accumulator
        progress.set_total(listed)
        fixed = self._preparer.fixed_classes
        classes = self._preparer.class_map(labels)
        if not self._preparer.label_rule.enabled:
            return Census(listed, classes)
        if fixed is not None:
            names = sorted(others)
            not_found = tuple(name for name in fixed if name not in labels)
            # Among all the left-out labels, not only the ones the manifest keeps by name.
            meant = ((name, nearest(name, names)) for name in not_found)
            return Census(
                listed,
                classes,
                not_found=not_found,
                other_labels=tuple(names[: Census.OTHER_LABELS_KEPT]),
                other_label_count=len(names),
                meant=tuple((name, label) for name, label in meant if label is not None),
            )
        return Census(listed, classes)


class _GatherFn(beam.DoFn):
    """Gathers a bundle's elements into batches of `kind` (a list), of up to `BATCH`."""

    def __init__(self, kind: type[list]):
        self._kind = kind

    def start_bundle(self):
        self._chunk = self._kind()

    def process(self, element):
        self._chunk.append(element)
        if len(self._chunk) >= BATCH:
            yield self._chunk
            self._chunk = self._kind()

    def finish_bundle(self):
        if self._chunk:
            yield in_global_window(self._chunk)
        self._chunk = self._kind()


class Batched(beam.PTransform):
    """Gathers single elements into batches of `kind` (a list type of `batches`), as each
    bundle holds them: the same elements, many to an element."""

    def __init__(self, kind: type[list]):
        super().__init__()
        self._kind = kind

    def expand(self, elements):
        return elements | "Gather" >> beam.ParDo(_GatherFn(self._kind)).with_output_types(
            self._kind
        )


# The planned images --split-by's pattern matched (in a group) and did not (each alone).
# The copies --dedup left out whose label is not the label of the copy written.
DUPLICATES_LABELLED_APART = "duplicates_labelled_apart"
SPLIT_BY_GROUPED = "split_by_grouped"
SPLIT_BY_ALONE = "split_by_alone"


class _PlanFn(_TallyFn):
    def __init__(self, preparer: Preparer):
        self._preparer = preparer
        self._skipped = metric_counter("images_skipped")
        self._grouped = metric_counter(SPLIT_BY_GROUPED)
        self._alone = metric_counter(SPLIT_BY_ALONE)

    def process(self, chunk: LabelledBatch, census: Census):
        plan, id_of, tally = self._preparer.plan, census.classes.id_of, self._tally
        entries = EntryBatch()
        for source, label in chunk:
            if isinstance(label, ReportEntry):
                planned: ImageEntry | ReportEntry = label
            else:
                planned = plan(source, label, id_of(label) if label is not None else None)
            tally.add_planned(planned)
            if isinstance(planned, ReportEntry):
                self._skipped.inc()
                yield pvalue.TaggedOutput(REPORT, planned)
            else:
                entries.append(planned)
        if entries and self._preparer.split_by is not None:
            # A pattern that matches nothing (a typo) splits every image on its own, as no
            # --split-by would: the summary says so, from these.
            grouped = sum(map(self._preparer.grouped, (entry.relpath for entry in entries)))
            self._grouped.inc(grouped)
            self._alone.inc(len(entries) - grouped)
        if entries:
            yield entries


class PlanImages(beam.PTransform):
    """Labels each listed file and plans it from what the listing knows: nothing is read.

    Takes SourceBatch elements (ListImages' `sources`). Returns a dict: `entries` (EntryBatch
    elements of ImageEntry: label, class id, split, shuffle key, planned record size), `census` (a one-element PCollection: the listed count and the class map, which the
    record sizes need) and `report` (inputs that get no label, or cannot fit in any shard, and
    those of `listing_report`, ListImages' report, if given).
    """

    def __init__(self, preparer: Preparer, listing_report=None):
        super().__init__()
        self._preparer = preparer
        self._listing_report = listing_report

    def expand(self, sources):
        # Each file is labelled once: the census counts the labels, and the plan uses them.
        # Files go through in batches, as every element costs Beam microseconds of its own at
        # each step; the labelled batches are kept for the census (LabelledBatch's coder).
        preparer = self._preparer
        labelled = sources | "Label" >> beam.Map(
            lambda batch: LabelledBatch((source, preparer.label(source)) for source in batch)
        ).with_output_types(LabelledBatch)
        if self._listing_report is not None:
            # Files the listing found but will not give to a shard (ListImages' report): each
            # is counted as listed, and reported, as a file that gets no label is.
            unlabelled = self._listing_report | "Unlabelled" >> beam.Map(
                lambda entry: LabelledBatch([(SourceFile(entry.url, entry.relpath, -1), entry)])
            ).with_output_types(LabelledBatch)
            labelled = (labelled, unlabelled) | "AllListed" >> beam.Flatten()
        census = labelled | "Census" >> beam.CombineGlobally(_CensusFn(self._preparer))
        results = labelled | "Plan" >> beam.ParDo(
            _PlanFn(self._preparer), census=pvalue.AsSingleton(census)
        ).with_output_types(EntryBatch).with_outputs(REPORT, main="entries")
        return {"entries": results.entries, "census": census, "report": results[REPORT]}


class _HashFn(beam.DoFn):
    """Reads each source of a batch whole for its content hash, `read_ahead` reads in flight
    (objects through the store's async interface, retried while the store's error is
    transient), the hashes taken on the reading threads; outputs a batch for a batch. On a
    local build whose shard processes have started (`in_processes`), each run of images is read
    and hashed by one of them: every core hashes."""

    def __init__(self, read_ahead: int, in_processes: bool = False):
        self._read_ahead = read_ahead
        self._in_processes = in_processes
        self._skipped = metric_counter("images_skipped")

    def setup(self):
        self._processes = started() if self._in_processes else None
        if self._processes is not None:
            _LOG.debug("hashing in %d worker processes", self._processes.processes)

    def start_bundle(self):
        # Per bundle: a bundle that failed must not hand its work to the retry.
        self._fetches = Fetches(self._read_ahead)
        self._runs: deque[Future] = deque()

    def process(self, batch: EntryBatch):
        if self._processes is not None:
            for run in segment_runs(list(batch)):
                self._runs.append(self._processes.submit_hashes(run))
            while self._runs and (
                self._runs[0].done() or len(self._runs) > 2 * self._processes.processes
            ):
                yield from self._outputs(self._runs.popleft().result())
            return
        fetches = self._fetches
        hashed: list[ImageEntry | ReportEntry] = []
        for entry in batch:
            fetches.start(entry, entry.url, entry.source_size)
            while fetches.ready():
                hashed.append(hash_source(*fetches.pop()))
        while fetches.pending:
            hashed.append(hash_source(*fetches.pop()))
        yield from self._outputs(hashed)

    def finish_bundle(self):
        while self._runs:
            for output in self._outputs(self._runs.popleft().result()):
                yield in_global_window(output)
        self._fetches.close()

    def teardown(self):
        if getattr(self, "_fetches", None) is not None:
            self._fetches.close()
        for future in getattr(self, "_runs", ()):
            future.cancel()

    def _outputs(self, hashed: Iterable[ImageEntry | ReportEntry]):
        entries = EntryBatch()
        for result in hashed:
            if isinstance(result, ReportEntry):
                self._skipped.inc()
                yield pvalue.TaggedOutput(REPORT, result)
            else:
                entries.append(result)
        if entries:
            yield entries


class HashImages(beam.PTransform):
    """Reads every planned image whole for the SHA-256 of its bytes (what --dedup compares).

    The one setting that reads images before their shards are written: spread over the workers
    first, as batches (EntryBatch), since a listing part is one folder and folders differ in
    size by orders of magnitude. `in_processes`: on the build's shard processes, once started
    (a local build's). Returns a dict: `entries` (EntryBatch elements, with source_sha256) and
    `report` (files that cannot be read).
    """

    def __init__(self, read_ahead: int = 16, *, in_processes: bool = False):
        super().__init__()
        self._read_ahead = read_ahead
        self._in_processes = in_processes

    def expand(self, entries):
        results = (
            entries
            | "Spread" >> SpreadBatches(EntryBatch)
            | "Hash"
            >> beam.ParDo(_HashFn(self._read_ahead, self._in_processes))
            .with_output_types(EntryBatch)
            .with_outputs(REPORT, main="entries")
        )
        return {"entries": results.entries, "report": results[REPORT]}


class _KeepOneCopyFn(beam.DoFn):
    """Of each set of byte-identical images in a bucket of content hashes, keeps one."""

    def __init__(self):
        self._skipped = metric_counter("images_skipped")
        self._duplicates = metric_counter("duplicates_dropped")
        self._relabelled = metric_counter(DUPLICATES_LABELLED_APART)

    def process(self, element: tuple[tuple[str, int], Iterable[Held]]):
        _, packed = element
        by_content: dict[str, list[ImageEntry]] = {}
        for chunk in _chunks(packed):
            for entry in chunk:
                by_content.setdefault(entry.source_sha256, []).append(entry)
        kept_ones = EntryBatch()
        for copies in by_content.values():
            kept, reports = self._one_of(copies)
            kept_ones.append(kept)
            for report in reports:
                yield pvalue.TaggedOutput(REPORT, report)
        if kept_ones:
            yield kept_ones

    def _one_of(self, copies: list[ImageEntry]) -> tuple[ImageEntry, list[ReportEntry]]:
        # The copy kept is the one with the smallest relative path, on every runner; its split
        # is the only one the content can be in, so no copy leaks from test into training.
        kept, *others = sorted(copies, key=lambda e: (e.relpath, e.url))
        if not others:
            return kept, []
        reports = []
        for copy in others:
            self._skipped.inc()
            self._duplicates.inc()
            message = f"byte-identical to {kept.relpath!r}, which was written instead"
            if copy.label != kept.label:
                message += f" (labelled {kept.label!r} there, {copy.label!r} here)"
                self._relabelled.inc()
            reports.append(
                ReportEntry(
                    copy.url, copy.relpath, Reason.DUPLICATE, message,
                    split=copy.split, label=copy.label,
                )
            )  # fmt: skip
        names = ", ".join(repr(c.relpath) for c in others)
        reports.append(
            ReportEntry(
                kept.url, kept.relpath, Reason.DUPLICATE, f"written once for its identical copies {names}",
                action="kept", split=kept.split, label=kept.label,
            )
        )  # fmt: skip
        return kept, reports


class DropDuplicates(beam.PTransform):
    """Keeps one of each set of byte-identical images (entries need their source_sha256).

    Groups metadata by content hash; image bytes never move. The hashes are cut into ranges,
    as many as it takes for `bucket_records` entries each when every one of the `most` inputs
    is unique (`most`, a one-element PCollection), and entries cross the shuffle in chunks of
    one range, as planning's do: copies meet in their range's group. Takes and returns
    EntryBatch elements. Returns a dict: `entries` and `report` (one line for every copy: the
    copies dropped, and the one kept).
    """

    def __init__(self, bucket_records: int, most):
        super().__init__()
        self._bucket_records = bucket_records
        self._most = most

    def expand(self, entries):
        results = (
            entries
            | "KeyByContent"
            >> beam.ParDo(
                _BucketFn(self._bucket_records, _content_bucket),
                most=pvalue.AsSingleton(self._most),
            ).with_output_types(_Chunk)
            | "GroupCopies" >> GroupChunks()
            | "KeepOne"
            >> beam.ParDo(_KeepOneCopyFn())
            .with_output_types(EntryBatch)
            .with_outputs(REPORT, main="entries")
        )
        return {"entries": results.entries, "report": results[REPORT]}


def _planning_bucket(entry: ImageEntry, buckets: int) -> tuple[str, int]:
    """Planning's key: the split, and the range of shuffle keys the entry is in."""
    return entry.split, bucket_of(entry.shuffle_key, buckets)


def _content_bucket(entry: ImageEntry, buckets: int) -> tuple[str, int]:
    """--dedup's key: the range of content hashes the entry is in (every split's copies meet)."""
    return "", bucket_of(int(entry.source_sha256[:16], 16), buckets)


class _BucketFn(beam.DoFn):
    """Keys the items of batches of `kind` by `key_of(item, buckets)` (planning's: an entry's
    split and bucket), and outputs them in chunks of one key, batches of `kind`."""

    def __init__(self, bucket_records: int, key_of=_planning_bucket, kind: type[list] = EntryBatch):
        self._bucket_records = bucket_records
        self._key_of = key_of
        self._kind = kind

    def start_bundle(self):
        self._chunks: dict[tuple[str, int], EntryBatch] = {}
        self._held = 0

    def process(self, batch: EntryBatch, most: int):
        buckets = num_buckets(most, self._bucket_records)
        chunks, key_of = self._chunks, self._key_of
        for entry in batch:
            key = key_of(entry, buckets)
            chunk = chunks.get(key)
            if chunk is None:
                chunk = chunks[key] = self._kind()
            chunk.append(entry)
            self._held += 1
            if len(chunk) >= _CHUNK_ENTRIES:
                del chunks[key]
                self._held -= len(chunk)
                yield key, chunk
            elif self._held >= _HELD_ENTRIES:
                yield from chunks.items()
                self.start_bundle()
                chunks = self._chunks

    def finish_bundle(self):
        for chunk in self._chunks.items():
            yield in_global_window(chunk)
        self.start_bundle()


class _BucketStatsFn(beam.CombineFn):
    """Records, bytes and largest record (SplitStats) of every (split, bucket), in one combine."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, chunk: _Chunk):
        key, entries = chunk
        stats = accumulator.get(key)
        if stats is None:
            stats = accumulator[key] = [0, 0, 0]
        # A list, not SplitStats: this runs for every image.
        for entry in entries:
            size = entry.record_size
            stats[0] += 1
            stats[1] += size
            if size > stats[2]:
                stats[2] = size
        return accumulator

    def merge_accumulators(self, accumulators) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            for key, (records, size, largest) in accumulator.items():
                stats = merged.setdefault(key, [0, 0, 0])
                stats[0] += records
                stats[1] += size
                stats[2] = max(stats[2], largest)
        return merged

    def extract_output(self, accumulator: dict) -> dict:
        return {key: SplitStats(*stats) for key, stats in accumulator.items()}


class _PlanBucketFn(beam.DoFn):
    """Places one bucket's entries in its split's shards, as their bytes: none is decoded but
    those whose shuffle keys tie (`in_placing_order`)."""

    def process(self, element, plan: Mapping[str, SplitPlan]):
        (split, bucket), packed = element
        records = in_placing_order(held.data for held in packed)
        # Placed in key order, so a shard's entries come in one run: chunks of one shard each.
        chunk: list[bytes] = []
        current = None
        for shard, data in plan[split].place_in_order(bucket, records):
            if shard != current or len(chunk) >= _CHUNK_ENTRIES:
                if chunk:
                    yield (split, current), hold(EntryBatch.from_entries_bytes(chunk))
                chunk, current = [], shard
            chunk.append(data)
        if chunk:
            yield (split, current), hold(EntryBatch.from_entries_bytes(chunk))


def _joined(element: tuple[tuple[str, int], Iterable[bytes]]) -> _Shard:
    # Left packed: a shard's entries are decoded where it is written, which is another process
    # for most builds (`ShardProcesses`). Those of every shard not yet written wait here.
    key, packed = element
    return key, PackedEntries(packed)


class PlanShards(beam.PTransform):
    """Places every planned image in a shard of its split, on metadata only.

    Records are ordered by shuffle key and cut into shards of nearly equal bytes. Planning is
    spread over key-range buckets, as many as it takes for `bucket_records` records each when
    a split holds all `most` of the inputs, so no worker holds more than about one bucket's
    metadata, however large the split. Knowing that bound before the records are counted lets
    one combine give each bucket's bytes and each split's totals. Entries cross both shuffles in
    chunks (of one bucket, then of one shard), not one element each.

    Takes EntryBatch elements (PlanImages' `entries`). Returns a dict: `shards`, ((split, shard
    index), PackedEntries) pairs, and `plan`, a one-element
    PCollection with each split's SplitPlan (sharding.plan_splits).
    """

    def __init__(self, min_shard_size: int, max_shard_size: int, bucket_records: int, most):
        """`most` is a one-element PCollection: an int no split's record count exceeds."""
        super().__init__()
        self._bounds = (min_shard_size, max_shard_size)
        self._bucket_records = bucket_records
        self._most = most

    def expand(self, entries):
        bucket_records = self._bucket_records
        keyed = entries | "Bucket" >> beam.ParDo(
            _BucketFn(bucket_records), most=pvalue.AsSingleton(self._most)
        ).with_output_types(_Chunk)
        bounds = self._bounds
        plan = (
            keyed
            | "SizeOfBuckets" >> beam.CombineGlobally(_BucketStatsFn())
            | "SplitPlans"
            >> beam.Map(
                lambda stats, most: plan_splits(stats, num_buckets(most, bucket_records), *bounds),
                most=pvalue.AsSingleton(self._most),
            )
        )
        shards = (
            keyed
            | "GroupBuckets" >> GroupChunks()
            | "PlaceInShards"
            >> beam.ParDo(_PlanBucketFn(), plan=pvalue.AsSingleton(plan)).with_output_types(_Packed)
            | "GroupShards" >> beam.GroupByKey()
            | "JoinChunks" >> beam.Map(_joined).with_output_types(_Shard)
        )
        return {"shards": shards, "plan": plan}
