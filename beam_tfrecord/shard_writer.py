"""Writing one shard: stream its images from their sources into a TFRecord file, published whole."""

from __future__ import annotations

import functools
import io
import logging
import posixpath
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from operator import attrgetter
from typing import TypeVar

import fsspec

from beam_tfrecord import progress
from beam_tfrecord.codec.framing import (
    framed_size,
    parts_crc32c,
)
from beam_tfrecord.codec.record_index import index_file_name, index_line
from beam_tfrecord.codec.records import image_record_parts
from beam_tfrecord.codec.writer import TFRecordWriter
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry, ShardResult, ShardSpec
from beam_tfrecord.images import ImageError, ImageInfo, ImagePolicy, encode_for_tensorflow
from beam_tfrecord.locations import is_object_store, is_remote
from beam_tfrecord.measurement import Prepared
from beam_tfrecord.readahead import read_ahead as ahead_of
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.remote import fetch_in_order
from beam_tfrecord.report import shard_report_name
from beam_tfrecord.resume import keep_finished
from beam_tfrecord.storage import (
    Staged,
    publish,
    read_source,
    size_as_listed,
    temporary_name,
)
from beam_tfrecord.uploads import open_upload, upload_block_size
from beam_tfrecord.wording import count

T = TypeVar("T")

__all__ = [
    "Segment",
    "ShardOutput",
    "ShardStopped",
    "keep_finished",
    "prepare_segment",
    "segment_runs",
    "write_segments",
    "write_shard",
]


_LOG = logging.getLogger(__name__)


class ShardStopped(Exception):
    """A shard's writing was stopped (`write_shard`'s `stop`): nothing of it was published."""


def write_shard(
    spec: ShardSpec,
    entries: Iterable[ImageEntry],
    policy: ImagePolicy,
    *,
    max_record_size: int | None = None,
    resume: bool = False,
    read_ahead: int = 0,
    executor: ThreadPoolExecutor | None = None,
    cpu: threading.Semaphore | None = None,
    framed: Callable[[], object] | None = None,
    stop: threading.Event | None = None,
    inline: bool = False,
) -> tuple[ShardResult, list[ReportEntry]]:
    """Writes one shard; returns what it holds and its report lines.

    This is where each image is read, checked, normalized and framed, once. Records are written
    in shuffle-key order. The next `read_ahead` sources are read while one is written (on
    `executor`'s threads when given), so only that many images' bytes are in memory at a time.
    The same threads check (and, with policy.validate == "decode", decode) each image and
    re-encode it where TensorFlow needs it or the policy transforms it, no more at once than
    `cpu` allows (default: the machine's cores), on the very bytes that are written.

    The report lines are the images left out (unreadable, broken, changed since they were
    listed, too large) and the images written changed (re-encoded, resized...), with why.

    Args:
        spec: the shard's name and place.
        entries: its planned images, in any order.
        policy: how images are checked, normalized and transformed.
        max_record_size: a record larger than this is left out (it fits in no shard).
        resume: keep a shard already at its final name when it verifies against the plan.
        read_ahead: sources read concurrently ahead of the one being written; 0 for none.
        executor: threads to read on, shared between shards; else the call makes its own.
        cpu: bounds the checks and re-encodes running at once, shared between shards.
        framed: called once every image is read and framed, before the shard is published (on
            an object store, before its last upload): the caller may start its next shard.
        stop: once set, the shard stops before its next image, or before it is published, and
            is abandoned (its upload cancelled, its temporary file removed): a build that
            stops does not wait for a shard written on one of its threads to finish.
        inline: the images are checked on this thread, for a process with one core's share
            (`_checked_here`): threads beside it would only take turns with it at the GIL.

    Raises:
        ShardStopped: `stop` was set.
    """
    ordered = sorted(entries, key=lambda e: e.sort_key)
    replaced = ""
    if resume:
        kept = keep_finished(spec, ordered, policy)
        if isinstance(kept, tuple):
            return kept
        replaced = kept or ""
    records = _prepared(ordered, policy, read_ahead, executor, cpu, inline)
    with ShardOutput(spec) as output:
        work = output.frame_all(records, max_record_size, stop)
        if framed is not None:
            framed()
        if stop is not None and stop.is_set():
            raise ShardStopped(spec.file_name)
        output.commit()
    return output.result(sum(e.record_size for e in ordered), work, replaced), output.report


