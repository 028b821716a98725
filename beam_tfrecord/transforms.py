"""The Beam shell: composite PTransforms that wire the pure planning and writing code together.

Only metadata (paths, sizes, labels, keys) crosses a shuffle. Image bytes are read by the worker
that checks an image and by the worker that writes its shard, and never leave either.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from beam_tfrecord.catalog import ImageEntry, Reason, ReportEntry
from beam_tfrecord.images import ImagePolicy
from beam_tfrecord.labels import ClassMap
from beam_tfrecord.listing import (
    ListingTask,
    SourceFile,
    expand_pattern,
    expand_task,
    input_list_chunks,
    read_input_list_chunk,
    split_task,
)
from beam_tfrecord.preparation import Preparer
from beam_tfrecord.shard_writer import ShardSpec, write_shard
from beam_tfrecord.sharding import (
    SplitStats,
    bucket_of,
    bucket_offsets,
    num_buckets,
    num_shards,
    place_records,
    shard_file_name,
)

__all__ = [
    "METRICS_NAMESPACE",
    "CheckImages",
    "DropDuplicates",
    "LabelImages",
    "ListImages",
    "PlanShards",
    "WriteShards",
]

METRICS_NAMESPACE = "beam_tfrecord"
REPORT = "report"

_LOG = logging.getLogger(__name__)


def _counter(name: str):
    return Metrics.counter(METRICS_NAMESPACE, name)


class _ExpandTaskFn(beam.DoFn):
    def __init__(self, extensions: Sequence[str]):
        self._extensions = tuple(extensions)

    def process(self, task: ListingTask) -> Iterable[SourceFile]:
        yield from expand_task(task, self._extensions)


class _CountFn(beam.DoFn):
    def __init__(self, name: str):
        self._counter = _counter(name)

    def process(self, element):
        self._counter.inc()
        yield element


class _OnePerFileFn(beam.DoFn):
    def __init__(self):
        self._listed = _counter("images_listed")

    def process(self, url_and_sources: tuple[str, Iterable[SourceFile]]) -> Iterable[SourceFile]:
        # Overlapping patterns can match one file twice; it is one input, kept under its smallest
        # relative path.
        _, sources = url_and_sources
        self._listed.inc()
        yield min(sources)


class ListImages(beam.PTransform):
    """Lists the image files that glob patterns (or an input list) name, each file once.

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
    ):
        super().__init__()
        self._patterns = list(patterns)
        self._extensions = tuple(extensions)
        self._input_list = input_list
        self._listing = listing

    def expand(self, pbegin):
        if self._input_list is not None:
            found = (
                pbegin
                | "ListChunks" >> beam.Create(input_list_chunks(self._input_list))
                | "SpreadChunks" >> beam.Reshuffle()
                | "ReadList" >> beam.FlatMap(read_input_list_chunk)
            )
        elif self._listing == "launcher":
            sources = sorted(s for p in self._patterns for s in expand_pattern(p, self._extensions))
            found = pbegin | "ListedHere" >> beam.Create(sources)
        else:
            tasks = (
                pbegin
                | "Patterns" >> beam.Create(self._patterns)
                | "Tasks" >> beam.Map(ListingTask.for_pattern)
            )
            for level in range(self.SPLIT_LEVELS):
                tasks = (
                    tasks
                    | f"Split{level}" >> beam.FlatMap(split_task)
                    # Each part is listed by whichever worker takes it, not by the launcher.
                    | f"Spread{level}" >> beam.Reshuffle()
                )
            found = tasks | "Expand" >> beam.ParDo(_ExpandTaskFn(self._extensions))
        if self._input_list is None and len(self._patterns) == 1:
            # The parts of one pattern are disjoint, so no file can be listed twice: no shuffle.
            return found | "CountListed" >> beam.ParDo(_CountFn("images_listed"))
        return (
            found
            | "KeyByUrl" >> beam.Map(lambda s: (s.url, s))
            | "GroupByUrl" >> beam.GroupByKey()
            | "OnePerFile" >> beam.ParDo(_OnePerFileFn())
        )


class _LabelFn(beam.DoFn):
    def __init__(self, preparer: Preparer):
        self._preparer = preparer
        self._skipped = _counter("images_skipped")

    def process(self, source: SourceFile):
        label = self._preparer.label(source)
        if isinstance(label, ReportEntry):
            self._skipped.inc()
            yield pvalue.TaggedOutput(REPORT, label)
        else:
            yield (source, label)


