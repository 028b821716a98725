"""Reading ahead: results in order, the window and byte budget held, errors handed to their item."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.readahead import ReadAhead, new_executor, read_ahead, worker_threads


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
