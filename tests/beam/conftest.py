"""Fixtures of the transform tests: a clean memory filesystem, images on it, and a pipeline."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from imagegen import jpeg_bytes

from beam_tfrecord.pipeline import LocalRunner


def _clear(fs: fsspec.AbstractFileSystem) -> None:
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")


@pytest.fixture
def memfs():
    """fsspec's memory filesystem, empty before and after the test.

    Its store is a class attribute: the pipeline's workers (the in-process FnApiRunner) see
    the same files as the test.
    """
    fs = fsspec.filesystem("memory")
    _clear(fs)
    yield fs
    _clear(fs)


@pytest.fixture
def put_images(memfs):
    """Writes tiny unique JPEGs to the memory filesystem: `put_images("/src", {"cat": 3})`
    writes `/src/cat/cat_0000.jpg`... and returns {relpath: bytes}."""

    def put(root: str, classes: dict[str, int], *, seed: int = 0) -> dict[str, bytes]:
        rng = np.random.default_rng(seed)
        written = {}
        for name, count in classes.items():
            for i in range(count):
                width, height = (int(v) for v in rng.integers(12, 33, size=2))
                relpath = f"{name}/{name}_{i:04d}.jpg"
                written[relpath] = jpeg_bytes(rng, width, height)
                memfs.pipe_file(f"{root}/{relpath}", written[relpath])
        return written

    return put


@pytest.fixture
def pipeline():
    """A TestPipeline on the engine a local build runs on (LocalRunner: the FnApiRunner, in
    this process), so the memory filesystem is the workers' too. Runs when its `with` ends."""
    return TestPipeline(runner=LocalRunner())
