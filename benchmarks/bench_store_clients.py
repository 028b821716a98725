"""The CPU a read of an object costs through gcsfs, through aiohttp alone, and through Google's client.

    python benchmarks/bench_store_clients.py --images 1500
    python benchmarks/bench_store_clients.py --store s3 --images 600 --delay 20 --connections 64

Uploads `--images` of the bench_build.py JPEGs (~100 KB) to fake-gcs-server behind
tests/latency_proxy.py (no delay), then reads every one of them three times with each client, on
CPU 0 while the server and the proxy run on CPU 1, and prints the wall time and the CPU time per
read of this process, less the proxy's thread (which runs in it, on CPU 1, and costs some 200 us
a read of its own):

- `remote.fetch_in_order`, 64 deep: a build's reads, as its shard writer makes them;
- gcsfs's `_cat_file` alone (what `fetch_in_order` awaits), 64 at once on fsspec's event loop;
- the same GETs (`/download/storage/v1/b/{bucket}/o/{key}?alt=media`) sent with one aiohttp
  session, 64 at once: the floor under gcsfs, the HTTP client it runs on;
- google-cloud-storage's `Blob.download_as_bytes` on 16 threads (it is a blocking client);
- the same GETs written and read on 64 kept-alive asyncio connections, HTTP/1.1 by hand: what
  the request costs with no client library at all.

With `--direct` the gs clients reach the server itself, not through the proxy, which hands a
body on in the pieces it reads: more wake-ups for the client than the server's own writes.

The build stays on fsspec's interfaces unless gcsfs costs much more than the floor.

With `--store s3` the store is moto's server and the contenders are fetch_in_order (a GET
signed by `beam_tfrecord.s3_get`, sent with aiohttp) and s3fs's `_cat_file` (botocore's client);
`--connections` sets the connection cap of both (botocore's `max_pool_connections`: s3fs's 10
and s3_get's 64 unless set). Each line also gives the server's CPU per read (on CPU 1), the requests most
in flight, and `--delay` holds each request back that many ms at the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_bucket import _stat_cpu, _Store  # noqa: E402
from collection import ensure_collection  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "bench-data")
    parser.add_argument("--store", choices=("gs", "s3"), default="gs")
    parser.add_argument("--delay", type=float, default=0, help="ms per request at the proxy")
    parser.add_argument("--connections", type=int, help="s3fs's connection cap")
    parser.add_argument("--direct", action="store_true", help="gs: reach the server, not the proxy")
    args = parser.parse_args(argv)
    source = args.data / "c3000"
    ensure_collection(source, 3000)
    if args.connections:
        import fsspec.config

        s3 = fsspec.config.conf.setdefault("s3", {})
        s3.setdefault("config_kwargs", {})["max_pool_connections"] = args.connections
    os.sched_setaffinity(0, {1})  # the server (started now) and the proxy's thread
    store = _Store(args.store, Path(tempfile.mkdtemp()))
    try:
        files = sorted(source.rglob("*.jpg"))[: args.images]
        bucket = store.bucket("reads")
        store.fs.pipe(
            {f"{bucket}/{p.relative_to(source).as_posix()}": p.read_bytes() for p in files}
        )
        keys = [p.relative_to(source).as_posix() for p in files]
        os.sched_setaffinity(0, {0})  # the clients, from now on
        store.proxy.delay = args.delay / 1000
        endpoint, fs = store.proxy.url, store.fs
        if args.direct and args.store == "gs":
            import fsspec

            endpoint = f"http://127.0.0.1:{store.proxy.target_port}"
            os.environ["STORAGE_EMULATOR_HOST"] = endpoint
            fsspec.get_filesystem_class("gs").clear_instance_cache()
            fs = fsspec.filesystem("gs")
        contenders = {
            "fetch_in_order, 64 deep": lambda: _fetch_in_order(args.store, keys),
            f"{type(fs).__name__} _cat_file, 64 at once": lambda: _cat_files(fs, keys),
        }
        if args.store == "gs":
            contenders["aiohttp alone, 64 at once"] = lambda: asyncio.run(_aiohttp(endpoint, keys))
            contenders["google-cloud-storage, 16 threads"] = lambda: _google(endpoint, keys)
            contenders["HTTP/1.1 by hand, 64 connections"] = lambda: asyncio.run(
                _by_hand(endpoint, keys)
            )
        for name, read in contenders.items():
            for _ in range(3):
                proxy, both = _thread_cpu(store.proxy.native_id), store.cpu()
                store.proxy.reset_counts()
                wall, cpu = time.perf_counter(), time.process_time()
                total = read()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                proxy = _thread_cpu(store.proxy.native_id) - proxy
                server = store.cpu() - both - proxy
                print(
                    f"{name}: {len(keys)} reads, {total / 1e6:.0f} MB, {wall:.2f} s, "
                    f"{(cpu - proxy) / len(keys) * 1e6:.0f} us CPU per read "
                    f"(server {server / len(keys) * 1e6:.0f} us, proxy "
                    f"{proxy / len(keys) * 1e6:.0f} us), at most {store.proxy.max_in_flight} "
                    "in flight",
                    flush=True,
                )
    finally:
        store.close()
    return 0


def _thread_cpu(native_id: int) -> float:
    return _stat_cpu(f"/proc/self/task/{native_id}/stat")


def _fetch_in_order(protocol: str, keys: list[str]) -> int:
    from beam_tfrecord.remote import fetch_in_order

    items = ((key, f"{protocol}://reads/{key}", 100_000) for key in keys)
    return sum(len(data) for _, data in fetch_in_order(items, depth=64))


def _cat_files(fs, keys: list[str]) -> int:
    from fsspec.asyn import sync

    from beam_tfrecord.storage import whole_read_options

    options = whole_read_options(fs)

    async def all_of_them() -> int:
        limit = asyncio.Semaphore(64)

        async def one(key: str) -> int:
            async with limit:
                return len(await fs._cat_file(f"reads/{key}", **options))

        return sum(await asyncio.gather(*map(one, keys)))

    return sync(fs.loop, all_of_them)


async def _aiohttp(endpoint: str, keys: list[str]) -> int:
    import aiohttp

    limit = asyncio.Semaphore(64)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:

        async def one(key: str) -> int:
            url = f"{endpoint}/download/storage/v1/b/reads/o/{urllib.parse.quote(key, safe='')}"
            async with limit, session.get(url, params={"alt": "media"}) as answer:
                return len(await answer.read())

        return sum(await asyncio.gather(*map(one, keys)))


def _google(endpoint: str, keys: list[str]) -> int:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="bench",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoint},
    )
    bucket = client.bucket("reads")
    with ThreadPoolExecutor(16) as threads:
        return sum(threads.map(lambda key: len(bucket.blob(key).download_as_bytes()), keys))


async def _by_hand(endpoint: str, keys: list[str]) -> int:
    """The GETs on 64 kept-alive connections, written and parsed here: no client library."""
    parts = urllib.parse.urlsplit(endpoint)
    connections: asyncio.Queue = asyncio.Queue()
    for _ in range(64):
        connections.put_nowait(
            await asyncio.open_connection(parts.hostname, parts.port, limit=1 << 20)
        )

    async def one(key: str) -> int:
        reader, writer = await connections.get()
        try:
            path = f"/download/storage/v1/b/reads/o/{urllib.parse.quote(key, safe='')}?alt=media"
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise OSError(f"{key}: {head.splitlines()[0]!r}")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            return len(await reader.readexactly(length))
        finally:
            connections.put_nowait((reader, writer))

    try:
        return sum(await asyncio.gather(*map(one, keys)))
    finally:
        while not connections.empty():
            connections.get_nowait()[1].close()


if __name__ == "__main__":
    sys.exit(main())
