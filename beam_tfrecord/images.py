"""Image checks and normalization, so that TensorFlow decodes every written image exactly as stated."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import re
import struct
import threading
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageFile, PngImagePlugin

__all__ = [
    "ERROR_CODES",
    "NOTE_CODES",
    "ImageError",
    "ImageInfo",
    "ImagePolicy",
    "NeedFullData",
    "Resize",
    "check_image",
    "encode_for_tensorflow",
    "sniff_format",
]

ERROR_CODES = (
    "empty_file",  # zero bytes
    "unknown_format",  # the content is not an image format we recognise
    "unsupported",  # a recognised image, but a format or feature this module will not decode
    "truncated",  # the data ends before the image does
    "corrupt",  # the data is damaged or inconsistent
    "too_many_pixels",  # width * height is above ImagePolicy.max_pixels
    "need_full_data",  # a prefix was given, and the answer needs the whole file (NeedFullData)
)

NOTE_CODES = (
    "16bit_reduced",  # 16 bits per sample mapped to 8
    "32bit_reduced",  # 32-bit integer samples mapped to 8 bits
    "alpha_flattened",  # alpha composited onto ImagePolicy.background
    "cmyk_converted",  # CMYK (or YCCK, which decodes to CMYK) converted to RGB
    "color_space_converted",  # another colour space (YCbCr, HSV, ...) converted to RGB
    "exif_orientation_ignored",  # an EXIF orientation other than 1 left unapplied by the policy
    "exif_rotated",  # the EXIF orientation applied to the pixels
    "exif_unreadable",  # EXIF present but unparseable, so treated as orientation 1
    "first_frame_of_animation",  # an animation or multi-page file reduced to its first frame
    "float_reduced",  # floating-point samples mapped to 8 bits
    "format_converted",  # the written format differs from the source format
    "lab_converted",  # CIE L*a*b* converted to sRGB
    "low_bit_depth_expanded",  # 1, 2 or 4 bits per sample expanded to 8
    "palette_expanded",  # palette indices expanded to their colours
    "resized",  # scaled (and cropped or padded) as ImagePolicy.resize asks
    "stored_raw",  # written as decoded uint8 pixels, not as an image file
)

_VALIDATE_MODES = ("decode", "header", "none")
_COLORS = ("rgb", "gray", "keep")

# Pillow plugin module and format id per format name; the plugins are imported on first use.
_PLUGINS = {
    "jpeg": ("JpegImagePlugin", "JPEG"),
    "png": ("PngImagePlugin", "PNG"),
    "gif": ("GifImagePlugin", "GIF"),
    "bmp": ("BmpImagePlugin", "BMP"),
    "tiff": ("TiffImagePlugin", "TIFF"),
    "webp": ("WebPImagePlugin", "WEBP"),
    "ico": ("IcoImagePlugin", "ICO"),
    "ppm": ("PpmImagePlugin", "PPM"),
    "jpeg2000": ("Jpeg2KImagePlugin", "JPEG2000"),
    "avif": ("AvifImagePlugin", "AVIF"),
}
# Recognised by content but deliberately not decoded: no Pillow decoder, or too large an attack
# surface (PSD) for a format that is rare in training data.
_UNSUPPORTED = ("heif", "jxl", "psd")
# Sources whose pixels already carry lossy-compression noise; re-encoding them as PNG would only
# inflate them, so they go to JPEG. TIFF and WEBP are decided per file.
_LOSSY_SOURCES = ("jpeg", "jpeg2000", "avif")
_LOSSY_TIFF_COMPRESSIONS = ("jpeg", "tiff_jpeg", "webp")

# The BITMAPINFOHEADER family sizes; a bare "BM" prefix is too weak a signature on its own.
_BMP_DIB_SIZES = (12, 16, 40, 52, 56, 64, 108, 124)
_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")

# JPEG SOF markers whose data every libjpeg build decodes: baseline, extended and progressive
# Huffman. Arithmetic-coded and lossless JPEGs are re-encoded rather than trusted to TensorFlow.
_PLAIN_JPEG_SOF = (0xC0, 0xC1, 0xC2)
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Inside entropy-coded data 0xFF is followed by a stuffed 0x00, a restart marker or a fill byte;
# anything else starts a real marker.
_JPEG_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Channels TensorFlow decodes from an 8-bit PNG with channels=0, keyed by IHDR colour type.
# Gray + alpha decodes to 2 channels, but decode_image refuses channels=2, so it is stated as 4
# (TensorFlow then expands the gray to RGB and keeps the alpha).
_PNG_KEEP_CHANNELS = {0: 1, 2: 3, 4: 4, 6: 4}
_PNG_MODES = {0: "L", 2: "RGB", 4: "LA", 6: "RGBA"}
_PNG_COMPRESS_LEVEL = 6

_ORIENTATION_TAG = 0x0112
_X_RESOLUTION_TAG = 0x011A
# The same transpositions as ImageOps.exif_transpose, applied from the orientation read once at
# header time so that every validation mode makes the same decision.
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

_HIGH_DEPTH_NOTES = {
    "I;16": "16bit_reduced",
    "I;16L": "16bit_reduced",
    "I;16B": "16bit_reduced",
    "I;16N": "16bit_reduced",
    "I": "32bit_reduced",
    "F": "float_reduced",
}

_PILLOW_LIMIT_LOCK = threading.Lock()

# The header fast path (_fast_header_info) answers for ordinary JPEGs and PNGs without Pillow.
# False sends every image through Pillow; the equivalence tests and bench_images compare the two.
_FAST_HEADERS = True
# Pillow's JPEG reader (JpegImagePlugin) parses these APP segments and can fail on a short one:
# JFIF reads its version, Adobe its version word, ICC_PROFILE (when the frame header sorts the
# fragments) its sequence count.
_JPEG_APP_MIN_LENGTHS = ((0xE0, b"JFIF", 7), (0xEE, b"Adobe", 7), (0xE2, b"ICC_PROFILE\x00", 14))
_XMP_NAMESPACE = b"http://ns.adobe.com/xap/1.0/\x00"
# Image.getexif falls back to the XMP orientation when EXIF has none; the same pattern.
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')
# Bytes per value of the TIFF 6.0 field types (BYTE .. DOUBLE), as found in EXIF IFD0.
_TIFF_TYPE_SIZES = (0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8)
# PNG chunks before IDAT that Pillow's reader handles without effect on the verdict, given the
# length each needs so that the reader does not fail on it: PLTE (kept only for palette images),
# gAMA, cHRM (whole 4-byte values), sRGB, pHYs. tEXt, iTXt and iCCP are checked separately;
# other ancillary chunks Pillow skips unread.
_PNG_PLAIN_CHUNKS = {b"PLTE": 0, b"gAMA": 4, b"cHRM": 0, b"sRGB": 1, b"pHYs": 9}
# Handled by Pillow in ways that change the answer or can fail: left to the Pillow path.
_PNG_PILLOW_CHUNKS = frozenset(
    (b"IHDR", b"IEND", b"tRNS", b"zTXt", b"eXIf", b"acTL", b"fcTL", b"fdAT")
)
# info keys the verdict reads, which a text chunk with that key would set.
_PNG_TEXT_KEYS_READ = (b"exif", b"transparency")


_RESIZE_POLICIES = ("crop", "pad", "stretch")
_ENCODINGS = ("jpeg", "png")
_STORES = ("encoded", "raw")


@dataclass(frozen=True)
class Resize:
    """How images are resized, always keeping the aspect ratio unless told to stretch.

    Attributes:
        mode: "short" (the shorter side becomes `size`), "fit" (scaled down to fit within
            width x height; smaller images are left alone) or "exact" (exactly width x height).
        size: the shorter side, for "short".
        width: the target width, for "fit" and "exact".
        height: the target height, for "fit" and "exact".
        policy: for "exact": "crop" (scale to cover, then cut the centre), "pad" (scale to fit,
            then centre on the background colour) or "stretch" (ignore the aspect ratio).
    """

    mode: str
    size: int = 0
    width: int = 0
    height: int = 0
    policy: str = "crop"

    def __post_init__(self) -> None:
        if self.mode == "short":
            if not _is_int(self.size) or self.size < 1:
                raise ValueError(
                    f"resize: the shorter side must be a positive integer, got {self.size!r}"
                )
        elif self.mode in ("fit", "exact"):
            if not (
                _is_int(self.width) and _is_int(self.height) and self.width > 0 and self.height > 0
            ):
                raise ValueError(
                    f"resize: {self.mode} needs a positive WxH, got {self.width}x{self.height}"
                )
        else:
            raise ValueError(f"resize mode must be short, fit or exact, got {self.mode!r}")
        if self.policy not in _RESIZE_POLICIES:
            raise ValueError(
                f"resize policy must be one of {', '.join(_RESIZE_POLICIES)}, got {self.policy!r}"
            )

    @classmethod
    def parse(cls, text: str) -> Resize:
        """Parses `256` or `short:256`, `640x480` or `fit:640x480`, `exact:224x224[:crop|pad|stretch]`.

        Raises:
            ValueError: the text is none of these, naming it.
        """
        parts = str(text).strip().lower().split(":")
        try:
            if len(parts) == 1:
                parts = ["fit" if "x" in parts[0] else "short", parts[0]]
            mode, dims, *rest = parts
            if mode == "short" and not rest:
                return cls("short", size=int(dims))
            width, height = (int(v) for v in dims.split("x"))
            if mode == "fit" and not rest:
                return cls("fit", width=width, height=height)
            if mode == "exact" and len(rest) <= 1:
                return cls("exact", width=width, height=height, policy=rest[0] if rest else "crop")
        except ValueError as err:
            if "resize" in str(err):
                raise
        raise ValueError(
            f"resize {text!r}: expected N (shorter side), WxH (fit within) or exact:WxH[:crop|pad|stretch]"
        )

    def scaled_size(self, width: int, height: int) -> tuple[int, int]:
        """The size an image is scaled to, before any crop or pad."""
        if self.mode == "short":
            scale = self.size / min(width, height)
        elif self.mode == "fit":
            scale = min(self.width / width, self.height / height, 1.0)
        elif self.policy == "stretch":
            return self.width, self.height
        elif self.policy == "crop":
            scale = max(self.width / width, self.height / height)
            return max(self.width, round(width * scale)), max(self.height, round(height * scale))
        else:
            scale = min(self.width / width, self.height / height)
        return max(1, round(width * scale)), max(1, round(height * scale))

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """The size an image of width x height has after resizing."""
        if self.mode == "exact":
            return self.width, self.height
        return self.scaled_size(width, height)

    def apply(self, image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
        width, height = self.scaled_size(*image.size)
        if (width, height) != image.size:
            # reducing_gap resizes large reductions in two steps: much faster, visually the same.
            image = image.resize((width, height), Image.Resampling.LANCZOS, reducing_gap=3.0)
        if self.mode != "exact" or (width, height) == (self.width, self.height):
            return image
        if self.policy == "crop":
            left, top = (width - self.width) // 2, (height - self.height) // 2
            return image.crop((left, top, left + self.width, top + self.height))
        fill: tuple[int, ...] = (
            (0,) * len(image.getbands()) if "A" in image.getbands() else background
        )
        if image.mode == "L":
            fill = round(0.299 * background[0] + 0.587 * background[1] + 0.114 * background[2])
        canvas = Image.new(image.mode, (self.width, self.height), fill)
        canvas.paste(image, ((self.width - width) // 2, (self.height - height) // 2))
        return canvas


@dataclass(frozen=True)
class ImagePolicy:
    """How images are checked and normalized.

    Attributes:
        validate: "decode" decodes every image to find truncated or corrupt data; "header" reads
            only the headers (the first 16 KiB are normally enough) and checks their structure;
            "none" trusts the header as Pillow reads it. Images that must be re-encoded are always
            decoded in full.
        color: "rgb" for 3 channels, "gray" for 1, "keep" for the channels of the source as
            TensorFlow decodes them (1, 3 or 4; gray with alpha is stated as 4 because
            tf.io.decode_image refuses channels=2).
        max_pixels: Largest width * height accepted, checked before any pixel is decoded.
        background: RGB colour that alpha is flattened onto for "rgb" and "gray".
        jpeg_quality: Quality for re-encoding lossy sources as JPEG.
        apply_exif_orientation: Rotate the pixels as EXIF says; TensorFlow ignores EXIF.
        resize: How to resize every image, or None to keep sizes.
        encode: "jpeg" or "png" to write every image in that format (images already in it
            that need no other change keep their bytes), or None to choose per image.
        store: "encoded" (image files) or "raw" (decoded uint8 pixels, row-major HxWxC, for
            small images).
    """

    validate: str = "decode"
    color: str = "rgb"
    max_pixels: int = 89_478_485
    background: tuple[int, int, int] = (255, 255, 255)
    jpeg_quality: int = 95
    apply_exif_orientation: bool = True
    resize: Resize | None = None
    encode: str | None = None
    store: str = "encoded"

    def __post_init__(self) -> None:
        if self.validate not in _VALIDATE_MODES:
            raise ValueError(
                f"ImagePolicy.validate must be one of {_VALIDATE_MODES}, got {self.validate!r}"
            )
        if self.color not in _COLORS:
            raise ValueError(f"ImagePolicy.color must be one of {_COLORS}, got {self.color!r}")
        if not _is_int(self.max_pixels) or self.max_pixels < 1:
            raise ValueError(
                f"ImagePolicy.max_pixels must be a positive integer, got {self.max_pixels!r}"
            )
        background = self.background
        if (
            isinstance(background, (str, bytes))
            or not hasattr(background, "__len__")
            or len(background) != 3
            or not all(_is_int(v) and 0 <= v <= 255 for v in background)
        ):
            raise ValueError(
                f"ImagePolicy.background must be three integers in 0..255, got {background!r}"
            )
        # A list from a YAML config becomes a tuple, so the policy stays hashable.
        object.__setattr__(self, "background", tuple(int(v) for v in background))
        if not _is_int(self.jpeg_quality) or not 1 <= self.jpeg_quality <= 100:
            raise ValueError(
                f"ImagePolicy.jpeg_quality must be an integer in 1..100, got {self.jpeg_quality!r}"
            )
        if not isinstance(self.apply_exif_orientation, bool):
            raise ValueError(
                "ImagePolicy.apply_exif_orientation must be a bool, "
                f"got {self.apply_exif_orientation!r}"
            )
        if isinstance(self.resize, str):
            object.__setattr__(self, "resize", Resize.parse(self.resize))
        if self.resize is not None and not isinstance(self.resize, Resize):
            raise ValueError(f"ImagePolicy.resize must be a Resize or None, got {self.resize!r}")
        if self.encode is not None and self.encode not in _ENCODINGS:
            raise ValueError(
                f"ImagePolicy.encode must be one of {_ENCODINGS} or None, got {self.encode!r}"
            )
        if self.store not in _STORES:
            raise ValueError(f"ImagePolicy.store must be one of {_STORES}, got {self.store!r}")
        if self.store == "raw" and self.encode is not None:
            raise ValueError("ImagePolicy.encode has no meaning with store='raw'")


@dataclass(frozen=True)
class ImageInfo:
    """What will be written for one image.

    Attributes:
        format: Format of the written bytes, "jpeg" or "png".
        source_format: What the source really is, judged by content ("jpeg", "png", "gif",
            "bmp", "tiff", "webp", "ico", "ppm", "jpeg2000", "avif").
        width: Width of the image tf.io.decode_image returns for the written bytes.
        height: Height of that image.
        channels: The channels argument to pass to tf.io.decode_image, and its last dimension.
        reencode: False when the original bytes are written untouched.
        notes: Sorted codes from NOTE_CODES saying what was changed or noticed.
        encoded_size: Length of the written bytes. This module always sets it; None is kept in
            the type for callers that build an ImageInfo before the size is known.
        decoded: Whether the check decoded the pixels (validate="decode", or a re-encode); what
            a build counts to show it decodes each image at most once.
    """

    format: str
    source_format: str
    width: int
    height: int
    channels: int
    reencode: bool
    notes: tuple[str, ...]
    encoded_size: int | None
    decoded: bool = field(default=False, compare=False)  # how it was checked, not what it is


class ImageError(ValueError):
    """An image that cannot be written; `code` is one of ERROR_CODES and never changes meaning.

    Attributes:
        code: Stable, machine-readable reason.
        message: Human sentence with the details.
    """

    def __init__(self, code: str, message: str) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown ImageError code {code!r}; expected one of {ERROR_CODES}")
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> tuple[type, tuple[str, ...]]:
        # Beam pickles exceptions between workers; rebuild from the constructor arguments.
        return (type(self), (self.code, self.message))


class NeedFullData(ImageError):
    """The prefix given to check_image is not enough; call it again with the whole file."""

    def __init__(self, message: str) -> None:
        super().__init__("need_full_data", message)

    def __reduce__(self) -> tuple[type, tuple[str, ...]]:
        return (type(self), (self.message,))


def sniff_format(head: bytes) -> str | None:
    """Names the image format of `head` from its magic bytes alone.

    Args:
        head: The first bytes of a file; 64 are enough.

    Returns:
        "jpeg", "png", "gif", "bmp", "tiff", "webp", "ico", "ppm", "jpeg2000", "avif", or one of
        the formats recognised but not decoded ("heif", "jxl", "psd"); None for anything else.
    """
    h = bytes(head[:64])
    if h.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if h.startswith(_PNG_SIGNATURE):
        return "png"
    if h[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if h[:2] == b"BM" and len(h) >= 18 and int.from_bytes(h[14:18], "little") in _BMP_DIB_SIZES:
        return "bmp"
    if h[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    if h[:4] == b"RIFF" and h[8:12] == b"WEBP":
        return "webp"
    if h.startswith(b"\x00\x00\x00\x0cjP  \r\n\x87\n") or h.startswith(b"\xff\x4f\xff\x51"):
        return "jpeg2000"
    if h.startswith(b"\x00\x00\x00\x0cJXL \r\n\x87\n") or h.startswith(b"\xff\x0a"):
        return "jxl"
    if h[4:8] == b"ftyp":
        # ISO base media: the major brand, then (after a minor version) compatible brands.
        box_end = min(int.from_bytes(h[:4], "big"), len(h))
        compatible = [h[i : i + 4] for i in range(16, box_end - 3, 4)]
        if h[8:12] in (b"avif", b"avis"):
            return "avif"
        if h[8:12] in _HEIF_BRANDS:
            return "avif" if b"avif" in compatible else "heif"
        return None
    if h[:4] == b"8BPS":
        return "psd"
    if h[:4] == b"\x00\x00\x01\x00" and h[4:6] not in (b"", b"\x00", b"\x00\x00"):
        return "ico"
    if len(h) >= 3 and h[:1] == b"P" and h[1] in b"123456" and h[2] in b" \t\r\n":
        return "ppm"
    return None


def check_image(data: bytes, policy: ImagePolicy, *, size: int | None = None) -> ImageInfo:
    """Checks one image and says what encode_for_tensorflow will write for it.

    Images kept as they are cost a header read (plus a decode with validate="decode"); images
    that need re-encoding are re-encoded here too, because the exact encoded size is part of the
    answer.

    Args:
        data: The whole file, or with validate="header" or "none" possibly only its first bytes.
        policy: How to check and normalize.
        size: Length of the whole file when `data` may be a prefix; defaults to len(data).

    Returns:
        The ImageInfo that encode_for_tensorflow returns for the whole file and the same policy.

    Raises:
        NeedFullData: `data` is a prefix and the answer needs the whole file.
        ImageError: The image cannot be written; `code` says why.
        ValueError: `size` is smaller than len(data).
    """
    return _process(data, policy, size, want_bytes=False)[1]


def encode_for_tensorflow(data: bytes, policy: ImagePolicy) -> tuple[bytes, ImageInfo]:
    """Returns the bytes to store for one image, and what TensorFlow will decode from them.

    The bytes are the original ones when TensorFlow already decodes them as stated, otherwise a
    deterministic PNG (lossless sources) or JPEG at policy.jpeg_quality (lossy sources).

    Args:
        data: The whole file.
        policy: How to check and normalize.

    Returns:
        (bytes to write, the same ImageInfo check_image returns for `data` and `policy`).

    Raises:
        ImageError: The image cannot be written; `code` says why.
    """
    payload, info = _process(data, policy, None, want_bytes=True)
    assert payload is not None
    return payload, info


def _process(
    data: bytes, policy: ImagePolicy, size: int | None, *, want_bytes: bool
) -> tuple[bytes | None, ImageInfo]:
    data = bytes(data)
    total = len(data) if size is None else size
    if total < len(data):
        raise ValueError(f"size={size} is smaller than the {len(data)} bytes given")
    complete = total == len(data)
    if total == 0:
        raise ImageError("empty_file", "the file is empty")
    fmt = sniff_format(data[:64])
    if fmt is None:
        if not data:
            raise NeedFullData(f"no bytes given of a {total}-byte file")
        raise ImageError(
            "unknown_format", f"the content is not a known image format: {data[:16]!r}"
        )
    if fmt in _UNSUPPORTED:
        raise ImageError("unsupported", f"{fmt} images are recognised but not supported")
    if _FAST_HEADERS and policy.validate != "decode":
        info = _fast_header_info(data, fmt, total, policy)
        if info is not None:
            return (data if want_bytes else None), info
    with _quiet_pillow():
        im = _open(data, fmt, complete)
        try:
            return _process_open(im, data, fmt, total, complete, policy, want_bytes)
        except Exception as exc:
            # Pillow raises nearly anything on hostile input (SyntaxError, struct.error, KeyError,
            # ...), from properties as well as from load(); none of it may escape as such.
            raise _as_image_error(exc, fmt, "decode", complete) from exc
        finally:
            im.close()


def _fast_header_info(data: bytes, fmt: str, total: int, policy: ImagePolicy) -> ImageInfo | None:
    """The ImageInfo the Pillow path gives an ordinary JPEG or PNG kept as it is, without Pillow.

    Reads the header once, mirroring what Pillow's reader and _process_open would make of it,
    for header and none validation. Returns None (the caller then takes the Pillow path) for
    anything it cannot answer with certainty: other formats, unusual or damaged headers, a
    prefix that ends inside the header, and every image that must be rotated or re-encoded.

    Raises:
        ImageError: too_many_pixels, exactly as the Pillow path raises it for the same header.
    """
    if fmt == "jpeg":
        header = _plain_jpeg_header(data)
    elif fmt == "png":
        header = _plain_png_header(data)
    else:
        return None
    if header is None:
        return None
    width, height, source_channels, orientation, notes = header
    _check_pixels(width, height, policy)
    if orientation != 1:
        if policy.apply_exif_orientation:
            return None  # rotated, so re-encoded
        notes = (*notes, "exif_orientation_ignored")
    if (
        policy.store == "raw"
        or policy.encode not in (None, fmt)
        or (
            policy.resize is not None
            and policy.resize.output_size(width, height) != (width, height)
        )
        or (source_channels == 4 and policy.color != "keep")  # alpha to flatten
    ):
        return None
    return ImageInfo(
        format=fmt,
        source_format=fmt,
        width=width,
        height=height,
        channels={"rgb": 3, "gray": 1, "keep": source_channels}[policy.color],
        reencode=False,
        notes=tuple(sorted(notes)),
        encoded_size=total,
    )


def _check_pixels(width: int, height: int, policy: ImagePolicy) -> None:
    if width * height > policy.max_pixels:
        raise ImageError(
            "too_many_pixels",
            f"{width}x{height} = {width * height:,} pixels is more than "
            f"max_pixels={policy.max_pixels:,}",
        )


def _process_open(
    im: ImageFile.ImageFile,
    data: bytes,
    fmt: str,
    total: int,
    complete: bool,
    policy: ImagePolicy,
    want_bytes: bool,
) -> tuple[bytes | None, ImageInfo]:
    width, height = im.size
    # Our own guard, on the header's numbers and before any pixel is decoded.
    if width < 1 or height < 1:
        raise ImageError("corrupt", f"the {fmt} header declares a {width}x{height} image")
    _check_pixels(width, height, policy)
    # The header walks find facts that decide whether TensorFlow may get the original bytes (the
    # JPEG frame type, an APNG's acTL), so they run in every mode; "decode" continues them to the
    # end of the file, and only "none" skips the PNG CRCs.
    whole = policy.validate == "decode"
    jpeg_sof = None
    png_chunks: frozenset[bytes] = frozenset()
    if fmt == "jpeg":
        jpeg_sof = _walk_jpeg(data, whole=whole, complete=complete)
    elif fmt == "png":
        png_chunks = _walk_png(
            data, whole=whole, complete=complete, verify_crc=policy.validate != "none"
        )

    notes: list[str] = []
    orientation = _orientation(im, notes)
    rotate = orientation != 1 and policy.apply_exif_orientation
    if orientation != 1 and not policy.apply_exif_orientation:
        notes.append("exif_orientation_ignored")

    # Width and height as displayed: EXIF orientations 5-8 swap them.
    swapped = rotate and orientation in (5, 6, 7, 8)
    shown = (height, width) if swapped else (width, height)
    transformed = (
        policy.store == "raw"
        or (policy.resize is not None and policy.resize.output_size(*shown) != shown)
        or policy.encode not in (None, fmt)
    )
    keep_bytes = not rotate and not transformed
    channels = (
        _verbatim_channels(im, data, fmt, jpeg_sof, png_chunks, policy) if keep_bytes else None
    )
    if channels is not None:
        if policy.validate == "decode":
            if not complete:
                raise NeedFullData("validate='decode' needs the whole file")
            _decode(im, fmt, draft=fmt == "jpeg")
        info = ImageInfo(
            format=fmt,
            source_format=fmt,
            width=width,
            height=height,
            channels=channels,
            reencode=False,
            notes=tuple(sorted(set(notes))),
            encoded_size=total,
            decoded=policy.validate == "decode",
        )
        return (data if want_bytes else None), info

    if not complete:
        raise NeedFullData(f"this {fmt} image must be re-encoded, which needs the whole file")
    if fmt != "jpeg" and getattr(im, "is_animated", False):
        # MPO (camera stereo pairs) counts as jpeg: TensorFlow decodes its primary image.
        notes.append("first_frame_of_animation")
    notes.extend(_source_depth_notes(im, data, fmt))
    with _pillow_allows(width * height):
        if policy.resize is not None and fmt == "jpeg":
            # A JPEG that will be shrunk is decoded at the smallest 1/2, 1/4 or 1/8 scale that is
            # still at least the size it is scaled to: most of the IDCT work is skipped.
            target = policy.resize.scaled_size(*shown)
            try:
                im.draft(None, target[::-1] if swapped else target)
            except Exception as exc:
                raise _as_image_error(exc, fmt, "decode", True) from exc
        _decode(im, fmt, draft=False)
        if im.width * im.height > policy.max_pixels:  # a frame larger than its container said
            raise ImageError(
                "too_many_pixels",
                f"the decoded {im.width}x{im.height} image is larger than its header said",
            )
        image = _normalize(im, policy, notes)
        if rotate:
            image = image.transpose(_TRANSPOSE[orientation])
            notes.append("exif_rotated")
        if policy.resize is not None:
            image = policy.resize.apply(image, policy.background)
            if image.size != shown:  # compared with the source: a draft decode may have shrunk it
                notes.append("resized")
        if policy.store == "raw":
            if image.mode == "LA":
                image = image.convert("RGBA")  # stated as 4 channels, like TensorFlow decodes it
            out_fmt, payload = "raw", image.tobytes()
            notes.append("stored_raw")
        else:
            lossy = image.mode in ("L", "RGB") and _is_lossy(im, data, fmt)
            out_fmt = policy.encode or ("jpeg" if lossy else "png")
            if out_fmt == "jpeg" and image.mode in ("LA", "RGBA"):
                image = _flatten(image, policy.background)  # JPEG holds no alpha
                if image.mode != "L" and policy.color == "gray":
                    image = image.convert("L")
                notes.append("alpha_flattened")
            payload = _encode(image, out_fmt, policy)
    if out_fmt not in (fmt, "raw"):
        notes.append("format_converted")
    info = ImageInfo(
        format=out_fmt,
        source_format=fmt,
        width=image.width,
        height=image.height,
        channels=_output_channels(image.mode, policy),
        reencode=True,
        notes=tuple(sorted(set(notes))),
        encoded_size=len(payload),
        decoded=True,
    )
    return (payload if want_bytes else None), info


@contextlib.contextmanager
def _quiet_pillow() -> Iterator[None]:
    # Hostile files make Pillow warn (corrupt EXIF, malformed MPO, decompression bombs above its
    # own limit); our ImageErrors and notes already say it, once, without log spam. Before Python
    # 3.14 catch_warnings is process-wide: threads racing here can leave these filters installed
    # after they return, or drop a filter another thread added meanwhile.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
        warnings.filterwarnings("ignore", module=re.escape(__name__))
        yield


@contextlib.contextmanager
def _pillow_allows(pixels: int) -> Iterator[None]:
    # Some Pillow decoders (TIFF, GIF, ICO) re-check their global MAX_IMAGE_PIXELS while loading.
    # The policy's own limit was checked already; when it allows more than Pillow's global one,
    # lift the global for the length of this decode only. Serialized, because the global is shared.
    limit = Image.MAX_IMAGE_PIXELS
    if limit is None or pixels <= 2 * limit:  # Pillow only warns below twice its limit
        yield
        return
    with _PILLOW_LIMIT_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved


@functools.cache
def _factory(fmt: str) -> Callable[..., ImageFile.ImageFile] | None:
    module, pillow_id = _PLUGINS[fmt]
    try:
        importlib.import_module(f"PIL.{module}")
    except ImportError:  # a Pillow built without this codec
        return None
    entry = Image.OPEN.get(pillow_id)
    return entry[0] if entry else None


def _open(data: bytes, fmt: str, complete: bool) -> ImageFile.ImageFile:
    factory = _factory(fmt)
    if factory is None:
        raise ImageError("unsupported", f"this Pillow build cannot read {fmt}")
    try:
        # The plugin chosen by content, called directly: Image.open would try other plugins,
        # hide the real exception and apply Pillow's global pixel limit instead of the policy's.
        return factory(io.BytesIO(data), None)
    except Exception as exc:
        raise _as_image_error(exc, fmt, "header", complete) from exc


def _decode(im: ImageFile.ImageFile, fmt: str, *, draft: bool) -> None:
    try:
        if draft:
            # An 1/8-scale grayscale decode still entropy-decodes every scan, so truncated and
            # broken JPEG data is still found, for a fraction of the IDCT and colour work.
            im.draft("L", (1, 1))
        im.load()
    except Exception as exc:
        raise _as_image_error(exc, fmt, "decode", True) from exc


def _as_image_error(exc: BaseException, fmt: str, stage: str, complete: bool) -> ImageError:
    if isinstance(exc, ImageError):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Image.DecompressionBombError):
        return ImageError("too_many_pixels", f"Pillow refused the {fmt} image: {exc}")
    if not complete:
        return NeedFullData(f"the prefix is not enough to read the {fmt} {stage} ({text})")
    lowered = text.lower()
    if isinstance(exc, EOFError) or "truncated" in lowered or "eof" in lowered:
        code = "truncated"
    elif "unsupported" in lowered or "not supported" in lowered or "cannot handle" in lowered:
        code = "unsupported"
    else:
        code = "corrupt"
    return ImageError(code, f"the {fmt} {stage} failed: {text}")


def _end_of_data(fmt: str, where: str, complete: bool) -> ImageError:
    if not complete:
        return NeedFullData(f"the prefix ends inside the {fmt} {where}")
    return ImageError("truncated", f"the {fmt} data ends inside the {where}")


def _walk_jpeg(data: bytes, *, whole: bool, complete: bool) -> int:
    """Walks the JPEG marker segments and returns the SOF marker.

    Up to the first scan with whole=False, to the end-of-image marker with whole=True. This
    catches what libjpeg in TensorFlow rejects but Pillow's decoder lets through, such as a
    segment running past the end of the file, and a missing end-of-image marker.
    """
    n = len(data)
    where = "marker segments" if whole else "header"
    pos = 2
    sof = None
    scanned = False
    while True:
        # Like libjpeg, skip stray bytes up to the next marker instead of failing on them.
        pos = data.find(b"\xff", pos)
        if pos < 0:
            raise _end_of_data("jpeg", where, complete)
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            raise _end_of_data("jpeg", where, complete)
        marker = data[pos]
        pos += 1
        if marker == 0xD9:
            if not scanned:
                raise ImageError("corrupt", f"jpeg: end-of-image marker before any scan at {pos}")
            assert sof is not None
            return sof
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue
        if marker in (0x00, 0xD8):
            raise ImageError("corrupt", f"jpeg: invalid marker 0xFF{marker:02X} at byte {pos - 2}")
        if pos + 2 > n:
            raise _end_of_data("jpeg", where, complete)
        length = int.from_bytes(data[pos : pos + 2], "big")
        if length < 2:
            raise ImageError("corrupt", f"jpeg: segment length {length} at byte {pos}")
        end = pos + length
        if end > n:
            raise _end_of_data("jpeg", f"0xFF{marker:02X} segment", complete)
        if marker in _JPEG_SOF:
            if sof is not None:
                raise ImageError("corrupt", f"jpeg: a second frame header at byte {pos - 2}")
            sof = marker
        if marker == 0xDA:
            if sof is None:
                raise ImageError("corrupt", "jpeg: a scan before the frame header")
            if not whole:
                return sof
            scanned = True
            found = _JPEG_NEXT_MARKER.search(data, end)
            if found is None:
                raise _end_of_data("jpeg", "entropy-coded data", complete)
            pos = found.start()
            continue
        pos = end


def _walk_png(data: bytes, *, whole: bool, complete: bool, verify_crc: bool) -> frozenset[bytes]:
    """Checks PNG chunk framing and CRCs, up to the first IDAT or, with whole=True, to IEND.

    libpng (inside TensorFlow) rejects a bad CRC on image data, and IHDR methods other than
    PNG's own; Pillow does not check those.

    Returns:
        The types of the chunks before the first IDAT, and of any critical chunk after it that
        is not one of PNG's own (libpng refuses those; Pillow skips them).
    """
    view = memoryview(data)
    n = len(data)
    pos = 8
    first = True
    header_chunks: set[bytes] = set()
    while True:
        if pos + 8 > n:
            raise _end_of_data("png", "chunk list", complete)
        length, chunk_type = struct.unpack_from(">I4s", data, pos)
        if first:
            if chunk_type != b"IHDR" or length != 13:
                raise ImageError("corrupt", "png: the first chunk is not a 13-byte IHDR")
            methods = data[pos + 18 : pos + 21]  # compression, filter, interlace
            if len(methods) == 3 and (methods[0] or methods[1] or methods[2] > 1):
                raise ImageError(
                    "corrupt",
                    "png: IHDR names a compression, filter or interlace method PNG does not define",
                )
        first = False
        if length > 0x7FFFFFFF or not chunk_type.isalpha():
            raise ImageError("corrupt", f"png: invalid chunk header at byte {pos}")
        if chunk_type == b"IDAT":
            if not whole:
                return frozenset(header_chunks)
            header_chunks.add(b"IDAT")  # later chunks are not header chunks
        elif b"IDAT" not in header_chunks or _png_unknown_critical(chunk_type):
            header_chunks.add(chunk_type)
        end = pos + 12 + length
        if end > n:
            raise _end_of_data("png", f"{chunk_type.decode()} chunk", complete)
        crc = int.from_bytes(view[end - 4 : end], "big")
        if verify_crc and zlib.crc32(view[pos + 4 : pos + 8 + length]) != crc:
            raise ImageError("corrupt", f"png: CRC mismatch in the {chunk_type.decode()} chunk")
        if chunk_type == b"IEND":
            return frozenset(header_chunks - {b"IDAT"})
        pos = end


def _png_unknown_critical(chunk_type: bytes) -> bool:
    """A critical chunk (upper-case first letter) that is not one of PNG's own."""
    return chunk_type[:1].isupper() and chunk_type not in (b"IHDR", b"PLTE", b"IDAT", b"IEND")


