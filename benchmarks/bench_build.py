"""Side-by-side build benchmark: our pipeline against the copy limit and what users would otherwise write.

    python benchmarks/bench_build.py --images 15000 --markdown benchmarks/results.md

Generates (or reuses) a collection of unique ~100 KB JPEGs, then runs each contender as a whole
process on the same files, in the same run. Before each one the collection is evicted from the
page cache (posix_fadvise DONTNEED, no root needed) and earlier output is synced, so every
contender reads the images from the disk, as a build of a collection larger than memory does;
`--warm` reads them into the cache before each contender instead. Contenders:

- copy limit: `cat` of every file into one file (read and write the bytes once);
- the same copy from a warm page cache, as a reference: memory bandwidth, not the disk;
- Beam stock: `WriteToTFRecord` after a `Map` that reads each image into an Example, with the
  shard count a 150 MB target gives (benchmarks/baseline_beam.py);
- tf.io.TFRecordWriter loop, shapes from image headers, when TensorFlow is installed
  (benchmarks/baseline_tensorflow.py);
- plain validation loop: the same decode check as `--validate decode`, no Beam, 2 processes
  (benchmarks/baseline_validate.py);
- our build with `--validate header` and `--validate decode`, in-process and with 2 workers in
  multi-process mode.

For each it prints images/s, MB/s, peak resident memory (`/proc/<pid>/status` VmHWM, polled) of
the main process (for a Beam pipeline, the launcher, which runs the DirectRunner and its in-memory
shuffle) and of the largest other process in its tree (Beam's SDK workers, a pool's processes),
and ratios against the copy limit, the warm-cache copy and the Beam baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from collection import ensure_collection  # noqa: E402

TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
COPY = "copy limit (cat)"
WARM_COPY = "copy, warm page cache (reference only)"
ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


@dataclass
class Result:
    name: str
    seconds: float
    peak_process_mb: float
    peak_main_mb: float
    peak_worker_mb: float
    peak_total_mb: float
    processes: int
    note: str = ""
    images_per_s: float = 0.0
    mb_per_s: float = 0.0
    extra: dict = field(default_factory=dict)
    # CPU time (user + system) of the contender's process and of every process below it that
    # was waited for (Beam waits for its SDK workers, a pool for its processes).
    cpu_seconds: float = 0.0


def _children(pid: int) -> list[int]:
    # Linux lists a process's children per thread; Beam starts its workers from other threads.
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            pass
    return found


def _status(pid: int) -> tuple[int, int]:
    """(VmHWM, VmRSS) of a process in kB, or zeros when it is gone."""
    hwm = rss = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
                elif line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
    except OSError:
        pass
    return hwm, rss


class _TreeMemory(threading.Thread):
    """Polls a process tree: each process's peak RSS, and the peak of their sum."""

    def __init__(self, root: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peaks: dict[int, int] = {}
        self.peak_total = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pids, todo = [], [self.root]
            while todo:
                pid = todo.pop()
                pids.append(pid)
                todo.extend(_children(pid))
            total = 0
            for pid in pids:
                hwm, rss = _status(pid)
                if hwm:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)
                total += rss
            self.peak_total = max(self.peak_total, total)
            self.stop.wait(self.interval)


