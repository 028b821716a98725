"""Object-store IO that hides latency: many reads in flight per worker, retried when the store says so.

A build reads every image once and writes a few small files per shard. On local disk a read costs
a fraction of a millisecond; on an object store it costs a round trip (tens of milliseconds to a
bucket in another zone), whatever the size. So reads of objects are not blocking calls on a few
threads but coroutines of the filesystem's own async interface (gcsfs and s3fs are fsspec async
filesystems), many in flight at once on the one event loop fsspec keeps per process, on a thread
of its own. Results come back in the order the items came, bounded by a count and by bytes, so a
worker's output does not depend on which read finished first and its memory does not grow with a
run of large images.

Transient store errors (429, 5xx, dropped connections, timeouts) are retried with backoff, on top
of the retries gcsfs and s3fs do themselves; an object that stays unreadable comes back as an
OSError naming what went wrong, which the writer turns into a report line, never a failed build.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar
from urllib.parse import quote

from beam_tfrecord import http_get
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.locations import AsyncStores, is_gcsfs, is_remote, is_s3fs
from beam_tfrecord.readahead import DEFAULT_BUDGET
from beam_tfrecord.storage import read_source, whole_read_options

__all__ = [
    "ATTEMPTS",
    "LOCAL_DEPTH",
    "OBJECT_STORE_DEPTH",
    "Fetches",
    "backoff",
    "default_depth",
    "fetch_in_order",
    "is_transient",
    "read_depth",
    "run_concurrently",
]

T = TypeVar("T")

_LOG = logging.getLogger(__name__)

# Images read ahead by default. A local disk gains little beyond a few reads at once. An object
# store needs (latency x throughput / image size) requests in flight: at 20 ms and 100 KB images
# that is 40 for 200 MB/s, and the connections allow 64 (http_get.CONNECTIONS). Reads beyond
# those wait for a connection, or wait read for the writer: a store that slows for a second (a
# busy server, a slow tail of requests) then finds 0.3 s of a JPEG writer's work in hand, where
# 64 were 80 ms. 256 took a gs:// build at 20 ms from 5.93 to 5.31 s (farm-bench,
# four pairs; 640 gained nothing more). The byte budget bounds memory whatever the depth.
LOCAL_DEPTH = 16
OBJECT_STORE_DEPTH = 256

# Tries per read, our own, by default one: a store's client retries transient errors (429, 5xx,
# resets) inside, with backoff, and our tries multiplied its own: an object failing for good
# with a 503 took 170 s to report from s3:// (100 requests) when s3fs's 5 tries, each of
# botocore's 5, were multiplied by ours. Reads from GCS and S3 go around gcsfs's and s3fs's
# layers, their retries with them, and get `GCS_TRIES` or `s3_get.S3_TRIES` for each of ours
# (`_read_object`); a read that s3_get hands back to s3fs (a bucket in another region) gets
# both.
ATTEMPTS = 1
_BACKOFF_SECONDS = 0.2
_BACKOFF_CAP_SECONDS = 5.0

_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})
# errno values s3fs gives the OSErrors it makes of throttling and server errors
# (SlowDown, ServiceUnavailable, 503 -> EBUSY; InternalError, 500 -> EREMOTEIO), and those of
# dropped or timed-out connections.
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.EBUSY,
        getattr(errno, "EREMOTEIO", 121),
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.EAGAIN,
    }
)
# By name, so that neither aiohttp, requests nor botocore need be imported to recognise them.
_TRANSIENT_TYPES = frozenset(
    {
        "ClientConnectionError",  # aiohttp: refused, reset, server disconnected
        "ClientPayloadError",  # aiohttp: a body cut short
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ProxyError",  # gcsfs raises this for a 502
        "ChunkedEncodingError",
        "ReadTimeout",
        "ConnectTimeout",
        "EndpointConnectionError",  # botocore
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ResponseStreamingError",
        "IncompleteRead",
        "FSTimeoutError",
    }
)


def default_depth(urls: Iterable[str]) -> int:
    """How many images a worker reads ahead unless told: deep when any input is an object store."""
    return OBJECT_STORE_DEPTH if any(is_remote(url) for url in urls) else LOCAL_DEPTH


def is_transient(err: BaseException) -> bool:
    """Whether an error of gcsfs, s3fs or the network beneath them may go away if retried.

    Looks through the chain of causes: s3fs raises OSErrors made from botocore's errors.
    """
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, FileNotFoundError | PermissionError):
            return False
        for name in ("code", "status", "status_code"):
            code = getattr(err, name, None)
            if isinstance(code, str) and code.isdigit():
                code = int(code)
            if isinstance(code, int) and code in _TRANSIENT_CODES:
                return True
        if isinstance(err, ConnectionError | TimeoutError | asyncio.TimeoutError):
            return True
        if isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNOS:
            return True
        if any(cls.__name__ in _TRANSIENT_TYPES for cls in type(err).__mro__):
            return True
        err = err.__cause__ or err.__context__
        seen += 1
    return False


def backoff(attempt: int) -> float:
    """Seconds to wait before try `attempt` + 2 of a request to a store (0: after the first)."""
    # Full jitter: workers that failed together do not retry together. Timing only: the bytes
    # read, and so the build's output, do not depend on it.
    return random.uniform(0, min(_BACKOFF_CAP_SECONDS, _BACKOFF_SECONDS * 2**attempt))


def _unreadable(err: BaseException, attempts: int) -> OSError:
    """The OSError the writer reports for an object that could not be read."""
    if isinstance(err, OSError) and not is_transient(err):
        return err  # FileNotFoundError and the like keep their type: the report names the reason
    what = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    if attempts > 1:
        what += f" (after {attempts} attempts)"
    wrapped = OSError(errno.EIO, what)
    wrapped.__cause__ = err
    return wrapped


async def _read_object(fs, path: str, attempts: int) -> bytes:
    if is_gcsfs(fs):
        read, pause = functools.partial(_read_gcs_object, fs), _gcs_backoff
        attempts *= GCS_TRIES  # gcsfs's own tries, which its reads no longer go through
    elif is_s3fs(fs):
        from beam_tfrecord.s3_get import S3_TRIES, read_s3_object

        read, pause = functools.partial(read_s3_object, fs), backoff
        attempts *= S3_TRIES  # in place of botocore's and s3fs's, which the GET goes around
    else:
        read = functools.partial(fs._cat_file, **whole_read_options(fs))  # one GET, no HEAD
        pause = backoff
    for attempt in range(attempts):
        try:
            return await read(path)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if attempt + 1 >= attempts or not is_transient(err):
                raise _unreadable(err, attempt + 1) from err
            _LOG.info("retrying %s after %s", path, err)
            await asyncio.sleep(pause(attempt))
    raise AssertionError("unreachable")


# A whole object from GCS in one GET, the request gcsfs's `_cat_file` sends, with its
# credentials and error checks, without its layers around the request: they cost about 100 us
# of CPU an object (a signature bound by its retry decorator on every call, the path split and
# the URL formatted twice), a fifth of a read's CPU in a gs:// build (fetch_in_order of 1,000
# objects of 100 KB from fake-gcs-server, paired runs: 630 against 514 us a read). Sent with
# `http_get`, not gcsfs's aiohttp session, unless that session is set up for more.
# Retried as gcsfs retries: 6 tries, waits of 1-2, 2-3, 4-5, 8-9 and 16-17 s.
GCS_TRIES = 6


async def _read_gcs_object(fs, path: str) -> bytes:
    from gcsfs.retry import validate_response

    bucket, key, generation = fs.split_path(path)
    url = f"{fs._location}/download/storage/v1/b/{bucket}/o/{quote(key, safe='')}?alt=media"
    if generation:
        url += f"&generation={generation}"
    for name, value in fs._get_params({}).items():  # a requester-pays bucket's project
        url += f"&{name}={quote(str(value), safe='')}"
    # An object kept gzip-coded is asked for as kept, not decoded by the store: its listing
    # gave the coded size, which the read's is then checked against (`storage.size_as_listed`).
    headers = {**fs._get_headers(None), "Accept-Encoding": "gzip"}
    if fs.session_kwargs or getattr(fs, "_use_client_cert", False):
        # Its session is set up for more than a plain GET: sent through it.
        status, body = await _through_gcsfs_session(fs, url, headers)
    else:
        timeouts = http_get.Timeouts.as_aiohttp(fs.requests_timeout)
        # As many in flight as gcsfs's session allowed (aiohttp's connector: 100), and a body
        # decoded as it decoded it.
        status, body = await http_get.get(url, headers, timeouts, limit=100, decode=True)
        if 300 <= status < 400:
            # A redirect (from a front end or proxy of the endpoint's): its session follows it.
            status, body = await _through_gcsfs_session(fs, url, headers)
    validate_response(status, body, path)
    return body


async def _through_gcsfs_session(fs, url: str, headers: dict) -> tuple[int, bytes]:
    await fs._set_session()
    async with fs.session.get(url, headers=headers, timeout=fs.requests_timeout) as response:
        body = await response.read()  # decoded by aiohttp, if coded gzip or deflate
        length = response.headers.get("Content-Length", "")
        if http_get.decodable(response.headers.get("Content-Encoding", "")) and length.isdigit():
            body = http_get.Decoded.of(body, int(length))
        return response.status, body


def _gcs_backoff(attempt: int) -> float:
    return min(random.random() + 2**attempt, 32.0)


class _Read:
    """One object's read on a store's event loop: its bytes or its error, once done."""

    __slots__ = ("_done", "_owner", "loop", "task", "value")

    def __init__(self, owner: Fetches, loop: asyncio.AbstractEventLoop):
        self._owner = owner
        self._done = False
        self.loop = loop
        self.task: asyncio.Task | None = None
        self.value: bytes | BaseException | None = None

    def done(self) -> bool:
        return self._done

    def finish(self, task: asyncio.Task) -> None:
        """On the loop, when the read ends: keeps what it gave, wakes the caller if it waits."""
        if task.cancelled():
            value: bytes | BaseException = asyncio.CancelledError()
        else:
            value = task.exception() or task.result()
        owner = self._owner
        with owner._cond:
            self.value, self._done = value, True
            if owner._waiting is self:
                owner._cond.notify()

    def result(self) -> bytes:
        if not self._done:
            owner = self._owner
            with owner._cond:
                owner._waiting = self
                while not self._done:
                    owner._cond.wait()
                owner._waiting = None
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


class Fetches:
    """Reads started and not yet handed back, oldest first, with the bytes they will hold.

    The push side of `fetch_in_order`, for a caller fed one item at a time (a DoFn): `start`
    each item, then hand back with `pop` while `ready()`; at the end `pop` the rest and `close`.

    Besides the store client's own work, a read costs the caller little: a URL's filesystem is
    found once per protocol, not per read (`fsspec.core.url_to_fs` took 25 us), and the reads
    started while the event loop was busy reach it together, for one wake-up of its thread,
    each a task whose end is noted in place (`asyncio.run_coroutine_threadsafe`, a wake-up
    and a `concurrent.futures.Future` per read, took 50 us).
    """

    def __init__(self, depth: int, budget: int = DEFAULT_BUDGET, attempts: int = ATTEMPTS):
        self.depth = max(0, depth)  # 0: each read handed back before the next starts
        self.budget = budget
        self.attempts = attempts
        self.pending: deque[tuple[object, Future | _Read, int]] = deque()
        self.bytes = 0
        self._pool: ThreadPoolExecutor | None = None
        self._stores = AsyncStores()
        self._cond = threading.Condition()
        self._waiting: _Read | None = None
        # Reads started and not yet taken by their loop, by loop; a loop is here from the
        # wake-up asked of it until it takes them.
        self._unlaunched: dict[asyncio.AbstractEventLoop, list[tuple[object, str, _Read]]] = {}

    def start(self, item, url: str, size: int) -> None:
        target = self._stores(url)
        if target is not None:
            fs, path = target
            future: Future | _Read = _Read(self, fs.loop)
            with self._cond:
                batch = self._unlaunched.get(fs.loop)
                if batch is None:
                    batch = self._unlaunched[fs.loop] = []
                    fs.loop.call_soon_threadsafe(self._launch, fs.loop)
                batch.append((fs, path, future))
        else:
            if self._pool is None:
                # Local files: plain reads on a few threads; a disk wants no deeper queue.
                self._pool = ThreadPoolExecutor(
                    max(1, min(self.depth, LOCAL_DEPTH)), thread_name_prefix="fetch"
                )
            future = self._pool.submit(read_source, url)
        size = max(size, 0)
        self.pending.append((item, future, size))
        self.bytes += size

    def _launch(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`: starts the reads that wait for it."""
        with self._cond:
            batch = self._unlaunched.pop(loop, ())
        for fs, path, read in batch:
            read.task = loop.create_task(_read_object(fs, path, self.attempts))
            read.task.add_done_callback(read.finish)

    def must_wait(self) -> bool:
        return len(self.pending) > self.depth or (
            self.bytes > self.budget and len(self.pending) > 1
        )

    def ready(self) -> bool:
        """Whether the oldest read must be handed back now: it is done, or the window is full."""
        return bool(self.pending) and (self.must_wait() or self.pending[0][1].done())

    def pop(self):
        item, future, size = self.pending.popleft()
        self.bytes -= size
        try:
            return item, future.result()
        except OSError as err:
            return item, err
        except Exception as err:  # raised outside our retries: a local read, say
            return item, _unreadable(err, 1)

    def close(self) -> None:
        reads: dict[asyncio.AbstractEventLoop, list[_Read]] = {}
        for _, future, _ in self.pending:
            if isinstance(future, _Read):
                reads.setdefault(future.loop, []).append(future)
            else:
                future.cancel()
        for loop, unfinished in reads.items():
            # After the loop's `_launch`, if one is still to come: every read has its task.
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs
                loop.call_soon_threadsafe(_cancel, unfinished)
        self.pending.clear()
        self.bytes = 0
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _cancel(reads: list[_Read]) -> None:
    for read in reads:
        if read.task is not None:
            read.task.cancel()


