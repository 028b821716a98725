"""Shards written by worker processes of this machine: how a one-process build uses its cores.

A build that runs in one process (the DirectRunner in memory, a local build's default) would
check and frame every image under one GIL; Pillow lets go of it only while it decodes. Its shard
writer can instead hand each shard's plan (paths, sizes, labels: never image bytes) to one of a
few processes of its own, which writes the shard with `write_shard`, as any worker would, and
sends back the shard's result and report lines. A shard is the same bytes whoever writes it.

The processes are never forked from the launcher (it runs threads: a forked copy of them could
hold a lock forever). In a program, each is started by `spawn`, imports what it runs, and not
the program's `__main__` (a script that calls `build` without an `if __name__ == "__main__":`
guard would run its build again in each). The `beam-tfrecord` command has them forked from a
server of its own instead (`fork_from_server`): one process, started fresh, that imports their
modules once (Pillow, fsspec, the store's client: 0.2 s of CPU, 0.5 s with gcsfs) and forks
every worker from there, where each would import them again. They ignore SIGINT, from their
first instruction on (they start with it blocked): Ctrl-C reaches the whole process group, and
what an interrupt stops is the launcher's to decide. SIGTERM, which the launcher sends them
when it stops, ends a shard being written as any error would, its temporary file removed, and
then the process.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import multiprocessing
import os
import pickle
import posixpath
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import fsspec
import fsspec.config

from beam_tfrecord import progress
from beam_tfrecord.batches import PackedEntries, SourceBatch, batched, in_shard_order
from beam_tfrecord.codec.record_index import index_file_name
from beam_tfrecord.compat import (
    SpawnWithoutMain,
    end_fork_server,
    reuse_image_memory,
    wait_for_exit,
)
from beam_tfrecord.entries import ImageEntry, ReportEntry, ShardResult, ShardSpec
from beam_tfrecord.head_start import HeadStart, plan_digest, plan_shards
from beam_tfrecord.images.decode import quiet_pillow_for_good
from beam_tfrecord.images.policy import ImagePolicy
from beam_tfrecord.listing import ListingTask, expand_task, left_out_counter
from beam_tfrecord.measurement import measure_into
from beam_tfrecord.planning import hash_source
from beam_tfrecord.readahead import new_executor, usable_cores, worker_threads
from beam_tfrecord.report import shard_report_name
from beam_tfrecord.shard_writer import (
    Segment,
    keep_finished,
    prepare_segment,
    segment_runs,
    write_segments,
    write_shard,
)
from beam_tfrecord.storage import read_source, remove, with_its_words

__all__ = [
    "PROCESSES_MIN_BYTES",
    "PROCESSES_MIN_IMAGES",
    "ShardProcesses",
    "ShardThreads",
    "discard_started",
    "fork_from_server",
    "in_segments",
    "settings_travel",
    "start_early",
    "started",
    "take_started",
]

_LOG = logging.getLogger(__name__)

# How long a worker process ended by SIGTERM has to remove its temporary file, before SIGKILL.
_TERM_GRACE_SECONDS = 5.0

# Worker processes start in about half a second (Python, Pillow, fsspec): below this many planned
# bytes, a build's shards are written sooner by the launcher alone, unless they hold this many
# images (small images cost their work per image: 20,000 PNGs of 32x32 are about 3 s of one
# core's work in 36 MB).
PROCESSES_MIN_BYTES = 64 * 10**6
PROCESSES_MIN_IMAGES = 20_000

# A worker process's threads and CPU permits, shared by the shards it writes (set when it starts).
_worker: dict[str, Any] = {}

# Processes started before the build's shard writer asks for them (`start_early`).
_started: list[ShardProcesses] = []


class ShardProcesses:
    """Up to `processes` worker processes, each writing one shard at a time."""

    def __init__(self, processes: int):
        self.processes = processes
        log_level = logging.getLogger("beam_tfrecord").getEffectiveLevel()
        self._pool = ProcessPoolExecutor(
            processes,
            mp_context=_context(),
            initializer=_start_worker,
            # Settings a program gave fsspec (credentials, endpoints), which a spawned process
            # would not have; the environment it inherits.
            initargs=(
                log_level,
                copy.deepcopy(fsspec.config.conf),
                max(1, usable_cores() // processes),
                os.getpid(),
            ),
        )
        # The threads of this process that write shards prepared in segments: one shard's
        # segments prepared at a time, by every process, at most `2 * processes` of them in
        # memory (shards of other builds' sizes are written whole, by one process each); the
        # shard before may still be publishing (its last upload and commit, round trips on an
        # object store), which does not hold up the next one's segments.
        self._assemblers = ShardThreads(
            1, thread_name_prefix="shard-segments", starting=_signals_blocked
        )
        # A head start's shards (`head_start`): file name -> (plan digest, future), until the
        # pipeline's writer takes each or the plan turns out not to name it.
        self._head: dict[str, tuple[bytes, Future]] = {}
        self._head_lock = threading.Lock()
        self._head_open = True  # no head start shard starts once the pipeline's plan is known
        self._asked: set[str] = set()  # the shards the pipeline's writer asked for
        self._heading = False  # whether a head start was started
        self._head_planned: Future | None = None
        self._head_names: list[str] = []  # the shards it planned
        self.taken_from_head_start = 0  # shards the pipeline took as the head start wrote them

    def head_start(
        self,
        start: HeadStart,
        policy: ImagePolicy,
        *,
        max_record_size: int | None,
        resume: bool,
        read_ahead: int,
        here: bool = False,
    ) -> None:
        """Lists and plans the build (`head_start.plan_shards`) while the pipeline starts, and
        writes the shards of that plan, each for `submit` to hand over when the pipeline asks
        for the very same shard. `here`: planned in this thread, before this returns (a
        launcher whose worker processes are still starting, and which imports Beam after),
        else in a worker process."""
        if self._heading:  # started before Beam was imported (`early_start`)
            return
        how = (max_record_size, resume, read_ahead)
        self._heading = True
        with _signals_blocked():
            planned = self._head_planned = (
                Future() if here else self._pool.submit(_plan_head_start, start, policy, how)
            )
            self._head_thread = threading.Thread(
                target=self._start_head_shards,
                args=(planned, policy, how, not here),
                name="head-start",
                daemon=True,
            )
            self._head_thread.start()
        if here:
            try:
                planned.set_result(_head_plan(start, policy, how))
            except BaseException as err:  # an interrupt: the caller's to handle
                planned.set_exception(err)
                raise

    def _start_head_shards(
        self, planned: Future, policy: ImagePolicy, how: tuple, in_file: bool
    ) -> None:
        """Writes the head start's shards once `planned` holds them (`_head_plan`'s list, or,
        `in_file`, the path of the file a worker process put it in)."""
        try:
            shards = _head_shards(planned.result()) if in_file else planned.result()
        except BaseException:  # the pipeline lists and plans, and says what went wrong
            _LOG.debug("no head start: its planning failed", exc_info=True)
            return
        self._head_names = [spec.file_name for spec, _, _ in shards]
        if in_segments(len(shards), self.processes):
            # One shard a process: the pipeline has the rest prepared in segments by all the
            # processes as they come free (3 shards on 2 processes written whole take two
            # shards' time; the third in segments, a shard and a half).
            shards = shards[: self.processes]
        if shards:
            _LOG.debug("head start: writing %d shards while the pipeline plans", len(shards))
        for spec, packed, digest in shards:
            with self._head_lock:
                if not self._head_open:
                    return
                if spec.file_name in self._asked:
                    continue
                try:
                    future = self._pool.submit(_write, spec, packed, policy, *how)
                except RuntimeError:  # shut down or broken: the build is stopping
                    return
                self._head[spec.file_name] = (digest, future)

    @property
    def heading(self) -> bool:
        """Whether these processes were given a head start."""
        return self._heading

    def head_start_shards(self) -> list[str]:
        """The file names of the shards the head start planned, once it has (none without one)."""
        if self._head_planned is None:
            return []
        self._head_planned.result()
        self._head_thread.join()
        return sorted(self._head_names)

    def _taken_from_head_start(
        self, spec: ShardSpec, packed: list[bytes], policy: ImagePolicy, how: tuple
    ) -> Future | None:
        """The head start's future for this very shard, if it is writing it; else None, any
        other shard it wrote under that name out of the way first (the caller writes anew)."""
        if not self._heading:
            return None
        with self._head_lock:
            self._asked.add(spec.file_name)
            found = self._head.pop(spec.file_name, None)
        if found is None:
            return None
        digest, future = found
        if digest == plan_digest(spec, packed, policy, how):
            _LOG.debug("%s: written by the head start", spec.file_name)
            self.taken_from_head_start += 1
            return future
        _LOG.debug("%s: the head start planned it otherwise; writing it anew", spec.file_name)
        _settled(future)  # its rename must not come after the one of the shard written now
        return None

    def keep_head_start(self, output_dir: str, names: Iterable[str]) -> None:
        """Ends the head start once the pipeline's plan is known: it starts no more shards, and
        the shards it wrote that the plan does not name (`names`, its shards' file names) are
        removed, their files with them."""
        wanted = set(names)
        with self._head_lock:
            self._head_open = False
            dropped = [name for name in self._head if name not in wanted]
            futures = [self._head.pop(name)[1] for name in dropped]
        for name, future in zip(dropped, futures, strict=True):
            if _settled(future):
                _LOG.debug("%s: not in the pipeline's plan; removed", name)
                fs, folder = fsspec.core.url_to_fs(output_dir)
                for path in (name, index_file_name(name), shard_report_name(name)):
                    with contextlib.suppress(FileNotFoundError):
                        remove(fs, posixpath.join(folder, path))

    def submit(
        self,
        spec: ShardSpec,
        entries: Iterable[ImageEntry],
        policy: ImagePolicy,
        *,
        max_record_size: int | None,
        resume: bool,
        read_ahead: int,
    ) -> Future[tuple[ShardResult, list[ReportEntry]]]:
        """Writes the shard in a worker process; the future holds what `write_shard` returns.
        Entries already packed (PackedEntries) are sent as they are, and decoded there."""
        how = (max_record_size, resume, read_ahead)
        sent: list[bytes] | PackedEntries
        if self._heading:  # its shards are matched in the order they are written in
            sent = _in_order(entries)
            head = self._taken_from_head_start(spec, sent, policy, how)
            if head is not None:
                return head
        else:
            sent = entries if isinstance(entries, PackedEntries) else _packed(entries)
        with _signals_blocked():  # a process it starts inherits the mask
            return self._pool.submit(_write, spec, sent, policy, *how)

    def submit_in_segments(
        self,
        spec: ShardSpec,
        entries: Iterable[ImageEntry],
        policy: ImagePolicy,
        *,
        max_record_size: int | None,
        resume: bool,
        read_ahead: int,
    ) -> Future[tuple[ShardResult, list[ReportEntry]]]:
        """Writes the shard from this process, its images prepared by all the worker processes
        (`prepare_segment`, a run of images each): a shard is then not one core's work. The
        future holds what `write_shard` returns, and the shard is the same bytes. Entries
        already packed (PackedEntries) are ordered and cut into runs as their bytes: none is
        decoded here but those whose shuffle keys tie."""
        ordered = _in_order(entries)
        if self._heading:
            head = self._taken_from_head_start(
                spec, ordered, policy, (max_record_size, resume, read_ahead)
            )
            if head is not None:
                return head
        # Waits for the shard before to be framed (a Ctrl-C meanwhile reaches this thread); the
        # thread it starts inherits the signal mask `starting` sets.
        return self._assemblers.submit(
            self._write_in_segments, spec, ordered, policy, max_record_size, resume, read_ahead,
        )  # fmt: skip

    def _write_in_segments(
        self,
        spec: ShardSpec,
        ordered: list[bytes],
        policy: ImagePolicy,
        max_record_size: int | None,
        resume: bool,
        read_ahead: int,
        framed: Callable[[], object],
    ) -> tuple[ShardResult, list[ReportEntry]]:
        """`ordered`: the shard's entries' bytes (ImageEntry.to_bytes) in sort-key order."""
        replaced = ""
        if resume:
            with _signals_blocked():
                kept = self._pool.submit(_keep, spec, ordered, policy).result()
            if isinstance(kept, tuple):
                return kept
            replaced = kept or ""
        in_flight: deque[Future[Segment]] = deque()

        def segments() -> Iterator[Segment]:
            try:
                for run in segment_runs(ordered, _source_size):
                    with _signals_blocked():
                        in_flight.append(
                            self._pool.submit(_prepare, run, policy, max_record_size, read_ahead)
                        )
                    # Enough queued that no process waits for work; few segments in memory.
                    while len(in_flight) > 2 * self.processes:
                        yield in_flight.popleft().result()
                while in_flight:
                    yield in_flight.popleft().result()
            finally:
                for future in in_flight:
                    future.cancel()

        planned_bytes = sum(ImageEntry.sizes_of(data)[1] for data in ordered)
        return write_segments(spec, planned_bytes, segments(), replaced=replaced, framed=framed)

    def submit_measure(
        self, entries: Iterable[ImageEntry], policy: ImagePolicy, max_record_size: int, path: str
    ) -> Future[list[ImageEntry | ReportEntry]]:
        """Measures the entries' records in a worker process, keeping them in a new file at
        `path`; the future holds what `measure_into` returns."""
        with _signals_blocked():
            return self._pool.submit(_measure, _packed(entries), policy, max_record_size, path)

    def submit_listing(
        self, task: ListingTask, extensions: tuple[str, ...]
    ) -> Future[tuple[list[bytes], dict[str, int]] | str]:
        """Lists a local listing task in a worker process (`expand_task`): the launcher, which
        a local build plans on, takes only the files found, a batch's bytes each (SourceBatch),
        and how many files each other image suffix had (`other_image_suffix`), from the
        future's result through `listed`."""
        with _signals_blocked():
            return self._pool.submit(_list, task, extensions)

    def submit_hashes(
        self, entries: Iterable[ImageEntry]
    ) -> Future[list[ImageEntry | ReportEntry]]:
        """Reads and hashes the entries' sources in a worker process (--dedup); the future holds
        what `hash_source` gives for each, in order."""
        with _signals_blocked():
            return self._pool.submit(_hash, _packed(entries))

    def start(self) -> None:
        """Starts every process now, where the first shards would start them.

        Forked from the server, on a thread of its own: the first waits for the server to have
        imported the workers' modules, which the caller goes on meanwhile (importing Beam)."""

        def start() -> None:
            with _signals_blocked():
                # The executor starts a process for each task no idle process can take.
                for _ in range(self.processes):
                    try:
                        self._pool.submit(int)
                    except RuntimeError:  # closed meanwhile: the build stopped
                        return

        if _fork_server_modules:
            threading.Thread(target=start, name="start-workers", daemon=True).start()
        else:
            start()

    def close(self, *, cancel: bool = False) -> None:
        """Waits for the processes to end.

        `cancel` (a build that stops) drops the shards not yet started and ends the ones being
        written, each removing its temporary file (SIGTERM), where waiting for them would hold
        an interrupted build for as long as a shard takes to write.
        """
        with self._head_lock:
            self._head_open = False  # a head start still planning starts no shard now
        if cancel:
            # The executor names its processes only in a private attribute before Python 3.14.
            processes = list((getattr(self._pool, "_processes", None) or {}).values())
            for process in processes:
                with contextlib.suppress(OSError):
                    process.terminate()
            # One still starting takes SIGTERM once its imports are done; one stuck in a read
            # may not take it at all: the executor would wait for it.
            deadline = time.monotonic() + _TERM_GRACE_SECONDS
            for process in processes:
                process.join(max(0.0, deadline - time.monotonic()))
                if process.is_alive():
                    with contextlib.suppress(OSError):
                        process.kill()
        self._pool.shutdown(wait=True, cancel_futures=cancel)
        self._assemblers.shutdown(cancel=cancel)


def in_segments(shards: int, processes: int) -> bool:
    """Whether a build of `shards` shards has each one's images prepared by all `processes`
    (`submit_in_segments`): with so few shards that, written one a process, some processes
    would idle while the last shards are written."""
    return shards <= 2 * processes


class ShardThreads:
    """Threads of this process writing shards, `reading` of them at once at most: a shard that
    is framed and waits only on its publishing (its last upload and commit, round trips on an
    object store) makes way for the next, whose reads start meanwhile.

    `submit(fn, ...)` blocks while `reading` shards are being read, then runs `fn(...,
    framed=...)` on a thread; `fn` calls `framed()` once its images are framed (`write_shard`,
    `write_segments`). The future holds what `fn` returns. `starting`: a context in which a
    thread is handed its task (and started), such as a signal mask for it to inherit.
    `stopping` is set by `shutdown(cancel=True)`: a task given it (`write_shard`'s `stop`)
    abandons its shard rather than finish it.
    """

    def __init__(
        self,
        reading: int,
        thread_name_prefix: str = "shard",
        starting: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ):
        self._starting = starting
        self._reading = threading.Semaphore(reading)
        # One more publishing for each reading: more than that waits for a thread.
        self._threads = ThreadPoolExecutor(2 * reading, thread_name_prefix=thread_name_prefix)
        self.stopping = threading.Event()

    def submit(self, fn: Callable[..., Any], *args, **kwargs) -> Future:
        self._reading.acquire()
        lock, released = threading.Lock(), [False]

        def framed() -> None:
            with lock:
                if released[0]:
                    return
                released[0] = True
            self._reading.release()

        try:
            with self._starting():
                future = self._threads.submit(fn, *args, framed=framed, **kwargs)
        except BaseException:
            framed()
            raise
        # Done, failed or cancelled before it ran: its permit goes back all the same.
        future.add_done_callback(lambda _: framed())
        return future

    def shutdown(self, *, cancel: bool = False) -> None:
        """Waits for the threads to end; `cancel`: tasks not started are dropped, and those
        given `stopping` stop."""
        if cancel:
            self.stopping.set()
        self._threads.shutdown(wait=True, cancel_futures=cancel)


def settings_travel() -> bool:
    """Whether fsspec's settings in this process can be handed to a worker process: a program
    may have put an object there (a credentials object, say) that cannot be pickled."""
    try:
        pickle.dumps(fsspec.config.conf)
    except Exception:
        return False
    return True


def start_early(processes: int, *, keep: bool = False) -> ShardProcesses:
    """Starts `processes` worker processes now, for this process's next shard writer to take
    (`take_started`): each takes about half a second to start (Python, Pillow, fsspec), which
    a build spends on one core listing and planning; they start on the others meanwhile.

    `keep`: the processes already started for this very build (before Beam was imported,
    `early_start`) are kept, if as many; any others end (they were started for another build,
    with its settings)."""
    pool = started()
    if keep and pool is not None and pool.processes == processes:
        return pool
    discard_started()
    with _signals_blocked():  # an interrupt now finds the processes where it can end them
        pool = ShardProcesses(processes)
        pool.start()
        _started.append(pool)
    _LOG.debug("starting %d worker processes while the build lists and plans", processes)
    return pool


def started() -> ShardProcesses | None:
    """The processes `start_early` started, if any, left for the shard writer to take: what
    the steps before it (measuring records) may use meanwhile."""
    return _started[-1] if _started else None


def take_started(processes: int) -> ShardProcesses | None:
    """The processes `start_early` started, if that many; the taker closes them."""
    pool = _started.pop() if _started else None
    if pool is not None and pool.processes != processes:
        pool.close()
        return None
    return pool


def discard_started() -> None:
    """Ends processes started early that no shard writer took, and what they still write (a
    head start's shards): the build they were started for has ended, or failed."""
    while _started:
        _started.pop().close(cancel=True)


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back from this thread while the block runs, and from the
    processes it starts (the mask survives exec): a Ctrl-C while one still imports cannot end it
    with a traceback, and the threads its imports start take neither (`_start_worker`). A signal
    sent meanwhile reaches this process when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# The modules the worker processes of this command import from their fork server, if they are
# forked from one (`fork_from_server`); empty: spawned, in a program.
_fork_server_modules: list[str] = []

# What a worker process of a build reading or writing a store imports besides its own modules.
_STORE_CLIENTS = {"gs": ["gcsfs"], "gcs": ["gcsfs"], "s3": ["s3fs", "beam_tfrecord.s3_get"]}


def fork_from_server(protocols: Iterable[str]) -> None:
    """Has the worker processes this process starts from now on forked from a fork server
    (multiprocessing's `forkserver`) that imported their modules once: this package's, and the
    store clients of `protocols` (the build's input and output: "file", "gs", "s3"...).

    For the `beam-tfrecord` command alone, which owns its process and whose `__main__` (which
    each worker imports again, as spawn's do) runs nothing when imported: the fork server is one
    a process, started with the first process it forks, and keeps what it imported and the
    environment it saw then. A program calling `build` keeps spawning them, without its
    `__main__` (its own fork server, if it has one, is left as it is). Not where the system has
    no fork server.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    # The command's own module too: a worker imports its launcher's `__main__` again, under
    # another name (multiprocessing's `__mp_main__`), and the command's imports its.
    modules = [__name__, "beam_tfrecord.commands.cli"]
    for protocol in protocols:
        modules += [m for m in _STORE_CLIENTS.get(protocol, []) if m not in modules]
    if not _fork_server_modules:
        # At the exit, once the workers have ended: the server's CPU, and its workers', is
        # then this process's children's (what `time beam-tfrecord build` reports).
        atexit.register(end_fork_server)
    _fork_server_modules[:] = modules


def _context() -> multiprocessing.context.BaseContext:
    """How worker processes start: forked from the fork server (`fork_from_server`), or spawned
    without the launcher's `__main__`."""
    if not _fork_server_modules:
        return SpawnWithoutMain()
    context = multiprocessing.get_context("forkserver")
    # Not "__main__", the default: the server would import the launcher's main module.
    context.set_forkserver_preload(list(_fork_server_modules))
    _start_fork_server()
    return context


def _start_fork_server() -> None:
    """Starts the fork server, if it is not running, from a thread that blocks SIGINT alone: the
    server keeps the mask it starts with, and the workers it forks start with it. So SIGINT
    reaches no worker before it ignores it (`_start_worker`; Ctrl-C reaches the whole process
    group, and what it stops is the launcher's to decide), and SIGTERM, which the launcher
    sends every process it started when a build stops (`end_child_processes`), ends the server
    at once: started with SIGTERM blocked (by `start`'s thread), it held a stopped build's exit
    for the 2 s of grace before SIGKILL. A worker that takes SIGTERM before its handler is set
    has nothing to clean up.

    The resource tracker is started first: starting it unblocks SIGINT and SIGTERM in the thread
    that does (multiprocessing's `ensure_running`)."""
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    def start() -> None:
        multiprocessing.resource_tracker.ensure_running()
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_SETMASK, {signal.SIGINT})
        multiprocessing.forkserver.ensure_running()

    thread = threading.Thread(target=start, name="fork-server", daemon=True)
    thread.start()
    thread.join()


