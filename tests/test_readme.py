"""The README's Use section, run as written, after its set-up command; and its shape: short, with
the install and quick start first. (Its other blocks run with the site's, in tests/test_docs.py.)"""

from __future__ import annotations

import json
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
    for folder in ("out/fruits", "out/by-folder", "out/by-name", "out/fruits-seed3"):
        assert (tmp_path / folder / "manifest.json").is_file(), folder
    assert "11 OK, 0 DAMAGED" in done.stdout
    assert "record 1, byte offset" in done.stdout  # inspect -n 2 showed two records
    # The file-name regex labelled the numbered images and reported the others.
    by_name = json.loads((tmp_path / "out/by-name/manifest.json").read_text())
    assert by_name["classes"] == ["apple", "banana", "cherry"]
    assert by_name["inputs"]["skipped_by_reason"] == {"no_label": 4}
    assert done.stderr == ""


def test_install_and_quick_start_come_first_and_the_readme_stays_short():
    readme = (_REPO / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:60])
    assert "## Set up" in head and "pip install -e ." in head
    assert "## Use" in head and "--labels 'regex:" in head and "apple01.jpg" in head
    # Dated findings go to CHANGELOG.md: no dates, no commit hashes.
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", readme)
    assert not re.search(r"\b[0-9a-f]{7,40}\b", readme)
    assert "mkdocs serve" in readme  # how to build and view the docs
