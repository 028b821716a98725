"""The image record layout: the features of one image's tf.train.Example, and its exact size."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from beam_tfrecord.example import Example
from beam_tfrecord.tfrecord import framed_size

__all__ = ["image_record", "image_record_size", "serialized_size"]

# A feature value as serialized_size takes it: a list holds one kind.
Value = bytes | int | float


def image_record(
    encoded: bytes,
    *,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    filename: str,
    label: int | None = None,
    label_text: str | None = None,
) -> bytes:
    """The serialized Example of one image; `image/key/sha256` is the digest of `encoded`.

    The hot path of every build: the message is filled field by field, with no type inference,
    and serialized deterministically (keys sorted) so that equal inputs give equal bytes.
    """
    example = Example()
    feature = example.features.feature
    feature["image/encoded"].bytes_list.value.append(encoded)
    feature["image/format"].bytes_list.value.append(image_format.encode())
    feature["image/height"].int64_list.value.append(height)
    feature["image/width"].int64_list.value.append(width)
    feature["image/channels"].int64_list.value.append(channels)
    feature["image/filename"].bytes_list.value.append(filename.encode("utf-8", "surrogateescape"))
    feature["image/key/sha256"].bytes_list.value.append(
        hashlib.sha256(encoded).hexdigest().encode()
    )
    if label is not None:
        feature["image/class/label"].int64_list.value.append(label)
        feature["image/class/text"].bytes_list.value.append((label_text or "").encode("utf-8"))
    return example.SerializeToString(deterministic=True)


def image_record_size(
    encoded_size: int,
    *,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    filename: str,
    label: int | None = None,
    label_text: str | None = None,
) -> int:
    """The framed TFRecord size of an image's record, computed without the image's bytes.

    Wire arithmetic specialised to the image layout (the planner calls it for every image);
    `serialized_size` is the general form, and tests hold both to real serialization.
    """
    size = (
        _entry("image/encoded", _bytes_feature(encoded_size))
        + _entry("image/format", _bytes_feature(len(image_format.encode())))
        + _entry("image/height", _int_feature(height))
        + _entry("image/width", _int_feature(width))
        + _entry("image/channels", _int_feature(channels))
        + _entry("image/filename", _bytes_feature(len(filename.encode("utf-8", "surrogateescape"))))
        + _entry("image/key/sha256", _bytes_feature(64))
    )
    if label is not None:
        size += _entry("image/class/label", _int_feature(label))
        size += _entry("image/class/text", _bytes_feature(len((label_text or "").encode("utf-8"))))
    return framed_size(_delimited(size))


def _bytes_feature(length: int) -> int:
    return _delimited(_delimited(length))  # Feature{bytes_list: BytesList{value: <length bytes>}}


def _int_feature(value: int) -> int:
    return _delimited(
        _delimited(_varint_len(value))
    )  # Feature{int64_list: Int64List{packed value}}


def _entry(key: str, feature_size: int) -> int:
    # A map entry {key, value}: its length prefix covers both, so it is summed before wrapping.
    return _delimited(_KEY_SIZES[key] + _delimited(feature_size))


def _varint_len(value: int) -> int:
    if value < 0:
        return 10  # negative int64s are sign-extended to 64 bits on the wire
    return max(1, (value.bit_length() + 6) // 7)


def _delimited(length: int) -> int:
    # One-byte tag (every field number here is below 16) + length varint + payload.
    return 1 + _varint_len(length) + length


_KEY_SIZES = {
    key: _delimited(len(key))
    for key in (
        "image/encoded", "image/format", "image/height", "image/width", "image/channels",
        "image/filename", "image/key/sha256", "image/class/label", "image/class/text",
    )
}  # fmt: skip


def _list_size(values: Sequence[Value]) -> int:
    if not values:
        return 0
    first = values[0]
    if isinstance(first, bytes):
        return sum(_delimited(len(v)) for v in values)
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
