"""The Flink and Spark runners' own flags: taken by `build`, and their typos refused in words.

tests/engines/ runs builds with them on a real Flink cluster; these check the command line
alone, without one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from beam_tfrecord.beam.options import check_beam_args, runner_name

_REPO = Path(__file__).resolve().parents[2]

FLINK = [
    "--runner=FlinkRunner",
    "--flink_master=jobmanager:8081",
    "--flink_version=1.19",
    "--flink_job_server_jar=/opt/beam/job-server.jar",
    "--parallelism=4",
    "--environment_type=PROCESS",
    '--environment_config={"command":"/opt/apache/beam/boot"}',
    "--environment_cache_millis=60000",
]
SPARK = [
    "--runner=SparkRunner",
    "--spark_master_url=spark://master:7077",
    "--spark_version=3",
    "--spark_job_server_jar=/opt/beam/spark-job-server.jar",
    "--environment_type=EXTERNAL",
    "--environment_config=localhost:50000",
]
PORTABLE = [
    "--runner=PortableRunner",
    "--job_endpoint=localhost:8099",
    "--artifact_endpoint=localhost:8098",
    "--environment_type=LOOPBACK",
]


@pytest.mark.parametrize("flags", [FLINK, SPARK, PORTABLE], ids=["flink", "spark", "portable"])
def test_the_runners_own_flags_are_taken(flags):
    options = check_beam_args(flags, ())
    assert runner_name(options) == flags[0].split("=", 1)[1]
    assert options.environment_type == next(
        f.split("=", 1)[1] for f in flags if f.startswith("--environment_type=")
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "says"),
    [
        (
            "--flink_mastr=jobmanager:8081",
            "--flink_mastr: no such flag, of this tool or of Beam; did you mean --flink_master?",
        ),
        (
            "--spark_master_ur=spark://master:7077",
            "--spark_master_ur: no such flag, of this tool or of Beam; "
            "did you mean --spark_master_url?",
        ),
        (
            "--enviroment_type=PROCESS",
            "--enviroment_type: no such flag, of this tool or of Beam; "
            "did you mean --environment_type?",
        ),
    ],
)
def test_a_typo_in_a_runners_flag_is_refused_before_anything_is_written(flag, says, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "build", "--input",
         str(_REPO / "samples" / "fruits"), "--output", str(out), *FLINK[:2], flag],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"beam-tfrecord build: error: {says}"]
    assert not out.exists()


@pytest.mark.slow
def test_a_flink_version_beam_has_no_job_server_for_is_refused(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "build", "--input",
         str(_REPO / "samples" / "fruits"), "--output", str(out), *FLINK[:2],
         "--flink_version=0.9"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("beam-tfrecord build: error: --flink_version: invalid choice: '0.9'")
    assert not out.exists()
