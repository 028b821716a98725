"""TensorFlow reads what we write and we read what TensorFlow writes (one module: one TF import)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.codec.example import (
    BytesList,
    Example,
    FloatList,
    Int64List,
    decode_example_kinds,
    encode_example,
    make_example,
)
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.codec.writer import open_writer

# TensorFlow's C++ logging would otherwise bury test output in start-up chatter.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_TF_COMPRESSION = {"NONE": "", "GZIP": "GZIP", "ZLIB": "ZLIB"}
_SUFFIX = {"NONE": "", "GZIP": ".gz", "ZLIB": ".zz"}

# Features covering each kind, multi-valued, empty and extreme values.
FEATURES: dict[str, Any] = {
    "label": 7,
    "score": [0.5, -1.25],
    "name": "苹果",
    "tags": [b"a", b"", b"\x00\xff"],
    "ids": [-(2**63), 0, 2**63 - 1],
    "no_ids": Int64List(),
    "no_tags": BytesList(),
    "no_floats": FloatList(),
}
KINDS = {
    "label": ("int64", [7]),
    "score": ("float", [0.5, -1.25]),
    "name": ("bytes", ["苹果".encode()]),
    "tags": ("bytes", [b"a", b"", b"\x00\xff"]),
    "ids": ("int64", [-(2**63), 0, 2**63 - 1]),
    "no_ids": ("int64", []),
    "no_tags": ("bytes", []),
    "no_floats": ("float", []),
}


def _parse_spec(tf: Any) -> dict[str, Any]:
    return {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([2], tf.float32),
        "name": tf.io.FixedLenFeature([], tf.string),
        "tags": tf.io.VarLenFeature(tf.string),
        "ids": tf.io.VarLenFeature(tf.int64),
        "no_ids": tf.io.VarLenFeature(tf.int64),
        "no_tags": tf.io.VarLenFeature(tf.string),
        "no_floats": tf.io.VarLenFeature(tf.float32),
    }


@pytest.mark.parametrize("compression", ["NONE", "GZIP", "ZLIB"])
def test_tensorflow_reads_what_we_write(tf, tmp_path, compression):
    url = str(tmp_path / f"ours.tfrecord{_SUFFIX[compression]}")
    raw = [b"", b"raw", bytes(range(256)) * 500]
    with open_writer(url) as writer:
        for index in range(3):
            writer.write(encode_example({**FEATURES, "label": index}))
        for record in raw:
            writer.write(record)

    dataset = tf.data.TFRecordDataset(url, compression_type=_TF_COMPRESSION[compression])
    records = [tensor.numpy() for tensor in dataset]
    assert records[3:] == raw
    spec = _parse_spec(tf)
    for index, record in enumerate(records[:3]):
        parsed = tf.io.parse_single_example(record, spec)
        assert parsed["label"].numpy() == index
        assert parsed["score"].numpy().tolist() == [0.5, -1.25]
        assert parsed["name"].numpy().decode() == "苹果"
        assert parsed["tags"].values.numpy().tolist() == [b"a", b"", b"\x00\xff"]
        assert parsed["ids"].values.numpy().tolist() == [-(2**63), 0, 2**63 - 1]
        for empty in ("no_ids", "no_tags", "no_floats"):
            assert parsed[empty].values.numpy().tolist() == []


@pytest.mark.parametrize("compression", ["NONE", "GZIP", "ZLIB"])
def test_we_read_what_tensorflow_writes(tf, tmp_path, compression):
    def feature(kind: str, values: list[Any]) -> Any:
        lists = {"int64": "int64_list", "float": "float_list", "bytes": "bytes_list"}
        cls = {
            "int64": tf.train.Int64List,
            "float": tf.train.FloatList,
            "bytes": tf.train.BytesList,
        }
        return tf.train.Feature(**{lists[kind]: cls[kind](value=values)})

    tf_example = tf.train.Example(
        features=tf.train.Features(
            feature={name: feature(kind, values) for name, (kind, values) in KINDS.items()}
        )
    )
    raw = [b"", b"raw", b"x" * 100_000]
    path = str(tmp_path / "theirs.tfrecord")  # no suffix: our reader must sniff the content
    options = tf.io.TFRecordOptions(compression_type=_TF_COMPRESSION[compression])
    with tf.io.TFRecordWriter(path, options=options) as writer:
        writer.write(tf_example.SerializeToString())
        for record in raw:
            writer.write(record)

    for how in (compression, "auto"):
        records = list(read_records(path, how))
        assert records[1:] == raw
        assert decode_example_kinds(records[0]) == KINDS


def test_messages_cross_parse(tf):
    ours = encode_example(FEATURES)
    theirs = tf.train.Example.FromString(ours)
    assert theirs.features.feature["ids"].int64_list.value == [-(2**63), 0, 2**63 - 1]
    assert theirs.features.feature["no_floats"].WhichOneof("kind") == "float_list"
    assert Example.FromString(theirs.SerializeToString()) == make_example(FEATURES)


def test_make_example_takes_tensorflow_messages(tf):
    example = make_example(
        {
            "ids": tf.train.Int64List(value=[1, 2]),
            "none": tf.train.FloatList(),
            "blob": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"z"])),
        }
    )
    assert decode_example_kinds(example.SerializeToString()) == {
        "blob": ("bytes", [b"z"]),
        "ids": ("int64", [1, 2]),
        "none": ("float", []),
    }


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(
            st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1),
            st.lists(st.floats(width=32, allow_nan=False), min_size=1),
            st.lists(st.binary(max_size=20), min_size=1),
        ),
        max_size=6,
    )
)
def test_tensorflow_parses_our_examples_to_the_same_values(tf, features):
    parsed = tf.train.Example.FromString(encode_example(features))
    assert {
        name: list(getattr(feature, feature.WhichOneof("kind")).value)
        for name, feature in parsed.features.feature.items()
    } == features


def test_the_conformance_snippet_reproduces_the_golden_bytes(tf, conformance_dir, tmp_path):
    # The raw part of the snippet in test_conformance.py, run for real.
    records = [b"", b"foo", bytes(range(256)), b"x" * 100000]
    for name, options in [
        ("raw_records.tfrecord", None),
        ("raw_records.gzip.tfrecord", "GZIP"),
        ("raw_records.zlib.tfrecord", "ZLIB"),
    ]:
        with tf.io.TFRecordWriter(str(tmp_path / name), options=options) as writer:
            for record in records:
                writer.write(record)
        assert (tmp_path / name).read_bytes() == (conformance_dir / name).read_bytes()


_CROSS_CHECK = """
import os, sys
first = sys.argv[1]
if first == "tensorflow":
    import tensorflow as tf
    from beam_tfrecord.codec import example as ours
else:
    from beam_tfrecord.codec import example as ours
    import tensorflow as tf
assert tf.train.Example.DESCRIPTOR.full_name == "tensorflow.Example"
assert ours.Example.DESCRIPTOR.full_name == "beam_tfrecord.v1.Example"
data = ours.encode_example({"label": 3, "name": "x", "score": [0.5]})
theirs = tf.train.Example.FromString(data)
assert theirs.features.feature["label"].int64_list.value == [3]
spec = {"label": tf.io.FixedLenFeature([], tf.int64), "score": tf.io.FixedLenFeature([1], tf.float32)}
assert tf.io.parse_single_example(data, spec)["label"].numpy() == 3
assert ours.decode_example(theirs.SerializeToString())["score"] == [0.5]
print("ok")
"""


@pytest.mark.parametrize("first", ["tensorflow", "beam_tfrecord"])
def test_both_protos_load_in_one_process_in_either_order(tf, first):
    # A fresh interpreter each: registration clashes only show at first import.
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CROSS_CHECK), first],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
