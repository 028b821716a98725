"""Fixtures shared by the test modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    """The TFRecord files TensorFlow wrote (../shared/conformance, or $BEAM_TFRECORD_CONFORMANCE).

    Missing files fail the run under CI, where skipping would hide a broken checkout, and skip
    elsewhere.
    """
    path = Path(
        os.environ.get("BEAM_TFRECORD_CONFORMANCE", _REPO.parent / "shared" / "conformance")
    )
    if not (path / "manifest.json").is_file():
        message = f"no conformance files at {path} (set BEAM_TFRECORD_CONFORMANCE)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