def _block_sigterm() -> None:
    """Keeps SIGTERM from this thread, for the process's main thread to take."""
    if hasattr(signal, "pthread_sigmask"):  # not POSIX: no thread takes a signal of its own
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _start_worker(log_level: int, fsspec_conf: dict[str, Any], cores: int, launcher: int) -> None:
    """Sets up a worker process; `cores` is its share of the machine's, `launcher` the process
    that started it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with(launcher)
    # SIGTERM must reach this, the main thread: its handler runs only here, and only a signal
    # to this thread breaks a read it is blocked in (of a stalled file, say). The process
    # started with it blocked, so the threads its imports started (numpy's BLAS) block it;
    # the threads it starts from now on block it too (`_block_sigterm`), and this one takes it.
    if hasattr(signal, "pthread_sigmask"):
        if signal.SIGTERM in signal.sigpending():  # ended while it started: nothing to clean
            os._exit(128 + signal.SIGTERM)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    quiet_pillow_for_good()  # this process is the tool's own
    reuse_image_memory()
    for protocol, settings in fsspec_conf.items():
        fsspec.config.conf.setdefault(protocol, {}).update(settings)
    # The launcher's level for this tool's own lines (-v shows each shard written).
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    own = logging.getLogger("beam_tfrecord")
    own.addHandler(handler)
    own.setLevel(log_level)
    own.propagate = False
    _worker["executor"] = new_executor(worker_threads(), initializer=_block_sigterm)
    _worker["cpu"] = threading.Semaphore(usable_cores())
    _worker["cores"] = cores
    # Last: until now SIGTERM ends the process outright (its default), as there is nothing to
    # clean up. Raised in here, SystemExit would have the pool print "Exception in
    # initializer:" and a traceback under a stopped build's lines.
    signal.signal(signal.SIGTERM, _exit_on_term)


def _end_with(launcher: int) -> None:
    """Ends this process as SIGTERM does (a shard's temporary file removed) once `launcher`
    has ended. A launcher killed outright (SIGKILL, the OOM killer) ends none of its workers,
    which would go on writing the shards queued for them into an output no build holds any
    more, then wait for ever: neither the fork server (a worker holds its pipe) nor the queue
    (a worker holds both ends) tells them."""

    def watch() -> None:
        _block_sigterm()
        wait_for_exit(launcher)
        if hasattr(signal, "pthread_kill"):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        else:  # not POSIX: SIGTERM ends the process at once
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def _exit_on_term(signum, frame) -> None:
    # Raised in the main thread, where write_shard runs: its cleanup runs on the way out, and
    # `_write` then ends the process (the executor would go on to its next shard).
    raise SystemExit(128 + signum)


def _write(
    spec: ShardSpec,
    packed: list[bytes] | PackedEntries,
    policy: ImagePolicy,
    max_record_size: int | None,
    resume: bool,
    read_ahead: int,
) -> tuple[ShardResult, list[ReportEntry]]:
    try:
        with _ended_by_sigterm():
            return write_shard(
                spec,
                packed if isinstance(packed, PackedEntries) else _unpacked(packed),
                policy,
                max_record_size=max_record_size,
                resume=resume,
                read_ahead=read_ahead,
                # As for a segment (`_prepare`): one core's share, one thread that checks.
                inline=_worker["cores"] == 1,
                **_threads(read_ahead),
            )
    except Exception as err:
        # Sent to the launcher pickled, without what it was raised from: a store's timeout
        # that fsspec's `sync` wrapped in a wordless FSTimeoutError said nothing but its
        # remote traceback, which the build's one line then quoted whole.
        worded = with_its_words(err)
        if worded is err:
            raise
        raise worded from None
    finally:
        folder = os.environ.get(progress.ENV)
        if folder:  # the launcher's progress line sees this shard's last images at once
            progress.flush(folder)


def _plan_head_start(start: HeadStart, policy: ImagePolicy, how: tuple) -> str:
    """The head start's shards, each with its entries' compact forms and its plan's digest, in
    a file whose path this returns (`_head_shards` reads it). A result megabytes long sent back
    whole would leave the executor waiting forever for its end, should the process be ended
    while sending it; a path is sent at once."""
    with _ended_by_sigterm():
        return _through_file(_head_plan(start, policy, how), "head-start")


def _head_plan(
    start: HeadStart, policy: ImagePolicy, how: tuple
) -> list[tuple[ShardSpec, list[bytes], bytes]]:
    """The head start's shards, each with its entries' compact forms and its plan's digest."""
    planned = []
    for spec, entries in plan_shards(start):
        packed = _packed(entries)
        planned.append((spec, packed, plan_digest(spec, packed, policy, how)))
    return planned


def _head_shards(path: str) -> list[tuple[ShardSpec, list[bytes], bytes]]:
    """What `_plan_head_start` planned; its file goes."""
    return _from_file(path)


def _settled(future: Future) -> bool:
    """Cancels a task not yet started, or waits for it to end; whether it ran to its end."""
    if future.cancel():
        return False
    try:
        future.result()
    except Exception:
        return False
    return True


def _prepare(
    packed: list[bytes], policy: ImagePolicy, max_record_size: int | None, read_ahead: int
) -> Segment:
    # Every process prepares segments of the same shard at once: with one core's share, a
    # process checks its segment's images on this thread (`prepare_segment`'s `inline`).
    with _ended_by_sigterm():
        return prepare_segment(
            _unpacked(packed),
            policy,
            max_record_size=max_record_size,
            read_ahead=read_ahead,
            inline=_worker["cores"] == 1,
            **_threads(read_ahead),
        )


def _measure(
    packed: list[bytes], policy: ImagePolicy, max_record_size: int, path: str
) -> list[ImageEntry | ReportEntry]:
    with _ended_by_sigterm():
        return measure_into(_unpacked(packed), policy, max_record_size, path)


def _hash(packed: list[bytes]) -> list[ImageEntry | ReportEntry]:
    with _ended_by_sigterm():
        hashed = []
        for entry in _unpacked(packed):
            try:
                data: bytes | OSError = read_source(entry.url)
            except OSError as err:
                data = err
            hashed.append(hash_source(entry, data))
        return hashed


# A worker's result larger than this comes back through a file: a result megabytes long sent
# back whole would leave the executor waiting forever for its end, should the process be ended
# while sending it (a listing of a folder of a million files is about 20 MB).
_RESULT_SENT_WHOLE = 1 << 20


def _list(
    task: ListingTask, extensions: tuple[str, ...]
) -> tuple[list[bytes], dict[str, int]] | str:
    """A task's files as SourceBatch bytes, and the other image suffixes left out, counted; the
    path of a file holding them, when they are many (`listed` reads it)."""
    with _ended_by_sigterm():
        left: dict[str, int] = {}
        found = expand_task(task, extensions, left_out_counter(extensions, left))
        listed = [batch.to_bytes() for batch in batched(found, SourceBatch)], left
        if sum(map(len, listed[0])) <= _RESULT_SENT_WHOLE:
            return listed
        return _through_file(listed, "listing")


def listed(
    result: tuple[list[bytes], dict[str, int]] | str,
) -> tuple[list[bytes], dict[str, int]]:
    """What a listing `submit_listing` ran found, read from its file (which goes) if its
    process sent a path."""
    return _from_file(result) if isinstance(result, str) else result


def drop_listing(future: Future) -> None:
    """A listing `submit_listing` ran that will not be read: not started, it never runs; done,
    the file it came back through (if any) goes."""
    if future.cancel() or not future.done() or future.exception() is not None:
        return
    result = future.result()
    if isinstance(result, str):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(result)


def _through_file(result: Any, kind: str) -> str:
    """A worker's result pickled into a file of its own, whose path is sent back at once."""
    fd, path = tempfile.mkstemp(prefix=f"beam-tfrecord-{kind}-")
    with os.fdopen(fd, "wb") as file:
        pickle.dump(result, file, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _from_file(path: str) -> Any:
    """What `_through_file` put in `path`; the file goes."""
    try:
        with open(path, "rb") as file:
            return pickle.load(file)
    finally:
        os.unlink(path)


def _keep(
    spec: ShardSpec, packed: list[bytes], policy: ImagePolicy
) -> tuple[ShardResult, list[ReportEntry]] | str | None:
    with _ended_by_sigterm():
        return keep_finished(spec, _unpacked(packed), policy)


def _packed(entries: Iterable[ImageEntry]) -> list[bytes]:
    """Entries in their compact form, to send to a process: a few dozen bytes each, where a
    pickle takes hundreds."""
    return [entry.to_bytes() for entry in entries]


def _in_order(entries: Iterable[ImageEntry]) -> list[bytes]:
    """The entries' compact forms in sort-key order; packed ones ordered from their bytes."""
    if isinstance(entries, PackedEntries):
        return in_shard_order(entries.each_batch())
    return _packed(sorted(entries, key=lambda e: e.sort_key))


def _source_size(data: bytes) -> int:
    return ImageEntry.sizes_of(data)[0]


def _unpacked(packed: list[bytes]) -> list[ImageEntry]:
    return [ImageEntry.from_bytes(data) for data in packed]


def _threads(read_ahead: int) -> dict[str, Any]:
    """This process's read-ahead threads and CPU permits, for the shard writer's keywords."""
    return {"executor": _worker["executor"] if read_ahead else None, "cpu": _worker["cpu"]}


@contextlib.contextmanager
def _ended_by_sigterm() -> Iterator[None]:
    """A task of a worker process, which SIGTERM ends with the process: raised as SystemExit in
    the main thread, where the task runs, it runs the task's cleanup on the way out (a shard's
    temporary file removed); then the process ends, where the executor would go on to its next
    task."""
    try:
        yield
    except SystemExit as stop:
        os._exit(stop.code if isinstance(stop.code, int) else 1)
