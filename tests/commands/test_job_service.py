"""A portable runner's job service that is not there, or is no job service: the build is
refused in one line naming the address, and leaves no output folder behind.

Beam's own wait for a --job_endpoint is --job_server_timeout (300 s), silent; a server that
answers but is not a job service ended in a gRPC traceback, after the output folder was made.
"""

from __future__ import annotations

import socket
from concurrent import futures

import grpc
import pytest

from beam_tfrecord.beam.options import FlagError, check_job_service
from beam_tfrecord.commands.cli import main


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (it was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_refused_at_once_and_no_folder_is_made(tmp_path, capsys, closed_port):
    out = tmp_path / "out"
    flags = ["--runner=PortableRunner", f"--job_endpoint=127.0.0.1:{closed_port}"]
    assert main(["build", "--input", "samples/fruits", "--output", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"beam-tfrecord build: error: --job_endpoint: no job service answers at "
        f"'127.0.0.1:{closed_port}' (connection refused); start it first (the Flink or Spark "
        "job server), or check the address\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("localhost", "'localhost' is not an address (host:port"),
        ("localhost:http", "'localhost:http' is not an address"),
        ("no-such-host.invalid:8099", "(no host is called 'no-such-host.invalid')"),
    ],
)
def test_an_address_that_cannot_be_reached_is_named(endpoint, says):
    with pytest.raises(FlagError, match=r"^--job_endpoint: ") as refused:
        check_job_service("PortableRunner", {"job_endpoint": endpoint})
    assert says in str(refused.value)


def test_other_runners_and_the_embedded_job_service_are_not_looked_for(closed_port):
    check_job_service("PortableRunner", {"job_endpoint": "embed"})
    check_job_service("FlinkRunner", {"job_endpoint": f"127.0.0.1:{closed_port}"})
    check_job_service("DirectRunner", {})


@pytest.mark.slow
def test_a_server_that_is_no_job_service_refuses_the_job_in_one_line(tmp_path, capsys):
    """A real gRPC server with no services: every call is UNIMPLEMENTED, as from a wrong port
    (Beam asks it for the pipeline's options five times, a second apart)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        out = tmp_path / "out"
        flags = ["--runner=PortableRunner", f"--job_endpoint=127.0.0.1:{port}"]
        assert main(["build", "--input", "samples/fruits", "--output", str(out), *flags]) == 2
    finally:
        server.stop(None)
    err = capsys.readouterr().err
    assert err.startswith(
        f"beam-tfrecord build: error: --runner: PortableRunner: the job service at "
        f"'127.0.0.1:{port}' refused the job (UNIMPLEMENTED): "
    )
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
