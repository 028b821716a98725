"""Exact record sizes of transformed images, measured before shards are planned.

An image that keeps its bytes is planned exactly from its file's size. One the build transforms
(`--resize`, `--encode` to another format, `--store raw`) has no such size: what a JPEG of noise
and a drawing of the same pixels encode to differs tenfold, and no size model can know which a
collection holds. Shards cut on a model's estimate then leave `--max-shard-size` behind (three
times over, on noise). So, unless the user chose the estimate (`transformed_sizes: estimate`),
the build transforms each such image once while planning, exactly as its shard writer would
(the same function, the same settings: the same bytes), and plans on its record's size.

Where the build's shards are written on this machine (a local build's shard processes), the
record itself is kept too (`measure_into`): appended to a file of a folder the build removes when
it ends, and named in the entry (`ImageEntry.prepared`, a `Prepared`), so that the shard writer
copies it and each image is read, decoded and encoded once. Elsewhere (Dataflow's workers share
no disk) only the size is kept (`measured`), and the writer transforms the image a second time.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass

from beam_tfrecord.codec.framing import parts_crc32c
from beam_tfrecord.codec.records import image_record_parts, image_record_size
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry
from beam_tfrecord.images import ImageError, ImageInfo, ImagePolicy, encode_for_tensorflow
from beam_tfrecord.planning import size_is_estimated
from beam_tfrecord.storage import read_source, size_as_listed

__all__ = ["TRANSFORMED_SIZES", "Prepared", "measure_into", "measured", "measures"]

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
    made = _measured_image(entry, data, policy, max_record_size)
    if isinstance(made, ReportEntry):
        return made
    return dataclasses.replace(entry, record_size=made.size)


@dataclass(frozen=True)
class Prepared:
    """Where `measure_into` kept an image's record, and what making it took: what the shard
    writer needs to copy the record into its shard and account for it as if it had made it.

    Attributes:
        path: the file the record is in; offset and length: where, in bytes (the record as
            written, unframed); crc: its CRC32C, checked when it is read back.
        decoded, reencode, notes: as the image's ImageInfo says (the shard's report and work
            counts).
    """

    path: str
    offset: int
    length: int
    crc: int
    decoded: bool
    reencode: bool
    notes: tuple[str, ...]

    def to_text(self) -> str:
        """The compact text `ImageEntry.prepared` holds; `from_text` reverses it."""
        flags = f"{int(self.decoded)}{int(self.reencode)}"
        return _SEP.join(
            (self.path, str(self.offset), str(self.length), str(self.crc), flags, *self.notes)
        )

    @classmethod
    def from_text(cls, text: str) -> Prepared:
        path, offset, length, crc, flags, *notes = text.split(_SEP)
        return cls(
            path, int(offset), int(length), int(crc), flags[0] == "1", flags[1] == "1", tuple(notes)
        )

    def read(self) -> bytes:
        """The record, as `measure_into` wrote it.

        Raises:
            OSError: the file is gone, short, or the bytes are not the ones written.
        """
        fd = os.open(self.path, os.O_RDONLY)
        try:
            record = os.pread(fd, self.length, self.offset)
        finally:
            os.close(fd)
        if len(record) != self.length or parts_crc32c((record,)) != self.crc:
            raise OSError(f"the record its size was measured from is damaged in {self.path}")
        return record


# Between a Prepared's fields: a control character no path of the build's own folder holds.
_SEP = "\x1f"


def measure_into(
    entries: Iterable[ImageEntry], policy: ImagePolicy, max_record_size: int, path: str
) -> list[ImageEntry | ReportEntry]:
    """`measured` for each entry, in order, each record kept in a new file at `path` and named
    in its entry (`ImageEntry.prepared`): its shard writer copies it from there.

    An entry whose image keeps its bytes comes back as it is (its size is exact already), and one
    that cannot be written as the report entry saying why; neither takes room in the file.
    """
    results: list[ImageEntry | ReportEntry] = []
    offset = 0
    with open(path, "wb") as kept:
        for entry in entries:
            if not needs_measuring(entry, policy):
                results.append(entry)
                continue
            try:
                data: bytes | OSError = read_source(entry.url)
            except OSError as err:
                data = err
            made = _measured_image(entry, data, policy, max_record_size)
            if isinstance(made, ReportEntry):
                results.append(made)
                continue
            record, info = image_record_parts(made.encoded, **made.fields), made.info
            length = sum(map(len, record))
            for part in record:
                kept.write(part)
            where = Prepared(
                path, offset, length, parts_crc32c(record), info.decoded, info.reencode, info.notes
            )
            results.append(
                dataclasses.replace(entry, record_size=made.size, prepared=where.to_text())
            )
            offset += length
    return results


@dataclass(frozen=True)
class _Measured:
    """A transformed image as its shard writer would store it: the bytes, the record's other
    fields (`image_record_parts`' keywords) and framed size, and what TensorFlow decodes."""

    encoded: bytes
    fields: dict
    size: int
    info: ImageInfo


def _measured_image(
    entry: ImageEntry, data: bytes | OSError, policy: ImagePolicy, max_record_size: int
) -> _Measured | ReportEntry:
    """The image transformed as the entry's shard writer would, and its record's size, or the
    report entry saying why it would write none. The record itself is not built: only a kept
    record (`measure_into`) needs its bytes and SHA-256."""

    def skipped(reason: str, message: str) -> ReportEntry:
        return ReportEntry(
            entry.url, entry.relpath, reason, message, split=entry.split, label=entry.label
        )

    if isinstance(data, FileNotFoundError):
        return skipped(Reason.VANISHED, "the file was listed but is gone")
    if isinstance(data, OSError):
        return skipped(Reason.READ_ERROR, f"cannot read: {data}")
    read = size_as_listed(data, entry.source_size)  # a GCS object kept gzip-coded: coded
    if read != entry.source_size:
        return skipped(
            Reason.SOURCE_CHANGED,
            f"the file changed since it was listed ({entry.source_size} -> {read} bytes)",
        )
    try:
        encoded, info = encode_for_tensorflow(data, policy)
    except ImageError as err:
        return skipped(err.code, err.message)
    fields = {
        "image_format": info.format,
        "height": info.height,
        "width": info.width,
        "channels": info.channels,
        "filename": entry.relpath,
        "label": entry.class_id,
        "label_text": entry.label,
    }
    size = image_record_size(len(encoded), **fields)
    if size > max_record_size:
        return skipped(
            Reason.TOO_LARGE, f"its record is {size} bytes, over --max-shard-size {max_record_size}"
        )
    return _Measured(encoded, fields, size, info)
