"""One GET on a kept-alive HTTP/1.1 connection, its body received straight into its own buffer.

A build reads each image of a bucket with one GET. Sent with aiohttp (gcsfs's session, or
s3_get's), the GET runs through aiohttp's request and response objects, header multidicts, and
a stream reader that gathers the body in pieces and joins them. Here the request is written as
bytes, the answer's head is read with a few regular expressions, and its body lands in a buffer
of its length as the socket gives it (asyncio's BufferedProtocol). A build's reads
(`remote.fetch_in_order`, 1,500 objects of 100 KB from fake-gcs-server,
`benchmarks/bench_store_clients.py`): 100-119 us of CPU a read, against 148-168 through aiohttp.

What it does not do it leaves to the caller's client: a proxy, a client certificate, session
settings of the store's filesystem, redirects (a 3xx is returned as it came). Callers send here
only GETs that need none of them. It speaks what stores answer a GET with: a Content-Length
body, a chunked one, or one that ends with the connection; `Connection: close` and HTTP/1.0;
interim 1xx answers; a gzip- or deflate-coded body, decoded if asked.

Connections are kept per event loop and origin, up to a limit of requests in flight, and
reused while idle up to `KEEP_IDLE` seconds. One the store closed while idle is dropped; a
request on one it closed as the request went out (nothing answered) is sent once more on a new
connection, as aiohttp does. Errors are those the retries know (`remote.is_transient`):
ConnectionError for a connection lost or an answer that is not HTTP, TimeoutError when the
store is silent for the read limit or the exchange outlasts its total.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
import weakref
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "CONNECTIONS",
    "KEEP_IDLE",
    "BadResponse",
    "Decoded",
    "Timeouts",
    "decodable",
    "decoded",
    "get",
]

# Requests in flight per origin unless told (aiohttp's connector allows 100).
CONNECTIONS = 64
# Seconds a connection is kept idle for its next request, as aiohttp keeps it: past that, a
# NAT or load balancer may have forgotten it without a word, and a request sent on it would
# wait out the read limit before it failed.
KEEP_IDLE = 15.0

# The longest head an answer may have; a store's is well under 2 KB.
_MAX_HEAD = 64 * 1024
_RECEIVE = 16 * 1024  # what a head, or a body of no known length, is received into

_STATUS = re.compile(rb"HTTP/1\.([01]) (\d{3})")
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*(?=\r\n)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[^\r]*chunked", re.IGNORECASE)
_CLOSE = re.compile(rb"\r\nconnection:[^\r]*close", re.IGNORECASE)
_KEEP_ALIVE = re.compile(rb"\r\nconnection:[^\r]*keep-alive", re.IGNORECASE)
_CODING = re.compile(rb"\r\ncontent-encoding:[ \t]*([^\r]*?)[ \t]*(?=\r\n)", re.IGNORECASE)


class BadResponse(ConnectionError):
    """The answer was not HTTP/1.1 this client can read; the connection is dropped."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed (None: no limit): `connect` to open a connection, `read` of silence
    while an answer is awaited or received, `total` for the whole exchange, the connection's
    making included."""

    connect: float | None = 30.0
    read: float | None = None
    total: float | None = 300.0

    @classmethod
    def as_aiohttp(cls, timeout) -> Timeouts:
        """The limits an aiohttp request given `timeout` would have: a `ClientTimeout`, a
        number (its total), or None (none at all: aiohttp makes it `ClientTimeout(total=None)`,
        not its session's default, as gcsfs's `requests_timeout=None` asks)."""
        if timeout is None:
            return cls(connect=None, read=None, total=None)
        if isinstance(timeout, int | float):
            return cls(connect=None, read=None, total=float(timeout))
        connect = timeout.sock_connect if timeout.sock_connect is not None else timeout.connect
        return cls(connect=connect, read=timeout.sock_read, total=timeout.total)


async def get(
    url: str,
    headers: Mapping[str, str],
    timeouts: Timeouts,
    *,
    limit: int = CONNECTIONS,
    decode: bool = False,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """GETs `url` (http or https, its path and query already percent-encoded) with `headers`:
    the answer's status and body, whatever the status.

    `limit`: requests in flight at once to the URL's origin on this event loop; more wait.
    `decode`: a body coded gzip or deflate (`Content-Encoding`) comes back decoded (`Decoded`),
    as aiohttp's `response.read()` gives it by default; else as it came.
    `tls`: whom an https store's certificate must be signed by (None: the system's trust).

    Raises:
        ConnectionError: the connection failed or was lost, or the answer was not HTTP/1.1.
        TimeoutError: as `timeouts` says.
        ValueError: a URL not http(s), or a header with a line break.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    pool = _pool(parts.scheme, parts.hostname, parts.port, limit, tls)
    request = _request(parts, headers)
    async with pool.slots:
        status, body, coding = await pool.exchange(request, timeouts)
    if decode and coding:
        body = decoded(body, coding)
    return status, body


