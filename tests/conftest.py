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


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once: under CI a missing TensorFlow fails the run, elsewhere it skips.

    Compatibility with TensorFlow is the point of those tests, so CI must never skip them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ.get("CI"):
        import tensorflow

        return tensorflow
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="session")
def tfds():
    """TensorFlow Datasets, imported once: under CI a missing TFDS fails the run, elsewhere it
    skips."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ.get("CI"):
        import tensorflow_datasets

        return tensorflow_datasets
    return pytest.importorskip("tensorflow_datasets")


@pytest.fixture
def link():
    """Gives the latency proxy in front of a store (cloud_servers.py) with its counts reset, and
    restores its delay and fault after the test."""
    used = []

    def use(store):
        used.append((store.proxy, store.proxy.delay, store.proxy.fault))
        store.proxy.reset_counts()
        return store.proxy

    yield use
    for proxy, delay, fault in used:
        proxy.delay, proxy.fault = delay, fault


@pytest.fixture
def runner_loses_an_input(monkeypatch):
    """A runner that lost an input between listing and writing: the finalize step counts one
    more listed input than were written or reported."""
    from beam_tfrecord.beam import pipeline

    real_manifest = pipeline.build_manifest

    def one_more_listed(**fields):
        return real_manifest(**{**fields, "listed": fields["listed"] + 1})

    monkeypatch.setattr(pipeline, "build_manifest", one_more_listed)
