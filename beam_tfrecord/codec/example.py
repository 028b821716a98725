"""tf.train.Example messages without TensorFlow: build, encode and decode them from plain values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

__all__ = [
    "BytesList",
    "Example",
    "Feature",
    "Features",
    "FloatList",
    "Int64List",
    "decode_example",
    "decode_example_kinds",
    "encode_example",
    "example_to_dict",
    "make_example",
]

# Kept in step with proto/example.proto (tests/codec/test_example.py compares the two). Our own
# package and file name, so TensorFlow's "tensorflow.Example" can live in the same process.
_PROTO_FILE = "beam_tfrecord/codec/proto/example.proto"
_PROTO_PACKAGE = "beam_tfrecord.v1"


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """Describes proto/example.proto in Python, so no protoc or generated code is needed."""
    field = descriptor_pb2.FieldDescriptorProto
    packed = descriptor_pb2.FieldOptions(packed=True)
    file = descriptor_pb2.FileDescriptorProto(
        name=_PROTO_FILE, package=_PROTO_PACKAGE, syntax="proto3"
    )

    def message(name: str) -> descriptor_pb2.DescriptorProto:
        return file.message_type.add(name=name)

    def ref(name: str) -> str:
        return f".{_PROTO_PACKAGE}.{name}"

    message("BytesList").field.add(
        name="value", number=1, type=field.TYPE_BYTES, label=field.LABEL_REPEATED
    )
    message("FloatList").field.add(
        name="value", number=1, type=field.TYPE_FLOAT, label=field.LABEL_REPEATED, options=packed
    )
    message("Int64List").field.add(
        name="value", number=1, type=field.TYPE_INT64, label=field.LABEL_REPEATED, options=packed
    )
    feature = message("Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate(
        [("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")],
        start=1,
    ):
        feature.field.add(
            name=name,
            number=number,
            type=field.TYPE_MESSAGE,
            type_name=ref(type_name),
            label=field.LABEL_OPTIONAL,
            oneof_index=0,
        )
    features = message("Features")
    # A map<string, Feature> is, on the wire and in descriptors, a repeated nested entry type.
    entry = features.nested_type.add(
        name="FeatureEntry", options=descriptor_pb2.MessageOptions(map_entry=True)
    )
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(
        name="value",
        number=2,
        type=field.TYPE_MESSAGE,
        type_name=ref("Feature"),
        label=field.LABEL_OPTIONAL,
    )
    features.field.add(
        name="feature",
        number=1,
        type=field.TYPE_MESSAGE,
        type_name=ref("Features.FeatureEntry"),
        label=field.LABEL_REPEATED,
    )
    message("Example").field.add(
        name="features",
        number=1,
        type=field.TYPE_MESSAGE,
        type_name=ref("Features"),
        label=field.LABEL_OPTIONAL,
    )
    return file


# A private pool: the default one is shared with every other protobuf user in the process.
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())


def _message_class(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PROTO_PACKAGE}.{name}"))


BytesList = _message_class("BytesList")
FloatList = _message_class("FloatList")
Int64List = _message_class("Int64List")
Feature = _message_class("Feature")
Features = _message_class("Features")
Example = _message_class("Example")

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Finite doubles at or beyond this round to infinity as float32 (2**128 less half an ulp).
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
_KIND_FIELDS = {"bytes": "bytes_list", "float": "float_list", "int64": "int64_list"}
_FIELD_KINDS = {field: kind for kind, field in _KIND_FIELDS.items()}
_LIST_FIELDS = {"BytesList": "bytes_list", "FloatList": "float_list", "Int64List": "int64_list"}


def _show(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _kind_of(value: Any) -> str | None:
    # bool is an int, and TensorFlow stores it as 0/1 in an Int64List.
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (bytes, str, bytearray, memoryview)):
        return "bytes"
    return None


def _plain(value: Any) -> Any:
    """Turns numpy arrays and scalars into Python lists and numbers, without importing numpy."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    return value


def _set_feature(feature: Any, name: str, value: Any) -> None:
    if isinstance(value, Message):
        _set_message(feature, name, value)
        return
    value, values = _values_of(name, value)
    kind = _one_kind(name, value, values)
    if kind == "int64":
        for bound in (min(values), max(values)):
            if not _INT64_MIN <= bound <= _INT64_MAX:
                raise ValueError(f"feature {name!r}: {bound} is outside the int64 range")
        # bool is stored as 0/1; protobuf is deprecating being handed bools for int64 fields.
        feature.int64_list.value.extend([v if type(v) is int else int(v) for v in values])
    elif kind == "float":
        for item in values:
            if math.isfinite(item) and abs(item) >= _FLOAT32_OVERFLOW:
                raise ValueError(
                    f"feature {name!r}: {item!r} is too large for a float32 (it would become inf)"
                )
        feature.float_list.value.extend(values)
    else:
        feature.bytes_list.value.extend(
            [
                item
                if type(item) is bytes
                else item.encode("utf-8")
                if isinstance(item, str)
                else bytes(item)
                for item in values
            ]
        )


def _set_message(feature: Any, name: str, value: Any) -> None:
    """Stores a protobuf message given as a feature's value: a Feature, or one of its lists."""
    type_name = value.DESCRIPTOR.name
    # Wire-compatible messages (ours, or TensorFlow's own tf.train.Feature) are taken by
    # their bytes, since protobuf refuses to CopyFrom a message of another descriptor.
    if type_name == "Feature":
        feature.MergeFromString(value.SerializeToString())
        return
    if type_name in _LIST_FIELDS:
        field = getattr(feature, _LIST_FIELDS[type_name])
        field.SetInParent()  # an empty list must still record its kind
        field.MergeFromString(value.SerializeToString())
        return
    raise TypeError(f"feature {name!r}: cannot store a {value.DESCRIPTOR.full_name} message")