class Decoded(bytes):
    """A body decoded from the coding it came in (`Content-Encoding`), and `coded_size`, the
    length it came in: for an object a store keeps coded, the length its listing gives."""

    coded_size: int

    @classmethod
    def of(cls, plain: bytes, coded_size: int) -> Decoded:
        made = cls(plain)
        made.coded_size = coded_size
        return made


def decodable(coding: bytes | str) -> bool:
    """Whether a `Content-Encoding` is one aiohttp decodes a body from, and so `decoded`."""
    name = coding.encode("latin-1") if isinstance(coding, str) else coding
    return name.strip().lower() in (b"gzip", b"x-gzip", b"deflate")


def decoded(body: bytes, coding: bytes | str) -> bytes:
    """`body` decoded as aiohttp decodes it (gzip, or deflate with zlib's wrapping or without),
    as `Decoded`; in any other coding, as it came.

    Raises:
        BadResponse: the body is not in the coding it says.
    """
    if not body or not decodable(coding):
        return body
    for wbits in (47, -15):  # zlib's or gzip's wrapping (told by its header), then raw deflate
        try:
            return Decoded.of(zlib.decompress(body, wbits), len(body))
        except zlib.error:
            continue
    name = coding.decode("latin-1") if isinstance(coding, bytes) else coding
    raise BadResponse(f"a body that is not the {name} it says it is")


def _request(parts, headers: Mapping[str, str]) -> bytes:
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    lines = [f"GET {target} HTTP/1.1"]
    if not any(name.lower() == "host" for name in headers):
        lines.append(f"Host: {parts.netloc.rpartition('@')[2]}")
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"a line break in the value of header {name!r}")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode()  # a value beyond ASCII in UTF-8, as aiohttp sends it


# {event loop: {(scheme, host, port): _Pool}}: a loop's connections serve only it. Weak keys
# alone never let a loop go: its pools' connections hold it (their transports do), so a closed
# loop's entry is dropped by hand (`_pool`).
_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pool(scheme: str, host: str, port: int | None, limit: int, tls=None) -> _Pool:
    loop = asyncio.get_running_loop()
    pools = _POOLS.get(loop)
    if pools is None:
        # A new loop (another asyncio.run, say): those closed go, and their connections' sockets
        # with them, not kept open for the life of the process. One not closed, a forked
        # parent's among them, is left alone.
        for closed in [other for other in _POOLS if other.is_closed()]:
            del _POOLS[closed]
        pools = _POOLS[loop] = {}
    key = (scheme, host, port, limit, tls)
    pool = pools.get(key)
    if pool is None:
        pool = pools[key] = _Pool(loop, scheme, host, port, limit, tls)
    return pool


@functools.lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """The system's trust, as aiohttp's default (SSL_CERT_FILE and SSL_CERT_DIR honoured);
    made once, on first use: it reads the certificates."""
    return ssl.create_default_context()


