"""Our codec against the golden files TensorFlow wrote (../shared/conformance/manifest.json)."""

# The files were written by TensorFlow 2.21's own writer. This snippet, run with TensorFlow, gives
# byte-identical raw_records*.tfrecord files and Example files with the same parsed values (the
# order of an Example's map entries varies from run to run); test_tensorflow_compat.py re-runs
# its raw part to keep this comment honest:
#
#     import tensorflow as tf
#
#     records = [b"", b"foo", bytes(range(256)), b"x" * 100000]
#     for name, options in [("raw_records.tfrecord", None),
#                           ("raw_records.gzip.tfrecord", "GZIP"),
#                           ("raw_records.zlib.tfrecord", "ZLIB")]:
#         with tf.io.TFRecordWriter(name, options=options) as writer:
#             for record in records:
#                 writer.write(record)
#
#     def ints(v): return tf.train.Feature(int64_list=tf.train.Int64List(value=v))
#     def floats(v): return tf.train.Feature(float_list=tf.train.FloatList(value=v))
#     def blobs(v): return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
#     def example(**features): return tf.train.Example(features=tf.train.Features(feature=features))
#
#     with tf.io.TFRecordWriter("examples.tfrecord") as writer:
#         for e in [
#             example(label=ints([3]), name=blobs(["苹果".encode()]), score=floats([0.9876])),
#             example(ints=ints([0, -1, 2**63 - 1, -(2**63), 1, 300]), empty_ints=ints([]),
#                     floats=floats([1.5, -0.0, 3.4e38, 1e-45]), empty_bytes=blobs([]),
#                     multi=blobs([b"a", b"", b"\x00\xff"])),
#             tf.train.Example(features=tf.train.Features()),
#         ]:
#             writer.write(e.SerializeToString())
#
#     with tf.io.TFRecordWriter("image_example.tfrecord") as writer:  # a 32x24 JPEG of an orange
#         writer.write(tf.train.Example(features=tf.train.Features(feature={
#             "image/encoded": blobs([jpeg]), "image/format": blobs([b"jpeg"]),
#             "image/height": ints([24]), "image/width": ints([32]), "image/channels": ints([3]),
#             "image/class/label": ints([1]), "image/class/text": blobs([b"orange"]),
#             "image/filename": blobs([b"orange01.jpg"])})).SerializeToString())
#
#     raw = open("raw_records.tfrecord", "rb").read()
#     open("corrupt_truncated.tfrecord", "wb").write(raw[:-7])
#     flipped = bytearray(raw); flipped[28] ^= 1  # "foo" -> "goo"
#     open("corrupt_payload_crc.tfrecord", "wb").write(flipped)

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from beam_tfrecord.codec.example import (
    BytesList,
    Example,
    FloatList,
    Int64List,
    decode_example,
    decode_example_kinds,
    encode_example,
    make_example,
)
from beam_tfrecord.codec.framing import CorruptRecordError
from beam_tfrecord.codec.reader import TFRecordReader, read_records
from beam_tfrecord.codec.writer import TFRecordWriter, open_writer

RAW_FILES = ["raw_records.tfrecord", "raw_records.gzip.tfrecord", "raw_records.zlib.tfrecord"]
EXAMPLE_FILES = ["examples.tfrecord", "image_example.tfrecord"]
# name -> (record offset, offset TensorFlow reports, our reason, records before the damage,
#          records salvaged with skip_damaged)
CORRUPT_FILES = {
    "corrupt_truncated.tfrecord": (307, 307, "truncated payload (99997 of 100000 bytes)", 3, 3),
    "corrupt_payload_crc.tfrecord": (16, 28, "bad data CRC (payload at byte offset 28)", 1, 3),
}


@pytest.fixture(scope="module")
def manifest(conformance_dir: Path) -> dict[str, Any]:
    return json.loads((conformance_dir / "manifest.json").read_text())["files"]


def _raw_record(spec: dict[str, Any]) -> bytes:
    if "base64" in spec:
        return base64.b64decode(spec["base64"])
    return spec["byte"].encode() * spec["repeated"]


def _expected_example(spec: dict[str, Any]) -> dict[str, tuple[str, list[Any]]]:
    expected = {}
    for name, feature in spec.items():
        if feature["kind"] == "bytes":
            values = [base64.b64decode(value) for value in feature["base64"]]
        elif feature["kind"] == "float":
            values = feature["float32_values"]
        else:
            values = feature["values"]
        expected[name] = (feature["kind"], values)
    return expected


def _compressions(name: str, manifest: dict[str, Any]) -> list[str]:
    # As stated, and sniffed: none of these names has a suffix that tells.
    return [manifest[name]["compression"] or "NONE", "auto"]


