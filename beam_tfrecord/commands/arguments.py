"""Command-line helpers the commands share: argument types and path expansion with errors."""

from __future__ import annotations

import argparse
import sys

from beam_tfrecord.codec.compression import COMPRESSION_TYPES
from beam_tfrecord.verification import expand_paths

__all__ = ["add_compression_argument", "expand_or_complain", "non_negative_int"]


def non_negative_int(text: str) -> int:
    """An argparse type for counts such as `-n`: 0 or more."""
    number = int(text)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def add_compression_argument(parser: argparse.ArgumentParser) -> None:
    """`--compression`, as the commands that read TFRecord files (inspect, verify) take it."""
    parser.add_argument(
        "--compression",
        default="auto",
        type=lambda value: value if value == "auto" else value.upper(),
        choices=COMPRESSION_TYPES,
        help="compression of the files; auto tells it from suffix then content "
        "(default: %(default)s)",
    )


def expand_or_complain(patterns: list[str]) -> tuple[list[str], list[str]]:
    """`expand_paths`, printing an error for each pattern that names nothing."""
    files, unmatched = expand_paths(patterns)
    for pattern in unmatched:
        print(f"error: {pattern}: no such file or directory", file=sys.stderr)
    return files, unmatched
