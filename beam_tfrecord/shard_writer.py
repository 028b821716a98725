"""Writing one shard: stream its images from their sources into a TFRecord file, published whole."""

from __future__ import annotations

import hashlib
import logging
import posixpath
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import fsspec

from beam_tfrecord.catalog import ImageEntry, Reason, ReportEntry
from beam_tfrecord.example import decode_example
from beam_tfrecord.images import ImageError, ImagePolicy, encode_for_tensorflow
from beam_tfrecord.preparation import read_source
from beam_tfrecord.record_index import index_file_name, index_line
from beam_tfrecord.records import image_record
from beam_tfrecord.storage import TEMP_MARKER, is_object_store, publish
from beam_tfrecord.tfrecord import CorruptRecordError, TFRecordWriter, framed_size, read_records

__all__ = ["TEMP_MARKER", "ShardResult", "ShardSpec", "is_temporary", "write_shard"]

_LOG = logging.getLogger(__name__)


def is_temporary(file_name: str) -> bool:
    return file_name.startswith(".") and TEMP_MARKER in file_name


@dataclass(frozen=True)
class ShardSpec:
    """Where one shard goes and what it holds."""

    output_dir: str
    file_name: str
    split: str
    index: int
    num_shards: int

    @property
    def url(self) -> str:
        return posixpath.join(self.output_dir, self.file_name)


@dataclass(frozen=True)
class ShardResult:
    """What a written shard holds, for the manifest."""

    split: str
    index: int
    file_name: str
    examples: int
    bytes: int
    sha256: str
    class_counts: tuple[tuple[str, int], ...] = ()
    resumed: bool = False
    index_file: str | None = None  # its record index, relative to the output folder


class _HashingStream:
    """A write-only stream that hashes what passes through, so the shard is never read back."""

    def __init__(self, stream):
        self._stream = stream
        self.sha256 = hashlib.sha256()

    def write(self, data) -> int:
        self.sha256.update(data)
        return self._stream.write(data)


def write_shard(
    spec: ShardSpec,
    entries: Iterable[ImageEntry],
    policy: ImagePolicy,
    *,
    resume: bool = False,
) -> tuple[ShardResult, list[ReportEntry]]:
    """Writes one shard and returns what it holds and the inputs it had to leave out.

    Records are written in shuffle-key order; only one image's bytes are in memory at a time.
    A record is checked against its planned size before it is written, so a source that changed
    since planning is reported instead of breaking the shard's size bounds.

    Args:
        spec: the shard's name and place.
        entries: its planned images, in any order.
        policy: the image policy the entries were planned with.
        resume: keep a shard already at its final name when it verifies against the plan.
    """
    ordered = sorted(entries, key=lambda e: e.sort_key)
    fs, final_path = fsspec.core.url_to_fs(spec.url)
    index_name = index_file_name(spec.file_name)
    index_path = posixpath.join(posixpath.dirname(final_path), index_name)
    if resume:
        kept = _verify_existing(fs, final_path, spec, ordered)
        if kept is not None:
            result, index = kept
            # An earlier run may have died between publishing the shard and its index.
            publish(fs, index_path, index.encode("ascii"))
            _LOG.info("kept finished shard %s (%d examples)", spec.file_name, result.examples)
            return result, []
    if not is_object_store(fs):
        temp_path = posixpath.join(
            posixpath.dirname(final_path), f".{spec.file_name}{TEMP_MARKER}{uuid.uuid4().hex}"
        )
    else:
        temp_path = final_path
    skipped: list[ReportEntry] = []
    counts: Counter[str] = Counter()
    # A few bytes per record; held until the shard is published, so that no index ever
    # describes a shard that is not there.
    index: list[str] = []
    fs.makedirs(posixpath.dirname(final_path), exist_ok=True)
    direct = temp_path == final_path
    # An object store completes an upload when its file is closed, even when the writing failed;
    # without autocommit it completes only on commit(), so a failed shard never appears.
    raw = fs.open(temp_path, "wb", autocommit=False) if direct else fs.open(temp_path, "wb")
    try:
        stream = _HashingStream(raw)
        writer = TFRecordWriter(stream)
        for entry in ordered:
            record = _record_for(entry, policy, skipped)
            if record is None:
                continue
            offset = writer.bytes_written
            index.append(index_line(offset, writer.write(record)))
            if entry.label is not None:
                counts[entry.label] += 1
        raw.close()
        if direct:
            raw.commit()
        else:
            fs.mv(temp_path, final_path)
    except BaseException:
        if direct:
            _cancel_upload(raw, temp_path)
        else:
            raw.close()
            if fs.exists(temp_path):
                fs.rm(temp_path)
        raise
    publish(fs, index_path, "".join(index).encode("ascii"))
    result = ShardResult(
        split=spec.split,
        index=spec.index,
        file_name=spec.file_name,
        examples=writer.records_written,
        bytes=writer.bytes_written,
        sha256=stream.sha256.hexdigest(),
        class_counts=tuple(sorted(counts.items())),
        index_file=index_name,
    )
    _LOG.info(
        "wrote shard %s: %d examples, %d bytes", spec.file_name, result.examples, result.bytes
    )
    return result, skipped


