"""The `beam-tfrecord preview` command: a contact sheet of a split's images, captioned by class."""

from __future__ import annotations

import argparse
import io
import math
import os
import posixpath
import random
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from beam_tfrecord.codec.reader import TFRecordReader, read_records
from beam_tfrecord.commands.arguments import add_loose_argument, given_path, print_error
from beam_tfrecord.locations import is_local, is_memory_url, protocol_problem
from beam_tfrecord.manifest import read_manifest
from beam_tfrecord.reader import (
    Dataset,
    MissingRecordsError,
    Shard,
    decode_image,
    list_shards,
    parse_record,
)
from beam_tfrecord.shard_names import parse_shard_name
from beam_tfrecord.wording import count

__all__ = ["add_arguments", "run"]

_BACKGROUND = (236, 236, 236)
_PLACEHOLDER = (200, 200, 200)
_TEXT = (20, 20, 20)
_WARNING = (190, 0, 0)
_MARGIN = 3  # pixels between a thumbnail and its cell's edge, so neighbours stay apart


@dataclass
class _Tile:
    """One cell of the sheet: an image and its caption, or the reason there is no image."""

    caption: str
    image: np.ndarray | None = None
    problem: str | None = None
    warn: bool = False  # the caption itself reports a problem


# Fonts with more than ASCII, tried first, where the system has one: Pillow's own scalable
# font draws a class name such as "élan" as "□lan".
_FONTS = ("DejaVuSans.ttf", "NotoSans-Regular.ttf", "LiberationSans-Regular.ttf", "Arial.ttf")


def _font(size: int) -> Any:
    for name in _FONTS:
        try:
            return ImageFont.truetype(name, size)  # looked for in the system's font folders
        except (OSError, ImportError):
            continue
    try:
        return ImageFont.load_default(size=size)  # Pillow 10.1+ with FreeType: scalable
    except (TypeError, AttributeError, ImportError, OSError):
        return ImageFont.load_default()  # the small bitmap font


def _caption(record: dict[str, Any], classes: Sequence[str] | None) -> tuple[str, bool]:
    """The class as the record states it; flagged when its id and its text disagree."""
    label = record.get("image/class/label")
    text = record.get("image/class/text")
    if isinstance(label, int) and classes is not None:
        expected = classes[label] if 0 <= label < len(classes) else None
        if expected != text:
            return f"{text} but id {label} = {expected}", True
    if isinstance(text, str) and text:
        return text, False
    if label is not None:
        return f"label {label}", False
    return "(no label)", False


def _tile(data: bytes, classes: Sequence[str] | None) -> _Tile:
    try:
        record = parse_record(data)
    except ValueError:
        return _Tile("unreadable", problem="not a tf.train.Example")
    caption, warn = _caption(record, classes)
    encoded = record.get("image/encoded")
    channels = record.get("image/channels", 3)
    if not isinstance(encoded, bytes):
        return _Tile(caption, problem="no image/encoded", warn=warn)
    stated = tuple(record.get(f"image/{name}") for name in ("height", "width", "channels"))
    try:
        image = decode_image(encoded, channels, record.get("image/format"), stated[:2])
    except (ValueError, TypeError) as error:
        return _Tile(caption, problem=str(error), warn=warn)
    if image.shape != stated:
        return _Tile(caption, problem=f"states {stated}, decodes to {image.shape}", warn=warn)
    return _Tile(caption, image=image, warn=warn)


def _records(shards: Sequence[Shard], wanted: set[int] | None) -> Iterator[bytes | str]:
    """The split's records in order (only positions in ``wanted``, if given); damage as text."""
    position = 0
    last = max(wanted) if wanted else None
    for shard in shards:
        if wanted is not None:
            examples = shard.examples
            if examples is None:
                examples = sum(1 for _ in read_records(shard.url))
            if not any(position <= i < position + examples for i in wanted):
                position += examples
                continue
        reader = TFRecordReader(shard.url, skip_damaged=True, log_damage=False)
        damage = read = 0
        for data in reader:
            while damage < len(reader.damage):  # records skipped just before this one
                yield f"damaged: {reader.damage[damage].reason}"
                damage += 1
            if wanted is None or position in wanted:
                yield data
            position += 1
            read += 1
            if last is not None and position > last:
                return
        for error in reader.damage[damage:]:
            yield f"damaged: {error.reason}"
        missing = None if reader.damage else MissingRecordsError.of(shard.url, read, shard.examples)
        if missing is not None:
            # Whole framing, and records missing (or more): cut at a record's end, emptied.
            yield (
                f"missing records: {posixpath.basename(shard.url)} holds {missing.found} of the "
                f"{missing.written} its build wrote"
            )


