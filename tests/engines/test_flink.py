"""The build on Apache Flink: a JobManager and two TaskManagers, each a process (conftest.py).

Each build here runs on Flink through Beam's FlinkRunner and is compared, file by file and byte
by byte, with the same build on the DirectRunner of the test suite's own Beam: Flink's run
uses another Beam release (engines/flink.py says why), so this also holds across the two.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engines.flink import BEAM_VERSION, REPO, FlinkCluster
from hostile_images import hostile_corpus
from imagegen import make_collection

from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.storage import is_temporary

pytestmark = [pytest.mark.engine, pytest.mark.slow]

_BUILD_SECONDS = 900  # a bound on a stuck job, not a speed goal
# What differs between two runs of one build by nature: when, with which versions, from where.
_RUN_FIELDS = ("created", "versions")
_PLACE_SETTINGS = ("input", "inputs", "output", "overwrite")
_DOC = REPO / "docs" / "clusters" / "flink.md"


def _cli(python: Path | str, args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "beam_tfrecord.cli", "build", *args],
        capture_output=True,
        text=True,
        timeout=_BUILD_SECONDS,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


def _direct(args: list[str], out: Path) -> Path:
    done = _cli(sys.executable, [*args, "--output", str(out)], cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _on_flink(flink: FlinkCluster, args: list[str], out: Path, **kwargs):
    return _cli(
        flink.python, [*args, "--output", str(out), *flink.flags()], env=flink.env(), **kwargs
    )


def _files(out: Path) -> dict[str, bytes]:
    """Every file below `out`, hidden ones too, by relative path; the manifest without what
    differs between two runs of one build by nature."""
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    manifest = json.loads(files.pop("manifest.json"))
    for key in _RUN_FIELDS:
        manifest.pop(key)
    for key in _PLACE_SETTINGS:
        manifest["config"].pop(key, None)
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def _assert_same_build(flink_out: Path, direct_out: Path) -> dict:
    """The two builds hold the same files with the same bytes; returns Flink's manifest."""
    ours, theirs = _files(flink_out), _files(direct_out)
    assert sorted(ours) == sorted(theirs), "files differ (strays, or missing)"
    different = [name for name in ours if ours[name] != theirs[name]]
    assert not different, f"bytes differ in {different}"
    return json.loads((flink_out / "manifest.json").read_text())


def _assert_books_balance(out: Path, manifest: dict) -> None:
    """Every listed input written once or reported, no record twice."""
    inputs = manifest["inputs"]
    assert inputs["unaccounted"] == 0
    assert inputs["listed"] == inputs["written"] + inputs["skipped"]
    records = [
        hashlib.sha256(record).digest()
        for shard in manifest["shards"]
        for record in read_records(str(out / shard["file"]))
    ]
    assert len(records) == inputs["written"] == sum(s["examples"] for s in manifest["shards"])
    assert len(set(records)) == len(records), "a record was written twice"
    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    assert sum(entry["action"] == "skipped" for entry in report) == inputs["skipped"]
    assert sum(entry["action"] == "modified" for entry in report) == inputs["modified"]


