"""Reading ahead: results in order, the window and byte budget held, errors handed to their item."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.readahead import (
    ReadAhead,
    StreamsAhead,
    new_executor,
    read_ahead,
    worker_threads,
)


def _consume(pairs):
    out = []
    for item, future in pairs:
        try:
            out.append((item, future.result()))
        except Exception as err:
            out.append((item, type(err).__name__))
    return out


@settings(max_examples=60, deadline=None)
@given(
    delays=st.lists(st.integers(0, 3), max_size=40),
    threads=st.integers(0, 6),
)
def test_results_come_in_item_order_whatever_order_reads_finish_in(delays, threads):
    def fetch(i):
        time.sleep(delays[i] / 1000)
        return i * 10

    got = _consume(read_ahead(range(len(delays)), fetch, threads=threads))
    assert got == [(i, i * 10) for i in range(len(delays))]


def test_no_more_than_threads_items_are_in_flight():
    in_flight, peak, lock = 0, 0, threading.Lock()
    release = threading.Event()

    def fetch(i):
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        release.wait(0.01)
        with lock:
            in_flight -= 1
        return i

    assert [i for i, _ in read_ahead(range(50), fetch, threads=4)] == list(range(50))
    assert 2 <= peak <= 4


def test_the_window_is_deeper_than_the_threads():
    # 16 items queued ahead, worked on by no more threads than the machine's cores and one: more
    # threads than that only queue for the GIL between their decodes.
    threads, started, lock = set(), [], threading.Lock()
    gate = threading.Event()

    def fetch(i):
        with lock:
            threads.add(threading.get_ident())
            started.append(i)
        gate.wait(5)
        return i

    with ReadAhead(fetch, threads=16) as ahead:
        ready = [pair for i in range(16) for pair in ahead.add(i)]
        assert ready == [], "the first 16 items are all in the window, none handed back yet"
        time.sleep(0.1)
        assert len(started) == worker_threads(), "every thread busy, the rest of the window queued"
        gate.set()
        assert [item for item, future in ahead.drain() if future.result() == item] == list(
            range(16)
        )
    assert len(threads) == worker_threads()


def test_the_byte_budget_holds_back_large_items():
    order = []
    with ReadAhead(lambda i: i, threads=8, budget=100, size_of=lambda i: 60) as ahead:
        for i in range(10):
            order += [item for item, _ in ahead.add(i)]
            # Two 60-byte items are over the budget: the older one is handed back at once.
            assert len(ahead._pending) <= 1
        order += [item for item, _ in ahead.drain()]
    assert order == list(range(10))


def test_an_item_larger_than_the_budget_still_goes_through():
    got = _consume(read_ahead([1, 2], lambda i: i, threads=2, budget=10, size_of=lambda i: 1000))
    assert got == [(1, 1), (2, 2)]


def test_an_error_belongs_to_its_item_and_later_items_still_come():
    def fetch(i):
        if i == 3:
            raise FileNotFoundError(f"item {i}")
        return i

    got = _consume(read_ahead(range(6), fetch, threads=3))
    assert got == [(0, 0), (1, 1), (2, 2), (3, "FileNotFoundError"), (4, 4), (5, 5)]


def test_a_shared_executor_outlives_the_read_ahead():
    executor = new_executor(2)
    try:
        for _ in range(2):
            assert _consume(read_ahead([1, 2, 3], str, threads=2, executor=executor)) == [
                (1, "1"), (2, "2"), (3, "3"),
            ]  # fmt: skip
        assert executor.submit(lambda: 7).result() == 7
    finally:
        executor.shutdown()


def test_stopping_early_abandons_the_rest_without_hanging():
    fetched = []

    def fetch(i):
        fetched.append(i)
        return i

    pairs = read_ahead(range(1000), fetch, threads=4)
    assert next(pairs)[0] == 0
    pairs.close()
    assert len(fetched) < 1000


def test_negative_threads_are_refused():
    with pytest.raises(ValueError, match="threads"):
        ReadAhead(str, threads=-1)


def _streamed(ahead: StreamsAhead, items) -> list:
    out = []
    for item in items:
        out.extend(ahead.add(item))
    out.extend(ahead.drain())
    return out


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), max_size=12),
    width=st.integers(1, 5),
    chunk=st.integers(1, 7),
)
def test_streams_come_whole_and_in_item_order_whatever_order_they_run_in(lengths, width, chunk):
    def produce(i):
        for j in range(lengths[i]):
            if j % 3 == i % 3:
                time.sleep(0.0005)  # the streams interleave differently from run to run
            yield (i, j)

    with StreamsAhead(produce, width, chunk=chunk, chunks=2) as ahead:
        out = _streamed(ahead, range(len(lengths)))
    assert out == [(i, j) for i, n in enumerate(lengths) for j in range(n)]


def test_streams_run_at_once_up_to_the_width_and_no_further():
    running, most, lock = [0], [0], threading.Lock()
    all_in = threading.Barrier(3, timeout=10)  # three at once, or this times out

    def produce(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if i < 3:
            all_in.wait()
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        yield i

    with StreamsAhead(produce, 3) as ahead:
        assert _streamed(ahead, range(9)) == list(range(9))
    assert most[0] == 3


def test_a_stream_stays_a_few_chunks_ahead_of_its_reader():
    made = []

    def produce(_):
        for j in range(100_000):
            made.append(j)
            yield j

    ahead = StreamsAhead(produce, 1, chunk=10, chunks=3)
    try:
        outputs = ahead.add(0)
        assert list(outputs) == []  # within the width: nothing is owed yet
        time.sleep(0.2)
        # Three chunks queued, and the one the producer holds while it waits for room.
        assert len(made) <= 4 * 10 + 1, len(made)
        drained = ahead.drain()
        assert [next(drained) for _ in range(5)] == [0, 1, 2, 3, 4]
    finally:
        ahead.close()
    assert len(made) < 100_000


def test_an_error_comes_where_its_streams_outputs_stop():
    def produce(i):
        yield i
        if i == 1:
            raise OSError("listing 1 failed")
        yield i

    with StreamsAhead(produce, 2) as ahead:
        out = []
        with pytest.raises(OSError, match="listing 1 failed"):
            for item in range(4):
                for value in ahead.add(item):
                    out.append(value)
            for value in ahead.drain():
                out.append(value)
    assert out == [0, 0, 1]


def test_closing_ends_producers_that_wait_for_room():
    closed = threading.Event()

    def produce(_):
        try:
            while True:
                yield 1
        finally:
            closed.set()

    ahead = StreamsAhead(produce, 2, chunk=5, chunks=1)
    list(ahead.add(0))
    time.sleep(0.05)
    ahead.close()  # returns: the producer stopped waiting, and its generator was closed
    assert closed.is_set()


def test_a_width_below_one_is_refused():
    with pytest.raises(ValueError, match="width"):
        StreamsAhead(iter, 0)