def _plain_jpeg_header(data: bytes) -> tuple[int, int, int, int, tuple[str, ...]] | None:
    """Width, height, channels, EXIF orientation and notes of a plain JPEG, or None if unsure.

    One walk of the marker segments up to the first scan, accepting only what both readers of
    the Pillow path take the same way: the segments an ordinary encoder writes (APPn, COM, DQT,
    DHT, DRI and one 8-bit SOF0/1/2 frame of 1 or 3 components), each whole and contiguous. Those
    give Pillow's mode L or RGB (JpegImagePlugin maps only the component count to a mode; an
    Adobe transform flag changes the decode, not the mode) and make _walk_jpeg return the same
    frame marker. Stray bytes, standalone markers, a second frame, MPF (Pillow's MPO reader),
    several EXIF segments and whatever Pillow's segment parsers would fail on return None.
    """
    n = len(data)
    pos = 2
    frame = None
    exif = xmp = None
    while True:
        if pos >= n or data[pos] != 0xFF:
            return None
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos + 3 > n:
            return None
        marker = data[pos]
        start = pos + 3
        end = pos + 1 + (data[pos + 1] << 8 | data[pos + 2])
        if end < start or end > n:
            return None
        if marker == 0xDA:
            break
        if 0xE0 <= marker <= 0xEF:
            if not _jpeg_app_readable(data, marker, start, end):
                return None
            if marker == 0xE1 and data.startswith(b"Exif\x00\x00", start):
                if exif is not None:
                    return None  # Pillow joins them into one EXIF block
                exif = data[start:end]
            elif marker == 0xE1 and data.startswith(_XMP_NAMESPACE, start):
                xmp = data[start + len(_XMP_NAMESPACE) : end]  # the last one counts, as in Pillow
        elif marker == 0xDB:
            table = start  # Pillow fails on a table cut short by the segment end
            while table < end:
                table += 65 if data[table] < 16 else 129
            if table != end:
                return None
        elif marker in _PLAIN_JPEG_SOF:
            if frame is not None or end - start < 6:
                return None
            precision, height, width, components = struct.unpack_from(">BHHB", data, start)
            if precision != 8 or components not in (1, 3) or end - start != 6 + 3 * components:
                return None
            frame = (width, height, components)
        elif marker not in (0xC4, 0xDD, 0xFE):  # DHT, DRI, COM
            return None
        pos = end
    if frame is None or frame[0] < 1 or frame[1] < 1:
        return None
    exif_tags, orientation = 0, None
    if exif is not None:
        ifd0 = _exif_ifd0(exif[6:])
        if ifd0 is None:
            return None
        exif_tags, orientation = ifd0
    if orientation is None and xmp:
        found = _XMP_ORIENTATION.search(xmp)
        if found:
            orientation = int(found[2])
            exif_tags += 1
    # As _orientation judges Pillow's EXIF: present, more than a header, yet without any tag.
    notes = ("exif_unreadable",) if exif is not None and len(exif) > 14 and not exif_tags else ()
    return frame[0], frame[1], frame[2], orientation if orientation in _TRANSPOSE else 1, notes


