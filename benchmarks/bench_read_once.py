"""Our build against a plain loop doing the same work per image, in one run.

    python benchmarks/bench_read_once.py --images 15000 --small 120000 [--before REV] [--markdown F]

Three workloads, each ours (2 workers, the multi-process DirectRunner; and a plain build with no
Beam flags: one process, its shards written by shard processes of its own once the plan holds
64 MB) against benchmarks/baseline_plain.py (2 processes, no Beam) doing
the same work per image, and benchmarks/baseline_write_shard.py: our own shard writer in the same
2 processes with no pipeline around it, which splits a build's time between the work per image
and the pipeline's start, listing, planning and finish:

- the 1.5 GB JPEG collection, default build (`--validate decode`): read, reduced-size decode,
  SHA-256, framing, write;
- the same collection with `--resize 256 --encode jpeg`: read, draft decode, Lanczos resize,
  JPEG encode at quality 95, SHA-256, framing, write;
- `--small` 32x32 PNGs (the CIFAR shape), default build: read, decode, SHA-256, framing, write;
  also at half that count, so that the growth of peak memory per image shows.

For our builds it reads what the build counted in manifest.json (`work`: sources read, bytes
read, images decoded and encoded) and prints them per image. `--before REV` also runs the same
builds from a git revision (a worktree made under the data folder), for a before/after in the
same run. The page cache is warm for every contender (`--cold` evicts the collection first).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_build import TWO_WORKERS, Result, _run, _set_cache, _sync_and_drop_writes  # noqa: E402
from collection import ensure_collection, ensure_small_pngs  # noqa: E402


def _checkout(rev: str, data: Path) -> Path:
    place = data / f"rev-{rev}"
    if not place.exists():
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(place), rev], check=True
        )
    return place


def _work(manifest: Path) -> dict:
    try:
        return json.loads(manifest.read_text()).get("work", {})
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--images", type=int, default=15000, help="JPEG collection size (15000 is about 1.5 GB)"
    )
    parser.add_argument("--small", type=int, default=120000, help="how many 32x32 PNGs")
    parser.add_argument(
        "--data", type=Path, default=REPO.parent / "bench-data", help="where collections live"
    )
    parser.add_argument("--before", help="also run our builds from this git revision")
    parser.add_argument(
        "--only",
        action="append",
        help="run only the workloads whose name holds this text (repeatable; default all)",
    )
    parser.add_argument(
        "--cold", action="store_true", help="evict the collection from the page cache first"
    )
    parser.add_argument(
        "--python",
        type=Path,
        help="also run the plain build with this interpreter: one of a venv made by the README's "
        "run command (no test extras), where Beam imports in about half the time",
    )
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    args = parser.parse_args(argv)

    jpegs = args.data / f"c{args.images}"
    jpeg_meta = ensure_collection(jpegs, args.images)
    small = args.data / f"png{args.small}"
    half = args.data / f"png{args.small // 2}"
    ensure_small_pngs(small, args.small)
    ensure_small_pngs(half, args.small // 2)
    out = args.data / "out"
    python = sys.executable
    plain = [python, str(HERE / "baseline_plain.py")]
    writer = [python, str(HERE / "baseline_write_shard.py")]
    trees = {"ours": REPO}
    if args.before:
        trees[f"before ({args.before})"] = _checkout(args.before, args.data)

    def ours(source: Path, *flags: str, workers: bool = True, python: str = python) -> list[str]:
        return [python, "-m", "beam_tfrecord.cli", "build", "--input", f"{source}/**", "--output",
                str(out / "build"), "--name", "bench", "--overwrite", *flags,
                *(TWO_WORKERS if workers else ())]  # fmt: skip

    workloads = [
        ("JPEGs, default", jpegs, jpeg_meta, [*plain, str(jpegs), str(out / "plain"), "--mode", "decode"], ()),
        ("JPEGs, --resize 256 --encode jpeg", jpegs, jpeg_meta,
         [*plain, str(jpegs), str(out / "plain"), "--mode", "resize"], ("--resize", "256", "--encode", "jpeg")),
        (f"{args.small} PNGs 32x32, default", small, json.loads((small / "collection.json").read_text()),
         [*plain, str(small), str(out / "plain"), "--mode", "png"], ()),
        (f"{args.small // 2} PNGs 32x32, default", half, json.loads((half / "collection.json").read_text()),
         None, ()),
    ]  # fmt: skip
    rows = []
    for workload, source, meta, baseline, flags in workloads:
        if args.only and not any(part in workload for part in args.only):
            continue
        contenders = []
        if baseline:
            # The plain loop, then our own per-image work alone: the same processes running
            # write_shard, none of the pipeline around it.
            contenders.append(("plain loop, 2 processes", baseline, REPO))
            alone = [*writer, *baseline[2:3], str(out / "build"), *baseline[4:]]
            contenders.append(("our shard writer alone, 2 processes", alone, REPO))
        contenders += [
            (f"{tree}, 2 workers", ours(source, *flags), cwd) for tree, cwd in trees.items()
        ]
        # What a plain `beam-tfrecord build` runs: one process, its shards written by processes of
        # its own once the plan is large enough.
        contenders.append(("ours, plain build", ours(source, *flags, workers=False), REPO))
        if args.python:
            # The same command with the README's install: `import apache_beam` there does not
            # load the Google Cloud clients that the test extras bring (0.8 s against 1.3-1.8 s).
            readme = ours(source, *flags, workers=False, python=str(args.python))
            contenders.append(("ours, plain build, README install", readme, REPO))
        results: dict[str, tuple[Result, dict]] = {}
        for name, command, cwd in contenders:
            _sync_and_drop_writes(out)
            out.mkdir(parents=True)
            _set_cache(source, warm=not args.cold)
            env = {"PYTHONPATH": str(cwd)}
            result = _run(f"{workload}: {name}", command, env=env, cwd=cwd)
            results[name] = (result, _work(out / "build" / "manifest.json"))
        base = results.get("plain loop, 2 processes")
        for name, (result, work) in results.items():
            n = meta["images"]
            per = {k: work[k] / n for k in ("bytes_read", "decodes", "encodes") if k in work}
            rows.append({
                "workload": workload, "contender": name, "images": n, "seconds": result.seconds,
                "images_per_s": n / result.seconds, "mb_per_s": meta["bytes"] / 1e6 / result.seconds,
                "vs_plain": base[0].seconds / result.seconds if base else None,
                "main_mb": result.peak_main_mb, "worker_mb": result.peak_worker_mb,
                "read_ratio": per["bytes_read"] / (meta["bytes"] / n) if "bytes_read" in per else None,
                "decodes": per.get("decodes"), "encodes": per.get("encodes"),
            })  # fmt: skip
    _sync_and_drop_writes(out)
    table = _table(rows, args.small)
    print()
    print(table)
    if args.markdown:
        command = (
            f"python benchmarks/bench_read_once.py --images {args.images} --small {args.small}"
        )
        command += f" --before {args.before}" if args.before else ""
        command += "".join(f' --only "{part}"' for part in args.only or ())
        command += f" --python {args.python}" if args.python else ""
        header = f"{os.cpu_count()} cores, {'cold' if args.cold else 'warm'} page cache. Command: `{command}`.\n\n"
        args.markdown.write_text(header + table + "\n")
    return 0


def _table(rows: list[dict], small: int) -> str:
    def number(value, fmt):
        return "-" if value is None else format(value, fmt)

    lines = [
        "| workload | contender | seconds | images/s | MB/s | vs plain loop | peak MB, main | peak MB, worker "
        "| bytes read / image size | decodes / image | encodes / image |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['contender']} | {r['seconds']:.1f} | {r['images_per_s']:.0f} | {r['mb_per_s']:.1f} "
            f"| {number(r['vs_plain'], '.2f')}{'x' if r['vs_plain'] else ''} | {r['main_mb']:.0f} | {r['worker_mb']:.0f} "
            f"| {number(r['read_ratio'], '.2f')} | {number(r['decodes'], '.2f')} | {number(r['encodes'], '.2f')} |"
        )
    # Memory per image: the growth of the largest process's peak from half the PNGs to all of them.
    growth = []
    for contender in sorted({r["contender"] for r in rows if "PNGs" in r["workload"]}):
        pair = {
            r["images"]: r for r in rows if r["contender"] == contender and "PNGs" in r["workload"]
        }
        if small in pair and small // 2 in pair:
            big, little = pair[small], pair[small // 2]
            peak = max(big["main_mb"], big["worker_mb"]) - max(
                little["main_mb"], little["worker_mb"]
            )
            growth.append(
                f"- {contender}: {peak * 1e6 / (small - small // 2) / 1e3:.2f} KB more peak memory per image"
            )
    if growth:
        lines += ["", f"Largest process's peak memory, {small // 2} to {small} PNGs:", *growth]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
