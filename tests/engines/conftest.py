"""The engine tests' Flink cluster: made and started once per run, for every test under here."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from engines.flink import FlinkCluster, beam_python, flink_home, job_server_jar


@pytest.fixture(scope="session")
def flink(tmp_path_factory) -> Iterator[FlinkCluster]:
    """A JobManager and two TaskManagers on localhost. Without Java or Maven the tests skip,
    except under CI, where a skip would hide a machine that cannot run them."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        message = f"the engine tests need {' and '.join(missing)} on PATH"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    cluster = FlinkCluster(
        tmp_path_factory.mktemp("flink"), beam_python(), flink_home(), job_server_jar()
    )
    try:
        cluster.start(taskmanagers=2)
        yield cluster
    finally:
        cluster.stop()