def write_segments(
    spec: ShardSpec,
    planned_bytes: int,
    segments: Iterable[Segment],
    *,
    replaced: str = "",
    framed: Callable[[], object] | None = None,
) -> tuple[ShardResult, list[ReportEntry]]:
    """Writes one shard from its segments (`prepare_segment`), in order; returns what
    `write_shard` returns for the same images, and the shard holds the same bytes.

    The segments are the consecutive runs of the shard's plan in shuffle-key order, whose
    records come to `planned_bytes` (ImageEntry.record_size, summed): other processes prepare
    them while this one writes their bytes as they come. `framed`: as for `write_shard`.
    """
    work: Counter[str] = Counter()
    with ShardOutput(spec) as output:
        for segment in segments:
            output.write_segment(segment)
            work.update(dict(segment.work))
        if framed is not None:
            framed()
        output.commit()
    return output.result(planned_bytes, work, replaced), output.report


@dataclass(frozen=True)
class Segment:
    """A consecutive run of a shard's images, read, checked and framed by any process: the
    bytes its records take in the shard, and what the shard's result and report need of them.

    What lets the images of one shard be prepared on several cores: the framing of a record
    does not depend on where it lands, so the shard is its segments' bytes in order.
    """

    data: bytes  # the framed records, as TFRecordWriter writes them
    sizes: bytes  # each record's framed size, as array("Q") bytes (the index's lengths)
    report: tuple[ReportEntry, ...]
    counts: tuple[tuple[str, int], ...]  # records per class
    work: tuple[tuple[str, int], ...]  # reads, bytes read, decodes, encodes

    @property
    def records(self) -> int:
        return len(self.sizes) // _SIZE_BYTES


_SIZE_BYTES = array("Q").itemsize

# A segment's images at most, and their source bytes at most (an image larger than that is a
# segment of its own): enough that handing a segment to a process and its records back is
# small beside the work, few enough that the shard's processes all have segments to prepare.
SEGMENT_IMAGES = 2048
SEGMENT_BYTES = 4 * 1024 * 1024


def segment_runs(
    ordered: Iterable[T], source_size: Callable[[T], int] = attrgetter("source_size")
) -> Iterator[list[T]]:
    """A shard's images, in order, cut into consecutive runs for `prepare_segment`: ImageEntry
    objects, or anything `source_size` gives an image's source size of (entries' bytes)."""
    run: list[T] = []
    size = 0
    for entry in ordered:
        entry_size = source_size(entry)
        if run and (len(run) >= SEGMENT_IMAGES or size + entry_size > SEGMENT_BYTES):
            yield run
            run, size = [], 0
        run.append(entry)
        size += entry_size
    if run:
        yield run


def prepare_segment(
    ordered: list[ImageEntry],
    policy: ImagePolicy,
    *,
    max_record_size: int | None = None,
    read_ahead: int = 0,
    executor: ThreadPoolExecutor | None = None,
    cpu: threading.Semaphore | None = None,
    inline: bool = False,
) -> Segment:
    """Reads, checks and frames a run of a shard's images (in shuffle-key order) as
    `write_shard` would, into memory: the run's records, bytes for bytes.

    `inline`: the images are checked on this thread, for a process with one core's share of
    the machine; the threads of `executor` then only read ahead, and only while reads wait on
    the disk (`_checked_here`)."""
    buffer = io.BytesIO()
    report: list[ReportEntry] = []
    counts: Counter[str] = Counter()
    work: Counter[str] = Counter()
    sizes = array("Q")
    with TFRecordWriter(buffer) as writer:
        for entry, encoded in _prepared(ordered, policy, read_ahead, executor, cpu, inline):
            ready = _record_for(entry, encoded.result, report, max_record_size, work)
            if ready is None:
                continue
            sizes.append(writer.write_parts(ready.record, crc=ready.crc))
            if entry.label is not None:
                counts[entry.label] += 1
    return Segment(
        buffer.getvalue(),
        sizes.tobytes(),
        tuple(report),
        tuple(counts.items()),
        tuple(work.items()),
    )


