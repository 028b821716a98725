"""The Dataflow job, built offline: DataflowRunner with --dry_run=True, paths on a local GCS emulator.

Beam's DataflowRunner builds the whole job (the pipeline graph Dataflow's Runner v2 runs, and the
job request around it) and, on a dry run, returns it without staging or submitting anything. These
tests inspect that job: our steps are there, the fusion breaks sit where the design puts them, no
side input is fed by a PCollection that grows with the number of images, and the job is far under
Dataflow's limits. They also run both entry points as a user would, and check that a dry run exits
0 having written nothing and read no manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

# The fixtures are imported for pytest to find them; tests ask for them by name.
from cloud_servers import ObjectStore, gcs_store, upload  # noqa: F401
from imagegen import make_collection

from beam_tfrecord.beam.pipeline import SubmittedBuild, build
from beam_tfrecord.config import BuildConfig, ConfigError

pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
pytest.importorskip("google.cloud.dataflow_v1beta3")

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[2]
# Dataflow's documented limits: a job's graph may be at most 10 MB, its JSON request 20 MB.
GRAPH_LIMIT = 10 * 1000 * 1000
REQUEST_LIMIT = 20 * 1000 * 1000
# The composite steps of ConvertImages, each a top-level step of the job.
OUR_STEPS = (
    "ListImages",
    "PlanImages",
    "PlanShards",
    "WriteShards",
    "WriteReport",
    "WriteManifest",
)
# Side inputs must come from PCollections whose size does not grow with the number of images:
# a combine's single result, or one element per shard or per report part (bounded, see
# benchmarks/README.md). Named by the step that produces them.
BOUNDED_SIDE_INPUTS = {
    "ConvertImages/PlanImages/Census": "the census: one element, the count and the class map",
    "ConvertImages/ListedCount": "one number",
    # Beam's CombineGlobally reads its own one-element result as a side input (for the default
    # of an empty input): the bytes of every planning bucket, and the report keys' quantiles.
    "ConvertImages/PlanShards/SizeOfBuckets": "one SplitStats per (split, planning bucket)",
    "ConvertImages/WriteReport/KeyQuantiles": "WriteReport.QUANTILES keys",
    "ConvertImages/PlanShards/SplitPlans": "one plan: per split, per planning bucket",
    "ConvertImages/ShardFiles": "one ShardResult per shard, without its class counts",
    "ConvertImages/ClassCounts": "per split, one count per class",
    "ConvertImages/WriteReport/Tally": "one tally of the report",
    "ConvertImages/WriteReport/PartBounds": "at most WriteReport.QUANTILES keys",
    "ConvertImages/WriteReport/WriteParts": "one (part, lines) pair per report part",
}


def _dataflow_args(bucket: str, *more: str) -> list[str]:
    return [
        "--runner=DataflowRunner",
        "--project=acc-project-1",
        "--region=us-central1",
        f"--temp_location={bucket}/tmp",
        "--dry_run=True",
        *more,
    ]


@pytest.fixture(scope="module")
def bucket(gcs_store: ObjectStore, tmp_path_factory) -> str:  # noqa: F811
    src = tmp_path_factory.mktemp("pets")
    make_collection(src, {"cat": 3, "dog": 3}, seed=5)
    url = gcs_store.new_bucket("acc")
    upload(src, f"{url}/pets")
    return url


@pytest.fixture(scope="module")
def dry_run(bucket) -> SubmittedBuild:
    config = BuildConfig.from_settings(
        dict(inputs=(f"{bucket}/pets/**",), output=f"{bucket}/out", resize="64")
    )
    return build(config, _dataflow_args(bucket))


def _pipeline(submitted: SubmittedBuild):
    return submitted.job.proto_pipeline


def _producers(pipeline) -> dict[str, str]:
    """The unique name of the leaf transform that produces each PCollection."""
    producers = {}
    for transform in pipeline.components.transforms.values():
        if transform.subtransforms:
            continue
        for pcoll in transform.outputs.values():
            producers[pcoll] = transform.unique_name
    return producers


def _side_inputs(pipeline) -> list[tuple[str, str]]:
    """(consuming transform, producing transform) for every side input of the job."""
    producers = _producers(pipeline)
    found = []
    for transform in pipeline.components.transforms.values():
        if transform.subtransforms or transform.spec.urn != "beam:transform:pardo:v1":
            continue
        from apache_beam.portability.api import beam_runner_api_pb2

        payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
        for tag in payload.side_inputs:
            found.append((transform.unique_name, producers[transform.inputs[tag]]))
    return found


def _enclosing(producer: str) -> str:
    """The step a leaf transform belongs to, as BOUNDED_SIDE_INPUTS names it."""
    for name in sorted(BOUNDED_SIDE_INPUTS, key=len, reverse=True):
        if producer == name or producer.startswith(name + "/"):
            return name
    return producer


def test_a_dry_run_builds_the_job_and_writes_nothing(dry_run, bucket):
    assert isinstance(dry_run, SubmittedBuild)
    assert dry_run.dry_run and dry_run.runner == "DataflowRunner" and dry_run.job_id is None
    assert dry_run.job is not None and dry_run.job.proto.name  # the Dataflow job request
    fs, path = fsspec.core.url_to_fs(f"{bucket}/out")
    fs.invalidate_cache()
    assert not fs.exists(f"{path}/manifest.json")
    assert not fs.exists(path) or fs.find(path) == []
    # Nothing was staged either: a dry run uploads no package or pipeline to temp_location.
    assert not fs.exists(f"{bucket.split('://')[1]}/tmp") or fs.find(f"{bucket}/tmp") == []


def test_the_job_holds_our_steps(dry_run):
    names = {t.unique_name for t in _pipeline(dry_run).components.transforms.values()}
    for step in OUR_STEPS:
        assert f"ConvertImages/{step}" in names, step
    assert "ConvertImages/WriteReport/WriteParts" in names
    assert "ConvertImages/WriteReport/Tally" in names


def test_fusion_breaks_sit_where_the_design_puts_them(dry_run):
    names = sorted(t.unique_name for t in _pipeline(dry_run).components.transforms.values())
    reshuffles = sorted({n for n in names if n.split("/")[-1] in ("Spread0", "Spread1", "Spread")})
    # Listing: the parts of each pattern go to whichever worker takes them, two levels deep.
    # Only the steps that read images before the shards are written spread the reads they make:
    # MeasureImages/Spread here (a resized build sizes its records), and --dedup's
    # HashImages/Spread.
    assert reshuffles == [
        "ConvertImages/ListImages/Spread0",
        "ConvertImages/ListImages/Spread1",
        "ConvertImages/MeasureImages/Spread",
    ]
    for name in reshuffles:
        assert any(n.startswith(name + "/") and "ReshufflePerKey" in n for n in names), name
    # Image bytes never cross a shuffle: the only GroupByKeys group metadata, by planning
    # bucket, by shard and by report part (and Beam's own inside Reshuffle and combines).
    groups = {
        n
        for n in names
        if n.split("/")[-1] in ("GroupBuckets", "GroupShards", "GroupParts", "GroupByUrl")
    }
    assert groups == {
        "ConvertImages/PlanShards/GroupBuckets",
        "ConvertImages/PlanShards/GroupShards",
        "ConvertImages/WriteReport/GroupParts",
    }


def test_no_side_input_grows_with_the_number_of_images(dry_run):
    side_inputs = _side_inputs(_pipeline(dry_run))
    assert side_inputs, "the job has side inputs; finding none means the check looks wrongly"
    producers = {_enclosing(producer) for _, producer in side_inputs}
    unbounded = producers - set(BOUNDED_SIDE_INPUTS)
    assert not unbounded, f"side inputs fed by growing PCollections: {sorted(unbounded)}"
    # In particular, the report reaches the manifest only as its tally and its part counts.
    consumers = {c for c, _ in side_inputs if c.startswith("ConvertImages/WriteManifest")}
    fed = {_enclosing(p) for c, p in side_inputs if c in consumers}
    assert fed == {
        "ConvertImages/ShardFiles",
        "ConvertImages/ClassCounts",
        "ConvertImages/WriteReport/Tally",
        "ConvertImages/WriteReport/WriteParts",
        "ConvertImages/PlanImages/Census",
    }


def test_the_job_is_far_under_dataflows_size_limits(dry_run):
    graph = _pipeline(dry_run).SerializeToString()
    assert dry_run.graph_bytes == len(graph)
    assert len(graph) < GRAPH_LIMIT / 10
    # The JSON request: the job, and the graph as Dataflow's JSON would carry it (base64, 4/3).
    request = len(dry_run.job.json().encode()) + len(graph) * 4 // 3
    assert request < REQUEST_LIMIT / 10


def test_dry_run_is_refused_by_runners_that_would_run_the_build(bucket):
    config = BuildConfig(inputs=(f"{bucket}/pets/**",), output=f"{bucket}/refused")
    with pytest.raises(ConfigError, match="dry_run"):
        build(config, ["--runner=DirectRunner", "--dry_run=True"])


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "entry",
    [
        [sys.executable, "-m", "beam_tfrecord.cli", "build"],
        [sys.executable, "-m", "pipelines.images_to_tfrecord"],
    ],
    ids=["beam-tfrecord-build", "pipelines.images_to_tfrecord"],
)
def test_both_entry_points_dry_run_exit_0_without_a_manifest(entry, bucket, dry_run, tmp_path):
    output = f"{bucket}/out-{entry[-1].replace('.', '-')}"
    done = _run(
        [
            *entry,
            "--input",
            f"{bucket}/pets",
            "--output",
            output,
            "--labels",
            "dir",
            "--resize",
            "64",
            *_dataflow_args(bucket),
        ],
        cwd=_REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Dry run: DataflowRunner built the job" in done.stdout
    # The job the tests above inspect: each entry point builds one of the same transforms.
    assert f"({dry_run.transforms} transforms, a " in done.stdout
    assert "did not submit it; nothing was written" in done.stdout
    assert "Traceback" not in done.stderr and "manifest.json" not in done.stderr
    fs, path = fsspec.core.url_to_fs(output)
    fs.invalidate_cache()
    assert not fs.exists(f"{path}/manifest.json")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--runner=DataflowRunner", "--dry_run=True"], r"DataflowRunner: .*Missing required "
         r"option: project\.; Missing required option: region\."),
        (["--extra_package=/nowhere/x.whl"], r"DataflowRunner: The file /nowhere/x\.whl cannot "
         r"be found"),
    ],
    ids=["missing-options", "missing-package"],
)  # fmt: skip
def test_a_job_dataflow_refuses_is_one_refusal_not_a_traceback(bucket, args, says):
    """DataflowRunner checks its options and stages its packages before it submits: what it
    refuses is a ConfigError (one line, exit 2, from the command), and nothing is written."""
    output = f"{bucket}/out-refused"
    config = BuildConfig(inputs=(f"{bucket}/pets/**",), output=output)
    full = args if args[0].startswith("--runner") else _dataflow_args(bucket, *args)
    with pytest.raises(ConfigError, match=says):
        build(config, full)
    fs, path = fsspec.core.url_to_fs(output)
    fs.invalidate_cache()
    assert not fs.exists(path)


def test_a_local_path_is_refused_for_dataflow(bucket, tmp_path):
    config = BuildConfig(inputs=(f"{bucket}/pets/**",), output=str(tmp_path / "out"))
    with pytest.raises(ConfigError, match=r"is a path on this machine, which DataflowRunner's"):
        build(config, _dataflow_args(bucket))
    assert not (tmp_path / "out").exists()


def test_a_template_launch_returns_without_reading_a_manifest(bucket):
    # With --template_location (how a Flex Template launches), DataflowRunner stages the job and
    # writes its request to the template file instead of submitting it; its result says DONE,
    # though nothing ran. --sdk_location=container: the SDK is in the workers' container, so
    # nothing is downloaded.
    output = f"{bucket}/out-template"
    config = BuildConfig(inputs=(f"{bucket}/pets/**",), output=output)
    args = [a for a in _dataflow_args(bucket) if not a.startswith("--dry_run")]
    template = f"{bucket}/templates/build.json"
    submitted = build(
        config, [*args, f"--template_location={template}", "--sdk_location=container"]
    )
    assert isinstance(submitted, SubmittedBuild)
    assert submitted.state == "TEMPLATE_WRITTEN" and not submitted.dry_run
    fs, _ = fsspec.core.url_to_fs(template)
    fs.invalidate_cache()
    request = fs.cat_file(template)
    job = json.loads(request)
    assert job["name"] and job["type"] == "JOB_TYPE_BATCH"
    # The request names the staged graph; the graph is what Runner v2 runs.
    staged = job["environment"]["sdkPipelineOptions"]["options"]["pipelineUrl"]
    assert fs.exists(staged) and fs.size(staged) == submitted.graph_bytes
    assert len(request) < REQUEST_LIMIT / 10 and submitted.graph_bytes < GRAPH_LIMIT / 10
    assert not fs.exists(f"{output}/manifest.json")
    # Nothing of the launching machine goes with the job: Beam would pickle its __main__ for a
    # service runner unless told not to.
    staged_files = [p.rsplit("/", 1)[-1] for p in fs.find(staged.rsplit("/", 1)[0])]
    assert staged_files and "pickled_main_session" not in staged_files
