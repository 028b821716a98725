"""The image record layout: the features of one image's tf.train.Example, and its exact size."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from beam_tfrecord.example import encode_example
from beam_tfrecord.tfrecord import framed_size

__all__ = ["image_features", "image_record", "image_record_size", "serialized_size"]

# A bytes feature value may be given by its length alone when only the size is wanted.
Value = bytes | int | float


def image_features(
    *,
    encoded: bytes,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    filename: str,
    sha256: str,
    label: int | None = None,
    label_text: str | None = None,
) -> dict[str, list]:
    """The feature map of one image, in the layout TensorFlow's image tutorials and TFDS read."""
    features: dict[str, list] = {
        "image/encoded": [encoded],
        "image/format": [image_format.encode()],
        "image/height": [height],
        "image/width": [width],
        "image/channels": [channels],
        "image/filename": [filename.encode("utf-8", "surrogateescape")],
        "image/key/sha256": [sha256.encode()],
    }
    if label is not None:
        features["image/class/label"] = [label]
        features["image/class/text"] = [(label_text or "").encode("utf-8")]
    return features


def image_record(encoded: bytes, **fields) -> bytes:
    """The serialized Example of one image; `image/key/sha256` is the digest of `encoded`."""
    sha256 = hashlib.sha256(encoded).hexdigest()
    return encode_example(image_features(encoded=encoded, sha256=sha256, **fields))


def image_record_size(encoded_size: int, **fields) -> int:
    """The framed TFRecord size of an image's record, computed without the image's bytes."""
    features = image_features(encoded=b"", sha256="0" * 64, **fields)
    sizes: dict[str, list] = dict(features)
    sizes["image/encoded"] = [_BytesOfLength(encoded_size)]
    return framed_size(serialized_size(sizes))


class _BytesOfLength(int):
    """Stands for a bytes value of this length in `serialized_size`."""


def _varint_len(value: int) -> int:
    if value < 0:
        return 10  # negative int64s are sign-extended to 64 bits on the wire
    return max(1, (value.bit_length() + 6) // 7)


def _delimited(length: int) -> int:
    # One-byte tag (every field number here is below 16) + length varint + payload.
    return 1 + _varint_len(length) + length


def _list_size(values: Sequence[Value]) -> int:
    if not values:
        return 0
    first = values[0]
    if isinstance(first, (bytes, _BytesOfLength)):
        return sum(_delimited(v if isinstance(v, _BytesOfLength) else len(v)) for v in values)
    if isinstance(first, float):
        return _delimited(4 * len(values))  # packed fixed32
    return _delimited(sum(_varint_len(v) for v in values))  # packed varints


def serialized_size(features: Mapping[str, Sequence[Value]]) -> int:
    """The serialized size of the Example `encode_example(features)` writes, without building it.

    Values are lists of bytes, ints or floats (one kind a list; an empty list counts as any kind).
    """
    features_size = 0
    for key, values in features.items():
        feature_size = _delimited(_list_size(values))
        entry_size = _delimited(len(key.encode("utf-8"))) + _delimited(feature_size)
        features_size += _delimited(entry_size)
    # An Example without features serializes to nothing at all, not to an empty Features field.
    return _delimited(features_size) if features else 0
