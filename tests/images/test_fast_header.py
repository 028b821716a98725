"""The header fast path of beam_tfrecord.images gives exactly the Pillow path's answers."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from functools import partial

import numpy as np
import pytest
from hostile_images import hostile_corpus, photo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imagegen import jpeg_bytes, png_bytes
from PIL import Image, ImageFile, PngImagePlugin

from beam_tfrecord.images import (
    ImageError,
    ImageInfo,
    ImagePolicy,
    Resize,
    check_image,
    encode_for_tensorflow,
)
from beam_tfrecord.images import decode as images

HEADER_PREFIX = 64 * 1024  # what the pipeline passes at planning time
CORPUS = {case.name: case.data for case in hostile_corpus()}

# Every switch _process_open looks at: validation, colour, EXIF rotation, then the transforms
# that turn a verbatim image into a re-encoded one, and a pixel limit ordinary images exceed.
POLICIES = [
    ImagePolicy(validate=validate, color=color, apply_exif_orientation=rotate)
    for validate in ("header", "none", "decode")
    for color in ("rgb", "gray", "keep")
    for rotate in (True, False)
]
POLICIES += [
    ImagePolicy(validate="header", color=color, apply_exif_orientation=rotate, **transform)
    for transform in (
        {"resize": Resize.parse("fit:4096x4096")},  # never enlarges: keeps the bytes
        {"resize": Resize.parse("fit:16x16")},
        {"resize": Resize.parse("short:16")},
        {"encode": "jpeg"},
        {"encode": "png"},
        {"store": "raw"},
    )
    for color in ("rgb", "keep")
    for rotate in (True, False)
]
POLICIES += [ImagePolicy(validate=validate, max_pixels=1000) for validate in ("header", "none")]


# --- what is compared ---------------------------------------------------------------------------


def _outcome(call: Callable[[], object]) -> object:
    """The answer, or the error's type, code and message."""
    try:
        return call()
    except ImageError as err:
        return type(err), err.code, err.message


def _with_pillow(call: partial) -> object:
    """The same call with the header fast path off: every image through Pillow."""
    return _outcome(partial(call, fast_headers=False))


def _prefixes(data: bytes) -> list[bytes]:
    """The planner's prefix, short ones, and ones cut inside the last header segment or chunk."""
    cuts = [HEADER_PREFIX, 1024, 200, 40]
    end = _header_end(data)
    if end:
        cuts += [end - 1, end - 6]
    return [data[:cut] for cut in cuts if 0 < cut < len(data)]


def _header_end(data: bytes) -> int:
    """Length of the shortest prefix holding a JPEG's or PNG's header; 0 for other data."""
    if data.startswith(b"\xff\xd8") and b"\xff\xda" in data:
        return data.index(b"\xff\xda") + 14
    if data.startswith(b"\x89PNG") and b"IDAT" in data:
        return data.index(b"IDAT") + 4
    return 0


def _assert_same_answers(data: bytes, policies: list[ImagePolicy] = POLICIES) -> None:
    """check_image and encode_for_tensorflow agree on both paths, for the file and its prefixes."""
    for policy in policies:
        whole = _assert_same(partial(check_image, data, policy))
        if isinstance(whole, ImageInfo) and not whole.reencode:
            # The only answers the fast path gives; re-encoded ones cost a second encode here.
            _assert_same(partial(encode_for_tensorflow, data, policy))
        for prefix in _prefixes(data):
            _assert_same(partial(check_image, prefix, policy, size=len(data)))


def _assert_same(call: partial) -> object:
    fast = _outcome(call)
    assert fast == _with_pillow(call), (call.args[1:], call.keywords, len(call.args[0]))
    return fast


# --- files to compare on ------------------------------------------------------------------------


