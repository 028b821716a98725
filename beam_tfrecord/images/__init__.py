"""Image checks and normalization, so that TensorFlow decodes every written image exactly as stated.

policy (ImagePolicy, Resize: what to do), headers (byte-level JPEG, PNG and EXIF parsers, format
sniffing: answers without decoding), decode (Pillow: decoding, normalization, re-encoding) and
outcome (ImageInfo, ImageError: what a check says).
"""

from beam_tfrecord.images.decode import check_image, encode_for_tensorflow
from beam_tfrecord.images.headers import sniff_format
from beam_tfrecord.images.outcome import (
    ERROR_CODES,
    NOTE_CODES,
    ImageError,
    ImageInfo,
    NeedFullData,
)
from beam_tfrecord.images.policy import ImagePolicy, Resize

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
