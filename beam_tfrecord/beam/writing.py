"""The Beam shell, writing: the composite PTransforms that write the planned shards (each by one
worker, or by a local build's shard processes) and the report.

What reaches them is each shard's plan; a shard's images are read by the worker that writes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.stats import ApproximateQuantiles

from beam_tfrecord.beam.transforms import REPORT, in_global_window, metric_counter
from beam_tfrecord.entries import ReportEntry, ShardSpec
from beam_tfrecord.images import ImagePolicy
from beam_tfrecord.readahead import new_executor, usable_cores, worker_threads
from beam_tfrecord.report import ReportTally, part_bounds, part_of, report_key, write_part
from beam_tfrecord.shard_names import shard_file_name
from beam_tfrecord.shard_processes import (
    PROCESSES_MIN_BYTES,
    PROCESSES_MIN_IMAGES,
    ShardProcesses,
    ShardThreads,
    in_segments,
    started,
    take_started,
)
from beam_tfrecord.shard_writer import write_shard

__all__ = ["PROCESSES_MIN_BYTES", "WriteReport", "WriteShards"]

_LOG = logging.getLogger(__name__)


class _ReadAheadFn(beam.DoFn):
    """A DoFn that keeps `read_ahead` images in flight on threads of its own (`worker_threads`,
    shared by its bundles), and runs no more CPU-bound image work at once than its worker has
    cores (`self._cpu`): reads wait on the disk or the network, decodes on the CPU (Pillow lets
    go of the GIL while it decodes), and each may hold a decoded image."""

    def __init__(self, read_ahead: int):
        self._read_ahead = read_ahead

    def setup(self):
        self._executor = new_executor(worker_threads()) if self._read_ahead else None
        self._cpu = threading.Semaphore(usable_cores())
        # With one core's share, a shard's images are checked on the thread that writes it
        # (`write_shard`'s `inline`), as in a worker process with one core.
        self._inline = usable_cores() == 1

    def teardown(self):
        if getattr(self, "_executor", None) is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)


class _WriteShardFn(_ReadAheadFn):
    def __init__(
        self,
        output_dir: str,
        name: str,
        policy: ImagePolicy,
        max_record_size: int,
        resume: bool,
        read_ahead: int,
        processes: int = 0,
        processes_min_bytes: int | None = None,
        shards_at_once: int = 1,
    ):
        super().__init__(read_ahead)
        self._shards_at_once = shards_at_once
        self._output_dir = output_dir
        self._name = name
        self._policy = policy
        self._max_record_size = max_record_size
        self._resume = resume
        self._processes = processes
        self._processes_min_bytes = (
            PROCESSES_MIN_BYTES if processes_min_bytes is None else processes_min_bytes
        )
        self._written = metric_counter("images_written")
        self._skipped = metric_counter("images_skipped")
        self._bytes = metric_counter("bytes_written")
        self._shards = metric_counter("shards_written")
        # By --resume: finished and verified, not rewritten.
        self._kept = metric_counter("shards_kept")

    def setup(self):
        super().setup()
        self._pool: ShardProcesses | None = None
        self._segmented = False
        self._head_settled = False
        self._pending: list = []
        # Shards written here, several at once (`shards_at_once`): one shard's last upload and
        # commit, round trips that need no CPU, overlap the next shard's reads and checks.
        self._shard_threads = (
            ShardThreads(self._shards_at_once) if self._shards_at_once > 1 else None
        )

    def start_bundle(self):
        # A bundle that failed must not hand its shards' results to the retry.
        for future in self._pending:
            future.cancel()
        self._pending = []

    def process(self, element, plan):
        (split, index), entries = element
        shards = plan[split].shards
        spec = ShardSpec(
            self._output_dir,
            shard_file_name(self._name, split, index, shards),
            split,
            index,
            shards,
        )
        how = {
            "max_record_size": self._max_record_size,
            "resume": self._resume,
            "read_ahead": self._read_ahead,
        }
        pool = self._pool_for(plan)
        if not self._head_settled:
            self._head_settled = True
            self._settle_head_start(plan)
        if pool is not None:
            # Too few shards to keep every process busy to the end (a build of small images is
            # a few shards of a hundred thousand images each, and a split's last shards are
            # often its smallest): each shard's images are prepared by all the processes, a
            # segment each, and the shard written from here. More shards are written whole, by
            # one process each, which saves moving their bytes between processes.
            submit = pool.submit_in_segments if self._segmented else pool.submit
            self._pending.append(submit(spec, entries, self._policy, **how))
            # Two shards a process queued: none waits for work, and few plans wait in memory.
            while len(self._pending) > 2 * self._processes:
                yield from self._outputs(*self._next_written())
            return
        if self._shard_threads is not None:
            self._pending.append(
                self._shard_threads.submit(
                    write_shard,
                    spec,
                    list(entries),
                    self._policy,
                    **how,
                    executor=self._executor,
                    cpu=self._cpu,
                    stop=self._shard_threads.stopping,
                    inline=self._inline,
                )
            )
            # Shards framed and still uploading do not count against `shards_at_once`; these
            # few are all that may wait in memory.
            while len(self._pending) > 2 * self._shards_at_once or (
                self._pending and self._pending[0].done()
            ):
                yield from self._outputs(*self._next_written())
            return
        written = write_shard(
            spec,
            entries,
            self._policy,
            **how,
            executor=self._executor,
            cpu=self._cpu,
            inline=self._inline,
        )
        yield from self._outputs(*written)

    def finish_bundle(self):
        while self._pending:
            for output in self._outputs(*self._next_written()):
                yield in_global_window(output)

    def teardown(self):
        if getattr(self, "_pool", None) is not None:
            # Shards still pending: the build is stopping (an interrupt, a failed bundle), and
            # those being written end now rather than when they are done.
            self._pool.close(cancel=bool(self._pending))
        if getattr(self, "_shard_threads", None) is not None:
            # Likewise: shards still being written on threads are abandoned, not finished (a
            # Ctrl-C waited for them, seconds to minutes on a distant store).
            self._shard_threads.shutdown(cancel=bool(self._pending))
        super().teardown()

    def _next_written(self):
        """The oldest pending shard's result, once written; it stays pending until then."""
        written = self._pending[0].result()
        self._pending.pop(0)
        return written

    def _pool_for(self, plan) -> ShardProcesses | None:
        """The worker processes, started for the first shard of a build large enough to pay
        for them; None to write here."""
        if self._pool is None and self._processes > 1:
            splits = plan.values()
            if sum(p.shards for p in splits) > 1 and (
                sum(p.bytes for p in splits) >= self._processes_min_bytes
                or sum(p.records for p in splits) >= PROCESSES_MIN_IMAGES
            ):
                early = take_started(self._processes)
                _LOG.debug(
                    "writing shards in %d worker processes%s",
                    self._processes,
                    " (started early)" if early else "",
                )
                self._pool = early or ShardProcesses(self._processes)
                self._segmented = in_segments(sum(p.shards for p in splits), self._processes)
                if self._segmented:
                    _LOG.debug("each shard's images prepared in all %d processes", self._processes)
        return self._pool

    def _settle_head_start(self, plan) -> None:
        """Tells a head start (`head_start`) the plan's shards, once it is known: it starts no
        more, and any it wrote that the plan does not name go."""
        pool = self._pool or started()
        if pool is not None:
            pool.keep_head_start(
                self._output_dir,
                (
                    shard_file_name(self._name, split, index, p.shards)
                    for split, p in plan.items()
                    for index in range(p.shards)
                ),
            )

    def _outputs(self, result, report):
        self._written.inc(result.examples)
        self._bytes.inc(result.bytes)
        self._shards.inc()
        if result.resumed:
            self._kept.inc()
        if result.replaced:
            # Here, not in the shard process that found it: this is the build's log (the
            # launcher's stderr, a runner's worker log); the summary only counts the shards.
            _LOG.warning(
                "--resume replaces the finished shard %s: %s", result.file_name, result.replaced
            )
        for entry in report:
            if entry.action == "skipped":
                self._skipped.inc()
            yield pvalue.TaggedOutput(REPORT, entry)
        yield result


