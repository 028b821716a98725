"""A shard uploaded to S3 from the writer's own buffer, in requests signed here, as `s3_get` reads.

Through s3fs's write-mode file and botocore, 100 MB of a shard cost 0.40-0.71 s of CPU against
the benchmarks' S3 server (gofakes3, 64 MiB parts), and the same parts sent from our own buffer
through s3fs's `_call_s3` cost 0.50-0.62 s: the cost is botocore's handling of a body (copies
into fresh memory, its checksum, the payload's SHA-256 over plain HTTP), not the file. Here a
part goes out of the buffer in slices (`uploads.body_of`), as `uploads.GcsUpload` sends to GCS;
it carries its CRC32 for S3 to check, and its payload's SHA-256 is signed only where the
connection is not encrypted (over HTTPS, TLS guards it), both as botocore does.

The protocol is S3's own: one PUT for a shard within one block; else a multipart upload, its
first block sent when full while the next fills, completed at `commit`, aborted by `abandon`.
No reader sees anything before the commit. Each request is tried `S3_TRIES` times over
transient failures. A bucket `s3_get` would not read itself (requester pays, encryption keys,
another signature, a redirect to another region) is uploaded through s3fs (`BufferedUpload`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import zlib
from concurrent.futures import Future

from fsspec.asyn import sync
from yarl import URL

from beam_tfrecord import s3_get
from beam_tfrecord.remote import backoff, is_transient
from beam_tfrecord.uploads import Blocks, body_of, cancel_sending

__all__ = ["S3Upload", "open_s3_upload"]

_LOG = logging.getLogger(__name__)

_MIN_PART = 5 * 1024 * 1024  # S3's least part but the last
_UPLOAD_ID = re.compile(rb"<UploadId>([^<]+)</UploadId>")
_ERROR = re.compile(rb"<Error>")


class _Elsewhere(Exception):
    """The bucket answered from another region: s3fs's client, which follows, takes over."""


def open_s3_upload(fs, path: str, block_size: int, fallback):
    """An upload of `path` on s3fs filesystem `fs`: ours, or `fallback(fs, path, block_size)`
    where the object is one `s3_get` would not read itself."""
    route = sync(fs.loop, s3_get.route, fs, path)
    if route is None:
        return fallback(fs, path, block_size)
    return S3Upload(fs, path, block_size, route, fallback)


