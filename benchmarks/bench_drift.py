"""How far shards drift from their planned size when images change size as they are written.

    python benchmarks/bench_drift.py [--photos 600] [--markdown F]

Shards are planned from file sizes (docs/guide/shard-sizes.md). This builds, in-process, with shard
bounds small enough for many shards:

- photographs kept as they are (the plan is exact but for a few bytes per record);
- the hostile test corpus (tests/hostile_images.py) ten times over: images left out as broken,
  and images normalized (re-encoded) when they are written;
- the photographs with `--resize 256 --encode jpeg`, and with `--resize exact:32x32 --store raw`,
  whose sizes the plan estimates;
- 32x32 drawn PNGs with `--resize 64`, which the size model (made for photographs) overestimates.

and prints, per build, each shard's written bytes over its planned bytes (min, median, max) and
how many shards fall outside the bounds, from manifest.json's `bytes` and `planned_bytes`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO), str(REPO / "tests")]

from collection import _make_range, _make_small_range  # noqa: E402
from hostile_images import hostile_corpus  # noqa: E402

from beam_tfrecord.beam.pipeline import build  # noqa: E402
from beam_tfrecord.config import BuildConfig, parse_size  # noqa: E402

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _hostile(root: Path, copies: int) -> None:
    cases = hostile_corpus()
    for copy in range(copies):
        for case in cases:
            folder = root / case.name
            folder.mkdir(parents=True, exist_ok=True)
            stem, dot, suffix = Path(case.filename).name.rpartition(".")
            (folder / f"{stem}-{copy}{dot}{suffix}").write_bytes(case.data)


def _drift(work: Path, name: str, source: Path, bounds: tuple[str, str], **settings) -> dict:
    out = work / "out" / name
    config = BuildConfig.from_settings(dict(
        inputs=(f"{source}/**",), output=str(out), min_shard_size=bounds[0],
        max_shard_size=bounds[1], overwrite=True, **settings,
    ))  # fmt: skip
    manifest = build(config, IN_PROCESS).manifest
    low, high = parse_size(bounds[0]), parse_size(bounds[1])
    shards = manifest["shards"]
    ratios = [s["bytes"] / s["planned_bytes"] for s in shards]
    outside = [s for s in shards if not low <= s["bytes"] <= high]
    return {
        "build": name,
        "bounds": f"{bounds[0]}-{bounds[1]}",
        "images": manifest["inputs"]["written"],
        "left out": manifest["inputs"]["skipped"],
        "changed": manifest["inputs"]["modified"],
        "shards": len(shards),
        "min": min(ratios),
        "median": statistics.median(ratios),
        "max": max(ratios),
        "outside": len(outside),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--photos", type=int, default=600, help="photographs (640x480, about 110 KB)"
    )
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="drift-"))
    try:
        photos, hostile, drawn = work / "photos", work / "hostile", work / "drawn"
        for c in range(10):
            (photos / f"class{c:02d}").mkdir(parents=True)
            (drawn / f"class{c:02d}").mkdir(parents=True)
        _make_range((str(photos), 0, args.photos, 7))
        _make_small_range((str(drawn), 0, 5000, 7))
        _hostile(hostile, 10)
        rows = [
            _drift(work, "photos, kept as they are", photos, ("2MB", "6MB")),
            _drift(work, "hostile corpus x10", hostile, ("20KB", "60KB"), labels="dir"),
            _drift(
                work,
                "photos, --resize 256 --encode jpeg",
                photos,
                ("400KB", "1200KB"),
                resize="256",
                encode="jpeg",
            ),
            _drift(
                work,
                "photos, --resize exact:32x32 --store raw",
                photos,
                ("100KB", "300KB"),
                resize="exact:32x32",
                store="raw",
            ),
            _drift(work, "32x32 drawn PNGs, --resize 64", drawn, ("200KB", "600KB"), resize="64"),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        "| build | bounds | images written | left out | changed | shards | written / planned: min | median | max | shards outside the bounds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['build']} | {r['bounds']} | {r['images']} | {r['left out']} | {r['changed']} | {r['shards']} "
            f"| {r['min']:.3f} | {r['median']:.3f} | {r['max']:.3f} | {r['outside']} |"
        )
    table = "\n".join(lines)
    print(json.dumps(rows, indent=1))
    print(table)
    if args.markdown:
        args.markdown.write_text(
            f"Command: `python benchmarks/bench_drift.py --photos {args.photos}`.\n\n{table}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
