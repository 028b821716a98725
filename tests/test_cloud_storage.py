"""Builds from a bucket into a bucket, on s3:// and gs://, against real servers on 127.0.0.1.

The servers (moto and fake-gcs-server, see cloud_servers.py) speak the stores' HTTP APIs, so
s3fs and gcsfs run their real code: listings with bucket-relative names, implicit folders, uploads
that appear whole when complete, no rename.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import posixpath
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import crc32c
import fsspec
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

# The fixtures are imported for pytest to find them; tests ask for them by name.
from cloud_servers import ObjectStore, gcs_store, point_s3_at, s3_store, upload  # noqa: F401
from command_process import run_command
from imagegen import jpeg_bytes, make_collection
from latency_proxy import owner_of_port, request_kind

from beam_tfrecord import checks, report, shard_writer, store_timeouts
from beam_tfrecord.beam import pipeline
from beam_tfrecord.beam.pipeline import BuildResult, build, preparer
from beam_tfrecord.beam.transforms import ListImages
from beam_tfrecord.cli import main
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.compat import BEAM_UNUSED_BY_A_LOCAL_BUILD
from beam_tfrecord.config import BuildConfig, ConfigError
from beam_tfrecord.entries import ImageEntry, ShardSpec
from beam_tfrecord.listing import (
    ListingTask,
    SourceFile,
    expand_task,
    first_match,
    split_listing,
    split_task,
)
from beam_tfrecord.manifest import LABELS_FILE, MANIFEST_FILE, REPORT_FILE, read_manifest
from beam_tfrecord.readahead import usable_cores, worker_threads
from beam_tfrecord.report import shard_report_name
from beam_tfrecord.shard_writer import write_shard
from beam_tfrecord.splits import assign_split

pytestmark = pytest.mark.slow

CLASSES = {"cat": 16, "dog": 14, "fox": 10}
MIN, MAX = 40_000, 120_000
SHARD_RE = re.compile(r"^(?P<name>.+)-(?P<split>[a-z]+)\.tfrecord-(?P<i>\d{5})-of-(?P<n>\d{5})$")
SHARD_NAME = re.compile(r"\.tfrecord-\d{5}-of-\d{5}")
METADATA = {LABELS_FILE, MANIFEST_FILE, REPORT_FILE}
MULTI_PROCESS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _config(inputs: str, output: str, **overrides) -> BuildConfig:
    settings = {
        "inputs": (inputs,),
        "output": output,
        "min_shard_size": MIN,
        "max_shard_size": MAX,
        "seed": 7,
    }
    settings.update(overrides)
    return BuildConfig.from_settings(dict(**settings))


def _objects(url: str) -> dict[str, bytes]:
    """Every object below a URL (hidden ones too), by path relative to it, read fresh."""
    fs, root = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    root = root.rstrip("/")
    return {name[len(root) + 1 :]: fs.cat_file(name) for name in sorted(fs.find(root))}


def _store(request, protocol: str) -> ObjectStore:
    return request.getfixturevalue({"s3": "s3_store", "gs": "gcs_store"}[protocol])


def _strays(files: dict[str, bytes], manifest: dict) -> set[str]:
    """Objects of an output folder that no finished build leaves: hidden ones (temporaries),
    and shards (or files named for shards) that the manifest does not list."""
    listed = {s["file"] for s in manifest["shards"]}
    listed |= {s["index_file"] for s in manifest["shards"] if s.get("index_file")}
    listed |= {shard_report_name(s["file"]) for s in manifest["shards"]}
    return {
        name
        for name in files
        if any(part.startswith(".") for part in name.split("/"))
        or (SHARD_NAME.search(name) and name not in listed)
    }


def _shards(files: dict[str, bytes]) -> dict[str, bytes]:
    return {name: data for name, data in files.items() if SHARD_RE.match(name)}


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path_factory.mktemp("photos")
    images = make_collection(src, CLASSES, seed=5)
    (src / "dog" / "broken.jpg").write_bytes(images["dog/dog_0000.jpg"][:300])  # truncated
    (src / "cat" / ".hidden.jpg").write_bytes(images["cat/cat_0001.jpg"])  # not an input at all
    return src, images


@pytest.fixture(scope="module")
def local_build(collection, tmp_path_factory) -> tuple[BuildResult, dict[str, bytes]]:
    src, _ = collection
    out = tmp_path_factory.mktemp("local") / "pets"
    result = build(_config(f"{src}/**", str(out)), [])
    return result, {p.name: p.read_bytes() for p in out.iterdir() if SHARD_RE.match(p.name)}


@dataclass
class BucketBuild:
    store: ObjectStore
    source: str  # the uploaded collection's folder URL
    output: str
    config: BuildConfig
    result: BuildResult
    images: dict[str, bytes]
    copies: list[tuple[str, str]]  # (from, to) of every copy or rename in the store


@pytest.fixture(scope="module", params=["s3", "gs"])
def bucket_build(request, collection) -> BucketBuild:
    store = _store(request, request.param)
    src, images = collection
    source = f"{store.new_bucket('photos')}/collections/pets"
    upload(src, source)
    output = f"{store.new_bucket('datasets')}/v1/pets"
    config = _config(f"{source}/**", output)
    # Object stores have no rename: gcsfs and s3fs copy, then delete (and gcsfs first retries a
    # native rename for half a minute). A build must publish by writing final names directly.
    copies: list[tuple[str, str]] = []
    with pytest.MonkeyPatch.context() as patch:
        cls = type(store.fs)
        for method in ("_cp_file", "_mv_file"):
            real = getattr(cls, method)

            async def recorded(self, path1, path2, *args, _real=real, **kwargs):
                copies.append((path1, path2))
                return await _real(self, path1, path2, *args, **kwargs)

            patch.setattr(cls, method, recorded)
        result = build(config, [])
    return BucketBuild(store, source, output, config, result, images, copies)


def test_every_image_in_one_shard_with_its_bytes_and_label_or_reported(bucket_build):
    b = bucket_build
    files = _objects(b.output)
    classes = files[LABELS_FILE].decode().splitlines()
    seen: Counter[str] = Counter()
    for name, data in _shards(files).items():
        split = SHARD_RE.match(name)["split"]
        for record in read_records(io.BytesIO(data)):
            features = decode_example(record)
            relpath = features["image/filename"][0].decode()
            seen[relpath] += 1
            assert features["image/encoded"] == [b.images[relpath]], relpath
            label = relpath.split("/")[0]
            assert features["image/class/text"] == [label.encode()]
            assert features["image/class/label"] == [classes.index(label)]
            assert assign_split(relpath, b.config.splits, b.config.seed) == split
    assert seen == Counter(set(b.images)), "every image is written, exactly once"

    report = [json.loads(line) for line in files[REPORT_FILE].decode().splitlines()]
    assert {r["relpath"]: r["reason"] for r in report} == {"dog/broken.jpg": "truncated"}
    assert report[0]["url"] == f"{b.source}/dog/broken.jpg"
    inputs = b.result.manifest["inputs"]
    assert inputs["listed"] == len(b.images) + 1, "the hidden file is not an input"
    assert (inputs["written"], inputs["skipped"]) == (len(b.images), 1)


def test_manifest_and_labels_match_the_objects(bucket_build):
    b = bucket_build
    files = _objects(b.output)
    manifest = json.loads(files[MANIFEST_FILE])
    assert manifest == b.result.manifest
    assert files[LABELS_FILE] == b"cat\ndog\nfox\n"
    shards = _shards(files)
    assert sorted(s["file"] for s in manifest["shards"]) == sorted(shards)
    assert len([s for s in shards if "-train." in s]) >= 2, "the train split spans shards"
    for shard in manifest["shards"]:
        data = shards[shard["file"]]
        assert shard["bytes"] == len(data)
        if shard["split"] == "train":
            assert MIN <= len(data) <= MAX, (shard["file"], len(data))
        assert shard["crc32c"] == f"{crc32c.crc32c(data):08x}"
        assert shard["examples"] == sum(1 for _ in read_records(io.BytesIO(data)))


def test_no_temporary_or_partial_objects_are_left(bucket_build):
    b = bucket_build
    bucket = b.output.split("/v1/")[0]
    files = _objects(bucket)
    assert all(name.startswith("v1/pets/") for name in files)
    assert _strays(_objects(b.output), b.result.manifest) == set()
    assert b.copies == [], "everything was written under its final name"
    if b.store.protocol == "s3":
        fs, path = fsspec.core.url_to_fs(bucket)
        assert fs.list_multipart_uploads(path) == [], "no upload is left unfinished"


def test_same_shards_as_a_build_from_local_disk(bucket_build, local_build):
    local_result, local_shards = local_build
    assert _shards(_objects(bucket_build.output)) == local_shards
    assert bucket_build.result.manifest["shards"] == local_result.manifest["shards"]


def _records(shards: dict[str, bytes]) -> dict[str, tuple[bytes, list[int]]]:
    """Each record's image bytes and class id, by file name."""
    found = {}
    for data in shards.values():
        for record in read_records(io.BytesIO(data)):
            features = decode_example(record)
            name = features["image/filename"][0].decode()
            found[name] = (features["image/encoded"][0], features["image/class/label"])
    return found


