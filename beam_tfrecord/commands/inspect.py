"""The `beam-tfrecord inspect` command: show the records of TFRecord files as people read them."""

from __future__ import annotations

import argparse
import base64
import io
import itertools
import json
import math
import struct
import sys
import warnings
from typing import Any

from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from beam_tfrecord.codec.example import Example, example_to_dict
from beam_tfrecord.codec.framing import CorruptRecordError
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.commands.arguments import (
    add_compression_argument,
    builds_own,
    expand_or_complain,
    given_path,
    non_negative_int,
    print_error,
)
from beam_tfrecord.wording import count

__all__ = ["add_arguments", "run"]

_MAX_VALUES = 10  # values shown per feature before the rest is only counted
_MAX_TEXT = 80  # characters of text shown per bytes value: a SHA-256 in hex (64) shows whole
_MAX_HEX = 16  # bytes shown in hex per binary value
# Magic numbers of the image formats worth summarizing, and Pillow's names for them. BMP's
# two bytes are weak evidence, so it counts as an image only when Pillow reads its header.
_IMAGE_MAGIC = [
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"BM", "bmp"),
]
_PILLOW_FORMATS = {
    "jpeg": "JPEG",
    "png": "PNG",
    "gif": "GIF",
    "tiff": "TIFF",
    "bmp": "BMP",
    "webp": "WEBP",
}