def _save(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _rgb(width: int = 48, height: int = 32, seed: int = 1) -> Image.Image:
    return Image.fromarray(photo(width, height, seed))


def _jpeg(image: Image.Image | None = None, **params: object) -> bytes:
    return _save(_rgb() if image is None else image, "JPEG", quality=90, **params)


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes((0xFF, marker)) + (len(payload) + 2).to_bytes(2, "big") + payload


def _segments(jpeg: bytes) -> list[tuple[int, int]]:
    """(offset, marker) of every segment before the first scan, walking lengths."""
    found = []
    pos = 2
    while True:
        found.append((pos, jpeg[pos + 1]))
        if jpeg[pos + 1] == 0xDA:
            return found
        pos += 2 + int.from_bytes(jpeg[pos + 2 : pos + 4], "big")


def _offset(jpeg: bytes, marker: int) -> int:
    return next(pos for pos, found in _segments(jpeg) if found == marker)


def _insert(jpeg: bytes, *parts: bytes, before: int = 0xDB) -> bytes:
    """`parts` spliced in before the first segment with marker `before` (the first DQT)."""
    pos = _offset(jpeg, before)
    return jpeg[:pos] + b"".join(parts) + jpeg[pos:]


def _patch_frame(jpeg: bytes, offset: int, value: bytes) -> bytes:
    """Bytes of the frame header (SOF0) overwritten at `offset` from its length field."""
    pos = _offset(jpeg, 0xC0) + 2 + offset
    return jpeg[:pos] + value + jpeg[pos + len(value) :]


def _tiff(entries: list[tuple[int, int, int, bytes]], order: str = "<", tail: bytes = b"") -> bytes:
    """A TIFF header and IFD0 of (tag, type, count, 4-byte value) entries, then `tail`."""
    head = (b"II*\x00" if order == "<" else b"MM\x00*") + struct.pack(order + "I", 8)
    ifd = struct.pack(order + "H", len(entries))
    for tag, field_type, count, value in entries:
        ifd += struct.pack(order + "HHI", tag, field_type, count) + value
    return head + ifd + b"\x00\x00\x00\x00" + tail


def _short(value: int, order: str = "<") -> bytes:
    return struct.pack(order + "HH", value, 0)


def _exif(tiff: bytes) -> bytes:
    return _segment(0xE1, b"Exif\x00\x00" + tiff)


def _orientation_tiff(value: int, order: str = "<") -> bytes:
    return _tiff([(0x0112, 3, 1, _short(value, order))], order)


def _xmp(body: bytes) -> bytes:
    return _segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00" + body)


def _photoshop(*resources: bytes) -> bytes:
    return _segment(0xED, b"Photoshop 3.0\x00" + b"".join(resources))


def _resource(code: int, data: bytes) -> bytes:
    """An 8BIM image resource with an empty (padded) name."""
    return b"8BIM" + code.to_bytes(2, "big") + b"\x00\x00" + len(data).to_bytes(4, "big") + data


def _camera_exif() -> bytes:
    exif = Image.Exif()
    exif[0x010F] = "TestCam"  # Make
    exif[0x0112] = 1
    exif[0x011A] = 300.0  # XResolution
    exif[0x0128] = 2  # ResolutionUnit
    exif[0x0132] = "2024:05:01 12:00:00"
    return exif.tobytes()


def _jpegs() -> dict[str, bytes]:
    plain = _jpeg()
    gray = _rgb().convert("L")
    sof, dht = _offset(plain, 0xC0), _offset(plain, 0xC4)  # Pillow writes DHT after the frame
    frame = plain[sof + 4 : dht]
    cases = {
        "baseline": plain,
        "imagegen": jpeg_bytes(np.random.default_rng(7), 64, 48),
        "baseline_444": _jpeg(subsampling="4:4:4"),
        "baseline_422": _jpeg(subsampling="4:2:2"),
        "progressive": _jpeg(progressive=True),
        "gray": _jpeg(gray),
        "gray_progressive": _jpeg(gray, progressive=True),
        "one_pixel": _jpeg(Image.new("RGB", (1, 1), (10, 20, 30))),
        "larger_than_prefix": _save(_rgb(400, 300, 2), "JPEG", quality=100, subsampling="4:4:4"),
        "camera_exif": _jpeg(exif=_camera_exif()),
        "jfif_dpi_and_exif": _jpeg(dpi=(300, 300), exif=_camera_exif()),
        "comment": _jpeg(comment=b"made by a test"),
        "restart_markers": _jpeg(restart_marker_blocks=1),
        "icc_profile": _jpeg(icc_profile=bytes(range(256)) * 3),
        "pillow_xmp": _jpeg(xmp=b'<x:xmpmeta tiff:Orientation="6"/>'),
        "cmyk": _jpeg(_rgb().convert("CMYK")),
        "mpo": CORPUS["mpo_stereo_jpeg"],
        # Segments Pillow parses, whole and cut short where its parsers index into them.
        "adobe_transform_0": _insert(plain, _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x00")),
        "adobe_transform_1": _insert(plain, _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01")),
        "adobe_transform_2": _insert(plain, _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x02")),
        "adobe_gray": _insert(_jpeg(gray), _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x00")),
        "adobe_no_transform": _insert(plain, _segment(0xEE, b"Adobe\x00\x64")),
        "adobe_short": _insert(plain, _segment(0xEE, b"Adobe\x00")),
        "jfif_short": _insert(plain, _segment(0xE0, b"JFIF\x00")),
        "icc_short": _insert(plain, _segment(0xE2, b"ICC_PROFILE\x00\x01")),
        "icc_short_after_frame": _insert(
            plain, _segment(0xE2, b"ICC_PROFILE\x00\x01"), before=0xC4
        ),
        "photoshop_iptc": _insert(plain, _photoshop(_resource(0x0404, b"\x1c\x02\x00\x00\x02AB"))),
        "photoshop_resolution": _insert(plain, _photoshop(_resource(0x03ED, bytes(16)))),
        "photoshop_short_resolution": _insert(
            plain, _photoshop(_resource(0x03ED, bytes(8)), b"8BIM\x04\x04")
        ),
        "photoshop_cut_after_code": _insert(plain, _photoshop(b"8BIM\x04\x04")),
        "photoshop_cut_in_code": _insert(plain, _photoshop(b"8BIM\x04")),
        "photoshop_cut_in_size": _insert(plain, _photoshop(b"8BIM\x04\x04\x00\x00\x00")),
        "photoshop_odd_name": _insert(
            plain, _photoshop(b"8BIM\x04\x04\x03abc\x00\x00\x00\x02xy", b"8BIM\x04\x04")
        ),
        "mpf_index": _insert(plain, _segment(0xE2, b"MPF\x00" + bytes(20))),
        "dqt_16_bit": _insert(plain, _segment(0xDB, b"\x12" + bytes(128))),
        "dqt_16_bit_table_0": _insert(
            plain, _segment(0xDB, b"\x10" + bytes(128) + b"\x01" + bytes(64))
        ),
        "dqt_cut": _insert(plain, _segment(0xDB, b"\x02" + bytes(63))),
        "dqt_empty": _insert(plain, _segment(0xDB, b"")),
        # Structure both readers of the Pillow path take differently or refuse.
        "fill_bytes": _insert(plain, b"\xff\xff\xff"),
        "stray_bytes": _insert(plain, b"\x00\x12\x34"),
        "restart_marker_between": _insert(plain, b"\xff\xd0"),
        "tem_marker": _insert(plain, b"\xff\x01"),
        "stuffed_zero": _insert(plain, b"\xff\x00"),
        "early_eoi": _insert(plain, b"\xff\xd9"),
        "second_soi": _insert(plain, b"\xff\xd8"),
        "jpg0_marker": _insert(plain, b"\xff\xf0"),
        "dhp_segment": _insert(plain, _segment(0xDE, b"\x08\x00\x10\x00\x10\x01\x01\x11\x00")),
        "dnl_segment": _insert(plain, _segment(0xDD, b"\x00\x10"), _segment(0xDC, b"\x00\x10")),
        "second_frame": _insert(
            plain, plain[_offset(plain, 0xC0) : _offset(plain, 0xC4)], before=0xC4
        ),
        "zero_length": _insert(plain, b"\xff\xfe\x00\x00"),
        "sof1_extended": _patch_frame(plain, -1, b"\xc1"),
        "sof3_lossless": _patch_frame(plain, -1, b"\xc3"),
        "sof9_arithmetic": _patch_frame(plain, -1, b"\xc9"),
        "precision_12": _patch_frame(plain, 2, b"\x0c"),
        "height_0": _patch_frame(plain, 3, b"\x00\x00"),
        "width_0": _patch_frame(plain, 5, b"\x00\x00"),
        "two_components": _patch_frame(plain, 7, b"\x02"),
        "frame_length_long": _patch_frame(plain, 0, b"\x00\x12"),
        "frame_extra_byte": plain[:sof] + _segment(0xC0, frame + b"\x00") + plain[dht:],
        "frame_extra_component": plain[:sof]
        + _segment(0xC0, frame + b"\x04\x11\x00")
        + plain[dht:],
        "bomb": _patch_frame(plain, 3, b"\xea\x60\xea\x60"),
    }
    # EXIF orientations, read from IFD0 in both byte orders; rotation is the Pillow path's job.
    for value in range(10):
        cases[f"exif_orientation_{value}"] = _insert(plain, _exif(_orientation_tiff(value)))
        cases[f"exif_orientation_{value}_big_endian"] = _insert(
            plain, _exif(_orientation_tiff(value, ">"))
        )
    ascii_make = (0x010F, 2, 8, struct.pack("<I", 38))  # "TestCam\0", after an IFD of two
    exif_blocks = {
        "orientation_long": _tiff([(0x0112, 4, 1, struct.pack("<I", 6))]),
        "orientation_two_values": _tiff([(0x0112, 3, 2, _short(6) + b"")]),
        "orientation_no_values": _tiff([(0x0112, 3, 0, _short(6))]),
        "orientation_byte": _tiff([(0x0112, 1, 1, b"\x06\x00\x00\x00")]),
        "orientation_unknown_type": _tiff([(0x0112, 99, 1, _short(6))]),
        "orientation_twice": _tiff([(0x0112, 3, 1, _short(1)), (0x0112, 3, 1, _short(6))]),
        "orientation_65535": _tiff([(0x0112, 3, 1, _short(65535))]),
        "with_make": _tiff([ascii_make, (0x0112, 3, 1, _short(6))], tail=b"TestCam\x00"),
        "value_out_of_block": _tiff([ascii_make, (0x0112, 3, 1, _short(6))]),
        "unknown_type_first": _tiff([(0x010F, 0, 1, bytes(4)), (0x0112, 3, 1, _short(6))]),
        "empty_value_only": _tiff([(0x010F, 2, 0, bytes(4))]),
        "no_entries": _tiff([]),
        "entries_cut": _tiff([(0x0112, 3, 1, _short(6))] * 3)[:30],
        "no_next_pointer": _tiff([(0x0112, 3, 1, _short(6))])[:-4],
        "text_resolution": _tiff([(0x011A, 2, 2, b"7\x00\x00\x00"), (0x0128, 3, 1, _short(2))]),
        "byte_resolution": _tiff([(0x011A, 1, 1, b"\x48\x00\x00\x00"), (0x0128, 3, 1, _short(2))]),
        "rational_resolution": _tiff(
            [(0x011A, 5, 1, struct.pack("<I", 38)), (0x0128, 3, 1, _short(3))],
            tail=struct.pack("<II", 300, 0),
        ),
        "last_entry_cut": _tiff([(0x0112, 3, 1, _short(6)), ascii_make])[:-8],
        "ifd_beyond_block": b"II*\x00\xff\x00\x00\x00" + bytes(12),
        "ifd_in_header": b"II*\x00\x04\x00\x00\x00" + bytes(12),
        "header_only": b"II*\x00\x08\x00\x00\x00",
        "short_header": b"II*\x00\x08",
        "not_tiff": b"XX*\x00\x08\x00\x00\x00" + bytes(14),
        "odd_tiff_magic": b"MM*\x00\x00\x00\x00\x08" + bytes(14),
        "bigtiff": b"II+\x00\x08\x00\x00\x00" + bytes(24),
        "exif_prefix_twice": b"Exif\x00\x00" + _orientation_tiff(6),
        "empty": b"",
        "junk": b"MM\x00*\x00\x00\x00\x08\xff\xff" + b"\x01" * 40,
    }
    for name, tiff in exif_blocks.items():
        cases[f"exif_{name}"] = _insert(plain, _exif(tiff))
    cases["exif_twice"] = _insert(plain, _exif(_orientation_tiff(1)), _exif(_orientation_tiff(6)))
    cases["exif_after_frame"] = _insert(plain, _exif(_orientation_tiff(6)), before=0xC4)
    # XMP: Pillow takes its orientation only when EXIF has none.
    attribute, element = b'<r tiff:Orientation="6"/>', b"<tiff:Orientation>3</tiff:Orientation>"
    cases["xmp_attribute"] = _insert(plain, _xmp(attribute))
    cases["xmp_element"] = _insert(plain, _xmp(element))
    cases["xmp_orientation_1"] = _insert(plain, _xmp(b'tiff:Orientation="1"'))
    cases["xmp_orientation_9"] = _insert(plain, _xmp(b'tiff:Orientation="9"'))
    cases["xmp_empty"] = _insert(plain, _xmp(b""))
    cases["xmp_twice"] = _insert(plain, _xmp(attribute), _xmp(b"<nothing/>"))
    cases["xmp_and_exif_orientation"] = _insert(plain, _exif(_orientation_tiff(1)), _xmp(element))
    cases["xmp_and_exif_without_tags"] = _insert(plain, _exif(_tiff([])), _xmp(attribute))
    cases["xmp_and_broken_exif"] = _insert(plain, _exif(b"XX*\x00" + bytes(20)), _xmp(attribute))
    return cases


def _chunk(chunk_type: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(chunk_type + payload)
    return struct.pack(">I", len(payload)) + chunk_type + payload + struct.pack(">I", crc)


def _ihdr(width: int, height: int, depth: int, color_type: int, *rest: int) -> bytes:
    method, filtering, interlace = rest or (0, 0, 0)
    fields = struct.pack(">IIBBBBB", width, height, depth, color_type, method, filtering, interlace)
    return _chunk(b"IHDR", fields)


def _png(ihdr: bytes, *chunks: bytes, rows: bytes = b"\x00\x7f\x7f\x7f" * 4) -> bytes:
    """A PNG from an IHDR chunk, header chunks and one IDAT of the given filtered rows."""
    idat = _chunk(b"IDAT", zlib.compress(rows))
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"".join(chunks) + idat + _chunk(b"IEND", b"")


def _raw_png(samples: np.ndarray, color_type: int, interlace: bool = False) -> bytes:
    """A PNG of 8- or 16-bit samples, with Adam7 written as its seven passes."""
    samples = samples.reshape(samples.shape[0], samples.shape[1], -1)
    height, width, _ = samples.shape
    big_endian = samples.astype(samples.dtype.newbyteorder(">"))
    passes = [(0, 0, 1, 1)]
    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4)]
        passes += [(0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    rows = b"".join(
        b"\x00" + row.tobytes()
        for x0, y0, dx, dy in passes
        for row in big_endian[y0::dy, x0::dx]
        if row.size
    )
    ihdr = _ihdr(width, height, samples.dtype.itemsize * 8, color_type, 0, 0, int(interlace))
    return _png(ihdr, rows=rows)


def _pngs() -> dict[str, bytes]:
    rgb = _rgb()
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "a test")
    info.add_text("Comment", "zipped", zip=True)
    plain_text = PngImagePlugin.PngInfo()
    plain_text.add_text("Software", "a test")
    itxt = PngImagePlugin.PngInfo()
    itxt.add_itxt("XML:com.adobe.xmp", '<r tiff:Orientation="6"/>')
    itxt_zip = PngImagePlugin.PngInfo()
    itxt_zip.add_itxt("Description", "zipped", zip=True)
    pixels = photo(48, 32, 3)
    alpha = (np.arange(48 * 32, dtype=np.uint16).reshape(32, 48) * 40).astype(np.uint16)
    gray_rows = b"\x00\x10\x20\x30\x40" * 4  # 4x4 8-bit gray, for hand-built headers
    gray = _ihdr(4, 4, 8, 0)
    large_profile = zlib.compress(bytes(2 * PngImagePlugin.MAX_TEXT_CHUNK))
    cases = {
        "rgb": _save(rgb, "PNG"),
        "imagegen": png_bytes(np.random.default_rng(8), 40, 30),
        "gray": _save(rgb.convert("L"), "PNG"),
        "gray_alpha": _save(rgb.convert("LA"), "PNG"),
        "rgba": _save(rgb.convert("RGBA"), "PNG"),
        "palette": _save(rgb.convert("P"), "PNG"),
        "palette_transparent": _save(rgb.convert("P"), "PNG", transparency=0),
        "gray_colour_key": _save(rgb.convert("L"), "PNG", transparency=7),
        "rgb_colour_key": _save(rgb, "PNG", transparency=(0, 0, 0)),
        "bilevel": _save(rgb.convert("1"), "PNG"),
        "gray16": _save(Image.fromarray(pixels[:, :, 0].astype(np.uint16) * 200), "PNG"),
        "rgb16": _raw_png(pixels.astype(np.uint16) * 257, 2),
        "rgba16": _raw_png(np.dstack([pixels.astype(np.uint16) * 257, alpha]), 6),
        "interlaced_rgb": _raw_png(pixels, 2, interlace=True),
        "interlaced_gray": _raw_png(pixels[:, :, 0], 0, interlace=True),
        "interlaced_rgba": _raw_png(np.dstack([pixels, pixels[:, :, :1]]), 6, interlace=True),
        "larger_than_prefix": _save(Image.fromarray(photo(200, 150, 4)), "PNG", compress_level=0),
        "apng": CORPUS["animated_png"],
        "text": _save(rgb, "PNG", pnginfo=info),
        "text_uncompressed": _save(rgb, "PNG", pnginfo=plain_text),
        "itxt": _save(rgb, "PNG", pnginfo=itxt),
        "itxt_compressed": _save(rgb, "PNG", pnginfo=itxt_zip),
        "icc_profile": _save(rgb, "PNG", icc_profile=bytes(range(256)) * 3),
        "dpi": _save(rgb, "PNG", dpi=(300, 300)),
        "exif_chunk": _save(rgb, "PNG", exif=_camera_exif()),
        "one_pixel": _save(Image.new("RGB", (1, 1), (10, 20, 30)), "PNG"),
        "plain_gray": _png(gray, rows=gray_rows),
        "gamma": _png(gray, _chunk(b"gAMA", struct.pack(">I", 45455)), rows=gray_rows),
        "gamma_short": _png(gray, _chunk(b"gAMA", b"\x00\x01"), rows=gray_rows),
        "chromaticity": _png(gray, _chunk(b"cHRM", bytes(32)), rows=gray_rows),
        "chromaticity_odd": _png(gray, _chunk(b"cHRM", bytes(30)), rows=gray_rows),
        "srgb": _png(gray, _chunk(b"sRGB", b"\x00"), rows=gray_rows),
        "srgb_empty": _png(gray, _chunk(b"sRGB", b""), rows=gray_rows),
        "physical_size": _png(gray, _chunk(b"pHYs", bytes(9)), rows=gray_rows),
        "physical_size_short": _png(gray, _chunk(b"pHYs", bytes(8)), rows=gray_rows),
        "palette_in_gray": _png(gray, _chunk(b"PLTE", bytes(6)), rows=gray_rows),
        "background": _png(gray, _chunk(b"bKGD", b"\x00\x10"), rows=gray_rows),
        "unknown_ancillary": _png(gray, _chunk(b"teSt", b"data"), rows=gray_rows),
        "unknown_critical": _png(gray, _chunk(b"CRIT", b"data"), rows=gray_rows),
        "digit_in_type": _png(gray, _chunk(b"te5t", b"data"), rows=gray_rows),
        "text_transparency": _png(gray, _chunk(b"tEXt", b"transparency\x000"), rows=gray_rows),
        "text_exif": _png(
            gray, _chunk(b"tEXt", b"exif\x00Exif\x00\x00" + _orientation_tiff(6)), rows=gray_rows
        ),
        "text_no_separator": _png(gray, _chunk(b"tEXt", b"keyonly"), rows=gray_rows),
        "text_empty_key": _png(gray, _chunk(b"tEXt", b"\x00value"), rows=gray_rows),
        "itxt_exif": _png(gray, _chunk(b"iTXt", b"exif\x00\x00\x00\x00\x00x"), rows=gray_rows),
        "itxt_short": _png(gray, _chunk(b"iTXt", b"key\x00\x01"), rows=gray_rows),
        "itxt_too_large": _png(
            gray, _chunk(b"iTXt", b"key\x00\x01\x00\x00\x00" + large_profile), rows=gray_rows
        ),
        "ztxt_broken": _png(gray, _chunk(b"zTXt", b"key\x00\x00garbage"), rows=gray_rows),
        "icc_method_1": _png(
            gray, _chunk(b"iCCP", b"icc\x00\x01" + zlib.compress(b"x")), rows=gray_rows
        ),
        "icc_no_name_end": _png(gray, _chunk(b"iCCP", b"icc"), rows=gray_rows),
        "icc_name_only": _png(gray, _chunk(b"iCCP", b"icc\x00"), rows=gray_rows),
        "icc_broken_deflate": _png(gray, _chunk(b"iCCP", b"icc\x00\x00garbage"), rows=gray_rows),
        "icc_too_large": _png(
            gray, _chunk(b"iCCP", b"icc\x00\x00" + large_profile), rows=gray_rows
        ),
        "exif_chunk_orientation_1": _png(
            gray, _chunk(b"eXIf", _orientation_tiff(1)), rows=gray_rows
        ),
        "bad_crc": _png(gray, _chunk(b"teSt", b"data")[:-1] + b"\x00", rows=gray_rows),
        "bad_ihdr_crc": _png(gray[:-1] + b"\x00", rows=gray_rows),
        "second_ihdr": _png(gray, gray, rows=gray_rows),
        "second_ihdr_other_size": _png(gray, _ihdr(8, 8, 8, 0), rows=gray_rows),
        "iend_before_idat": _png(gray, _chunk(b"IEND", b""), rows=gray_rows),
        "ihdr_method_1": _png(_ihdr(4, 4, 8, 0, 1, 0, 0), rows=gray_rows),
        "ihdr_filter_1": _png(_ihdr(4, 4, 8, 0, 0, 1, 0), rows=gray_rows),
        "ihdr_interlace_2": _png(_ihdr(4, 4, 8, 0, 0, 0, 2), rows=gray_rows),
        "width_0": _png(_ihdr(0, 4, 8, 0), rows=gray_rows),
        "ihdr_long": _png(_chunk(b"IHDR", gray[8:21] + b"\x00"), rows=gray_rows),
        "gray_2_bit": _png(_ihdr(4, 4, 2, 0), rows=b"\x00\x1b" * 4),
        "bomb": _png(_ihdr(100_000, 100_000, 8, 2), rows=gray_rows),
    }
    huge = bytearray(cases["plain_gray"])
    huge[33:37] = b"\x80\x00\x00\x00"  # the IDAT length
    cases["idat_length_too_large"] = bytes(huge)
    return cases


JPEGS = _jpegs()
PNGS = _pngs()


# --- equivalence ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_corpus_gets_the_pillow_answers(name: str):
    _assert_same_answers(CORPUS[name])


@pytest.mark.parametrize("name", sorted(JPEGS))
def test_generated_jpegs_get_the_pillow_answers(name: str):
    _assert_same_answers(JPEGS[name])


@pytest.mark.parametrize("name", sorted(PNGS))
def test_generated_pngs_get_the_pillow_answers(name: str):
    _assert_same_answers(PNGS[name])


def test_pillow_told_to_load_truncated_images_gives_the_same_answers(monkeypatch):
    # A process-wide Pillow switch that changes what its PNG reader accepts (CRCs, short chunks).
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    quick = [p for p in POLICIES if p.validate != "decode" and p.resize is None and not p.encode]
    for data in [*CORPUS.values(), *PNGS.values()]:
        if data.startswith(b"\x89PNG"):
            _assert_same_answers(data, quick)


def test_pillow_text_limits_give_the_same_answers(monkeypatch):
    # Pillow refuses PNGs whose text outgrows these module-level limits; callers may lower them.
    monkeypatch.setattr(PngImagePlugin, "MAX_TEXT_MEMORY", 8)
    monkeypatch.setattr(PngImagePlugin, "MAX_TEXT_CHUNK", 100)
    for name in ("text_uncompressed", "itxt", "icc_profile", "text_no_separator", "rgb"):
        _assert_same_answers(PNGS[name], POLICIES[:6])


# --- the fast path is the one taken -----------------------------------------------------------

ORDINARY = {
    "hostile rgb_jpeg": CORPUS["rgb_jpeg"],
    "hostile gray_jpeg": CORPUS["gray_jpeg"],
    "hostile progressive_jpeg": CORPUS["progressive_jpeg"],
    "hostile exif_orientation_1_jpeg": CORPUS["exif_orientation_1_jpeg"],
    "hostile rgb_png": CORPUS["rgb_png"],
    "hostile gray_png": CORPUS["gray_png"],
    "hostile interlaced_png": CORPUS["interlaced_png"],
    "camera jpeg": JPEGS["camera_exif"],
    "jpeg with ICC, XMP, APP13 and Adobe": _insert(
        JPEGS["icc_profile"],
        _xmp(b"<x/>"),
        _photoshop(_resource(0x0404, b"\x1c\x02")),
        _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01"),
    ),
    "png with text, ICC and pHYs": PNGS["text_uncompressed"][:33]
    + _chunk(b"pHYs", bytes(9))
    + _chunk(b"iCCP", b"icc\x00\x00" + zlib.compress(b"p" * 300))
    + PNGS["text_uncompressed"][33:],
    "rgba png, keep": _save(_rgb().convert("RGBA"), "PNG"),
}


def _refuse(*args: object) -> None:
    raise AssertionError("the Pillow path was taken")


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_ordinary_images_are_answered_without_pillow(name: str, monkeypatch):
    data = ORDINARY[name]
    color = "keep" if name.startswith("rgba") else "rgb"
    expected = {
        validate: check_image(data, ImagePolicy(validate=validate, color=color))
        for validate in ("header", "none")
    }
    monkeypatch.setattr(images, "_open", _refuse)
    monkeypatch.setattr(images, "_quiet_pillow", _refuse)
    for validate, info in expected.items():
        policy = ImagePolicy(validate=validate, color=color)
        assert check_image(data, policy) == info
        assert check_image(data[: _header_end(data)], policy, size=len(data)) == info
        assert encode_for_tensorflow(data, policy) == (data, info)
        assert not info.reencode


def test_an_unapplied_exif_rotation_is_answered_without_pillow(monkeypatch):
    data = CORPUS["exif_orientation_6_jpeg"]
    monkeypatch.setattr(images, "_open", _refuse)
    info = check_image(data, ImagePolicy(validate="header", apply_exif_orientation=False))
    assert (info.width, info.height, info.notes) == (96, 64, ("exif_orientation_ignored",))


# Header variants the fast path answers itself, because Pillow reads them without failing and
# with the same result; this list keeps the fast path from silently growing more cautious.
ANSWERED_WITHOUT_PILLOW = [
    *(
        f"jpeg {name}"
        for name in (
            "baseline",
            "baseline_444",
            "baseline_422",
            "progressive",
            "gray",
            "gray_progressive",
            "one_pixel",
            "larger_than_prefix",
            "camera_exif",
            "jfif_dpi_and_exif",
            "comment",
            "restart_markers",
            "icc_profile",
            "pillow_xmp",
            "adobe_transform_0",
            "adobe_transform_1",
            "adobe_transform_2",
            "adobe_gray",
            "adobe_no_transform",
            "photoshop_iptc",
            "photoshop_resolution",
            "photoshop_short_resolution",
            "photoshop_cut_in_code",
            "photoshop_cut_in_size",
            "dqt_16_bit",
            "dqt_16_bit_table_0",
            "dqt_empty",
            "fill_bytes",
            "sof1_extended",
            "bomb",
            *(f"exif_orientation_{value}" for value in range(10)),
            *(f"exif_orientation_{value}_big_endian" for value in range(10)),
            "exif_orientation_65535",
            "exif_with_make",
            "exif_rational_resolution",
            "exif_empty_value_only",
            "exif_no_entries",
            "exif_no_next_pointer",
            "exif_after_frame",
            "xmp_attribute",
            "xmp_element",
            "xmp_orientation_1",
            "xmp_orientation_9",
            "xmp_empty",
            "xmp_twice",
            "xmp_and_exif_orientation",
            "xmp_and_exif_without_tags",
        )
    ),
    *(
        f"png {name}"
        for name in (
            "rgb",
            "gray",
            "gray_alpha",
            "rgba",
            "interlaced_rgb",
            "interlaced_gray",
            "interlaced_rgba",
            "larger_than_prefix",
            "text_uncompressed",
            "itxt",
            "icc_profile",
            "dpi",
            "one_pixel",
            "plain_gray",
            "gamma",
            "chromaticity",
            "srgb",
            "physical_size",
            "palette_in_gray",
            "background",
            "unknown_ancillary",
            "text_no_separator",
            "text_empty_key",
            "icc_broken_deflate",
            "bomb",
        )
    ),
]


@pytest.mark.parametrize("name", ANSWERED_WITHOUT_PILLOW)
def test_header_variants_are_answered_without_pillow(name: str, monkeypatch):
    fmt, case = name.split()
    data = (JPEGS if fmt == "jpeg" else PNGS)[case]
    policy = ImagePolicy(validate="header", color="keep", apply_exif_orientation=False)
    expected = _with_pillow(partial(check_image, data, policy))
    monkeypatch.setattr(images, "_open", _refuse)
    assert _outcome(partial(check_image, data, policy)) == expected
    prefix = data[: _header_end(data)]
    assert _outcome(partial(check_image, prefix, policy, size=len(data))) == expected


@pytest.mark.parametrize(
    ("data", "policy"),
    [
        (CORPUS["rgb_jpeg"], ImagePolicy(validate="decode")),
        (CORPUS["cmyk_jpeg"], ImagePolicy(validate="header")),
        (CORPUS["mpo_stereo_jpeg"], ImagePolicy(validate="header")),  # Pillow's MPO reader
        (CORPUS["exif_orientation_6_jpeg"], ImagePolicy(validate="header")),
        (CORPUS["rgba_png"], ImagePolicy(validate="header")),
        (CORPUS["animated_png"], ImagePolicy(validate="header")),
        (CORPUS["rgb_png"], ImagePolicy(validate="header", resize=Resize.parse("16"))),
    ],
    ids=["decode", "cmyk", "mpo", "rotated", "alpha_to_flatten", "apng", "resized"],
)
def test_what_the_fast_path_does_not_answer_goes_to_pillow(data: bytes, policy, monkeypatch):
    monkeypatch.setattr(images, "_open", _refuse)
    with pytest.raises(AssertionError, match="the Pillow path was taken"):
        check_image(data, policy)


# --- fuzzing the headers ------------------------------------------------------------------------

_FUZZ_POLICIES = [
    ImagePolicy(validate=validate, color=color, apply_exif_orientation=rotate)
    for validate in ("header", "none")
    for color in ("rgb", "keep")
    for rotate in (True, False)
]
# A header with one of everything the fast path reads: JFIF, EXIF with tags and an orientation,
# XMP, ICC, APP13, Adobe, a comment, DQT, SOF, DHT, DRI.
_RICH_JPEG = _insert(
    _jpeg(_rgb(24, 16, 5), exif=_camera_exif(), icc_profile=b"icc" * 20, restart_marker_blocks=1),
    _xmp(b'<r tiff:Orientation="3"/>'),
    _photoshop(_resource(0x03ED, bytes(16)), _resource(0x0404, b"\x1c\x02")),
    _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01"),
    _segment(0xFE, b"comment"),
)
_RICH_PNG = ORDINARY["png with text, ICC and pHYs"]


@st.composite
def _mutated_header(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    end = _header_end(seed)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["set", "flip", "marker", "insert", "delete", "cut"]))
        pos = draw(st.integers(2, min(end, len(data)) - 1))
        if kind == "set":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "marker":
            data[pos : pos + 2] = bytes((0xFF, draw(st.integers(0, 255))))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        else:
            del data[pos:]
        if len(data) < 4:
            break
    return bytes(data)


def _assert_fuzzed_answers_agree(data: bytes, policy: ImagePolicy, extra: int) -> None:
    # extra > 0: `data` is a prefix of a longer file
    _assert_same(partial(check_image, data, policy, size=len(data) + extra))


@settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=_mutated_header(_RICH_JPEG),
    policy=st.sampled_from(_FUZZ_POLICIES),
    extra=st.sampled_from([0, 0, 1, 5000]),
)
def test_fuzz_mutated_jpeg_headers_get_the_pillow_answers(
    data: bytes, policy: ImagePolicy, extra: int
):
    _assert_fuzzed_answers_agree(data, policy, extra)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=_mutated_header(_RICH_PNG),
    policy=st.sampled_from(_FUZZ_POLICIES),
    extra=st.sampled_from([0, 0, 1, 5000]),
)
def test_fuzz_mutated_png_headers_get_the_pillow_answers(
    data: bytes, policy: ImagePolicy, extra: int
):
    _assert_fuzzed_answers_agree(data, policy, extra)


@st.composite
def _exif_blocks(draw: st.DrawFn) -> bytes:
    """EXIF of random IFD0 entries: the tags Pillow reads, any field type, count and value."""
    order = draw(st.sampled_from("<>"))
    entry = st.tuples(
        st.sampled_from([0x0112, 0x011A, 0x0128, 0x010F, 0x8769]),
        st.one_of(st.sampled_from([3, 3, 4, 2, 5, 7]), st.integers(0, 14)),
        st.one_of(st.just(1), st.integers(0, 6)),
        st.one_of(  # a small number, or an offset into the block, or anything
            st.integers(0, 100).map(lambda value: struct.pack(order + "I", value)),
            st.integers(0, 9).map(lambda value: _short(value, order)),
            st.binary(min_size=4, max_size=4),
        ),
    )
    tiff = _tiff(draw(st.lists(entry, max_size=5)), order, tail=draw(st.binary(max_size=24)))
    if draw(st.booleans()):
        tiff = tiff[: draw(st.integers(0, len(tiff)))]
    return _exif(tiff)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    exif=_exif_blocks(),
    xmp=st.sampled_from([b"", _xmp(b'tiff:Orientation="8"')]),
    policy=st.sampled_from(_FUZZ_POLICIES),
)
def test_fuzz_exif_blocks_get_the_pillow_answers(exif: bytes, xmp: bytes, policy: ImagePolicy):
    data = _insert(JPEGS["baseline"], exif, xmp)
    _assert_same(partial(check_image, data, policy))


def test_the_rich_headers_are_answered_by_the_fast_path(monkeypatch):
    """The fuzzing seeds start on the fast path, so mutations explore its edges."""
    monkeypatch.setattr(images, "_open", _refuse)
    for data in (_RICH_JPEG, _RICH_PNG):
        assert not check_image(data, ImagePolicy(validate="header", color="keep")).reencode
