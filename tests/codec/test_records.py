"""The image record layout, and that its size is known exactly before the image is read."""

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.codec.example import Example, decode_example, encode_example
from beam_tfrecord.codec.framing import framed_size
from beam_tfrecord.codec.records import (
    image_record,
    image_record_parts,
    image_record_size,
    serialized_size,
)

int64s = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(width=32, allow_nan=False)
values = st.one_of(
    st.lists(int64s, min_size=1, max_size=5),
    st.lists(floats, min_size=1, max_size=5),
    st.lists(st.binary(max_size=300), min_size=1, max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=40), values, max_size=8))
def test_serialized_size_is_exact(features):
    assert serialized_size(features) == len(encode_example(features))


@settings(max_examples=200, deadline=None)
@given(
    encoded=st.binary(max_size=70_000),
    height=st.integers(1, 2**31 - 1),
    width=st.integers(1, 70_000),
    channels=st.sampled_from([1, 2, 3, 4]),
    filename=st.text(min_size=1, max_size=300),
    label=st.one_of(st.none(), st.integers(0, 100_000), st.integers(0, 2**63 - 1)),
    label_text=st.text(max_size=60),
    image_format=st.sampled_from(["jpeg", "png"]),
)
def test_image_record_size_matches_the_record(
    encoded, height, width, channels, filename, label, label_text, image_format
):
    fields = dict(
        image_format=image_format,
        height=height,
        width=width,
        channels=channels,
        filename=filename,
        label=label,
        label_text=label_text if label is not None else None,
    )
    record = image_record(encoded, **fields)
    assert image_record_size(len(encoded), **fields) == framed_size(len(record))
    # The hand-written wire format is byte for byte what protobuf serializes deterministically.
    assert record == _protobuf_record(encoded, **fields)
    head, payload, tail = image_record_parts(encoded, **fields)
    assert payload is encoded and head + payload + tail == record


def _protobuf_record(
    encoded, *, image_format, height, width, channels, filename, label, label_text
):
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


def test_image_record_features():
    data = b"\xff\xd8fake-jpeg"
    features = decode_example(
        image_record(
            data,
            image_format="jpeg",
            height=24,
            width=32,
            channels=3,
            filename="orange/orange01.jpg",
            label=1,
            label_text="orange",
        )
    )
    assert features == {
        "image/encoded": [data],
        "image/format": [b"jpeg"],
        "image/height": [24],
        "image/width": [32],
        "image/channels": [3],
        "image/filename": [b"orange/orange01.jpg"],
        "image/key/sha256": [hashlib.sha256(data).hexdigest().encode()],
        "image/class/label": [1],
        "image/class/text": [b"orange"],
    }


def test_unlabeled_record_has_no_class_features():
    features = decode_example(
        image_record(b"x", image_format="png", height=1, width=1, channels=1, filename="a.png")
    )
    assert "image/class/label" not in features and "image/class/text" not in features


@settings(max_examples=500, deadline=None)
@given(
    encoded_size=st.one_of(
        st.integers(0, 2**42),
        # Around each varint boundary, where an unrolled length goes wrong first.
        st.builds(lambda k, d: max(0, 2 ** (7 * k) + d), st.integers(1, 6), st.integers(-40, 40)),
    ),
    others=st.integers(0, 2**21),
)
def test_the_planners_unrolled_record_size_is_the_wire_arithmetic(encoded_size, others):
    from beam_tfrecord.codec.records import _bytes_feature, _delimited, _entry, encoded_record_size

    expected = framed_size(
        _delimited(_entry("image/encoded", _bytes_feature(encoded_size)) + others)
    )
    assert encoded_record_size(encoded_size, others) == expected
