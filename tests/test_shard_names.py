"""Shard file names: formatted and parsed by one module, and a 100,000th shard known to every
reader of a build folder (the reader, `verify`, resume, the manifest's clean-up)."""

from __future__ import annotations

import fsspec
import pytest
from imagegen import make_collection

from beam_tfrecord.build_folder import missing_shards, mixed_sets, shard_names
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.codec.record_index import INDEX_DIR, INDEX_SUFFIX
from beam_tfrecord.entries import ImageEntry, ShardSpec
from beam_tfrecord.images import ImagePolicy
from beam_tfrecord.manifest import is_build_file
from beam_tfrecord.planning import Preparer
from beam_tfrecord.reader import list_shards
from beam_tfrecord.report import SHARD_REPORT_SUFFIX, SHARD_REPORTS_DIR
from beam_tfrecord.shard_names import (
    ShardName,
    is_shard_name,
    parse_shard_name,
    shard_file_name,
    tfds_filepath_template,
)
from beam_tfrecord.shard_writer import write_shard
from beam_tfrecord.splits import shuffle_key
from beam_tfrecord.storage import temporary_name
from beam_tfrecord.verification import incomplete_builds

# More shards than five digits count: 100,001 of them, the last one's index 100,000.
MANY = 100_001
LAST = "ds-train.tfrecord-100000-of-100001"


def test_names_are_tfds_style():
    assert shard_file_name("flowers", "train", 3, 12) == "flowers-train.tfrecord-00003-of-00012"
    assert shard_file_name("ds", "train", 100_000, MANY) == LAST
    assert tfds_filepath_template("my-ds.v2") == "my-ds.v2-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("flowers-train.tfrecord-00003-of-00012", ShardName("flowers-train", 3, 12)),
        (LAST, ShardName("ds-train", 100_000, MANY)),
        ("a.b-test.tfrecord-00000-of-00001", ShardName("a.b-test", 0, 1)),
        ("flowers-train.tfrecord-0003-of-00012", None),  # fewer than five digits
        ("flowers-train.tfrecord-00003-of-00012.index", None),
        (temporary_name("flowers-train.tfrecord-00003-of-00012"), None),
        ("manifest.json", None),
    ],
)
def test_parse_is_the_inverse_of_format(name, parsed):
    assert parse_shard_name(name) == parsed
    assert is_shard_name(name) == (parsed is not None)
    if parsed is not None:
        assert str(parsed) == name
        assert shard_file_name("x", "y", parsed.index, parsed.count).endswith(name[-20:])


def test_a_suffix_is_matched_after_a_whole_shard_name():
    assert is_shard_name(LAST + INDEX_SUFFIX, suffix=INDEX_SUFFIX)
    assert not is_shard_name("x" + INDEX_SUFFIX, suffix=INDEX_SUFFIX)
    assert is_shard_name(LAST + ".anything", suffix="")
    assert not is_shard_name(temporary_name(LAST), suffix="")


def test_the_100000th_shard_is_known_to_build_folders_and_clean_up():
    names = [shard_file_name("ds", "train", i, MANY) for i in range(MANY)]
    assert names[-1] == LAST
    assert shard_names(["out/" + n for n in reversed(names[-3:])]) == names[-3:]  # by index
    assert missing_shards(names) == []
    assert missing_shards(names[:-1]) == [LAST]
    assert mixed_sets([LAST, "ds-train.tfrecord-00000-of-00002"]) == {
        "ds-train.tfrecord": {2: 1, MANY: 1}
    }
    assert is_build_file(LAST)
    assert is_build_file(f"{INDEX_DIR}/{LAST}{INDEX_SUFFIX}")
    assert is_build_file(f"{SHARD_REPORTS_DIR}/{LAST}{SHARD_REPORT_SUFFIX}")


@pytest.fixture
def many_shards():
    """A build folder without a manifest holding 100,001 (empty) shards, in memory."""
    fs = fsspec.filesystem("memory")
    folder = "/many-shards"
    fs.pipe({f"{folder}/{shard_file_name('ds', 'train', i, MANY)}": b"" for i in range(MANY)})
    yield fs, folder
    # Not fs.rm(folder, recursive=True): the memory filesystem's is quadratic in the files.
    for path in [p for p in fs.store if p.startswith(folder + "/")]:
        del fs.store[path]
    fs.pseudo_dirs[:] = [d for d in fs.pseudo_dirs if d.strip("/") != folder.strip("/")]


def test_the_100000th_shard_is_read_and_verified(many_shards):
    fs, folder = many_shards
    shards = list_shards(f"memory://{folder}", split="train")
    assert len(shards) == MANY
    assert shards[-1].url.endswith("/" + LAST)
    assert incomplete_builds([f"memory://{folder}"]) == [
        (
            f"memory://{folder}",
            [shard_file_name("ds", "train", i, MANY) for i in range(MANY)],
            [],
            {},
        )
    ]
    fs.rm(f"{folder}/{LAST}")
    with pytest.raises(FileNotFoundError, match=LAST):
        list_shards(f"memory://{folder}", split="train")
    [(_, _, gaps, _)] = incomplete_builds([f"memory://{folder}"])
    assert gaps == [LAST]


def test_the_100000th_shard_is_written_and_resumed(tmp_path):
    """The writer publishes shard 100,000 under its six-digit name, and a resumed build finds
    it there and keeps it."""
    src = tmp_path / "src"
    images = make_collection(src, {"a": 3}, seed=5)
    entries = [
        ImageEntry(
            str(src / relpath),
            relpath,
            len(data),
            "train",
            shuffle_key(relpath, 0),
            "a",
            0,
            Preparer.record_size(len(data), relpath, 0, "a"),
        )
        for relpath, data in sorted(images.items())
    ]
    spec = ShardSpec(str(tmp_path / "out"), LAST, "train", 100_000, MANY)
    result, _ = write_shard(spec, entries, ImagePolicy())
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_file()) == [LAST]
    assert len(list(read_records(str(tmp_path / "out" / LAST)))) == result.examples == 3
    assert shard_names(str(p) for p in (tmp_path / "out").iterdir()) == [LAST]
    again, _ = write_shard(spec, entries, ImagePolicy(), resume=True)
    assert again.resumed and (again.examples, again.bytes) == (result.examples, result.bytes)


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("fruits-train.tfrecord-00000-of-00002", "train"),
        ("my-data.v2-validation.tfrecord-00003-of-00010", "validation"),  # a name with "-"
        ("train.tfrecord-00000-of-00001", None),  # another tool's name, of no split
    ],
)
def test_a_shard_name_gives_its_split(name, split):
    assert parse_shard_name(name).split == split