def _documented_command(flink: FlinkCluster, out: Path) -> list[str]:
    """docs/clusters/flink.md's command for an existing cluster, its placeholders filled in
    with this cluster's, and the job server jar made here (the registry has no published one)."""
    section = _DOC.read_text().split("## On an existing cluster", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    argv = shlex.split(block.replace("\\\n", " "))
    places = {
        "JOBMANAGER:8081": flink.master,
        '{"command":"/opt/apache/beam/boot"}': json.dumps(
            {"command": str(flink.boot)}, separators=(",", ":")
        ),
        "/shared/datasets/fruits": str(out),
    }
    assert argv[0] == "beam-tfrecord" and set(places) <= set(argv), argv
    args = [places.get(arg, arg) for arg in argv[1:]]
    return [str(flink.python), "-m", "beam_tfrecord.cli", *args, *flink.job_server_flags()]


def test_the_documented_command_builds_the_sample_byte_identical_to_the_direct_runner(
    flink, tmp_path
):
    # The README's main job, its config's paths relative to the repository as written there:
    # the TaskManagers run elsewhere, so only paths made whole before submission reach them.
    out = tmp_path / "flink" / "fruits"
    done = subprocess.run(
        _documented_command(flink, out),
        capture_output=True,
        text=True,
        timeout=_BUILD_SECONDS,
        stdin=subprocess.DEVNULL,
        env=flink.env(),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Built 'fruits'" in done.stdout
    direct = _direct(["--config", "configs/sample.yaml"], tmp_path / "direct" / "fruits")
    manifest = _assert_same_build(out, direct)
    assert manifest["versions"]["apache-beam"] == BEAM_VERSION
    assert manifest["inputs"]["written"] == 45
    _assert_books_balance(out, manifest)


def _hostile_mix(root: Path) -> Path:
    """The sample's fruit and the hostile corpus, each case in a folder of its own name."""
    src = root / "mix"
    shutil.copytree(REPO / "samples" / "fruits", src)
    for case in hostile_corpus():
        folder = src / case.name
        folder.mkdir(exist_ok=True)
        (folder / Path(case.filename).name).write_bytes(case.data)
    return src


# The library's build, in the engine's virtualenv: its result carries the runner's counters.
_LIBRARY_BUILD = """
import json, sys
from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig
result = build(BuildConfig.from_settings(json.loads(sys.argv[1])), json.loads(sys.argv[2]))
print(json.dumps(result.counters))
"""


def test_a_mix_with_hostile_images_on_flink_is_byte_identical_and_counted(flink, tmp_path):
    src = _hostile_mix(tmp_path)
    direct = _direct(
        ["--input", str(src), "--splits", "train=0.5,test=0.5", "--seed", "7"],
        tmp_path / "direct" / "mix",
    )
    out = tmp_path / "flink" / "mix"
    settings = {"input": [str(src)], "output": str(out), "splits": {"train": 0.5, "test": 0.5}}
    done = subprocess.run(
        [
            str(flink.python),
            "-c",
            _LIBRARY_BUILD,
            json.dumps({**settings, "seed": 7}),
            json.dumps(flink.flags()),
        ],
        capture_output=True,
        text=True,
        timeout=_BUILD_SECONDS,
        env=flink.env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counters = json.loads(done.stdout.strip().splitlines()[-1])
    manifest = _assert_same_build(out, direct)
    _assert_books_balance(out, manifest)
    inputs = manifest["inputs"]
    assert inputs["skipped"] >= 10, "the hostile corpus has a dozen files no reader takes"
    # Flink's metrics, read back through Beam's job service.
    assert counters["images_listed"] == inputs["listed"]
    assert counters["images_written"] == inputs["written"]
    assert counters["images_skipped"] == inputs["skipped"]
    assert counters["shards_written"] == len(manifest["shards"])


def _temporary_shard(out: Path) -> str | None:
    """A shard file being written: hidden, under a temporary name (the report's parts folder is
    one too, and is not a shard)."""
    if not out.is_dir():
        return None
    for path in out.iterdir():
        if path.is_file() and is_temporary(path.name) and ".tfrecord-" in path.name:
            return path.name
    return None


def test_a_taskmanager_killed_while_shards_are_written_leaves_the_build_whole(flink, tmp_path):
    # Photos large enough that each shard takes a few seconds to check and write, in shards
    # of at most 4 MB: several shards on each TaskManager, one of them being written at the
    # kill.
    src = tmp_path / "photos"
    make_collection(src, {"cat": 70, "dog": 70}, seed=11, size=(500, 800))
    args = [
        "--input",
        str(src),
        "--seed",
        "3",
        "--min-shard-size",
        "2MB",
        "--max-shard-size",
        "4MB",
    ]
    direct = _direct(args, tmp_path / "direct" / "photos")
    out = tmp_path / "flink" / "photos"
    build = subprocess.Popen(
        [
            str(flink.python),
            "-m",
            "beam_tfrecord.cli",
            "build",
            *args,
            "--output",
            str(out),
            *flink.flags(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=flink.env(),
    )
    try:
        deadline = time.monotonic() + _BUILD_SECONDS
        while (written := _temporary_shard(out)) is None:
            assert build.poll() is None, build.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no shard was ever being written"
            time.sleep(0.05)
        job = flink.latest_job()
        flink.kill_taskmanager(0)
        stdout, stderr = build.communicate(timeout=_BUILD_SECONDS)
    finally:
        if build.poll() is None:
            build.kill()
        # The next test finds two TaskManagers again.
        flink.add_taskmanager()
        flink.wait_for_taskmanagers(2)
    assert build.returncode == 0, stderr[-3000:]
    assert "Built 'photos'" in stdout
    # Flink saw the TaskManager go and ran the job again: the same job, not a new submission.
    history = flink.rest(f"/jobs/{job}/exceptions")["exceptionHistory"]["entries"]
    assert history, f"job {job} recorded no failure"
    assert flink.rest(f"/jobs/{job}")["state"] == "FINISHED"
    manifest = _assert_same_build(out, direct)
    _assert_books_balance(out, manifest)
    assert len(manifest["shards"]) >= 4, f"{written} was one of too few shards"