def _jpeg_app_readable(data: bytes, marker: int, start: int, end: int) -> bool:
    """False for an APP segment that makes JpegImagePlugin fail, or an MPO index (MPF), which
    makes Pillow open the file with its MPO reader."""
    for app, signature, min_length in _JPEG_APP_MIN_LENGTHS:
        if marker == app and data.startswith(signature, start) and end - start < min_length:
            return False
    if marker == 0xE2 and data.startswith(b"MPF\x00", start):
        return False
    return not (
        marker == 0xED
        and data.startswith(b"Photoshop 3.0\x00", start)
        and not _photoshop_resources_readable(data[start:end])
    )


def _photoshop_resources_readable(segment: bytes) -> bool:
    """False where JpegImagePlugin's APP13 parser fails: a resource cut right after its code.

    Pillow stops quietly (struct.error) at any other short field, including a ResolutionInfo
    resource shorter than its 14 bytes; only the name length byte is read by indexing, which
    raises.
    """
    offset = 14
    while segment[offset : offset + 4] == b"8BIM":
        code = segment[offset + 4 : offset + 6]
        offset += 6  # signature, resource code
        if offset > len(segment):
            return True
        if offset == len(segment):
            return False
        offset += 1 + segment[offset]
        offset += offset & 1
        if offset + 4 > len(segment):
            return True
        size = int.from_bytes(segment[offset : offset + 4], "big")
        offset += 4
        if code == b"\x03\xed" and len(segment[offset : offset + size]) < 14:
            return True
        offset += size
        offset += offset & 1
    return True


