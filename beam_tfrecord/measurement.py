"""Exact record sizes of transformed images, measured before shards are planned.

An image that keeps its bytes is planned exactly from its file's size. One the build transforms
(`--resize`, `--encode` to another format, `--store raw`) has no such size: what a JPEG of noise
and a drawing of the same pixels encode to differs tenfold, and no size model can know which a
collection holds. Shards cut on a model's estimate then leave `--max-shard-size` behind (three
times over, on noise). So, unless the user chose the estimate (`transformed_sizes: estimate`),
the build transforms each such image once while planning, exactly as its shard writer will
(the same function, the same settings: the same bytes), keeps only its record's size, and plans
on that. The cost: those images are read, decoded and encoded twice.
"""

from __future__ import annotations

import dataclasses

from beam_tfrecord.codec.records import image_record_size
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry
from beam_tfrecord.images import ImageError, ImagePolicy, encode_for_tensorflow
from beam_tfrecord.planning import size_is_estimated

__all__ = ["TRANSFORMED_SIZES", "measured", "measures"]

# `transformed_sizes`: how a transformed image's record is sized for the plan.
TRANSFORMED_SIZES = ("measure", "estimate")


def measures(policy: ImagePolicy, transformed_sizes: str) -> bool:
    """Whether a build with this policy measures any image before planning its shards."""
    return transformed_sizes == "measure" and (
        policy.store == "raw" or policy.resize is not None or policy.encode is not None
    )


def needs_measuring(entry: ImageEntry, policy: ImagePolicy) -> bool:
    """Whether the entry's planned size is only an estimate (its image is transformed)."""
    return size_is_estimated(entry.relpath, policy)


def measured(
    entry: ImageEntry, data: bytes | OSError, policy: ImagePolicy, max_record_size: int
) -> ImageEntry | ReportEntry:
    """The entry with the exact size of the record its shard writer will write, or the report
    entry saying why it will write none (the same reasons the writer would give).

    `data` is the source's bytes, or the OSError reading them raised.
    """

    def skipped(reason: str, message: str) -> ReportEntry:
        return ReportEntry(
            entry.url, entry.relpath, reason, message, split=entry.split, label=entry.label
        )

    if isinstance(data, FileNotFoundError):
        return skipped(Reason.VANISHED, "the file was listed but is gone")
    if isinstance(data, OSError):
        return skipped(Reason.READ_ERROR, f"cannot read: {data}")
    if len(data) != entry.source_size:
        return skipped(
            Reason.SOURCE_CHANGED,
            f"the file changed since it was listed ({entry.source_size} -> {len(data)} bytes)",
        )
    try:
        encoded, info = encode_for_tensorflow(data, policy)
    except ImageError as err:
        return skipped(err.code, err.message)
    size = image_record_size(
        len(encoded),
        image_format=info.format,
        height=info.height,
        width=info.width,
        channels=info.channels,
        filename=entry.relpath,
        label=entry.class_id,
        label_text=entry.label,
    )
    if size > max_record_size:
        return skipped(
            Reason.TOO_LARGE, f"its record is {size} bytes, over --max-shard-size {max_record_size}"
        )
    return dataclasses.replace(entry, record_size=size)