def test_objects_kept_gzip_coded_are_written_as_their_images(
    gcs_store,  # noqa: F811
    collection,
    local_build,
    tmp_path,
):
    """An object kept gzip-coded (`Content-Encoding: gzip`, as `gsutil cp -Z` uploads) is listed
    at its coded size, and GCS decodes it for a client that takes no gzip. Each is written, its
    record holding the image's own bytes as a build from local disk writes them; none is taken
    for a file that changed since it was listed."""
    src, images = collection
    source = f"{gcs_store.new_bucket('coded')}/pets"
    fs, root = fsspec.core.url_to_fs(source)
    for i, path in enumerate(sorted(p for p in src.rglob("*") if p.is_file())):
        name, data = f"{root}/{path.relative_to(src).as_posix()}", path.read_bytes()
        if i % 2:
            coded = gzip.compress(data, mtime=0)
            fs.pipe_file(name, coded, fixed_key_metadata={"content_encoding": "gzip"})
        else:
            fs.pipe_file(name, data)
    assert any(d.get("contentEncoding") == "gzip" for d in fs.find(root, detail=True).values())

    out = tmp_path / "pets"
    result = build(_config(f"{source}/**", str(out)), [])
    _, local_shards = local_build
    shards = {p.name: p.read_bytes() for p in out.iterdir() if SHARD_RE.match(p.name)}
    assert _records(shards) == _records(local_shards)
    report = [json.loads(line) for line in (out / REPORT_FILE).read_text().splitlines()]
    assert {r["relpath"]: r["reason"] for r in report} == {"dog/broken.jpg": "truncated"}
    assert result.manifest["inputs"]["written"] == len(images)
    # Measured before planning (a transformed image's record size) as the writer reads it.
    resized = build(_config(f"{source}/**", str(tmp_path / "small"), resize=16), [])
    assert resized.manifest["inputs"]["written"] == len(images)


def test_overwrite_replaces_a_build_and_removes_its_stale_shards(bucket_build):
    b = bucket_build
    fs, _ = fsspec.core.url_to_fs(b.output)
    target = f"{b.store.new_bucket('rebuild')}/pets"
    for name, data in _objects(b.output).items():
        fs.pipe_file(f"{target}/{name}", data)
    fs.pipe_file(f"{target}/.pets-train.tfrecord-00001-of-00003.tmp-deadbeef", b"partial")
    fs.pipe_file(f"{target}/notes.md", b"a user's file")
    with pytest.raises(ConfigError, match=r"already holds an earlier build; pass overwrite=True"):
        build(_config(f"{b.source}/**", target), [])

    # Larger shards: the train shards of the first build are stale (other names, other count).
    result = build(
        _config(
            f"{b.source}/**", target, overwrite=True, min_shard_size=MAX, max_shard_size=4 * MAX
        ),
        [],
    )
    files = _objects(target)
    new_shards = {s["file"] for s in result.manifest["shards"]}
    stale = set(_shards(_objects(b.output))) - new_shards
    assert any("-train." in name for name in stale), "the train split has fewer shards now"
    assert set(_shards(files)) == new_shards
    assert _strays(files, result.manifest) == set()
    assert set(files) >= METADATA
    assert files["notes.md"] == b"a user's file", "files a build does not write are left alone"
    assert result.manifest["inputs"]["written"] == len(b.images)


def test_verify_and_inspect_a_bucket(bucket_build, capsys):
    b = bucket_build
    shards = b.result.manifest["shards"]
    assert main(["verify", f"{b.output}/"]) == 0
    out = capsys.readouterr().out
    records = sum(s["examples"] for s in shards)
    assert f"total: {len(shards)} files, {records} records" in out
    first = shards[0]
    assert f"OK       {b.output}/{first['file']}: {first['examples']} records" in out

    url = f"{b.output}/{first['file']}"
    assert main(["inspect", url, "-n", "1", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with fsspec.open(url, "rb") as f:
        expected = decode_example(next(read_records(f)))["image/filename"][0].decode()
    assert [(line["file"], line["index"]) for line in lines] == [(url, 0)]
    assert lines[0]["features"]["image/filename"] == {"kind": "bytes", "values": [expected]}


def test_shard_processes_find_the_store_through_settings_given_to_fsspec(
    s3_store,  # noqa: F811
    collection,
    local_build,
    monkeypatch,
):
    """A program may point fsspec at its store in code rather than in the environment: a
    build's own shard processes get those settings too (here the endpoint; without it they
    would look for the real AWS, and fail)."""
    src, images = collection
    source = f"{s3_store.new_bucket('photos')}/pets"
    upload(src, source)
    output = f"{s3_store.new_bucket('datasets')}/pets"
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_store.endpoint})
    fsspec.filesystem("s3").clear_instance_cache()
    config = _config(f"{source}/**", output)
    assert pipeline.shard_processes(config, PipelineOptions([])) > 1 or usable_cores() < 2
    result = build(config, [])
    assert result.manifest["inputs"]["written"] == len(images)
    assert _shards(_objects(output)) == local_build[1]


