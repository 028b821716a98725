"""Plans N synthetic images through the real PlanShards on worker processes; time and peak memory."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import random
import resource
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.beam.transforms import PlanShards
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry
from beam_tfrecord.splits import assign_split, shuffle_key

__all__ = ["main"]

NAMESPACE = "bench_planning"
# BuildConfig's defaults, without building one (a config needs inputs).
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BuildConfig)}
_CLASSES = 1000
_MEAN_RECORD, _RECORD_SPREAD = 110_000, 40_000
# Entries are checked by count, by sum of their numbers and by sum of squares modulo a prime,
# which an entry planned twice and another never planned would not leave unchanged.
_PRIME = 2_147_483_647
_WORKER_MODULE = b"apache_beam.runners.worker.sdk_worker_main"


def _entry(number: int, rng: random.Random, splits, seed: int) -> ImageEntry:
    """One image's metadata, shaped like what PlanImages emits for a camera JPEG."""
    label = f"class_{number % _CLASSES:04d}"
    relpath = f"{label}/img_{number:010d}.jpg"
    record_size = rng.randint(_MEAN_RECORD - _RECORD_SPREAD, _MEAN_RECORD + _RECORD_SPREAD)
    return ImageEntry(
        url=f"gs://bench-bucket/photos/{relpath}",
        relpath=relpath,
        source_size=record_size - 240,
        split=assign_split(relpath, splits, seed),
        shuffle_key=shuffle_key(relpath, seed),
        label=label,
        class_id=number % _CLASSES,
        record_size=record_size,
    )


def _make_chunk(chunk: int, chunk_entries: int, total: int, splits, seed: int):
    """The entries of one chunk, generated on the worker that takes it (a generator: no list)."""
    rng = random.Random(seed * 1_000_003 + chunk)
    numbers = range(chunk * chunk_entries, min((chunk + 1) * chunk_entries, total))
    for number in numbers:
        yield _entry(number, rng, splits, seed)
    Metrics.counter(NAMESPACE, "entries_generated").inc(len(numbers))


def _count_delivered(entry, _total):
    # Runs in a stage of its own (its side input needs every entry first), so it counts what the
    # runner hands the next stage, as PlanShards' first stage gets it.
    Metrics.counter(NAMESPACE, "entries_delivered").inc()
    return ()


class _CheckShardFn(beam.DoFn):
    """Counts and checks each planned shard; keeps nothing between shards."""

    def __init__(self, min_size: int, max_size: int):
        self._min, self._max = min_size, max_size
        self._entries = Metrics.counter(NAMESPACE, "entries")
        self._number_sum = Metrics.counter(NAMESPACE, "number_sum")
        self._square_sum = Metrics.counter(NAMESPACE, "square_sum_mod_p")
        self._shards = Metrics.counter(NAMESPACE, "shards")
        self._bad = Metrics.counter(NAMESPACE, "shards_out_of_bounds")
        self._wrong_split = Metrics.counter(NAMESPACE, "entries_in_wrong_split")
        self._shard_bytes = Metrics.distribution(NAMESPACE, "shard_bytes")

    def process(self, element, plan):
        (split, index), entries = element
        count = total = numbers = squares = wrong = 0
        for entry in entries:
            number = int(entry.relpath[-14:-4])
            count += 1
            total += entry.record_size
            numbers += number
            squares += number * number % _PRIME
            wrong += entry.split != split
        self._entries.inc(count)
        self._number_sum.inc(numbers)
        self._square_sum.inc(squares)
        self._wrong_split.inc(wrong)
        self._shards.inc()
        self._shard_bytes.update(total)
        split_plan = plan[split]
        whole_split_small = split_plan.shards == 1 and split_plan.bytes < self._min
        in_bounds = total <= self._max and (total >= self._min or whole_split_small)
        if not in_bounds or not 0 <= index < split_plan.shards:
            self._bad.inc()

    def finish_bundle(self):
        # The worker's own peak so far, a cross-check of what the launcher reads from /proc.
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        Metrics.gauge(NAMESPACE, f"worker_maxrss_kib_pid_{os.getpid()}").set(peak_kib)


def _count_plan(plan):
    for split in plan.values():
        Metrics.counter(NAMESPACE, "plan_records").inc(split.records)
        Metrics.counter(NAMESPACE, "plan_shards").inc(split.shards)
        Metrics.counter(NAMESPACE, "plan_buckets").inc(split.buckets)
    return plan


