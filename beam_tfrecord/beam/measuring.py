"""The Beam shell of measurement: MeasureImages sizes each transformed image's record exactly
before the shards are planned (`beam_tfrecord.measurement`)."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import apache_beam as beam
from apache_beam import pvalue

from beam_tfrecord import progress
from beam_tfrecord.batches import EntryBatch
from beam_tfrecord.beam.transforms import REPORT, Batched, in_global_window, metric_counter
from beam_tfrecord.entries import ImageEntry, ReportEntry
from beam_tfrecord.images import ImagePolicy
from beam_tfrecord.measurement import measured, needs_measuring
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.remote import Fetches

__all__ = ["MeasureImages"]


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
        result = future.result()
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


class MeasureImages(beam.PTransform):
    """Gives each planned image its record's exact size, transforming those the build transforms
    (what `transformed_sizes: measure` costs: their second read, decode and encode).

    Takes EntryBatch elements, spread over the workers first, as HashImages spreads its images.
    Returns a dict: `entries` (EntryBatch elements of ImageEntry with exact record sizes) and
    `report` (images that cannot be written, for the reason their shard writer would give).
    """

    def __init__(self, policy: ImagePolicy, max_record_size: int, read_ahead: int = 16):
        super().__init__()
        self._fn = _MeasureFn(policy, max_record_size, read_ahead)

    def expand(self, entries):
        results = (
            entries
            | "Spread" >> beam.Reshuffle()
            | "Measure"
            >> beam.ParDo(self._fn)
            .with_output_types(ImageEntry)
            .with_outputs(REPORT, main="entries")
        )
        entries = results.entries | "Batch" >> Batched(EntryBatch)
        return {"entries": entries, "report": results[REPORT]}
