"""Tests for the tf.train.Example messages: descriptor, building, encoding and decoding."""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import descriptor_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.codec import example as example_module
from beam_tfrecord.codec.example import (
    BytesList,
    Example,
    Feature,
    Features,
    FloatList,
    Int64List,
    decode_example,
    decode_example_kinds,
    encode_example,
    example_to_dict,
    make_example,
)

PROTO = Path(example_module.__file__).parent / "proto" / "example.proto"
_FIELD = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _FIELD.TYPE_BYTES: "bytes",
    _FIELD.TYPE_FLOAT: "float",
    _FIELD.TYPE_INT64: "int64",
    _FIELD.TYPE_STRING: "string",
}


# --- the descriptor and example.proto -----------------------------------------------------


def _fields_in_proto_file(text: str) -> tuple[str, dict[str, dict[str, tuple[Any, ...]]]]:
    """Reads example.proto's package and, per message, its fields as comparable tuples."""
    text = re.sub(r"//[^\n]*", "", text)
    package = re.search(r"^package\s+([\w.]+)\s*;", text, re.MULTILINE)
    assert package, "example.proto has no package line"
    messages: dict[str, dict[str, tuple[Any, ...]]] = {}
    message = oneof = None
    for line in text.splitlines():
        if started := re.match(r"\s*message\s+(\w+)\s*\{", line):
            message, messages[started.group(1)] = started.group(1), {}
        elif started := re.match(r"\s*oneof\s+(\w+)\s*\{", line):
            oneof = started.group(1)
        elif re.match(r"\s*\}", line):
            if oneof:
                oneof = None
            else:
                message = None
        elif field := re.match(
            r"\s*(repeated\s+)?(map<\s*\w+\s*,\s*\w+\s*>|\w+)\s+(\w+)\s*=\s*(\d+)\s*"
            r"(\[\s*packed\s*=\s*true\s*\])?\s*;",
            line,
        ):
            assert message, f"field outside a message: {line!r}"
            repeated, type_name, name, number, packed = field.groups()
            type_name = re.sub(r"\s+", "", type_name).replace(",", ", ")
            messages[message][name] = (
                int(number),
                type_name,
                bool(repeated) or type_name.startswith("map<"),
                oneof,
                bool(packed),
            )
        else:
            assert not line.strip() or line.strip().startswith("syntax") or "package" in line, (
                f"example.proto line not understood by this test: {line!r}"
            )
    return package.group(1), messages


def _fields_in_descriptor(
    file: descriptor_pb2.FileDescriptorProto,
) -> dict[str, dict[str, tuple[Any, ...]]]:
    messages = {}
    for message in file.message_type:
        entries = {nested.name: nested for nested in message.nested_type}
        fields = {}
        for field in message.field:
            short = field.type_name.rsplit(".", 1)[-1]
            if short in entries and entries[short].options.map_entry:
                key, value = entries[short].field
                type_name = f"map<{_SCALARS[key.type]}, {value.type_name.rsplit('.', 1)[-1]}>"
            elif field.type == _FIELD.TYPE_MESSAGE:
                type_name = short
            else:
                type_name = _SCALARS[field.type]
            oneof = (
                message.oneof_decl[field.oneof_index].name
                if field.HasField("oneof_index")
                else None
            )
            fields[field.name] = (
                field.number,
                type_name,
                field.label == _FIELD.LABEL_REPEATED,
                oneof,
                field.options.packed,
            )
        messages[message.name] = fields
    return messages


def test_proto_file_and_built_descriptor_agree():
    file = descriptor_pb2.FileDescriptorProto()
    Example.DESCRIPTOR.file.CopyToProto(file)
    package, messages = _fields_in_proto_file(PROTO.read_text())
    assert file.package == package
    assert file.syntax == "proto3" and 'syntax = "proto3";' in PROTO.read_text()
    assert _fields_in_descriptor(file) == messages
    # The descriptor's file name is where example.proto really lives in the package.
    assert PROTO.as_posix().endswith(file.name)