def _vm_hwm_kib(pid: int | str) -> int | None:
    """A process's peak resident set (VmHWM), in KiB; None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces; the parent pid follows it.
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def _is_sdk_worker(pid: int) -> bool:
    """A Python SDK worker, not the `sh -c` that Beam starts it through (one argument there)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return _WORKER_MODULE in argv


class _WorkerPeaks:
    """Polls the SDK worker subprocesses of this process for their VmHWM while the pipeline runs.

    VmHWM is the kernel's high-water mark, so polling only has to see each worker once before it
    exits; growth in its last interval would be missed, and the workers' own ru_maxrss, reported
    through a gauge at the end of each bundle, checks that.
    """

    def __init__(self, interval: float = 0.25):
        self.peaks: dict[int, int] = {}
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _poll(self):
        me = os.getpid()
        while not self._stop.is_set():
            for pid in _descendants(me):
                if pid in self.peaks or _is_sdk_worker(pid):
                    peak = _vm_hwm_kib(pid)
                    if peak is not None:
                        self.peaks[pid] = max(peak, self.peaks.get(pid, 0))
            self._stop.wait(self._interval)


def _record_inputs_sent() -> list[int]:
    """Records the size of each bundle input the DirectRunner sends a worker.

    The DirectRunner (FnApiRunner) sends a worker its whole share of a stage's input, a
    GroupByKey's output included, as one gRPC message, which the worker holds while it processes
    it: a cost that grows with the collection and belongs to this runner, not to the pipeline.
    Wraps a private method; it only measures.
    """
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    sizes: list[int] = []
    send = fn_runner.BundleManager._send_input_to_worker

    def measured_send(self, process_bundle_id, read_transform_id, byte_streams):
        byte_streams = list(byte_streams or [])
        # Written without a flush in between, so the worker gets them as one message.
        sizes.append(sum(len(b) for b in byte_streams))
        return send(self, process_bundle_id, read_transform_id, byte_streams)

    fn_runner.BundleManager._send_input_to_worker = measured_send
    return sizes


def _pipeline(args, splits) -> beam.Pipeline:
    options = PipelineOptions(
        [
            "--runner=DirectRunner",
            f"--direct_num_workers={args.workers}",
            "--direct_running_mode=multi_processing",
        ]
    )
    chunks = math.ceil(args.entries / args.chunk_entries)
    p = beam.Pipeline(options=options)
    entries = (
        p
        | "Chunks" >> beam.Create(range(chunks))
        | "SpreadChunks" >> beam.Reshuffle()
        | "MakeEntries"
        >> beam.FlatMap(_make_chunk, args.chunk_entries, args.entries, splits, args.seed)
    )
    generated = entries | "CountGenerated" >> beam.combiners.Count.Globally()
    _ = entries | "CountDelivered" >> beam.FlatMap(
        _count_delivered, beam.pvalue.AsSingleton(generated)
    )
    # A build bounds its buckets by the listed count; here every generated entry is "listed".
    planned = entries | "PlanShards" >> PlanShards(
        args.min_shard_size, args.max_shard_size, args.bucket_records, generated
    )
    plan = planned["plan"] | "CountPlan" >> beam.Map(_count_plan)
    _ = planned["shards"] | "CheckShards" >> beam.ParDo(
        _CheckShardFn(args.min_shard_size, args.max_shard_size),
        plan=beam.pvalue.AsSingleton(plan),
    )
    return p


def _metrics(result) -> tuple[dict[str, int], dict[str, object], dict[int, int]]:
    query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    counters: dict[str, int] = {}
    for c in query["counters"]:
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + c.committed
    distributions = {d.key.metric.name: d.committed for d in query["distributions"]}
    rusage: dict[int, int] = {}
    for g in query["gauges"]:
        name = g.key.metric.name
        if name.startswith("worker_maxrss_kib_pid_"):
            pid = int(name.rsplit("_", 1)[1])
            rusage[pid] = max(rusage.get(pid, 0), g.committed.value)
    return counters, distributions, rusage


