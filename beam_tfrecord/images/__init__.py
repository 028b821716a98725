"""Image checks and normalization, so that TensorFlow decodes every written image exactly as stated.

policy (ImagePolicy, Resize: what to do), headers (byte-level JPEG, PNG and EXIF parsers, format
sniffing: answers without decoding), decode (Pillow: decoding, normalization, re-encoding) and
outcome (ImageInfo, ImageError: what a check says).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from beam_tfrecord.images.outcome import (
    ERROR_CODES,
    NOTE_CODES,
    ImageError,
    ImageInfo,
    NeedFullData,
)
from beam_tfrecord.images.policy import ImagePolicy, Resize

if TYPE_CHECKING:
    from beam_tfrecord.images.decode import check_image, encode_for_tensorflow
    from beam_tfrecord.images.headers import sniff_format

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

# Pillow and numpy load with decode, when a check is first asked for: a config (which holds an
# ImagePolicy) is made and checked without them.
_LAZY = {
    "check_image": "beam_tfrecord.images.decode",
    "encode_for_tensorflow": "beam_tfrecord.images.decode",
    "sniff_format": "beam_tfrecord.images.headers",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