class _Pool:
    """One origin's connections on one event loop: the idle ones, newest last."""

    def __init__(self, loop, scheme: str, host: str, port: int | None, limit: int, tls=None):
        self._loop = loop
        self._host = host
        self._tls = scheme == "https"
        self._trust = tls
        self._port = port or (443 if self._tls else 80)
        self._idle: deque[_Connection] = deque()
        self.slots = asyncio.Semaphore(limit)

    async def exchange(self, request: bytes, timeouts: Timeouts) -> tuple[int, bytes, bytes]:
        """The answer to `request`: its status, its body as it came, and its `Content-Encoding`
        (empty if none)."""
        # The total counts from here, for all of it: a try on a kept connection, the making of
        # a new one and the try on it (as aiohttp's total covers its connecting).
        started = self._loop.time()
        while self._idle:
            connection = self._idle.pop()
            if started - connection.idle_since > KEEP_IDLE:
                self._drop_idle(connection)
                continue
            if connection.open:
                try:
                    return await self._on(connection, request, timeouts, started)
                except _Unanswered:
                    break  # closed by the store as the request went out: once more, anew
        connection = await self._connect(timeouts, started)
        try:
            return await self._on(connection, request, timeouts, started)
        except _Unanswered as err:
            raise ConnectionResetError("the store closed the connection unanswered") from err

    async def _on(self, connection: _Connection, request: bytes, timeouts: Timeouts, started):
        try:
            status, body, reusable = await connection.exchange(request, timeouts, started)
        except BaseException:
            connection.abort()
            raise
        if reusable and connection.open:
            connection.idle_since = self._loop.time()
            self._idle.append(connection)
        else:
            connection.abort()
        return status, body, connection.coding

    def _drop_idle(self, stale: _Connection) -> None:
        """Closes `stale` and every connection idle longer (those before it: the oldest)."""
        stale.abort()
        while self._idle:
            self._idle.popleft().abort()

    async def _connect(self, timeouts: Timeouts, started: float) -> _Connection:
        made = self._loop.create_connection(
            lambda: _Connection(self._loop),
            self._host,
            self._port,
            ssl=(self._trust or _tls()) if self._tls else None,
            server_hostname=self._host if self._tls else None,
        )
        limit, by_total = timeouts.connect, False
        if timeouts.total is not None:  # what is left of the total, if it ends first
            left = started + timeouts.total - self._loop.time()
            if limit is None or left < limit:
                limit, by_total = max(left, 0.0), True
        try:
            _, connection = await asyncio.wait_for(made, limit)
        except asyncio.TimeoutError as err:
            if getattr(err, "errno", None) is not None:
                raise  # the kernel's (ETIMEDOUT, a TimeoutError too): not our limit
            if by_total:
                raise TimeoutError(f"no whole answer in {timeouts.total:g} s") from err
            raise TimeoutError(
                f"no connection to {self._host}:{self._port} in {timeouts.connect:g} s"
            ) from err
        return connection


class _Unanswered(ConnectionError):
    """The connection ended before any byte of the answer came."""