def test_manifest_describes_exactly_the_files_we_check(manifest, conformance_dir):
    checked = {*RAW_FILES, *EXAMPLE_FILES, *CORRUPT_FILES}
    assert set(manifest) == checked
    on_disk = {p.name for p in conformance_dir.iterdir()} - {"manifest.json", "README.md"}
    assert on_disk == checked


@pytest.mark.parametrize("name", RAW_FILES)
def test_raw_records_read_back(manifest, conformance_dir, name):
    expected = [_raw_record(spec) for spec in manifest[name]["records"]]
    assert [len(record) for record in expected] == [0, 3, 256, 100000]
    for compression in _compressions(name, manifest):
        assert list(read_records(str(conformance_dir / name), compression)) == expected


@pytest.mark.parametrize("name", RAW_FILES)
def test_raw_records_read_back_from_an_open_stream(manifest, conformance_dir, name):
    expected = [_raw_record(spec) for spec in manifest[name]["records"]]
    with open(conformance_dir / name, "rb") as stream:
        assert list(read_records(stream)) == expected


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_examples_read_back(manifest, conformance_dir, name):
    expected = [_expected_example(spec) for spec in manifest[name]["examples"]]
    for compression in _compressions(name, manifest):
        records = list(read_records(str(conformance_dir / name), compression))
        assert [decode_example_kinds(record) for record in records] == expected
        assert [decode_example(record) for record in records] == [
            {feature: values for feature, (_, values) in example.items()} for example in expected
        ]


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_our_encoding_of_the_same_values_decodes_the_same(manifest, conformance_dir, name):
    # Built from the manifest's plain values, the extremes included (int64 bounds, a float32
    # subnormal, -0.0, empty lists of each kind).
    empty = {"bytes": BytesList(), "float": FloatList(), "int64": Int64List()}
    for spec in manifest[name]["examples"]:
        expected = _expected_example(spec)
        features = {
            feature: values if values else empty[kind]
            for feature, (kind, values) in expected.items()
        }
        assert decode_example_kinds(encode_example(features)) == expected
    # And TensorFlow's own bytes survive a parse and re-encode unchanged in meaning.
    for record in read_records(str(conformance_dir / name)):
        assert decode_example_kinds(encode_example(Example.FromString(record))) == (
            decode_example_kinds(record)
        )


def test_image_example_holds_the_jpeg(conformance_dir):
    (record,) = read_records(str(conformance_dir / "image_example.tfrecord"))
    features = decode_example(record)
    assert features["image/encoded"][0][:3] == b"\xff\xd8\xff"
    assert make_example(features) == Example.FromString(encode_example(features))


@pytest.mark.parametrize("name", list(CORRUPT_FILES))
def test_corrupt_files_are_rejected_where_tensorflow_says(manifest, conformance_dir, name):
    offset, tf_offset, reason, before, salvaged = CORRUPT_FILES[name]
    said = re.search(r"(?:truncated|corrupted) record at (\d+)", manifest[name]["tensorflow_says"])
    assert said is not None and int(said.group(1)) == tf_offset
    url = str(conformance_dir / name)
    records = []
    with pytest.raises(CorruptRecordError) as caught:
        records.extend(read_records(url))
    error = caught.value
    assert (error.path, error.offset, error.damage_offset, error.reason) == (
        url,
        offset,
        tf_offset,
        reason,
    )
    assert str(error).startswith(f"{url}: corrupt record at byte offset {offset}: ")
    assert str(tf_offset) in str(error)
    assert len(records) == before
    reader = TFRecordReader(url, skip_damaged=True)
    assert len(list(reader)) == salvaged
    assert [damage.offset for damage in reader.damage] == [offset]


def test_writer_reproduces_tensorflow_bytes(manifest, conformance_dir, tmp_path):
    records = [_raw_record(spec) for spec in manifest["raw_records.tfrecord"]["records"]]
    golden = (conformance_dir / "raw_records.tfrecord").read_bytes()

    buffer = io.BytesIO()
    writer = TFRecordWriter(buffer)
    for record in records:
        writer.write(record)
    assert buffer.getvalue() == golden
    assert writer.bytes_written == len(golden)

    url = str(tmp_path / "raw_records.tfrecord")
    with open_writer(url) as file_writer:
        for record in records:
            file_writer.write(record)
    assert (tmp_path / "raw_records.tfrecord").read_bytes() == golden


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_our_compressed_files_hold_the_same_records(
    manifest, conformance_dir, tmp_path, compression
):
    # Compressors differ in their bytes, so compare what TensorFlow's file and ours decompress to.
    golden = conformance_dir / f"raw_records.{compression.lower()}.tfrecord"
    ours = str(tmp_path / "ours.tfrecord")
    with open_writer(ours, compression) as writer:
        for record in read_records(str(golden)):
            writer.write(record)
    assert list(read_records(ours)) == list(read_records(str(golden)))