class ShardOutput:
    """One shard being written: the publish step as an object.

    Opened, its records go to a temporary name beside the final one (on an object store: an
    upload left uncommitted, which no reader sees). `commit` publishes, in an order that never
    lets a reader see a part: the shard's report lines, then the shard under its final name,
    then its index. Leaving the `with` block without a commit (an error, an interrupt) aborts:
    the temporary file goes, or the upload is cancelled, and nothing of the shard appears.
    """

    def __init__(self, spec: ShardSpec):
        self.spec = spec
        self.report: list[ReportEntry] = []
        self._counts: Counter[str] = Counter()
        # A few bytes per record; held until the shard is published, so that no index ever
        # describes a shard that is not there.
        self._index: list[str] = []
        self._tally = progress.Tally()  # the images written, handed on in sums
        fs, final_path = fsspec.core.url_to_fs(spec.url)
        self._fs, self._final = fs, final_path
        folder = posixpath.dirname(final_path)
        self._index_path = posixpath.join(folder, index_file_name(spec.file_name))
        self._report_path = posixpath.join(folder, shard_report_name(spec.file_name))
        self._direct = is_object_store(fs)
        self._temp = final_path if self._direct else temporary_name(final_path)
        self._committed = False

    def __enter__(self) -> ShardOutput:
        _LOG.debug("writing shard %s", self.spec.file_name)
        fs = self._fs
        fs.makedirs(posixpath.dirname(self._final), exist_ok=True)
        # On an object store, an upload that appears only when committed (`uploads`).
        if self._direct:
            self._out = open_upload(fs, self._temp, upload_block_size(fs))
        else:
            self._out = fs.open(self._temp, "wb")
        # The writer keeps the file's checksum as it goes, so the shard is never read back.
        self.writer = TFRecordWriter(self._out, checksum=True).__enter__()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self._tally.flush()
        if not self._committed:
            self._abort()

    def frame_all(
        self,
        records: Iterable[tuple[ImageEntry, _Outcome | Future]],
        max_record_size: int | None,
        stop: threading.Event | None = None,
    ) -> Counter[str]:
        """Frames each prepared image in turn, or reports it; returns the work done.

        Raises:
            ShardStopped: `stop` was set (before an image).
        """
        work: Counter[str] = Counter()
        writer, index, tally, counts = self.writer, self._index, self._tally, self._counts
        report = self.report
        stopped = stop.is_set if stop is not None else bool
        for entry, encoded in records:
            if stopped():
                raise ShardStopped(self.spec.file_name)
            ready = _record_for(entry, encoded.result, report, max_record_size, work)
            if ready is None:
                continue
            offset = writer.bytes_written
            size = writer.write_parts(ready.record, crc=ready.crc)
            index.append(index_line(offset, size))
            tally.add("written", 1, size)
            if entry.label is not None:
                counts[entry.label] += 1
        return work

    def write_segment(self, segment: Segment) -> None:
        """Writes a segment's records as they are, after the records before it."""
        offset = self.writer.bytes_written
        self.writer.write_framed(segment.data, segment.records)
        index = self._index
        for size in array("Q", segment.sizes):
            index.append(index_line(offset, size))
            offset += size
        self.report.extend(segment.report)
        self._counts.update(dict(segment.counts))
        self._tally.add("written", segment.records, len(segment.data))

    def commit(self) -> None:
        """Publishes the shard whole: its report lines, the shard, then its index.

        On a local disk the index is written before the shard is published, and named after
        it: a full disk fails the shard, not its index once the shard is there."""
        self.writer.close()
        fs = self._fs
        index: Staged | None = None
        try:
            index = Staged(fs, self._index_path, "".join(self._index).encode("ascii"))
            # Before the shard: a shard under its final name always has its report lines.
            report = "".join(r.to_json() + "\n" for r in self.report)
            publish(fs, self._report_path, report.encode("utf-8"))
            if self._direct:
                self._out.commit()
            else:
                self._out.close()
                fs.mv(self._temp, self._final)
        except BaseException:
            if index is not None:
                index.discard()
            raise
        self._committed = True
        self._tally.flush()
        index.publish()

    def _abort(self) -> None:
        if self._direct:
            self._out.abandon()
        else:
            self._out.close()
            if self._fs.exists(self._temp):
                self._fs.rm(self._temp)

    def result(self, planned_bytes: int, work: Counter[str], replaced: str) -> ShardResult:
        """What the committed shard holds (ShardResult)."""
        writer, spec = self.writer, self.spec
        result = ShardResult(
            split=spec.split,
            index=spec.index,
            file_name=spec.file_name,
            examples=writer.records_written,
            bytes=writer.bytes_written,
            crc32c=f"{writer.crc32c:08x}",
            class_counts=tuple(sorted(self._counts.items())),
            index_file=index_file_name(spec.file_name),
            planned_bytes=planned_bytes,
            reads=work["reads"],
            bytes_read=work["bytes_read"],
            decodes=work["decodes"],
            encodes=work["encodes"],
            replaced=replaced,
        )
        _LOG.debug(
            "wrote shard %s: %s, %s",
            spec.file_name,
            count(result.examples, "example"),
            count(result.bytes, "byte"),
        )
        return result


