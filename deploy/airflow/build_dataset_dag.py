"""An Airflow DAG that rebuilds a TFRecord dataset on Dataflow every week, then verifies it.

It runs `pipelines/images_to_tfrecord.py` with the Apache Beam provider's
BeamRunPythonPipelineOperator: the operator makes a virtual environment with the beam-tfrecord
wheel (and Beam's gcp extra), runs the driver there with `--runner=DataflowRunner`, finds the job
by the id Beam logs, and waits for the job through the Dataflow API. The driver is given
`--no-wait`, so it exits once the job is submitted instead of holding a process for the whole
build. A second task runs `beam-tfrecord verify` on the output.

Needs apache-airflow-providers-apache-beam and apache-airflow-providers-google. Edit the
settings below; on Cloud Composer, files copied to the environment bucket's `data/` folder are
at /home/airflow/gcs/data/ on every Airflow worker.
"""

from __future__ import annotations

import datetime

# Where things are. The driver may be on GCS (the operator downloads it); the wheel must be a
# local path on the Airflow workers, for pip, and is also staged for the Dataflow workers.
PROJECT = "my-project"
REGION = "us-central1"
BUCKET = "gs://my-bucket"
PY_FILE = f"{BUCKET}/beam-tfrecord/images_to_tfrecord.py"  # pipelines/images_to_tfrecord.py
WHEEL = "/home/airflow/gcs/data/beam_tfrecord-0.1.0-py3-none-any.whl"
OUTPUT = BUCKET + "/datasets/photos-{{ ds_nodash }}"

# The build's flags (`beam-tfrecord build --help`) and Beam's, as the operator passes them:
# `{"flag": value}` becomes `--flag=value`, and `True` a bare `--flag`. `--labels` is left out
# on purpose: on Dataflow the operator adds its own `labels` (Dataflow job labels) and would
# replace ours; keep the label rule in the YAML file given by `config` instead.
PIPELINE_OPTIONS = {
    "config": f"{BUCKET}/beam-tfrecord/photos.yaml",
    "input": f"{BUCKET}/photos/**",
    "output": OUTPUT,
    "seed": "0",
    "overwrite": True,
    "no-wait": True,
    "temp_location": f"{BUCKET}/tmp",
    "extra_package": WHEEL,
}
REQUIREMENTS = [f"beam-tfrecord[gcp] @ file://{WHEEL}"]


def verify_build(output: str) -> None:
    """Runs `beam-tfrecord verify` on a finished build; fails the task on any damage."""
    from beam_tfrecord.commands.cli import main

    status = main(["verify", output])
    if status:
        raise RuntimeError(f"beam-tfrecord verify {output} exited with status {status}")


try:
    from airflow import DAG
    from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
    from airflow.providers.google.cloud.operators.dataflow import DataflowConfiguration

    try:
        from airflow.providers.standard.operators.python import PythonVirtualenvOperator
    except ImportError:  # Airflow 2
        from airflow.operators.python import PythonVirtualenvOperator
except ImportError:  # read without Airflow (tests, linters): the settings above only
    DAG = None

if DAG is not None:
    with DAG(
        dag_id="beam_tfrecord_photos",
        schedule="@weekly",
        start_date=datetime.datetime(2026, 1, 1),
        catchup=False,
        tags=["beam-tfrecord", "dataflow"],
    ) as dag:
        build = BeamRunPythonPipelineOperator(
            task_id="build",
            runner="DataflowRunner",
            py_file=PY_FILE,
            pipeline_options=PIPELINE_OPTIONS,
            py_requirements=REQUIREMENTS,
            py_interpreter="python3",
            py_system_site_packages=False,
            dataflow_config=DataflowConfiguration(
                job_name="beam-tfrecord-photos",
                project_id=PROJECT,
                location=REGION,
                wait_until_finished=True,
            ),
        )
        verify = PythonVirtualenvOperator(
            task_id="verify",
            python_callable=verify_build,
            op_kwargs={"output": OUTPUT},
            requirements=REQUIREMENTS,
            system_site_packages=False,
        )
        build >> verify
