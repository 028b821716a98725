"""A TCP proxy on 127.0.0.1 that makes a local object-store server behave like a distant one.

It forwards bytes between clients and one server on this machine, and holds each HTTP request
back for `delay` seconds before the server sees it, as a bucket in another zone would (gcsfs,
s3fs and boto speak HTTP/1.1 without pipelining: a request starts with the first bytes a client
sends after the server answered the last one). It counts the requests it forwards by kind
(read, list, info, upload, delete), and a `fault` hook may answer a request itself, with an
HTTP error, a dropped connection or a silence, to show how clients cope with a flaky store.

Used by the tests (tests/cloud_servers.py routes every store through one) and by
benchmarks/bench_bucket.py. It listens on 127.0.0.1 only, holds at most `max_connections`
connections, and stops by itself after `lifetime` seconds.

    proxy = LatencyProxy(9000, delay=0.02).start()   # http://127.0.0.1:{proxy.port} -> :9000
    ...
    proxy.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable

__all__ = ["LatencyProxy", "owner_of_port", "request_kind"]

_HOST = "127.0.0.1"
_METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ", b"PATCH ", b"OPTIONS ")

# What a fault hook returns: None to forward the request, an HTTP status to answer it with
# (and close the connection), "reset" to drop the connection without an answer, or "stall" to
# keep it open and never answer, as a connection a load balancer forgot would.
Fault = Callable[[str, str], "int | str | None"]


def request_kind(method: str, target: str) -> str:
    """What a GCS JSON API or S3 (path-style) request does: read, list, info, upload, delete..."""
    path, _, query = target.partition("?")
    params = {p.split("=", 1)[0] for p in query.split("&") if p}
    if method == "DELETE" or (method == "POST" and "delete" in params):
        return "delete"
    if method == "HEAD":
        return "info"
    if "rewriteTo" in path or "copyTo" in path:
        return "copy"
    if method in ("PUT", "POST", "PATCH"):
        return "upload"
    if method != "GET":
        return method.lower()
    if path.startswith("/download/") or "alt=media" in query:
        return "read"
    if path.startswith("/storage/v1/"):
        # /storage/v1/b/{bucket}/o lists; /storage/v1/b/{bucket}/o/{object} describes one.
        return "list" if path.rstrip("/").endswith(("/o", "/b")) else "info"
    _, _, key = path.lstrip("/").partition("/")
    if not key or params & {"list-type", "prefix", "delimiter", "uploads"}:
        return "list"
    return "read"


class LatencyProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`, each request `delay` seconds late.

    `delay`, `fault` and `counts` may be read and changed while it runs; `in_flight` is the
    requests forwarded and not yet answered (`in_flight_kinds` the same, by kind), and
    `max_in_flight` the most at once. While `fault` runs, `client_port` is the port the request
    came from (the client's end of the connection: `owner_of_port` finds its process).
    """

    def __init__(
        self,
        target_port: int,
        *,
        delay: float = 0.0,
        fault: Fault | None = None,
        max_connections: int = 1024,
        lifetime: float = 3600.0,
    ):
        self.target_port = target_port
        self.delay = delay
        self.fault = fault
        self.counts: Counter[str] = Counter()
        self.in_flight = 0
        self.in_flight_kinds: Counter[str] = Counter()
        self.max_in_flight = 0
        self.client_port = 0
        self.port = 0
        self._max_connections = max_connections
        self._lifetime = lifetime
        self._clients: set[_Client] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{_HOST}:{self.port}"

    @property
    def native_id(self) -> int | None:
        """The kernel's id of the one thread the proxy runs on (its CPU time is in
        /proc/self/task/<native_id>/stat), or None before `start`."""
        return self._thread.native_id if self._thread is not None else None

    def start(self) -> LatencyProxy:
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or not self.port:
            raise RuntimeError("the latency proxy did not start")
        return self

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def reset_counts(self) -> Counter[str]:
        """The counts so far, which start again from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
            self.max_in_flight = self.in_flight
        return counts

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await self._loop.create_server(lambda: _Client(self), _HOST, 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._lifetime)
            server.close()
            for client in list(self._clients):
                client.close()

    def _request(self, client: _Client, data: bytes) -> str | int | None:
        """A request's first bytes, from `client`: counted, and the fault hook asked."""
        line = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        method, target = line[0], line[1] if len(line) > 1 else "/"
        kind = request_kind(method, target)
        client.request = (kind, target)
        client.method = method
        with self._lock:
            self.counts[kind] += 1
        self.client_port = client.port
        return self.fault(method, target) if self.fault else None

    def _forwarded(self, kind: str) -> None:
        self.in_flight += 1
        self.in_flight_kinds[kind] += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _answered(self, kind: str) -> None:
        self.in_flight_kinds[kind] -= 1
        self.in_flight -= 1


