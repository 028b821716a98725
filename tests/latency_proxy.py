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
_CHUNK = 256 * 1024

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
        self._connections = 0
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
        server = await asyncio.start_server(self._handle, _HOST, 0, limit=_CHUNK)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._lifetime)
            server.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        if self._connections >= self._max_connections:
            client_w.close()
            return
        self._connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(_HOST, self.target_port)
        except OSError:
            self._connections -= 1
            client_w.close()
            return
        expecting_request = [True]
        waiting = [""]  # the kind of request sent to the server that has not answered yet
        client_port = (client_w.get_extra_info("peername") or ("", 0))[1]

        def answered() -> None:
            if waiting[0]:
                self.in_flight_kinds[waiting[0]] -= 1
                waiting[0] = ""
                self.in_flight -= 1

        async def upstream() -> None:
            while data := await client_r.read(_CHUNK):
                if expecting_request[0] and data.startswith(_METHODS):
                    expecting_request[0] = False
                    line = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
                    method, target = line[0], line[1] if len(line) > 1 else "/"
                    kind = request_kind(method, target)
                    with self._lock:
                        self.counts[kind] += 1
                    self.client_port = client_port
                    action = self.fault(method, target) if self.fault else None
                    if action == "reset":
                        _reset(client_w)
                        return
                    if action == "stall":
                        while await client_r.read(_CHUNK):
                            pass  # until the client gives up on it
                        return
                    if action is not None:
                        client_w.write(_error_response(int(action), target))
                        await client_w.drain()
                        return
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    waiting[0] = kind
                    self.in_flight += 1
                    self.in_flight_kinds[kind] += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                server_w.write(data)
                await server_w.drain()

        async def downstream() -> None:
            while data := await server_r.read(_CHUNK):
                expecting_request[0] = True  # the answer started: the next bytes are a request
                answered()
                client_w.write(data)
                await client_w.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the proxy is stopping
        finally:
            answered()
            for task in tasks:
                task.cancel()
            for writer in (server_w, client_w):
                with contextlib.suppress(Exception):
                    writer.close()
            self._connections -= 1


def owner_of_port(port: int) -> int | None:
    """The pid of the process on this machine that holds the TCP socket bound to 127.0.0.1:`port`
    (a client's end of a connection to the proxy), or None if none is found."""
    wanted = f"0100007F:{port:04X}"
    inodes = set()
    with contextlib.suppress(OSError), open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == wanted:  # local address: the client's end
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


def _reset(writer: asyncio.StreamWriter) -> None:
    """Drops the connection with a TCP reset, as a failing load balancer does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _error_response(status: int, target: str) -> bytes:
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
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