def _prepared(
    ordered: list[ImageEntry],
    policy: ImagePolicy,
    read_ahead: int,
    executor: ThreadPoolExecutor | None,
    cpu: threading.Semaphore | None,
    inline: bool = False,
) -> Iterator[tuple[ImageEntry, _Outcome | Future]]:
    """Each image with its preparation (`_encoded`), in order: something whose `result()`
    gives the record, or raises what preparing it raised."""
    remote = any(is_remote(e.url) for e in ordered)
    if inline and remote:
        # The reads run on the store's event loop; this thread checks each image as its bytes
        # come, in order. `cpu`, if given, is shared with the shards written beside this one.
        here = functools.partial(_encoded, policy=policy, cpu=cpu or threading.Lock())
        fetched = _fetched(ordered, read_ahead)
        return ((entry, _Outcome.of(here, entry, data)) for entry, data in fetched)
    if inline:
        # One thread checks every image: a lock no other thread takes bounds it, at a tenth of
        # a semaphore's cost an image.
        here = functools.partial(_encoded, policy=policy, cpu=threading.Lock())
        return _checked_here(ordered, here, read_ahead, executor)
    encode = functools.partial(
        _encoded, policy=policy, cpu=cpu or threading.Semaphore(usable_cores())
    )
    if read_ahead and remote:
        # Objects: many reads in flight through the store's async interface; the threads
        # then only check and encode, on bytes already here.
        fetched = _fetched(ordered, read_ahead)
        return (
            (entry, future)
            for (entry, _), future in ahead_of(
                fetched,
                lambda pair: encode(pair[0], data=pair[1]),
                threads=read_ahead,
                size_of=lambda pair: pair[0].source_size,
                executor=executor,
            )
        )
    # A thread takes a run of images, not one: handing an image to a thread and its record
    # back costs tens of microseconds, more than all the work on a small image.
    runs = ahead_of(
        _runs(ordered),
        lambda run: [_Outcome.of(encode, entry, None) for entry in run],
        threads=read_ahead,
        size_of=lambda run: sum(e.source_size for e in run),
        executor=executor,
    )
    return (pair for run, outcomes in runs for pair in zip(run, outcomes.result(), strict=True))


def _fetched(ordered: list[ImageEntry], read_ahead: int):
    """Each object's bytes (or the OSError reading it raised), in order, `read_ahead` reads
    in flight on the store's event loop."""
    return fetch_in_order(((e, e.url, e.source_size) for e in ordered), depth=read_ahead)


# Reads wait when the thread that checks the images spent longer than this a file, on average
# over the shard so far, off its core while it gave the core up to wait for them: a disk's, a
# network's or a FUSE file system's reads. A read from the page cache keeps its thread on the
# core. Preemption does not count: with a launcher beside two workers on 2 cores, a worker is
# preempted for a millisecond or two now and then, and a run of one 100 KB photograph that
# took such a turn once looked like a wait (each of a build's ten shards went over to threads
# that way, and the threads cost 0.2 s of CPU a process).
_WAITED_SECONDS_PER_FILE = 200e-6


class _ReadWaits:
    """Whether this thread's reads wait (`_WAITED_SECONDS_PER_FILE`), from each run's."""

    __slots__ = ("files", "waited")

    def __init__(self) -> None:
        self.files = 0
        self.waited = 0.0

    def add(self, files: int, off_core: float, gave_up_core: bool) -> bool:
        """Counts a run of `files` reads, this long off the core, in which the thread gave
        up its core to wait (or may have: where the system does not say); whether reads wait."""
        self.files += files
        if gave_up_core:
            self.waited += off_core
        return self.waited > self.files * _WAITED_SECONDS_PER_FILE