class _Client(asyncio.Protocol):
    """One client's connection, forwarded to a connection of its own to the server.

    Bytes are handed from one transport to the other in the callbacks that receive them (no
    task, no stream, no copy): the proxy runs on the store's core in the benchmarks, and the
    CPU it takes there is not the store's. Each side stops reading while the other side's
    transport holds more than it has sent (`pause_writing`)."""

    def __init__(self, proxy: LatencyProxy):
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.server: _Server | None = None
        self.port = 0
        self.request = ("", "")  # the kind and target of the request last read
        self.method = ""  # and its method
        self.kind = ""  # the request sent to the server that has not been answered yet
        self.expecting_request = True
        self.held: list[bytes] = []  # bytes that wait for the server's connection or a delay
        self.delaying = False
        self.stalled = False
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.port = (transport.get_extra_info("peername") or ("", 0))[1]
        proxy = self.proxy
        if len(proxy._clients) >= proxy._max_connections:
            self.closed = True
            transport.close()
            return
        proxy._clients.add(self)
        self.delaying = True  # until the server's connection is made
        connecting = proxy._loop.create_connection(lambda: _Server(self), _HOST, proxy.target_port)
        asyncio.ensure_future(connecting).add_done_callback(self._connected)

    def _connected(self, future) -> None:
        if future.cancelled() or future.exception() is not None or self.closed:
            if not future.cancelled() and future.exception() is None:
                future.result()[0].close()
            self.close()
            return
        self.server = future.result()[1]
        self.delaying = False
        self._release()

    def data_received(self, data: bytes) -> None:
        if self.stalled:
            return  # until the client gives up on it
        self.held.append(data)
        if not self.delaying:
            self._release()

    def _release(self) -> None:
        """Forwards the held bytes, in order, up to a request that must wait its delay."""
        while self.held and not self.closed:
            data = self.held[0]
            if self.expecting_request and data.startswith(_METHODS):
                self.expecting_request = False
                action = self.proxy._request(self, data)
                if action is not None:
                    self._fault(action)
                    return
                if self.proxy.delay:
                    self.delaying = True
                    self.transport.pause_reading()
                    self.proxy._loop.call_later(self.proxy.delay, self._delayed)
                    return
                self._forward_request()
                continue
            self.held.pop(0)
            self.server.transport.write(data)

    def _forward_request(self) -> None:
        self.kind = self.request[0]
        self.proxy._forwarded(self.kind)
        self.server.transport.write(self.held.pop(0))

    def _delayed(self) -> None:
        if self.closed:
            return
        self.delaying = False
        self._forward_request()
        if not self.transport.is_closing():
            self.transport.resume_reading()
        self._release()

    def _fault(self, action: str | int) -> None:
        self.held.clear()
        if action == "reset":
            _reset(self.transport)
            self.close()
        elif action == "stall":
            self.stalled = True
        else:
            head = self.method == "HEAD"
            self.transport.write(_error_response(int(action), self.request[1], head=head))
            self.close()

    def answer(self, data: bytes) -> None:
        """Bytes from the server: the answer started, so the next bytes are a request."""
        self.expecting_request = True
        self._answered()
        if not self.closed:
            self.transport.write(data)

    def pause_writing(self) -> None:
        if self.server is not None:
            self.server.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.server is not None and not self.server.transport.is_closing():
            self.server.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        self.close()

    def _answered(self) -> None:
        """The request sent to the server is answered (or never will be): no longer in flight."""
        if self.kind:
            self.proxy._answered(self.kind)
            self.kind = ""

    def close(self) -> None:
        self._answered()
        self.closed = True
        self.proxy._clients.discard(self)
        for transport in (self.transport, self.server and self.server.transport):
            if transport is not None and not transport.is_closing():
                transport.close()


class _Server(asyncio.Protocol):
    """The server's side of a client's connection."""

    def __init__(self, client: _Client):
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.client.answer(data)

    def pause_writing(self) -> None:
        self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if not self.client.transport.is_closing():
            self.client.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        self.client.close()


def owner_of_port(port: int, peer: int) -> int | None:
    """The pid of the process on this machine that holds the TCP socket from 127.0.0.1:`port`
    to 127.0.0.1:`peer` (a client's end of a connection to the proxy listening at `peer`), or
    None if none is found.

    Both ends are matched: Linux gives connections to different places the same local port,
    and the proxy's own connection to the store may hold the client's port number."""
    wanted = (f"0100007F:{port:04X}", f"0100007F:{peer:04X}")
    inodes = set()
    with contextlib.suppress(OSError), open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == wanted:  # local address, then remote: the client's end
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        return int(pid)
    return None


def _reset(transport: asyncio.Transport) -> None:
    """Drops the connection with a TCP reset, as a failing load balancer does."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _error_response(status: int, target: str, *, head: bool = False) -> bytes:
    """An error answer as the store words it; without a body for a HEAD request, whose answer
    a client reads no body of (the body's bytes read as a bad next answer)."""
    reason = {403: "Forbidden", 429: "Too Many Requests", 500: "Internal Server Error"}.get(
        status, "Service Unavailable"
    )
    if target.startswith(("/storage/", "/download/", "/upload/", "/b/")):
        body = f'{{"error": {{"code": {status}, "message": "injected {status}"}}}}'.encode()
        kind = "application/json"
    else:
        code = {403: "AccessDenied", 500: "InternalError"}.get(status, "SlowDown")
        body = f"<Error><Code>{code}</Code><Message>injected {status}</Message></Error>".encode()
        kind = "application/xml"
    head_lines = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head_lines.encode() + (b"" if head else body)
