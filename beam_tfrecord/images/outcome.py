"""What checking an image gives: the ImageInfo of what is written, or an ImageError saying why not."""

from __future__ import annotations

from dataclasses import dataclass, field

from beam_tfrecord.entries import Reason

__all__ = ["ERROR_CODES", "NOTE_CODES", "ImageError", "ImageInfo", "NeedFullData"]

# The reasons an ImageError gives (entries.Reason holds every code of the report).
ERROR_CODES = (
    Reason.EMPTY_FILE,
    Reason.UNKNOWN_FORMAT,
    Reason.UNSUPPORTED,
    Reason.TRUNCATED,
    Reason.CORRUPT,
    Reason.TOO_MANY_PIXELS,
    Reason.NEED_FULL_DATA,
)

# What a written image's report line says was changed or noticed (its `notes`), with what each
# means: the reference docs are generated from this.
NOTE_CODES: dict[str, str] = {
    "16bit_reduced": "16 bits per sample mapped to 8",
    "32bit_reduced": "32-bit integer samples mapped to 8 bits",
    "alpha_flattened": "Alpha composited onto the `--background` colour",
    "cmyk_converted": "CMYK (or YCCK, which decodes to CMYK) converted to RGB",
    "color_space_converted": "Another colour space (YCbCr, HSV, ...) converted to RGB",
    "exif_orientation_ignored": "An EXIF orientation other than 1 left unapplied (`--no-exif-orientation`)",
    "exif_rotated": "The EXIF orientation applied to the pixels",
    "exif_unreadable": "EXIF present but unparseable, so treated as orientation 1",
    "first_frame_of_animation": "An animation or multi-page file reduced to its first frame",
    "float_reduced": "Floating-point samples mapped to 8 bits",
    "format_converted": "The written format differs from the source format",
    "lab_converted": "CIE L*a*b* converted to sRGB",
    "low_bit_depth_expanded": "1, 2 or 4 bits per sample expanded to 8",
    "palette_expanded": "Palette indices expanded to their colours",
    "resized": "Scaled (and cropped or padded) as `--resize` asks",
    "stored_raw": "Written as decoded uint8 pixels, not as an image file",
}


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
            expected = tuple(c.value for c in ERROR_CODES)
            raise ValueError(f"unknown ImageError code {code!r}; expected one of {expected}")
        super().__init__(Reason(code).value, message)
        self.code = Reason(code)
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
