"""The image record layout: the features of one image's tf.train.Example, and its exact size."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence

from beam_tfrecord.codec.framing import framed_size

__all__ = [
    "encoded_record_size",
    "image_record",
    "image_record_parts",
    "image_record_size",
    "other_fields_size",
    "sample_record",
    "serialized_size",
]

# A feature value as serialized_size takes it: a list holds one kind.
Value = bytes | int | float


def image_record(encoded: bytes, **fields: object) -> bytes:
    """The serialized Example of one image: `image_record_parts`, with the same keywords, joined.

    `image/key/sha256` is the digest of `encoded`. The bytes are exactly those of the Example
    built with protobuf and serialized deterministically (map keys sorted), which the tests
    hold it to.
    """
    return b"".join(image_record_parts(encoded, **fields))  # type: ignore[arg-type]


def sample_record(*, labels: bool = True) -> bytes:
    """A record with the layout a build writes (with or without class features), placeholder
    values: what readers and the spec learn the layout from, so they cannot drift from it."""
    return image_record(
        b"",
        image_format="jpeg",
        height=1,
        width=1,
        channels=3,
        filename="x",
        label=0 if labels else None,
        label_text="x" if labels else None,
    )


def image_record_parts(
    encoded: bytes,
    *,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    filename: str,
    label: int | None = None,
    label_text: str | None = None,
) -> tuple[bytes, bytes, bytes]:
    """`image_record` as (head, encoded, tail): the record is their concatenation.

    The hot path of every build. The wire format is written directly, and the image bytes are
    not copied into a message and out again, which cost more than the rest of the record.
    Thread-safe: a shard writer builds records on its read-ahead threads, where the SHA-256 of
    the image (the costliest step after decoding) runs beside the other images' work.
    """
    sha = hashlib.sha256(encoded).hexdigest().encode()
    size = len(encoded)
    # image/encoded: entry{key, value: Feature{bytes_list: BytesList{value: <image>}}}
    value_size = _delimited(size)
    feature_size = _delimited(value_size)
    entry_size = _KEY_SIZES["image/encoded"] + _delimited(feature_size)
    # Map entries in key order, as deterministic serialization writes them: those before the
    # image are the same for every image of a class (cached), and so is the digest's framing.
    head = b"".join(
        (
            _head_entries(channels, label, label_text),
            b"\x0a", _varint(entry_size), _ENCODED_KEY, b"\x12", _varint(feature_size),
            b"\x0a", _varint(value_size), b"\x0a", _varint(size),
        )
    )  # fmt: skip
    after = b"".join(
        (
            _bytes_entry(_FILENAME, filename.encode("utf-8", "surrogateescape")),
            _format_entry(image_format),
            _int_entry(_HEIGHT, height),
            _SHA256_ENTRY_HEAD,
            sha,
            _int_entry(_WIDTH, width),
        )
    )
    features_size = len(head) + size + len(after)
    return b"\x0a" + _varint(features_size) + head, encoded, after


@functools.lru_cache(maxsize=4096)  # a build's images share a few channel counts and classes
def _head_entries(channels: int, label: int | None, label_text: str | None) -> bytes:
    """The map entries that come before image/encoded: channels, and the class if any."""
    entries = [_int_entry(_CHANNELS, channels)]
    if label is not None:
        entries.append(_int_entry(_LABEL, label))
        entries.append(_bytes_entry(_TEXT, (label_text or "").encode("utf-8")))
    return b"".join(entries)


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64  # int64s are sign-extended to 64 bits on the wire
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _bytes_entry(key: bytes, value: bytes) -> bytes:
    """A map entry whose Feature is a one-value BytesList; `key` is the serialized key field."""
    listed = b"\x0a" + _varint(len(value)) + value
    feature = b"\x0a" + _varint(len(listed)) + listed
    entry = key + b"\x12" + _varint(len(feature)) + feature
    return b"\x0a" + _varint(len(entry)) + entry


@functools.lru_cache(maxsize=16)
def _format_entry(image_format: str) -> bytes:
    return _bytes_entry(_FORMAT, image_format.encode())


@functools.lru_cache(maxsize=4096)  # channels, heights, widths and class ids repeat
def _int_entry(key: bytes, value: int) -> bytes:
    """A map entry whose Feature is a one-value (packed) Int64List."""
    packed = _varint(value)
    listed = b"\x0a" + _varint(len(packed)) + packed
    feature = b"\x1a" + _varint(len(listed)) + listed
    entry = key + b"\x12" + _varint(len(feature)) + feature
    return b"\x0a" + _varint(len(entry)) + entry


_ONE_BYTE = [bytes((i,)) for i in range(128)]


def _key(name: str) -> bytes:
    return b"\x0a" + _varint(len(name)) + name.encode()


_CHANNELS, _LABEL, _TEXT = (
    _key("image/channels"),
    _key("image/class/label"),
    _key("image/class/text"),
)
_ENCODED_KEY, _FILENAME, _FORMAT = (
    _key("image/encoded"),
    _key("image/filename"),
    _key("image/format"),
)
_HEIGHT, _SHA256, _WIDTH = _key("image/height"), _key("image/key/sha256"), _key("image/width")
# The image/key/sha256 entry up to its value: a hex SHA-256 is always 64 bytes.
_SHA256_ENTRY_HEAD = _bytes_entry(_SHA256, bytes(64))[:-64]


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
    others = other_fields_size(
        len(image_format.encode()),
        height,
        width,
        channels,
        len(filename.encode("utf-8", "surrogateescape")),
        label,
        None if label is None else len((label_text or "").encode("utf-8")),
    )
    return encoded_record_size(encoded_size, others)


def encoded_record_size(encoded_size: int, others: int) -> int:
    """The framed size of a record of `encoded_size` image bytes whose other features take
    `others` bytes (`other_fields_size`).

    `image_record_size`'s arithmetic unrolled, as the planner sizes every image with it: the
    BytesList, the Feature, the map entry, the Features message, then the framing.
    """
    inner = 1 + ((encoded_size.bit_length() + 6) // 7 or 1) + encoded_size
    feature = 1 + (inner.bit_length() + 6) // 7 + inner
    entry = _ENCODED_KEY_SIZE + 1 + (feature.bit_length() + 6) // 7 + feature
    entry = 1 + (entry.bit_length() + 6) // 7 + entry
    payload = entry + others
    return framed_size(1 + (payload.bit_length() + 6) // 7 + payload)


@functools.lru_cache(maxsize=4096)  # a build's records differ mostly in their image's size
def other_fields_size(
    format_size: int,
    height: int,
    width: int,
    channels: int,
    filename_size: int,
    label: int | None,
    label_text_size: int | None,
) -> int:
    """The bytes of a record's features other than image/encoded."""
    size = (
        _entry("image/format", _bytes_feature(format_size))
        + _entry("image/height", _int_feature(height))
        + _entry("image/width", _int_feature(width))
        + _entry("image/channels", _int_feature(channels))
        + _entry("image/filename", _bytes_feature(filename_size))
        + _entry("image/key/sha256", _bytes_feature(64))
    )
    if label is not None:
        size += _entry("image/class/label", _int_feature(label))
        size += _entry("image/class/text", _bytes_feature(label_text_size or 0))
    return size


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


_ENCODED_KEY_SIZE = _KEY_SIZES["image/encoded"]


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