def test_multi_process_workers_find_the_store_through_the_environment(
    request, collection, local_build
):
    # Beam's workers are other processes here: they reach the emulator through the environment
    # they inherit, as workers of a real runner reach the real store through theirs.
    store = _store(request, "gs")
    src, images = collection
    source = f"{store.new_bucket('photos')}/pets"
    upload(src, source)
    output = f"{store.new_bucket('datasets')}/pets"
    result = build(_config(f"{source}/**", output), MULTI_PROCESS)
    assert result.manifest["inputs"]["written"] == len(images)
    assert _shards(_objects(output)) == local_build[1]


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_a_failed_shard_leaves_no_object(request, protocol, collection, monkeypatch):
    """An upload appears only when complete: a shard whose writing fails is not published."""
    store = _store(request, protocol)
    src, images = collection
    source = f"{store.new_bucket('photos')}/pets"
    upload(src, source)
    bucket = store.new_bucket("datasets")
    config = _config(f"{source}/**", f"{bucket}/pets")
    prep = preparer(config)
    entries = [
        prep.plan(SourceFile(f"{source}/{relpath}", relpath, len(data)), "cat", 0)
        for relpath, data in sorted(images.items())[:6]
    ]
    assert all(isinstance(e, ImageEntry) for e in entries)
    real_read = shard_writer.read_source
    reads = []

    def failing_read(url):
        reads.append(url)
        if len(reads) == 6:
            raise RuntimeError("the worker fails after five records were written")
        return real_read(url)

    monkeypatch.setattr(shard_writer, "read_source", failing_read)
    spec = ShardSpec(config.output, "pets-train.tfrecord-00000-of-00001", "train", 0, 1)
    with pytest.raises(RuntimeError, match="five records"):
        write_shard(spec, entries, config.image)
    assert _objects(bucket) == {}


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_a_shard_smaller_than_an_upload_block_is_one_upload(request, protocol, collection):
    """Its report part, the shard and its index: three uploads in turn, not five (a resumable
    or multipart upload takes three: start, data, commit). On a distant store each is a round
    trip, and a build of many small shards pays them shard after shard."""
    store = _store(request, protocol)
    src, images = collection
    config = _config(f"{src}/**", f"{store.new_bucket('small')}/pets")
    prep = preparer(config)
    entries = [
        prep.plan(SourceFile(str(src / relpath), relpath, len(data)), "cat", 0)
        for relpath, data in sorted(images.items())[:6]
        if "broken" not in relpath
    ]
    spec = ShardSpec(config.output, "pets-train.tfrecord-00000-of-00001", "train", 0, 1)
    store.proxy.counts.clear()
    result, _ = write_shard(spec, entries, config.image)
    assert store.proxy.counts["upload"] == 3
    shard = _objects(config.output)[spec.file_name]
    assert len(shard) == result.bytes and f"{crc32c.crc32c(shard):08x}" == result.crc32c
    assert len(list(read_records(io.BytesIO(shard)))) == len(entries) == result.examples


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_the_end_of_a_build_takes_a_request_for_each_of_its_steps(request, protocol):
    """The report composed from its parts, the parts removed, the manifest read back: on a
    distant store each request is a round trip after the last shard, so each takes the fewest.
    They took 2 (an empty report), 3 (no parts) and 7 requests in turn."""
    store = _store(request, protocol)
    output = f"{store.new_bucket('ending')}/pets"
    fs, root = fsspec.core.url_to_fs(output)
    parts = {0: b'{"path": "a"}\n', 3: b'{"path": "b"}\n{"path": "c"}\n'}
    for part, data in parts.items():
        fs.pipe_file(fsspec.core.url_to_fs(report.part_url(output, part))[1], data)
    fs.pipe_file(f"{root}/{MANIFEST_FILE}", b'{"name": "pets", "shards": []}')
    fs.invalidate_cache()

    store.proxy.reset_counts()
    report.compose_report(output, [3, 0, 3], REPORT_FILE)
    assert store.proxy.reset_counts() == {"read": 2, "upload": 1}
    report.compose_report(output, [], "empty.jsonl")
    assert store.proxy.reset_counts() == {"upload": 1}
    report.remove_parts(output)
    assert store.proxy.reset_counts()["list"] == 1
    report.remove_parts(output)  # nothing left: one listing
    assert store.proxy.reset_counts() == {"list": 1}
    assert read_manifest(output) == {"name": "pets", "shards": []}
    assert store.proxy.reset_counts() == {"read": 1}

    objects = _objects(output)
    assert objects[REPORT_FILE] == parts[0] + parts[3] and objects["empty.jsonl"] == b""
    assert not [name for name in objects if name.startswith(report.PARTS_DIR)]


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_a_bucket_build_ends_in_three_round_trips_after_its_shards(request, protocol, tmp_path):
    """After the last shard: the report composed; then at once the files before the manifest,
    the report's parts removed and the files of earlier builds looked for; then the manifest,
    which the launcher does not read back. These were six round trips in turn."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('ends')}/data"
    rng = np.random.default_rng(9)
    for name in ["a/1.jpg", "b/2.jpg"]:
        store.fs.pipe_file(f"{root}/{name}", jpeg_bytes(rng, 32, 24))
    output = f"{store.new_bucket('ends-out')}/ds"
    store.fs.pipe_file(f"{output}/ds-train.tfrecord-00007-of-00009", b"an earlier build's")
    store.fs.invalidate_cache()
    sent: list[tuple[float, str, str]] = []

    def fault(method, target):
        sent.append((time.monotonic(), request_kind(method, target), urllib.parse.unquote(target)))
        return None

    store.proxy.fault = fault
    store.proxy.delay = 0.1
    try:
        result = build(_config(f"{root}/**", output, overwrite=True), [])
    finally:
        store.proxy.fault = None
        store.proxy.delay = 0
    assert result.manifest["inputs"]["written"] == 2
    objects = _objects(output)
    assert "ds-train.tfrecord-00007-of-00009" not in objects  # the earlier build's shard went
    assert MANIFEST_FILE in objects
    # The manifest is not read back: the launcher took it as the finalize step wrote it.
    assert not [t for _, kind, t in sent if kind == "read" and MANIFEST_FILE in t]
    parts = next(when for when, kind, t in sent if kind == "list" and report.PARTS_DIR in t)
    stale = [when for when, kind, t in sent if kind == "list" and "/index/" in t + "/"]
    # The parts' listing and the looks for stale files go at once, within one round trip.
    assert stale and all(abs(when - parts) < 0.08 for when in stale), (parts, stale)


@pytest.mark.parametrize(("protocol", "block"), [("gs", 256 * 1024), ("s3", 5 * 1024 * 1024)])
def test_a_shard_larger_than_an_upload_block_goes_up_in_blocks(
    request, protocol, block, tmp_path, monkeypatch
):
    """The other way: blocks uploaded as the shard is written, then committed whole. The block
    is the store's smallest (256 KiB on GCS, 5 MiB for S3's parts), so the shard is small."""
    import numpy as np
    from PIL import Image

    store = _store(request, protocol)
    monkeypatch.setattr(shard_writer, "upload_block_size", lambda fs: block)
    rng = np.random.default_rng(3)
    src = tmp_path / "noise"
    (src / "cat").mkdir(parents=True)
    held = 0
    while held < 2.5 * block:  # noise hardly compresses: about 100 KB an image
        path = src / "cat" / f"n{held:09d}.jpg"
        pixels = rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, "JPEG", quality=95)
        held += path.stat().st_size
    config = _config(f"{src}/**", f"{store.new_bucket('large')}/noise")
    prep = preparer(config)
    entries = [
        prep.plan(SourceFile(str(path), f"cat/{path.name}", path.stat().st_size), "cat", 0)
        for path in sorted((src / "cat").iterdir())
    ]
    spec = ShardSpec(config.output, "noise-train.tfrecord-00000-of-00001", "train", 0, 1)
    store.proxy.counts.clear()
    result, report = write_shard(spec, entries, config.image)
    assert store.proxy.counts["upload"] > 4  # start, two blocks or more, commit; report, index
    shard = _objects(config.output)[spec.file_name]
    assert len(shard) == result.bytes > 2 * block and report == []
    assert f"{crc32c.crc32c(shard):08x}" == result.crc32c
    assert len(list(read_records(io.BytesIO(shard)))) == len(entries) == result.examples


@pytest.mark.parametrize("protocol", ["s3", "gs", "local"])
def test_an_output_that_is_a_file_is_refused_and_left_as_it_is(
    request, protocol, collection, tmp_path, capsys
):
    src, _ = collection
    if protocol == "local":
        output = str(tmp_path / "pets")
    else:
        output = f"{_store(request, protocol).new_bucket('file')}/pets"
    with fsspec.open(output, "wb") as f:
        f.write(b"not a folder")
    assert main(["build", "--input", f"{src}/**", "--output", output]) == 2
    assert f"--output: {output!r} is a file, not a folder" in capsys.readouterr().err
    fs, path = fsspec.core.url_to_fs(output)
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"not a folder"


@pytest.mark.parametrize("protocol", ["s3", "gs"])
@pytest.mark.parametrize("holds", ["nothing", "a build"])
def test_the_output_is_looked_at_in_one_listing(request, protocol, holds):
    """Whether the output is a file, and what it holds: one listing (gcsfs adds a look at an
    object of the folder's name), where isfile, isdir and ls took up to six requests in turn."""
    store = _store(request, protocol)
    output = f"{store.new_bucket('checked')}/pets"
    if holds == "a build":
        store.fs.pipe_file(f"{output}/{MANIFEST_FILE}", b"{}")
    config = _config("unused/**", output, overwrite=True)
    store.fs.invalidate_cache()
    store.proxy.counts.clear()
    checks._check_output(config, lock=False)
    looks = Counter(store.proxy.counts)
    del looks["upload"], looks["delete"]  # the probe that proves the output writable
    assert sum(looks.values()) <= 2, looks


@pytest.fixture
def silent_s3(monkeypatch, tmp_path) -> Iterator[str]:
    """s3:// pointed at a port that takes connections and never answers; returns a bucket URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def take() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    port = listener.getsockname()[1]
    point_s3_at(monkeypatch, f"http://127.0.0.1:{port}", tmp_path)
    try:
        yield "s3://silent-bucket"
    finally:
        stop.set()
        taker.join()
        for conn in held:
            conn.close()
        listener.close()
        fsspec.get_filesystem_class("s3").clear_instance_cache()


def test_a_store_whose_filesystem_cannot_be_made_is_named_as_the_input(tmp_path, monkeypatch):
    """With no network, gcsfs's filesystem stalls in its making (asking a metadata server for
    credentials), before any request. The refusal named --output and the local output folder:
    nothing was marked as being checked yet."""
    released = threading.Event()
    made = fsspec.core.url_to_fs

    def url_to_fs(url, *args, **kwargs):
        if str(url).startswith("gs://unreachable"):
            released.wait(30)
        return made(url, *args, **kwargs)

    monkeypatch.setattr(fsspec.core, "url_to_fs", url_to_fs)
    pattern = "gs://unreachable/photos/**"
    config = BuildConfig.from_settings({"inputs": [pattern], "output": str(tmp_path / "out")})
    try:
        with pytest.raises(ConfigError) as refused:
            checks.preflight(config, timeout=1)
    finally:
        released.set()
    assert refused.value.setting == "input"
    assert str(refused.value).startswith(f"--input: {pattern!r}: no answer from the store in 1 s")


@pytest.mark.parametrize("silent", ["input", "output"])
def test_a_store_that_does_not_answer_is_named_alone(gcs_store, silent_s3, silent, tmp_path):  # noqa: F811
    """The checks before a build give a store a few seconds to answer; the refusal names the
    setting and the URL that got no answer, not every URL of the build."""
    answering = f"{gcs_store.new_bucket('answers')}/data"
    gcs_store.fs.pipe_file(f"{answering}/cat/a.jpg", b"x")
    if silent == "input":
        inputs, output = f"{silent_s3}/data/**", f"{answering}-out"
    else:
        inputs, output = f"{answering}/**", f"{silent_s3}/out"
    config = BuildConfig.from_settings({"inputs": [inputs], "output": output})
    with pytest.raises(ConfigError) as refused:
        checks.preflight(config, timeout=2)
    silent_url = inputs if silent == "input" else output
    assert refused.value.setting == silent
    assert str(refused.value).startswith(
        f"--{silent}: {silent_url!r}: no answer from the store in 2 s"
    )


def test_a_store_that_answers_only_with_errors_its_client_retries_is_said_to(
    request, link, tmp_path
):
    """A store answering every request with 503 keeps its client retrying; the checks before the
    build give up after their few seconds, and the refusal says that it may have answered with
    such errors, not only that it said nothing. An S3 listing is ours (`s3_list`), 5 tries in
    up to 3 s: it may give up first, and then says the store's own error."""
    store = _store(request, "s3")
    source = f"{store.new_bucket('throttled')}/data"
    store.fs.pipe_file(f"{source}/cat/a.jpg", b"x")
    link(store).fault = lambda method, target: 503
    config = BuildConfig.from_settings({"inputs": [f"{source}/**"], "output": str(tmp_path)})
    try:
        with pytest.raises(ConfigError) as refused:
            checks.preflight(config, timeout=2)
    finally:
        store.proxy.fault = None
    assert refused.value.setting == "input"
    said = str(refused.value)
    assert (
        "or only with errors its client retries (503, 429)" in said
        or "cannot be listed: [Errno 5] 503 SlowDown" in said
    ), said


