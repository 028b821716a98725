"""What a new user meets first, through the command line as they run it (issue 31): each test
shows one promise that broke, with the command that showed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from imagegen import make_collection

_SCRIPT = Path(sys.executable).parent / "beam-tfrecord"
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "beam_tfrecord.cli"]


def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "shapes"
    make_collection(root, {"circle": 10, "square": 10, "triangle": 10}, seed=5, size=(16, 24))
    return root


def _claims(out: Path) -> list[str]:
    return [n for n in ("manifest.json", "labels.txt", "dataset_info.json") if (out / n).exists()]


# 4. A --classes name no input has fails the build, unless allowed.


def test_4_a_classes_typo_fails_the_build_and_keeps_the_hint(shapes, tmp_path):
    out = tmp_path / "out"
    args = ["build", "--input", str(shapes), "--output", str(out)]
    done = run(*args, "--classes", "circle,sqare,triangle", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _claims(out) == []
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "beam-tfrecord build: error: --classes names 1 class no input is labelled with: 'sqare'; "
        "nothing was published"
    ), line
    assert "--classes left out the label 'square' (10 inputs; --classes has 'sqare': a typo?)" in (
        line
    )
    assert "--allow-missing-classes" in line
    # Asked for, the same build publishes, keeping the shards the withheld run finished.
    allowed = run(*args, "--classes", "circle,sqare,triangle", "--resume", "--allow-missing-classes",
                  cwd=tmp_path)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert "resumed: kept 3 of 3 finished shards" in allowed.stdout
    assert "did you mean 'square'?" in allowed.stdout
    assert json.loads((out / "manifest.json").read_text())["config"]["allow_missing_classes"]
    # From a config file too, declared as every other setting is.
    config = tmp_path / "build.yaml"
    config.write_text(f"input: {shapes}\noutput: {tmp_path / 'yaml'}\nclasses: [circle, sqare]\n"
                      "allow_missing_classes: true\n")  # fmt: skip
    assert run("build", "--config", str(config), cwd=tmp_path).returncode == 0
