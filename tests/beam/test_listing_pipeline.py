"""Listing at scale through the real pipeline: on the launcher, on the workers, or from a list."""

from __future__ import annotations

import io
import re
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig

pytestmark = pytest.mark.slow
SHARD_RE = re.compile(r"^ds-[a-z]+\.tfrecord-\d{5}-of-\d{5}$")


def _shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if SHARD_RE.match(p.name)}


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> tuple[Path, list[str]]:
    """10,200 small JPEGs in 3 x 17 x 4 nested folders (the class is the top folder)."""
    root = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(0)
    variants = []
    for _ in range(64):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
            out, "JPEG", quality=50
        )
        variants.append(out.getvalue())
    relpaths = []
    i = 0
    for cls in ("ant", "bee", "cow"):
        for group in range(17):
            for sub in range(4):
                folder = root / cls / f"g{group:02d}" / f"s{sub}"
                folder.mkdir(parents=True)
                for _ in range(50):
                    name = f"{cls}/g{group:02d}/s{sub}/img{i:05d}.jpg"
                    (root / name).write_bytes(variants[i % len(variants)])
                    relpaths.append(name)
                    i += 1
    return root, relpaths


def _config(out: Path, **settings) -> BuildConfig:
    return BuildConfig.from_settings(
        dict(output=str(out), name="ds", labels="regex:^([a-z]+)/", validate="header",
             min_shard_size="200KB", max_shard_size="600KB", **settings)
    )  # fmt: skip


def test_same_shards_whether_listed_on_the_launcher_or_in_the_pipeline(many_files, tmp_path):
    root, relpaths = many_files
    assert len(relpaths) >= 10_000
    on_workers = build(_config(tmp_path / "pipeline", inputs=(f"{root}/**",)), [])
    on_launcher = build(
        _config(tmp_path / "launcher", inputs=(f"{root}/**",), listing="launcher"), []
    )
    assert on_workers.manifest["inputs"]["written"] == len(relpaths)
    assert on_workers.manifest["shards"] == on_launcher.manifest["shards"]
    shards = _shards(tmp_path / "pipeline")
    assert len(shards) > 10
    assert shards == _shards(tmp_path / "launcher")


def test_input_list_builds_the_same_dataset_as_the_glob(many_files, tmp_path):
    root, relpaths = many_files
    subset = relpaths[::7]
    listing = root / "subset.csv"  # beside the images: paths in it are relative to its folder
    listing.write_text("path,label\n" + "".join(f"{p},{p.split('/')[0]}\n" for p in subset))
    from_list = build(_config(tmp_path / "list", input_list=str(listing)), [])
    assert from_list.manifest["inputs"]["written"] == len(subset)
    # The same files by glob: the shards are byte-identical, labels from the list or the folders.
    globbed = tmp_path / "globbed"
    for p in subset:
        (globbed / p).parent.mkdir(parents=True, exist_ok=True)
        (globbed / p).write_bytes((root / p).read_bytes())
    from_glob = build(_config(tmp_path / "glob", inputs=(f"{globbed}/**",)), [])
    assert from_glob.manifest["shards"] == from_list.manifest["shards"]


