"""The installed wheel, run by separate worker processes, builds exactly what the source tree builds.

Cloud workers get this package the Beam way: a wheel passed with `--extra_package`, installed on
each worker. This test builds that wheel, installs it in a clean virtual environment, and runs a
build there under the DirectRunner's multi-process mode, whose workers are separate Python
processes that share nothing with the launcher but the pickled pipeline, as on Dataflow. The
DirectRunner stages nothing: its workers use the virtual environment the wheel is installed in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from imagegen import make_collection

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[1]
CLASSES = {"cat": 24, "dog": 20, "fox": 16}
SEED = 7
MIN, MAX = 40_000, 120_000
# What a Dataflow launch passes, minus the cloud: separate worker processes, no main session.
WORKER_FLAGS = [
    "--runner=DirectRunner",
    "--direct_num_workers=2",
    "--direct_running_mode=multi_processing",
    "--no_save_main_session",
]
# Only the source files a wheel is built from; nothing a concurrent run may be writing.
_NOT_SOURCES = shutil.ignore_patterns(
    ".*", "__pycache__", "*.egg-info", "build", "dist", "out", "tests", "benchmarks", "samples"
)

# Runs in the clean environment's Python: where that Python and its workers import us from.
_PROBE = textwrap.dedent(
    """
    import json, os, sys

    import apache_beam as beam
    import beam_tfrecord


    def where(_):
        import json, os

        import beam_tfrecord

        return json.dumps([os.getpid(), beam_tfrecord.__file__])


    with beam.Pipeline(argv=sys.argv[2:]) as p:
        _ = (
            p
            | beam.Create(range(16))
            | beam.Reshuffle()
            | beam.Map(where)
            | beam.io.WriteToText(sys.argv[1], shard_name_template="")
        )
    print(json.dumps([os.getpid(), beam_tfrecord.__file__]))
    """
)


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a copy of the sources (pip builds in the source folder)."""
    work = tmp_path_factory.mktemp("wheel")
    source, dist = work / "src", work / "dist"
    shutil.copytree(_REPO, source, ignore=_NOT_SOURCES)
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q"]
    _run([*pip_wheel, "-w", str(dist), str(source)], work, dict(os.environ))
    (found,) = dist.glob("beam_tfrecord-*.whl")
    return found


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A new virtual environment holding the wheel and its dependencies, and nothing of ours."""
    root = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", str(root)], root.parent, dict(os.environ))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    }
    env["VIRTUAL_ENV"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    _run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], root, env)
    return root, env


def _shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if ".tfrecord-" in p.name}


def test_the_wheel_carries_the_package_and_its_data(wheel):
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {
        p.relative_to(_REPO).as_posix()
        for p in (_REPO / "beam_tfrecord").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert sources <= names, sources - names
    assert not {n for n in names if n.startswith(("tests/", "benchmarks/", "pipelines/"))}


def test_workers_import_the_installed_wheel_not_the_source_tree(venv, tmp_path):
    root, env = venv
    (tmp_path / "probe.py").write_text(_PROBE)
    found = tmp_path / "workers.jsonl"
    out = _run([str(root / "bin" / "python"), "probe.py", str(found), *WORKER_FLAGS], tmp_path, env)
    launcher_pid, launcher_file = json.loads(out.splitlines()[-1])
    workers = {tuple(json.loads(line)) for line in found.read_text().splitlines()}
    site = next((root / "lib").glob("python3*/site-packages"))
    assert Path(launcher_file).is_relative_to(site), launcher_file
    assert workers
    for pid, file in workers:
        assert pid != launcher_pid, "elements are processed in separate worker processes"
        assert Path(file).is_relative_to(site), file


def test_installed_wheel_on_worker_processes_writes_the_same_bytes(venv, wheel, tmp_path):
    root, env = venv
    src = tmp_path / "images"
    make_collection(src, CLASSES, seed=2)
    here = tmp_path / "here" / "pets"
    build(
        BuildConfig(
            inputs=(f"{src}/**",), output=str(here), min_shard_size=MIN, max_shard_size=MAX,
            seed=SEED,
        ),
        [],
    )  # fmt: skip

    there = tmp_path / "there" / "pets"
    launcher_dir = tmp_path / "elsewhere"  # not the repository, so nothing imports from it
    launcher_dir.mkdir()
    _run(
        [
            str(root / "bin" / "beam-tfrecord"), "build",
            "--input", f"{src}/**", "--output", str(there),
            "--min-shard-size", str(MIN), "--max-shard-size", str(MAX), "--seed", str(SEED),
            *WORKER_FLAGS, "--extra_package", str(wheel),
        ],
        launcher_dir,
        env,
    )  # fmt: skip

    expected = _shards(here)
    assert len(expected) >= 3, "several shards, so that several workers write"
    assert _shards(there) == expected
    manifest = json.loads((there / "manifest.json").read_text())
    assert manifest["inputs"]["written"] == sum(CLASSES.values())
