"""Tests for beam_tfrecord.images over the hostile corpus, without TensorFlow."""

from __future__ import annotations

import contextlib
import io
import pickle
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from hostile_images import HostileCase, hostile_corpus, photo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFile

from beam_tfrecord.images import (
    ERROR_CODES,
    NOTE_CODES,
    ImageError,
    ImageInfo,
    ImagePolicy,
    NeedFullData,
    check_image,
    encode_for_tensorflow,
    sniff_format,
)

CORPUS = hostile_corpus()
BY_NAME = {case.name: case for case in CORPUS}
WRITTEN = [case for case in CORPUS if case.expect.outcome == "written"]
SKIPPED = [case for case in CORPUS if case.expect.outcome == "skipped"]
HEADER_PREFIX = 64 * 1024  # what the pipeline passes at planning time


def _ids(cases: list[HostileCase]) -> list[str]:
    return [case.name for case in cases]


def _png(image: Image.Image, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", **params)
    return buffer.getvalue()


def _pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


# --- the corpus itself ------------------------------------------------------------------------


def test_corpus_is_large_deterministic_and_small_files():
    assert len(CORPUS) >= 30
    assert len(BY_NAME) == len(CORPUS), "case names must be unique"
    assert [c.data for c in hostile_corpus()] == [c.data for c in CORPUS]
    assert max(len(c.data) for c in CORPUS) < 200_000
    assert sum(len(c.data) < 20_000 for c in CORPUS) >= len(CORPUS) - 2
    assert {c.expect.code for c in SKIPPED} >= {
        "empty_file",
        "unknown_format",
        "truncated",
        "corrupt",
        "too_many_pixels",
        "unsupported",
    }


# --- table-driven outcomes --------------------------------------------------------------------


@pytest.mark.parametrize("case", WRITTEN, ids=_ids(WRITTEN))
def test_written_case_matches_expectation(case: HostileCase):
    policy = ImagePolicy()
    info = check_image(case.data, policy)
    expect = case.expect
    assert info.source_format == expect.source_format
    assert info.format == expect.format
    assert info.reencode is expect.reencode
    assert set(info.notes) == set(expect.notes)
    assert list(info.notes) == sorted(info.notes)
    assert set(info.notes) <= set(NOTE_CODES)
    assert (info.width, info.height) == expect.size
    assert info.channels == 3

    payload, encoded_info = encode_for_tensorflow(case.data, policy)
    assert encoded_info == info
    assert info.encoded_size == len(payload)
    if not info.reencode:
        assert payload == case.data
    else:
        assert payload != case.data
        assert sniff_format(payload) == info.format
        with Image.open(io.BytesIO(payload)) as written:
            assert written.size == (info.width, info.height)


@pytest.mark.parametrize("case", SKIPPED, ids=_ids(SKIPPED))
@pytest.mark.parametrize("validate", ["decode", "header", "none"])
def test_skipped_case_raises_its_code(case: HostileCase, validate: str):
    policy = ImagePolicy(validate=validate)
    code = case.expect.code
    if validate != "decode" and code in ("truncated", "corrupt"):
        # Without a decode, damage after the header is trusted away, except what the header
        # walk sees (a truncated file whose header is also cut); see the header-mode tests.
        try:
            check_image(case.data, policy)
        except ImageError as err:
            assert err.code in ("truncated", "corrupt")
        return
    with pytest.raises(ImageError) as raised:
        check_image(case.data, policy)
    assert raised.value.code == code
    assert str(raised.value) == f"{code}: {raised.value.message}"
    with pytest.raises(ImageError) as raised_by_encode:
        encode_for_tensorflow(case.data, policy)
    assert raised_by_encode.value.code == code


@pytest.mark.parametrize("case", WRITTEN, ids=_ids(WRITTEN))
def test_keep_and_gray_policies(case: HostileCase):
    keep = check_image(case.data, ImagePolicy(color="keep"))
    assert keep.channels == case.expect.keep_channels
    assert keep.reencode is case.expect.keep_reencode
    assert keep.channels in (1, 3, 4)

    gray = check_image(case.data, ImagePolicy(color="gray"))
    assert gray.channels == 1
    assert gray.reencode is case.expect.reencode  # alpha is flattened for gray as for rgb
    if gray.reencode:
        payload, _ = encode_for_tensorflow(case.data, ImagePolicy(color="gray"))
        with Image.open(io.BytesIO(payload)) as written:
            assert written.mode == "L"


@pytest.mark.parametrize("color", ["rgb", "gray", "keep"])
def test_encoding_is_deterministic(color: str):
    for case in WRITTEN:
        first = encode_for_tensorflow(case.data, ImagePolicy(color=color))
        again = encode_for_tensorflow(bytes(bytearray(case.data)), ImagePolicy(color=color))
        assert first == again, case.name


def test_untouched_bytes_are_the_original_object_contents():
    data = BY_NAME["rgb_jpeg"].data
    payload, info = encode_for_tensorflow(data, ImagePolicy())
    assert not info.reencode
    assert payload == data
    assert info == ImageInfo("jpeg", "jpeg", 160, 120, 3, False, (), len(data))


# --- what the re-encoding does ----------------------------------------------------------------


def test_alpha_is_flattened_onto_the_background():
    background = (10, 200, 30)
    payload, info = encode_for_tensorflow(
        BY_NAME["rgba_png"].data, ImagePolicy(background=background)
    )
    pixels = _pixels(payload)
    assert info.format == "png"
    assert (pixels[:, :24] == background).all()  # the fully transparent half
    original = photo(64, 48, 22)
    assert (pixels[:, 32:] == original[:, 32:]).all()  # the opaque half is untouched
    half = pixels[:, 24:32].astype(int)
    expected = (original[:, 24:32].astype(int) * 128 + np.array(background) * 127) / 255
    assert np.abs(half - expected).max() <= 1


def test_palette_transparency_is_flattened_and_kept_for_keep():
    data = BY_NAME["palette_transparent_png"].data
    with Image.open(io.BytesIO(data)) as source:
        transparent = np.asarray(source) == 0
    rgb = _pixels(encode_for_tensorflow(data, ImagePolicy(background=(1, 2, 3)))[0])
    assert transparent.any()
    assert (rgb[transparent] == (1, 2, 3)).all()
    payload, info = encode_for_tensorflow(data, ImagePolicy(color="keep"))
    with Image.open(io.BytesIO(payload)) as kept:
        assert kept.mode == "RGBA" and info.channels == 4
        assert (np.asarray(kept)[..., 3][transparent] == 0).all()


def test_16bit_samples_are_stretched_over_their_actual_range():
    payload, info = encode_for_tensorflow(BY_NAME["gray16_png"].data, ImagePolicy(color="gray"))
    with Image.open(io.BytesIO(payload)) as written:
        values = np.asarray(written)
    assert "16bit_reduced" in info.notes
    # 12-bit data in 16-bit samples: taking the high byte would leave everything below 16.
    assert values.min() == 0 and values.max() == 255


def test_float_samples_are_stretched_and_nan_becomes_zero():
    payload, info = encode_for_tensorflow(BY_NAME["float_tiff"].data, ImagePolicy(color="gray"))
    with Image.open(io.BytesIO(payload)) as written:
        values = np.asarray(written)
    assert "float_reduced" in info.notes
    hole = np.zeros(values.shape, dtype=bool)
    hole[10:14, 20:30] = True
    assert (values[hole] == 0).all()
    assert values[~hole].min() == 0 and values[~hole].max() == 255


def test_exif_orientation_applied_or_deliberately_ignored():
    data = BY_NAME["exif_orientation_6_jpeg"].data
    rotated = check_image(data, ImagePolicy())
    assert (rotated.width, rotated.height) == (64, 96)
    ignored = check_image(data, ImagePolicy(apply_exif_orientation=False))
    assert (ignored.width, ignored.height) == (96, 64)
    assert not ignored.reencode
    assert ignored.notes == ("exif_orientation_ignored",)


def test_broken_exif_is_noted_and_treated_as_orientation_1():
    good = BY_NAME["rgb_jpeg"].data
    junk = b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff" + b"\x01" * 40
    data = good[:2] + b"\xff\xe1" + (len(junk) + 2).to_bytes(2, "big") + junk + good[2:]
    info = check_image(data, ImagePolicy())
    assert (info.reencode, info.notes) == (False, ("exif_unreadable",))
    assert (info.width, info.height) == (160, 120)


def test_truncation_is_caught_even_if_pillow_is_told_to_load_truncated_images(monkeypatch):
    # A common process-wide hack; the JPEG and PNG structure walks do not depend on it.
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    for name in ("truncated_jpeg", "jpeg_missing_eoi", "truncated_png"):
        with pytest.raises(ImageError) as raised:
            check_image(BY_NAME[name].data, ImagePolicy())
        assert raised.value.code == "truncated", name


def test_reencoded_output_carries_no_metadata():
    for name in ("exif_orientation_6_jpeg", "exif_orientation_8_png", "lab_tiff", "cmyk_jpeg"):
        payload, _ = encode_for_tensorflow(BY_NAME[name].data, ImagePolicy())
        with Image.open(io.BytesIO(payload)) as written:
            assert "exif" not in written.info, name
            assert "icc_profile" not in written.info, name
            assert written.getexif().get(0x0112) is None, name


def test_lossy_sources_go_to_jpeg_at_the_policy_quality():
    data = BY_NAME["cmyk_jpeg"].data
    low = encode_for_tensorflow(data, ImagePolicy(jpeg_quality=40))[0]
    high = encode_for_tensorflow(data, ImagePolicy(jpeg_quality=95))[0]
    assert sniff_format(low) == sniff_format(high) == "jpeg"
    assert len(low) < len(high)


def test_cmyk_colours_are_not_inverted():
    original = photo(96, 64, 7).astype(int)
    payload, _ = encode_for_tensorflow(BY_NAME["cmyk_jpeg"].data, ImagePolicy())
    error = np.abs(_pixels(payload).astype(int) - original).mean()
    assert error < 12, error


# --- header mode, prefixes and NeedFullData -----------------------------------------------------


@pytest.mark.parametrize("case", CORPUS, ids=_ids(CORPUS))
def test_header_check_of_a_prefix_agrees_with_the_writer(case: HostileCase):
    """What the planner learns from 64 KiB is what the writer later produces from the file."""
    policy = ImagePolicy(validate="header")
    try:
        planned = check_image(case.data[:HEADER_PREFIX], policy, size=len(case.data))
    except NeedFullData:
        planned = None
    except ImageError as err:
        with pytest.raises(ImageError) as again:
            encode_for_tensorflow(case.data, policy)
        assert again.value.code == err.code
        return
    if planned is None:
        assert len(case.data) > HEADER_PREFIX
        planned = check_image(case.data, policy, size=len(case.data))
    payload, written = encode_for_tensorflow(case.data, policy)
    assert written == planned
    assert planned.encoded_size == len(payload)


def test_a_short_prefix_is_enough_for_an_untouched_jpeg():
    data = BY_NAME["rgb_jpeg"].data
    full = check_image(data, ImagePolicy())
    for validate in ("header", "none"):
        info = check_image(data[:1024], ImagePolicy(validate=validate), size=len(data))
        assert info == full


def test_prefixes_that_are_not_enough_ask_for_the_full_data():
    header = ImagePolicy(validate="header")
    big = BY_NAME["jpeg_big_header"].data
    assert len(big) > HEADER_PREFIX
    with pytest.raises(NeedFullData) as raised:
        check_image(big[:HEADER_PREFIX], header, size=len(big))
    assert raised.value.code == "need_full_data"
    assert isinstance(raised.value, ImageError)
    assert check_image(big, header).encoded_size == len(big)

    cmyk = BY_NAME["cmyk_jpeg"].data  # must be re-encoded, so the exact size needs every byte
    with pytest.raises(NeedFullData):
        check_image(cmyk[:1024], header, size=len(cmyk))
    with pytest.raises(NeedFullData):  # a decode always needs the whole file
        check_image(BY_NAME["rgb_jpeg"].data[:1024], ImagePolicy(), size=10_000)
    with pytest.raises(NeedFullData):  # cut inside the PNG header chunks
        check_image(BY_NAME["exif_orientation_8_png"].data[:40], header, size=20_000)


def test_a_prefix_still_catches_bombs_and_non_images():
    header = ImagePolicy(validate="header")
    bomb = BY_NAME["png_bomb"].data
    with pytest.raises(ImageError) as raised:
        check_image(bomb[:64], header, size=len(bomb))
    assert raised.value.code == "too_many_pixels"
    with pytest.raises(ImageError) as raised:
        check_image(b"<html>" * 20, header, size=10_000)
    assert raised.value.code == "unknown_format"


def test_header_mode_trusts_what_follows_the_header():
    truncated = BY_NAME["truncated_jpeg"].data
    info = check_image(truncated, ImagePolicy(validate="header"))
    assert not info.reencode  # the documented price of not decoding
    with pytest.raises(ImageError, match="truncated"):
        check_image(truncated, ImagePolicy(validate="decode"))


def test_size_smaller_than_the_data_is_a_caller_error():
    with pytest.raises(ValueError, match="size=10"):
        check_image(BY_NAME["rgb_jpeg"].data, ImagePolicy(), size=10)


# --- the pixel guard --------------------------------------------------------------------------


def _big_image(fmt: str) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", (3000, 2000), (90, 120, 150))
    image.save(buffer, fmt, **({"compression": "tiff_lzw"} if fmt == "TIFF" else {}))
    return buffer.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_pixel_guard_follows_the_policy(fmt: str):
    data = _big_image(fmt)
    with pytest.raises(ImageError) as raised:
        check_image(data, ImagePolicy(max_pixels=5_000_000))
    assert raised.value.code == "too_many_pixels"
    assert "3000x2000" in raised.value.message and "5,000,000" in raised.value.message
    info = check_image(data, ImagePolicy(max_pixels=6_000_000))
    assert (info.width, info.height) == (3000, 2000)


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_a_policy_above_pillows_global_limit_works_quietly(fmt: str, monkeypatch):
    data = _big_image(fmt)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)  # 6 Mpx is a "bomb" to Pillow
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        info = check_image(data, ImagePolicy(max_pixels=10_000_000))
    assert (info.width, info.height) == (3000, 2000)
    assert Image.MAX_IMAGE_PIXELS == 1_000_000


