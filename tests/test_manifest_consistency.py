"""A manifest whose figures contradict each other, or point outside its folder, is not a build's.

A build writes every figure of manifest.json from the same shards; one that disagrees was edited
or damaged since, and readers act on it: a shard listed twice was read twice, a shard filed under
another split was read with it, an index path was followed out of the folder. `verify` passed
all of these (exit 0).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.cli import main
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.manifest import ManifestError, parse_manifest
from beam_tfrecord.reader import Dataset


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("built") / "fruits"
    config = BuildConfig.from_settings(
        {"input": ["samples/fruits"], "output": str(out), "min_shard_size": "10KB",
         "max_shard_size": "30KB"}
    )  # fmt: skip
    build(config, [])
    return out


def _first(m):
    return m["shards"][0]


EDITS = {
    "a shard listed twice": (
        lambda m: m["shards"].append(copy.deepcopy(_first(m))),
        "it lists shard {first!r} twice",
    ),
    "a shard filed under a split it does not list": (
        lambda m: _first(m).update(split="valid"),
        "shard {first} is of split 'valid', which it does not list",
    ),
    "a split's examples": (
        lambda m: m["splits"]["train"].update(examples=m["splits"]["train"]["examples"] + 1),
        "split 'train' lists examples",
    ),
    "a split's shard count": (
        lambda m: m["splits"]["train"].update(shards=99),
        "split 'train' lists shards 99, but its shards hold",
    ),
    "a class count": (
        lambda m: m["splits"]["train"]["class_counts"].update(apple=99),
        "split 'train': its class_counts add up to",
    ),
    "a class renamed": (
        lambda m: m.update(classes=["pear", "banana", "cherry"]),
        "counts class 'apple', which its classes do not list",
    ),
    "the written count": (
        lambda m: m["inputs"].update(written=100),
        "inputs.written is 100, but its splits hold 45 examples",
    ),
    "a count given as text": (
        lambda m: _first(m).update(examples="9"),
        "shard {first}: examples '9' is not a count",
    ),
    "a checksum taken out": (
        lambda m: _first(m).update(crc32c=None),
        "shard {first}: crc32c None is not a CRC32C (8 hex digits)",
    ),
    "an index outside the folder": (
        lambda m: _first(m).update(index_file="../../etc/passwd"),
        "shard {first}: index_file '../../etc/passwd' is not a path in the build's folder",
    ),
    "a shard outside the folder": (
        lambda m: _first(m).update(file="../other/x.tfrecord"),
        "shard '../other/x.tfrecord' is not a file name in the build's folder",
    ),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_manifest_is_damaged_naming_what_disagrees(built, tmp_path, capsys, edit):
    change, says = EDITS[edit]
    folder = tmp_path / "edited"
    shutil.copytree(built, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    first = manifest["shards"][0]["file"]
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError) as err:
        parse_manifest(json.dumps(manifest), "manifest.json")
    assert says.format(first=first) in str(err.value)
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED  {folder}/manifest.json: not a build's manifest: " in out
    assert says.format(first=first) in out


def test_the_manifest_a_build_writes_is_consistent(built):
    text = (built / "manifest.json").read_text()
    assert parse_manifest(text, "manifest.json")["shards"]


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory):
    """`--labels none` builds: of a folder, and of an input list without labels."""
    root = tmp_path_factory.mktemp("unlabelled")
    listing = root / "photos.txt"
    listing.write_text(
        "".join(f"{p.resolve()}\n" for p in sorted(Path("samples/fruits").rglob("*.jpg")))
    )
    folders = []
    for name, source in (
        ("from-folder", {"input": ["samples/fruits"]}),
        ("from-list", {"input_list": str(listing)}),
    ):
        out = root / name
        build(BuildConfig.from_settings({**source, "output": str(out), "labels": "none"}), [])
        folders.append(out)
    return folders


def test_a_build_without_labels_is_whole_to_every_reader(unlabelled, capsys):
    # A check of class counts against examples called every --labels none build damaged,
    # and verify, spec, preview and Dataset refused it.
    for folder in unlabelled:
        manifest = parse_manifest((folder / "manifest.json").read_text(), "manifest.json")
        assert manifest["classes"] == []
        assert all(info["class_counts"] == {} for info in manifest["splits"].values())
        assert main(["verify", str(folder)]) == 0, capsys.readouterr().out
        assert main(["spec", str(folder)]) == 0, capsys.readouterr().out
        assert main(["preview", str(folder), "-o", str(folder.parent / f"{folder.name}.png")]) == 0
        records = list(Dataset(str(folder), "train"))
        assert records and all("image/class/label" not in r for r in records)
        capsys.readouterr()


def test_a_labelled_manifest_whose_class_counts_were_emptied_is_damaged(built):
    manifest = json.loads((built / "manifest.json").read_text())
    manifest["splits"]["train"]["class_counts"] = {}
    with pytest.raises(ManifestError, match="split 'train': its class_counts add up to 0"):
        parse_manifest(json.dumps(manifest), "manifest.json")