class _Connection(asyncio.BufferedProtocol):
    """One connection, one exchange at a time. The answer's head is received into a scratch
    buffer, its body into a buffer of the length the head gives (or gathered, for a chunked
    body or one that ends with the connection)."""

    def __init__(self, loop):
        self._loop = loop
        self._transport = None
        self.open = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future | None = None
        # A memoryview, never the bytearray itself: asyncio's TLS fills what get_buffer gives
        # in slices of it (`buf[offset:]`), and a bytearray's slice is a copy, lost.
        self._scratch = memoryview(bytearray(_RECEIVE))
        self._reset()

    def _reset(self) -> None:
        self._head = bytearray()
        self._body: bytearray | None = None  # a body of known length, as received so far
        self._got = 0
        self._gathered: bytearray | None = None  # chunked or to the end: its raw bytes
        self._chunked = False
        self._status = 0
        self.coding = b""  # the answer's Content-Encoding, if any
        self._reusable = False
        self._answered = False
        self._last = 0.0
        self._timer = None

    # -- asyncio's side

    def connection_made(self, transport) -> None:
        self._transport = transport
        self.open = True

    def connection_lost(self, exc) -> None:
        self.open = False
        if self._waiter is None:
            return
        if self._gathered is not None and not self._chunked and self._body is None:
            self._finish(bytes(self._gathered), reusable=False)  # a body that ends with it
        elif not self._answered:
            self._fail(_Unanswered("no answer"))
        else:
            self._fail(ConnectionResetError("the connection was lost mid-answer"))

    def eof_received(self) -> bool:
        return False  # close: connection_lost says what it means

    def get_buffer(self, sizehint: int):
        if self._body is not None and self._got < len(self._body):
            return memoryview(self._body)[self._got :]
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        self._answered = True
        if self._waiter is None or self._waiter.done():
            self.abort()  # bytes past the answer, or one already given up: not ours to keep
            return
        if self._timer is not None:
            self._last = self._loop.time()
        if self._body is not None and self._got < len(self._body):
            self._got += nbytes
            if self._got == len(self._body):
                self._finish(self._body, self._reusable)
            return
        data = self._scratch[:nbytes]
        if self._gathered is not None:
            self._gathered += data
            if self._chunked:
                self._unchunk()
            return
        self._head += data
        self._read_head()

    # -- the exchange

    async def exchange(
        self, request: bytes, timeouts: Timeouts, started: float
    ) -> tuple[int, bytes, bool]:
        """The answer to `request`: status, body, whether the connection may be kept. The total
        counts from `started`, the silence from now."""
        self._reset()
        waiter = self._waiter = self._loop.create_future()
        try:
            if timeouts.read is not None or timeouts.total is not None:
                self._last = self._loop.time()
                self._arm(timeouts, started)
            self._transport.write(request)
            return await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()

    def abort(self) -> None:
        self.open = False
        if self._transport is not None:
            self._transport.abort()

    def _arm(self, timeouts: Timeouts, started: float) -> None:
        deadline = started + timeouts.total if timeouts.total is not None else float("inf")
        silence = timeouts.read if timeouts.read is not None else float("inf")

        def check() -> None:
            now = self._loop.time()
            if now >= deadline or now >= self._last + silence:
                if now >= deadline:
                    what = f"no whole answer in {timeouts.total:g} s"
                else:
                    what = f"the store was silent for {timeouts.read:g} s"
                self._fail(TimeoutError(what))
                self.abort()
            else:
                self._timer = self._loop.call_at(min(deadline, self._last + silence), check)

        self._timer = self._loop.call_at(min(deadline, self._last + silence), check)

    def _read_head(self) -> None:
        while True:
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > _MAX_HEAD:
                    self._fail(BadResponse("an answer's head longer than 64 KiB"))
                return
            status = _STATUS.match(self._head)
            if status is None:
                self._fail(BadResponse(f"not an HTTP/1.x answer: {bytes(self._head[:40])!r}"))
                return
            code = int(status[2])
            if code >= 200:
                break
            del self._head[: end + 4]  # an interim answer (100 Continue): the real one follows
        head, rest = self._head[: end + 2], self._head[end + 4 :]
        self._status = code
        coding = _CODING.search(head)
        self.coding = coding[1] if coding is not None else b""
        self._reusable = (
            _CLOSE.search(head) is None
            if status[1] == b"1"
            else _KEEP_ALIVE.search(head) is not None
        )
        length = _LENGTH.search(head)
        if code in (204, 304):
            self._finish(bytearray(), self._reusable and not rest)
        elif _CHUNKED.search(head):
            self._chunked, self._gathered, self._position = True, bytearray(rest), 0
            self._out = bytearray()
            self._unchunk()
        elif length is not None:
            self._body = bytearray(int(length[1]))
            self._got = min(len(rest), len(self._body))
            self._body[: self._got] = rest[: self._got]
            if len(rest) > self._got:
                self._reusable = False  # more than the body: nothing after it can be trusted
            if self._got == len(self._body):
                self._finish(self._body, self._reusable)
        else:
            self._gathered = bytearray(rest)  # to the connection's end

    def _unchunk(self) -> None:
        raw, at = self._gathered, self._position
        while True:
            line_end = raw.find(b"\r\n", at)
            if line_end < 0:
                break
            line = bytes(raw[at:line_end])
            try:
                size = int(line.split(b";", 1)[0], 16)  # past a ";": extensions
            except ValueError:
                self._fail(BadResponse(f"a chunk size that is not hex: {line[:20]!r}"))
                return
            if size == 0:  # the last chunk; then trailer lines, up to an empty one
                if raw[line_end + 2 : line_end + 4] == b"\r\n":
                    trailer_end = line_end
                else:
                    trailer_end = raw.find(b"\r\n\r\n", line_end)
                if trailer_end < 0:
                    break
                self._finish(self._out, self._reusable and trailer_end + 4 == len(raw))
                return
            if len(raw) < line_end + 2 + size + 2:
                break
            self._out += raw[line_end + 2 : line_end + 2 + size]
            at = line_end + 2 + size + 2
        del raw[:at]
        self._position = 0

    def _finish(self, body, reusable: bool) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, bytes(body), reusable))

    def _fail(self, err: BaseException) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(err)