def _exif_ifd0(tiff: bytes) -> tuple[int, int | None] | None:
    """How many tags Pillow keeps from EXIF IFD0, and its Orientation; None when unsure.

    Only a standard TIFF header with all of IFD0's entries, of standard field types, every value
    inside the block, at most one SHORT Orientation and a numeric XResolution if any, is read
    here: Pillow parses exactly those the same way (a missing next-IFD pointer after them only
    makes it warn), while it stops, skips, warns or fails on anything else.
    """
    if tiff.startswith(b"II*\x00"):
        order = "<"
    elif tiff.startswith(b"MM\x00*"):
        order = ">"
    else:
        return None
    if len(tiff) < 8:
        return None
    (ifd,) = struct.unpack_from(order + "I", tiff, 4)
    if ifd + 2 > len(tiff):
        return None
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    first = ifd + 2
    if first + 12 * count > len(tiff):
        return None
    kept = set()
    orientation = None
    for entry in range(first, first + 12 * count, 12):
        tag, field_type, values, value = struct.unpack_from(order + "HHII", tiff, entry)
        if not 1 <= field_type < len(_TIFF_TYPE_SIZES):
            return None
        size = values * _TIFF_TYPE_SIZES[field_type]
        if size > 4 and value + size > len(tiff):
            return None
        if tag == _X_RESOLUTION_TAG and field_type in (1, 2, 7):
            return None  # Pillow's JPEG reader takes DPI from it by indexing, which can fail
        if tag == _ORIENTATION_TAG:
            if field_type != 3 or values != 1 or orientation is not None:
                return None
            (orientation,) = struct.unpack_from(order + "H", tiff, entry + 8)
        if size:  # Pillow drops empty values
            kept.add(tag)
    return len(kept), orientation


