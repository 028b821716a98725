"""How images are checked and normalized: ImagePolicy and Resize, validated when made."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "COLORS",
    "ENCODINGS",
    "STORES",
    "VALIDATE_MODES",
    "ImagePolicy",
    "PolicyError",
    "Resize",
]

# The values of ImagePolicy's choices (the settings table offers them as the flags' choices).
VALIDATE_MODES = ("decode", "header", "none")

COLORS = ("rgb", "gray", "keep")

_RESIZE_POLICIES = ("crop", "pad", "stretch")

ENCODINGS = ("jpeg", "png")

STORES = ("encoded", "raw")


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

    def __str__(self) -> str:
        """The shortest text `Resize.parse` reads back as this resize: `256`, `640x480`,
        `exact:224x224` (crop, the default) or `exact:224x224:pad`."""
        if self.mode == "short":
            return str(self.size)
        dims = f"{self.width}x{self.height}"
        if self.mode == "fit":
            return dims
        return f"exact:{dims}" if self.policy == "crop" else f"exact:{dims}:{self.policy}"

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
        background: RGB colour that alpha is flattened onto for "rgb" and "gray"; three
            integers, or the text `#RRGGBB` or `R,G,B`.
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
        _check_choice("validate", self.validate, VALIDATE_MODES)
        _check_choice("color", self.color, COLORS)
        if not _is_int(self.max_pixels) or self.max_pixels < 1:
            raise PolicyError("max_pixels", f"must be a positive integer, got {self.max_pixels!r}")
        background = self.background
        if isinstance(background, str):
            background = _parse_color(background)
        if (
            isinstance(background, bytes)
            or not hasattr(background, "__len__")
            or len(background) != 3
            or not all(_is_int(v) and 0 <= v <= 255 for v in background)
        ):
            raise PolicyError(
                "background",
                f"expected #RRGGBB or R,G,B with values 0-255, got {self.background!r}",
            )
        # A list from a YAML config becomes a tuple, so the policy stays hashable.
        object.__setattr__(self, "background", tuple(int(v) for v in background))
        if not _is_int(self.jpeg_quality) or not 1 <= self.jpeg_quality <= 100:
            raise PolicyError(
                "jpeg_quality", f"must be an integer from 1 to 100, got {self.jpeg_quality!r}"
            )
        if not isinstance(self.apply_exif_orientation, bool):
            raise PolicyError(
                "apply_exif_orientation", f"must be a bool, got {self.apply_exif_orientation!r}"
            )
        if _is_int(self.resize):  # `resize: 256` in a YAML file, or 256 from Python
            object.__setattr__(self, "resize", str(self.resize))
        if isinstance(self.resize, str):
            try:
                object.__setattr__(self, "resize", Resize.parse(self.resize))
            except ValueError as err:
                # The problem is shown after the setting's name: Resize's own "resize: " goes.
                raise PolicyError("resize", re.sub(r"^resize:? ", "", str(err))) from None
        if self.resize is not None and not isinstance(self.resize, Resize):
            raise PolicyError(
                "resize",
                f"must be a size such as 256, 640x480 or exact:224x224, got {self.resize!r}",
            )
        if self.encode is not None:
            _check_choice("encode", self.encode, ENCODINGS)
        _check_choice("store", self.store, STORES)
        if self.store == "raw" and self.encode is not None:
            raise PolicyError("encode", "--store raw writes pixels, not image files; drop --encode")


class PolicyError(ValueError):
    """A bad ImagePolicy value: `field` names it, `problem` says what is wrong with it.

    A build's config reports it under the setting's own name (BuildConfig), so the check and its
    words live here only.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"ImagePolicy.{field} {problem}")
        self.field = field
        self.problem = problem

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.field, self.problem))


def _check_choice(field: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise PolicyError(field, f"expected one of {', '.join(choices)}, got {value!r}")


def _parse_color(value: str) -> tuple[int, ...]:
    """`#RRGGBB` or `R,G,B` as three integers (checked by the caller)."""
    text = value.strip().lstrip("#")
    if re.fullmatch(r"[0-9A-Fa-f]{6}", text):
        return tuple(int(text[i : i + 2], 16) for i in (0, 2, 4))
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise PolicyError("background", f"expected #RRGGBB or R,G,B, got {value!r}") from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
