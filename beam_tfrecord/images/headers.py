"""Byte-level JPEG, PNG and EXIF header parsers and format sniffing: answers without decoding."""

from __future__ import annotations

import re
import struct
import zlib

from PIL import PngImagePlugin

from beam_tfrecord.images.outcome import ImageError, ImageInfo, NeedFullData
from beam_tfrecord.images.policy import ImagePolicy

__all__ = ["sniff_format"]

# Channels TensorFlow decodes from an 8-bit PNG with channels=0, keyed by IHDR colour type.
# Gray + alpha decodes to 2 channels, but decode_image refuses channels=2, so it is stated as 4
# (TensorFlow then expands the gray to RGB and keeps the alpha).
PNG_KEEP_CHANNELS = {0: 1, 2: 3, 4: 4, 6: 4}

PNG_MODES = {0: "L", 2: "RGB", 4: "LA", 6: "RGBA"}
# The EXIF orientations other than 1 (decode._TRANSPOSE's keys): 1 is as stored.
_ROTATIONS = frozenset(range(2, 9))
# The BITMAPINFOHEADER family sizes; a bare "BM" prefix is too weak a signature on its own.
_BMP_DIB_SIZES = (12, 16, 40, 52, 56, 64, 108, 124)

_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")

# JPEG SOF markers whose data every libjpeg build decodes: baseline, extended and progressive
# Huffman. Arithmetic-coded and lossless JPEGs are re-encoded rather than trusted to TensorFlow.
PLAIN_JPEG_SOF = (0xC0, 0xC1, 0xC2)

_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}

# Inside entropy-coded data 0xFF is followed by a stuffed 0x00, a restart marker or a fill byte;
# anything else starts a real marker.
_JPEG_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

ORIENTATION_TAG = 0x0112

_X_RESOLUTION_TAG = 0x011A

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


def fast_header_info(data: bytes, fmt: str, total: int, policy: ImagePolicy) -> ImageInfo | None:
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
    check_pixels(width, height, policy)
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


def check_pixels(width: int, height: int, policy: ImagePolicy) -> None:
    if width * height > policy.max_pixels:
        raise ImageError(
            "too_many_pixels",
            f"{width}x{height} = {width * height:,} pixels is more than "
            f"max_pixels={policy.max_pixels:,}",
        )


def _end_of_data(fmt: str, where: str, complete: bool) -> ImageError:
    if not complete:
        return NeedFullData(f"the prefix ends inside the {fmt} {where}")
    return ImageError("truncated", f"the {fmt} data ends inside the {where}")


def _jpeg_end(data: bytes, where: str, complete: bool) -> ImageError:
    """The data ran out inside `where`: truncated, unless the file ends as a whole JPEG does.

    A flipped bit can make scan bytes read as a marker whose segment then runs past the end;
    the file is whole (a cut-off download almost never ends on the end-of-image marker), and
    a new download would not mend it: it is corrupt.
    """
    if complete and data.endswith(b"\xff\xd9"):
        return ImageError(
            "corrupt",
            f"jpeg: damaged data: a {where} runs past the end of the file, which is whole "
            "(it ends with the end-of-image marker)",
        )
    return _end_of_data("jpeg", where, complete)


def walk_jpeg(data: bytes, *, whole: bool, complete: bool) -> int:
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
            raise _jpeg_end(data, where, complete)
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            raise _jpeg_end(data, where, complete)
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
            raise _jpeg_end(data, where, complete)
        length = int.from_bytes(data[pos : pos + 2], "big")
        if length < 2:
            raise ImageError("corrupt", f"jpeg: segment length {length} at byte {pos}")
        end = pos + length
        if end > n:
            raise _jpeg_end(data, f"0xFF{marker:02X} segment", complete)
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
                raise _jpeg_end(data, "entropy-coded data", complete)
            pos = found.start()
            continue
        pos = end


