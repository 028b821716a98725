"""A shard written from segments, its images prepared on several cores: the same shard, byte for
byte, as one process writing it image by image, hostile images normalized or reported alike."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from cloud_servers import gcs_store  # noqa: F401
from hostile_images import hostile_corpus
from PIL import Image
from written_shards import file_digests, one_shard

from beam_tfrecord import compat, shard_processes, shard_writer
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry
from beam_tfrecord.shard_processes import ShardProcesses
from beam_tfrecord.shard_writer import (
    prepare_segment,
    segment_runs,
    write_segments,
    write_shard,
)

POLICY = BuildConfig(inputs=("unused",), output="unused").image


@pytest.fixture
def hostile(tmp_path) -> list[ImageEntry]:
    """The hostile corpus on disk, planned into one shard (a file that is no image among them)."""
    entries = []
    for number, case in enumerate(hostile_corpus()):
        path = tmp_path / "src" / f"{number:02d}" / case.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(case.data)
        relpath = str(path.relative_to(tmp_path / "src"))
        # Keys out of file order: the shard's order is the plan's, whoever prepares what.
        entries.append(
            ImageEntry(
                str(path), relpath, len(case.data), "train", (number * 7919) % 101, "x", 0, 1
            )
        )
    return entries


def _spied(monkeypatch, module, name: str) -> list[tuple]:
    """The positional arguments of each call of `module.name` from now on (it still runs)."""
    calls: list[tuple] = []
    real = getattr(module, name)

    def spied(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spied)
    return calls


def test_segments_make_the_shard_one_writer_makes(hostile, tmp_path, monkeypatch):
    expected, expected_report = write_shard(
        one_shard(tmp_path / "one"), hostile, POLICY, max_record_size=1 << 20
    )
    assert {r.action for r in expected_report} == {"skipped", "modified"}
    monkeypatch.setattr(shard_writer, "SEGMENT_IMAGES", 4)  # many segments of a small shard
    ordered = sorted(hostile, key=lambda e: e.sort_key)
    runs = list(segment_runs(ordered))
    assert len(runs) > 3 and [e for run in runs for e in run] == ordered
    segments = (prepare_segment(run, POLICY, max_record_size=1 << 20) for run in runs)
    result, report = write_segments(
        one_shard(tmp_path / "segments"), sum(e.record_size for e in ordered), segments
    )
    assert result == expected
    assert report == expected_report
    assert file_digests(tmp_path / "segments") == file_digests(tmp_path / "one")


@pytest.mark.parametrize(
    ("reads", "read_ahead", "threads_read"),
    [
        ("quick", 4, False),  # every file read on the checking thread
        ("waiting", 4, True),  # the first run's reads wait: the rest read ahead on threads
        ("waiting", 0, False),  # no reading ahead asked for: read here, however long it takes
    ],
)
def test_a_segment_checked_on_one_thread_is_the_segment_threads_prepare(
    hostile, tmp_path, monkeypatch, reads, read_ahead, threads_read
):
    """A process with one core's share checks its segments' images on its own thread, reading
    ahead on threads only once reads wait: the same records, reports and counts."""
    gone = ImageEntry(str(tmp_path / "gone.png"), "gone.png", 10, "train", 50, "x", 0, 1)
    entries = [*hostile, gone]
    ordered = sorted(entries, key=lambda e: e.sort_key)
    monkeypatch.setattr(shard_writer, "_RUN_IMAGES", 3)  # several runs in a small segment
    threaded = prepare_segment(ordered, POLICY, max_record_size=1 << 20, read_ahead=4)
    assert any(r.reason == "vanished" for r in threaded.report)
    if reads == "waiting":
        monkeypatch.setattr(shard_writer, "_WAITED_SECONDS_PER_FILE", -1.0)
    read_ahead_calls = _spied(monkeypatch, shard_writer, "ahead_of")
    here = prepare_segment(
        ordered, POLICY, max_record_size=1 << 20, read_ahead=read_ahead, inline=True
    )
    assert here == threaded
    assert bool(read_ahead_calls) == threads_read


def test_reads_wait_when_the_thread_gave_up_its_core_for_them_not_when_it_was_preempted():
    """A run of one 100 KB photograph whose read was preempted for 2 ms is no sign that reads
    wait; a read that blocked is, and a single short wait among many quick reads is not."""
    per_file = shard_writer._WAITED_SECONDS_PER_FILE
    waits = shard_writer._ReadWaits()
    assert not waits.add(1, 0.002, gave_up_core=False)  # preempted: its core taken from it
    assert not waits.add(1, 0.0, gave_up_core=False)
    assert waits.add(1, 10 * per_file, gave_up_core=True)  # blocked, for a disk or a network

    quick = shard_writer._ReadWaits()
    assert not any(quick.add(1, per_file / 10, gave_up_core=True) for _ in range(30))
    assert not quick.add(1, 2 * per_file, gave_up_core=True)  # one wait: the average stays low
    assert quick.add(64, 64 * 2 * per_file, gave_up_core=True)  # a run of them: it does not


def test_the_thread_tells_a_wait_for_a_read_from_a_preemption():
    """What `_ReadWaits` is told: a thread that sleeps gave its core up (a voluntary switch), a
    thread that only computes did not."""
    before = shard_writer._waits()
    if before is None:
        pytest.skip("this system does not count a thread's context switches")
    sum(range(10_000))
    assert shard_writer._waits() == before
    time.sleep(0.01)
    assert shard_writer._waits() > before


def test_a_shard_checked_on_one_thread_is_the_shard_threads_write(hostile, tmp_path):
    """`write_shard(inline=True)`, as a worker process with one core's share writes: the same
    shard, report and counts as the read-ahead threads make, hostile images alike."""
    how = {"max_record_size": 1 << 20, "read_ahead": 4}
    expected = write_shard(one_shard(tmp_path / "threads"), hostile, POLICY, **how)
    here = write_shard(one_shard(tmp_path / "here"), hostile, POLICY, inline=True, **how)
    assert here == expected
    assert file_digests(tmp_path / "here") == file_digests(tmp_path / "threads")


@pytest.mark.slow
def test_a_shard_of_objects_checked_on_one_thread_is_the_shard_threads_write(
    hostile,
    tmp_path,
    gcs_store,  # noqa: F811
    monkeypatch,
):
    """From a bucket too: `inline` checks each object on the writing thread as its bytes come
    from the store's event loop, and makes the shard, report and counts the read-ahead threads
    make, hostile images alike, each object read once."""
    bucket = gcs_store.new_bucket("inline")
    objects = []
    for entry in hostile:
        url = f"{bucket}/src/{entry.relpath}"
        with open(entry.url, "rb") as source:
            gcs_store.fs.pipe_file(url, source.read())
        objects.append(dataclasses.replace(entry, url=url))
    gcs_store.proxy.reset_counts()
    threads = []  # the thread of each image's check
    real = shard_writer._encoded

    def encoded(*args, **kwargs):
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(shard_writer, "_encoded", encoded)
    how = {"max_record_size": 1 << 20, "read_ahead": 4}
    expected = write_shard(one_shard(tmp_path / "threads"), objects, POLICY, **how)
    threaded, threads[:] = threads[:], []
    here = write_shard(one_shard(tmp_path / "here"), objects, POLICY, inline=True, **how)
    assert here == expected
    assert file_digests(tmp_path / "here") == file_digests(tmp_path / "threads")
    assert len(threads) == len(threaded) == len(objects)
    assert set(threads) == {threading.get_ident()} != set(threaded)
    assert gcs_store.proxy.counts["read"] == 2 * len(objects)


@pytest.mark.parametrize(("cores", "on_one_thread"), [(1, True), (2, False)])
def test_a_worker_process_checks_a_whole_shard_on_its_thread_when_it_has_one_core(
    hostile, tmp_path, monkeypatch, cores, on_one_thread
):
    """Threads that check images beside the one that frames them only take turns with it at
    the GIL: a process with one core's share checks its shard's images on its own thread."""
    checked_here = _spied(monkeypatch, shard_writer, "_checked_here")
    monkeypatch.setattr(
        shard_processes,
        "_worker",
        {"cores": cores, "executor": None, "cpu": threading.Semaphore(cores)},
    )
    packed = shard_processes._packed(hostile)
    result, _ = shard_processes._write(
        one_shard(tmp_path / "out"), packed, POLICY, 1 << 20, False, 4
    )
    assert result.examples > 0
    assert bool(checked_here) == on_one_thread


@pytest.mark.slow
def test_worker_processes_keep_freed_image_memory_for_their_next_images():
    """Pillow's block cache is on in the tool's worker processes (`compat.reuse_image_memory`):
    a photograph's decode and resize no longer fault in fresh pages for every image."""
    pool = ShardProcesses(1)
    try:
        blocks = pool._pool.submit(Image.core.get_blocks_max).result(timeout=120)
        size = pool._pool.submit(Image.core.get_block_size).result(timeout=120)
    finally:
        pool.close()
    assert (blocks, size) == (compat.PILLOW_BLOCKS, compat.PILLOW_BLOCK_SIZE)