def _waits() -> int | None:
    """How many times this thread has given up its core to wait so far (its voluntary context
    switches; involuntary ones are preemption); None where the system does not say."""
    if _RUSAGE_THREAD is None:
        return None
    return resource.getrusage(_RUSAGE_THREAD).ru_nvcsw


try:
    import resource

    _RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
except ImportError:  # not on this system
    _RUSAGE_THREAD = None


def _checked_here(
    ordered: list[ImageEntry],
    encode: Callable[..., _Prepared],
    read_ahead: int,
    executor: ThreadPoolExecutor | None,
) -> Iterator[tuple[ImageEntry, _Outcome]]:
    """`_prepared` for a process with one core's share: every image checked on this thread,
    as a plain loop would, its file read here while reads come from memory; once reads wait
    (`_ReadWaits`), the rest are read `read_ahead` runs ahead on threads, which keep the disk
    busy.

    Threads that check images beside this one would only take turns with it at the GIL, and
    threads that read a page cache's files take it from this one as often: on 120,000 small
    PNGs with warm caches, a build with no threads at all took 0.93 times the time and 0.94
    times the CPU of one with them. From a cold cache, reading on this thread alone took 1.45
    times as long, so it reads ahead once a read is seen to wait.
    """
    runs = _runs(ordered)
    waits = _ReadWaits()
    for run in runs:
        switches, started, cpu = _waits(), time.perf_counter(), time.thread_time()
        datas = _read_run(run)
        off_core = (time.perf_counter() - started) - (time.thread_time() - cpu)
        # Taken before the images are checked: a kept record (`ImageEntry.prepared`) is read
        # from its file then, which is no read of a source.
        gave_up_core = switches is None or _waits() != switches
        waited = waits.add(len(run), off_core, gave_up_core)
        yield from _outcomes(run, datas, encode)
        if waited and read_ahead:
            break
    else:
        return
    read = ahead_of(
        runs,
        _read_run,
        threads=read_ahead,
        size_of=lambda run: sum(e.source_size for e in run),
        executor=executor,
    )
    for run, datas in read:
        yield from _outcomes(run, datas.result(), encode)


def _outcomes(
    run: list[ImageEntry], datas: list[bytes | OSError | None], encode: Callable[..., _Prepared]
) -> Iterator[tuple[ImageEntry, _Outcome]]:
    for entry, data in zip(run, datas, strict=True):
        yield entry, _Outcome.of(encode, entry, data)


def _read_run(run: list[ImageEntry]) -> list[bytes | OSError | None]:
    """Each source's bytes, or the OSError reading it raised; None for an image whose record
    measuring kept (`_encoded` copies it)."""
    return [None if entry.prepared else _read_or_error(entry.url) for entry in run]


