"""The Beam shell of measurement: MeasureImages sizes each transformed image's record exactly
before the shards are planned (`beam_tfrecord.measurement`)."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import apache_beam as beam
from apache_beam import pvalue

from beam_tfrecord import progress
from beam_tfrecord.batches import EntryBatch
from beam_tfrecord.beam.transforms import (
    REPORT,
    Batched,
    SpreadBatches,
    in_global_window,
    metric_counter,
)
from beam_tfrecord.entries import ImageEntry, ReportEntry
from beam_tfrecord.images import ImagePolicy
from beam_tfrecord.measurement import measured, needs_measuring
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.remote import Fetches
from beam_tfrecord.shard_processes import started
from beam_tfrecord.shard_writer import segment_runs

__all__ = ["MeasureImages", "discard_kept_records"]

_LOG = logging.getLogger(__name__)

# Folders of records measuring made for this process's shard writers (`_KeepingMeasureFn`),
# removed when the build ends (`discard_kept_records`).
_kept_folders: list[str] = []


def discard_kept_records() -> None:
    """Removes the records measuring kept for the shard writers: the build has ended (written,
    failed or interrupted) and no shard will copy them now."""
    while _kept_folders:
        shutil.rmtree(_kept_folders.pop(), ignore_errors=True)


class _MeasureFn(beam.DoFn):
    """Reads each transformed image (`read_ahead` reads in flight) and encodes it on as many
    threads as the worker has cores (Pillow lets go of the GIL), keeping only its record's
    size; an image that keeps its bytes passes through, its size already exact."""

    def __init__(self, policy: ImagePolicy, max_record_size: int, read_ahead: int):
        self._policy = policy
        self._max_record_size = max_record_size
        self._read_ahead = read_ahead
        self._skipped = metric_counter("images_skipped")
        self._measured = metric_counter("images_measured")

    def setup(self):
        self._cores = usable_cores()
        self._pool = ThreadPoolExecutor(self._cores, thread_name_prefix="measure")

    def start_bundle(self):
        # Per bundle: a bundle that failed must not hand its work to the retry.
        self._fetches = Fetches(self._read_ahead)
        self._measuring: deque[tuple[ImageEntry, Future]] = deque()
        self._tally = progress.Tally()

    def process(self, batch: EntryBatch):
        for entry in batch:
            yield from self._measure(entry)

    def _measure(self, entry: ImageEntry):
        if not needs_measuring(entry, self._policy):
            self._tally.add("measured")  # its size is exact already
            yield entry
            return
        fetches = self._fetches
        fetches.start(entry, entry.url, entry.source_size)
        while fetches.ready():
            self._submit(*fetches.pop())
        measuring = self._measuring
        while measuring and (measuring[0][1].done() or len(measuring) > 2 * self._cores):
            yield self._output(*measuring.popleft())

    def finish_bundle(self):
        fetches = self._fetches
        while fetches.pending:
            self._submit(*fetches.pop())
        fetches.close()
        while self._measuring:
            yield in_global_window(self._output(*self._measuring.popleft()))
        self._tally.flush()

    def teardown(self):
        if getattr(self, "_fetches", None) is not None:
            self._fetches.close()
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, entry: ImageEntry, data: bytes | OSError) -> None:
        future = self._pool.submit(measured, entry, data, self._policy, self._max_record_size)
        self._measuring.append((entry, future))

    def _output(self, planned: ImageEntry, future: Future):
        return self._counted(planned, future.result())

    def _counted(self, planned: ImageEntry, result: ImageEntry | ReportEntry):
        """The measure's result, counted, and tagged for the report when it is a report entry."""
        self._measured.inc()
        # The progress line's bytes to write were the estimate's: they become the measure's.
        tally = self._tally
        tally.add("measured")
        if isinstance(result, ReportEntry):
            tally.add("measure_skipped")
            tally.add("to_write", -1)
            tally.add("to_write_bytes", -planned.record_size)
            self._skipped.inc()
            return pvalue.TaggedOutput(REPORT, result)
        tally.add("to_write_bytes", result.record_size - planned.record_size)
        return result


class _KeepingMeasureFn(_MeasureFn):
    """Measures on the build's shard processes, each run of images (`segment_runs`) in one of
    them, keeping each record for its shard writer to copy (`measure_into`): every core works,
    and each image is read, decoded and encoded once. For a build whose shards are written on
    this machine; one that has not started its shard processes measures as `_MeasureFn` does."""

    def setup(self):
        super().setup()
        self._processes = started()
        self._folder = None
        if self._processes is not None:
            self._folder = tempfile.mkdtemp(prefix="beam-tfrecord-measured-")
            _kept_folders.append(self._folder)
            self._names = itertools.count()
            _LOG.debug("measuring in %d worker processes", self._processes.processes)

    def start_bundle(self):
        super().start_bundle()
        self._runs: deque[tuple[list[ImageEntry], Future]] = deque()

    def process(self, batch: EntryBatch):
        if self._processes is None:
            yield from super().process(batch)
            return
        wanted = []
        for entry in batch:
            if needs_measuring(entry, self._policy):
                wanted.append(entry)
            else:
                self._tally.add("measured")  # its size is exact already
                yield entry
        for run in segment_runs(wanted):
            path = os.path.join(self._folder, f"{next(self._names):09d}.records")
            future = self._processes.submit_measure(run, self._policy, self._max_record_size, path)
            self._runs.append((run, future))
        # Enough runs queued that no process waits for one; few results held here.
        runs = self._runs
        while runs and (runs[0][1].done() or len(runs) > 2 * self._processes.processes):
            yield from self._outputs(*runs.popleft())

    def finish_bundle(self):
        if self._processes is None:
            yield from super().finish_bundle()
            return
        while self._runs:
            for output in self._outputs(*self._runs.popleft()):
                yield in_global_window(output)
        self._tally.flush()

    def teardown(self):
        for _, future in getattr(self, "_runs", ()):
            future.cancel()
        super().teardown()

    def _outputs(self, run: list[ImageEntry], future: Future):
        for planned, result in zip(run, future.result(), strict=True):
            yield self._counted(planned, result)


class MeasureImages(beam.PTransform):
    """Gives each planned image its record's exact size, transforming those the build transforms
    (what `transformed_sizes: measure` costs: their second read, decode and encode).

    Takes EntryBatch elements, spread over the workers first, as HashImages spreads its images.
    Returns a dict: `entries` (EntryBatch elements of ImageEntry with exact record sizes) and
    `report` (images that cannot be written, for the reason their shard writer would give).
    """

    def __init__(
        self,
        policy: ImagePolicy,
        max_record_size: int,
        read_ahead: int = 16,
        *,
        keep_records: bool = False,
    ):
        """`keep_records`: measure on the build's shard processes, once started, and keep each
        record for the shard writer (`measure_into`); only where the shards are written on this
        machine, which can read the files it keeps them in."""
        super().__init__()
        kind = _KeepingMeasureFn if keep_records else _MeasureFn
        self._fn = kind(policy, max_record_size, read_ahead)

    def expand(self, entries):
        results = (
            entries
            | "Spread" >> SpreadBatches(EntryBatch)
            | "Measure"
            >> beam.ParDo(self._fn)
            .with_output_types(ImageEntry)
            .with_outputs(REPORT, main="entries")
        )
        entries = results.entries | "Batch" >> Batched(EntryBatch)
        return {"entries": entries, "report": results[REPORT]}