def test_field_numbers_are_tensorflows():
    # tensorflow/core/example/{example,feature}.proto: these numbers are the wire format.
    _, messages = _fields_in_proto_file(PROTO.read_text())
    assert messages == {
        "BytesList": {"value": (1, "bytes", True, None, False)},
        "FloatList": {"value": (1, "float", True, None, True)},
        "Int64List": {"value": (1, "int64", True, None, True)},
        "Feature": {
            "bytes_list": (1, "BytesList", False, "kind", False),
            "float_list": (2, "FloatList", False, "kind", False),
            "int64_list": (3, "Int64List", False, "kind", False),
        },
        "Features": {"feature": (1, "map<string, Feature>", True, None, False)},
        "Example": {"features": (1, "Features", False, None, False)},
    }


def test_names_never_clash_with_tensorflows():
    assert Example.DESCRIPTOR.full_name == "beam_tfrecord.v1.Example"
    assert Example.DESCRIPTOR.file.name == "beam_tfrecord/codec/proto/example.proto"
    assert {
        cls.DESCRIPTOR.name for cls in (BytesList, FloatList, Int64List, Feature, Features)
    } == {
        "BytesList",
        "FloatList",
        "Int64List",
        "Feature",
        "Features",
    }


# --- make_example -------------------------------------------------------------------------


def _f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, ("int64", [3])),
        (True, ("int64", [1])),
        ([False, 2, -(2**63), 2**63 - 1], ("int64", [0, 2, -(2**63), 2**63 - 1])),
        (np.int64(7), ("int64", [7])),
        (np.uint8(255), ("int64", [255])),
        (np.array([1, 2, 3], dtype=np.int32), ("int64", [1, 2, 3])),
        (np.array([True, False]), ("int64", [1, 0])),
        (0.1, ("float", [_f32(0.1)])),
        ((1.5, -0.0, math.inf), ("float", [1.5, -0.0, math.inf])),
        (np.float32(0.25), ("float", [0.25])),
        (np.array([0.5, 2.0], dtype=np.float64), ("float", [0.5, 2.0])),
        (b"\x00\xff", ("bytes", [b"\x00\xff"])),
        ("苹果", ("bytes", ["苹果".encode()])),
        ([b"a", "b", bytearray(b"c"), memoryview(b"d")], ("bytes", [b"a", b"b", b"c", b"d"])),
        (np.array([b"x", b"yz"]), ("bytes", [b"x", b"yz"])),
        (Int64List(), ("int64", [])),
        (FloatList(value=[1.0]), ("float", [1.0])),
        (BytesList(), ("bytes", [])),
        (Feature(float_list=FloatList()), ("float", [])),
        (Feature(bytes_list=BytesList(value=[b"m"])), ("bytes", [b"m"])),
    ],
)
def test_make_example_accepts_plain_values(value, expected):
    data = encode_example({"f": value})
    assert decode_example_kinds(data) == {"f": expected}
    assert example_to_dict(make_example({"f": value}), kinds=True) == {"f": expected}


