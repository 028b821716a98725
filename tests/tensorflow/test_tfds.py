"""TensorFlow Datasets loads a build: `tfds.builder_from_directory(OUTPUT)`, images and labels."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from imagegen import make_collection, png_bytes

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.manifest import discard_manifest
from beam_tfrecord.tfds_metadata import features_json, tfds_files

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    make_collection(src, {"cat": 15, "dog": 15}, seed=3)
    # A few PNGs among the JPEGs: TFDS decodes both through one Image feature.
    rng = np.random.default_rng(3)
    for name in ("cat", "dog"):
        for i in range(2):
            (src / name / f"{name}_png_{i}.png").write_bytes(png_bytes(rng, 40 + i, 30))
    return src


def _build(src: Path, out: Path, **settings) -> dict:
    result = build(
        BuildConfig.from_settings(
            dict(
                inputs=(f"{src}/**",),
                output=str(out),
                min_shard_size="20KB",
                max_shard_size="60KB",
                **settings,
            )
        ),
        [],
    )
    return result.manifest


@pytest.fixture(scope="module")
def labeled(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("build") / "pets"
    return out, _build(source, out)


def _examples(tfds, builder, split: str) -> list[dict]:
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def test_tfds_sees_the_splits_and_shards_of_the_manifest(tfds, labeled):
    out, manifest = labeled
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.name == "pets"
    assert manifest["splits"]["train"]["shards"] >= 2, "the test needs a split of several shards"
    assert set(builder.info.splits) == set(manifest["splits"])
    for split, info in manifest["splits"].items():
        shards = [s for s in manifest["shards"] if s["split"] == split]
        assert builder.info.splits[split].num_examples == info["examples"]
        assert builder.info.splits[split].num_bytes == info["bytes"]
        assert builder.info.splits[split].shard_lengths == [s["examples"] for s in shards]
        assert [Path(p).name for p in builder.info.splits[split].filepaths] == [
            s["file"] for s in shards
        ]


def test_class_label_names_are_those_of_labels_txt(tfds, labeled):
    out, _ = labeled
    builder = tfds.builder_from_directory(str(out))
    label = builder.info.features["image/class/label"]
    assert isinstance(label, tfds.features.ClassLabel)
    assert label.names == (out / "labels.txt").read_text().splitlines() == ["cat", "dog"]
    assert builder.info.supervised_keys == ("image/encoded", "image/class/label")


def test_every_split_yields_decoded_images_and_their_folders_labels(tfds, labeled):
    out, manifest = labeled
    builder = tfds.builder_from_directory(str(out))
    names = builder.info.features["image/class/label"].names
    seen = []
    formats = set()
    for split, info in manifest["splits"].items():
        examples = _examples(tfds, builder, split)
        assert len(examples) == info["examples"]
        for ex in examples:
            image = ex["image/encoded"]
            assert image.dtype == np.uint8
            assert image.shape == (ex["image/height"], ex["image/width"], 3)
            assert ex["image/channels"] == 3
            folder = ex["image/filename"].decode().split("/")[0]
            assert names[ex["image/class/label"]] == folder == ex["image/class/text"].decode()
            formats.add(ex["image/format"].decode())
            seen.append(ex["image/filename"].decode())
    assert formats == {"jpeg", "png"}
    assert len(seen) == len(set(seen)) == manifest["inputs"]["written"] == 34


def test_as_supervised_yields_image_and_label_pairs(tfds, labeled):
    out, manifest = labeled
    builder = tfds.builder_from_directory(str(out))
    pairs = list(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True)))
    assert len(pairs) == manifest["splits"]["train"]["examples"]
    assert all(image.ndim == 3 and label in (0, 1) for image, label in pairs)


def test_a_rebuild_first_withdraws_dataset_info_json(labeled, tmp_path):
    out, _ = labeled
    copy = tmp_path / "pets"
    shutil.copytree(out, copy)
    discard_manifest(str(copy))
    # To TFDS as to us, a folder half-way through being rebuilt holds no finished build.
    assert not (copy / "manifest.json").exists() and not (copy / "dataset_info.json").exists()


def test_gray_build_without_labels_loads_one_channel_images_and_no_labels(
    tfds, source, labeled, tmp_path
):
    out = tmp_path / "pets"
    shutil.copytree(labeled[0], out)
    manifest = _build(source, out, color="gray", labels="none", overwrite=True)
    assert not (out / "image.class.label.labels.txt").exists(), "the stale label names went"
    builder = tfds.builder_from_directory(str(out))
    assert "image/class/label" not in builder.info.features
    assert "image/class/text" not in builder.info.features
    assert builder.info.supervised_keys is None
    total = 0
    for split in manifest["splits"]:
        for ex in _examples(tfds, builder, split):
            assert ex["image/encoded"].shape == (ex["image/height"], ex["image/width"], 1)
            total += 1
    assert total == manifest["inputs"]["written"] == 34


@pytest.mark.parametrize("color, channels", [("rgb", 3), ("gray", 1), ("keep", None)])
@pytest.mark.parametrize("labels", ["dir", "none"])
def test_features_json_is_what_tfds_itself_writes(tfds, color, channels, labels):
    from google.protobuf import json_format

    features = {
        "image/encoded": tfds.features.Image(shape=(None, None, channels)),
        "image/format": tfds.features.Text(),
        "image/height": tfds.features.Scalar(dtype=np.int64),
        "image/width": tfds.features.Scalar(dtype=np.int64),
        "image/channels": tfds.features.Scalar(dtype=np.int64),
        "image/filename": tfds.features.Text(),
        "image/key/sha256": tfds.features.Text(),
    }
    if labels != "none":
        features["image/class/label"] = tfds.features.ClassLabel(names=["cat", "dog", "fox"])
        features["image/class/text"] = tfds.features.Text()
    expected = json_format.MessageToDict(tfds.features.FeaturesDict(features).to_proto())
    ours = features_json(channels=channels, num_classes=3 if labels != "none" else None)
    assert ours == expected
    manifest = {
        "name": "pets",
        "config": {"color": color, "labels": labels},
        "classes": ["cat", "dog", "fox"] if labels != "none" else [],
        "splits": {"train": {"examples": 0, "bytes": 0}},
        "shards": [],
    }
    assert json.loads(tfds_files(manifest)["features.json"]) == expected


@pytest.mark.parametrize("resize", ["exact:24x20", "20"])
def test_tfds_loads_a_build_of_raw_pixels(tfds, source, tmp_path, resize):
    """`--store raw` keeps pixels, not an image file: declared as TFDS's Image feature, every
    split failed on its first record ("Unknown image file format"). Of one size for every
    image, they load as the array; of sizes that vary, as their bytes, which the record's
    height, width and channels shape."""
    from beam_tfrecord.reader import Dataset

    out = tmp_path / "raw"
    manifest = _build(source, out, store="raw", resize=resize)
    builder = tfds.builder_from_directory(str(out))
    pixels = {item["filename"]: item["image"] for item in Dataset(str(out), "train", decode=True)}
    examples = _examples(tfds, builder, "train")
    assert len(examples) == manifest["splits"]["train"]["examples"] == len(pixels)
    for example in examples:
        encoded = example["image/encoded"]
        shape = tuple(int(example[f"image/{k}"]) for k in ("height", "width", "channels"))
        if resize.startswith("exact"):
            assert encoded.shape == shape == (20, 24, 3)
        else:
            assert isinstance(encoded, bytes)
            encoded = np.frombuffer(encoded, np.uint8).reshape(shape)
        assert np.array_equal(encoded, pixels[example["image/filename"].decode()])
    if resize.startswith("exact"):
        pairs = list(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True)))
        assert pairs[0][0].shape == (20, 24, 3)
