"""TFRecord compression: NONE, GZIP and ZLIB streams, named by suffix or recognised by content."""

from __future__ import annotations

import io
import zlib
from typing import Any, BinaryIO

from beam_tfrecord.codec.framing import CRC, HEADER_SIZE, masked_crc32c

__all__ = [
    "COMPRESSION_TYPES",
    "COMPRESS_LEVEL",
    "DECOMPRESS_CHUNK",
    "ZlibReader",
    "ZlibWriter",
    "compression_type",
    "sniffed",
    "stream_name",
    "type_from_suffix",
]


#: Values accepted by the ``compression`` arguments (case-insensitive; None and "" mean "NONE").
COMPRESSION_TYPES = ("auto", "NONE", "GZIP", "ZLIB")
DECOMPRESS_CHUNK = 256 << 10


# TensorFlow's default (Z_DEFAULT_COMPRESSION); level 9 costs a lot of CPU for little gain.
COMPRESS_LEVEL = 6
_SUFFIXES = {".gz": "GZIP", ".gzip": "GZIP", ".zz": "ZLIB", ".zlib": "ZLIB"}


class ZlibWriter(io.RawIOBase):
    """A write-only stream that zlib-compresses (with zlib header, as TensorFlow's ZLIB does)."""

    def __init__(self, stream: BinaryIO):
        super().__init__()
        self._stream = stream
        self._compressor = zlib.compressobj(COMPRESS_LEVEL)

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


class ZlibReader(io.RawIOBase):
    """A read-only stream that inflates a zlib stream (the counterpart of ZlibWriter)."""

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
                    pending = self._stream.read(DECOMPRESS_CHUNK)
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


def compression_type(compression: str | None) -> str:
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


def type_from_suffix(path: str) -> str | None:
    dot = path.rfind(".")
    return _SUFFIXES.get(path[dot:].lower()) if dot >= 0 else None


def _sniff(head: bytes) -> str:
    """Guesses the compression of a stream from its first (up to 12) bytes."""
    if len(head) == HEADER_SIZE and CRC.unpack_from(head, 8)[0] == masked_crc32c(head[:8]):
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


def sniffed(stream: Any) -> tuple[str, Any]:
    """Sniffs a stream's compression; returns it and a stream positioned where it was."""
    # Seek back when we can; otherwise replay the sniffed bytes in front of the stream.
    seekable = getattr(stream, "seekable", None)
    if seekable is not None and seekable():
        start = stream.tell()
        head = stream.read(HEADER_SIZE)
        stream.seek(start)
        return _sniff(head), stream
    head = stream.read(HEADER_SIZE)
    return _sniff(head), _Prefixed(head, stream)


def stream_name(stream: Any) -> str:
    for attribute in ("path", "name"):
        name = getattr(stream, attribute, None)
        if isinstance(name, str) and name:
            return name
    return f"<{type(stream).__name__}>"
