"""Reading TFRecord files: every record checked against its CRCs, damage named with its offset."""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import os
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import fsspec

from beam_tfrecord.codec.compression import (
    DECOMPRESS_CHUNK,
    ZlibReader,
    compression_type,
    sniffed,
    stream_name,
    type_from_suffix,
)
from beam_tfrecord.codec.framing import (
    CRC,
    FOOTER_SIZE,
    FRAMING_SIZE,
    HEADER,
    HEADER_SIZE,
    CorruptRecordError,
    masked_crc32c,
)
from beam_tfrecord.storage import sequential_read_options

__all__ = ["NOT_A_TFRECORD_FILE", "TFRecordReader", "begins_as_tfrecord", "read_records"]


_log = logging.getLogger(__name__)


# The damage of a file whose first bytes are no record's header: most likely not a TFRecord file
# at all (an image, say), which "corrupt" would misdescribe.
NOT_A_TFRECORD_FILE = "bad length CRC: not a TFRecord file?"

# Payloads above this are read in pieces, so that a corrupt length whose CRC happens to match
# cannot make us allocate exabytes before noticing the file is shorter.
_MAX_SINGLE_READ = 64 << 20


class TFRecordReader:
    """Iterates over the records of a TFRecord file or stream, checking every CRC.

    Reading is streaming: one record is in memory at a time. By default the first damage
    raises CorruptRecordError. With ``skip_damaged=True`` the reader salvages what it can: a
    record whose data CRC is wrong but whose framing is intact is skipped and reading goes on;
    framing damage (truncation, a bad length CRC, a broken compressed stream) ends reading,
    since the next record's start is unknown. Each damage is kept in ``damage`` and logged as
    a warning.

    Example:
        >>> reader = TFRecordReader("shard.tfrecord", skip_damaged=True)
        >>> records = list(reader)
        >>> reader.damage
        []

    Attributes:
        damage: The damage met so far (only grows when ``skip_damaged`` is set).
        records_read: Number of intact records yielded so far.
    """

    def __init__(
        self,
        source: str | os.PathLike | BinaryIO,
        compression: str | None = "auto",
        *,
        skip_damaged: bool = False,
        with_offsets: bool = False,
        log_damage: bool = True,
        **storage_options: Any,
    ):
        """Prepares to read ``source``; nothing is opened until iteration starts.

        Args:
            source: A path or fsspec URL, or an open binary stream (read from its current
                position, which counts as offset 0; the reader does not close it).
            compression: "NONE", "GZIP", "ZLIB" or "auto": by suffix as for ``open_writer``
                and, when the suffix says nothing, by sniffing the first bytes.
            skip_damaged: Salvage instead of raising, as described above.
            with_offsets: Yield ``(offset, record)`` pairs instead of records, where offset is
                the record's first byte in the uncompressed stream.
            log_damage: Log each damage as a warning; callers that report ``damage``
                themselves may turn this off.
            **storage_options: Passed to ``fsspec.open`` when ``source`` is a URL.

        Raises:
            ValueError: If ``compression`` is not one of the accepted values.
        """
        # A path given as a `pathlib.Path` (any os.PathLike) is the path it names.
        self._source = os.fspath(source) if isinstance(source, os.PathLike) else source
        source = self._source
        self._compression = compression_type(compression)
        self._skip_damaged = skip_damaged
        self._with_offsets = with_offsets
        self._log_damage = log_damage
        self._storage_options = storage_options
        self.path = source if isinstance(source, str) else stream_name(source)
        self.damage: list[CorruptRecordError] = []
        self.records_read = 0

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self._source, str):
            fs, path = fsspec.core.url_to_fs(self._source, **self._storage_options)
            with fs.open(path, "rb", **sequential_read_options(fs)) as stream:
                yield from self._read(stream)
        else:
            yield from self._read(self._source)

    def _read(self, stream: Any) -> Iterator[Any]:
        codec = self._compression
        if codec == "auto":
            codec = type_from_suffix(self.path) or ""
            if not codec:
                codec, stream = sniffed(stream)
        if codec == "GZIP":
            stream = gzip.GzipFile(fileobj=stream, mode="rb")
        elif codec == "ZLIB":
            stream = io.BufferedReader(ZlibReader(stream), DECOMPRESS_CHUNK)
        try:
            yield from self._frames(stream, codec)
        except CorruptRecordError as error:
            if not self._skip_damaged:
                raise
            self._note(error)

    def _note(self, error: CorruptRecordError) -> None:
        if self._log_damage:
            _log.warning("%s", error)
        self.damage.append(error)

    def _frames(self, stream: Any, codec: str) -> Iterator[Any]:
        path = self.path
        read = stream.read
        offset = 0

        def read_exact(size: int, what: str) -> bytes:
            # Compressed streams report damage as their own exception types; name the file.
            try:
                return _read_up_to(read, size)
            except (EOFError, zlib.error, gzip.BadGzipFile) as error:
                raise CorruptRecordError(
                    path, offset, f"bad {codec} stream while reading the {what}: {error}"
                ) from error

        while True:
            header = read_exact(HEADER_SIZE, "header")
            if not header:
                return
            if len(header) < HEADER_SIZE:
                raise CorruptRecordError(
                    path, offset, f"truncated header ({len(header)} of {HEADER_SIZE} bytes)"
                )
            length, length_crc = HEADER.unpack(header)
            if length_crc != masked_crc32c(header[:8]):
                # At the very start, no record of any length begins here.
                reason = NOT_A_TFRECORD_FILE if offset == 0 else "bad length CRC"
                raise CorruptRecordError(path, offset, reason)
            data = read_exact(length, "payload")
            if len(data) < length:
                raise CorruptRecordError(
                    path, offset, f"truncated payload ({len(data)} of {length} bytes)"
                )
            footer = read_exact(FOOTER_SIZE, "footer")
            if len(footer) < FOOTER_SIZE:
                raise CorruptRecordError(
                    path, offset, f"truncated footer ({len(footer)} of {FOOTER_SIZE} bytes)"
                )
            start, offset = offset, offset + length + FRAMING_SIZE
            if CRC.unpack(footer)[0] != masked_crc32c(data):
                error = CorruptRecordError(
                    path,
                    start,
                    f"bad data CRC (payload at byte offset {start + HEADER_SIZE})",
                    damage_offset=start + HEADER_SIZE,
                )
                if not self._skip_damaged:
                    raise error
                # The framing is intact, so the next record starts where it should.
                self._note(error)
                continue
            self.records_read += 1
            yield (start, data) if self._with_offsets else data


