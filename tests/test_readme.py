"""The README's Use section, run as written, after its set-up command."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[1]


def use_section() -> str:
    """The shell block of the README's `## Use` section."""
    readme = (_REPO / "README.md").read_text()
    section = readme.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def setup_build_command() -> str:
    """The part of the set-up command that runs after the virtual environment is made."""
    readme = (_REPO / "README.md").read_text()
    section = readme.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    first = re.search(r"```bash\n(.*?)```", section, re.S).group(1).strip().splitlines()[0]
    return first.split(" && ")[-1]


def test_use_section_starts_by_activating_the_environment():
    assert use_section().splitlines()[0] == "source .venv/bin/activate"


def test_use_section_runs_as_written(tmp_path):
    if not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip("the tests do not run in a virtual environment")
    # A checkout's files the commands read, and the environment the set-up command made.
    for name in ("samples", "configs", "pipelines"):
        shutil.copytree(_REPO / name, tmp_path / name)
    (tmp_path / ".venv").symlink_to(sys.prefix)
    script = "set -euo pipefail\n" + setup_build_command() + "\n" + use_section()
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},  # no venv on PATH until activated
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for folder in ("out/fruits", "out/fruits-seed3", "out/fruits-v2"):
        assert (tmp_path / folder / "manifest.json").is_file(), folder
    assert "0 DAMAGED" in done.stdout.splitlines()[-1]
    assert "record 1, byte offset" in done.stdout  # inspect -n 2 showed two records
    assert done.stderr == ""


def test_the_python_example_runs_as_written(tmp_path):
    """The README's "From Python" block, run as a script from a folder holding the sample."""
    readme = (_REPO / "README.md").read_text()
    section = readme.split("**From Python.**", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shutil.copytree(_REPO / "samples", tmp_path / "samples")
    (tmp_path / "example.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    # The library leaves the program's logging as it was: nothing of Beam's on stderr.
    assert done.stderr == ""
    manifest = (tmp_path / "out" / "fruits-py" / "manifest.json").read_text()
    assert '"resize": "64"' in manifest or '"resize":"64"' in manifest.replace(" ", "")
    assert "'written': 45" in done.stdout, done.stdout