def _plain_png_header(data: bytes) -> tuple[int, int, int, int, tuple[str, ...]] | None:
    """Width, height, channels, orientation 1 and no notes of a plain 8-bit PNG, or None.

    One walk of the chunks up to the first IDAT, checking their CRCs as Pillow's reader does
    (in every validation mode), accepting an 8-bit gray, RGB, gray+alpha or RGBA image whose
    chunks before IDAT Pillow reads without failing and without setting "transparency" or
    "exif": no tRNS, APNG, eXIf, zTXt or compressed iTXt, no unknown critical chunk.
    """
    n = len(data)
    if n < 33 or data[8:16] != b"\x00\x00\x00\x0dIHDR":
        return None
    width, height, depth, color_type, method, filtering, interlace = struct.unpack_from(
        ">IIBBBBB", data, 16
    )
    if (
        depth != 8
        or color_type not in _PNG_MODES
        or method
        or filtering
        or interlace > 1
        or width < 1
        or height < 1
    ):
        return None
    view = memoryview(data)
    pos = 8
    text = 0
    while True:
        if pos + 8 > n:
            return None
        length, chunk_type = struct.unpack_from(">I4s", data, pos)
        if length > 0x7FFFFFFF or not chunk_type.isalpha():
            return None  # _walk_png refuses these, an IDAT included
        if chunk_type == b"IDAT":
            break
        end = pos + 12 + length
        if end > n:
            return None
        body = view[pos + 8 : end - 4]
        if zlib.crc32(view[pos + 4 : end - 4]) != int.from_bytes(view[end - 4 : end], "big"):
            return None
        if pos == 8:
            pass  # the IHDR, read above
        elif chunk_type in _PNG_PLAIN_CHUNKS:
            if length < _PNG_PLAIN_CHUNKS[chunk_type] or (chunk_type == b"cHRM" and length % 4):
                return None
        elif chunk_type in (b"tEXt", b"iTXt"):
            key, _, rest = bytes(body).partition(b"\x00")
            if key in _PNG_TEXT_KEYS_READ or (
                chunk_type == b"iTXt" and rest[:1] not in (b"", b"\x00")
            ):
                return None  # a key the verdict reads, or compressed text Pillow inflates
            text += length
        elif chunk_type == b"iCCP":
            if not _png_icc_readable(bytes(body)):
                return None
        elif chunk_type in _PNG_PILLOW_CHUNKS or chunk_type[:1].isupper():
            return None  # or an unknown critical chunk, which Pillow ignores but libpng refuses
        pos = end
    if text > PngImagePlugin.MAX_TEXT_MEMORY:  # Pillow's limit on all text, counted generously
        return None
    return width, height, _PNG_KEEP_CHANNELS[color_type], 1, ()