class WriteShards(beam.PTransform):
    """Writes each planned shard by one worker, which reads, checks and frames its images.

    `processes` > 1: a worker that runs the whole build in one process (a local build) writes
    its shards in that many processes of its own (`shard_processes`), once the plan holds more
    than one shard and `processes_min_bytes` planned bytes (None: PROCESSES_MIN_BYTES).
    `shards_at_once` > 1: a worker writing shards itself writes that many at once, on threads
    (for an object store, where a shard's last upload and its commit are round trips).

    Returns a dict: `results` (ShardResult per shard) and `report` (images that could not be
    written, and images written changed).
    """

    def __init__(
        self,
        output_dir: str,
        name: str,
        policy: ImagePolicy,
        plan,
        max_record_size: int,
        resume: bool = False,
        read_ahead: int = 16,
        processes: int = 0,
        processes_min_bytes: int | None = None,
        shards_at_once: int = 1,
    ):
        super().__init__()
        self._fn = _WriteShardFn(
            output_dir,
            name,
            policy,
            max_record_size,
            resume,
            read_ahead,
            processes,
            processes_min_bytes,
            shards_at_once,
        )
        self._plan = plan

    def expand(self, shards):
        results = shards | "Write" >> beam.ParDo(
            self._fn, plan=pvalue.AsSingleton(self._plan)
        ).with_outputs(REPORT, main="results")
        return {"results": results.results, "report": results[REPORT]}