def test_a_segment_is_cut_by_bytes_too_and_a_large_image_is_one_of_its_own(monkeypatch):
    monkeypatch.setattr(shard_writer, "SEGMENT_BYTES", 1000)
    sizes = [300, 300, 300, 300, 5000, 10, 10]
    entries = [ImageEntry(f"/{i}", f"{i}", s, "train", i) for i, s in enumerate(sizes)]
    runs = [[e.source_size for e in run] for run in segment_runs(entries)]
    assert runs == [[300, 300, 300], [300], [5000], [10, 10]]


@pytest.mark.slow
def test_worker_processes_prepare_the_segments_of_one_shard(hostile, tmp_path, monkeypatch):
    expected, expected_report = write_shard(
        one_shard(tmp_path / "one"), hostile, POLICY, max_record_size=1 << 20
    )
    # Read where segments are cut, in this process: the processes only prepare them.
    monkeypatch.setattr(shard_writer, "SEGMENT_IMAGES", 3)
    pool = ShardProcesses(2)
    try:
        how = {"max_record_size": 1 << 20, "resume": False, "read_ahead": 4}
        future = pool.submit_in_segments(one_shard(tmp_path / "pooled"), hostile, POLICY, **how)
        result, report = future.result(timeout=120)
        assert (result, report) == (expected, expected_report)
        assert file_digests(tmp_path / "pooled") == file_digests(tmp_path / "one")
        # --resume finds the finished shard and keeps it, as write_shard does.
        kept = pool.submit_in_segments(
            one_shard(tmp_path / "pooled"), hostile, POLICY, **{**how, "resume": True}
        )
        kept_result, kept_report = kept.result(timeout=120)
        assert kept_result.resumed and kept_report == expected_report
        assert kept_result.crc32c == expected.crc32c and kept_result.bytes == expected.bytes
    finally:
        pool.close()
    assert file_digests(tmp_path / "pooled") == file_digests(tmp_path / "one")


def test_a_failed_segment_publishes_nothing(hostile, tmp_path, monkeypatch):
    """An error while the shard is written (here: a segment that cannot be had) leaves no shard,
    no temporary file, no report and no index behind."""
    ordered = sorted(hostile, key=lambda e: e.sort_key)

    def segments():
        yield prepare_segment(ordered[:3], POLICY)
        raise OSError("the segment's process died")

    with pytest.raises(OSError, match="process died"):
        write_segments(one_shard(tmp_path / "out"), sum(e.record_size for e in ordered), segments())
    assert file_digests(tmp_path / "out") == {}