def _png_icc_readable(chunk: bytes) -> bool:
    """True when Pillow's iCCP reader accepts the chunk: a method byte of 0 and a profile that
    inflates within PngImagePlugin.MAX_TEXT_CHUNK (broken deflate data it ignores)."""
    name_end = chunk.find(b"\x00")
    if name_end < 0 or name_end + 1 >= len(chunk) or chunk[name_end + 1] != 0:
        return False
    inflate = zlib.decompressobj()
    try:
        inflate.decompress(chunk[name_end + 2 :], PngImagePlugin.MAX_TEXT_CHUNK)
    except zlib.error:
        return True
    return not inflate.unconsumed_tail


def _orientation(im: Image.Image, notes: list[str]) -> int:
    raw = im.info.get("exif")
    try:
        if isinstance(im, PngImagePlugin.PngImageFile):
            # PngImageFile.getexif() decodes the whole image to look for a late eXIf chunk;
            # only the header's EXIF is wanted here (and all there is in a prefix).
            exif = Image.Exif()
            if raw:
                exif.load(raw)
        else:
            exif = im.getexif()
        value = exif.get(_ORIENTATION_TAG, 1)
    except Exception:  # EXIF is advisory; TensorFlow never reads it
        notes.append("exif_unreadable")
        return 1
    if raw and len(raw) > 14 and not exif:  # Pillow parses broken EXIF as empty, with a warning
        notes.append("exif_unreadable")
    return value if isinstance(value, int) and value in _TRANSPOSE else 1