@pytest.mark.parametrize(
    ("features", "error", "match"),
    [
        ({"label": None}, TypeError, r"feature 'label': .* got NoneType None"),
        ({"meta": {"a": 1}}, TypeError, r"feature 'meta': .* got dict \{'a': 1\}"),
        ({"ids": []}, ValueError, r"feature 'ids': cannot tell the kind of an empty list"),
        ({"ids": ()}, ValueError, r"feature 'ids': .*Int64List\(\)"),
        ({"mixed": [1, 2.5]}, TypeError, r"feature 'mixed': mixes float and int64 .*\[1, 2\.5\]"),
        ({"mixed": [b"a", 1]}, TypeError, r"feature 'mixed': mixes bytes and int64"),
        ({"big": 2**63}, ValueError, r"feature 'big': 9223372036854775808 is outside the int64"),
        ({"big": [0, -(2**63) - 1]}, ValueError, r"feature 'big': -9223372036854775809"),
        ({"big": np.array([2**64 - 1], dtype=np.uint64)}, ValueError, r"feature 'big': 1844"),
        ({"huge": 1e39}, ValueError, r"feature 'huge': 1e\+39 is too large for a float32"),
        ({"nested": [[1, 2]]}, TypeError, r"feature 'nested': cannot store list \[1, 2\].*flat"),
        ({"grid": np.zeros((2, 2))}, TypeError, r"feature 'grid': .*flatten"),
        ({"odd": [1, None]}, TypeError, r"feature 'odd': cannot store NoneType None"),
        ({"set": {1, 2}}, TypeError, r"feature 'set': .* got set"),
        ({"msg": Example()}, TypeError, r"feature 'msg': cannot store a beam_tfrecord.v1.Example"),
        ({1: 1}, TypeError, r"feature names must be str, got int 1"),
        ([("a", 1)], TypeError, r"features must be a mapping"),
    ],
)
def test_make_example_refuses_with_the_feature_and_value(features, error, match):
    with pytest.raises(error, match=match):
        make_example(features)


def test_encoding_is_deterministic_and_sorted():
    forward = encode_example({"a": 1, "b": [2.5], "c": b"x"})
    backward = encode_example({"c": b"x", "b": [2.5], "a": 1})
    assert forward == backward
    assert list(decode_example(forward)) == ["a", "b", "c"]
    assert encode_example(make_example({"a": 1, "b": [2.5], "c": b"x"})) == forward


def test_decode_refuses_what_is_not_an_example():
    with pytest.raises(ValueError, match=r"not a tf.train.Example \(3 bytes\)"):
        decode_example(b"foo")
    with pytest.raises(ValueError, match=r"not a tf\.train\.Example"):
        decode_example_kinds(bytes(range(256)))


def test_empty_example_and_kindless_feature():
    assert decode_example(b"") == {}
    assert decode_example(encode_example({})) == {}
    # TensorFlow reads a Feature with no list as an empty list of any kind: no kind to report.
    example = Example()
    example.features.feature["unset"].SetInParent()
    assert example_to_dict(example, kinds=True) == {"unset": (None, [])}
    assert decode_example(example.SerializeToString()) == {"unset": []}


def test_decoded_floats_are_float32_values():
    (value,) = decode_example(encode_example({"x": 0.9876}))["x"]
    assert value == 0.9876000285148621 == _f32(0.9876)


# --- round trips --------------------------------------------------------------------------

_names = st.text(min_size=0, max_size=12)
_lists = st.one_of(
    st.tuples(st.just("int64"), st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1))),
    st.tuples(st.just("float"), st.lists(st.floats(width=32, allow_nan=False))),
    st.tuples(st.just("bytes"), st.lists(st.binary(max_size=40))),
)
_EMPTY = {"int64": Int64List, "float": FloatList, "bytes": BytesList}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_names, _lists, max_size=8))
def test_examples_round_trip(spec):
    features = {name: values or _EMPTY[kind]() for name, (kind, values) in spec.items()}
    data = encode_example(features)
    assert decode_example_kinds(data) == spec
    assert decode_example(data) == {name: values for name, (_, values) in spec.items()}
    # Our bytes parse with our classes into the very message make_example builds, and
    # re-serialize to the same bytes.
    parsed = Example.FromString(data)
    assert parsed == make_example(features)
    assert parsed.SerializeToString(deterministic=True) == data


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(), st.binary()), min_size=1, max_size=5))
def test_str_and_bytes_values_are_both_bytes(values):
    (stored,) = decode_example(encode_example({"v": values})).values()
    assert stored == [v.encode("utf-8") if isinstance(v, str) else v for v in values]
