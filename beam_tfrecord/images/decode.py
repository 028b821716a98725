"""Pillow decoding, normalization and re-encoding, so that TensorFlow decodes every written image
exactly as stated."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator

from PIL import Image, ImageFile, PngImagePlugin

from beam_tfrecord.images.headers import (
    ORIENTATION_TAG,
    PLAIN_JPEG_SOF,
    PNG_KEEP_CHANNELS,
    PNG_MODES,
    check_pixels,
    fast_header_info,
    png_unknown_critical,
    sniff_format,
    walk_jpeg,
    walk_png,
)
from beam_tfrecord.images.outcome import ImageError, ImageInfo, NeedFullData
from beam_tfrecord.images.policy import ImagePolicy, Resize

__all__ = ["check_image", "encode_for_tensorflow"]

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


_PNG_COMPRESS_LEVEL = 6

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


def check_image(
    data: bytes, policy: ImagePolicy, *, size: int | None = None, fast_headers: bool = True
) -> ImageInfo:
    """Checks one image and says what encode_for_tensorflow will write for it.

    Images kept as they are cost a header read (plus a decode with validate="decode"); images
    that need re-encoding are re-encoded here too, because the exact encoded size is part of the
    answer.

    Args:
        data: The whole file, or with validate="header" or "none" possibly only its first bytes.
        policy: How to check and normalize.
        size: Length of the whole file when `data` may be a prefix; defaults to len(data).
        fast_headers: Answer for ordinary JPEGs and PNGs from their headers, without Pillow
            (validate="header" or "none"); False sends every image through Pillow, as the
            equivalence tests and benchmarks/bench_images.py do to compare the two.

    Returns:
        The ImageInfo that encode_for_tensorflow returns for the whole file and the same policy.

    Raises:
        NeedFullData: `data` is a prefix and the answer needs the whole file.
        ImageError: The image cannot be written; `code` says why.
        ValueError: `size` is smaller than len(data).
    """
    return _process(data, policy, size, want_bytes=False, fast_headers=fast_headers)[1]


def encode_for_tensorflow(
    data: bytes, policy: ImagePolicy, *, fast_headers: bool = True
) -> tuple[bytes, ImageInfo]:
    """Returns the bytes to store for one image, and what TensorFlow will decode from them.

    The bytes are the original ones when TensorFlow already decodes them as stated, otherwise a
    deterministic PNG (lossless sources) or JPEG at policy.jpeg_quality (lossy sources).

    Args:
        data: The whole file.
        policy: How to check and normalize.
        fast_headers: As for check_image.

    Returns:
        (bytes to write, the same ImageInfo check_image returns for `data` and `policy`).

    Raises:
        ImageError: The image cannot be written; `code` says why.
    """
    payload, info = _process(data, policy, None, want_bytes=True, fast_headers=fast_headers)
    assert payload is not None
    return payload, info


def _process(
    data: bytes, policy: ImagePolicy, size: int | None, *, want_bytes: bool, fast_headers: bool
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
        if data.startswith(b"\x1f\x8b"):
            # A file compressed whole, or an S3 object kept with Content-Encoding: gzip, which
            # S3 serves as kept.
            raise ImageError("unknown_format", "the content is gzip-compressed, not an image")
        raise ImageError(
            "unknown_format", f"the content is not a known image format: {data[:16]!r}"
        )
    if fmt in _UNSUPPORTED:
        raise ImageError("unsupported", f"{fmt} images are recognised but not supported")
    if fast_headers and policy.validate != "decode":
        info = fast_header_info(data, fmt, total, policy)
        if info is not None:
            return (data if want_bytes else None), info
    if _quiet_for_good:  # a shard process: no filters to install (a context costs 2 us)
        return _opened(data, fmt, total, complete, policy, want_bytes)
    with _quiet_pillow():
        return _opened(data, fmt, total, complete, policy, want_bytes)


def _opened(
    data: bytes, fmt: str, total: int, complete: bool, policy: ImagePolicy, want_bytes: bool
) -> tuple[bytes | None, ImageInfo]:
    im = _open(data, fmt, complete)
    try:
        return _process_open(im, data, fmt, total, complete, policy, want_bytes)
    except Exception as exc:
        # Pillow raises nearly anything on hostile input (SyntaxError, struct.error, KeyError,
        # ...), from properties as well as from load(); none of it may escape as such.
        raise _as_image_error(exc, fmt, "decode", complete) from exc
    finally:
        im.close()


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
    check_pixels(width, height, policy)
    jpeg_sof, png_chunks = _walk_headers(data, fmt, complete, policy)
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
            notes=tuple(sorted(set(notes))) if notes else (),
            encoded_size=total,
            decoded=policy.validate == "decode",
        )
        return (data if want_bytes else None), info
    payload, info = _reencoded(
        im, data, fmt, complete, policy, notes, orientation if rotate else None, shown
    )
    return (payload if want_bytes else None), info


def _walk_headers(
    data: bytes, fmt: str, complete: bool, policy: ImagePolicy
) -> tuple[int | None, frozenset[bytes]]:
    """The JPEG's frame header, or the PNG's chunk types, from a walk of the file's headers.

    The header walks find facts that decide whether TensorFlow may get the original bytes (the
    JPEG frame type, an APNG's acTL), so they run in every mode; "decode" continues them to the
    end of the file, and only "none" skips the PNG CRCs.
    """
    whole = policy.validate == "decode"
    if fmt == "jpeg":
        return walk_jpeg(data, whole=whole, complete=complete), frozenset()
    if fmt == "png":
        chunks = walk_png(
            data, whole=whole, complete=complete, verify_crc=policy.validate != "none"
        )
        return None, chunks
    return None, frozenset()


def _reencoded(
    im: ImageFile.ImageFile,
    data: bytes,
    fmt: str,
    complete: bool,
    policy: ImagePolicy,
    notes: list[str],
    orientation: int | None,
    shown: tuple[int, int],
) -> tuple[bytes, ImageInfo]:
    """The image decoded, normalized, turned upright (`orientation`, None to leave it),
    transformed and encoded as the policy asks, with its notes."""
    if not complete:
        raise NeedFullData(f"this {fmt} image must be re-encoded, which needs the whole file")
    if fmt != "jpeg" and getattr(im, "is_animated", False):
        # MPO (camera stereo pairs) counts as jpeg: TensorFlow decodes its primary image.
        notes.append("first_frame_of_animation")
    notes.extend(_source_depth_notes(im, data, fmt))
    if policy.resize is not None:
        # max_pixels bounds what the build holds decoded, an enlargement's output too: a 96 px
        # image at --resize 9000 was a 9000x10286 record, 780 MB of one process to make.
        width, height = policy.resize.output_size(*shown)
        if width * height > policy.max_pixels:
            raise ImageError(
                "too_many_pixels",
                f"--resize makes it {width}x{height} = {width * height:,} pixels, more than "
                f"max_pixels={policy.max_pixels:,}",
            )
    with _pillow_allows(im.size[0] * im.size[1]):
        image = _decoded_upright(im, fmt, policy, notes, orientation, shown)
        if policy.resize is not None:
            image = _resize(image, policy.resize, policy.background)
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
    return payload, info


def _decoded_upright(
    im: ImageFile.ImageFile,
    fmt: str,
    policy: ImagePolicy,
    notes: list[str],
    orientation: int | None,
    shown: tuple[int, int],
) -> Image.Image:
    """The image decoded (a JPEG to be shrunk, at a reduced scale), in the policy's colors, and
    turned upright by its EXIF `orientation` (None: left as it is)."""
    if policy.resize is not None and fmt == "jpeg":
        # A JPEG that will be shrunk is decoded at the smallest 1/2, 1/4 or 1/8 scale that is
        # still at least the size it is scaled to: most of the IDCT work is skipped.
        target = policy.resize.scaled_size(*shown)
        swapped = orientation in (5, 6, 7, 8)
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
    if orientation is not None:
        image = image.transpose(_TRANSPOSE[orientation])
        notes.append("exif_rotated")
    return image


@contextlib.contextmanager
def _quiet_pillow() -> Iterator[None]:
    # Hostile files make Pillow warn (corrupt EXIF, malformed MPO, decompression bombs above its
    # own limit); our ImageErrors and notes already say it, once, without log spam. Before Python
    # 3.14 catch_warnings is process-wide: threads racing here can leave these filters installed
    # after they return, or drop a filter another thread added meanwhile.
    if _quiet_for_good:
        yield
        return
    with warnings.catch_warnings():
        _silence_pillow()
        yield


def quiet_pillow_for_good() -> None:
    """Silences Pillow's warnings, and this package's, for the rest of this process.

    For a process of this tool's own (a shard process): every check would otherwise install the
    filters and take them away again, some 30 microseconds an image, a fifth of the work on a
    small one. A process that is not the tool's own (a caller's, or a Beam worker's) keeps its
    warnings as they were, and the checks silence them for their own length only.
    """
    global _quiet_for_good
    _silence_pillow()
    _quiet_for_good = True


def _silence_pillow() -> None:
    warnings.filterwarnings("ignore", module=_QUIET_MODULES)
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


_quiet_for_good = False


# Pillow's modules and this package's own: one filter (it runs for every image), matched as a
# filter's module is, from the start of the warning's module name.
_QUIET_MODULES = rf"PIL(\.|$)|{re.escape(__package__)}"


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


def _orientation(im: Image.Image, notes: list[str]) -> int:
    raw = im.info.get("exif")
    try:
        if isinstance(im, PngImagePlugin.PngImageFile):
            if not raw:  # most PNGs: no EXIF in the header, so no orientation
                return 1
            # PngImageFile.getexif() decodes the whole image to look for a late eXIf chunk;
            # only the header's EXIF is wanted here (and all there is in a prefix).
            exif = Image.Exif()
            if raw:
                exif.load(raw)
        else:
            exif = im.getexif()
        value = exif.get(ORIENTATION_TAG, 1)
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
        if im.mode not in ("L", "RGB") or jpeg_sof not in PLAIN_JPEG_SOF:
            return None
        source_channels = 1 if im.mode == "L" else 3
    elif fmt == "png":
        bit_depth, color_type = data[24], data[25]
        if (
            data[12:16] != b"IHDR"
            or bit_depth != 8
            or color_type not in PNG_MODES
            or im.mode != PNG_MODES[color_type]
            or b"tRNS" in png_chunks  # a colour key: TensorFlow would not flatten it
            or b"acTL" in png_chunks  # APNG: re-encoded to its first frame, to be certain
            or any(png_unknown_critical(c) for c in png_chunks)  # libpng would refuse the file
            or "transparency" in im.info
        ):
            return None
        source_channels = PNG_KEEP_CHANNELS[color_type]
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


def _numpy():
    """numpy, imported on first use: a tenth of a second that every shard process would pay
    at its start for the few 16-bit and float images a collection holds.

    Imported with SIGTERM blocked in this thread, so the threads its import starts (BLAS's)
    block it too: in a shard process only the main thread may take it (`shard_processes`), or
    a SIGTERM one of them took would leave the main thread stuck in a stalled read.
    """
    if "numpy" not in sys.modules and hasattr(signal, "pthread_sigmask"):
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            import numpy
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    import numpy

    return numpy


def _to_8bit(im: Image.Image, notes: list[str]) -> Image.Image:
    """Maps high-depth samples onto 0..255 by their actual range, keeping a colour-key alpha."""
    np = _numpy()
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


# The most pixels a side of a JPEG can have: libjpeg's JPEG_MAX_DIMENSION (the frame header
# would hold 65,535).
_JPEG_MAX_SIDE = 65500


def _encode(image: Image.Image, fmt: str, policy: ImagePolicy) -> bytes:
    # No metadata is carried over: an ICC profile, EXIF or tRNS in the output could make some
    # decoder change the pixels, and TensorFlow reads none of them.
    image.info = {}
    buffer = io.BytesIO()
    if fmt == "jpeg":
        if max(image.size) > _JPEG_MAX_SIDE:
            # libjpeg refuses it with an error about a broken data stream, as if it were damaged.
            raise ImageError(
                "unsupported",
                f"a {image.width}x{image.height} image is larger than a JPEG can be "
                f"({_JPEG_MAX_SIDE:,} pixels a side); PNG can hold it",
            )
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


def _resize(image: Image.Image, resize: Resize, background: tuple[int, int, int]) -> Image.Image:
    """Scales (then crops or pads) `image` as `resize` says."""
    width, height = resize.scaled_size(*image.size)
    if (width, height) != image.size:
        # reducing_gap resizes large reductions in two steps: much faster, visually the same.
        image = image.resize((width, height), Image.Resampling.LANCZOS, reducing_gap=3.0)
    if resize.mode != "exact" or (width, height) == (resize.width, resize.height):
        return image
    if resize.policy == "crop":
        left, top = (width - resize.width) // 2, (height - resize.height) // 2
        return image.crop((left, top, left + resize.width, top + resize.height))
    fill: tuple[int, ...] = (0,) * len(image.getbands()) if "A" in image.getbands() else background
    if image.mode == "L":
        fill = round(0.299 * background[0] + 0.587 * background[1] + 0.114 * background[2])
    canvas = Image.new(image.mode, (resize.width, resize.height), fill)
    canvas.paste(image, ((resize.width - width) // 2, (resize.height - height) // 2))
    return canvas