def _verbatim_channels(
    im: Image.Image,
    data: bytes,
    fmt: str,
    jpeg_sof: int | None,
    png_chunks: frozenset[bytes],
    policy: ImagePolicy,
) -> int | None:
    """The channels TensorFlow decodes from the original bytes, or None if they must change."""
    if fmt == "jpeg":
        if im.mode not in ("L", "RGB") or jpeg_sof not in _PLAIN_JPEG_SOF:
            return None
        source_channels = 1 if im.mode == "L" else 3
    elif fmt == "png":
        bit_depth, color_type = data[24], data[25]
        if (
            data[12:16] != b"IHDR"
            or bit_depth != 8
            or color_type not in _PNG_MODES
            or im.mode != _PNG_MODES[color_type]
            or b"tRNS" in png_chunks  # a colour key: TensorFlow would not flatten it
            or b"acTL" in png_chunks  # APNG: re-encoded to its first frame, to be certain
            or any(_png_unknown_critical(c) for c in png_chunks)  # libpng would refuse the file
            or "transparency" in im.info
        ):
            return None
        source_channels = _PNG_KEEP_CHANNELS[color_type]
        if source_channels == 4 and policy.color != "keep":
            return None  # alpha must be flattened onto the background
    else:
        return None
    return {"rgb": 3, "gray": 1, "keep": source_channels}[policy.color]


