"""A local build's head start: its shards written while Beam starts, taken only where they match.

A shard can start only once the whole collection is listed and planned, and in a pipeline that
comes after Beam's import (1.5 to 2 s of CPU), the graph's construction and the runner's stages
of listing and planning: seconds in which a machine's other cores idle. A local build that
writes with worker processes of its own (`shard_processes`) lists and plans the same collection
in one of them meanwhile, with the same pure functions the pipeline's steps call, and starts
writing the shards of that plan.

The pipeline plans as it always does. A shard it asks for whose plan is the one the head start
is writing (the same images, sizes, labels and order, the same settings: `plan_digest`) is
taken as written; any other is written anew, as if there had been no head start, and a head
start shard no plan names is removed. So the output is the pipeline's, byte for byte, and a
head start that guessed wrong (images added between the two listings) costs time, never
correctness.

A head start lists and plans in one process, so it is for collections of at most
`MAX_IMAGES` (its memory is bounded by that, not by the collection), and for images large
enough that planning twice costs little next to writing them (`MIN_MEAN_BYTES`).
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from dataclasses import dataclass

from beam_tfrecord.entries import ImageEntry, ReportEntry, ShardSpec
from beam_tfrecord.images.policy import ImagePolicy
from beam_tfrecord.listing import expand_pattern
from beam_tfrecord.planning import Preparer
from beam_tfrecord.shard_names import shard_file_name
from beam_tfrecord.sharding import SplitStats, bucket_of, num_buckets, plan_splits

__all__ = ["MAX_IMAGES", "MIN_MEAN_BYTES", "HeadStart", "plan_digest", "plan_shards"]

# More images than this are planned by the pipeline alone: one process holds them all here.
MAX_IMAGES = 250_000

# Below this mean size an image costs about as much to list and plan as to write (a 32x32 PNG):
# planning twice would add a third to the build's CPU for a few seconds of wall time.
MIN_MEAN_BYTES = 32 * 1024


@dataclass(frozen=True)
class HeadStart:
    """What a head start needs to plan as the pipeline will: the build's settings that shape
    its plan and its shards."""

    pattern: str
    extensions: tuple[str, ...]
    preparer: Preparer
    bucket_records: int
    min_shard_size: int
    max_shard_size: int
    output: str
    name: str
    # Below this many planned bytes, or with one shard, the pipeline writes without processes.
    min_bytes: int
    min_mean_bytes: int = MIN_MEAN_BYTES


def plan_shards(start: HeadStart) -> list[tuple[ShardSpec, list[ImageEntry]]]:
    """The shards the pipeline will plan, each with its entries in shuffle-key order, from
    listing and planning here what its ListImages, PlanImages and PlanShards steps do; none for
    a collection a head start is not for."""
    sources = []
    for source in expand_pattern(start.pattern, start.extensions):
        sources.append(source)
        if len(sources) > MAX_IMAGES:
            return []
    preparer = start.preparer
    labelled = [(source, preparer.label(source)) for source in sources]
    classes = preparer.class_map({label for _, label in labelled if isinstance(label, str)})
    buckets = num_buckets(len(labelled), start.bucket_records)
    by_bucket: dict[tuple[str, int], list[ImageEntry]] = {}
    for source, label in labelled:
        if isinstance(label, ReportEntry):
            continue
        planned = preparer.plan(source, label, classes.id_of(label) if label is not None else None)
        if isinstance(planned, ImageEntry):
            key = (planned.split, bucket_of(planned.shuffle_key, buckets))
            by_bucket.setdefault(key, []).append(planned)
    stats = {
        key: SplitStats(
            len(found), sum(e.record_size for e in found), max(e.record_size for e in found)
        )
        for key, found in by_bucket.items()
    }
    total = sum(s.bytes for s in stats.values())
    if not sources or total < start.min_bytes or total / len(sources) < start.min_mean_bytes:
        return []
    plans = plan_splits(stats, buckets, start.min_shard_size, start.max_shard_size)
    if sum(plan.shards for plan in plans.values()) < 2:
        return []
    shards: dict[tuple[str, int], list[ImageEntry]] = {}
    for (split, bucket), found in sorted(by_bucket.items()):
        records = ((e.sort_key, e.record_size, e) for e in found)
        for index, entry in plans[split].place(bucket, records):
            shards.setdefault((split, index), []).append(entry)
    return [
        (
            ShardSpec(
                start.output,
                shard_file_name(start.name, split, index, plans[split].shards),
                split,
                index,
                plans[split].shards,
            ),
            entries,
        )
        for (split, index), entries in sorted(shards.items())
    ]


def plan_digest(
    spec: ShardSpec,
    packed: Sequence[bytes],
    policy: ImagePolicy,
    how: tuple[int | None, bool, int],
) -> bytes:
    """What makes a shard's bytes, hashed: its name and place, its entries' compact forms in
    shuffle-key order, the image policy and (max_record_size, resume, read_ahead)."""
    digest = hashlib.sha256(pickle.dumps((spec, policy, how)))
    for data in packed:
        digest.update(len(data).to_bytes(4, "little"))
        digest.update(data)
    return digest.digest()