def walk_png(data: bytes, *, whole: bool, complete: bool, verify_crc: bool) -> frozenset[bytes]:
    """Checks PNG chunk framing and CRCs, up to the first IDAT or, with whole=True, to IEND.

    libpng (inside TensorFlow) rejects a bad CRC on image data, and IHDR methods other than
    PNG's own; Pillow does not check those.

    Returns:
        The types of the chunks before the first IDAT, and of any critical chunk after it that
        is not one of PNG's own (libpng refuses those; Pillow skips them).
    """
    n = len(data)
    if n < 16:
        raise _end_of_data("png", "chunk list", complete)
    length, chunk_type = _PNG_CHUNK_HEAD.unpack_from(data, 8)
    if chunk_type != b"IHDR" or length != 13:
        raise ImageError("corrupt", "png: the first chunk is not a 13-byte IHDR")
    methods = data[26:29]  # compression, filter, interlace
    if len(methods) == 3 and (methods[0] or methods[1] or methods[2] > 1):
        raise ImageError(
            "corrupt",
            "png: IHDR names a compression, filter or interlace method PNG does not define",
        )
    # Run for every image a build checks: one pass, no helper calls for a chunk that is fine.
    view = memoryview(data)
    head, crc_of, crc32 = _PNG_CHUNK_HEAD.unpack_from, _PNG_CRC.unpack_from, zlib.crc32
    pos = 8
    header_chunks: set[bytes] = set()
    after_idat = False
    while True:
        if pos + 8 > n:
            raise _end_of_data("png", "chunk list", complete)
        length, chunk_type = head(data, pos)
        if length > 0x7FFFFFFF or not chunk_type.isalpha():
            raise ImageError("corrupt", f"png: invalid chunk header at byte {pos}")
        if chunk_type == b"IDAT":
            if not whole:
                return frozenset(header_chunks)
            after_idat = True  # later chunks are not header chunks
        elif not after_idat or png_unknown_critical(chunk_type):
            header_chunks.add(chunk_type)
        end = pos + 12 + length
        if end > n:
            raise _end_of_data("png", f"{chunk_type.decode()} chunk", complete)
        if verify_crc and crc32(view[pos + 4 : end - 4]) != crc_of(data, end - 4)[0]:
            raise ImageError("corrupt", f"png: CRC mismatch in the {chunk_type.decode()} chunk")
        if chunk_type == b"IEND":
            return frozenset(header_chunks)
        pos = end


_PNG_CHUNK_HEAD = struct.Struct(">I4s")
_PNG_CRC = struct.Struct(">I")


def png_unknown_critical(chunk_type: bytes) -> bool:
    """A critical chunk (upper-case first letter) that is not one of PNG's own."""
    return chunk_type[:1].isupper() and chunk_type not in (b"IHDR", b"PLTE", b"IDAT", b"IEND")


def _plain_jpeg_header(data: bytes) -> tuple[int, int, int, int, tuple[str, ...]] | None:
    """Width, height, channels, EXIF orientation and notes of a plain JPEG, or None if unsure.

    One walk of the marker segments up to the first scan, accepting only what both readers of
    the Pillow path take the same way: the segments an ordinary encoder writes (APPn, COM, DQT,
    DHT, DRI and one 8-bit SOF0/1/2 frame of 1 or 3 components), each whole and contiguous. Those
    give Pillow's mode L or RGB (JpegImagePlugin maps only the component count to a mode; an
    Adobe transform flag changes the decode, not the mode) and make walk_jpeg return the same
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
        elif marker in PLAIN_JPEG_SOF:
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
    return frame[0], frame[1], frame[2], orientation if orientation in _ROTATIONS else 1, notes


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
        if tag == ORIENTATION_TAG:
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
        or color_type not in PNG_MODES
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
            return None  # walk_png refuses these, an IDAT included
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
    return width, height, PNG_KEEP_CHANNELS[color_type], 1, ()


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