class S3Upload:
    """A shard uploaded to S3 from its own buffer, committed whole or not at all."""

    def __init__(self, fs, path: str, block_size: int, route, fallback):
        self._fs, self._path = fs, path
        self._session, self._bucket, self._url = route
        self._block = max(block_size, _MIN_PART)
        self._fallback = fallback
        self._instead = None  # s3fs's upload, once the bucket turned out to be elsewhere
        self._blocks = Blocks(self._block)
        self._upload_id: str | None = None
        # (number, ETag, CRC32 or "") of each part sent
        self._parts: list[tuple[int, str, str]] = []
        self._sending: Future | None = None

    def write(self, data: bytes | memoryview) -> int:
        if self._instead is not None:
            return self._instead.write(data)
        rest = self._blocks.write(data, self._send_block, lambda: self._instead is not None)
        if rest is not None:  # the bucket is elsewhere: s3fs's upload has the rest
            self._instead.write(rest)
        return len(data)

    def flush(self) -> None:
        if self._instead is not None:
            self._instead.flush()

    def commit(self) -> None:
        if self._instead is None:
            self._wait()
            body = self._blocks.filled()
            try:
                if self._upload_id is None:
                    sync(self._fs.loop, self._put_whole, body)
                else:
                    if len(body) or not self._parts:
                        # (A shard of whole blocks has no last part to send: S3 is not asked
                        # to take an empty one.)
                        sync(self._fs.loop, self._send_part, len(self._parts) + 1, body)
                    sync(self._fs.loop, self._complete)
            except _Elsewhere:
                self._hand_over()
            finally:
                body.release()
            self._blocks.release(keep=True)
        if self._instead is not None:
            self._instead.commit()

    def abandon(self) -> None:
        if self._instead is not None:
            self._instead.abandon()
            return
        cancel_sending(self._sending)
        self._sending = None
        self._blocks.release(keep=False)
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is not None:
            try:
                # S3 keeps, and bills, the parts of an unfinished upload until it is aborted.
                sync(self._fs.loop, self._request, "DELETE", {"uploadId": upload_id}, None)
            except Exception as err:  # the shard's own error is the one to raise
                _LOG.warning("could not cancel the unfinished upload of %s: %s", self._path, err)

    def _send_block(self) -> None:
        self._wait()
        if self._upload_id is None:
            try:
                self._upload_id = sync(self._fs.loop, self._start)
            except _Elsewhere:
                self._hand_over()
                return
        # Parts of one size: S3 takes any but the last of 5 MiB or more.
        self._sending = asyncio.run_coroutine_threadsafe(
            self._send_part(len(self._parts) + 1, self._blocks.filled()), self._fs.loop
        )
        self._blocks.turn()

    def _wait(self) -> None:
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.result()

    def _hand_over(self) -> None:
        """From here on through s3fs: the buffer (nothing of it was sent) goes to its file."""
        s3_get.leave_to_s3fs(self._fs, self._path)
        self._instead = self._fallback(self._fs, self._path, self._block)
        self._instead.write(bytes(self._blocks.filled()))
        self._blocks.release(keep=True)  # nothing of it was sent

    async def _start(self) -> str:
        # S3 takes a part's checksum only where its upload declared the algorithm ("Checksum
        # Type mismatch ... expected null" otherwise), and then wants each in the completion.
        declared = {"x-amz-checksum-algorithm": "CRC32"} if self._bucket.checksums else {}
        answer = await self._request("POST", {"uploads": ""}, None, amz=declared)
        found = _UPLOAD_ID.search(answer)
        if found is None:
            raise s3_get.S3Error(200, "NoUploadId", "no UploadId in the answer", self._path)
        return found.group(1).decode()

    async def _send_part(self, number: int, body: memoryview) -> None:
        query = {"partNumber": str(number), "uploadId": self._upload_id}
        checksum = self._checksum(body)
        etag = await self._request("PUT", query, body, amz=checksum, etag=True)
        self._parts.append((number, etag, checksum.get("x-amz-checksum-crc32", "")))

    async def _put_whole(self, body: memoryview) -> None:
        await self._request("PUT", {}, body, amz=self._checksum(body))

    def _checksum(self, body: memoryview) -> dict[str, str]:
        """The body's CRC32 for S3 to check, in botocore's headers for a PutObject or an
        UploadPart: unless the client's `request_checksum_calculation` is "when_required"
        (set for a store that refuses checksums)."""
        if not self._bucket.checksums:
            return {}
        crc = zlib.crc32(body).to_bytes(4, "big")
        return {
            "x-amz-checksum-crc32": base64.b64encode(crc).decode(),
            "x-amz-sdk-checksum-algorithm": "CRC32",
        }

    async def _complete(self) -> None:
        listed = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{_xml(etag)}</ETag>"
            + (f"<ChecksumCRC32>{crc}</ChecksumCRC32>" if crc else "")
            + "</Part>"
            for n, etag, crc in self._parts
        )
        body = f"<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>".encode()
        await self._request("POST", {"uploadId": self._upload_id}, memoryview(body))

    async def _request(
        self, method: str, query: dict, body: memoryview | None, amz=None, etag=False
    ):
        """One request with the x-amz- headers `amz`, tried `S3_TRIES` times over transient
        failures: the answer's body, or its ETag with `etag`."""
        for attempt in range(s3_get.S3_TRIES):
            try:
                headers = await self._signed(method, query, body, amz or {})
                async with self._session.request(
                    method,
                    URL(f"{self._url}?{s3_get.canonical_query(query)}", encoded=True),
                    headers=headers,
                    data=body_of([body]) if body is not None else None,
                    timeout=self._bucket.timeout,
                    ssl=self._bucket.tls or True,
                    **self._bucket.proxy,
                ) as response:
                    answer = await response.read()
                    status = response.status
                    tag = response.headers.get("ETag", "")
                # An abort answers 204 No Content. CompleteMultipartUpload may fail after its
                # 200 has been sent: the error is then in the body.
                if status in (200, 204) and not (method == "POST" and _ERROR.search(answer)):
                    return tag if etag else answer
                if s3_get.is_elsewhere(status, answer) and attempt == 0 and not self._parts:
                    raise _Elsewhere()
                raise s3_get.error_of(status or 500, answer, self._path)
            except _Elsewhere:
                raise
            except Exception as err:
                if attempt + 1 == s3_get.S3_TRIES or not is_transient(err):
                    raise
            await asyncio.sleep(backoff(attempt))
        raise AssertionError("unreachable")

    async def _signed(self, method: str, query: dict, body: memoryview | None, amz: dict):
        if self._url.startswith("https:") and body is not None:
            payload = "UNSIGNED-PAYLOAD"
        else:
            payload = hashlib.sha256(body if body is not None else b"").hexdigest()
        if self._bucket.credentials is None:
            return {"x-amz-content-sha256": payload, **amz}
        return await s3_get.signed_for(
            self._bucket, self._url, method=method, query=query, payload=payload, amz=amz
        )


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
