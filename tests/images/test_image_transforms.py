"""Image transforms: resize, forced encoding and raw pixels, checked by decoding what is written."""

from __future__ import annotations

import io
import json
import re
import time

import numpy as np
import pytest
from imagegen import make_collection
from PIL import Image

from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.config import BuildConfig, ConfigError
from beam_tfrecord.images import ImagePolicy, Resize, check_image, encode_for_tensorflow


def _jpeg(width: int, height: int, *, exif_orientation: int | None = None, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    kwargs = {}
    if exif_orientation:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        kwargs["exif"] = exif
    Image.fromarray(pixels).save(out, "JPEG", quality=90, **kwargs)
    return out.getvalue()


def _png(width: int, height: int, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (width, height), (10, 200, 30, 128)[: len(mode)]).save(out, "PNG")
    return out.getvalue()


def _decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


@pytest.mark.parametrize(
    ("spec", "source", "expected"),
    [
        ("256", (800, 600), (341, 256)),
        ("short:256", (600, 800), (256, 341)),
        ("200x200", (800, 600), (200, 150)),  # fit within, aspect kept
        ("1000x1000", (800, 600), (800, 600)),  # fit never enlarges
        ("exact:224x224", (800, 600), (224, 224)),  # crop
        ("exact:224x224:pad", (800, 600), (224, 224)),
        ("exact:100x50:stretch", (800, 600), (100, 50)),
        ("exact:64x64:crop", (10, 300), (64, 64)),
    ],
)
def test_resize_sizes(spec, source, expected):
    data = _jpeg(*source)
    encoded, info = encode_for_tensorflow(data, ImagePolicy(resize=Resize.parse(spec)))
    assert (info.width, info.height) == expected
    assert _decoded(encoded).size == expected
    assert check_image(data, ImagePolicy(resize=Resize.parse(spec))) == info
    if expected != source:
        assert info.reencode and "resized" in info.notes and info.format == "jpeg"
    else:
        assert not info.reencode and encoded == data, "an image already in bounds keeps its bytes"


def test_pad_uses_the_background_and_crop_keeps_the_centre():
    policy = ImagePolicy(resize=Resize.parse("exact:100x100:pad"), background=(255, 0, 0))
    encoded, _ = encode_for_tensorflow(_png(200, 100), policy)
    pixels = np.asarray(_decoded(encoded))
    assert tuple(pixels[0, 50]) == (255, 0, 0), "the padded band is the background colour"
    assert tuple(pixels[50, 50]) == (10, 200, 30)


def test_exif_rotation_happens_before_resize():
    data = _jpeg(400, 200, exif_orientation=6)  # displayed as 200 wide, 400 high
    encoded, info = encode_for_tensorflow(data, ImagePolicy(resize=Resize.parse("100")))
    assert (info.width, info.height) == (100, 200)
    assert _decoded(encoded).size == (100, 200)


def test_shrinking_jpeg_decodes_at_reduced_scale():
    """A 1/8-scale decode is measurably cheaper than a full one, and gives the same output size."""
    data = _jpeg(3000, 2000, seed=1)
    small = ImagePolicy(resize=Resize.parse("200"), validate="header")
    big = ImagePolicy(resize=Resize.parse("1999"), validate="header")

    def best(policy):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            encode_for_tensorflow(data, policy)
            times.append(time.perf_counter() - start)
        return min(times)

    assert encode_for_tensorflow(data, small)[1].height == 200
    assert best(small) < best(big) / 2


@pytest.mark.parametrize(("encode", "source"), [("png", "jpeg"), ("jpeg", "png")])
def test_forced_encoding(encode, source):
    data = _jpeg(64, 48) if source == "jpeg" else _png(64, 48)
    encoded, info = encode_for_tensorflow(data, ImagePolicy(encode=encode, jpeg_quality=70))
    assert info.format == encode and _decoded(encoded).format == encode.upper()
    assert "format_converted" in info.notes
    same, kept = encode_for_tensorflow(data, ImagePolicy(encode=source))
    assert same == data and not kept.reencode, "images already in the format keep their bytes"


def test_forced_jpeg_of_an_image_with_alpha_flattens_it():
    encoded, info = encode_for_tensorflow(
        _png(32, 32, "RGBA"), ImagePolicy(encode="jpeg", color="keep")
    )
    assert info.channels == 3 and "alpha_flattened" in info.notes
    assert _decoded(encoded).mode == "RGB"


@pytest.mark.parametrize(("color", "channels"), [("rgb", 3), ("gray", 1), ("keep", 4)])
def test_raw_pixels(color, channels):
    data = _png(40, 30, "RGBA")
    payload, info = encode_for_tensorflow(
        data, ImagePolicy(store="raw", color=color, resize=Resize.parse("exact:32x32"))
    )
    assert (info.format, info.width, info.height, info.channels) == ("raw", 32, 32, channels)
    assert len(payload) == info.encoded_size == 32 * 32 * channels
    assert "stored_raw" in info.notes


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("256", "256"), ("short:256", "256"), (" 640X480 ", "640x480"), ("fit:640x480", "640x480"),
        ("exact:224x224", "exact:224x224"), ("exact:224x224:crop", "exact:224x224"),
        ("exact:224x224:pad", "exact:224x224:pad"), ("EXACT:2x3:stretch", "exact:2x3:stretch"),
    ],
)  # fmt: skip
def test_a_resize_is_written_as_the_shortest_text_that_reads_back_to_it(text, written):
    # The manifest records a build's resize as this text; a config made from it resizes the same.
    resize = Resize.parse(text)
    assert str(resize) == written
    assert Resize.parse(str(resize)) == resize


