"""Each image is read once, and decoded and encoded at most once, in a whole build.

Reads are counted by a filesystem that counts them (an fsspec memory filesystem under a protocol
of its own), decodes and encodes where the image code does them; the build runs in this process,
on the DirectRunner, so that both counters see every call.
"""

from __future__ import annotations

import json
from collections import Counter

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from imagegen import make_collection

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.images import decode as images

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


class CountingFileSystem(MemoryFileSystem):
    """A memory filesystem that counts every read of a file (a `cat_file` or an open for
    reading), by path."""

    protocol = "counting"
    store: dict = {}
    pseudo_dirs = [""]
    reads: Counter = Counter()

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("counting://"):
            path = "memory://" + path[len("counting://") :]
        return super()._strip_protocol(path)

    def cat_file(self, path, start=None, end=None, **kwargs):
        self.reads[self._strip_protocol(path)] += 1
        return super().cat_file(path, start, end, **kwargs)

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            self.reads[self._strip_protocol(path)] += 1
        return super()._open(path, mode, **kwargs)


fsspec.register_implementation("counting", CountingFileSystem, clobber=True)


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """A collection of 30 JPEGs on the counting filesystem, and the decode and encode counters."""
    local = tmp_path / "local"
    written = make_collection(local, {"cat": 15, "dog": 15}, seed=9)
    fs = fsspec.filesystem("counting")
    CountingFileSystem.store.clear()
    for relpath, data in written.items():
        fs.pipe_file(f"/src/{relpath}", data)
    CountingFileSystem.reads.clear()
    calls: Counter = Counter()
    real_decode, real_encode = images._decode, images._encode

    def decode(*args, **kwargs):
        calls["decode"] += 1
        return real_decode(*args, **kwargs)

    def encode(*args, **kwargs):
        calls["encode"] += 1
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(images, "_decode", decode)
    monkeypatch.setattr(images, "_encode", encode)
    yield written, calls
    CountingFileSystem.store.clear()


def _build(tmp_path, **settings):
    config = BuildConfig.from_settings(
        dict(
            inputs=("counting://src/**",),
            output=str(tmp_path / "out"),
            min_shard_size="1KB",
            max_shard_size="64KB",
            **settings,
        )
    )
    result = build(config, IN_PROCESS)
    return result.manifest


def _source_reads() -> Counter:
    return Counter({p: n for p, n in CountingFileSystem.reads.items() if p.endswith(".jpg")})


def test_a_default_build_reads_and_decodes_each_image_once(counted, tmp_path):
    written, calls = counted
    manifest = _build(tmp_path)
    assert manifest["inputs"]["written"] == len(written)
    reads = _source_reads()
    assert set(reads) == {f"/src/{relpath}" for relpath in written}
    assert set(reads.values()) == {1}, "every image is read once"
    assert calls == {"decode": len(written)}, "decoded once (validate=decode), never encoded"
    work = manifest["work"]
    assert work == {
        "reads": len(written),
        "bytes_read": sum(len(d) for d in written.values()),
        "decodes": len(written),
        "encodes": 0,
    }


def test_an_image_read_and_refused_counts_among_the_reads(counted, tmp_path):
    """`work.reads` is the sources read: a truncated JPEG and a text file named .jpg are read
    whole before they are refused, and reported; the reads and their bytes are the listing's."""
    written, _ = counted
    fs = fsspec.filesystem("counting")
    cut = written["cat/cat_0000.jpg"][:-200]
    bad = {"cat/cut.jpg": cut, "dog/notes.jpg": b"not an image at all\n" * 40}
    for relpath, data in bad.items():
        fs.pipe_file(f"/src/{relpath}", data)
    CountingFileSystem.reads.clear()
    manifest = _build(tmp_path)
    assert manifest["inputs"]["written"] == len(written)
    assert manifest["inputs"]["skipped"] == len(bad)
    assert set(_source_reads().values()) == {1}
    everything = {**written, **bad}
    assert manifest["work"]["reads"] == len(everything)
    assert manifest["work"]["bytes_read"] == sum(len(d) for d in everything.values())


def test_a_resized_build_on_estimated_sizes_decodes_and_encodes_each_image_once(counted, tmp_path):
    written, calls = counted
    manifest = _build(tmp_path, resize="24", encode="jpeg", transformed_sizes="estimate")
    assert manifest["inputs"]["written"] == manifest["inputs"]["modified"] == len(written)
    assert set(_source_reads().values()) == {1}
    assert calls == {"decode": len(written), "encode": len(written)}
    assert manifest["work"]["decodes"] == manifest["work"]["encodes"] == len(written)


def test_a_resized_build_measuring_its_records_transforms_each_image_twice_as_documented(
    counted, tmp_path
):
    """The default, `transformed_sizes: measure`: each transformed image is read, decoded and
    encoded once while planning, for its record's size, and once more by its shard writer."""
    written, calls = counted
    manifest = _build(tmp_path, resize="24", encode="jpeg")
    assert manifest["inputs"]["written"] == manifest["inputs"]["modified"] == len(written)
    assert set(_source_reads().values()) == {2}
    assert calls == {"decode": 2 * len(written), "encode": 2 * len(written)}
    # The manifest's work is its shard writers': one each.
    assert manifest["work"]["decodes"] == manifest["work"]["encodes"] == len(written)


def test_dedup_reads_each_image_twice_as_documented(counted, tmp_path):
    """Content hashes are what --dedup compares: the one setting that reads before planning."""
    written, _ = counted
    manifest = _build(tmp_path, dedup=True)
    assert manifest["inputs"]["written"] == len(written)
    assert set(_source_reads().values()) == {2}
    report = (tmp_path / "out" / "report.jsonl").read_text()
    assert [json.loads(line) for line in report.splitlines()] == []