def test_no_warning_escapes_for_any_case():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for case in CORPUS:
            for validate in ("decode", "header", "none"):
                with contextlib.suppress(ImageError):
                    check_image(case.data, ImagePolicy(validate=validate))


def test_a_process_of_the_tools_own_silences_pillow_once_not_per_image():
    """quiet_pillow_for_good (a shard process's start) installs the filters once; the checks
    then leave the process's warnings alone. Run in a process of its own: it is for good."""
    script = textwrap.dedent(
        """
        import contextlib, sys, warnings
        sys.path.insert(0, sys.argv[1])
        from hostile_images import hostile_corpus
        from beam_tfrecord.images import ImageError, ImagePolicy, check_image
        from beam_tfrecord.images.decode import quiet_pillow_for_good
        entered = []
        class Counted(warnings.catch_warnings):
            def __enter__(self):
                entered.append(1)
                return super().__enter__()
        warnings.catch_warnings = Counted
        quiet_pillow_for_good()
        for case in hostile_corpus():
            with contextlib.suppress(ImageError):
                check_image(case.data, ImagePolicy())
        warnings.warn_explicit("hidden", UserWarning, "x.py", 1, module="PIL.Image")
        warnings.warn_explicit("shown", UserWarning, "x.py", 1, module="theirs")
        print(len(entered))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(Path(__file__).parent.parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\n"
    assert "shown" in done.stderr and "hidden" not in done.stderr


# --- errors, policy and sniffing --------------------------------------------------------------


def test_image_errors_have_stable_codes_and_survive_pickling():
    codes = set()
    for case in CORPUS:
        for validate in ("decode", "header", "none"):
            try:
                check_image(case.data[:1000], ImagePolicy(validate=validate), size=len(case.data))
            except ImageError as err:
                codes.add(err.code)
                assert err.code in ERROR_CODES
                assert str(err).startswith(f"{err.code}: ")
                clone = pickle.loads(pickle.dumps(err))
                assert type(clone) is type(err)
                assert (clone.code, clone.message) == (err.code, err.message)
    assert "need_full_data" in codes
    with pytest.raises(ValueError, match="unknown ImageError code"):
        ImageError("bad_code", "x")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("validate", "full"),
        ("color", "rgba"),
        ("max_pixels", 0),
        ("max_pixels", 1.5),
        ("background", (0, 0)),
        ("background", (0, 0, 256)),
        ("background", "white"),
        ("jpeg_quality", 0),
        ("jpeg_quality", 101),
        ("apply_exif_orientation", "yes"),
    ],
)
def test_policy_rejects_bad_values(field: str, value: object):
    with pytest.raises(ValueError, match=rf"ImagePolicy\.{field} .*{re.escape(repr(value))}"):
        ImagePolicy(**{field: value})


def test_policy_accepts_a_background_list_from_yaml():
    policy = ImagePolicy(background=[0, 0, 0])  # type: ignore[arg-type]
    assert policy.background == (0, 0, 0)
    assert hash(policy) == hash(ImagePolicy(background=(0, 0, 0)))


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "jpeg"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR", "png"),
        (b"GIF89a\x10\x00", "gif"),
        (b"BM" + b"\x00" * 12 + b"\x28\x00\x00\x00", "bmp"),
        (b"BMW owners club\n\n\n\n\n\n", None),
        (b"II*\x00\x08\x00\x00\x00", "tiff"),
        (b"MM\x00*\x00\x00\x00\x08", "tiff"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "webp"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", None),
        (b"\x00\x00\x01\x00\x01\x00\x10\x10", "ico"),
        (b"P6\n64 48\n255\n", "ppm"),
        (b"Please read me", None),
        (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "jpeg2000"),
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1", "avif"),
        (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic", "heif"),
        (b"\x00\x00\x00\x18ftypisom\x00\x00\x00\x00isomavc1", None),
        (b"8BPS\x00\x01", "psd"),
        (b"%PDF-1.7", None),
        (b"", None),
    ],
)
def test_sniff_format_reads_magic_bytes(head: bytes, expected: str | None):
    assert sniff_format(head) == expected


def test_draft_decoding_still_finds_truncated_and_broken_jpegs():
    """The premise of the fast decode check, measured on Pillow itself."""
    good = BY_NAME["rgb_jpeg"].data
    sos = good.find(b"\xff\xda")
    middle = (sos + len(good)) // 2
    damaged = {
        "truncated": good[:middle],
        "bogus_marker": good[:middle] + b"\xff\xc4\x00\x40" + good[middle + 4 :],
        "second_frame": BY_NAME["corrupt_entropy_jpeg"].data,
    }
    for data in damaged.values():
        for draft in (False, True):
            with Image.open(io.BytesIO(data)) as image:
                if draft:
                    image.draft("L", (1, 1))
                with pytest.raises(OSError):
                    image.load()


# --- fuzzing ----------------------------------------------------------------------------------

_FUZZ_POLICIES = [
    ImagePolicy(validate=validate, color=color, max_pixels=1_000_000)
    for validate in ("decode", "header", "none")
    for color in ("rgb", "keep")
]
_SEEDS = [case.data for case in WRITTEN if len(case.data) < 20_000]


@st.composite
def _mutated_images(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(_SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "marker", "cut", "insert", "header"]))
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "set":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "marker":
            data[pos : pos + 2] = bytes([0xFF, draw(st.integers(0, 255))])
        elif kind == "cut":
            data = data[:pos]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=24))
        else:  # the header, where lengths, sizes and modes live
            data[min(pos, 300) % max(len(data), 1)] = draw(st.integers(0, 255))
        if not data:
            break
    return bytes(data)


def _assert_only_image_errors(data: bytes, policy: ImagePolicy) -> None:
    try:
        info = check_image(data, policy)
    except ImageError as err:
        assert err.code in ERROR_CODES
        with pytest.raises(ImageError):
            encode_for_tensorflow(data, policy)
        return
    payload, written = encode_for_tensorflow(data, policy)
    assert written == info
    assert info.encoded_size == len(payload)
    assert info.width * info.height <= policy.max_pixels


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=_mutated_images(), policy=st.sampled_from(_FUZZ_POLICIES))
def test_fuzz_mutated_images_raise_only_image_errors(data: bytes, policy: ImagePolicy):
    _assert_only_image_errors(data, policy)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.binary(max_size=2048), policy=st.sampled_from(_FUZZ_POLICIES))
def test_fuzz_random_bytes_raise_only_image_errors(data: bytes, policy: ImagePolicy):
    _assert_only_image_errors(data, policy)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    magic=st.sampled_from(
        [b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"II*\x00", b"RIFF\x00\x00\x00\x00WEBP"]
    ),
    rest=st.binary(max_size=1024),
    policy=st.sampled_from(_FUZZ_POLICIES),
)
def test_fuzz_magic_then_garbage_raises_only_image_errors(
    magic: bytes, rest: bytes, policy: ImagePolicy
):
    _assert_only_image_errors(magic + rest, policy)


def test_gzip_compressed_content_is_named_as_such():
    """An image compressed whole (or an S3 object kept with Content-Encoding: gzip, which S3
    serves as kept) is reported as gzip, not as bytes of an unknown format."""
    import gzip

    data = gzip.compress(BY_NAME["rgb_jpeg"].data)
    with pytest.raises(ImageError) as raised:
        check_image(data, ImagePolicy())
    assert raised.value.code == "unknown_format"
    assert raised.value.message == "the content is gzip-compressed, not an image"


def test_an_image_wider_than_a_jpeg_can_be_is_refused_as_such_not_as_damaged():
    """libjpeg refuses a side over 65,535 pixels with "broken data stream when writing image
    file", which read as a PNG that did not decode (`corrupt`, "copy the file again")."""
    buffer = io.BytesIO()
    Image.new("RGB", (70_000, 4), "red").save(buffer, "PNG")
    with pytest.raises(ImageError) as raised:
        encode_for_tensorflow(buffer.getvalue(), ImagePolicy(encode="jpeg"))
    assert raised.value.code == "unsupported"
    assert raised.value.message == (
        "a 70000x4 image is larger than a JPEG can be (65,500 pixels a side); PNG can hold it"
    )
    _, info = encode_for_tensorflow(buffer.getvalue(), ImagePolicy(encode="png"))
    # libjpeg's limit is 65,500, below the 65,535 its header could hold.
    narrow = io.BytesIO()
    Image.new("RGB", (65_501, 2), "red").save(narrow, "PNG")
    with pytest.raises(ImageError) as raised:
        encode_for_tensorflow(narrow.getvalue(), ImagePolicy(encode="jpeg"))
    assert raised.value.code == "unsupported"
    assert (info.width, info.height, info.format) == (70_000, 4, "png")
