"""`--no-wait`: the command submits the job, prints how to check it later, and exits 0.

A real asynchronous runner, as on a cluster: Beam's job service and an SDK worker pool, each a
process of its own on 127.0.0.1, and the command submitting to them with PortableRunner. The job
outlives the command that submitted it; the build is checked afterwards with `verify`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from imagegen import make_collection
from local_ports import free_port, wait_for_port

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[2]
_HOST = "127.0.0.1"
_START_SECONDS = 60
_BUILD_SECONDS = 240  # a bound on a stuck job, not a speed goal


def _env() -> dict[str, str]:
    # The worker pool starts SDK workers as `python`: this environment's, which has the package.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(_REPO)}


@pytest.fixture(scope="module")
def job_service(tmp_path_factory) -> Iterator[list[str]]:
    """Beam's job service and a worker pool; yields the flags that submit to them."""
    logs = tmp_path_factory.mktemp("job-service")
    jobs, workers = free_port(), free_port()
    commands = {
        "jobs": [
            sys.executable,
            "-m",
            "apache_beam.runners.portability.local_job_service_main",
            f"--port={jobs}",
        ],
        "workers": [
            sys.executable,
            "-m",
            "apache_beam.runners.worker.worker_pool_main",
            f"--service_port={workers}",
        ],
    }
    processes = []
    try:
        for (name, command), port in zip(commands.items(), (jobs, workers), strict=True):
            log = logs / f"{name}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=logs,
                    env=_env(),
                )
            processes.append(process)
            wait_for_port(_HOST, port, process, log, seconds=_START_SECONDS)
        yield [
            "--runner=PortableRunner",
            f"--job_endpoint={_HOST}:{jobs}",
            "--environment_type=EXTERNAL",
            f"--environment_config={_HOST}:{workers}",
        ]
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.mark.parametrize(
    "entry",
    [
        [sys.executable, "-m", "beam_tfrecord.cli", "build"],
        [sys.executable, "-m", "pipelines.images_to_tfrecord"],
    ],
    ids=["beam-tfrecord-build", "pipelines.images_to_tfrecord"],
)
def test_no_wait_exits_0_with_the_job_running_and_the_build_verifies_later(
    entry, job_service, tmp_path
):
    src = tmp_path / "src"
    make_collection(src, {"cat": 4, "dog": 4}, seed=3)
    out = tmp_path / "out"
    done = subprocess.run(
        [
            *entry,
            "--input",
            str(src),
            "--output",
            str(out),
            "--seed",
            "2",
            "--no-wait",
            *job_service,
        ],
        cwd=_REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=_BUILD_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Submitted 'out' to PortableRunner" in done.stdout
    # The job service's id, for a scheduler to follow the job by (Beam's portable result has
    # no job_id() to ask).
    assert re.search(r"Submitted 'out' to PortableRunner: job \S+ \(", done.stdout), done.stdout
    assert f"beam-tfrecord verify {out}" in done.stdout
    # The command printed no summary: it read no manifest, whether or not the job had ended.
    assert "Built 'out'" not in done.stdout
    assert "Traceback" not in done.stderr

    deadline = time.monotonic() + _BUILD_SECONDS
    while not (out / "manifest.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["written"] == manifest["inputs"]["listed"] == 8
    verify = subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "verify", str(out)],
        cwd=_REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=_BUILD_SECONDS,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "0 DAMAGED" in verify.stdout