def fetch_in_order(
    items: Iterable[tuple[T, str, int]],
    *,
    depth: int,
    budget: int = DEFAULT_BUDGET,
    attempts: int = ATTEMPTS,
) -> Iterator[tuple[T, bytes | OSError]]:
    """Reads whole files, many at once, and yields (item, bytes or the OSError) in input order.

    Objects on gcsfs or s3fs are read through the filesystem's async interface on fsspec's event
    loop, up to `depth` at once, each tried `attempts` times in all (besides the store client's
    own retries) while the store's error is transient; other files are read on a few threads. At most `depth` reads are in flight, and
    no more bytes than `budget` (by the sizes given, one read always allowed), so memory stays
    bounded however large the images.

    Args:
        items: (item, url, expected size in bytes) triples; the item is handed back unchanged.
        depth: reads in flight at most, besides the one handed back.
        budget: bytes in flight at most.
        attempts: tries per object before it is given up as unreadable.
    """
    fetches = Fetches(depth, budget, attempts)
    try:
        for item, url, size in items:
            fetches.start(item, url, size)
            while fetches.ready():
                yield fetches.pop()
        while fetches.pending:
            yield fetches.pop()
    finally:
        fetches.close()


def run_concurrently(calls: Sequence[Callable[[], T]], *, threads: int = 16) -> list[T]:
    """Runs small IO calls (writes, deletes, checks) at once; returns their results in order.

    Each call is a blocking fsspec call; on an async filesystem they all share its event loop,
    so a dozen round trips cost about one. The first error is raised, after every call ended.
    """
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(min(threads, len(calls)), thread_name_prefix="store-io") as pool:
        futures = [pool.submit(call) for call in calls]
        errors = [f.exception() for f in futures]
    for err in errors:
        if err is not None:
            raise err
    return [f.result() for f in futures]


def read_depth(config: BuildConfig) -> int:
    """Images each worker reads ahead: --read-ahead, else as deep as the inputs' store wants.

    With --input-list the list's own location decides (its entries are not read here).
    """
    if config.read_ahead is not None:
        return config.read_ahead
    return default_depth([*config.inputs, *filter(None, [config.input_list])])