def test_policy_and_config_refuse_bad_transforms():
    for bad in ("0", "abc", "exact:10x10:squash", "fit:10", "short:10x10", "-5"):
        with pytest.raises(ValueError, match="resize"):
            Resize.parse(bad)
        with pytest.raises(ConfigError, match="--resize:"):
            BuildConfig.from_settings(dict(inputs=("a",), output="o", resize=bad))
    with pytest.raises(ConfigError, match="--encode:"):
        BuildConfig.from_settings(dict(inputs=("a",), output="o", encode="gif"))
    with pytest.raises(ConfigError, match="--encode: store raw writes pixels"):  # as from Python
        BuildConfig.from_settings(dict(inputs=("a",), output="o", encode="png", store="raw"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("settings", "check"),
    [
        ({"resize": "exact:32x32", "store": "raw"}, "raw"),
        ({"resize": "40", "encode": "png"}, "png"),
        ({"resize": "64x64", "jpeg_quality": 60}, "fit"),
    ],
)
def test_build_with_transforms_decodes_in_tensorflow(tmp_path, settings, check, tf):
    from beam_tfrecord.beam.pipeline import build

    src = tmp_path / "src"
    make_collection(src, {"a": 6, "b": 6}, seed=4, size=(70, 130))
    out = tmp_path / "out"
    build(BuildConfig.from_settings(dict(inputs=(f"{src}/**",), output=str(out), **settings)), [])
    records = [
        decode_example(r)
        for p in sorted(out.iterdir())
        if re.search(r"\.tfrecord-\d{5}-of-\d{5}$", p.name)
        for r in read_records(str(p))
    ]
    assert len(records) == 12
    for f in records:
        h, w, c = f["image/height"][0], f["image/width"][0], f["image/channels"][0]
        if check == "raw":
            assert f["image/format"] == [b"raw"] and (h, w, c) == (32, 32, 3)
            pixels = tf.reshape(tf.io.decode_raw(f["image/encoded"][0], tf.uint8), (h, w, c))
            assert pixels.dtype == tf.uint8
        else:
            image = tf.io.decode_image(f["image/encoded"][0], channels=c, expand_animations=False)
            assert tuple(image.shape) == (h, w, c)
            if check == "png":
                assert f["image/format"] == [b"png"] and min(h, w) == 40
            else:
                assert max(h, w) <= 64 and f["image/format"] == [b"jpeg"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["resize"] == settings["resize"]


def test_an_enlargement_past_max_pixels_is_refused_before_it_is_made():
    """max_pixels bounds what the build holds decoded: a 96x110 image at --resize 9000 became a
    9000x10312 record, hundreds of megabytes of one process to make."""
    from beam_tfrecord.images import ImageError

    policy = ImagePolicy(resize=Resize("short", size=9000), max_pixels=50_000_000)
    with pytest.raises(ImageError) as err:
        encode_for_tensorflow(_jpeg(96, 110), policy)
    assert err.value.code == "too_many_pixels"
    assert err.value.message == (
        "--resize makes it 9000x10312 = 92,808,000 pixels, more than max_pixels=50,000,000"
    )
    # Within the bound, the same enlargement is made.
    _, info = encode_for_tensorflow(_jpeg(96, 110), ImagePolicy(resize=Resize("short", size=300)))
    assert (info.width, info.height) == (300, 344)
