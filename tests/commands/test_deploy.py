"""The scheduling files in deploy/: what can be checked without Airflow, Docker or a cloud.

The Airflow DAG must load without Airflow and hand the driver only flags it or Beam knows; the
Flex Template's parameters must be real flags of the build; its Dockerfile must name the driver.
Running them needs an Airflow environment, a Docker engine and a Google Cloud project, which
these tests do not have.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.commands import build as build_command

_REPO = Path(__file__).resolve().parents[2]
_DEPLOY = _REPO / "deploy"
_DRIVER = "pipelines/images_to_tfrecord.py"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="beam-tfrecord build")
    build_command.add_arguments(parser)
    return parser


def _as_flags(options: dict) -> list[str]:
    """Options as the Airflow Beam provider passes them: `--key=value`, `True` as a bare flag."""
    flags = []
    for key, value in options.items():
        if value is True:
            flags.append(f"--{key}")
        elif isinstance(value, list):
            flags.extend(f"--{key}={v}" for v in value)
        elif value not in (None, False):
            flags.append(f"--{key}={value}")
    return flags


@pytest.fixture(scope="module")
def dag_module():
    spec = importlib.util.spec_from_file_location(
        "build_dataset_dag", _DEPLOY / "airflow" / "build_dataset_dag.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dag_file_loads_without_airflow(dag_module):
    if importlib.util.find_spec("airflow") is None:
        assert dag_module.DAG is None
    else:  # with Airflow, the DAG is built
        assert dag_module.dag.dag_id == "beam_tfrecord_photos"
    assert dag_module.PY_FILE.endswith(Path(_DRIVER).name)
    assert (_REPO / _DRIVER).is_file()
    assert all("beam-tfrecord[gcp]" in r for r in dag_module.REQUIREMENTS)


def test_the_dag_passes_only_flags_the_build_or_beam_knows(dag_module):
    # Airflow's Beam provider adds the Dataflow job's labels (as --labels=KEY=VALUE), project,
    # region and job name to every Dataflow launch.
    airflow_adds = {
        "labels": ["airflow-version=v2-10-5"],
        "project": dag_module.PROJECT,
        "region": dag_module.REGION,
        "job_name": "beam-tfrecord-photos-0a1b2c3d",
    }
    flags = _as_flags({**dag_module.PIPELINE_OPTIONS, **airflow_adds})
    args, extra = _build_parser().parse_known_args(flags)
    assert args.input == [dag_module.PIPELINE_OPTIONS["input"]]
    assert args.output == dag_module.OUTPUT
    assert args.config == dag_module.PIPELINE_OPTIONS["config"]
    assert args.wait is False and args.overwrite is True
    # The operator's --labels is a Dataflow job label, not a label rule: it goes to Beam.
    rule, job_labels = build_command.split_labels(args.labels)
    assert rule is None and job_labels == ["airflow-version=v2-10-5"]
    extra = [*extra, *(f"--labels={label}" for label in job_labels)]
    beam = PipelineOptions(extra).get_all_options(drop_default=True)
    with_unknown = PipelineOptions(extra).get_all_options(
        drop_default=True, retain_unknown_options=True
    )
    unknown = set(with_unknown) - set(beam)
    assert not unknown, f"flags neither the build nor Beam knows: {unknown}"
    assert beam["extra_packages"] == [dag_module.WHEEL]
    assert beam["labels"] == ["airflow-version=v2-10-5"]
    assert beam["temp_location"].startswith("gs://")


def test_flex_template_parameters_are_flags_of_the_build():
    metadata = json.loads((_DEPLOY / "flex_template" / "metadata.json").read_text())
    parser = _build_parser()
    assert {"input", "output"} <= {p["name"] for p in metadata["parameters"]}
    for parameter in metadata["parameters"]:
        # The launcher passes each parameter as --name=value; a value its regexes allow.
        candidates = ["gs://b/x", "gs://b/x.yaml", "0", "decode", "jpeg", "pipeline", "pets"]
        value = next(
            v for v in candidates if all(re.match(r, v) for r in parameter.get("regexes", []))
        )
        args, extra = parser.parse_known_args([f"--{parameter['name']}={value}"])
        assert not extra, f"{parameter['name']} is not a flag of beam-tfrecord build"
        assert getattr(args, parameter["name"]) not in (None, [])
        assert parameter["label"] and parameter["helpText"]
        for regex in parameter.get("regexes", []):
            re.compile(regex)
        example = re.search(r"Example: (\S+)", parameter["helpText"])
        if example:
            assert all(re.match(r, example.group(1)) for r in parameter.get("regexes", []))
        assert parameter.get("isOptional", False) == (parameter["name"] not in ("input", "output"))


def test_the_dockerfile_runs_the_driver_and_installs_the_package():
    text = (_DEPLOY / "flex_template" / "Dockerfile").read_text()
    lines = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    env = dict(line.removeprefix("ENV ").split("=", 1) for line in lines if line.startswith("ENV "))
    workdir = next(line.split()[1] for line in lines if line.startswith("WORKDIR "))
    py_file = env["FLEX_TEMPLATE_PYTHON_PY_FILE"]
    assert py_file == f"{workdir}/{_DRIVER}"
    copied = {
        source
        for line in lines
        if line.startswith("COPY ") and "--from" not in line
        for source in line.split()[1:-1]
    }
    assert _DRIVER.split("/")[0] in copied and "beam_tfrecord" in copied
    assert {"pyproject.toml", "README.md"} <= copied  # what `pip install .` reads
    assert any(line.startswith("RUN pip install") and '".[gcp]"' in line for line in lines)
    # The launcher and the SDK container use one Python minor version.
    versions = set(
        re.findall(r"python3\.?(\d+)", " ".join(f for f in lines if f.startswith("FROM")))
    )
    assert len(versions) == 1, versions
    assert lines[-1] == 'ENTRYPOINT ["/opt/apache/beam/boot"]'
    # The driver file runs as a plain script, as the launcher runs it.
    driver = (_REPO / _DRIVER).read_text()
    assert 'if __name__ == "__main__":' in driver


def test_the_driver_runs_as_a_file_as_the_launcher_runs_it(tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, str(_REPO / _DRIVER), "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--no-wait" in done.stdout and "--input" in done.stdout


@pytest.mark.parametrize(
    ("values", "rule", "job_labels"),
    [
        (None, None, []),
        (["dir"], "dir", []),
        (["team=vision", "none"], "none", ["team=vision"]),
        (["regex:^(?P<label>[a-z]+)=\\d"], "regex:^(?P<label>[a-z]+)=\\d", []),
        (["dir", "regex:^(a|b)/"], "regex:^(a|b)/", []),  # the last rule wins, as for any flag
        (["Not=a-label"], "Not=a-label", []),  # not Dataflow's label syntax: a (bad) rule
        # A rule mistyped (`=` for `:`) is a rule, which the rule's check refuses, not a job
        # label that a DirectRunner would ignore while the build labelled by folder.
        (["regex=([a-z]+)\\d+"], "regex=([a-z]+)\\d+", []),
        (["team=vision", "dir=x"], "dir=x", ["team=vision"]),
    ],
)
def test_labels_split_into_the_label_rule_and_dataflow_job_labels(values, rule, job_labels):
    assert build_command.split_labels(values) == (rule, job_labels)
