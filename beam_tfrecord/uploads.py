"""Uploading a shard to an object store: published only when committed, its bytes copied little.

A shard on an object store is written under its final name as an upload that no reader sees until
it is committed, and that an abort cancels. `open_upload` gives a write-only file for that.

On Google Cloud Storage it is our own `GcsUpload`, on gcsfs's requests (`_call`, so its
credentials, retries and options hold): the shard's bytes go into one growing buffer and are sent
from it in slices, so each byte is copied once on its way to the socket. Through gcsfs's own file
a byte was copied four to five times (the file's buffer, its `getvalue`, the multipart body, then
the event loop's send buffer, which on Python 3.11 takes a whole 64 MiB request at once), each
copy into fresh memory the kernel had to fault in: about 3 ms of CPU per MB uploaded, 300 us for
a 100 KB image, as much as reading it. `GcsUpload` takes about 0.5 ms per MB.

Elsewhere (S3, and zonal GCS buckets, which gcsfs writes over gRPC) it is the filesystem's own
buffered file, written on a thread of its own (`BufferedUpload`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import mmap
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

import fsspec
from fsspec.asyn import sync
from fsspec.spec import AbstractBufferedFile

from beam_tfrecord.locations import is_gcsfs, is_s3fs

__all__ = [
    "UPLOAD_BLOCK_SIZE",
    "BackgroundWriter",
    "Blocks",
    "BufferedUpload",
    "GcsUpload",
    "Upload",
    "body_of",
    "cancel_sending",
    "open_upload",
    "unsent",
    "upload_block_size",
]

_LOG = logging.getLogger(__name__)

# Bytes per upload request of a shard, at least. gcsfs sends 5 MiB per request by default: a
# 150 MB shard is 30 requests, each a round trip the upload thread waits for, and each appended
# to the object so far (fake-gcs-server copies it again each time). A 100 MB upload through the
# benchmarks' proxy took 2.35-2.76 s and 1.45-1.57 s of the server's CPU in 16 MiB requests,
# 1.77-1.83 s and 0.86-0.90 s in 64 MiB ones. The writer holds up to two blocks in memory per
# shard it writes, one filling and one on its way (a build on a store writes up to four at once:
# two read, two publish).
UPLOAD_BLOCK_SIZE = 64 * 1024 * 1024

# GCS takes the parts of a resumable upload, all but the last, in multiples of 256 KiB.
_GCS_QUANTUM = 256 * 1024
# Bytes handed to the event loop's transport at a time: small enough that its send buffer never
# copies much, large enough that a 64 MiB request is a few dozen steps of the loop.
_SLICE = 1024 * 1024
_CONTENT_TYPE = "application/octet-stream"


class Upload(Protocol):
    """A write-only shard file on an object store."""

    def write(self, data: bytes | memoryview) -> int: ...

    def flush(self) -> None:
        """Nothing: what was written is sent in blocks, and the rest by `commit`."""

    def commit(self) -> None:
        """Publishes what was written, whole, under the file's name."""

    def abandon(self) -> None:
        """Cancels the upload: nothing of it appears, and the store keeps nothing of it."""


def upload_block_size(fs: fsspec.AbstractFileSystem) -> int:
    """Bytes per upload request for a shard on `fs`: the filesystem's default, if larger."""
    return max(getattr(fs, "default_block_size", 0) or 0, UPLOAD_BLOCK_SIZE)


def open_upload(fs: fsspec.AbstractFileSystem, path: str, block_size: int) -> Upload:
    """An upload of `path` on the object store `fs`, sent `block_size` bytes per request."""
    if _is_plain_gcs(fs, path):
        return GcsUpload(fs, path, block_size)
    if is_s3fs(fs):
        from beam_tfrecord.s3_upload import open_s3_upload

        return open_s3_upload(fs, path, block_size, BufferedUpload)
    return BufferedUpload(fs, path, block_size)


