"""TFRecord framing: length-delimited, CRC32C-checked records, byte-compatible with TensorFlow."""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import os
import stat
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import crc32c
import fsspec
from fsspec.implementations.local import LocalFileOpener

from beam_tfrecord.wording import count

__all__ = [
    "COMPRESSION_TYPES",
    "CorruptRecordError",
    "TFRecordReader",
    "TFRecordWriter",
    "file_crc32c",
    "framed_size",
    "masked_crc32c",
    "open_writer",
    "parts_crc32c",
    "read_records",
]

_log = logging.getLogger(__name__)
_crc32c = crc32c.crc32c

#: Values accepted by the ``compression`` arguments (case-insensitive; None and "" mean "NONE").
COMPRESSION_TYPES = ("auto", "NONE", "GZIP", "ZLIB")

_MASK_DELTA = 0xA282EAD8
_HEADER_SIZE = 12  # uint64 length + uint32 masked CRC of the length
_FOOTER_SIZE = 4  # uint32 masked CRC of the data
_FRAMING_SIZE = _HEADER_SIZE + _FOOTER_SIZE
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER = struct.Struct("<QI")
_pack_length = _LENGTH.pack
_pack_crc = _CRC.pack
_pack_header = _HEADER.pack
# Records bound for a local file wait until this many bytes can go in one os.writev. The kernel
# writes large pieces to the page cache far more cheaply than 100 KB ones (on Linux 6.18 ext4,
# 4 MiB writes of the same bytes take about a third less time), which more than pays for the
# checksums; past 4 MiB the gain flattens while the memory held keeps growing.
_BATCH_BYTES = 4 << 20
# Payloads above this are read in pieces, so that a corrupt length whose CRC happens to match
# cannot make us allocate exabytes before noticing the file is shorter.
_MAX_SINGLE_READ = 64 << 20
_DECOMPRESS_CHUNK = 256 << 10
# TensorFlow's default (Z_DEFAULT_COMPRESSION); level 9 costs a lot of CPU for little gain.
_COMPRESS_LEVEL = 6
_SUFFIXES = {".gz": "GZIP", ".gzip": "GZIP", ".zz": "ZLIB", ".zlib": "ZLIB"}


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
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


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
    checksum = 0
    for block in iter(lambda: stream.read(1 << 20), b""):
        checksum = _crc32c(block, checksum)
    return f"{checksum:08x}"


def framed_size(payload_len: int) -> int:
    """Returns how many bytes a record of ``payload_len`` bytes occupies once framed.

    Args:
        payload_len: The record's length in bytes.

    Returns:
        ``payload_len`` plus the 12-byte header and 4-byte footer.
    """
    return payload_len + _FRAMING_SIZE


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


def _max_iovecs() -> int:
    """How many pieces one os.writev may take (IOV_MAX; POSIX promises at least 16)."""
    try:
        return max(16, os.sysconf("SC_IOV_MAX"))
    except (AttributeError, ValueError, OSError):
        return 16


def _local_file(stream: Any) -> Any:
    """Returns the plain local file under ``stream`` when writing to its descriptor is safe.

    That is an unbuffered file, or a write-only buffered one (which we flush before each
    writev), possibly inside fsspec's local file. Anything that transforms, hashes, uploads or
    reads back what it is given (GzipFile, fsspec's remote files, a wrapper of the caller's)
    returns None and gets plain ``write`` calls, since its ``fileno()`` would bypass it.
    """
    if not hasattr(os, "writev"):
        return None
    if type(stream) is LocalFileOpener:
        stream = stream.f
    kind = type(stream)
    if not (kind is io.FileIO or (kind is io.BufferedWriter and type(stream.raw) is io.FileIO)):
        return None
    if stream.closed or not stream.writable():
        return None
    return stream