class LabelImages(beam.PTransform):
    """Derives each image's class name and the class map.

    Returns a dict: `labeled` (SourceFile, label) pairs, `classes` a one-element PCollection holding
    the ClassMap, and `report` the inputs that got no label.
    """

    def __init__(self, preparer: Preparer):
        super().__init__()
        self._preparer = preparer

    def expand(self, sources):
        results = sources | "Label" >> beam.ParDo(_LabelFn(self._preparer)).with_outputs(
            REPORT, main="labeled"
        )
        fixed = self._preparer.fixed_classes
        if fixed is not None or not self._preparer.label_rule.enabled:
            classes = sources.pipeline | "FixedClasses" >> beam.Create([ClassMap(fixed or ())])
        else:
            classes = (
                results.labeled
                | "Labels" >> beam.Map(lambda pair: pair[1])
                | "DistinctLabels" >> beam.Distinct()
                | "AllLabels" >> beam.combiners.ToList()
                | "ClassMap" >> beam.Map(ClassMap.from_labels)
            )
        return {"labeled": results.labeled, "classes": classes, "report": results[REPORT]}


class _PrepareFn(beam.DoFn):
    def __init__(self, preparer: Preparer):
        self._preparer = preparer
        self._skipped = _counter("images_skipped")
        self._reencoded = _counter("images_to_reencode")

    def process(self, element: tuple[SourceFile, str | None], classes: ClassMap):
        source, label = element
        class_id = classes.id_of(label) if label is not None else None
        result = self._preparer.prepare(source, label, class_id)
        if isinstance(result, ReportEntry):
            self._skipped.inc()
            yield pvalue.TaggedOutput(REPORT, result)
            return
        if result.reencode:
            self._reencoded.inc()
        yield result


class CheckImages(beam.PTransform):
    """Checks each labeled image and turns it into a planned ImageEntry (metadata only).

    Returns a dict: `entries` and `report` (skipped inputs, and images the build had to change).
    """

    def __init__(self, preparer: Preparer, classes):
        super().__init__()
        self._preparer = preparer
        self._classes = classes

    def expand(self, labeled):
        results = labeled | "Check" >> beam.ParDo(
            _PrepareFn(self._preparer), classes=pvalue.AsSingleton(self._classes)
        ).with_outputs(REPORT, main="entries")
        return {"entries": results.entries, "report": results[REPORT]}


class _KeepOneCopyFn(beam.DoFn):
    def __init__(self):
        self._skipped = _counter("images_skipped")
        self._duplicates = _counter("duplicates_dropped")

    def process(self, element: tuple[str, Iterable[ImageEntry]]):
        _, copies = element
        # The copy kept is the one with the smallest relative path, on every runner; its split
        # is the only one the content can be in, so no copy leaks from test into training.
        kept, *others = sorted(copies, key=lambda e: (e.relpath, e.url))
        yield kept
        if not others:
            return
        for copy in others:
            self._skipped.inc()
            self._duplicates.inc()
            message = f"byte-identical to {kept.relpath!r}, which was written instead"
            if copy.label != kept.label:
                message += f" (labelled {kept.label!r} there, {copy.label!r} here)"
            yield pvalue.TaggedOutput(
                REPORT,
                ReportEntry(
                    copy.url,
                    copy.relpath,
                    Reason.DUPLICATE,
                    message,
                    split=copy.split,
                    label=copy.label,
                ),
            )
        names = ", ".join(repr(c.relpath) for c in others)
        yield pvalue.TaggedOutput(
            REPORT,
            ReportEntry(
                kept.url, kept.relpath, Reason.DUPLICATE, f"written once for its identical copies {names}",
                action="kept", split=kept.split, label=kept.label,
            ),
        )  # fmt: skip


class DropDuplicates(beam.PTransform):
    """Keeps one of each set of byte-identical images (entries need their source_sha256).

    Groups metadata by content hash; image bytes never move. Returns a dict: `entries` and
    `report` (one line for every copy: the copies dropped, and the one kept).
    """

    def expand(self, entries):
        results = (
            entries
            | "KeyByContent" >> beam.Map(lambda e: (e.source_sha256, e))
            | "GroupCopies" >> beam.GroupByKey()
            | "KeepOne" >> beam.ParDo(_KeepOneCopyFn()).with_outputs(REPORT, main="entries")
        )
        return {"entries": results.entries, "report": results[REPORT]}


def _merge_stats(stats: Iterable[SplitStats]) -> SplitStats:
    merged = SplitStats()
    for s in stats:
        merged = merged.merge(s)
    return merged


class _PlanBucketFn(beam.DoFn):
    def process(self, element, plan):
        (split, bucket), entries = element
        split_plan = plan[split]
        start = split_plan["bucket_offsets"][bucket]
        for shard, entry in place_records(
            ((e.sort_key, e.record_size, e) for e in entries),
            start,
            split_plan["bytes"],
            split_plan["shards"],
        ):
            yield (split, shard), entry