def _cancel_upload(raw, path: str) -> None:
    """Abandons an uncommitted upload: nothing of it appears, nothing is left to flush."""
    try:
        # Frees what the store keeps of the upload so far (S3 keeps, and bills, the parts of an
        # unfinished multipart upload until it is aborted).
        raw.discard()
    except Exception as err:  # the shard's own error is the one to raise
        _LOG.warning("could not cancel the unfinished upload of %s: %s", path, err)
    finally:
        # Closing would upload the rest of the buffer, to no purpose; this also keeps the
        # file's finalizer from doing it.
        raw.closed = True


def _record_for(entry: ImageEntry, policy: ImagePolicy, skipped: list[ReportEntry]) -> bytes | None:
    """The serialized record of one planned image, or None (and a report entry) if it cannot be."""

    def skip(reason: str, message: str) -> None:
        skipped.append(
            ReportEntry(
                entry.url, entry.relpath, reason, message, split=entry.split, label=entry.label
            )
        )

    try:
        data = read_source(entry.url)
    except FileNotFoundError:
        skip(Reason.VANISHED, "the file was planned but was gone when its shard was written")
        return None
    except OSError as err:
        skip(Reason.READ_ERROR, f"cannot read: {err}")
        return None
    if entry.reencode:
        try:
            encoded, info = encode_for_tensorflow(data, policy)
        except ImageError as err:
            skip(err.code, f"{err.message} (when its shard was written)")
            return None
        shape = (info.format, info.height, info.width, info.channels)
    else:
        encoded = data
        shape = (entry.image_format, entry.height, entry.width, entry.channels)
    if len(encoded) != entry.encoded_size or shape != (
        entry.image_format, entry.height, entry.width, entry.channels,
    ):  # fmt: skip
        skip(
            Reason.SOURCE_CHANGED,
            f"the file changed between planning and writing ({entry.encoded_size} -> {len(encoded)} bytes)",
        )
        return None
    record = image_record(
        encoded,
        image_format=entry.image_format,
        height=entry.height,
        width=entry.width,
        channels=entry.channels,
        filename=entry.relpath,
        label=entry.class_id,
        label_text=entry.label,
    )
    # The planner placed this record by its size; a mismatch would be a bug, never a silent overshoot.
    if framed_size(len(record)) != entry.record_size:
        raise AssertionError(
            f"{entry.url}: record is {framed_size(len(record))} bytes, planned {entry.record_size}"
        )
    return record


def _verify_existing(
    fs, final_path: str, spec: ShardSpec, ordered: list[ImageEntry]
) -> tuple[ShardResult, str] | None:
    """The result and index of a shard already written by an earlier run of the same build, if
    it is intact.

    Intact means: every record's CRCs check, and the records are exactly the planned images in the
    planned order with their planned sizes. A shard that left an image out is written again.
    """
    fs.invalidate_cache(posixpath.dirname(final_path))  # object stores cache listings
    if not fs.exists(final_path):
        return None
    expected_bytes = sum(e.record_size for e in ordered)
    if fs.size(final_path) != expected_bytes:
        return None
    sha = hashlib.sha256()
    counts: Counter[str] = Counter()
    index: list[str] = []
    try:
        with fs.open(final_path, "rb") as f:
            records = read_records(f, compression="NONE", with_offsets=True)
            for entry, (offset, record) in zip(ordered, records, strict=True):
                index.append(index_line(offset, framed_size(len(record))))
                features = decode_example(record)
                if features.get("image/filename") != [
                    entry.relpath.encode("utf-8", "surrogateescape")
                ]:
                    return None
                if entry.label is not None:
                    counts[entry.label] += 1
        with fs.open(final_path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
    except (CorruptRecordError, ValueError, OSError):
        return None
    result = ShardResult(
        split=spec.split,
        index=spec.index,
        file_name=spec.file_name,
        examples=len(ordered),
        bytes=expected_bytes,
        sha256=sha.hexdigest(),
        class_counts=tuple(sorted(counts.items())),
        resumed=True,
        index_file=index_file_name(spec.file_name),
    )
    return result, "".join(index)