def _values_of(name: str, value: Any) -> tuple[Any, list]:
    """A feature's value made plain (a numpy array a list, ...), and as a list of plain values
    (itself, or those of its list)."""
    value = _plain(value)
    if isinstance(value, (list, tuple)):
        values = [_plain(item) for item in value]
    elif _kind_of(value) is not None:
        values = [value]
    else:
        raise TypeError(
            f"feature {name!r}: expected int, float, bytes, str, a list or tuple of one of "
            f"those, a numpy array or a Feature/BytesList/FloatList/Int64List, "
            f"got {type(value).__name__} {_show(value)}"
        )
    if not values:
        raise ValueError(
            f"feature {name!r}: cannot tell the kind of an empty list; pass "
            f"BytesList(), FloatList() or Int64List() instead"
        )
    return value, values


def _one_kind(name: str, value: Any, values: list) -> str:
    """The one kind (int64, float, bytes) of a feature's values; TypeError if they mix kinds or
    one has none."""
    kinds = set(map(_kind_of, values))
    if None in kinds:
        bad = next(item for item in values if _kind_of(item) is None)
        nested = " (features are flat lists: flatten it)" if isinstance(bad, (list, tuple)) else ""
        raise TypeError(
            f"feature {name!r}: cannot store {type(bad).__name__} {_show(bad)}{nested} "
            f"in {_show(value)}"
        )
    if len(kinds) > 1:
        raise TypeError(
            f"feature {name!r}: mixes {' and '.join(sorted(kinds))} values in {_show(value)}; "
            f"a feature holds one kind (convert, e.g. ints to float)"
        )
    return kinds.pop()


def make_example(features: Mapping[str, Any]) -> Any:
    """Builds an Example from plain values.

    Each value may be an int (bool and numpy integers included), a float (numpy floats too),
    bytes, a str (stored as UTF-8), a list or tuple of one of those kinds, a numpy array, or a
    ready Feature, BytesList, FloatList or Int64List message (ours or TensorFlow's). An empty
    list has no kind to infer, so it must come as a message, e.g. ``Int64List()``.

    Example:
        >>> make_example({"label": 3, "image/encoded": jpeg_bytes, "bbox": [0.1, 0.5]})

    Args:
        features: Feature name to value.

    Returns:
        The Example message.

    Raises:
        TypeError: For a non-str name, None, a dict, a nested list, or values of mixed kinds;
            the message names the feature and the value.
        ValueError: For an empty list without a kind, an int outside int64, or a finite
            float too large for float32.
    """
    if not isinstance(features, Mapping):
        raise TypeError(f"features must be a mapping of name to value, got {_show(features)}")
    example = Example()
    feature_map = example.features.feature
    for name, value in features.items():
        if not isinstance(name, str):
            raise TypeError(f"feature names must be str, got {type(name).__name__} {name!r}")
        _set_feature(feature_map[name], name, value)
    return example


def encode_example(features: Mapping[str, Any] | Any) -> bytes:
    """Serializes features (or a ready Example) to tf.train.Example bytes.

    Serialization is deterministic (features sorted by name), so the same values always give
    the same bytes.

    Args:
        features: Feature name to value, as for make_example, or an Example message.

    Returns:
        The serialized Example.
    """
    example = features if isinstance(features, Example) else make_example(features)
    return example.SerializeToString(deterministic=True)


def _parse(data: bytes) -> Any:
    try:
        return Example.FromString(data)
    except DecodeError as error:
        raise ValueError(f"not a tf.train.Example ({len(data)} bytes): {error}") from None


def example_to_dict(example: Any, kinds: bool = False) -> dict[str, Any]:
    """Returns an Example's features as plain Python values, sorted by name.

    Args:
        example: An Example message.
        kinds: Return ``(kind, values)`` pairs instead of bare value lists, kind being
            "bytes", "float" or "int64" (None for a Feature with no list set, which
            TensorFlow reads as an empty list of any type).

    Returns:
        Feature name to ``list[int]``, ``list[float]`` or ``list[bytes]`` (or pairs).
    """
    result: dict[str, Any] = {}
    feature_map = example.features.feature
    for name in sorted(feature_map):
        feature = feature_map[name]
        field = feature.WhichOneof("kind")
        values = list(getattr(feature, field).value) if field else []
        result[name] = (_FIELD_KINDS.get(field), values) if kinds else values
    return result


def decode_example(data: bytes) -> dict[str, list[Any]]:
    """Parses tf.train.Example bytes into feature name -> list of values.

    Args:
        data: A serialized Example (a TFRecord record).

    Returns:
        Feature name to ``list[int]``, ``list[float]`` or ``list[bytes]``, sorted by name.
        Floats are the stored float32 values, widened exactly to Python floats.

    Raises:
        ValueError: If ``data`` is not a tf.train.Example.
    """
    return example_to_dict(_parse(data))


def decode_example_kinds(data: bytes) -> dict[str, tuple[str | None, list[Any]]]:
    """Like decode_example, but keeps each feature's kind, which an empty list needs.

    Args:
        data: A serialized Example.

    Returns:
        Feature name to ``(kind, values)``, kind being "bytes", "float" or "int64".

    Raises:
        ValueError: If ``data`` is not a tf.train.Example.
    """
    return example_to_dict(_parse(data), kinds=True)