def _read_or_error(url: str) -> bytes | OSError:
    try:
        return read_source(url)
    except OSError as err:
        return err


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One image made ready to write: its record in pieces (`image_record_parts`) and their
    CRC32C, what TensorFlow decodes from the image it holds, and the source bytes read."""

    record: tuple[bytes, ...]
    crc: int
    info: ImageInfo | Prepared  # what the report and the work counts need: notes, decoded...
    bytes_read: int

    @property
    def framed_size(self) -> int:
        return framed_size(sum(map(len, self.record)))


def _encoded(
    entry: ImageEntry,
    *,
    policy: ImagePolicy,
    cpu: AbstractContextManager,
    data: bytes | OSError | None = None,
) -> _Prepared:
    """A planned image's record, ready to frame.

    The image's one read and its one check: a header check, or a decode with
    validate="decode", and for an image that must change, its one decode and one encode.
    The record is built here too, on the read-ahead thread: its SHA-256 and CRC32C over the
    image bytes then run beside the other images' decodes, not on the one thread that writes.
    `data` is the source's bytes, or the OSError reading them raised, when they were read
    ahead; None to read them now. An image whose record measuring its size made on this machine
    (`ImageEntry.prepared`) is neither read nor checked again: its record is copied.

    Raises:
        OSError: the source cannot be read (FileNotFoundError: it is gone), or the record
            measuring made is gone or damaged.
        ImageError: it cannot be decoded or re-encoded.
        _SourceChanged: it is not the size it was listed at.
    """
    if entry.prepared:
        # Measuring its size made the record (`measure_into`): copied, not made again.
        kept = Prepared.from_text(entry.prepared)
        return _Prepared((kept.read(),), kept.crc, kept, entry.source_size)
    if isinstance(data, OSError):
        raise data
    if data is None:
        data = read_source(entry.url)
    read = size_as_listed(data, entry.source_size)
    if read != entry.source_size:
        raise _SourceChanged(entry.source_size, read)
    with cpu:
        encoded, info = encode_for_tensorflow(data, policy)
        record = image_record_parts(
            encoded,
            image_format=info.format,
            height=info.height,
            width=info.width,
            channels=info.channels,
            filename=entry.relpath,
            label=entry.class_id,
            label_text=entry.label,
        )
        return _Prepared(record, parts_crc32c(record), info, read)


# A run of images one read-ahead thread reads and checks in turn: images until their files hold
# this many bytes, or this many images. An image of this size or larger is a run of its own, as
# every image was before runs: on a photograph the hand-over is small beside its decode.
_RUN_BYTES = 64 * 1024
_RUN_IMAGES = 64


def _runs(entries: list[ImageEntry]) -> Iterator[list[ImageEntry]]:
    """The entries, in order, in consecutive runs of small images (`_RUN_BYTES`, `_RUN_IMAGES`)."""
    run: list[ImageEntry] = []
    size = 0
    for entry in entries:
        run.append(entry)
        size += entry.source_size
        if size >= _RUN_BYTES or len(run) >= _RUN_IMAGES:
            yield run
            run, size = [], 0
    if run:
        yield run


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What preparing one image of a run gave: its record, or the error raised, which
    `result()` raises again (as a Future's does) for `_record_for` to report."""

    value: _Prepared | None
    error: Exception | None

    @classmethod
    def of(
        cls, encode: Callable[..., _Prepared], entry: ImageEntry, data: bytes | OSError | None
    ) -> _Outcome:
        """`encode(entry, data=data)`'s record, or the error it raised."""
        try:
            return cls(encode(entry, data=data), None)
        except Exception as err:
            return cls(None, err)

    def result(self) -> _Prepared:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class _SourceChanged(Exception):
    def __init__(self, listed: int, now: int):
        super().__init__(f"the file changed since it was listed ({listed} -> {now} bytes)")
        self.now = now


def _record_for(
    entry: ImageEntry,
    prepared: Callable[[], _Prepared],
    report: list[ReportEntry],
    max_record_size: int | None,
    work: Counter[str],
) -> _Prepared | None:
    """The record of one planned image, or None (and a report entry) if it cannot be written.
    An image changed to be written gets a report entry too.

    `prepared` returns what `_encoded` returns for the entry, or raises what it raised.
    """

    def skip(reason: str, message: str) -> None:
        report.append(
            ReportEntry(
                entry.url, entry.relpath, reason, message, split=entry.split, label=entry.label
            )
        )

    try:
        ready = prepared()
    except FileNotFoundError:
        skip(Reason.VANISHED, "the file was listed but was gone when its shard was written")
        return None
    except OSError as err:
        skip(Reason.READ_ERROR, f"cannot read: {err}")
        return None
    except ImageError as err:
        # Read whole, and found wanting: a read all the same (its size was checked first).
        work["reads"] += 1
        work["bytes_read"] += entry.source_size
        skip(err.code, err.message)
        return None
    except _SourceChanged as err:
        work["reads"] += 1
        work["bytes_read"] += err.now
        skip(Reason.SOURCE_CHANGED, str(err))
        return None
    info = ready.info
    # Not Counter.update(**counts): its loop costs more than the four additions.
    work["reads"] += 1
    work["bytes_read"] += ready.bytes_read
    work["decodes"] += info.decoded
    work["encodes"] += info.reencode
    size = ready.framed_size
    if max_record_size is not None and size > max_record_size:
        skip(
            Reason.TOO_LARGE,
            f"its record is {size} bytes, over --max-shard-size {max_record_size}",
        )
        return None
    if info.reencode:
        report.append(
            ReportEntry(
                entry.url, entry.relpath, Reason.NORMALIZED,
                "re-encoded so that TensorFlow decodes it as stated: " + ", ".join(info.notes),
                action="modified", split=entry.split, label=entry.label, notes=info.notes,
            )
        )  # fmt: skip
    return ready