class _PendingFrames:
    """Framed records waiting for one os.writev to a local file, payloads held by reference."""

    __slots__ = ("_file", "_name", "_position", "max_parts", "parts", "size")

    def __init__(self, file: Any, name: str):
        self._file = file
        self._name = name
        self.max_parts = _max_iovecs() // 3 * 3
        self.parts: list[Any] = []
        self.size = 0
        # Where our next frame must start, to catch anything else moving the file under us;
        # -1 where no position says that: pipes, devices (/dev/null stays at 0), append mode.
        self._position = -1
        file.flush()  # anything the caller wrote before us goes first
        fd = file.fileno()
        if "a" not in file.mode and stat.S_ISREG(os.fstat(fd).st_mode):
            self._position = os.lseek(fd, 0, os.SEEK_CUR)

    def drain(self) -> None:
        """Writes the pending frames in one system call (more only if the kernel takes less)."""
        parts = self.parts
        if not parts:
            return
        try:
            file = self._file
            if file.closed:
                raise ValueError(
                    f"{self._name}: closed with {count(len(parts) // 3, 'record')} still waiting in its "
                    f"TFRecordWriter; leave the writer's with block before closing the file"
                )
            file.flush()  # a buffered file's own bytes go first
            fd = file.fileno()
            if self._position >= 0:
                here = os.lseek(fd, 0, os.SEEK_CUR)
                if here != self._position:
                    raise OSError(
                        f"{self._name}: {count(len(parts) // 3, 'record')} waiting in a TFRecordWriter "
                        f"were not written: something else wrote to the file or moved its "
                        f"position (the next record was to start at byte {self._position}, "
                        f"the file is at byte {here})"
                    )
            size = self.size
            written = os.writev(fd, parts)
            while written < size:
                parts, size = _unwritten(parts, written), size - written
                written = os.writev(fd, parts)
            if self._position >= 0:
                self._position += self.size
        finally:
            self.parts.clear()
            self.size = 0


def _unwritten(parts: list[Any], written: int) -> list[Any]:
    """The pieces of ``parts`` past its first ``written`` bytes."""
    for index, part in enumerate(parts):
        view = memoryview(part).cast("B")  # a memoryview's len() counts items, not bytes
        if written < len(view):
            return [view[written:], *parts[index + 1 :]]
        written -= len(view)
    return []