def _image_format(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    for magic, name in _IMAGE_MAGIC:
        if data.startswith(magic):
            return name
    return None


def _image_info(data: bytes) -> dict[str, Any] | None:
    """Format and size of encoded image bytes, reading the header only; None if not an image."""
    name = _image_format(data)
    if name is None:
        return None
    try:
        from PIL import Image  # only when an image turns up: inspect should start fast

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning and the like
            with Image.open(io.BytesIO(data), formats=[_PILLOW_FORMATS[name]]) as image:
                width, height = image.size
    # Pillow raises many types (SyntaxError, struct.error, ...) on a damaged header, and a
    # summary must not stop the listing.
    except Exception:
        return None if name == "bmp" else {"format": name, "width": None, "height": None}
    return {"format": name, "width": width, "height": height}


def _size(count: int) -> str:
    if count < 1000:
        return f"{count} bytes" if count != 1 else "1 byte"
    for unit in ("KB", "MB", "GB"):
        count /= 1000
        if count < 1000 or unit == "GB":
            return f"{count:.1f} {unit}"
    raise AssertionError("unreachable")


def _text(data: bytes) -> str | None:
    """The bytes as text, if they are UTF-8 and printable (tabs and newlines allowed)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if all(char.isprintable() or char in "\t\n\r" for char in text):
        return text
    return None


def _show_bytes(data: bytes) -> str:
    image = _image_info(data)
    if image is not None:
        if image["width"] is None:
            return f"{image['format']} (unreadable header), {_size(len(data))}"
        return f"{image['format']} {image['width']}x{image['height']}, {_size(len(data))}"
    text = _text(data)
    if text is not None:
        if len(text) <= _MAX_TEXT:
            return json.dumps(text, ensure_ascii=False)
        return f"{json.dumps(text[:_MAX_TEXT], ensure_ascii=False)}... ({_size(len(data))})"
    if len(data) <= _MAX_HEX:
        return f"0x{data.hex()}"
    return f"0x{data[:_MAX_HEX].hex()}... ({_size(len(data))})"


def _show_float(value: float) -> str:
    """The shortest text that reads back as the same float32, as people wrote the value."""
    if not math.isfinite(value):
        return str(value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == value:
            return text
    return repr(value)


def _show_values(kind: str | None, values: list[Any]) -> str:
    show = {"bytes": _show_bytes, "float": _show_float}.get(kind or "", str)
    shown = [show(value) for value in values[:_MAX_VALUES]]
    if len(values) == 1:
        return shown[0]
    more = f", ... ({len(values)} values)" if len(values) > _MAX_VALUES else ""
    return f"[{', '.join(shown)}{more}]"


def _as_example(record: bytes) -> Any | None:
    """The record as an Example, or None when it is something else.

    Protobuf's parser accepts any bytes that happen to be well-formed protobuf, keeping what
    it does not know as unknown fields; an Example written by anyone has none at the top.
    """
    try:
        example = Example.FromString(record)
    except DecodeError:
        return None
    if len(unknown_fields.UnknownFieldSet(example)) or len(
        unknown_fields.UnknownFieldSet(example.features)
    ):
        return None
    return example


def _json_bytes(data: bytes) -> Any:
    text = _text(data)
    if text is not None:
        return text
    value: dict[str, Any] = {"base64": base64.b64encode(data).decode("ascii")}
    image = _image_info(data)
    if image is not None:
        value["image"] = image
    return value


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return _json_bytes(value)
    # JSON has no NaN or infinities; strings keep the line parseable by every JSON reader.
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _print_json(url: str, index: int, offset: int, record: bytes) -> None:
    line: dict[str, Any] = {"file": url, "index": index, "offset": offset, "size": len(record)}
    example = _as_example(record)
    if example is None:
        line["features"] = None
        line["raw"] = _json_bytes(record)
    else:
        features = example_to_dict(example, kinds=True)
        line["features"] = {
            name: {"kind": kind, "values": [_json_value(value) for value in values]}
            for name, (kind, values) in features.items()
        }
        shape = _raw_shape(features)
        if shape is not None:  # raw pixels: what a JPEG's or PNG's header would have said
            height, width, channels = shape
            (encoded,) = line["features"]["image/encoded"]["values"]
            encoded["image"] = {"format": "raw", "height": height, "width": width,
                                "channels": channels}  # fmt: skip
    print(json.dumps(line, ensure_ascii=False))


def _print_text(index: int, offset: int, record: bytes) -> None:
    print(f"  record {index}, byte offset {offset}, {count(len(record), 'byte')}")
    example = _as_example(record)
    if example is None:
        print(f"    not a tf.train.Example: {_show_bytes(record)}")
        return
    features = example_to_dict(example, kinds=True)
    if not features:
        print("    (no features)")
    width = max(map(len, features), default=0)
    raw = _raw_pixels(features)
    for name, (kind, values) in features.items():
        shown = raw if name == "image/encoded" and raw else _show_values(kind, values)
        print(f"    {name:{width}s}  {kind or 'unset':5s}  {shown}")


def _raw_pixels(features: dict[str, tuple[str | None, list[Any]]]) -> str | None:
    """How a record of raw pixels (`--store raw`) shows its image/encoded: its shape as the
    record states it, and its size; None for any other record."""
    shape = _raw_shape(features)
    if shape is None:
        return None
    (data,) = features["image/encoded"][1]
    height, width, channels = shape
    # Width by height, as an encoded image's size shows; then the array a reshape makes.
    return (
        f"raw {width}x{height}, {count(channels, 'channel')} ({height}x{width}x{channels} array), "
        f"{_size(len(data))}"
    )


def _raw_shape(features: dict[str, tuple[str | None, list[Any]]]) -> list[int] | None:
    """(height, width, channels) as a record of raw pixels states them; None for any other."""
    try:
        ((_, [image_format]), (_, [_data])) = (features["image/format"], features["image/encoded"])
        if image_format != b"raw":
            return None
        return [features[f"image/{name}"][1][0] for name in ("height", "width", "channels")]
    except (KeyError, ValueError, IndexError):
        return None


# What the exit status says, in --help and the commands reference: the reading commands' rule.
_EXIT_STATUSES = (
    "Exit status: 0 when every file was read; 1 when a path names no file to read (none "
    "there, or a folder with no TFRecord files) or a file is damaged or cannot be read; 2 "
    "for a bad flag or value."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declares the command's arguments."""
    parser.epilog = _EXIT_STATUSES
    parser.add_argument(
        "files",
        nargs="+",
        type=given_path,
        metavar="FILE",
        help="TFRecord files: paths, globs or fsspec URLs (gs://...); directories too",
    )
    parser.add_argument(
        "-n",
        "--records",
        type=non_negative_int,
        default=5,
        metavar="N",
        help="records to show per file, 0 for all (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per record and line, with every value in full",
    )
    add_compression_argument(parser)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Shows the records of the files; returns 1 if a file is missing or damaged."""
    del extra  # the dispatcher refuses unknown flags for this command
    # In a build folder, only the build's files: a preview image or notes beside the shards are
    # not records (as verify takes a folder).
    own: list[str] = []  # a build's manifest, labels, report and indexes, named one by one
    files, unmatched = expand_or_complain(
        args.files, "inspect", others=[], own=own, compression=args.compression
    )
    status = 1 if unmatched or not files else 0
    if own and not files:  # `inspect out/labels.txt` shows nothing: not a success
        print_error("inspect", f"nothing to show: {builds_own(own)}")
    elif own:
        print(f"beam-tfrecord inspect: skipped {builds_own(own)}", file=sys.stderr)
    limit = args.records or None
    for url in files:
        if not args.json:
            print(url)
        records = read_records(url, args.compression, with_offsets=True)
        # One record beyond the limit tells whether there is more to say so.
        shown = itertools.islice(records, None if limit is None else limit + 1)
        index = -1
        try:
            for index, (offset, record) in enumerate(shown):
                if index == limit:
                    if not args.json:
                        print(f"  ... more records (-n {limit * 2} or -n 0 to see them)")
                    break
                if args.json:
                    _print_json(url, index, offset, record)
                else:
                    _print_text(index, offset, record)
            if index < 0 and not args.json:
                print("  no records (an empty file)")
        except BrokenPipeError:
            raise  # the reader of our output is gone (`| head`): the dispatcher ends quietly
        except (CorruptRecordError, OSError) as error:
            # Keep what was shown; name the damage (its file and offset) and go on.
            sys.stdout.flush()
            print_error("inspect", str(error))
            status = 1
    return status
