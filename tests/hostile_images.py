"""A deterministic corpus of the dirty images real collections contain, built in memory."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, features

__all__ = ["Expect", "HostileCase", "hostile_corpus", "photo"]


@dataclass(frozen=True)
class Expect:
    """What beam_tfrecord.images must do with a case.

    Attributes:
        outcome: "written" or "skipped".
        code: The ImageError code when skipped.
        source_format: The format the content really is.
        format: The written format under the default policy (color="rgb").
        reencode: Whether the default policy re-encodes it.
        notes: The exact notes under the default policy.
        keep_channels: Channels stated under color="keep".
        keep_reencode: Whether color="keep" re-encodes it.
        size: (width, height) as TensorFlow will decode the written bytes.
    """

    outcome: str
    code: str | None = None
    source_format: str | None = None
    format: str | None = None
    reencode: bool | None = None
    notes: frozenset[str] = field(default_factory=frozenset)
    keep_channels: int | None = None
    keep_reencode: bool | None = None
    size: tuple[int, int] | None = None


@dataclass(frozen=True)
class HostileCase:
    """One file: its name (with a realistic, sometimes lying, extension), bytes and expectation."""

    name: str
    filename: str
    data: bytes
    expect: Expect


def _written(
    source_format: str,
    fmt: str,
    size: tuple[int, int],
    *,
    reencode: bool,
    keep_channels: int,
    keep_reencode: bool | None = None,
    notes: tuple[str, ...] = (),
) -> Expect:
    return Expect(
        outcome="written",
        source_format=source_format,
        format=fmt,
        reencode=reencode,
        notes=frozenset(notes),
        keep_channels=keep_channels,
        keep_reencode=reencode if keep_reencode is None else keep_reencode,
        size=size,
    )


def _skipped(code: str) -> Expect:
    return Expect(outcome="skipped", code=code)


def photo(width: int, height: int, seed: int) -> np.ndarray:
    """An RGB uint8 array that compresses like a photograph: smooth shapes plus sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for c in range(3):
        fx, fy, phase = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.28)
        wave = np.sin(x / width * fx * 6.28 + phase) * np.cos(y / height * fy * 6.28)
        ramp = (x / width * 0.6 + y / height * 0.4) * (c + 1) / 3
        channels.append(0.5 + 0.3 * wave + 0.2 * ramp)
    image = np.stack(channels, axis=-1) * 255
    for _ in range(4):  # a few flat blobs, like objects against a background
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(4, width / 3)
        mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        image[mask] = rng.uniform(0, 255, 3)
    image += rng.normal(0, 4, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def _save(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _rgb(width: int, height: int, seed: int) -> Image.Image:
    return Image.fromarray(photo(width, height, seed))


def _gray(width: int, height: int, seed: int) -> Image.Image:
    return _rgb(width, height, seed).convert("L")


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _png_chunk(chunk_type: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(chunk_type + payload)
    return struct.pack(">I", len(payload)) + chunk_type + payload + struct.pack(">I", crc)


def _raw_png(samples: np.ndarray, color_type: int, *, interlace: bool = False) -> bytes:
    """A PNG written by hand, for what Pillow cannot write: 16-bit RGB, Adam7 interlacing."""
    if samples.ndim == 2:
        samples = samples[:, :, None]
    height, width, _ = samples.shape
    big_endian = samples.astype(samples.dtype.newbyteorder(">"))
    depth = samples.dtype.itemsize * 8
    passes = [(0, 0, 1, 1)]
    if interlace:  # Adam7: (x0, y0, dx, dy) per pass
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4)]
        passes += [(0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = bytearray()
    for x0, y0, dx, dy in passes:
        sub = big_endian[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()  # filter type 0 (None)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, int(interlace))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(bytes(raw), 6))
        + _png_chunk(b"IEND", b"")
    )


def _png_bomb() -> bytes:
    """A 100 000 x 100 000 gray PNG header (10 gigapixels) in front of a few hundred bytes."""
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 100_001 * 4, 9)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def _jpeg_segment(data: bytes, marker: int) -> int:
    """Offset of the first segment with `marker` (walking lengths, not searching bytes)."""
    pos = 2
    while data[pos + 1] != marker:
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    return pos


def _jpeg_bomb() -> bytes:
    """A small JPEG whose frame header claims 60 000 x 60 000 pixels."""
    data = bytearray(_save(_rgb(64, 48, 30), "JPEG", quality=80))
    sof = _jpeg_segment(bytes(data), 0xC0)
    data[sof + 5 : sof + 9] = struct.pack(">HH", 60_000, 60_000)
    return bytes(data)


def _ycck_jpeg() -> bytes:
    """A 4-component JPEG flagged YCCK in its Adobe segment (libjpeg decodes it to CMYK).

    Pillow writes CMYK with Adobe transform 0; flipping the transform to 2 makes libjpeg apply
    the YCC->RGB step to the first three components, which is the decoding path real YCCK files
    (Photoshop CMYK exports) take.
    """
    data = bytearray(_save(_rgb(72, 48, 31).convert("CMYK"), "JPEG", quality=90))
    adobe = _jpeg_segment(bytes(data), 0xEE)
    assert data[adobe + 4 : adobe + 9] == b"Adobe"
    data[adobe + 15] = 2  # length(2) + "Adobe" + version(2) + flags0(2) + flags1(2), transform
    return bytes(data)


def _corrupt_entropy_jpeg() -> bytes:
    """Garbage with marker bytes in the middle of the scan, as a bad sector or bad copy leaves."""
    data = bytearray(_save(_rgb(160, 120, 32), "JPEG", quality=90))
    sos = _jpeg_segment(bytes(data), 0xDA)
    middle = (sos + len(data)) // 2
    data[middle : middle + 16] = b"\xff\xc0\x00\x11\x08\x00\x10\x00\x10\x03" + b"\x01" * 6
    return bytes(data)


def _bitflip_jpeg() -> bytes:
    """Flipped bits (no marker bytes) in the scan: libjpeg only warns, TensorFlow decodes it."""
    data = bytearray(_save(_rgb(160, 120, 33), "JPEG", quality=90))
    sos = _jpeg_segment(bytes(data), 0xDA)
    middle = (sos + len(data)) // 2
    for i in range(middle, middle + 40):
        if data[i] not in (0xFF, 0x00) and data[i] ^ 0x24 != 0xFF:
            data[i] ^= 0x24
    return bytes(data)


def _bad_idat_crc_png() -> bytes:
    """A PNG whose IDAT CRC is wrong: Pillow decodes it, libpng (TensorFlow) refuses it."""
    data = bytearray(_save(_rgb(64, 48, 34), "PNG"))
    idat = data.find(b"IDAT")
    length = int.from_bytes(data[idat - 4 : idat], "big")
    data[idat + 4 + length] ^= 0x01
    return bytes(data)


def _unknown_critical_chunk_png() -> bytes:
    """A PNG with a critical chunk PNG does not define: Pillow skips it, libpng refuses the file."""
    data = _save(_rgb(40, 30, 35), "PNG")
    after_ihdr = 8 + 25
    return data[:after_ihdr] + _png_chunk(b"VENd", b"vendor data") + data[after_ihdr:]


def _bad_interlace_png() -> bytes:
    """A PNG whose IHDR names interlace method 2, which PNG does not define."""
    samples = photo(20, 16, 36)
    data = bytearray(_raw_png(samples, 2))
    data[28] = 2  # IHDR's interlace byte
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _big_header_jpeg() -> bytes:
    """A JPEG with ~90 KB of ICC profile before the frame header, like Photoshop exports."""
    profile = np.random.default_rng(35).integers(0, 256, 90_000, dtype=np.uint8).tobytes()
    return _save(_rgb(120, 80, 35), "JPEG", quality=85, icc_profile=profile)


def _heic_like() -> bytes:
    """The opening boxes of an iPhone HEIC photo, then noise."""
    ftyp = struct.pack(">I", 24) + b"ftypheic" + b"\x00\x00\x00\x00" + b"mif1heic"
    noise = np.random.default_rng(36).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    return ftyp + noise


def _random_bytes() -> bytes:
    data = np.random.default_rng(37).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    return b"\x00" + data  # a leading zero rules out every signature but ICO's, which needs 0,0,1,0


def _animated_gif() -> bytes:
    frames = [_rgb(64, 48, 40 + i).convert("P", palette=Image.Palette.ADAPTIVE) for i in range(3)]
    return _save(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=80, loop=0)


def _animated_png() -> bytes:
    frames = [_rgb(64, 48, 43 + i) for i in range(3)]
    return _save(frames[0], "PNG", save_all=True, append_images=frames[1:], duration=80)


def _animated_webp() -> bytes:
    frames = [_rgb(64, 48, 46 + i) for i in range(3)]
    return _save(frames[0], "WEBP", save_all=True, append_images=frames[1:], quality=80)


def _palette(seed: int, transparent: bool) -> Image.Image:
    image = _rgb(64, 48, seed).convert("P", palette=Image.Palette.ADAPTIVE, colors=32)
    if transparent:
        image.info["transparency"] = 0
    return image


def _lab_tiff() -> bytes:
    from PIL import ImageCms

    transform = ImageCms.buildTransform(
        ImageCms.createProfile("sRGB"), ImageCms.createProfile("LAB"), "RGB", "LAB"
    )
    lab = ImageCms.applyTransform(_rgb(64, 48, 50), transform)
    assert lab is not None
    lab.info.pop("icc_profile", None)  # LittleCMS stamps the current time into the profile
    return _save(lab, "TIFF")


def _float_tiff() -> bytes:
    """Depths in metres, with a NaN hole, as a depth sensor or a DEM stores them."""
    depth = photo(64, 48, 51)[:, :, 0].astype(np.float32) / 255 * 7.5 + 0.4
    depth[10:14, 20:30] = np.nan
    return _save(Image.fromarray(depth), "TIFF")


def _gray16(seed: int) -> Image.Image:
    """12-bit data in a 16-bit container, as scanners and microscopes write it."""
    return Image.fromarray(photo(64, 48, seed)[:, :, 1].astype(np.uint16) * 16)


def _rgba(seed: int) -> Image.Image:
    rgba = np.dstack([photo(64, 48, seed), np.zeros((48, 64), np.uint8)])
    rgba[:, 32:, 3] = 255  # left half fully transparent
    rgba[:, 24:32, 3] = 128
    return Image.fromarray(rgba)


def hostile_corpus() -> list[HostileCase]:
    """Builds the corpus: the same bytes on every call, every file under 200 KB."""
    cases: list[HostileCase] = []

    def add(name: str, filename: str, make: Callable[[], bytes], expect: Expect) -> None:
        cases.append(HostileCase(name, filename, make(), expect))

    jpeg, png = "jpeg", "png"
    conv = "format_converted"
    add(
        "rgb_jpeg",
        "holiday/IMG_0001.JPG",
        lambda: _save(_rgb(160, 120, 1), "JPEG", quality=90),
        _written(jpeg, jpeg, (160, 120), reencode=False, keep_channels=3),
    )
    add(
        "gray_jpeg",
        "scans/page1.jpg",
        lambda: _save(_gray(120, 160, 2), "JPEG", quality=90),
        _written(jpeg, jpeg, (120, 160), reencode=False, keep_channels=1),
    )
    add(
        "progressive_jpeg",
        "web/banner.jpeg",
        lambda: _save(_rgb(200, 80, 3), "JPEG", quality=85, progressive=True),
        _written(jpeg, jpeg, (200, 80), reencode=False, keep_channels=3),
    )
    add(
        "jpeg_trailing_garbage",
        "camera/IMG_0002.jpg",
        lambda: _save(_rgb(96, 64, 4), "JPEG", quality=90) + b"\x00" * 300 + b"trailer",
        _written(jpeg, jpeg, (96, 64), reencode=False, keep_channels=3),
    )
    add(
        "mpo_stereo_jpeg",
        "stereo/DSCF0001.JPG",
        lambda: _save(_rgb(96, 64, 5), "MPO", save_all=True, append_images=[_rgb(96, 64, 6)]),
        _written(jpeg, jpeg, (96, 64), reencode=False, keep_channels=3),
    )
    add(
        "jpeg_big_header",
        "print/cover.jpg",
        _big_header_jpeg,
        _written(jpeg, jpeg, (120, 80), reencode=False, keep_channels=3),
    )
    add(
        "jpeg_bitflips",
        "old_disk/photo.jpg",
        _bitflip_jpeg,
        _written(jpeg, jpeg, (160, 120), reencode=False, keep_channels=3),
    )
    add(
        "cmyk_jpeg",
        "print/flyer.jpg",
        lambda: _save(_rgb(96, 64, 7).convert("CMYK"), "JPEG", quality=90),
        _written(jpeg, jpeg, (96, 64), reencode=True, keep_channels=3, notes=("cmyk_converted",)),
    )
    add(
        "ycck_jpeg",
        "print/poster.jpg",
        _ycck_jpeg,
        _written(jpeg, jpeg, (72, 48), reencode=True, keep_channels=3, notes=("cmyk_converted",)),
    )
    add(
        "png_named_jpg",
        "downloads/screenshot.jpg",
        lambda: _save(_rgb(80, 60, 8), "PNG"),
        _written(png, png, (80, 60), reencode=False, keep_channels=3),
    )
    add(
        "jpeg_named_png",
        "downloads/avatar.png",
        lambda: _save(_rgb(64, 64, 9), "JPEG", quality=90),
        _written(jpeg, jpeg, (64, 64), reencode=False, keep_channels=3),
    )
    add(
        "exif_orientation_6_jpeg",
        "phone/IMG_1234.jpg",
        lambda: _save(_rgb(96, 64, 10), "JPEG", quality=90, exif=_exif(6)),
        _written(jpeg, jpeg, (64, 96), reencode=True, keep_channels=3, notes=("exif_rotated",)),
    )
    add(
        "exif_orientation_3_jpeg",
        "phone/IMG_1235.jpg",
        lambda: _save(_rgb(96, 64, 11), "JPEG", quality=90, exif=_exif(3)),
        _written(jpeg, jpeg, (96, 64), reencode=True, keep_channels=3, notes=("exif_rotated",)),
    )
    add(
        "exif_orientation_1_jpeg",
        "phone/IMG_1236.jpg",
        lambda: _save(_rgb(96, 64, 12), "JPEG", quality=90, exif=_exif(1)),
        _written(jpeg, jpeg, (96, 64), reencode=False, keep_channels=3),
    )
    add(
        "rgb_png",
        "figures/plot.png",
        lambda: _save(_rgb(80, 60, 13), "PNG"),
        _written(png, png, (80, 60), reencode=False, keep_channels=3),
    )
    add(
        "gray_png",
        "xray/chest.png",
        lambda: _save(_gray(60, 80, 14), "PNG"),
        _written(png, png, (60, 80), reencode=False, keep_channels=1),
    )
    add(
        "interlaced_png",
        "web/logo.png",
        lambda: _raw_png(photo(37, 29, 15), 2, interlace=True),
        _written(png, png, (37, 29), reencode=False, keep_channels=3),
    )
    add(
        "exif_orientation_8_png",
        "phone/IMG_2000.png",
        lambda: _save(_rgb(96, 64, 16), "PNG", exif=_exif(8)),
        _written(png, png, (64, 96), reencode=True, keep_channels=3, notes=("exif_rotated",)),
    )
    add(
        "gray16_png",
        "microscopy/cell.png",
        lambda: _save(_gray16(17), "PNG"),
        _written(png, png, (64, 48), reencode=True, keep_channels=1, notes=("16bit_reduced",)),
    )
    add(
        "rgb16_png",
        "hdr/sky.png",
        lambda: _raw_png(photo(40, 30, 18).astype(np.uint16) * 257, 2),
        _written(png, png, (40, 30), reencode=True, keep_channels=3, notes=("16bit_reduced",)),
    )
    add(
        "bilevel_png",
        "masks/mask_001.png",
        lambda: _save(_gray(64, 48, 19).point(lambda v: 255 if v > 128 else 0).convert("1"), "PNG"),
        _written(
            png, png, (64, 48), reencode=True, keep_channels=1, notes=("low_bit_depth_expanded",)
        ),
    )
    add(
        "palette_png",
        "icons/folder.png",
        lambda: _save(_palette(20, transparent=False), "PNG"),
        _written(png, png, (64, 48), reencode=True, keep_channels=3, notes=("palette_expanded",)),
    )
    add(
        "palette_transparent_png",
        "icons/file.png",
        lambda: _save(_palette(21, transparent=True), "PNG"),
        _written(
            png,
            png,
            (64, 48),
            reencode=True,
            keep_channels=4,
            notes=("palette_expanded", "alpha_flattened"),
        ),
    )
    add(
        "rgba_png",
        "stickers/cat.png",
        lambda: _save(_rgba(22), "PNG"),
        _written(
            png,
            png,
            (64, 48),
            reencode=True,
            keep_channels=4,
            keep_reencode=False,
            notes=("alpha_flattened",),
        ),
    )
    add(
        "gray_alpha_png",
        "stickers/shadow.png",
        lambda: _save(_rgba(23).convert("LA"), "PNG"),
        _written(
            png,
            png,
            (64, 48),
            reencode=True,
            keep_channels=4,
            keep_reencode=False,
            notes=("alpha_flattened",),
        ),
    )
    add(
        "colour_key_png",
        "sprites/hero.png",
        lambda: _save(_rgb(64, 48, 24), "PNG", transparency=(0, 0, 0)),
        _written(png, png, (64, 48), reencode=True, keep_channels=4, notes=("alpha_flattened",)),
    )
    add(
        "rgb_tiff",
        "scans/slide.tif",
        lambda: _save(_rgb(64, 48, 25), "TIFF", compression="tiff_lzw"),
        _written("tiff", png, (64, 48), reencode=True, keep_channels=3, notes=(conv,)),
    )
    add(
        "jpeg_compressed_tiff",
        "scans/slide_small.tiff",
        lambda: _save(_rgb(64, 48, 26), "TIFF", compression="jpeg"),
        _written("tiff", jpeg, (64, 48), reencode=True, keep_channels=3, notes=(conv,)),
    )
    add(
        "float_tiff",
        "depth/frame_0001.tif",
        _float_tiff,
        _written(
            "tiff", png, (64, 48), reencode=True, keep_channels=1, notes=(conv, "float_reduced")
        ),
    )
    add(
        "gray16_tiff",
        "microscopy/stack.tif",
        lambda: _save(_gray16(27), "TIFF"),
        _written(
            "tiff", png, (64, 48), reencode=True, keep_channels=1, notes=(conv, "16bit_reduced")
        ),
    )
    add(
        "cmyk_tiff",
        "print/proof.tif",
        lambda: _save(_rgb(64, 48, 28).convert("CMYK"), "TIFF"),
        _written(
            "tiff", png, (64, 48), reencode=True, keep_channels=3, notes=(conv, "cmyk_converted")
        ),
    )
    add(
        "lab_tiff",
        "print/measured.tif",
        _lab_tiff,
        _written(
            "tiff", png, (64, 48), reencode=True, keep_channels=3, notes=(conv, "lab_converted")
        ),
    )
    add(
        "rgb_bmp",
        "legacy/photo.bmp",
        lambda: _save(_rgb(64, 48, 29), "BMP"),
        _written("bmp", png, (64, 48), reencode=True, keep_channels=3, notes=(conv,)),
    )
    add(
        "palette_bmp",
        "legacy/icon.bmp",
        lambda: _save(_palette(52, transparent=False), "BMP"),
        _written(
            "bmp", png, (64, 48), reencode=True, keep_channels=3, notes=(conv, "palette_expanded")
        ),
    )
    add(
        "static_gif",
        "web/button.gif",
        lambda: _save(_palette(53, transparent=False), "GIF"),
        _written(
            "gif", png, (64, 48), reencode=True, keep_channels=3, notes=(conv, "palette_expanded")
        ),
    )
    add(
        "animated_gif",
        "web/spinner.gif",
        _animated_gif,
        _written(
            "gif",
            png,
            (64, 48),
            reencode=True,
            keep_channels=3,
            notes=(conv, "palette_expanded", "first_frame_of_animation"),
        ),
    )
    add(
        "animated_png",
        "web/spinner.png",
        _animated_png,
        _written(
            png, png, (64, 48), reencode=True, keep_channels=3, notes=("first_frame_of_animation",)
        ),
    )
    add(
        "ico",
        "site/favicon.ico",
        lambda: _save(_rgb(48, 48, 54), "ICO", sizes=[(16, 16), (32, 32), (48, 48)]),
        _written("ico", png, (48, 48), reencode=True, keep_channels=3, notes=(conv,)),
    )
    add(
        "ppm",
        "research/frame.ppm",
        lambda: _save(_rgb(40, 30, 55), "PPM"),
        _written("ppm", png, (40, 30), reencode=True, keep_channels=3, notes=(conv,)),
    )
    if features.check("webp"):
        add(
            "lossy_webp",
            "web/hero.webp",
            lambda: _save(_rgb(96, 64, 56), "WEBP", quality=80),
            _written("webp", jpeg, (96, 64), reencode=True, keep_channels=3, notes=(conv,)),
        )
        add(
            "lossless_webp",
            "web/diagram.webp",
            lambda: _save(_rgb(96, 64, 57), "WEBP", lossless=True),
            _written("webp", png, (96, 64), reencode=True, keep_channels=3, notes=(conv,)),
        )
        add(
            "animated_webp",
            "web/reaction.jpg",
            _animated_webp,
            _written(
                "webp",
                jpeg,
                (64, 48),
                reencode=True,
                keep_channels=3,
                notes=(conv, "first_frame_of_animation"),
            ),
        )
    if features.check("jpg_2000"):
        add(
            "jpeg2000",
            "archive/scan.jp2",
            lambda: _save(_rgb(64, 48, 58), "JPEG2000"),
            _written("jpeg2000", jpeg, (64, 48), reencode=True, keep_channels=3, notes=(conv,)),
        )
    if features.check("avif"):
        add(
            "avif",
            "phone/IMG_3000.avif",
            lambda: _save(_rgb(64, 48, 59), "AVIF", quality=80),
            _written("avif", jpeg, (64, 48), reencode=True, keep_channels=3, notes=(conv,)),
        )
    add(
        "truncated_jpeg",
        "downloads/partial.jpg",
        lambda: _save(_rgb(160, 120, 60), "JPEG", quality=90)[:3000],
        _skipped("truncated"),
    )
    add(
        "jpeg_missing_eoi",
        "downloads/almost.jpg",
        lambda: _save(_rgb(160, 120, 61), "JPEG", quality=90)[:-2],
        _skipped("truncated"),
    )
    add(
        "truncated_png",
        "downloads/partial.png",
        lambda: _save(_rgb(160, 120, 62), "PNG")[:20_000],
        _skipped("truncated"),
    )
    add(
        "truncated_gif",
        "downloads/partial.gif",
        lambda: _animated_gif()[:2000],
        _skipped("truncated"),
    )
    add("corrupt_entropy_jpeg", "old_disk/broken.jpg", _corrupt_entropy_jpeg, _skipped("corrupt"))
    add("png_bad_idat_crc", "old_disk/broken.png", _bad_idat_crc_png, _skipped("corrupt"))
    add(
        "png_unknown_critical_chunk",
        "tools/vendor.png",
        _unknown_critical_chunk_png,
        _written(png, png, (40, 30), reencode=True, keep_channels=3),
    )
    add("png_bad_interlace_method", "tools/odd.png", _bad_interlace_png, _skipped("corrupt"))
    add("zero_bytes", "downloads/failed.jpg", lambda: b"", _skipped("empty_file"))
    add(
        "html_named_jpg",
        "scraped/img_404.jpg",
        lambda: b"<!DOCTYPE html><html><body>404 Not Found</body></html>\n",
        _skipped("unknown_format"),
    )
    add("random_bytes", "scraped/blob.png", _random_bytes, _skipped("unknown_format"))
    add("heic_named_jpg", "phone/IMG_4000.jpg", _heic_like, _skipped("unsupported"))
    add("png_bomb", "attack/bomb.png", _png_bomb, _skipped("too_many_pixels"))
    add("jpeg_bomb", "attack/bomb.jpg", _jpeg_bomb, _skipped("too_many_pixels"))
    return cases
