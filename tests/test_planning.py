"""Planning from the listing: nothing of an image is read, and its record size follows from its file size."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from imagegen import jpeg_bytes, png_bytes
from PIL import Image

from beam_tfrecord.beam.pipeline import preparer
from beam_tfrecord.codec.records import image_record
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry, ReportEntry
from beam_tfrecord.images import ImagePolicy, Resize, encode_for_tensorflow
from beam_tfrecord.listing import SourceFile
from beam_tfrecord.planning import estimated_encoded_size


def _planner(**settings):
    settings.setdefault("labels", "none")
    return preparer(
        BuildConfig.from_settings(dict(inputs=("unused/**",), output="unused", **settings))
    )


def test_planning_reads_nothing_of_the_image(tmp_path):
    # The file does not exist: a plan that read it would fail.
    source = SourceFile(url=str(tmp_path / "nowhere.jpg"), relpath="a/nowhere.jpg", size=5000)
    entry = _planner().plan(source, None, None)
    assert isinstance(entry, ImageEntry), entry
    assert entry.source_size == 5000 and entry.record_size > 5000


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: jpeg_bytes(rng, 320, 240),
        lambda rng: jpeg_bytes(rng, 3, 2000),
        lambda rng: png_bytes(rng, 33, 17),
    ],
)
@pytest.mark.parametrize("label", [None, "some class"])
def test_a_kept_image_is_planned_at_most_a_few_bytes_over_its_record(tmp_path, make, label):
    data = make(np.random.default_rng(4))
    path = tmp_path / "img.bin"
    path.write_bytes(data)
    class_id = None if label is None else 7
    entry = _planner().plan(SourceFile(str(path), "c/img.bin", len(data)), label, class_id)
    encoded, info = encode_for_tensorflow(data, ImagePolicy())
    assert encoded == data
    record = image_record(
        data,
        image_format=info.format,
        height=info.height,
        width=info.width,
        channels=info.channels,
        filename="c/img.bin",
        label=class_id,
        label_text=label,
    )
    framed = len(record) + 16
    assert 0 <= entry.record_size - framed <= 6


def test_a_record_too_large_for_any_shard_is_reported_at_planning():
    planner = _planner(min_shard_size="1KB", max_shard_size="3KB")
    result = planner.plan(SourceFile("x/big.jpg", "big.jpg", 10_000), None, None)
    assert isinstance(result, ReportEntry) and result.reason == "larger_than_max_shard_size"


def test_an_input_list_without_sizes_costs_a_size_look_up_not_a_read(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(b"\xff\xd8\xff" + b"\0" * 997)
    planner = _planner()
    entry = planner.plan(SourceFile(str(path), "a.jpg", -1), None, None)
    assert isinstance(entry, ImageEntry) and entry.source_size == 1000
    gone = planner.plan(SourceFile(str(tmp_path / "gone.jpg"), "gone.jpg", -1), None, None)
    assert isinstance(gone, ReportEntry) and gone.reason == "vanished"
    assert gone.message == "not found (named in --input-list)"


def test_raw_pixels_of_an_exact_size_are_planned_exactly():
    policy = ImagePolicy(resize=Resize.parse("exact:32x32"), store="raw")
    assert estimated_encoded_size(900, "a.png", policy) == 32 * 32 * 3
    gray = ImagePolicy(resize=Resize.parse("exact:32x32"), store="raw", color="gray")
    assert estimated_encoded_size(900, "a.png", gray) == 32 * 32


def test_images_kept_as_they_are_are_planned_at_their_size():
    assert estimated_encoded_size(12345, "a.jpg", ImagePolicy()) == 12345
    assert estimated_encoded_size(12345, "a.jpg", ImagePolicy(encode="jpeg")) == 12345
    assert estimated_encoded_size(12345, "a.PNG", ImagePolicy(encode="png")) == 12345


def test_a_resize_estimate_is_near_the_real_size_of_photographs():
    """The estimate is aimed at photographs; shards of them land near their planned size."""
    rng = np.random.default_rng(11)
    policy = ImagePolicy(resize=Resize.parse("256"), encode="jpeg")
    planned = real = 0
    for _ in range(6):
        x = np.mgrid[0:480, 0:640][1]
        smooth = 128 + 60 * np.sin(x / 90 + rng.uniform(0, 6))[..., None] * np.ones(3)
        pixels = np.clip(smooth + rng.normal(0, 10, (480, 640, 3)), 0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=90)
        data = out.getvalue()
        planned += estimated_encoded_size(len(data), "p.jpg", policy)
        real += len(encode_for_tensorflow(data, policy)[0])
    assert 0.6 < real / planned < 1.4, (real, planned)


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 2**34),
    relpath=st.text(min_size=1, max_size=200).map(lambda t: t + ".png"),
    labelled=st.one_of(st.none(), st.tuples(st.integers(0, 2**40), st.text(max_size=50))),
)
def test_a_kept_image_is_planned_at_the_size_the_general_record_sizing_gives(
    size, relpath, labelled
):
    # The planner sizes a kept image from a cache of its other fields; `record_size` is the
    # general form (the one estimated sizes take), and the golden digests depend on their agreeing.
    class_id, label = labelled if labelled else (None, None)
    planner = _planner(max_shard_size="1TB")
    entry = planner.plan(SourceFile(f"x/{relpath}", relpath, size), label, class_id)
    assert isinstance(entry, ImageEntry)
    assert entry.record_size == planner.record_size(size, relpath, class_id, label)
    assert entry == ImageEntry(
        entry.url, relpath, size, entry.split, entry.shuffle_key, label, class_id, entry.record_size
    )
