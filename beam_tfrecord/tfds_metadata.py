"""TensorFlow Datasets metadata for a build: dataset_info.json and features.json, made without TFDS.

With these files beside the shards, `tfds.builder_from_directory(OUTPUT)` loads a build: images
decoded, labels as a ClassLabel with their names. The files are the JSON TFDS 4.9 itself writes
(`DatasetInfo.write_to_directory`); tests load a real build with TFDS to hold us to that.

TFDS reads the features of a record by the flat keys its FeaturesDict names, so the FeaturesDict
is keyed by our record keys as they are ("image/encoded", "image/class/label", ...) and a loaded
example is a dict with exactly the keys of the record table (docs/reading/index.md). Nested FeaturesDicts would
flatten to the same keys, but would load as `ex["image"]["class"]["label"]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from beam_tfrecord.shard_names import tfds_filepath_template

__all__ = [
    "DATASET_INFO_FILE",
    "FEATURES_FILE",
    "LABEL_NAMES_FILE",
    "TFDS_FILES",
    "TFDS_VERSION",
    "dataset_info_json",
    "features_json",
    "tfds_files",
]

DATASET_INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
# TFDS keeps a ClassLabel's names in a file beside features.json named after the feature's key,
# its "/" turned into "." (ClassLabel.save_metadata): features.json itself holds only the count.
LABEL_NAMES_FILE = "image.class.label.labels.txt"
TFDS_FILES = (DATASET_INFO_FILE, FEATURES_FILE, LABEL_NAMES_FILE)
# TFDS wants an x.y.z version; a build has no version of its own (its manifest says what it is).
TFDS_VERSION = "1.0.0"

_FEATURES = "tensorflow_datasets.core.features."
_CHANNELS = {"rgb": 3, "gray": 1, "keep": None}


def _text() -> dict[str, Any]:
    return {"pythonClassName": _FEATURES + "text_feature.Text", "text": {}}


def _int64() -> dict[str, Any]:
    return {
        "pythonClassName": _FEATURES + "scalar.Scalar",
        "tensor": {"dtype": "int64", "encoding": "none", "shape": {}},
    }


def features_json(
    *, channels: int | None, num_classes: int | None, raw: tuple[int, int] | bool = False
) -> dict[str, Any]:
    """The features.json of a build, as `tfds.features.FeaturesDict.to_proto()` writes it.

    Args:
        channels: the channels every image decodes to (3 for --color rgb, 1 for gray), or None
            when they vary (--color keep): TFDS then decodes each image to its own channels.
        num_classes: the number of classes, or None for a build without labels (--labels none),
            whose records have neither `image/class/label` nor `image/class/text`.
        raw: a build of raw pixels (--store raw): its (height, width) when every image has
            them (`--resize exact:WxH`) and `channels` is known, else True; False for one of
            image files. TFDS's Image feature would take raw pixels for an image file and fail
            on the first record: a fixed-size raw image is a uint8 Tensor stored as bytes, which
            TFDS decodes to its array; any other is the bytes themselves, a string Tensor
            (`tf.io.decode_raw`, then reshaped to the record's height, width and channels).
    """
    # int64 dimensions are strings in proto JSON; -1 is an unknown dimension.
    dims = ["-1", "-1", "-1" if channels is None else str(channels)]
    if raw is False:
        # No encoding format: TFDS then decodes with tf.image.decode_image, JPEG and PNG alike.
        image: dict[str, Any] = {
            "pythonClassName": _FEATURES + "image_feature.Image",
            "image": {"dtype": "uint8", "shape": {"dimensions": dims}},
        }
    elif raw is True or channels is None:
        image = {
            "pythonClassName": _FEATURES + "tensor_feature.Tensor",
            "tensor": {"dtype": "string", "encoding": "none", "shape": {}},
        }
    else:
        height, width = raw
        image = {
            "pythonClassName": _FEATURES + "tensor_feature.Tensor",
            "tensor": {
                "dtype": "uint8",
                "encoding": "bytes",
                "shape": {"dimensions": [str(height), str(width), str(channels)]},
            },
        }
    features: dict[str, Any] = {
        "image/encoded": image,
        "image/format": _text(),
        "image/height": _int64(),
        "image/width": _int64(),
        "image/channels": _int64(),
        "image/filename": _text(),
        "image/key/sha256": _text(),
    }
    if num_classes is not None:
        features["image/class/label"] = {
            "pythonClassName": _FEATURES + "class_label_feature.ClassLabel",
            "classLabel": {"numClasses": str(num_classes)},
        }
        features["image/class/text"] = _text()
    return {
        "featuresDict": {"features": features},
        "pythonClassName": _FEATURES + "features_dict.FeaturesDict",
    }


def dataset_info_json(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset_info.json of a build, from its manifest (see `manifest.build_manifest`)."""
    name = manifest["name"]
    config = manifest["config"]
    splits = []
    empty = []
    for split, info in manifest["splits"].items():
        lengths = [s["examples"] for s in manifest["shards"] if s["split"] == split]
        if not lengths:
            # TFDS lists a split of no shards, then fails to read it with "Instruction [] corresponds
            # to no data!", which names nothing. Left out, the others load (and "all" does), and
            # asking for it names it: "Unknown split 'validation'. Should be one of [...]".
            empty.append(split)
            continue
        splits.append(
            {
                "filepathTemplate": tfds_filepath_template(name),
                "name": split,
                "numBytes": str(info["bytes"]),
                "shardLengths": [str(n) for n in lengths],
            }
        )
    description = (
        "Images converted to TFRecord by beam-tfrecord; manifest.json holds the build's "
        "settings, counts and checksums."
    )
    if empty:
        many = len(empty) > 1
        description += (
            f" Split{'s' if many else ''} {', '.join(empty)} received no images and "
            f"{'are' if many else 'is'} left out here; manifest.json lists "
            f"{'them' if many else 'it'} with 0 examples."
        )
    info: dict[str, Any] = {
        "description": description,
        "fileFormat": "tfrecord",
        "moduleName": "beam_tfrecord",
        "name": name,
        "splits": splits,
        "version": TFDS_VERSION,
    }
    if config["labels"] != "none":
        # as_supervised=True then yields (image, label) pairs.
        info["supervisedKeys"] = {
            "tuple": {
                "items": [{"featureKey": "image/encoded"}, {"featureKey": "image/class/label"}]
            }
        }
    return info


def _raw_size(config: Mapping[str, Any]) -> tuple[int, int] | bool:
    """`features_json`'s `raw` for a build's config (the manifest's, with `store` and `resize`
    as their text: `exact:32x32`, `exact:32x32:pad`...)."""
    if config.get("store") != "raw":
        return False
    exact = re.fullmatch(r"exact:(\d+)x(\d+)(:\w+)?", str(config.get("resize") or ""))
    if exact is None:
        return True
    width, height = int(exact[1]), int(exact[2])
    return height, width


def tfds_files(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The TFDS files of a build and their text, by file name; a build without labels has no
    label names file."""
    config = manifest["config"]
    labeled = config["labels"] != "none"
    features = features_json(
        channels=_CHANNELS[config["color"]],
        num_classes=len(manifest["classes"]) if labeled else None,
        raw=_raw_size(config),
    )
    files = {
        # The layout TFDS writes: features.json indented by 4 and dataset_info.json by 2, keys
        # sorted, so a diff against a TFDS-written folder shows only what differs.
        FEATURES_FILE: json.dumps(features, indent=4, sort_keys=True),
        DATASET_INFO_FILE: json.dumps(dataset_info_json(manifest), indent=2, sort_keys=True),
    }
    if labeled:
        files[LABEL_NAMES_FILE] = "".join(f"{name}\n" for name in manifest["classes"])
    return files