def _run(name: str, command: list[str], *, env: dict | None = None, note: str = "",
         cwd: Path = REPO) -> Result:  # fmt: skip
    print(f"-- {name}: {' '.join(command)}", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    watcher = _TreeMemory(proc.pid)
    watcher.start()
    output, _ = proc.communicate()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    watcher.stop.set()
    watcher.join()
    if proc.returncode != 0:
        print(output[-3000:])
        raise SystemExit(f"{name} failed with exit status {proc.returncode}")
    peaks = watcher.peaks.values() or [0]
    main = watcher.peaks.get(proc.pid, 0)
    # Everything below the main process: Beam's SDK workers, a pool's processes (and shells).
    others = [kb for pid, kb in watcher.peaks.items() if pid != proc.pid] or [0]
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Result(name, seconds, max(peaks) / 1024, main / 1024, max(others) / 1024,
                  watcher.peak_total / 1024, len(watcher.peaks), note, cpu_seconds=cpu)  # fmt: skip


def _sync_and_drop_writes(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # the next contender should not pay for the previous one's dirty pages


def _set_cache(source: Path, warm: bool) -> None:
    """Puts the collection's pages into the page cache (warm) or takes them out (cold)."""
    for path in (p for p in source.rglob("*") if p.suffix in (".jpg", ".png")):
        fd = os.open(path, os.O_RDONLY)
        try:
            if warm:
                while os.read(fd, 1 << 20):
                    pass
            else:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=15000, help="collection size (15000 is about 1.5 GB)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "bench-data", help="where collections live")
    parser.add_argument("--scale", type=int, default=1, help="a collection N times larger, of unique copies")
    parser.add_argument("--only", help="comma-separated parts of contender names to run (default all)")
    parser.add_argument("--skip", help="comma-separated parts of contender names not to run")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    parser.add_argument("--warm", action="store_true", help="every contender reads from a warm page cache")
    args = parser.parse_args(argv)

    source = args.data / f"c{args.images}"
    meta = ensure_collection(source, args.images)
    images, total_bytes = meta["images"], meta["bytes"]
    if args.scale > 1:
        source, images, total_bytes = _scaled(source, args.scale, images, total_bytes)
    out = args.data / "out"
    mb = total_bytes / 1e6
    print(f"collection: {images} images, {mb:.0f} MB in {source}", flush=True)

    python = sys.executable
    shards = max(1, round(total_bytes / 150e6))
    build = [python, "-m", "beam_tfrecord.cli", "build", "--input", f"{source}/**", "--output", str(out / "ours"),
             "--name", "bench", "--overwrite"]  # fmt: skip
    cat = ["bash", "-c", f"find {source} -name '*.jpg' -print0 | sort -z | xargs -0 cat > {out}/all.bin"]
    contenders = {
        COPY: cat,
        WARM_COPY: cat,
        "Beam stock WriteToTFRecord, 2 workers": [python, str(HERE / "baseline_beam.py"), str(source), str(out / "beam"),
                                                  "--shards", str(shards), *TWO_WORKERS],
        "tf.io.TFRecordWriter loop": [python, str(HERE / "baseline_tensorflow.py"), str(source), str(out / "tf")],
        "plain decode-check loop, 2 processes": [python, str(HERE / "baseline_validate.py"), str(source), "--processes", "2"],
        "ours --validate header, in-process": [*build, "--validate", "header", *ONE_WORKER],
        "ours --validate header, 2 workers": [*build, "--validate", "header", *TWO_WORKERS],
        "ours --validate decode, in-process": [*build, "--validate", "decode", *ONE_WORKER],
        "ours --validate decode, 2 workers": [*build, "--validate", "decode", *TWO_WORKERS],
    }  # fmt: skip
    if args.warm:
        del contenders[WARM_COPY]  # the copy limit itself is warm then
    if args.only:
        wanted = [w.strip() for w in args.only.split(",")]
        contenders = {k: v for k, v in contenders.items() if any(w in k for w in wanted)}
    if args.skip:
        unwanted = [w.strip() for w in args.skip.split(",")]
        contenders = {k: v for k, v in contenders.items() if not any(w in k for w in unwanted)}
    results = []
    for name, command in contenders.items():
        if "TFRecordWriter" in name and not _has_tensorflow():
            print(f"-- {name}: skipped, TensorFlow is not installed")
            continue
        _sync_and_drop_writes(out)
        out.mkdir(parents=True)
        _set_cache(source, warm=args.warm or name == WARM_COPY)
        env = {"TF_CPP_MIN_LOG_LEVEL": "2"}
        result = _run(name, command, env=env)
        result.images_per_s = images / result.seconds
        result.mb_per_s = mb / result.seconds
        results.append(result)
    shutil.rmtree(out, ignore_errors=True)

    table = _table(results, images, mb)
    print()
    print(table)
    if args.markdown:
        header = (
            f"Collection: {images} unique JPEGs, {mb:.0f} MB ({meta['width']}x{meta['height']}, q{meta['quality']}), "
            f"{'warm' if args.warm else 'cold'} page cache, {os.cpu_count()} cores. Command: "
            f"`python benchmarks/bench_build.py --images {args.images}"
            f"{f' --scale {args.scale}' if args.scale > 1 else ''}{' --warm' if args.warm else ''}"
            f"{f' --only {args.only!r}' if args.only else ''}{f' --skip {args.skip!r}' if args.skip else ''}`.\n\n"
        )
        args.markdown.write_text(header + table + "\n")
    return 0


def _table(results: list[Result], images: int, mb: float) -> str:
    by_name = {r.name: r for r in results}
    copy = by_name.get(COPY)
    warm = by_name.get(WARM_COPY)
    beam = by_name.get("Beam stock WriteToTFRecord, 2 workers")
    lines = [
        "| contender | seconds | images/s | MB/s | peak MB, main process | peak MB, largest worker | vs copy limit | vs warm copy | vs Beam stock |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        vs_copy = f"{r.mb_per_s / copy.mb_per_s:.0%}" if copy else "-"
        vs_warm = f"{r.mb_per_s / warm.mb_per_s:.0%}" if warm else "-"
        vs_beam = f"{r.mb_per_s / beam.mb_per_s:.1f}x" if beam else "-"
        lines.append(
            f"| {r.name} | {r.seconds:.1f} | {r.images_per_s:.0f} | {r.mb_per_s:.0f} | {r.peak_main_mb:.0f} "
            f"| {f'{r.peak_worker_mb:.0f}' if r.peak_worker_mb >= 20 else '-'} | {vs_copy} | {vs_warm} | {vs_beam} |"
        )
    plain = by_name.get("plain decode-check loop, 2 processes")
    ours = by_name.get("ours --validate decode, 2 workers")
    if plain and ours:
        lines.append("")
        lines.append(f"`--validate decode`, 2 workers, runs at {ours.mb_per_s / plain.mb_per_s:.0%} of the plain decode-check loop.")
    return "\n".join(lines)


def _has_tensorflow() -> bool:
    return subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True).returncode == 0


def _scaled(source: Path, scale: int, images: int, total: int) -> tuple[Path, int, int]:
    """A collection `scale` times larger: the original files, then copies made unique.

    Each copy of an image gets a JPEG comment segment (COM, after SOI) naming the copy, so every
    file has its own bytes and its own pages on the disk and in the page cache, as a real
    collection's do; the pixels, and so the work of checking and decoding, are the original's.
    """
    target = source.parent / f"{source.name}-x{scale}"
    marker = target / "collection.json"
    if not marker.exists():
        shutil.rmtree(target, ignore_errors=True)
        total = 0
        for copy in range(scale):
            for path in sorted(source.rglob("*.jpg")):
                data = path.read_bytes()
                if copy:
                    comment = f"beam-tfrecord benchmark copy {copy}".encode()
                    data = data[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + data[2:]
                dest = target / f"copy{copy}" / path.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                total += len(data)
        marker.write_text(json.dumps({"images": images * scale, "bytes": total}))
    meta = json.loads(marker.read_text())
    return target, meta["images"], meta["bytes"]


if __name__ == "__main__":
    sys.exit(main())
