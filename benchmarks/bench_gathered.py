"""What a build gathers in one place, measured per item and scaled to a billion images.

    python benchmarks/bench_gathered.py                   # 100,000 shards, 244,000 report lines
    python benchmarks/bench_gathered.py --shards 20000 --part-lines 50000

Measures, with tracemalloc: a ShardResult (without class counts) in memory and pickled, and the
peak of building and serializing the manifest, per shard; one report part (key and JSON line per
report line) sorted in memory; and the peak of composing report.jsonl from parts, which must not
grow with the report. Prints the figures benchmarks/README.md states.
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
import tracemalloc

from apache_beam.transforms.stats import ApproximateQuantilesCombineFn

from beam_tfrecord.beam.writing import WriteReport
from beam_tfrecord.entries import ReportEntry, ShardResult
from beam_tfrecord.labels import ClassMap
from beam_tfrecord.manifest import REPORT_FILE, build_manifest
from beam_tfrecord.report import ReportTally, compose_report, report_key, write_part

BILLION = 10**9
SHARDS_AT_A_BILLION = 1_100_000  # 110 TB in shards of 100 MB, the smallest allowed


def _shards(count: int) -> list[ShardResult]:
    return [
        ShardResult(
            "train", i, f"photos-train.tfrecord-{i:05d}-of-{count:05d}", 1850, 199_000_000 + i,
            f"{i:08x}", (), False, f"index/photos-train.tfrecord-{i:05d}-of-{count:05d}.index",
        )
        for i in range(count)
    ]  # fmt: skip


def _lines(count: int) -> list[tuple[str, str]]:
    lines = []
    for i in range(count):
        relpath = f"photos/2024/{i % 977:03d}/IMG_{i:09d}.jpg"
        entry = ReportEntry(
            f"gs://my-bucket/{relpath}", relpath, "normalized",
            "re-encoded so that TensorFlow decodes it as stated: resized to 256 on the shorter side",
            action="modified", split="train", label=f"class{i % 1000:04d}", notes=("resized",),
        )  # fmt: skip
        lines.append((report_key(entry), entry.to_json()))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--part-lines", type=int, default=244_000)
    parser.add_argument("--parts", type=int, default=8, help="parts composed into one report")
    args = parser.parse_args()

    tracemalloc.start()
    shards = _shards(args.shards)
    held = tracemalloc.get_traced_memory()[0] / args.shards
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    manifest = build_manifest(config={}, split_names=["train"], classes=ClassMap(()),
                              shards=shards, report=ReportTally(), listed=0)  # fmt: skip
    text = json.dumps(manifest, indent=1)
    peak = (tracemalloc.get_traced_memory()[1] - base) / args.shards
    print(f"shard results, {args.shards:,}:")
    print(f"  {held:.0f} B in memory, {len(pickle.dumps(shards[1])):,} B pickled per shard")
    print(f"  manifest: {len(text) / args.shards:.0f} B of JSON, peak {peak:.0f} B per shard")
    print(
        f"  at {SHARDS_AT_A_BILLION:,} shards: {held * SHARDS_AT_A_BILLION / 1e9:.2f} GB held, "
        f"{(held + peak) * SHARDS_AT_A_BILLION / 1e9:.2f} GB at the manifest's peak, "
        f"{len(text) / args.shards * SHARDS_AT_A_BILLION / 1e6:.0f} MB manifest.json"
    )
    del shards, manifest, text

    spec = ApproximateQuantilesCombineFn.create(num_quantiles=WriteReport.QUANTILES)._spec
    print(
        f"report cut points: {WriteReport.QUANTILES:,} quantiles; the combine keeps at most "
        f"{spec.num_buffers} buffers of {spec.buffer_size:,} keys "
        f"({spec.num_buffers * spec.buffer_size:,} keys)"
    )

    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    lines = _lines(args.part_lines)
    with tempfile.TemporaryDirectory() as out:
        write_part(out, 0, lines)
        part_peak = tracemalloc.get_traced_memory()[1] - base
        size = sum(len(line) + 1 for _, line in lines)
        print(
            f"one report part, {args.part_lines:,} lines ({size / args.part_lines:.0f} B a line): "
            f"peak {part_peak / 1e6:.0f} MB to sort and write "
            f"({part_peak / args.part_lines:.0f} B a line)"
        )
        for part in range(1, args.parts):
            write_part(out, part, lines)
        del lines
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        compose_report(out, range(args.parts), REPORT_FILE)
        compose_peak = tracemalloc.get_traced_memory()[1] - base
        print(
            f"composing {args.parts} parts ({args.parts * size / 1e6:.0f} MB): "
            f"peak {compose_peak / 1e6:.1f} MB"
        )
    print(f"at {BILLION:,} lines: {BILLION / (WriteReport.QUANTILES - 1):,.0f} lines a part")


if __name__ == "__main__":
    main()