def _source_depth_notes(im: Image.Image, data: bytes, fmt: str) -> list[str]:
    """Notes for sample depths Pillow reduces on open, where the mode no longer shows them."""
    depth = 8
    if fmt == "png":
        depth = data[24]
    elif fmt == "tiff":
        bits = getattr(im, "tag_v2", {}).get(258, 8)
        depth = max(bits) if isinstance(bits, tuple) and bits else bits
    if im.mode in _HIGH_DEPTH_NOTES or im.mode == "1" or not isinstance(depth, int):
        return []  # _normalize notes these itself
    if depth > 8:
        return ["16bit_reduced"]
    if depth < 8 and im.mode != "P":
        return ["low_bit_depth_expanded"]
    return []


def _normalize(im: Image.Image, policy: ImagePolicy, notes: list[str]) -> Image.Image:
    """Converts to L, LA, RGB or RGBA, then to what the policy's colour asks for."""
    mode = im.mode
    transparent = "transparency" in im.info
    image: Image.Image
    if mode in _HIGH_DEPTH_NOTES:
        image = _to_8bit(im, notes)
    elif mode == "1":
        image = im.convert("LA" if transparent else "L")
        notes.append("low_bit_depth_expanded")
    elif mode in ("L", "LA", "La", "RGB", "RGBA", "RGBa"):
        if transparent and mode in ("L", "RGB"):
            image = im.convert(mode + "A")
        else:
            image = im.convert({"La": "LA", "RGBa": "RGBA"}.get(mode, mode))
    elif mode in ("P", "PA"):
        image = im.convert("RGBA" if transparent or mode == "PA" else "RGB")
        notes.append("palette_expanded")
    elif mode == "CMYK":
        # Pillow already undid the Adobe inversion (and libjpeg the YCCK transform) on decode.
        image = im.convert("RGB")
        notes.append("cmyk_converted")
    elif mode == "LAB":
        image = _lab_to_rgb(im)
        notes.append("lab_converted")
    else:  # RGBX, YCbCr, HSV and other colour spaces Pillow converts itself
        try:
            image = im.convert("RGB")
        except ValueError as exc:
            raise ImageError("unsupported", f"cannot convert Pillow mode {mode} to RGB") from exc
        notes.append("color_space_converted")

    if policy.color == "keep":
        return image
    if image.mode in ("LA", "RGBA"):
        image = _flatten(image, policy.background)
        notes.append("alpha_flattened")
    target = "RGB" if policy.color == "rgb" else "L"
    return image if image.mode == target else image.convert(target)


def _to_8bit(im: Image.Image, notes: list[str]) -> Image.Image:
    """Maps high-depth samples onto 0..255 by their actual range, keeping a colour-key alpha."""
    notes.append(_HIGH_DEPTH_NOTES[im.mode])
    samples = np.asarray(im)
    alpha = None
    key = im.info.get("transparency")
    if isinstance(key, int):
        alpha = np.where(samples == key, 0, 255).astype(np.uint8)
    values = samples.astype(np.float32)
    finite = np.isfinite(values)
    out = np.zeros(values.shape, dtype=np.float32)
    with np.errstate(all="ignore"):  # NaN and infinities are replaced below
        if finite.any():
            lo = float(values[finite].min())
            hi = float(values[finite].max())
            if hi > lo:
                # Stretch the range actually used: a 12-bit scan in a 16-bit container, or
                # depths in metres, would otherwise come out nearly black.
                out = (values - lo) * np.float32(255.0 / (hi - lo))
            elif np.issubdtype(samples.dtype, np.floating):
                out[:] = min(max(lo, 0.0), 1.0) * 255.0  # flat float image: a 0..1 intensity
            else:
                out[:] = max(lo, 0.0) * 255.0 / float(np.iinfo(samples.dtype).max)
        out[np.isposinf(values)] = 255.0
        out[np.isnan(values) | np.isneginf(values)] = 0.0
        gray = Image.fromarray(np.clip(np.rint(out), 0, 255).astype(np.uint8))
    if alpha is None:
        return gray
    return Image.merge("LA", (gray, Image.fromarray(alpha)))


def _lab_to_rgb(im: Image.Image) -> Image.Image:
    try:
        from PIL import ImageCms
    except ImportError as exc:  # a Pillow built without LittleCMS
        raise ImageError("unsupported", "LAB images need Pillow with LittleCMS") from exc
    transform = ImageCms.buildTransform(
        ImageCms.createProfile("LAB"), ImageCms.createProfile("sRGB"), "LAB", "RGB"
    )
    return ImageCms.applyTransform(im, transform)


def _flatten(image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    rgba = image.convert("RGBA")
    base = Image.new("RGBA", rgba.size, (*background, 255))
    return Image.alpha_composite(base, rgba).convert("RGB")


def _is_lossy(im: Image.Image, data: bytes, fmt: str) -> bool:
    if fmt in _LOSSY_SOURCES:
        return True
    if fmt == "tiff":
        return im.info.get("compression") in _LOSSY_TIFF_COMPRESSIONS
    if fmt == "webp":
        return _webp_is_lossy(data)
    return False


def _webp_is_lossy(data: bytes) -> bool:
    """True when the first image chunk is VP8 (lossy) rather than VP8L (lossless)."""
    pos = 12
    while pos + 8 <= len(data):
        fourcc = data[pos : pos + 4]
        length = int.from_bytes(data[pos + 4 : pos + 8], "little")
        if fourcc == b"VP8 ":
            return True
        if fourcc == b"VP8L":
            return False
        if fourcc == b"ANMF":
            pos += 8 + 16  # into the first frame: its header, then its own chunks
            continue
        pos += 8 + length + (length & 1)
    return False


def _encode(image: Image.Image, fmt: str, policy: ImagePolicy) -> bytes:
    # No metadata is carried over: an ICC profile, EXIF or tRNS in the output could make some
    # decoder change the pixels, and TensorFlow reads none of them.
    image.info = {}
    buffer = io.BytesIO()
    if fmt == "jpeg":
        image.save(
            buffer,
            "JPEG",
            quality=policy.jpeg_quality,
            subsampling="4:2:0",
            optimize=False,
            progressive=False,
        )
    else:
        image.save(buffer, "PNG", compress_level=_PNG_COMPRESS_LEVEL, optimize=False)
    return buffer.getvalue()


def _output_channels(mode: str, policy: ImagePolicy) -> int:
    if policy.color == "rgb":
        return 3
    if policy.color == "gray":
        return 1
    return {"L": 1, "RGB": 3, "LA": 4, "RGBA": 4}[mode]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