def test_linked_folders_and_files_are_built_and_a_broken_link_is_reported(tmp_path):
    """A collection assembled from links: each image behind a link is written under the link's
    name (its folder is its label), and a link to nothing is in the report, not lost."""
    import json
    import shutil

    real = tmp_path / "real"
    shutil.copytree("samples/fruits/apple", real / "apple")
    shutil.copytree("samples/fruits/banana", tmp_path / "elsewhere" / "banana")
    source = tmp_path / "source"
    source.mkdir()
    (source / "apple").symlink_to(real / "apple")  # a linked folder
    (source / "banana").mkdir()
    bananas = sorted((tmp_path / "elsewhere" / "banana").iterdir())
    for image in bananas:  # linked files
        (source / "banana" / image.name).symlink_to(image)
    (source / "banana" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    (source / "apple-again").symlink_to(source)  # a loop: followed once, to no end

    result = build(
        BuildConfig.from_settings(
            dict(input=[str(source)], output=str(tmp_path / "out"), name="ds", labels="dir")
        ),
        [],
    )
    apples = [p for p in (real / "apple").iterdir()]
    inputs = result.manifest["inputs"]
    assert inputs["listed"] == len(apples) + len(bananas) + 1
    assert inputs["written"] + inputs["skipped"] == inputs["listed"] and not inputs["unaccounted"]
    report = [json.loads(line) for line in (tmp_path / "out" / "report.jsonl").open()]
    gone = [r for r in report if r["relpath"] == "banana/gone.jpg"]
    assert len(gone) == 1 and gone[0]["reason"] == "vanished", report
    assert "a link to" in gone[0]["message"] and "nowhere.jpg" in gone[0]["message"]
    assert (tmp_path / "out" / "labels.txt").read_text().split() == ["apple", "banana"]


def test_a_named_pipe_among_the_images_is_reported_and_never_waited_on(tmp_path):
    """A named pipe (or socket, or device) with an image's name is listed and reported as
    unreadable, not lost from the books, and not opened: a plain open would wait for a writer
    for ever."""
    import json
    import os
    import shutil

    source = tmp_path / "source"
    shutil.copytree("samples/fruits/apple", source / "apple")
    os.mkfifo(source / "apple" / "pipe.jpg")
    result = build(_config(tmp_path / "out", inputs=(f"{source}/**",)), [])
    inputs = result.manifest["inputs"]
    assert inputs["listed"] == len(list((source / "apple").iterdir()))
    assert inputs["written"] + inputs["skipped"] == inputs["listed"] and not inputs["unaccounted"]
    report = [json.loads(line) for line in (tmp_path / "out" / "report.jsonl").open()]
    [pipe] = [r for r in report if r["relpath"] == "apple/pipe.jpg"]
    assert (pipe["action"], pipe["reason"]) == ("skipped", "read_error")
    assert (
        pipe["message"]
        == f"cannot read: {str(source / 'apple' / 'pipe.jpg')!r} is a named pipe, not a file"
    )


def test_a_file_named_two_ways_is_one_input_written_once(tmp_path):
    """`src/cat/..` is `src`, and a list line `/abs/src/cat/a.jpg` is the file that `cat/a.jpg`
    names beside the list: each file is written once (it was twice, in two splits), and an
    output beside the input reached through `..` is not taken to be inside it."""
    src = tmp_path / "src"
    names = [f"{cls}/{i}.jpg" for cls in ("cat", "dog") for i in range(3)]
    for i, name in enumerate(names):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(src / name, "JPEG")
    twice = build(
        _config(f"{src}/../out1", inputs=(str(src), f"{src}/cat/../../src/**")), []
    )  # fmt: skip
    assert twice.manifest["inputs"]["listed"] == len(names)
    assert twice.manifest["inputs"]["written"] == len(names)
    assert (tmp_path / "out1" / "manifest.json").exists()

    listing = src / "list.csv"
    listing.write_text("".join(f"{n}\n{src / n}\n./{n}\n" for n in names))
    listed = build(_config(tmp_path / "out2", input_list=str(listing)), [])
    assert listed.manifest["inputs"]["written"] == len(names)


def test_a_local_build_lists_its_folders_in_its_processes_and_finds_the_same(
    many_files, tmp_path, monkeypatch, caplog
):
    """A local build whose shard processes have started lists its folders in them, while the
    launcher labels and plans what they found: the same inputs, the same count of images of
    another kind left out, the same shards as a build that lists on the launcher."""
    import logging
    import shutil

    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_tfrecord.beam import pipeline, writing

    root, _ = many_files
    source = tmp_path / "source"
    for cls in ("ant", "bee"):
        shutil.copytree(root / cls / "g00", source / cls / "g00")
        (source / cls / "g00" / "s0" / "other.png").write_bytes(b"not read")
        (source / cls / "g00" / "s1" / ".hidden.jpg").write_bytes(b"never listed")
    monkeypatch.setattr(pipeline, "PROCESSES_MIN_BYTES", 1)  # start them for a small build
    monkeypatch.setattr(writing, "PROCESSES_MIN_BYTES", 1)
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    config = _config(tmp_path / "here", inputs=(f"{source}/**",), extensions=".jpg")
    if not pipeline.shard_processes(config, PipelineOptions([])):
        pytest.skip("this machine gives the build no shard processes")
    here = build(config, [])
    assert "listing folders in 2 worker processes" in caplog.text
    there = build(replace(config, output=str(tmp_path / "there"), listing="launcher"), [])
    assert here.manifest["inputs"]["written"] == 2 * 4 * 50
    assert here.manifest["inputs"] == there.manifest["inputs"]
    assert here.counters.get("files_other_extensions:.png") == 2, here.counters
    assert _shards(tmp_path / "here") == _shards(tmp_path / "there")


def test_a_large_listing_comes_back_from_its_process_through_a_file(tmp_path, monkeypatch):
    """A worker's listing of many files comes back as a file's path, not megabytes through the
    executor's pipe: the launcher reads the same batches from it, and the file goes."""
    from beam_tfrecord import shard_processes
    from beam_tfrecord.listing import ListingTask

    for i in range(3000):
        (tmp_path / f"{i:04d}.jpg").write_bytes(b"x")
    (tmp_path / "a.png").write_bytes(b"x")
    task = ListingTask.for_pattern(f"{tmp_path}/*")
    whole = shard_processes._list(task, (".jpg",))
    assert not isinstance(whole, str)
    monkeypatch.setattr(shard_processes, "_RESULT_SENT_WHOLE", 100)
    path = shard_processes._list(task, (".jpg",))
    assert isinstance(path, str) and Path(path).exists()
    assert shard_processes.listed(path) == whole
    assert not Path(path).exists()
    batches, left = whole
    assert left == {".png": 1} and len(batches) == 2  # 3,000 files: two batches of 2,048
    # One a failed bundle leaves unread goes too.
    unread = Future()
    unread.set_result(shard_processes._list(task, (".jpg",)))
    assert Path(unread.result()).exists()
    shard_processes.drop_listing(unread)
    assert not Path(unread.result()).exists()


def test_files_the_processes_list_are_gathered_into_full_batches(tmp_path):
    """A worker process sends each listing task's files back as that task's batches: 120
    folders of five files would be 120 elements of five. The launcher gathers them into full
    batches again, as its own listing does."""
    import apache_beam as beam

    from beam_tfrecord.beam.pipeline import LocalRunner
    from beam_tfrecord.beam.transforms import ListImages
    from beam_tfrecord.shard_processes import discard_started, start_early

    for c in range(3):
        for g in range(40):
            folder = tmp_path / "src" / f"c{c}" / f"g{g:02d}"
            folder.mkdir(parents=True)
            for i in range(5):
                (folder / f"{i}.jpg").write_bytes(b"x")
    start_early(2)
    try:
        with beam.Pipeline(runner=LocalRunner()) as p:
            sources = (p | ListImages([f"{tmp_path}/src/**"], (".jpg",), in_processes=True))[
                "sources"
            ]
            sizes = sources | beam.Map(len) | beam.combiners.ToList()
            _ = sizes | beam.Map(_check_one_batch_of, 600)
    finally:
        discard_started()


def _check_one_batch_of(sizes: list[int], files: int) -> None:
    assert sizes == [files], sizes