def test_an_interrupted_build_ends_when_the_store_stops_answering(gcs_store, collection, link):  # noqa: F811
    """Ctrl-C ends a build whose store no longer answers: tidying up and counting the finished
    shards wait a bounded time for the store, then the build ends, saying so. It used to wait
    for ever, past further Ctrl-Cs and SIGTERMs."""
    src, _ = collection
    source, output = _buckets(gcs_store, src, "silent")
    proxy = link(gcs_store)
    proxy.delay = 0.05
    command = [sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", f"{source}/**",
               "--output", output, "--min-shard-size", "10KB", "--max-shard-size", "20KB"]  # fmt: skip
    started = time.monotonic()
    build_process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while proxy.counts["read"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the shards are being written
        assert build_process.poll() is None, "the build ended before it could be interrupted"
        proxy.delay = 1000  # from now on, no request is answered
        time.sleep(1)
        build_process.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        _, err = build_process.communicate(timeout=90)
        waited = time.monotonic() - signalled
    finally:
        build_process.kill()
        proxy.delay = 0
    assert build_process.returncode == 130, err
    assert "the store did not answer in 10 s" in err
    assert "beam-tfrecord build: interrupted (SIGINT)" in err
    assert "Traceback" not in err
    # One wait of 10 s for the store, not one for tidying up and another for counting (20 s);
    # and the time it gives is when Ctrl-C came, not when the waiting ended.
    assert waited < 16, waited
    after = float(re.search(r"interrupted \(SIGINT\) after ([0-9.]+) s", err).group(1))
    assert after < signalled - started + 2, (after, signalled - started)


@pytest.mark.parametrize("beam_flags", [[], ["--runner", "DirectRunner"]], ids=["plain", "beam"])
@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_a_build_stopped_while_its_checks_wait_for_the_store_says_it_wrote_nothing(
    request, protocol, collection, link, beam_flags
):
    """Ctrl-C while the checks before a build waited for a store that had stopped answering
    (up to 8 s, past Beam's import) waited 10 s more to tidy up, then said "the store did not
    answer... what the build was writing may be left", "the finished shards kept" and a
    --resume command, of a build that had written nothing. It ends at once, in one line, as a
    build stopped before it started anything does. With Beam flags (the checks in the
    pipeline's own thread) it said "0 finished shards kept" and a --resume command."""
    store = _store(request, protocol)
    src, _ = collection
    source, output = _buckets(store, src, "unchecked")
    proxy = link(store)
    proxy.fault = lambda method, target: "stall"
    command = [sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", f"{source}/**",
               "--output", output, "-v", *beam_flags]  # fmt: skip
    build_process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        for line in build_process.stderr:  # Beam is imported: the command's handling is on
            if "Beam options:" in line:
                break
        time.sleep(0.5)
        assert proxy.counts, "the checks asked the store nothing"
        assert build_process.poll() is None, "the checks ended before the build was stopped"
        build_process.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        err = build_process.stderr.read()
        build_process.wait(30)
        waited = time.monotonic() - signalled
    finally:
        build_process.kill()
        proxy.fault = None
    assert build_process.returncode == 130, err
    assert err.strip().splitlines()[-1] == "beam-tfrecord build: interrupted", err
    assert "did not answer" not in err and "--resume" not in err and "Traceback" not in err
    assert waited < 5, waited
    store.fs.invalidate_cache()
    assert not store.fs.exists(output)


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_verify_and_resume_read_a_bucket_shard_in_a_request_not_a_request_a_record(
    request, protocol, collection, link, capsys
):
    """A shard is read front to back (verify, --resume, inspect, the reader): in blocks of
    16 MiB. gcsfs's default cache sent a GET for each record, or two."""
    store = _store(request, protocol)
    src, _ = collection
    source, output = _buckets(store, src, "reread")
    config = _config(f"{source}/**", output)
    result = build(config, [])
    names = [shard["file"] for shard in result.manifest["shards"]]
    shards = len(names)
    records = result.manifest["inputs"]["written"]
    proxy = link(store)
    proxy.fault, shard_reads = _shard_reads(names)
    assert main(["verify", output]) == 0, capsys.readouterr()
    # Each shard once (its records and its CRC32C in one pass), its index; the build's files.
    assert shard_reads == dict.fromkeys(names, 1)
    verified = proxy.reset_counts()["read"]
    assert verified <= 2 * shards + 10 < records, (verified, shards, records)
    shard_reads.clear()
    resumed = build(replace(config, resume=True), [])
    assert resumed.counters.get("shards_kept") == shards
    assert shard_reads == dict.fromkeys(names, 1)
    reads = proxy.reset_counts()["read"]
    assert reads <= 2 * shards + 10 < records, (reads, shards, records)
    proxy.fault = None


def test_verify_of_a_shard_the_store_will_not_give_says_so_in_its_own_words(
    gcs_store,  # noqa: F811
    collection,
    link,
):
    """gcsfs logs its last failed retry as an error with the whole traceback; with no logging
    set up, Python printed it above verify's one-line verdict, which called the shard DAMAGED."""
    src, _ = collection
    source, output = _buckets(gcs_store, src, "unreadable")
    result = build(_config(f"{source}/**", output), [])
    lost = result.manifest["shards"][0]["file"]
    proxy = link(gcs_store)
    proxy.fault = lambda method, target: (
        "reset" if request_kind(method, target) == "read" and lost in target else None
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "beam_tfrecord.cli", "verify", output],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        proxy.fault = None
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "out of retries" not in done.stderr, done.stderr
    # Unread, not damaged: the shard may be sound, and the store's trouble pass.
    assert f"UNREADABLE {output}/{lost}\n" in done.stdout, done.stdout
    assert "0 DAMAGED, 1 UNREADABLE" in done.stdout.splitlines()[-1]


def _shard_reads(names: list[str]):
    """A proxy fault hook that fails nothing, and counts the GETs of each shard in `names`."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(method, target):
        if request_kind(method, target) == "read":
            path = urllib.parse.unquote(target.partition("?")[0])
            name = posixpath.basename(path)
            if name in names:
                with lock:
                    counts[name] += 1
        return None

    return count, counts


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_missing_output_bucket_is_refused_not_created(request, protocol, tmp_path, capsys):
    """A typo in the output bucket's name fails before the build, saying so; no bucket appears."""
    _store(request, protocol)
    src = tmp_path / "src"
    make_collection(src, {"a": 2}, seed=1)
    output = f"{protocol}://no-such-bucket-typo/ds"
    status = main(["build", "--input", f"{src}/**", "--output", output])
    assert status == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --output: {output!r} is not writable: "
        "the bucket 'no-such-bucket-typo' does not exist\n"
    )
    fs = fsspec.filesystem(protocol)
    fs.invalidate_cache()
    assert not fs.exists("no-such-bucket-typo")


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_the_command_checks_a_bucket_build_while_beam_is_imported(
    request, protocol, tmp_path, monkeypatch, capsys
):
    """A build that reaches a store is checked in round trips (its input listed for an image, its
    output looked at, a probe written and removed, an earlier manifest removed), which the
    launcher waited out after Beam's import. The command runs them on a thread of their own
    while it imports Beam; the pipeline waits for them and does not check again."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('checked')}/data"
    rng = np.random.default_rng(8)
    for name in ["a/1.jpg", "b/2.jpg"]:
        store.fs.pipe_file(f"{root}/{name}", jpeg_bytes(rng, 32, 24))
    store.fs.invalidate_cache()
    output = f"{store.new_bucket('checked-out')}/ds"
    calls: list[str] = []
    checked = checks.preflight

    def preflight(config, *args, **kwargs):
        calls.append(threading.current_thread().name)
        return checked(config, *args, **kwargs)

    monkeypatch.setattr(checks, "preflight", preflight)
    monkeypatch.setattr(pipeline, "preflight", preflight)
    assert main(["build", "--input", f"{root}/**", "--output", output]) == 0
    assert calls == ["checks"]
    calls.clear()
    # Refused by those checks: the same one line as when the pipeline made them, nothing written.
    assert main(["build", "--input", f"{root}/**", "--output", output]) == 2
    assert calls == ["checks"]
    assert capsys.readouterr().err.endswith(
        f"beam-tfrecord build: error: --output: {output!r} already holds an earlier build; "
        "pass --overwrite to replace it\n"
    )
    calls.clear()
    # And --overwrite's removal of the earlier manifest comes with them.
    assert main(["build", "--input", f"{root}/**", "--output", output, "--overwrite"]) == 0
    assert calls == ["checks"]
    assert json.loads(store.fs.cat_file(f"{output}/{MANIFEST_FILE}"))["inputs"]["written"] == 2


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_a_bucket_pattern_that_matches_only_folders_says_how_to_take_their_images(
    request, protocol, tmp_path, capsys
):
    store = _store(request, protocol)
    root = f"{store.new_bucket('nest')}/data"
    for name in ["cat/1.jpg", "catnip/2.jpg", "dog/3.jpg"]:
        store.fs.pipe_file(f"{root}/{name}", b"x")
    store.fs.invalidate_cache()
    pattern = f"{root}/cat"
    assert main(["build", "--input", f"{pattern}*", "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input: {pattern + '*'!r} matches 2 folders and no "
        f"image file; to take the images below them, write {pattern + '*/**'!r}\n"
    )


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_a_missing_input_bucket_is_named_as_such(request, protocol, tmp_path, capsys):
    store = _store(request, protocol)
    pattern = f"{protocol}://no-such-bucket-typo/data/**"
    status = main(["build", "--input", pattern, "--output", str(tmp_path / "out")])
    assert status == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input: {pattern!r}: "
        "the bucket 'no-such-bucket-typo' does not exist\n"
    )
    # A bucket that is there, without the folder: the folder is named.
    folder = f"{store.new_bucket('there')}/data"
    status = main(["build", "--input", f"{folder}/**", "--output", str(tmp_path / "out")])
    assert status == 2
    assert f"its folder {folder!r} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_input_with_dot_dots_on_a_store_is_checked_as_the_plain_one(s3_store, tmp_path, capsys):  # noqa: F811
    """`s3://b/x/../photos` names `s3://b/photos` (061eca2), and the checks before a build
    took it as written: a folder named so was said not to exist, a `*` over class folders
    built the one stray image and left them out without a word, and an output inside it was
    let by. Each now goes as it goes for `s3://b/photos`."""
    root = s3_store.new_bucket("dots")
    rng = np.random.default_rng(3)
    for name in ["photos/stray.jpg", "photos/cat/1.jpg", "photos/dog/2.jpg"]:
        s3_store.fs.pipe_file(f"{root}/{name}", jpeg_bytes(rng, 32, 24))
    s3_store.fs.invalidate_cache()
    dotted = f"{root}/x/../photos"
    assert main(["build", "--input", f"{dotted}/cat", "--output", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    assert main(["build", "--input", f"{dotted}/*", "--output", str(tmp_path / "s")]) == 2
    assert "and 2 folders of images ('cat', 'dog')" in capsys.readouterr().err
    assert main(["build", "--input", f"{dotted}/**", "--output", f"{root}/photos/out"]) == 2
    assert "is inside input" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_a_missing_input_list_on_a_store_is_said_not_to_exist(request, protocol, tmp_path, capsys):
    """The store's client names only the object's path: the refusal read `cannot be read:
    bucket/lists/l.csv`, where a local list, --config and --input say it does not exist."""
    store = _store(request, protocol)
    listed = f"{store.new_bucket('lists')}/lists/l.csv"
    missing_bucket = f"{protocol}://no-such-bucket-typo/l.csv"
    for input_list, says in [
        (listed, f"{listed!r} does not exist"),
        (missing_bucket, f"{missing_bucket!r}: the bucket 'no-such-bucket-typo' does not exist"),
    ]:
        status = main(["build", "--input-list", input_list, "--output", str(tmp_path / "out")])
        assert status == 2
        assert capsys.readouterr().err == f"beam-tfrecord build: error: --input-list: {says}\n"
    assert not (tmp_path / "out").exists()


def test_a_bucket_that_refuses_to_be_described_is_not_said_to_be_missing(
    s3_store,  # noqa: F811
    tmp_path,
    capsys,
):
    """s3fs's `exists` on a bucket is False for any error of its probes (HeadBucket, then
    GetBucketLocation): a bucket that is there, in an account whose policy grants reads of its
    objects and not those (403), was refused as 'the bucket does not exist', when it was the
    list, or the folder, that was not there."""
    bucket = s3_store.new_bucket("guarded")
    name = bucket.split("://", 1)[1]

    def fault(method, target):
        path, _, query = target.partition("?")
        if path.strip("/") == name and (method == "HEAD" or "location" in query):
            return 403
        return None

    s3_store.proxy.fault = fault
    try:
        listed = f"{bucket}/lists/l.csv"
        status = main(["build", "--input-list", listed, "--output", str(tmp_path / "out")])
        assert status == 2
        said = capsys.readouterr().err
        assert said == f"beam-tfrecord build: error: --input-list: {listed!r} does not exist\n"
        status = main(["build", "--input", f"{bucket}/data/**", "--output", str(tmp_path / "out")])
        assert status == 2
        assert f"its folder '{bucket}/data' does not exist" in capsys.readouterr().err
    finally:
        s3_store.proxy.fault = None
    assert not (tmp_path / "out").exists()


def test_no_credentials_is_one_line_not_a_traceback(s3_store, tmp_path, capsys, monkeypatch):  # noqa: F811
    """botocore's NoCredentialsError is no OSError: it escaped the checks as a traceback, from
    build (exit 1) and from verify and spec alike. verify and spec name the store's URL too."""
    from cloud_servers import _clear_instances

    src = tmp_path / "src"
    make_collection(src, {"a": 2}, seed=1)
    source = f"{s3_store.new_bucket('photos')}/src"
    upload(src, source)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance to ask either
    _clear_instances("s3")
    try:
        out = tmp_path / "out"
        assert main(["build", "--input", source, "--output", str(out)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"beam-tfrecord build: error: --input: {source!r} cannot be listed: Unable to locate "
            "credentials (NoCredentialsError)"
        ]
        assert not out.exists()
        for command in ("verify", "spec"):
            assert main([command, source]) == 1
            assert capsys.readouterr().err.strip().splitlines() == [
                f"beam-tfrecord {command}: error: {source}: Unable to locate credentials "
                "(NoCredentialsError)"
            ]
    finally:
        monkeypatch.undo()
        _clear_instances("s3")


# A first read of each of these fails as a flaky store's might; the next succeeds.
TRANSIENT = {"dog/dog_0003.jpg": 503, "cat/cat_0004.jpg": "reset", "fox/fox_0001.jpg": 429}


def _buckets(store, src, folder: str) -> tuple[str, str]:
    """The collection uploaded under `folder` of a new bucket, and where to build it."""
    source = f"{store.new_bucket('photos')}/{folder}/pets"
    upload(src, source)
    return source, f"{store.new_bucket('datasets')}/{folder}/pets"


def _first_reads_fail():
    """A fault hook failing the first read of each TRANSIENT image as the table says."""
    return _reads_of(TRANSIENT, lambda relpath, n: TRANSIENT[relpath] if n == 1 else None)


def _reads_of(relpaths, fail):
    """A proxy fault hook: `fail(relpath, n)` decides the n-th read (1, 2, ...) of each image."""
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def fault(method, target):
        if request_kind(method, target) != "read":
            return None
        for relpath in relpaths:
            if urllib.parse.quote(relpath, safe="") in target or relpath in target:
                with lock:
                    seen[relpath] += 1
                    return fail(relpath, seen[relpath])
        return None

    return fault, seen


def test_a_50ms_link_builds_the_same_shards(request, collection, local_build, link):
    store = _store(request, "gs")
    src, images = collection
    source, output = _buckets(store, src, "far")
    proxy = link(store)
    proxy.delay = 0.05
    result = build(_config(f"{source}/**", output), [])
    proxy.delay = 0
    assert result.manifest["inputs"]["written"] == len(images)
    assert _shards(_objects(output)) == local_build[1]
    assert proxy.max_in_flight > 4, "reads overlap"


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_transient_failures_are_retried_in_a_build(
    request, protocol, collection, local_build, link
):
    store = _store(request, protocol)
    src, images = collection
    source, output = _buckets(store, src, "flaky")
    # Each image is read once, by its shard's writer: the first try fails, the retry succeeds.
    fault, seen = _first_reads_fail()
    link(store).fault = fault
    result = build(_config(f"{source}/**", output), [])
    store.proxy.fault = None
    assert all(seen[relpath] == 2 for relpath in TRANSIENT), seen  # failed, then retried
    assert result.manifest["inputs"]["written"] == len(images)
    assert _shards(_objects(output)) == local_build[1]


def _readers(proxy, source: str, inner=None):
    """A fault hook recording the process that sent each read of an object below `source` (by
    its end of the connection), then deciding as `inner` does."""
    pids: Counter[int | None] = Counter()
    bucket = source.split("://", 1)[1].split("/", 1)[0]

    def fault(method, target):
        if request_kind(method, target) == "read" and f"/{bucket}/" in target:
            pids[owner_of_port(proxy.client_port, proxy.port)] += 1
        return inner(method, target) if inner is not None else None

    return fault, pids


# A one-process build writes its shards in processes of its own only where it has the cores.
_PROCESSES = pytest.mark.skipif(usable_cores() < 2, reason="shard processes need two cores")


@_PROCESSES
def test_a_gs_build_reads_in_worker_processes_and_its_shards_equal_the_local_builds(
    request, collection, local_build, link
):
    store = _store(request, "gs")
    src, images = collection
    source, output = _buckets(store, src, "processes")
    proxy = link(store)
    proxy.fault, readers = _readers(proxy, source)
    result = build(_config(f"{source}/**", output), [])
    proxy.fault = None
    assert result.manifest["inputs"]["written"] == len(images)
    assert _shards(_objects(output)) == local_build[1]
    # Every image read once (and the broken one), by worker processes: none by this one.
    assert sum(readers.values()) == len(images) + 1
    assert None not in readers and os.getpid() not in readers, readers
    assert len(readers) == pipeline.shard_processes(
        _config(f"{source}/**", output), PipelineOptions([])
    ), readers


def test_the_command_builds_from_a_bucket_with_a_beam_that_leaves_out_what_it_never_uses(
    gcs_store,  # noqa: F811
    collection,
    local_build,
    tmp_path,
):
    """`beam-tfrecord build` from gs:// to gs:// runs on this machine: its Beam is imported
    without Beam's own object-store file systems (the build uses gcsfs), and its shards are the
    local build's."""
    src, _ = collection
    source, output = _buckets(gcs_store, src, "lean")
    args = ["build", "--input", f"{source}/**", "--output", output, "--seed", "7",
            "--min-shard-size", str(MIN), "--max-shard-size", str(MAX)]  # fmt: skip
    done, modules = run_command(args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "apache_beam.runners.direct" in modules and "gcsfs" in modules
    assert modules.isdisjoint(BEAM_UNUSED_BY_A_LOCAL_BUILD)
    assert _shards(_objects(output)) == local_build[1]


@_PROCESSES
@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_failures_in_a_worker_process_are_retried_or_reported_and_the_build_succeeds(
    request, protocol, collection, local_build, link
):
    store = _store(request, protocol)
    src, images = collection
    source, output = _buckets(store, src, "worker-faults")
    lost = "fox/fox_0002.jpg"
    transient, tried = _first_reads_fail()

    def fail(method, target):  # TRANSIENT's first reads fail; `lost` fails for good
        if request_kind(method, target) == "read" and (
            urllib.parse.quote(lost, safe="") in target or lost in target
        ):
            return 403
        return transient(method, target)

    proxy = link(store)
    proxy.fault, readers = _readers(proxy, source, fail)
    result = build(_config(f"{source}/**", output), [])
    proxy.fault = None
    assert all(tried[relpath] == 2 for relpath in TRANSIENT), tried  # failed, then retried
    assert None not in readers and os.getpid() not in readers, readers
    files = _objects(output)
    report = {r["relpath"]: r for r in map(json.loads, files[REPORT_FILE].decode().splitlines())}
    assert report[lost]["reason"] == "read_error"
    assert result.manifest["inputs"]["written"] == len(images) - 1
    assert _shards(files).keys() == local_build[1].keys()


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_dedup_hashes_through_the_async_reader_with_retries(
    request, protocol, collection, local_build, link, monkeypatch
):
    # The shards are written in this process, whose threads are counted below; a build would
    # write them in processes of its own.
    monkeypatch.setattr(pipeline, "shard_processes", lambda config, options: 0)
    store = _store(request, protocol)
    src, images = collection
    source, output = _buckets(store, src, "hashed")
    # --dedup reads each image twice: for its hash, then for its shard. The hash's first try
    # fails; its retry and the shard's read succeed.
    fault, seen = _first_reads_fail()
    proxy = link(store)
    proxy.fault = fault
    proxy.delay = 0.02
    # Reads in flight wait on the event loop, not on a thread each: only the shard writers'
    # few checking threads exist (64 reads in flight used to hold 64 threads), and none with
    # one core, where each shard's images are checked on the thread that writes it.
    most_threads, done = [0], threading.Event()

    def count_threads():
        while not done.wait(0.01):
            named = [t for t in threading.enumerate() if t.name.startswith("read-ahead")]
            most_threads[0] = max(most_threads[0], len(named))

    sampler = threading.Thread(target=count_threads, daemon=True)
    sampler.start()
    try:
        result = build(_config(f"{source}/**", output, dedup=True), [])
    finally:
        done.set()
        sampler.join()
        proxy.delay = 0
        store.proxy.fault = None
    assert all(seen[relpath] == 3 for relpath in TRANSIENT), seen
    assert result.manifest["inputs"]["written"] == len(images)
    # The shard writers' reads: every image, and the truncated one, read and refused.
    assert result.manifest["work"]["reads"] == len(images) + 1
    assert proxy.max_in_flight > 4, "reads overlap"
    if usable_cores() > 1:
        assert 0 < most_threads[0] <= worker_threads()
    else:
        assert most_threads[0] == 0


@pytest.mark.parametrize("protocol", ["s3", "gs"])
def test_an_object_failing_for_good_with_a_5xx_is_reported_in_seconds(
    request, protocol, collection, link
):
    store = _store(request, protocol)
    src, images = collection
    source, output = _buckets(store, src, "down")
    lost = "fox/fox_0002.jpg"
    fault, seen = _reads_of([lost], lambda relpath, n: 503)
    link(store).fault = fault
    started = time.monotonic()
    result = build(_config(f"{source}/**", output), [])
    took = time.monotonic() - started
    store.proxy.fault = None
    files = _objects(output)
    report = {r["relpath"]: r for r in map(json.loads, files[REPORT_FILE].decode().splitlines())}
    assert report[lost]["reason"] == "read_error"
    assert result.manifest["inputs"]["written"] == len(images) - 1
    # The store client's own retries, once: not multiplied by ours (138 s and 170 s when they were).
    assert took < 60, f"{seen[lost]} tries in {took:.0f} s"


def test_a_shard_the_store_refuses_ends_the_build_in_two_lines_and_resume_goes_on(
    request, collection, link, capsys
):
    """A shard upload the store refuses for good ended a build with Beam's 150-line traceback,
    and `build()` raised a bare RuntimeError; it is now one line naming the step and the
    store's reason, and the command that goes on from the shards that were finished."""
    store = _store(request, "s3")
    src, images = collection
    source, output = _buckets(store, src, "refused")
    flags = ["--name", "pets", "--min-shard-size", "40KB", "--max-shard-size", "120KB"]
    command = ["build", "--input", f"{source}/**", "--output", output, *flags]
    refused = re.compile(r"pets-train\.tfrecord-00001-of-\d{5}(\?|$)")
    lines = _failing(
        link(store),
        command,
        lambda method, target: (
            403 if method in ("PUT", "POST") and refused.search(target) else None
        ),
        capsys,
    )
    assert re.fullmatch(
        r"beam-tfrecord build: error: writing the shards failed: .*403.*; the shards it "
        r"finished are kept in " + re.escape(output),
        lines[-2],
    ), lines
    assert lines[-1].startswith("To go on from them: ") and lines[-1].endswith(" --resume")
    assert main([*command, "--resume"]) == 0, capsys.readouterr().err
    manifest = json.loads(store.fs.cat_file(f"{output}/{MANIFEST_FILE}"))
    assert manifest["inputs"]["written"] == len(images)
    assert "kept" in capsys.readouterr().out


def test_a_shard_upload_that_times_out_in_a_shard_process_is_one_line_not_its_traceback(
    gcs_store,  # noqa: F811
    collection,
    link,
):
    """A shard's upload that timed out, in one of the command's shard processes, ended the build
    with "writing the shards failed: \"\"\" Traceback (most recent call last): File ..." and
    some 30 frames on one line: fsspec's FSTimeoutError has no words of its own, and the
    launcher's copy of it is raised from the worker's traceback as text."""
    src, _ = collection
    source, output = _buckets(gcs_store, src, "upload-silent")
    link(gcs_store).fault = lambda method, target: (
        "stall" if request_kind(method, target) == "upload" and ".tfrecord-" in target else None
    )
    command = [sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", f"{source}/**",
               "--output", output, "--name", "pets", "--min-shard-size", "10KB",
               "--max-shard-size", "20KB"]  # fmt: skip
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "FSSPEC_GS": '{"requests_timeout": 2}'},
        )
    finally:
        gcs_store.proxy.fault = None
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[-2] == (
        "beam-tfrecord build: error: writing the shards failed: a request to the store timed "
        f"out (FSTimeoutError); the shards it finished are kept in {output}"
    ), lines
    assert lines[-1].startswith("To go on from them: ") and lines[-1].endswith(" --resume")


def test_a_listing_the_store_stops_answering_ends_the_build_saying_nothing_was_written(
    request, collection, link, capsys, monkeypatch
):
    """A listing that timed out for good (after its tries) stopped the build before any shard:
    it said "the shards it finished are kept" and offered --resume, with nothing there. It
    says nothing was written, and gives the command to run again."""
    from beam_tfrecord import s3_list

    store = _store(request, "s3")
    src, _ = collection
    source, output = _buckets(store, src, "unlisted")
    monkeypatch.setattr(s3_list, "LIST_TRIES", 1)
    command = ["build", "--input", f"{source}/**", "--output", output, "--name", "pets"]
    lines = _failing(
        link(store),
        command,
        lambda method, target: (
            "stall" if request_kind(method, target) == "list" and "fox" in target else None
        ),
        capsys,
    )
    assert re.fullmatch(
        r"beam-tfrecord build: error: listing the inputs failed: the store was silent for "
        r"\d+ s; nothing was written",
        lines[-2],
    ), lines
    assert lines[-1].startswith("To try again: ") and "--resume" not in lines[-1], lines


def _failing(proxy, command: list[str], fault, capsys) -> list[str]:
    """The lines a command that fails (exit status 1) prints on stderr, with `fault` at the
    store's proxy while it runs; none of them a traceback's."""
    proxy.fault = fault
    try:
        assert main(command) == 1
    finally:
        proxy.fault = None
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()


def _short_silences(monkeypatch) -> None:
    """The default limit on a gs:// request's silence, put in place anew at 1 s, not 60 s."""
    settings = fsspec.config.conf.setdefault("gs", {})
    monkeypatch.setitem(settings, "requests_timeout", None)  # as it was, afterwards
    del settings["requests_timeout"]
    monkeypatch.setattr(store_timeouts, "SILENCE_SECONDS", 1)
    store_timeouts.apply_default()
    assert settings["requests_timeout"].sock_read == 1


def test_a_gs_filesystem_gives_up_on_a_silent_request_by_default():
    # gcsfs alone waits for ever (requests_timeout=None); a program that imported beam_tfrecord
    # gets a limit on silence, and keeps a limit of its own.
    program = (
        "import fsspec, beam_tfrecord.storage\n"
        "print(fsspec.filesystem('gs', token='anon').requests_timeout)\n"
        "print(fsspec.filesystem('gcs', token='anon', requests_timeout=7).requests_timeout)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "sock_read=60, sock_connect=30" in out[0]
    assert out[1] == "7"


def test_a_read_whose_connection_goes_silent_is_retried_on_another(
    request, collection, local_build, link, monkeypatch
):
    store = _store(request, "gs")
    _short_silences(monkeypatch)
    src, images = collection
    source, output = _buckets(store, src, "silent-once")
    stalled = "dog/dog_0003.jpg"
    fault, seen = _reads_of([stalled], lambda relpath, n: "stall" if n == 1 else None)
    link(store).fault = fault
    result = build(_config(f"{source}/**", output), [])
    store.proxy.fault = None
    assert seen[stalled] == 2  # the silent one, given up on; then an answered one
    assert result.manifest["inputs"]["written"] == len(images)
    assert _shards(_objects(output)) == local_build[1]


def test_an_object_whose_reads_never_get_an_answer_is_reported(
    request, collection, link, monkeypatch
):
    store = _store(request, "gs")
    _short_silences(monkeypatch)
    src, images = collection
    source, output = _buckets(store, src, "silent")
    lost = "fox/fox_0002.jpg"
    fault, seen = _reads_of([lost], lambda relpath, n: "stall")
    link(store).fault = fault
    result = build(_config(f"{source}/**", output), [])
    store.proxy.fault = None
    files = _objects(output)
    report = {r["relpath"]: r for r in map(json.loads, files[REPORT_FILE].decode().splitlines())}
    assert seen[lost] == 6, seen  # gcsfs's own tries, each given up after 1 s of silence
    assert report[lost]["reason"] == "read_error"
    assert "TimeoutError: the store was silent for 1 s" in report[lost]["message"]
    assert result.manifest["inputs"]["written"] == len(images) - 1


def test_an_object_unreadable_when_its_shard_is_written_is_reported(request, collection, link):
    store = _store(request, "gs")
    src, images = collection
    source, output = _buckets(store, src, "lost")
    lost = "fox/fox_0002.jpg"
    # Listed, then refused for good when its shard's writer reads it.
    fault, seen = _reads_of([lost], lambda relpath, n: 403)
    link(store).fault = fault
    result = build(_config(f"{source}/**", output), [])
    store.proxy.fault = None
    assert seen[lost] >= 1
    files = _objects(output)
    report = {r["relpath"]: r for r in map(json.loads, files[REPORT_FILE].decode().splitlines())}
    assert report[lost]["reason"] == "read_error"
    assert "cannot read" in report[lost]["message"]
    assert result.manifest["inputs"]["written"] == len(images) - 1
    written = {
        decode_example(record)["image/filename"][0].decode()
        for data in _shards(files).values()
        for record in read_records(io.BytesIO(data))
    }
    assert written == set(images) - {lost}


def _listings_of(store: ObjectStore) -> tuple[list[str], object]:
    """A proxy hook recording the listings sent to the store (their query strings, decoded)."""
    seen: list[str] = []

    def fault(method, target):
        if request_kind(method, target) == "list":
            seen.append(urllib.parse.unquote(target.partition("?")[2]))
        return None

    return seen, fault


def _recursive(listing: str) -> bool:
    """Whether a listing asks for everything below its prefix (no delimiter)."""
    params = dict(p.split("=", 1) for p in listing.split("&") if "=" in p)
    return not params.get("delimiter")


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_the_files_right_in_a_folder_take_one_listing_not_the_whole_collection(
    request, protocol, tmp_path
):
    """`data/**` is split into `data/*` and a task per subfolder; `data/*` must not list every
    object below `data/` (gcsfs's glob does) to find the few right in it. On a collection of
    millions that is thousands of requests, and their entries held in memory, for nothing."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('listing')}/data"
    names = ["top.jpg", "a/1.jpg", "a/b/2.jpg", "c/3.jpg", "notes.txt"]
    for name in names:
        store.fs.pipe_file(f"{root}/{name}", b"x" * len(name))
    seen, store.proxy.fault = _listings_of(store)
    try:
        here = list(expand_task(ListingTask(f"{root}/*", root), [".jpg"]))
        # The whole pattern, split and listed part by part as a build lists it.
        parts = split_task(ListingTask(f"{root}/**", root))
        whole = sorted(f.relpath for part in parts for f in expand_task(part, [".jpg"]))
        found = first_match(f"{root}/**", [".jpg"])
    finally:
        store.proxy.fault = None
    assert [f.relpath for f in here] == ["top.jpg"]
    assert whole == ["a/1.jpg", "a/b/2.jpg", "c/3.jpg", "top.jpg"]
    assert found is not None and found.relpath.endswith(".jpg")
    bucket_key = root.split("://", 1)[1].split("/", 1)[1]
    everything = [s for s in seen if _recursive(s) and f"prefix={bucket_key}/&" in s + "&"]
    assert not everything, f"listed all of {bucket_key}/: {everything}"


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_a_flat_folder_is_listed_in_key_ranges_at_once(request, protocol):
    """gcsfs's and s3fs's `ls` and `glob` gather every page of a listing before they return
    (about 3 KB an object while held), one page after another. A flat folder is listed in key
    ranges, several requests in flight, each name once, handed on in the store's order."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('flat')}/data"
    flat = {f"{root}/f{i:05d}.jpg": b"x" for i in range(5100)}
    store.fs.pipe({**flat, f"{root}/sub/1.jpg": b"x", f"{root}/.cache/2.jpg": b"x"})
    store.fs.invalidate_cache()
    seen, store.proxy.fault = _listings_of(store)
    store.proxy.delay = 0.02
    store.proxy.reset_counts()
    try:
        split = list(split_listing(ListingTask.for_pattern(f"{root}/**"), [".jpg"]))
        by_folder = len(seen)
        most_at_once = store.proxy.max_in_flight
        expanded = list(expand_task(ListingTask(f"{root}/*.jpg", root), [".jpg"]))
    finally:
        store.proxy.fault = None
        store.proxy.delay = 0
    files = [item for item in split if isinstance(item, SourceFile)]
    tasks = [item for item in split if isinstance(item, ListingTask)]
    assert [f.relpath for f in files] == sorted(name.rsplit("/", 1)[1] for name in flat)
    assert [t.pattern for t in tasks] == [f"{root}/sub/**"]
    assert sorted(f.relpath for f in expanded) == [f.relpath for f in files]
    assert most_at_once > 2, "ranges listed at once"
    # Six pages of names, and the cuts that came back empty: not a request a name.
    assert 6 <= by_folder <= 100, by_folder


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_a_build_lists_each_folder_of_a_bucket_once(request, protocol, tmp_path):
    """Splitting `data/**` lists a folder for its subfolders; that listing holds the folder's
    files too. The build listed every class folder a second time for its images (and `data`
    itself four times, with the check before the build): twice the requests of a collection's
    listing, which is thousands of pages at the scale this is for."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('once')}/data"
    names = ["top.jpg", "a/1.jpg", "a/2.jpg", "b/3.jpg", "c/sub/4.jpg", "c/.hidden/5.jpg"]
    rng = np.random.default_rng(5)
    for name in names:
        store.fs.pipe_file(f"{root}/{name}", jpeg_bytes(rng, 32, 24))
    store.fs.invalidate_cache()
    seen, store.proxy.fault = _listings_of(store)
    try:
        result = build(_config(f"{root}/**", str(tmp_path / "out")), [])
    finally:
        store.proxy.fault = None
    assert result.manifest["inputs"]["written"] == 5
    key = root.split("://", 1)[1].split("/", 1)[1]
    listed = Counter(
        params.get("prefix", "") + ("" if params.get("delimiter") else " (all below)")
        for params in (dict(p.split("=", 1) for p in s.split("&") if "=" in p) for s in seen)
        if params.get("prefix", "").startswith(key)
    )
    assert listed == {
        f"{key}/": 2,  # the check before the build, then the build's first split
        f"{key}/a/": 1,
        f"{key}/b/": 1,
        f"{key}/c/": 1,
        f"{key}/c/sub/ (all below)": 1,  # past the split levels: one listing of all below
    }, listed


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_the_folders_of_a_bucket_are_listed_at_once(request, protocol, tmp_path):
    """A DirectRunner runs a bundle's listing tasks on one thread: a bucket's class folders were
    listed one after another, a round trip each (ten folders, 0.6 s at 50 ms a request; a
    thousand, a minute). A worker now lists up to LISTINGS_AT_ONCE of them at once."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('at-once')}/data"
    rng = np.random.default_rng(6)
    for folder in range(6):
        store.fs.pipe_file(f"{root}/c{folder}/1.jpg", jpeg_bytes(rng, 32, 24))
    store.fs.pipe_file(f"{root}/c0/notes.txt", b"not an image")
    store.fs.pipe_file(f"{root}/c1/2.png", b"an image of another kind")
    store.fs.invalidate_cache()
    key = root.split("://", 1)[1].split("/", 1)[1]
    sent: list[float] = []  # when each class folder's listing reached the proxy

    def fault(method, target):
        query = urllib.parse.unquote(target.partition("?")[2])
        if request_kind(method, target) == "list" and f"prefix={key}/c" in query:
            sent.append(time.monotonic())
        return None

    store.proxy.fault = fault
    store.proxy.delay = 0.2
    try:
        result = build(_config(f"{root}/**", str(tmp_path / "out"), extensions=(".jpg",)), [])
    finally:
        store.proxy.fault = None
        store.proxy.delay = 0
    assert result.manifest["inputs"]["written"] == 6
    # The .png left out was counted, though listed on another thread than Beam's counters'.
    assert result.counters.get("files_other_extensions:.png") == 1, result.counters
    # The check before the build looks into the first folder for an image; then the build's
    # listing: one after another, each would wait for the last one's answer, 0.2 s apart.
    assert len(sent) == 7, sent
    listing = sent[1:]
    assert max(listing) - min(listing) < 0.15, [round(t - min(listing), 3) for t in listing]


@pytest.mark.parametrize("protocol", ["gs", "s3"])
@pytest.mark.parametrize("given", ["data/**", "data/cls", "data/*/*.jpg"])
def test_an_object_named_for_a_folder_does_not_list_its_images_twice(request, protocol, given):
    """The GCS console's "Create folder" leaves an empty object named `data/cls/`; gcsfs then
    lists `data/cls` as a folder inside itself, and a split listing went into it again: its
    images were written two or three times, in several splits, with the books balanced."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('marker')}/data"
    for name in ["cls/", "cls/z.jpg", "cls/sub/", "cls/sub/y.jpg", "top.jpg", "other/x.jpg"]:
        store.fs.pipe_file(f"{root}/{name}", b"" if name.endswith("/") else b"x")
    store.fs.invalidate_cache()
    url = f"{root.rsplit('/', 1)[0]}/{given}"
    parts = [ListingTask.for_pattern(url)]
    for _ in range(ListImages.SPLIT_LEVELS + 1):
        parts = [part for task in parts for part in split_task(task)]
    listed = sorted(f.url.rsplit("/data/", 1)[1] for t in parts for f in expand_task(t, [".jpg"]))
    expected = {
        "data/**": ["cls/sub/y.jpg", "cls/z.jpg", "other/x.jpg", "top.jpg"],
        "data/cls": ["cls/sub/y.jpg", "cls/z.jpg"],
        "data/*/*.jpg": ["cls/z.jpg", "other/x.jpg"],
    }[given]
    assert listed == expected


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_a_listing_task_leaves_nothing_of_its_listing_in_the_filesystem_cache(request, protocol):
    """gcsfs and s3fs keep every listing for the life of the filesystem object, which a worker
    shares between its listing tasks: a worker that lists a million objects would keep them."""
    store = _store(request, protocol)
    root = f"{store.new_bucket('cache')}/data"
    for i in range(30):
        store.fs.pipe_file(f"{root}/k{i % 3}/{i:02d}.jpg", b"x")
    fs = store.fs
    fs.invalidate_cache()
    listed = [
        f
        for part in split_task(ListingTask(f"{root}/**", root))
        for f in expand_task(part, [".jpg"])
    ]
    assert len(listed) == 30
    bucket = root.split("://", 1)[1].split("/", 1)[0]
    kept = [key for key in fs.dircache if key.startswith(bucket)]
    assert kept == []


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_resume_writes_again_a_shard_whose_left_out_image_was_uploaded_again(
    request, protocol, collection
):
    """A broken upload left out as truncated, then uploaded whole: --resume kept every shard,
    and the image stayed left out ("resumed: kept 6 of 6"), where a local build writes it. Its
    object, newer than the shard, now sends that shard to be written again; the others stay."""
    store = _store(request, protocol)
    src, images = collection
    source, output = _buckets(store, src, "mended")
    config = _config(f"{source}/**", output)
    first = build(config, [])
    assert first.manifest["inputs"]["skipped_by_reason"] == {"truncated": 1}
    fs, path = fsspec.core.url_to_fs(f"{source}/dog/broken.jpg")
    fs.pipe_file(path, images["dog/dog_0000.jpg"])  # whole now, and another size
    resumed = build(replace(config, resume=True), [])
    assert resumed.manifest["inputs"]["skipped"] == 0
    assert resumed.manifest["inputs"]["written"] == first.manifest["inputs"]["written"] + 1
    assert resumed.counters.get("shards_kept") == len(first.manifest["shards"]) - 1
