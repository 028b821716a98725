"""The promise, checked with TensorFlow itself: every written image decodes exactly as stated."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from hostile_images import HostileCase, hostile_corpus, photo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecord.images import ImageError, ImagePolicy, check_image, encode_for_tensorflow

CORPUS = hostile_corpus()
BY_NAME = {case.name: case for case in CORPUS}
WRITTEN = [case for case in CORPUS if case.expect.outcome == "written"]


def _decode(tf: ModuleType, data: bytes, channels: int) -> np.ndarray:
    return tf.io.decode_image(data, channels=channels, expand_animations=False).numpy()


@pytest.mark.parametrize("color", ["rgb", "gray", "keep"])
@pytest.mark.parametrize("case", WRITTEN, ids=[case.name for case in WRITTEN])
def test_written_images_decode_to_the_stated_shape(tf: ModuleType, case: HostileCase, color: str):
    policy = ImagePolicy(color=color)
    payload, info = encode_for_tensorflow(case.data, policy)
    pixels = _decode(tf, payload, info.channels)
    assert pixels.shape == (info.height, info.width, info.channels)
    assert pixels.dtype == np.uint8
    if not info.reencode:
        assert payload == case.data


def test_exif_rotation_gives_the_rotated_shape(tf: ModuleType):
    data = BY_NAME["exif_orientation_6_jpeg"].data  # stored 96 wide, 64 high
    payload, info = encode_for_tensorflow(data, ImagePolicy())
    assert _decode(tf, payload, 3).shape == (96, 64, 3)
    assert (info.height, info.width) == (96, 64)
    # TensorFlow itself ignores the tag, which is why the pixels have to be rotated for it.
    assert _decode(tf, data, 3).shape == (64, 96, 3)


def test_flattened_alpha_decodes_as_the_background(tf: ModuleType):
    background = (10, 200, 30)
    payload, info = encode_for_tensorflow(
        BY_NAME["rgba_png"].data, ImagePolicy(background=background)
    )
    pixels = _decode(tf, payload, info.channels)
    assert "alpha_flattened" in info.notes
    assert (pixels[:, :24] == background).all()  # the fully transparent columns
    assert (pixels[:, 32:] == photo(64, 48, 22)[:, 32:]).all()


def test_flattened_alpha_for_gray_uses_the_background_luminance(tf: ModuleType):
    payload, info = encode_for_tensorflow(
        BY_NAME["rgba_png"].data, ImagePolicy(color="gray", background=(0, 0, 0))
    )
    pixels = _decode(tf, payload, 1)
    assert info.channels == 1
    assert (pixels[:, :24] == 0).all()


def test_cmyk_jpeg_colours_are_approximately_right(tf: ModuleType):
    original = photo(96, 64, 7).astype(int)
    payload, info = encode_for_tensorflow(BY_NAME["cmyk_jpeg"].data, ImagePolicy())
    pixels = _decode(tf, payload, 3).astype(int)
    assert "cmyk_converted" in info.notes
    error = np.abs(pixels - original).mean()
    inverted_error = np.abs((255 - pixels) - original).mean()
    assert error < 12, error
    assert inverted_error > 60, inverted_error


def test_tensorflow_refuses_two_channels(tf: ModuleType):
    """Why gray with alpha is stated as 4 channels under color="keep"."""
    data = BY_NAME["gray_alpha_png"].data
    with pytest.raises(tf.errors.InvalidArgumentError, match="channels"):
        _decode(tf, data, 2)
    info = check_image(data, ImagePolicy(color="keep"))
    assert (info.channels, info.reencode) == (4, False)
    assert _decode(tf, data, 4).shape == (48, 64, 4)


def test_tensorflow_rejects_what_decode_validation_rejects(tf: ModuleType):
    """Damage Pillow alone would let through (a bad IDAT CRC) must not be written as is."""
    for name in ("png_bad_idat_crc", "truncated_jpeg", "jpeg_missing_eoi"):
        data = BY_NAME[name].data
        with pytest.raises(ImageError):
            check_image(data, ImagePolicy())
        with pytest.raises(tf.errors.InvalidArgumentError):
            _decode(tf, data, 3)


_SEEDS = [
    BY_NAME[name].data
    for name in ("rgb_jpeg", "progressive_jpeg", "gray_jpeg", "rgb_png", "gray_png", "rgba_png")
]


@st.composite
def _damaged(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(_SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["set", "marker", "cut", "insert"]))
        if kind == "set":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "marker":
            data[pos : pos + 2] = bytes([0xFF, draw(st.integers(0, 255))])
        elif kind == "cut":
            data = data[: max(pos, 1)]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=_damaged(), color=st.sampled_from(["rgb", "gray", "keep"]))
def test_fuzz_whatever_decode_validation_writes_tensorflow_decodes(
    tf: ModuleType, data: bytes, color: str
):
    policy = ImagePolicy(color=color, max_pixels=1_000_000)
    try:
        payload, info = encode_for_tensorflow(data, policy)
    except ImageError:
        return
    assert _decode(tf, payload, info.channels).shape == (info.height, info.width, info.channels)
