"""Writing one shard: stream its images from their sources into a TFRecord file, published whole."""

from __future__ import annotations

import functools
import logging
import posixpath
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import fsspec

from beam_tfrecord import progress
from beam_tfrecord.catalog import ImageEntry, Reason, ReportEntry
from beam_tfrecord.example import decode_example
from beam_tfrecord.images import ImageError, ImagePolicy, check_image, encode_for_tensorflow
from beam_tfrecord.prefetch import read_ahead as ahead_of
from beam_tfrecord.prefetch import usable_cores
from beam_tfrecord.preparation import read_source
from beam_tfrecord.record_index import index_file_name, index_line
from beam_tfrecord.records import image_record_parts
from beam_tfrecord.storage import TEMP_MARKER, is_object_store, publish
from beam_tfrecord.tfrecord import (
    CorruptRecordError,
    TFRecordWriter,
    file_crc32c,
    framed_size,
    read_records,
)
from beam_tfrecord.wording import count

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
    crc32c: str  # of the whole file, 8 hex digits, as `gcloud storage hash --hex` prints it
    class_counts: tuple[tuple[str, int], ...] = ()
    resumed: bool = False
    index_file: str | None = None  # its record index, relative to the output folder


def write_shard(
    spec: ShardSpec,
    entries: Iterable[ImageEntry],
    policy: ImagePolicy,
    *,
    resume: bool = False,
    read_ahead: int = 0,
    executor: ThreadPoolExecutor | None = None,
    cpu: threading.Semaphore | None = None,
) -> tuple[ShardResult, list[ReportEntry]]:
    """Writes one shard and returns what it holds and the inputs it had to leave out.

    Records are written in shuffle-key order. The next `read_ahead` sources are read while one
    is written (on `executor`'s threads when given), so only that many images' bytes are in
    memory at a time. The same threads decode (policy.validate == "decode") and re-encode,
    no more at once than `cpu` allows (default: the machine's cores), on the very bytes that
    are written; an image that fails is reported and left out.
    A record is checked against its planned size before it is written, so a source that changed
    since planning is reported instead of breaking the shard's size bounds.

    Args:
        spec: the shard's name and place.
        entries: its planned images, in any order.
        policy: the image policy the entries were planned with.
        resume: keep a shard already at its final name when it verifies against the plan.
        read_ahead: sources read concurrently ahead of the one being written; 0 for none.
        executor: threads to read on, shared between shards; else the call makes its own.
        cpu: bounds the decodes and re-encodes running at once, shared between shards.
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
            progress.add("written", result.examples, result.bytes)
            _LOG.debug(
                "kept finished shard %s (%s)", spec.file_name, count(result.examples, "example")
            )
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
        sources = ahead_of(
            ordered,
            functools.partial(
                _encoded, policy=policy, cpu=cpu or threading.Semaphore(usable_cores())
            ),
            threads=read_ahead,
            size_of=lambda e: e.source_size,
            executor=executor,
        )
        # The writer keeps the file's checksum as it goes, so the shard is never read back.
        with TFRecordWriter(raw, checksum=True) as writer:
            for entry, encoded in sources:
                record = _record_for(entry, encoded.result, skipped)
                if record is None:
                    continue
                offset = writer.bytes_written
                index.append(index_line(offset, writer.write_parts(record)))
                progress.add("written", 1, writer.bytes_written - offset)
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
        crc32c=f"{writer.crc32c:08x}",
        class_counts=tuple(sorted(counts.items())),
        index_file=index_name,
    )
    _LOG.debug(
        "wrote shard %s: %s, %s",
        spec.file_name,
        count(result.examples, "example"),
        count(result.bytes, "byte"),
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


def _encoded(
    entry: ImageEntry, *, policy: ImagePolicy, cpu: threading.Semaphore
) -> tuple[bytes, tuple[str, int, int, int]]:
    """The bytes to store for a planned image, and (format, height, width, channels) they decode to.

    Raises:
        OSError: the source cannot be read (FileNotFoundError: it is gone).
        ImageError: it cannot be decoded or re-encoded.
    """
    data = read_source(entry.url)
    if entry.reencode:
        with cpu:
            encoded, info = encode_for_tensorflow(data, policy)
    elif policy.validate == "decode":
        with cpu:
            info = check_image(data, policy)
        encoded = data
        if info.reencode:
            # Only the whole file shows it (a PNG chunk libpng refuses, after the image data);
            # its record was planned, from the header, to hold the bytes as they are.
            raise ImageError(
                "unsupported",
                "the full decode found it must be re-encoded for TensorFlow, which its plan, "
                "made from its header, did not allow; left out rather than written as it is",
            )
    else:
        return data, (entry.image_format, entry.height, entry.width, entry.channels)
    return encoded, (info.format, info.height, info.width, info.channels)


def _record_for(
    entry: ImageEntry,
    encoded: Callable[[], tuple[bytes, tuple[str, int, int, int]]],
    skipped: list[ReportEntry],
) -> tuple[bytes, bytes, bytes] | None:
    """The serialized record of one planned image, in pieces (`image_record_parts`), or None
    (and a report entry) if it cannot be.

    `encoded` returns what `_encoded` returns for the entry, or raises what it raised.
    """

    def skip(reason: str, message: str) -> None:
        skipped.append(
            ReportEntry(
                entry.url, entry.relpath, reason, message, split=entry.split, label=entry.label
            )
        )

    try:
        encoded, shape = encoded()
    except FileNotFoundError:
        skip(Reason.VANISHED, "the file was planned but was gone when its shard was written")
        return None
    except OSError as err:
        skip(Reason.READ_ERROR, f"cannot read: {err}")
        return None
    except ImageError as err:
        skip(err.code, f"{err.message} (when its shard was written)")
        return None
    if len(encoded) != entry.encoded_size or shape != (
        entry.image_format, entry.height, entry.width, entry.channels,
    ):  # fmt: skip
        skip(
            Reason.SOURCE_CHANGED,
            f"the file changed between planning and writing ({entry.encoded_size} -> {len(encoded)} bytes)",
        )
        return None
    record = image_record_parts(
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
    size = framed_size(sum(len(part) for part in record))
    if size != entry.record_size:
        raise AssertionError(f"{entry.url}: record is {size} bytes, planned {entry.record_size}")
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
            checksum = file_crc32c(f)
    except (CorruptRecordError, ValueError, OSError):
        return None
    result = ShardResult(
        split=spec.split,
        index=spec.index,
        file_name=spec.file_name,
        examples=len(ordered),
        bytes=expected_bytes,
        crc32c=checksum,
        class_counts=tuple(sorted(counts.items())),
        resumed=True,
        index_file=index_file_name(spec.file_name),
    )
    return result, "".join(index)
