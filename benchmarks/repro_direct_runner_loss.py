"""Counts what the DirectRunner hands a second stage: plain byte strings, no code of this project."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

__all__ = ["main"]

NAMESPACE = "repro"
_CHUNK = 100_000


def _generate(chunk: int, total: int, size: int):
    numbers = range(chunk * _CHUNK, min((chunk + 1) * _CHUNK, total))
    for number in numbers:
        yield b"%010d" % number + b"x" * (size - 10)
    Metrics.counter(NAMESPACE, "generated").inc(len(numbers))


def _deliver(element: bytes, _total: int):
    # The side input needs every element first, so this runs in a stage of its own, on what the
    # runner delivers to it.
    yield element


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--elements", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1600, help="bytes per element")
    parser.add_argument(
        "--mode", choices=["in_memory", "multi_threading", "multi_processing"],
        default="multi_processing", help="--direct_running_mode",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="--direct_num_workers")
    args = parser.parse_args(argv)

    options = PipelineOptions(
        [f"--direct_num_workers={args.workers}", f"--direct_running_mode={args.mode}"]
    )
    p = beam.Pipeline(options=options)
    chunks = (args.elements + _CHUNK - 1) // _CHUNK
    items = (
        p
        | "Chunks" >> beam.Create(range(chunks))
        | "Spread" >> beam.Reshuffle()
        | "Generate" >> beam.FlatMap(_generate, args.elements, args.size)
    )
    total = items | "Total" >> beam.combiners.Count.Globally()
    out = tempfile.mkdtemp(prefix="repro-")
    _ = (
        items
        | "Deliver" >> beam.FlatMap(_deliver, beam.pvalue.AsSingleton(total))
        | "CountDelivered" >> beam.combiners.Count.Globally()
        | "Write" >> beam.io.WriteToText(f"{out}/delivered", shard_name_template="")
    )
    started = time.monotonic()
    result = p.run()
    result.wait_until_finish()
    # Generated is a counter; delivered is data, counted by the pipeline itself.
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    }
    generated = counters.get("generated", 0)
    with open(f"{out}/delivered") as f:
        delivered = int(f.read())
    shutil.rmtree(out)
    # in_memory runs one worker in this process, whatever --direct_num_workers says.
    workers = "" if args.mode == "in_memory" else f", {args.workers} worker(s)"
    print(
        f"{args.mode}{workers}, {args.elements:,} elements of {args.size} B: "
        f"generated {generated:,}, delivered {delivered:,}, lost {generated - delivered:,} "
        f"({time.monotonic() - started:.0f} s, Beam {beam.__version__})"
    )
    return 0 if generated == delivered == args.elements else 1


if __name__ == "__main__":
    sys.exit(main())