class TFRecordWriter:
    """Writes TFRecord frames to a binary stream that the caller opened and will close.

    Each record becomes: uint64 LE length, uint32 LE masked CRC32C of those 8 bytes, the
    data, uint32 LE masked CRC32C of the data.

    Used as a context manager on a plain local file (``open(path, "wb")``, unbuffered too, or
    fsspec's local files, as ``open_writer`` uses it), the writer batches: it keeps up to 4 MiB
    of frames, payloads by reference and never copied, and hands them to the kernel in one
    ``os.writev``, which costs the kernel much less than record-sized writes. Pending frames
    reach the file on ``flush()``, ``close()`` and when the ``with`` block exits, so the file
    must be closed after that; the bytes are exactly those that writing each record at once
    gives. Until then the file's own ``tell()`` does not count them, and nothing else may write
    to it (that raises OSError when the frames go out). Records that are not ``bytes`` (a
    bytearray, a memoryview) may be changed by the caller afterwards, so they go out before
    ``write`` returns. Outside a ``with`` block, and on any other stream, each record's three
    pieces go to ``stream.write`` before ``write`` returns, as three calls.

    Example:
        >>> buffer = io.BytesIO()
        >>> writer = TFRecordWriter(buffer)
        >>> writer.write(b"foo")
        19
    """

    def __init__(self, stream: BinaryIO, *, checksum: bool = False):
        """Wraps ``stream``, which must accept every byte of each ``write`` call.

        Args:
            stream: An open, writable binary stream (buffered file, fsspec file, BytesIO).
                The writer never closes it.
            checksum: Keep the CRC32C of every byte written (``crc32c``): the file's checksum,
                for the price of one more CRC of each record, without reading the file back.
        """
        self._stream = stream
        self._checksum = 0 if checksum else None
        self._records = 0
        self._bytes = 0
        self._closed = False
        # Records wait only within a with block: its end is certain to come, and before the
        # caller closes the file, which a garbage-collected writer could not promise.
        self._pending: _PendingFrames | None = None

    framed_size = staticmethod(framed_size)

    @property
    def records_written(self) -> int:
        """Number of records written so far."""
        return self._records

    @property
    def bytes_written(self) -> int:
        """Number of (uncompressed) bytes written so far, framing included."""
        return self._bytes

    @property
    def crc32c(self) -> int:
        """The CRC32C (unmasked, as ``gcloud storage hash`` gives it) of every byte written so far.

        Raises:
            ValueError: If the writer was made without ``checksum=True``.
        """
        if self._checksum is None:
            raise ValueError("this TFRecordWriter keeps no checksum; pass checksum=True")
        return self._checksum

    def write(self, record: bytes | bytearray | memoryview) -> int:
        """Frames and writes one record.

        The payload is handed on as is, never concatenated with its header: for large records
        a copy would cost as much as the checksum.

        Args:
            record: The payload, any contiguous bytes-like object.

        Returns:
            The number of bytes written (``framed_size(len(record))``).

        Raises:
            TypeError: If ``record`` is not bytes-like (a str, say).
            ValueError: If the writer is closed.
        """
        if type(record) is bytes:  # the common case first: a type check is cheaper than isinstance
            length = len(record)
        elif isinstance(record, (bytearray, memoryview)):
            length = memoryview(record).nbytes
        else:
            raise TypeError(f"record must be bytes-like, got {type(record).__name__}")
        if self._closed:
            raise ValueError("write to a closed TFRecordWriter")
        # masked_crc32c inlined: this runs once per record, and for small records the cost of
        # two more Python calls is a measurable share of the whole.
        crc = _crc32c(_pack_length(length))
        header = _pack_header(length, (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)
        pending = self._pending
        if pending is None:
            write = self._stream.write
            write(header)
            write(record)
            # Checksummed after the stream took the payload, so the payload is hot in cache.
            crc = _crc32c(record)
            footer = _pack_crc((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)
            write(footer)
        else:
            crc = _crc32c(record)
            footer = _pack_crc((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)
            parts = pending.parts
            parts += (header, record, footer)
            pending.size += length + _FRAMING_SIZE
            # Only bytes are immutable; a caller may reuse any other buffer once we return.
            if (
                pending.size >= _BATCH_BYTES
                or len(parts) >= pending.max_parts
                or type(record) is not bytes
            ):
                pending.drain()
        if self._checksum is not None:
            self._checksum = _crc32c(footer, _crc32c(record, _crc32c(header, self._checksum)))
        size = length + _FRAMING_SIZE
        self._records += 1
        self._bytes += size
        return size

    def write_parts(self, parts: Sequence[bytes], *, crc: int | None = None) -> int:
        """Frames and writes one record given as pieces, the record being their concatenation.

        The pieces are never joined: a large payload (an image) between a small head and tail
        goes to the file without a copy. The bytes written are those of ``write(b"".join(parts))``.

        Args:
            parts: The record's pieces, each ``bytes``.
            crc: The record's CRC32C (unmasked, ``parts_crc32c(parts)``), when the caller has
                it already: worked out on another thread, it leaves this one only the writing.

        Returns:
            The number of bytes written.

        Raises:
            TypeError: If a piece is not ``bytes``.
            ValueError: If the writer is closed.
        """
        length = 0
        for part in parts:
            if type(part) is not bytes:
                raise TypeError(f"record parts must be bytes, got {type(part).__name__}")
            length += len(part)
        if crc is None:
            crc = parts_crc32c(parts)
        if self._closed:
            raise ValueError("write to a closed TFRecordWriter")
        head_crc = _crc32c(_pack_length(length))
        header = _pack_header(
            length, (((head_crc >> 15) | (head_crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
        )
        footer = _pack_crc((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)
        pending = self._pending
        if pending is None:
            write = self._stream.write
            write(header)
            for part in parts:
                write(part)
            write(footer)
        else:
            if len(parts) + 2 > pending.max_parts:  # more pieces than one writev takes
                parts = [b"".join(parts)]
            if len(pending.parts) + len(parts) + 2 > pending.max_parts:
                pending.drain()
            pending.parts += (header, *parts, footer)
            pending.size += length + _FRAMING_SIZE
            if pending.size >= _BATCH_BYTES:
                pending.drain()
        if self._checksum is not None:
            checksum = _crc32c(header, self._checksum)
            for part in parts:
                checksum = _crc32c(part, checksum)
            self._checksum = _crc32c(footer, checksum)
        size = length + _FRAMING_SIZE
        self._records += 1
        self._bytes += size
        return size

    def flush(self) -> None:
        """Writes the pending records to the stream, then flushes the stream."""
        if self._pending is not None:
            self._pending.drain()
        self._stream.flush()

    def close(self) -> None:
        """Writes the pending records to the stream, which stays open; then refuses records.

        Raises:
            ValueError: If the file was closed while records were pending.
        """
        if self._closed:
            return
        self._closed = True
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.drain()

    def __enter__(self) -> TFRecordWriter:
        if self._pending is None and not self._closed:
            file = _local_file(self._stream)
            if file is not None:
                self._pending = _PendingFrames(file, _name_of(self._stream))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class _ZlibWriter(io.RawIOBase):
    """A write-only stream that zlib-compresses (with zlib header, as TensorFlow's ZLIB does)."""

    def __init__(self, stream: BinaryIO):
        super().__init__()
        self._stream = stream
        self._compressor = zlib.compressobj(_COMPRESS_LEVEL)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._stream.write(self._compressor.compress(data))
        return memoryview(data).nbytes

    def close(self) -> None:
        # Closing finishes the zlib stream but leaves the underlying file to its owner.
        if not self.closed:
            self._stream.write(self._compressor.flush())
        super().close()


class _ZlibReader(io.RawIOBase):
    """A read-only stream that inflates a zlib stream (the counterpart of _ZlibWriter)."""

    def __init__(self, stream: Any):
        super().__init__()
        self._stream = stream
        self._decompressor = zlib.decompressobj()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as view, view.cast("B") as out:
            while not self._decompressor.eof:
                pending = self._decompressor.unconsumed_tail
                if not pending:
                    pending = self._stream.read(_DECOMPRESS_CHUNK)
                    if not pending:
                        raise EOFError("zlib stream ended before its end-of-stream marker")
                # max_length bounds memory: the rest waits in unconsumed_tail.
                data = self._decompressor.decompress(pending, len(out))
                if data:
                    out[: len(data)] = data
                    return len(data)
            return 0


class _Prefixed:
    """A read-only stream that replays bytes consumed while sniffing, then reads on."""

    def __init__(self, head: bytes, stream: Any):
        self._head = head
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if not self._head:
            return self._stream.read(size)
        if size is None or size < 0:
            data, self._head = self._head + self._stream.read(), b""
            return data
        data, self._head = self._head[:size], self._head[size:]
        return data


def _normalize(compression: str | None) -> str:
    if compression is None or compression == "":
        return "NONE"
    upper = compression.upper()
    if upper == "AUTO":
        return "auto"
    if upper not in COMPRESSION_TYPES:
        raise ValueError(
            f"unknown compression {compression!r}; expected one of {', '.join(COMPRESSION_TYPES)}"
        )
    return upper


def _from_suffix(path: str) -> str | None:
    dot = path.rfind(".")
    return _SUFFIXES.get(path[dot:].lower()) if dot >= 0 else None


def _sniff(head: bytes) -> str:
    """Guesses the compression of a stream from its first (up to 12) bytes."""
    if len(head) == _HEADER_SIZE and _CRC.unpack_from(head, 8)[0] == masked_crc32c(head[:8]):
        return "NONE"
    if head[:2] == b"\x1f\x8b":
        return "GZIP"
    # A zlib header: deflate method, window <= 32K, and the 16-bit header a multiple of 31.
    if (
        len(head) >= 2
        and head[0] & 0x0F == 8
        and head[0] >> 4 <= 7
        and (head[0] << 8 | head[1]) % 31 == 0
    ):
        return "ZLIB"
    # Unknown content is read as uncompressed, so the error names the bad header.
    return "NONE"


def _sniffed(stream: Any) -> tuple[str, Any]:
    """Sniffs a stream's compression; returns it and a stream positioned where it was."""
    # Seek back when we can; otherwise replay the sniffed bytes in front of the stream.
    seekable = getattr(stream, "seekable", None)
    if seekable is not None and seekable():
        start = stream.tell()
        head = stream.read(_HEADER_SIZE)
        stream.seek(start)
        return _sniff(head), stream
    head = stream.read(_HEADER_SIZE)
    return _sniff(head), _Prefixed(head, stream)


def _name_of(stream: Any) -> str:
    for attribute in ("path", "name"):
        name = getattr(stream, attribute, None)
        if isinstance(name, str) and name:
            return name
    return f"<{type(stream).__name__}>"


@contextlib.contextmanager
def open_writer(
    url: str, compression: str | None = "auto", **storage_options: Any
) -> Iterator[TFRecordWriter]:
    """Opens a TFRecord file for writing, on any filesystem fsspec knows.

    GZIP output is deterministic (no timestamp, no file name in the header), so the same
    records always give the same bytes.

    Args:
        url: A local path or fsspec URL (``gs://bucket/train.tfrecord``, ``memory://x``).
        compression: "NONE", "GZIP", "ZLIB" or "auto", which picks GZIP for ``.gz``/``.gzip``
            suffixes, ZLIB for ``.zz``/``.zlib`` and NONE otherwise.
        **storage_options: Passed to ``fsspec.open`` (credentials, project, ...).

    Yields:
        A TFRecordWriter; the file is finished and closed when the block exits.

    Raises:
        ValueError: If ``compression`` is not one of the accepted values.
    """
    codec = _normalize(compression)
    if codec == "auto":
        codec = _from_suffix(url) or "NONE"
    with fsspec.open(url, "wb", **storage_options) as raw:
        if codec == "NONE":
            # Closing the writer writes the records it batched, before the file closes.
            with TFRecordWriter(raw) as writer:
                yield writer
            return
        if codec == "GZIP":
            # filename="" keeps the file's name out of the header, mtime=0 the clock.
            stream: Any = gzip.GzipFile(
                filename="", mode="wb", compresslevel=_COMPRESS_LEVEL, fileobj=raw, mtime=0
            )
        else:
            stream = _ZlibWriter(raw)
        try:
            with TFRecordWriter(stream) as writer:
                yield writer
        finally:
            stream.close()


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
        source: str | BinaryIO,
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
        self._source = source
        self._compression = _normalize(compression)
        self._skip_damaged = skip_damaged
        self._with_offsets = with_offsets
        self._log_damage = log_damage
        self._storage_options = storage_options
        self.path = source if isinstance(source, str) else _name_of(source)
        self.damage: list[CorruptRecordError] = []
        self.records_read = 0

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self._source, str):
            with fsspec.open(self._source, "rb", **self._storage_options) as stream:
                yield from self._read(stream)
        else:
            yield from self._read(self._source)

    def _read(self, stream: Any) -> Iterator[Any]:
        codec = self._compression
        if codec == "auto":
            codec = _from_suffix(self.path) or ""
            if not codec:
                codec, stream = _sniffed(stream)
        if codec == "GZIP":
            stream = gzip.GzipFile(fileobj=stream, mode="rb")
        elif codec == "ZLIB":
            stream = io.BufferedReader(_ZlibReader(stream), _DECOMPRESS_CHUNK)
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
                if size <= _MAX_SINGLE_READ:
                    data = read(size)
                    while 0 < len(data) < size:  # pipes and network streams may return less
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
            except (EOFError, zlib.error, gzip.BadGzipFile) as error:
                raise CorruptRecordError(
                    path, offset, f"bad {codec} stream while reading the {what}: {error}"
                ) from error

        while True:
            header = read_exact(_HEADER_SIZE, "header")
            if not header:
                return
            if len(header) < _HEADER_SIZE:
                raise CorruptRecordError(
                    path, offset, f"truncated header ({len(header)} of {_HEADER_SIZE} bytes)"
                )
            length, length_crc = _HEADER.unpack(header)
            if length_crc != masked_crc32c(header[:8]):
                raise CorruptRecordError(path, offset, "bad length CRC")
            data = read_exact(length, "payload")
            if len(data) < length:
                raise CorruptRecordError(
                    path, offset, f"truncated payload ({len(data)} of {length} bytes)"
                )
            footer = read_exact(_FOOTER_SIZE, "footer")
            if len(footer) < _FOOTER_SIZE:
                raise CorruptRecordError(
                    path, offset, f"truncated footer ({len(footer)} of {_FOOTER_SIZE} bytes)"
                )
            start, offset = offset, offset + length + _FRAMING_SIZE
            if _CRC.unpack(footer)[0] != masked_crc32c(data):
                error = CorruptRecordError(
                    path,
                    start,
                    f"bad data CRC (payload at byte offset {start + _HEADER_SIZE})",
                    damage_offset=start + _HEADER_SIZE,
                )
                if not self._skip_damaged:
                    raise error
                # The framing is intact, so the next record starts where it should.
                self._note(error)
                continue
            self.records_read += 1
            yield (start, data) if self._with_offsets else data


def read_records(
    source: str | BinaryIO,
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