def _split_plans(
    split_stats: dict, bucket_bytes: dict, bucket_records: int, bounds: tuple[int, int]
) -> dict:
    """Per split: total bytes, shard count, bucket count and each bucket's start offset."""
    plans = {}
    for split, stats in split_stats.items():
        buckets = num_buckets(stats.records, bucket_records)
        per_bucket = {b: n for (s, b), n in bucket_bytes.items() if s == split}
        plans[split] = {
            "records": stats.records,
            "bytes": stats.bytes,
            "max_record": stats.max_record,
            "shards": num_shards(stats.bytes, stats.max_record, *bounds),
            "buckets": buckets,
            "bucket_offsets": bucket_offsets(per_bucket, buckets),
        }
    return plans


class PlanShards(beam.PTransform):
    """Places every planned image in a shard of its split, on metadata only.

    Records are ordered by shuffle key and cut into shards of nearly equal bytes. Planning is
    spread over key-range buckets of at most `bucket_records` records, so no worker holds more
    than one bucket's metadata, however large the split.

    Returns a dict: `shards`, ((split, shard index), [ImageEntry]) pairs, and `plan`, a one-element
    PCollection with each split's plan (records, bytes, shard count).
    """

    def __init__(self, min_shard_size: int, max_shard_size: int, bucket_records: int):
        super().__init__()
        self._bounds = (min_shard_size, max_shard_size)
        self._bucket_records = bucket_records

    def expand(self, entries):
        split_stats = (
            entries
            | "SizeOfEach"
            >> beam.Map(lambda e: (e.split, SplitStats(1, e.record_size, e.record_size)))
            | "SizeOfSplit" >> beam.CombinePerKey(_merge_stats)
            | "StatsDict" >> beam.combiners.ToDict()
        )
        bucket_records = self._bucket_records
        keyed = entries | "Bucket" >> beam.Map(
            lambda e, stats: (
                (
                    e.split,
                    bucket_of(e.shuffle_key, num_buckets(stats[e.split].records, bucket_records)),
                ),
                e,
            ),
            stats=pvalue.AsSingleton(split_stats),
        )
        bucket_bytes = (
            keyed
            | "SizeOfEachInBucket" >> beam.Map(lambda kv: (kv[0], kv[1].record_size))
            | "SizeOfBucket" >> beam.CombinePerKey(sum)
            | "BucketDict" >> beam.combiners.ToDict()
        )
        bounds = self._bounds
        plan = split_stats | "SplitPlans" >> beam.Map(
            lambda stats, buckets: _split_plans(stats, buckets, bucket_records, bounds),
            buckets=pvalue.AsSingleton(bucket_bytes),
        )
        shards = (
            keyed
            | "GroupBuckets" >> beam.GroupByKey()
            | "PlaceInShards" >> beam.ParDo(_PlanBucketFn(), plan=pvalue.AsSingleton(plan))
            | "GroupShards" >> beam.GroupByKey()
        )
        return {"shards": shards, "plan": plan}


class _WriteShardFn(beam.DoFn):
    def __init__(self, output_dir: str, name: str, policy: ImagePolicy, resume: bool):
        self._output_dir = output_dir
        self._name = name
        self._policy = policy
        self._resume = resume
        self._written = _counter("images_written")
        self._skipped = _counter("images_skipped")
        self._bytes = _counter("bytes_written")
        self._shards = _counter("shards_written")

    def process(self, element, plan):
        (split, index), entries = element
        shards = plan[split]["shards"]
        spec = ShardSpec(
            self._output_dir,
            shard_file_name(self._name, split, index, shards),
            split,
            index,
            shards,
        )
        entries = list(entries)
        result, skipped = write_shard(spec, entries, self._policy, resume=self._resume)
        self._written.inc(result.examples)
        self._bytes.inc(result.bytes)
        self._shards.inc()
        for entry in skipped:
            self._skipped.inc()
            yield pvalue.TaggedOutput(REPORT, entry)
        left_out = {entry.url for entry in skipped}
        for entry in entries:
            if entry.reencode and entry.url not in left_out:
                yield pvalue.TaggedOutput(
                    REPORT,
                    ReportEntry(
                        entry.url, entry.relpath, "normalized",
                        "re-encoded so that TensorFlow decodes it as stated: " + ", ".join(entry.notes),
                        action="modified", split=entry.split, label=entry.label, notes=entry.notes,
                    ),
                )  # fmt: skip
        yield result


class WriteShards(beam.PTransform):
    """Writes each planned shard by one worker, streaming its images from source to file.

    Returns a dict: `results` (ShardResult per shard) and `report` (images that could not be written).
    """

    def __init__(self, output_dir: str, name: str, policy: ImagePolicy, plan, resume: bool = False):
        super().__init__()
        self._fn = _WriteShardFn(output_dir, name, policy, resume)
        self._plan = plan

    def expand(self, shards):
        results = shards | "Write" >> beam.ParDo(
            self._fn, plan=pvalue.AsSingleton(self._plan)
        ).with_outputs(REPORT, main="results")
        return {"results": results.results, "report": results[REPORT]}
