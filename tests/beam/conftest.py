"""Fixtures of the transform tests: a clean memory filesystem, images on it, and a pipeline."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from imagegen import jpeg_bytes

from beam_tfrecord.beam.pipeline import LocalRunner, preparer
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry
from beam_tfrecord.labels import ClassMap
from beam_tfrecord.listing import SourceFile


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


def plan_entries(root: str, images: dict[str, bytes], **settings) -> list[ImageEntry]:
    """The entries a build plans for images at `memory://{root}/{relpath}`: labels by their
    folder, class ids from all their labels (the census), split and size from the listing.

    Settings are BuildConfig's (`splits`, `seed`, `max_shard_size`...).
    """
    config = BuildConfig.from_settings(
        dict(inputs=(f"memory://{root}/**",), output="memory://out", **settings)
    )
    prep = preparer(config)
    sources = [
        SourceFile(f"memory://{root}/{relpath}", relpath, len(data))
        for relpath, data in sorted(images.items())
    ]
    labels = [prep.label(source) for source in sources]
    classes = ClassMap.from_labels(label for label in labels if isinstance(label, str))
    entries = []
    for source, label in zip(sources, labels, strict=True):
        entry = prep.plan(source, label, None if label is None else classes.id_of(label))
        assert isinstance(entry, ImageEntry), entry
        entries.append(entry)
    return entries


@pytest.fixture
def planned():
    """`plan_entries`, for test modules (a conftest is not imported by name)."""
    return plan_entries


@pytest.fixture
def pipeline():
    """A TestPipeline on the engine a local build runs on (LocalRunner: the FnApiRunner, in
    this process), so the memory filesystem is the workers' too. Runs when its `with` ends."""
    return TestPipeline(runner=LocalRunner())


@pytest.fixture
def new_pipeline():
    """Makes more pipelines like `pipeline`, for a test that runs several in turn."""
    return lambda: TestPipeline(runner=LocalRunner())