def _is_plain_gcs(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    """Whether `fs` is gcsfs and the bucket takes JSON-API uploads (every bucket but a zonal one)."""
    if not is_gcsfs(fs):
        return False
    is_zonal = getattr(fs, "_is_zonal_bucket", None)
    if is_zonal is None:
        return True
    bucket, _, _ = fs.split_path(path)
    return not sync(fs.loop, is_zonal, bucket)


def body_of(parts: list[memoryview]):
    """An HTTP body sent from buffers in place, a slice at a time (an aiohttp payload).

    aiohttp would hand a bytes body to the transport whole, and the transport copies what the
    socket does not take at once into its own buffer. A slice at a time, waiting for the socket
    to drain between them, nothing large is ever copied. The body can be sent again (gcsfs
    retries a request whose connection failed).
    """
    return _slices_type()(parts)


@functools.cache
def _slices_type() -> type:
    from aiohttp import payload  # gcsfs's own HTTP client, loaded with it

    class Slices(payload.Payload):
        def __init__(self, parts: list[memoryview]):
            super().__init__(parts, content_type=None)
            self.parts = parts
            self._size = sum(len(p) for p in parts)

        def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
            raise TypeError("a shard's bytes are not text")

        async def write(self, writer) -> None:
            await self.write_with_length(writer, None)

        async def write_with_length(self, writer, content_length: int | None) -> None:
            left = self._size if content_length is None else content_length
            for part in self.parts:
                for start in range(0, len(part), _SLICE):
                    if left <= 0:
                        return
                    piece = part[start : start + min(_SLICE, left)]
                    await writer.write(piece)
                    left -= len(piece)

    return Slices


class GcsUpload:
    """A shard uploaded to GCS from its own buffer, committed whole or not at all.

    Written bytes gather in a buffer. A shard that never fills a block goes up in one simple
    request at `commit`. A larger one starts a resumable upload when its first block is full and
    sends each block in the background, on gcsfs's event loop, while the next one fills; the last
    part, sent at `commit`, completes the object. Until then no reader sees anything, and
    `abandon` deletes the upload session.
    """

    def __init__(self, fs, path: str, block_size: int):
        self._fs = fs
        self._bucket, self._key, _ = fs.split_path(path)
        # GCS takes a resumable upload's parts in multiples of 256 KiB (a filesystem's own
        # block size, which `upload_block_size` may give, need not be one).
        self._block = max(block_size // _GCS_QUANTUM, 1) * _GCS_QUANTUM
        self._blocks = Blocks(self._block)
        self._sent = 0  # bytes before the buffer, sent or on their way
        self._session_url: str | None = None  # the resumable upload's session, once started
        self._sending: Future | None = None  # the block on its way
        self._checker = _checker(fs)

    def write(self, data: bytes | memoryview) -> int:
        self._blocks.write(data, self._send_block)
        return len(data)

    def flush(self) -> None:
        pass

    def commit(self) -> None:
        self._wait()
        body = self._blocks.filled()
        if self._session_url is None:
            done = sync(self._fs.loop, self._send_whole, body)
        else:
            done = sync(self._fs.loop, self._send_part, body, self._sent, True)
        self._checker.update(body)
        self._checker.validate_json_response(done)
        self._blocks.release(keep=True)

    def abandon(self) -> None:
        cancel_sending(self._sending)
        self._sending = None
        self._blocks.release(keep=False)
        location, self._session_url = self._session_url, None
        if location is not None:
            try:
                self._fs.call("DELETE", location.replace("&ifGenerationMatch=0", ""))
            except Exception as err:  # the shard's own error is the one to raise
                _LOG.warning("could not cancel the unfinished upload of %s: %s", self._key, err)

    def _send_block(self) -> None:
        self._wait()
        if self._session_url is None:
            self._session_url = sync(self._fs.loop, self._start)
        block = self._blocks.filled()  # a whole block: a multiple of _GCS_QUANTUM
        self._checker.update(block)
        self._sending = asyncio.run_coroutine_threadsafe(
            self._send_part(block, self._sent, False), self._fs.loop
        )
        self._sent += len(block)
        self._blocks.turn()

    def _wait(self) -> None:
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.result()

    async def _start(self) -> str:
        headers, _ = await self._fs._call(
            "POST",
            f"{self._fs._location}/upload/storage/v1/b/{_quote(self._bucket)}/o",
            uploadType="resumable",
            json={"name": self._key},
            headers={"X-Upload-Content-Type": _CONTENT_TYPE},
        )
        location = headers["Location"]
        return location[0] if isinstance(location, list) else location

    async def _send_part(self, body: memoryview, offset: int, last: bool) -> dict | None:
        """Sends `body` as the upload's bytes from `offset`; all of them when `last`."""
        while True:
            end = offset + len(body)
            if last:
                span = f"bytes {offset}-{end - 1}/{end}" if len(body) else f"bytes */{end}"
            else:
                span = f"bytes {offset}-{end - 1}/*"
            headers, text = await self._fs._call(
                "POST",
                self._session_url,
                headers={"Content-Range": span, "Content-Type": _CONTENT_TYPE},
                data=body_of([body]),
            )
            # A part the store kept only some of says so (308, Range: bytes=0-N); the rest
            # goes again, from there.
            kept = headers.get("Range")
            if kept is not None:
                through = int(kept.rsplit("-", 1)[1]) + 1
                if through < end:
                    body, offset = body[through - offset :], through
                    continue
            return json.loads(text) if text else None

    async def _send_whole(self, body: memoryview) -> dict:
        """The whole object in one simple ("media") request: its name in the URL, its bytes the
        body. A multipart request would carry the same name as JSON beside the bytes, for the
        store to parse out of them: the benchmarks' fake-gcs-server spent 0.19-0.40 s of
        CPU on a 64 MiB multipart upload and 0.13-0.16 s on the same bytes as media (three
        rounds each, sent straight to it on a core of its own)."""
        return await self._fs._call(
            "POST",
            f"{self._fs._location}/upload/storage/v1/b/{_quote(self._bucket)}/o",
            uploadType="media",
            name=self._key,
            headers={"Content-Type": _CONTENT_TYPE},
            data=body_of([body]),
            json_out=True,
        )


class Blocks:
    """An upload's bytes in blocks of `size`: one filling, the one before it on its way.

    A block is a buffer of its full size, made once and kept for the process's next uploads
    (`_SPARE`), not a buffer grown as bytes come and cut when full: growing one into fresh
    memory, which the kernel faults in page by page, cost 65 ms of CPU a 150 MB shard, written
    into kept blocks 10-20 ms (100 KB records, 64 MiB blocks). A 15,000-image s3:// build at
    20 ms (1.5 GB) took 1,340 us of CPU an image against 1,370, and 22.8 s against 23.3
    (`bench_bucket.py --images 15000 --against`); a build of 300 MB fills its kept blocks for
    the first time, and gains nothing.

    The owner sends a full block (`full`), and must see the block before it sent (waited for)
    before this one fills again: the two take turns.
    """

    __slots__ = ("_buffers", "_view", "size", "used")

    def __init__(self, size: int):
        self.size = size
        self.used = 0
        # [filling, the one before it]: the second made at the first turn
        self._buffers = [_take_buffer(size)]
        self._view = memoryview(self._buffers[0])

    @property
    def full(self) -> bool:
        return self.used == self.size

    def fill(self, data: memoryview) -> int:
        """Copies as much of `data` as the filling block holds; how many bytes that was."""
        taken = min(len(data), self.size - self.used)
        self._view[self.used : self.used + taken] = data[:taken] if taken < len(data) else data
        self.used += taken
        return taken

    def write(
        self,
        data: bytes | memoryview,
        full: Callable[[], object],
        stopped: Callable[[], bool] = lambda: False,
    ) -> memoryview | None:
        """Copies `data` into the blocks, calling `full()` each time the filling one is full:
        it sends that block, and `turn`s. Once `stopped()` says so after that, they take no
        more; what of `data` they did not take is returned, else None."""
        rest = data
        while True:
            taken = self.fill(rest)
            if self.full:
                full()
                if stopped():
                    return memoryview(rest)[taken:]
            if taken == len(rest):
                return None
            rest = memoryview(rest)[taken:]

    def filled(self) -> memoryview:
        """The filling block's bytes so far (a view, valid until the block fills again)."""
        return self._view[: self.used]

    def turn(self) -> None:
        """The full block is on its way: the other one (sent, and waited for) fills next."""
        if len(self._buffers) == 1:
            self._buffers.append(_take_buffer(self.size))
        self._buffers.reverse()
        self._view = memoryview(self._buffers[0])
        self.used = 0

    def release(self, *, keep: bool) -> None:
        """Done with: the buffers are kept for the next upload where `keep` (every send of
        them over: not after an upload abandoned with a part maybe still on its way)."""
        self._view = memoryview(b"")
        self.used = 0
        buffers, self._buffers = self._buffers, []
        if keep:
            with _SPARE_LOCK:
                spare = _SPARE.setdefault(self.size, [])
                spare.extend(buffers[: max(0, _KEEP - len(spare))])


# Buffers of a block's size kept between a process's uploads, at most `_KEEP` of each size: the
# blocks of the two shards a process publishes at once, which its next shards take again. A
# process that uploaded keeps them (256 MiB at 64 MiB blocks), as it held them while uploading.
_SPARE: dict[int, list[mmap.mmap]] = {}
_SPARE_LOCK = threading.Lock()
_KEEP = 4


def _take_buffer(size: int) -> mmap.mmap:
    """A kept buffer of `size` bytes, else a new one: anonymous memory, which the kernel gives
    a page at a time as it is first written (a bytearray of 64 MiB is zeroed whole as it is
    made: 64 MiB held, and 26 ms, for a shard of a few KB)."""
    with _SPARE_LOCK:
        spare = _SPARE.get(size)
        if spare:
            return spare.pop()
    return mmap.mmap(-1, size)


def cancel_sending(sending: Future | None) -> None:
    """Stops a part on its way, as an upload is abandoned; its error, if any, is not the one
    to raise (the shard's own is)."""
    if sending is not None:
        sending.cancel()
        with contextlib.suppress(BaseException):
            sending.result()


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _checker(fs):
    """gcsfs's check of an upload against the store's record of it, as the filesystem asks."""
    from gcsfs.checkers import get_consistency_checker

    return get_consistency_checker(getattr(fs, "consistency", None))


class BufferedUpload:
    """An upload through the filesystem's own write-mode file, left uncommitted until `commit`.

    gcsfs and s3fs upload a block inside `write` whenever their buffer fills; a thread of its own
    (`BackgroundWriter`) does the writing, so the shard's writer goes on to the next images.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, block_size: int):
        self._fs, self._path = fs, path
        # An object store completes an upload when its file is closed, even when the writing
        # failed; without autocommit it completes only on commit(), so a failed shard never
        # appears.
        self._raw = fs.open(path, "wb", autocommit=False, block_size=block_size)
        self._out = BackgroundWriter(self._raw)

    def write(self, data: bytes | memoryview) -> int:
        return self._out.write(data)

    def flush(self) -> None:
        self._out.flush()

    def commit(self) -> None:
        from beam_tfrecord.storage import publish

        self._out.close()
        raw = self._raw
        whole = unsent(raw)
        if whole is None:
            raw.close()
            raw.commit()
        else:  # smaller than one upload block: one request, not three
            raw.closed = True  # it sent nothing, so there is nothing to cancel
            publish(self._fs, self._path, whole)

    def abandon(self) -> None:
        self._out.abandon()
        raw = self._raw
        try:
            # Frees what the store keeps of the upload so far (S3 keeps, and bills, the parts
            # of an unfinished multipart upload until it is aborted).
            raw.discard()
        except Exception as err:  # the shard's own error is the one to raise
            _LOG.warning("could not cancel the unfinished upload of %s: %s", self._path, err)
        finally:
            # Closing would upload the rest of the buffer, to no purpose; this also keeps the
            # file's finalizer from doing it.
            raw.closed = True


def unsent(file) -> bytes | None:
    """All that was written to a store's write-mode file, if none of it has been sent yet.

    gcsfs and s3fs send nothing until a file's buffer holds a block (`upload_block_size`), so a
    file smaller than that is still whole in memory when it is closed. Finished as an upload
    left open for commit (`autocommit=False`), it would take three requests (start, data,
    commit), each a round trip in turn; sent with `fs.pipe_file`, it takes one. None for a file
    that started its upload, or that is not an fsspec buffered file.
    """
    if not isinstance(file, AbstractBufferedFile) or file.offset is not None:
        return None
    return file.buffer.getvalue()


class BackgroundWriter:
    """A write-only file whose writes go to `raw` on a thread of their own.

    gcsfs and s3fs upload a block whenever their buffer fills, inside `write`, so a shard's
    writer would wait for each upload instead of reading and framing the next images. Here
    `write` hands the bytes to a thread and returns at once, unless `limit` bytes already wait
    (memory stays bounded). Errors of `raw` are raised by the next `write` or by `close`.
    `close` waits for every write but does not close `raw`: the caller commits or discards it.
    """

    def __init__(self, raw, limit: int = 32 * 1024 * 1024):
        self._raw = raw
        self._limit = limit
        self._queue: deque[bytes] = deque()
        self._queued = 0
        self._error: BaseException | None = None
        self._done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="upload", daemon=True)
        self._thread.start()

    def write(self, data) -> int:
        data = bytes(data)
        with self._cond:
            while self._queued > self._limit and self._error is None:
                self._cond.wait()
            self._raise()
            self._queue.append(data)
            self._queued += len(data)
            self._cond.notify_all()
        return len(data)

    def flush(self) -> None:
        with self._cond:
            while self._queued and self._error is None:
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        """Waits for every write to reach `raw`; raises the first error of any."""
        with self._cond:
            self._done = True
            self._cond.notify_all()
        self._thread.join()
        self._raise()

    def abandon(self) -> None:
        """Stops the thread without writing what still waits (the upload is being cancelled)."""
        with self._cond:
            self._queue.clear()
            self._queued = 0
            self._done = True
            self._cond.notify_all()
        self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._done:
                    self._cond.wait()
                if not self._queue:
                    return
                data = self._queue.popleft()
            try:
                self._raw.write(data)
            except BaseException as err:
                with self._cond:
                    self._error = err
                    self._queue.clear()
                    self._queued = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._queued -= len(data)
                self._cond.notify_all()