def _contact_sheet(tiles: Sequence[_Tile], columns: int, size: int) -> Image.Image:
    """Draws the tiles, ``columns`` to a row, each ``size`` pixels square above its caption."""
    font = _font(max(10, size // 10))
    _, top, _, bottom = font.getbbox("Ag")
    caption_height = bottom - top + 2 * _MARGIN + 2
    columns = max(1, min(columns, len(tiles)))
    rows = max(1, math.ceil(len(tiles) / columns))
    sheet = Image.new("RGB", (columns * size, rows * (size + caption_height)), _BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    inner = size - 2 * _MARGIN
    for number, tile in enumerate(tiles):
        x = number % columns * size
        y = number // columns * (size + caption_height)
        if tile.image is not None:
            pixels = tile.image
            image = Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
            scale = min(inner / image.width, inner / image.height)
            shown = image.resize(
                (max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                Image.Resampling.LANCZOS,
            )
            at = (x + (size - shown.width) // 2, y + (size - shown.height) // 2)
            mask = shown if shown.mode == "RGBA" else None
            sheet.paste(shown.convert("RGB"), at, mask)
        else:
            box = (x + _MARGIN, y + _MARGIN, x + size - _MARGIN - 1, y + size - _MARGIN - 1)
            draw.rectangle(box, fill=_PLACEHOLDER, outline=_WARNING)
            width = max(8, inner // max(1, round(font.getlength("x"))))
            lines = textwrap.wrap(tile.problem or "", width)[: max(1, inner // caption_height)]
            draw.multiline_text(
                (x + 2 * _MARGIN, y + 2 * _MARGIN), "\n".join(lines), _WARNING, font
            )
        caption = _fit(tile.caption, font, inner)
        color = _WARNING if tile.warn or tile.image is None else _TEXT
        # Centred by hand: Pillow's bitmap font (without FreeType) refuses text anchors.
        at = (x + (size - font.getlength(caption)) / 2, y + size + _MARGIN - top)
        draw.text(at, caption, color, font)
    return sheet


def _fit(text: str, font: Any, width: int) -> str:
    """The text, shortened with "..." until it fits ``width`` pixels."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "...") > width:
        text = text[:-1]
    return text + "..."


# What the exit status says, in --help and the commands reference: the reading commands' rule.
_EXIT_STATUSES = (
    "Exit status: 0 when the sheet is written and every image shows; 1 when the dataset "
    "cannot be read (no such folder, a build that did not finish, a damaged shard), its "
    "split holds no records, or an image does not show; 2 for a bad flag or value (an "
    "unknown --split, an -o that exists without --overwrite or whose folder does not)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declares the command's arguments."""
    parser.epilog = _EXIT_STATUSES
    parser.add_argument(
        "output",
        metavar="OUTPUT",
        type=given_path,
        help="a build's output folder, a path or any fsspec URL",
    )
    parser.add_argument(
        "--split",
        default=None,
        help="the split to show (default: the first that holds records; without "
        "manifest.json, train if it has shards)",
    )
    parser.add_argument(
        "-n",
        "--images",
        type=_positive,
        default=16,
        metavar="N",
        help="images to show (default: %(default)s)",
    )
    parser.add_argument(
        "-o",
        "--out",
        default="preview.png",
        metavar="FILE",
        help="where to write the sheet: a PNG, or a JPEG or WebP by its suffix (.jpg, .webp); "
        "- for a PNG on standard output (default: %(default)s)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the sheet's file if it exists (without it, an existing file is refused)",
    )
    parser.add_argument(
        "--columns",
        type=_columns,
        default=8,
        help=f"images per row, at most {_MOST_COLUMNS} (default: %(default)s)",
    )
    parser.add_argument(
        "--size",
        type=_size,
        default=128,
        metavar="PX",
        help=f"thumbnail size in pixels, at most {_MOST_PIXELS} (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="show a random sample of the split drawn with this seed (default: none, the "
        "split's first N records)",
    )
    add_loose_argument(parser)


def _positive(text: str, most: int | None = None) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    if most is not None and number > most:
        raise argparse.ArgumentTypeError(f"must be {most:,} or less, got {number:,}")
    return number


def _columns(text: str) -> int:
    return _positive(text, _MOST_COLUMNS)


def _size(text: str) -> int:
    return _positive(text, _MOST_PIXELS)


# A sheet is for looking at: wider than this many tiles, or tiles larger than this, it is an
# image of tens of thousands of pixels a side that no screen shows.
_MOST_COLUMNS = 64
_MOST_PIXELS = 1024

# -o's name for standard output, as other tools take it: the sheet goes there as a PNG.
_STDOUT = "-"

# What the sheet is written as, by -o's suffix; any other suffix (or none) gets a PNG.
_FORMATS = {".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".png": "PNG"}


def _format_of(out: str) -> str | None:
    """The image format `out`'s suffix names: PNG for a name with no suffix; None for a suffix
    that names none of them (`.gif`)."""
    name = out.rsplit("/", 1)[-1].lower()
    if "." not in name.lstrip("."):
        return "PNG"
    return next((f for suffix, f in _FORMATS.items() if name.endswith(suffix)), None)


def _refusal(out: str, overwrite: bool) -> str | None:
    """Why the sheet cannot go to `out` (it is a folder; its folder is not there; it exists
    and --overwrite is not given; `-`, standard output, is a terminal), or None."""
    if out == _STDOUT:
        if sys.stdout.isatty():  # a PNG's bytes would scramble the terminal, and show nothing
            return (
                "-o -: standard output is a terminal; send it to a file or a program "
                "(> sheet.png, | display), or name a file"
            )
        return None
    if is_memory_url(out):  # written, and gone with the command, which said it wrote it
        return (
            f"-o {out}: is in memory (fsspec's memory filesystem), gone when the command ends; "
            "name a file on disk or in a bucket"
        )
    fs, path = fsspec.core.url_to_fs(out)
    if fs.isdir(path):
        return f"-o {out}: is a folder; name the PNG file to write"
    if is_local(fs) and not fs.isdir(os.path.dirname(path)):
        # Named before any work, as the user typed it: the write makes no folder (`run`), and
        # would fail only once the sheet is drawn. Object stores have no folders to be missing.
        folder = posixpath.dirname(out)
        if fs.exists(os.path.dirname(path)):
            return f"-o {out}: {folder} is a file, not a folder"
        return f"-o {out}: no such folder {folder}; make it, or name a file in a folder that is"
    if _format_of(out) is None:  # PNG bytes under another suffix would mislead every viewer
        return (
            f"-o {out}: the sheet is a PNG, JPEG or WebP file; name it .png, .jpg or .webp "
            "(a name with no suffix is a PNG)"
        )
    if not overwrite and fs.exists(path):
        return f"-o {out}: the file exists; pass --overwrite to replace it"
    return None


def _splits(output: str, loose: bool) -> tuple[dict[str, Any], bool] | None:
    """The dataset's splits, each with what its manifest says of it, and whether they are its
    manifest's (else, without one, those its shards' names give); None when neither can be
    read (reading the dataset says why)."""
    try:
        return read_manifest(output).get("splits", {}), True
    except FileNotFoundError:
        pass
    except (OSError, ValueError):  # a damaged manifest
        return None
    try:
        shards = list_shards(output, loose=loose)
    except (OSError, ValueError):  # no shards either, or a build that did not finish
        return None
    names = (parse_shard_name(posixpath.basename(shard.url)) for shard in shards)
    splits = dict.fromkeys(name.split for name in names if name is not None and name.split)
    return splits, False


def _first_split(output: str, loose: bool) -> str:
    """The manifest's first split that holds records (its first, if none does); without one,
    train, or else the first split its shards' names give."""
    splits, of_manifest = _splits(output, loose) or ({}, True)
    if not of_manifest and "train" in splits:
        return "train"
    held = [
        name
        for name, info in splits.items()
        if not isinstance(info, dict) or info.get("examples", 1) > 0
    ]
    return (held or list(splits) or ["train"])[0]


def _unknown_split(output: str, split: str, loose: bool) -> str | None:
    """Why `--split` names no split of the dataset, as its manifest or its shards' names list
    them; None if it does, or if nothing says (the dataset cannot be read, which reading it
    says)."""
    found = _splits(output, loose)
    if found is None or split in found[0]:
        return None
    splits, of_manifest = found
    where = "it has" if of_manifest else "its shards' names give"
    return f"--split: no split {split!r} in {output}; {where} {', '.join(splits) or 'none'}"


def _usage_refusal(args: argparse.Namespace) -> str | None:
    """Why the arguments cannot name a dataset to read, as other commands refuse a bad value;
    None if they can. Where to write is refused once the dataset is found (`run`): a split or
    a dataset that is not there is the first thing to fix (its fix may well be to preview
    another folder, where the sheet's name is free)."""
    for url in (args.output, args.out):
        problem = protocol_problem(url)
        if problem is not None:
            return f"{url}: {problem}"
    return _unknown_split(args.output, args.split, args.loose) if args.split else None


def _tiles(dataset: Dataset, images: int, seed: int | None) -> list[_Tile]:
    """The sheet's tiles: the split's first `images` records, or as many drawn with `seed`."""
    wanted = None
    if seed is not None:
        total = len(dataset)
        wanted = set(random.Random(seed).sample(range(total), min(images, total)))
    tiles = []
    for item in _records(dataset.shards, wanted):
        if len(tiles) == images:
            break
        if isinstance(item, str):
            tiles.append(_Tile("unreadable", problem=item))
        else:
            tiles.append(_tile(item, dataset.classes))
    return tiles


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Writes the contact sheet; returns 1 if the dataset or some of its records are unreadable."""
    del extra  # the dispatcher refuses unknown flags for this command
    refusal = _usage_refusal(args)
    if refusal is not None:  # before any work, so that nothing is read or written
        print_error("preview", refusal)
        return 2
    try:
        split = args.split or _first_split(args.output, args.loose)
        # Its manifest and shards found, no record read.
        dataset = Dataset(args.output, split, loose=args.loose)
    except (OSError, ValueError) as error:  # no dataset, no such split...
        print_error("preview", str(error))
        return 1
    refusal = _refusal(args.out, args.overwrite)
    if refusal is not None:  # before a record is read, so that nothing is written
        print_error("preview", refusal)
        return 2
    try:
        tiles = _tiles(dataset, args.images, args.seed)
    except (OSError, ValueError) as error:  # framing damage, a shard gone...
        print_error("preview", str(error))
        return 1
    if not tiles:
        print_error("preview", f"split {split!r} of {args.output} has no records")
        return 1
    sheet = _contact_sheet(tiles, args.columns, args.size)
    buffer = io.BytesIO()
    image_format = _format_of(args.out)
    if image_format == "PNG":
        sheet.save(buffer, "PNG", optimize=True)
    else:
        sheet.convert("RGB").save(buffer, image_format)
    if args.out == _STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(buffer.getvalue())
        sys.stdout.flush()
    else:
        try:
            # No folder made on the way: `_refusal` found it there, and a store has none.
            with fsspec.open(args.out, "wb", auto_mkdir=False) as f:
                f.write(buffer.getvalue())
        except OSError as error:  # no permission, the folder gone since: the user's to fix
            print_error("preview", f"-o {args.out}: cannot write: {error}")
            return 2
    columns = min(args.columns, len(tiles))
    rows = math.ceil(len(tiles) / columns)
    grid = f"{rows} {'row' if rows == 1 else 'rows'} of {columns}"
    print(  # beside the sheet on standard output, said where it cannot mix with the image
        f"wrote {'the sheet to standard output' if args.out == _STDOUT else args.out}: "
        f"{count(len(tiles), 'image')} of split {split!r} "
        f"({grid}, {sheet.width}x{sheet.height} pixels)",
        file=sys.stderr if args.out == _STDOUT else sys.stdout,
    )
    problems = sum(tile.image is None or tile.warn for tile in tiles)
    if problems:
        as_stated = "it states (its tile says" if problems == 1 else "they state (their tiles say"
        print_error(
            "preview",
            f"{problems} of {count(len(tiles), 'record')} could not be shown as {as_stated} why)",
        )
        return 1
    return 0