def _read_up_to(read: Callable[[int], bytes], size: int) -> bytes:
    """`size` bytes from `read`, or fewer where the stream ends: pipes and network streams may
    return less than asked before their end, and a large record is read in pieces."""
    if size <= _MAX_SINGLE_READ:
        data = read(size)
        while 0 < len(data) < size:
            more = read(size - len(data))
            if not more:
                break
            data += more
        return data
    pieces, missing = [], size
    while missing:
        piece = read(min(missing, _MAX_SINGLE_READ))
        if not piece:
            break
        pieces.append(piece)
        missing -= len(piece)
    return b"".join(pieces)


def read_records(
    source: str | os.PathLike | BinaryIO,
    compression: str | None = "auto",
    skip_damaged: bool = False,
    with_offsets: bool = False,
    **storage_options: Any,
) -> Iterator[Any]:
    """Yields the records of a TFRecord file or stream, checking every CRC.

    A thin wrapper around TFRecordReader, for callers that need no damage report.

    Args:
        source: A path or fsspec URL, or an open binary stream.
        compression: "NONE", "GZIP", "ZLIB" or "auto" (suffix, then content).
        skip_damaged: Skip records with a bad data CRC and stop at framing damage instead of
            raising; each is logged as a warning.
        with_offsets: Yield ``(offset, record)`` pairs, offsets in the uncompressed stream.
        **storage_options: Passed to ``fsspec.open`` when ``source`` is a URL.

    Yields:
        Each record's payload as bytes (or ``(offset, bytes)``).

    Raises:
        CorruptRecordError: On the first damage, naming the file and record offset (unless
            ``skip_damaged``).
        FileNotFoundError: If ``source`` names no file.
    """
    return iter(
        TFRecordReader(
            source,
            compression,
            skip_damaged=skip_damaged,
            with_offsets=with_offsets,
            **storage_options,
        )
    )


def begins_as_tfrecord(
    source: str | os.PathLike | BinaryIO, compression: str | None = "auto", **storage_options: Any
) -> bool:
    """Whether a file begins as a TFRecord file does: it is empty, or its first bytes are a
    record's header, whose length CRC other bytes match once in 2**32. Damage past that header
    (a shard cut short, a record's bad data CRC) is a TFRecord file's damage.

    Args:
        source: A path or fsspec URL, or an open binary stream.
        compression: "NONE", "GZIP", "ZLIB" or "auto" (suffix, then content).
        **storage_options: Passed to ``fsspec.open`` when ``source`` is a URL.

    Raises:
        FileNotFoundError: If ``source`` names no file.
    """
    reader = TFRecordReader(
        source, compression, skip_damaged=True, log_damage=False, **storage_options
    )
    records = iter(reader)
    with contextlib.closing(records):  # the file closed at once, its first record read
        for _ in records:
            return True
    return not any(error.reason == NOT_A_TFRECORD_FILE for error in reader.damage)
