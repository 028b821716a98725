"""Command-line helpers the commands share: argument types and path expansion with errors."""

from __future__ import annotations

import argparse
import posixpath
import sys

import fsspec

from beam_tfrecord.codec.compression import COMPRESSION_TYPES
from beam_tfrecord.verification import expand_paths

__all__ = [
    "add_compression_argument",
    "add_loose_argument",
    "builds_own",
    "expand_or_complain",
    "non_negative_int",
    "print_error",
]


def non_negative_int(text: str) -> int:
    """An argparse type for counts such as `-n`: 0 or more."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
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


def add_loose_argument(parser: argparse.ArgumentParser) -> None:
    """`--loose`, as the commands that read a build folder (spec, preview) take it."""
    parser.add_argument(
        "--loose",
        action="store_true",
        help="read a build folder without manifest.json (a build that failed, was stopped or "
        "is still running) by its shards' names; without it such a folder is refused",
    )


def print_error(command: str, message: str) -> None:
    """One error line on stderr, named as argparse names a usage error, so that a line read
    among others (a script's log, a CI job's) says which command it came from."""
    print(f"beam-tfrecord {command}: error: {message}", file=sys.stderr)


def expand_or_complain(
    patterns: list[str],
    command: str,
    *,
    others: list[str] | None = None,
    own: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """`expand_paths`, printing an error for each pattern that names nothing."""
    files, unmatched = expand_paths(patterns, others=others, own=own)
    for pattern in unmatched:
        print_error(command, f"{pattern}: {_why_nothing(pattern)}")
    return files, unmatched


def builds_own(own: list[str]) -> str:
    """A build's own files that a command skipped (`expand_paths`' `own`), counted and the
    first few named: what a user who typed `out/*` gave it besides the shards."""
    if len(own) == 1:
        return f"the build's own {posixpath.basename(own[0])}, not a TFRecord file"
    names = ", ".join(posixpath.basename(url) for url in own[:4])
    more = f" and {len(own) - 4} more" if len(own) > 4 else ""
    return f"{len(own)} of the build's own files, not TFRecord files ({names}{more})"


def _why_nothing(pattern: str) -> str:
    """Why a path given names no file to read: it is not there, or is a folder without any."""
    try:
        fs, path = fsspec.core.url_to_fs(pattern)
        folder = fs.isdir(path)
    except (OSError, ValueError, ImportError):
        folder = False
    if folder:
        return "a folder with no TFRecord files below it (hidden files and sidecars are skipped)"
    return "no such file or directory"