class _ReportTallyFn(beam.CombineFn):
    """The manifest's counts of the report (skipped by reason, modified, lines), in one combine."""

    def create_accumulator(self) -> ReportTally:
        return ReportTally()

    def add_input(self, accumulator: ReportTally, entry: ReportEntry) -> ReportTally:
        return accumulator.add(entry)

    def merge_accumulators(self, accumulators) -> ReportTally:
        merged = ReportTally()
        for accumulator in accumulators:
            merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator: ReportTally) -> ReportTally:
        return accumulator


class _WritePartFn(beam.DoFn):
    def __init__(self, output_dir: str):
        self._output_dir = output_dir
        self._parts = metric_counter("report_parts_written")

    def process(self, element: tuple[int, Iterable[tuple[str, str]]]):
        part, keyed_lines = element
        self._parts.inc()
        yield part, write_part(self._output_dir, part, keyed_lines)


class WriteReport(beam.PTransform):
    """Writes the report's lines from the workers, as sorted parts of bounded size, and tallies them.

    The lines are cut into key ranges of about `part_lines` lines each (from approximate
    quantiles of their keys), and each range is sorted and written by one worker; composing the
    parts in order gives the sorted report, whatever the cut. What crosses the shuffle is two
    strings per line; what any one step holds is one part, or a few thousand keys.

    Returns a dict: `tally`, a one-element PCollection of the ReportTally, and `parts`,
    (part index, lines) for every part written.
    """

    # Cut points computed: at most this many parts, so a billion lines make parts of about
    # 250,000 lines.
    QUANTILES = 4097

    def __init__(self, output_dir: str, part_lines: int):
        super().__init__()
        self._output_dir = output_dir
        self._part_lines = part_lines

    def expand(self, report):
        part_lines = self._part_lines
        tally = report | "Tally" >> beam.CombineGlobally(_ReportTallyFn())
        bounds = (
            report
            | "Keys" >> beam.Map(report_key)
            | "KeyQuantiles" >> ApproximateQuantiles.Globally(self.QUANTILES)
            | "PartBounds"
            >> beam.Map(
                lambda quantiles, tally: part_bounds(quantiles, tally.lines, part_lines),
                tally=pvalue.AsSingleton(tally),
            )
        )
        parts = (
            report
            | "KeyByPart"
            >> beam.Map(
                lambda entry, bounds: (
                    part_of(report_key(entry), bounds),
                    (report_key(entry), entry.to_json()),
                ),
                bounds=pvalue.AsSingleton(bounds),
            )
            | "GroupParts" >> beam.GroupByKey()
            | "WriteParts" >> beam.ParDo(_WritePartFn(self._output_dir))
        )
        return {"tally": tally, "parts": parts}