def _check(counters: dict[str, int], entries: int) -> list[str]:
    """What went wrong, if anything: every entry planned exactly once, every shard in bounds."""
    expected = {
        "entries_generated": entries,
        "entries_delivered": entries,
        "entries": entries,
        "plan_records": entries,
        "number_sum": entries * (entries - 1) // 2,
        "shards": counters.get("plan_shards", -1),
        "shards_out_of_bounds": 0,
        "entries_in_wrong_split": 0,
    }
    problems = [
        f"{name}: {counters.get(name, 0)}, expected {value}"
        for name, value in expected.items()
        if counters.get(name, 0) != value
    ]
    squares = sum(n * n % _PRIME for n in range(entries)) % _PRIME
    if counters.get("square_sum_mod_p", 0) % _PRIME != squares:
        problems.append("square_sum_mod_p does not match: an entry was planned twice, one never")
    return problems


def _mib(kib: int) -> str:
    return f"{kib / 1024:,.0f} MiB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=10_000_000, help="images to plan")
    parser.add_argument(
        "--bucket-records",
        type=int,
        default=_DEFAULTS["planning_bucket_records"],
        help="PlanShards' bucket size (default: BuildConfig's)",
    )
    parser.add_argument("--chunk-entries", type=int, default=100_000, help="entries per chunk")
    parser.add_argument("--workers", type=int, default=2, help="SDK worker processes")
    parser.add_argument("--min-shard-size", type=int, default=_DEFAULTS["min_shard_size"])
    parser.add_argument("--max-shard-size", type=int, default=_DEFAULTS["max_shard_size"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", metavar="FILE", help="append a table row of the results")
    args = parser.parse_args(argv)
    splits = _DEFAULTS["splits"]

    pipeline = _pipeline(args, splits)
    sent = _record_inputs_sent()
    started = time.monotonic()
    with _WorkerPeaks() as workers:
        result = pipeline.run()
        result.wait_until_finish()
    seconds = time.monotonic() - started
    launcher_kib = _vm_hwm_kib("self") or 0
    counters, distributions, rusage = _metrics(result)
    problems = _check(counters, args.entries)

    shard_bytes = distributions.get("shard_bytes")
    print(
        f"bench_planning: {args.entries:,} entries, bucket {args.bucket_records:,} records, "
        f"{args.workers} worker processes, Python {platform.python_version()}, "
        f"Beam {beam.__version__}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"  planned {counters.get('entries', 0):,} entries into {counters.get('shards', 0):,} "
        f"shards, {counters.get('plan_buckets', 0)} buckets"
        + (
            f"; shard bytes {shard_bytes.min / 1e6:.1f}-{shard_bytes.max / 1e6:.1f} MB"
            if shard_bytes
            else ""
        )
    )
    print(f"  wall time {seconds:,.1f} s ({args.entries / seconds:,.0f} entries/s)")
    for pid, peak in sorted(workers.peaks.items()):
        own = rusage.get(pid)
        print(
            f"  worker pid {pid}: peak RSS {_mib(peak)} (VmHWM)"
            + (f", {_mib(own)} (its own ru_maxrss)" if own else "")
        )
    print(
        f"  largest message the runner sent a worker: {max(sent, default=0) / 2**20:,.0f} MiB "
        "(a stage's whole input for that worker, in one piece: a DirectRunner cost)"
    )
    print(f"  launcher (DirectRunner, holds its in-memory shuffle) peak RSS {_mib(launcher_kib)}")
    if problems:
        print("CHECK FAILED: " + "; ".join(problems))
        generated, delivered = (
            counters.get(k, 0) for k in ("entries_generated", "entries_delivered")
        )
        if delivered < generated:
            print(
                f"  the runner handed the next stage {delivered:,} of the {generated:,} entries "
                "generated: they were lost between stages, before PlanShards saw them"
            )
    else:
        print("  checks passed: every entry planned once, every shard within bounds")

    if args.markdown:
        path = Path(args.markdown)
        new = not path.exists() or path.stat().st_size == 0
        worker_peaks = ", ".join(_mib(p) for _, p in sorted(workers.peaks.items()))
        with path.open("a", encoding="utf-8") as f:
            if new:
                f.write(
                    "| entries | bucket records | buckets | shards | wall time | peak RSS per worker "
                    "| largest message to a worker | launcher peak RSS | checks |\n"
                    "|---:|---:|---:|---:|---:|---|---:|---:|---|\n"
                )
            f.write(
                f"| {args.entries:,} | {args.bucket_records:,} | {counters.get('plan_buckets', 0)} | "
                f"{counters.get('shards', 0):,} | {seconds:,.0f} s | {worker_peaks} | "
                f"{max(sent, default=0) / 2**20:,.0f} MiB | "
                f"{_mib(launcher_kib)} | {'FAILED' if problems else 'passed'} |\n"
            )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
