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

import pytest

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.cli import main
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.manifest import ManifestError, parse_manifest


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
