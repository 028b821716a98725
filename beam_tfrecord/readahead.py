"""Reading ahead: a few threads fetch the next sources while the caller works through them in order.

A build is a copy with a little work per image, and reading one file at a time leaves the disk
(or the object store, where every read waits a round trip) idle while that work runs, and the
CPU idle while each read waits. `ReadAhead` keeps a bounded number of fetches in flight and
hands the results back in the order the items came, so what a worker outputs does not depend
on which read finished first.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = [
    "DEFAULT_BUDGET",
    "ReadAhead",
    "StreamsAhead",
    "new_executor",
    "read_ahead",
    "usable_cores",
    "worker_threads",
]

T = TypeVar("T")
R = TypeVar("R")

# Bytes in flight at most (by the caller's estimate), whatever the number of threads: a run of
# large images holds up the window before it holds up memory.
DEFAULT_BUDGET = 64 * 1024 * 1024


def new_executor(
    threads: int, initializer: Callable[[], object] | None = None
) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="read-ahead", initializer=initializer)


def worker_threads() -> int:
    """Threads that read and check images: one per core, and one more to read while the others
    decode.

    Not one per image read ahead: the window of reads in flight (`threads` of `ReadAhead`) is
    deeper than this, and more threads than cores only queue for the GIL between their decodes
    (16 threads on 2 cores wrote shards 25-35% slower than 3, from a warm or a cold cache).
    Object stores' reads do not take a thread: `remote.fetch_in_order` awaits them.
    """
    return usable_cores() + 1


def usable_cores() -> int:
    """The cores this process may run on: how many CPU-bound fetches make sense at once."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class ReadAhead(Generic[T, R]):
    """Runs `fetch(item)` on a thread pool, at most `threads` items ahead, results in order.

    Feed items with `add`, which returns the (item, future) pairs that must be consumed now,
    oldest first: those already fetched, and as many as it takes to bring the window back to
    `threads` items and `budget` bytes. `drain` returns the rest. `future.result()` returns what
    `fetch` returned or raises what it raised.

    With threads=0 every fetch runs in the caller's thread when its item is added. An
    `executor` given is shared, not shut down by `close`; else the object has threads of its
    own, `worker_threads()` of them at most: the window is items queued, not threads.
    """

    def __init__(
        self,
        fetch: Callable[[T], R],
        *,
        threads: int,
        budget: int = DEFAULT_BUDGET,
        size_of: Callable[[T], int] | None = None,
        executor: ThreadPoolExecutor | None = None,
    ):
        if threads < 0:
            raise ValueError(f"threads must be 0 or more, got {threads}")
        self._fetch = fetch
        self._threads = threads
        self._budget = budget
        self._size_of = size_of or (lambda _: 0)
        self._pending: deque[tuple[T, Future[R], int]] = deque()
        self._bytes = 0
        self._own_pool = executor is None and threads > 0
        self._pool = (
            executor
            if executor is not None or not threads
            else new_executor(min(threads, worker_threads()))
        )

    def add(self, item: T) -> list[tuple[T, Future[R]]]:
        if self._pool is None:
            future: Future[R] = Future()
            try:
                future.set_result(self._fetch(item))
            except Exception as err:  # handed to the caller with its item, as a thread would
                future.set_exception(err)
            return [(item, future)]
        size = self._size_of(item)
        self._pending.append((item, self._pool.submit(self._fetch, item), size))
        self._bytes += size
        ready = []
        while self._pending and (
            self._pending[0][1].done()
            or len(self._pending) > self._threads
            or (self._bytes > self._budget and len(self._pending) > 1)
        ):
            ready.append(self._pop())
        return ready

    def drain(self) -> list[tuple[T, Future[R]]]:
        return [self._pop() for _ in range(len(self._pending))]

    def close(self) -> None:
        """Stops the threads; fetches not yet consumed are abandoned."""
        for _, future, _ in self._pending:
            future.cancel()
        self._pending.clear()
        self._bytes = 0
        if self._own_pool:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _pop(self) -> tuple[T, Future[R]]:
        item, future, size = self._pending.popleft()
        self._bytes -= size
        return item, future

    def __enter__(self) -> ReadAhead[T, R]:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def read_ahead(
    items: Iterable[T],
    fetch: Callable[[T], R],
    *,
    threads: int,
    budget: int = DEFAULT_BUDGET,
    size_of: Callable[[T], int] | None = None,
    executor: ThreadPoolExecutor | None = None,
) -> Iterator[tuple[T, Future[R]]]:
    """(item, future of fetch(item)) for every item, in order, fetched up to `threads` ahead."""
    with ReadAhead(
        fetch, threads=threads, budget=budget, size_of=size_of, executor=executor
    ) as ahead:
        for item in items:
            yield from ahead.add(item)
        yield from ahead.drain()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


_END = object()


class StreamsAhead(Generic[T, R]):
    """Runs `produce(item)`, an iterable, for up to `width` items at once, each on a thread of the
    pool, and hands their outputs back item after item, in the order the items came.

    For work that waits: listing a bucket's folders takes a round trip per page, and one folder
    after another leaves the store idle between them. Each producer keeps at most `chunks`
    lists of `chunk` outputs ahead of its reader, so a folder of millions of files is never held
    whole, however far its turn is. Feed items with `add`, whose outputs (of the items that must
    be read before another may start) are to be consumed at once; `drain` gives the rest; what
    a producer raised is raised where its outputs stop. `close` cancels what is left.
    """

    def __init__(
        self,
        produce: Callable[[T], Iterable[R]],
        width: int,
        *,
        chunk: int = 1000,
        chunks: int = 4,
    ):
        if width < 1:
            raise ValueError(f"width must be 1 or more, got {width}")
        self._produce = produce
        self._width = width
        self._chunk = chunk
        self._chunks = chunks
        self._pending: deque[queue.Queue] = deque()
        self._cancelled = threading.Event()
        self._pool = ThreadPoolExecutor(width, thread_name_prefix="stream-ahead")

    def add(self, item: T) -> Iterator[R]:
        outputs: queue.Queue = queue.Queue(self._chunks)
        self._pool.submit(self._run, item, outputs)
        self._pending.append(outputs)
        return self._beyond_width()

    def _beyond_width(self) -> Iterator[R]:
        while len(self._pending) > self._width:
            yield from self._read(self._pending.popleft())

    def drain(self) -> Iterator[R]:
        while self._pending:
            yield from self._read(self._pending.popleft())

    def close(self) -> None:
        """Stops the producers; outputs not yet read are dropped."""
        self._cancelled.set()
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, item: T, outputs: queue.Queue) -> None:
        produced = iter(())
        chunk: list[R] = []
        try:
            produced = iter(self._produce(item))
            for output in produced:
                chunk.append(output)
                if len(chunk) >= self._chunk:
                    if not self._put(outputs, chunk):
                        return
                    chunk = []
            end = _END
        except BaseException as err:  # raised by the reader, where this item's outputs stop
            end = _Failed(err)
        finally:
            close = getattr(produced, "close", None)
            if close is not None:
                close()  # a generator cancelled half-way ends its own requests now
        if not chunk or self._put(outputs, chunk):
            self._put(outputs, end)

    def _put(self, outputs: queue.Queue, value) -> bool:
        """Puts `value` once there is room; False if cancelled first."""
        while not self._cancelled.is_set():
            try:
                outputs.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    @staticmethod
    def _read(outputs: queue.Queue) -> Iterator[R]:
        while (value := outputs.get()) is not _END:
            if isinstance(value, _Failed):
                raise value.error
            yield from value

    def __enter__(self) -> StreamsAhead[T, R]:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
