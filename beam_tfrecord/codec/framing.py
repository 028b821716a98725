"""TFRecord framing: a record is its length, a masked CRC32C of the length, the data, and a
masked CRC32C of the data, exactly as TensorFlow writes it."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, BinaryIO

import crc32c

__all__ = [
    "CRC",
    "FOOTER_SIZE",
    "FRAMING_SIZE",
    "HEADER",
    "HEADER_SIZE",
    "LENGTH",
    "MASK_DELTA",
    "ChecksummedReader",
    "CorruptRecordError",
    "file_crc32c",
    "framed_size",
    "masked_crc32c",
    "parts_crc32c",
]


_crc32c = crc32c.crc32c
MASK_DELTA = 0xA282EAD8
HEADER_SIZE = 12  # uint64 length + uint32 masked CRC of the length
FOOTER_SIZE = 4  # uint32 masked CRC of the data
FRAMING_SIZE = HEADER_SIZE + FOOTER_SIZE
LENGTH = struct.Struct("<Q")
CRC = struct.Struct("<I")
HEADER = struct.Struct("<QI")


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """Returns the masked CRC32C of ``data``, as stored in TFRecord headers and footers.

    The CRC is rotated and offset ("masked") because CRCs of data that itself contains CRCs
    are weak; the constant is the one TensorFlow and LevelDB use.

    Args:
        data: Any bytes-like object.

    Returns:
        The masked checksum as an unsigned 32-bit integer.
    """
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def parts_crc32c(parts: Sequence[bytes]) -> int:
    """The CRC32C (unmasked) of the concatenation of `parts`, without joining them."""
    crc = 0
    for part in parts:
        crc = _crc32c(part, crc)
    return crc


def file_crc32c(stream: BinaryIO) -> str:
    """The CRC32C of what is left to read in a binary stream, as 8 hex digits.

    The form a build's manifest gives each shard's checksum in (``TFRecordWriter.crc32c``,
    formatted), and ``gcloud storage hash --hex`` prints.
    """
    return ChecksummedReader(stream, "").crc32c()


class ChecksummedReader:
    """A binary stream's reads, passed through, with the CRC32C and the count of every byte read.

    One pass over a file can then both parse its records and checksum it: a second pass would
    download a shard on an object store twice.

    Attributes:
        path: the name errors give the stream.
        size: bytes read so far.
    """

    def __init__(self, stream: BinaryIO, path: str):
        self._read = stream.read
        self.path = path
        self.size = 0
        self._crc = 0

    def read(self, size: int = -1) -> bytes:
        data = self._read(size)
        self._crc = _crc32c(data, self._crc)
        self.size += len(data)
        return data

    def crc32c(self) -> str:
        """Reads what is left, and returns the CRC32C of all the stream's bytes as `file_crc32c`
        does."""
        while self.read(1 << 20):
            pass
        return f"{self._crc:08x}"


def framed_size(payload_len: int) -> int:
    """Returns how many bytes a record of ``payload_len`` bytes occupies once framed.

    Args:
        payload_len: The record's length in bytes.

    Returns:
        ``payload_len`` plus the 12-byte header and 4-byte footer.
    """
    return payload_len + FRAMING_SIZE


class CorruptRecordError(OSError):
    """A TFRecord stream is damaged: truncated, or a checksum does not match.

    Attributes:
        path: The file (or stream name) holding the record.
        offset: Byte offset of the damaged record's first header byte, in the uncompressed
            stream.
        reason: What is wrong, e.g. "bad data CRC".
        damage_offset: Byte offset where the damage was detected, in the uncompressed stream:
            the payload's first byte for a bad data CRC, ``offset`` otherwise. This is the
            number TensorFlow's ``DataLossError`` reports.
    """

    def __init__(self, path: str, offset: int, reason: str, damage_offset: int | None = None):
        self.path = path
        self.offset = offset
        self.reason = reason
        self.damage_offset = offset if damage_offset is None else damage_offset
        # A single argument keeps OSError from reinterpreting the message as (errno, strerror).
        super().__init__(f"{path}: corrupt record at byte offset {offset}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle by their args; ours has a different constructor, and reports must
        # travel between Beam workers.
        return (type(self), (self.path, self.offset, self.reason, self.damage_offset))
