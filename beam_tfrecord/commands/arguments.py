"""Command-line helpers the commands share: argument types and path expansion with errors."""

from __future__ import annotations

import argparse
import posixpath
import sys

import fsspec

from beam_tfrecord.codec.compression import COMPRESSION_TYPES
from beam_tfrecord.codec.reader import begins_as_tfrecord
from beam_tfrecord.locations import protocol_problem
from beam_tfrecord.manifest import MANIFEST_FILE
from beam_tfrecord.settings import DEFAULT_EXTENSIONS
from beam_tfrecord.verification import expand_paths
from beam_tfrecord.wording import count

__all__ = [
    "add_compression_argument",
    "add_loose_argument",
    "builds_own",
    "expand_or_complain",
    "given_path",
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


def given_path(text: str) -> str:
    """An argparse type for a path or URL to read: refused when empty (`spec ""`, a script's
    unset variable), which fsspec would take for the working directory."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file or folder")
    return text


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
    compression: str = "auto",
) -> tuple[list[str], list[str]]:
    """`expand_paths`, printing an error for each pattern that names nothing: no file, or a
    folder of files none of which is a TFRecord file (a folder of images, given for a build's),
    whose files would each be called damaged."""
    files: list[str] = []
    unmatched: list[str] = []
    for pattern in patterns:
        found, missed = expand_paths([pattern], others=others, own=own)
        why = _not_records(pattern, found, compression) if found else None
        if why is not None:
            print_error(command, f"{pattern}: {why}")
            unmatched.append(pattern)
            continue
        files.extend(found)
        for missing in missed:
            print_error(command, f"{missing}: {_why_nothing(missing)}")
        unmatched.extend(missed)
    # A file named twice (`verify a.tfrecord a.tfrecord`, a folder and a glob in it) is one.
    return list(dict.fromkeys(files)), unmatched


def _not_records(pattern: str, files: list[str], compression: str) -> str | None:
    """Why a folder given holds nothing to read, when none of the files below it begins as a
    TFRecord file; None if one does, or `pattern` is no folder (a file or glob is taken as
    given), or a build's (whose shards, however damaged, are its shards). Asking stops at the
    first TFRecord file, so a folder of shards costs one read."""
    try:
        fs, path = fsspec.core.url_to_fs(pattern)
        if not fs.isdir(path) or fs.exists(posixpath.join(path, MANIFEST_FILE)):
            return None
        if any(begins_as_tfrecord(f, compression) for f in files):
            return None
    except OSError:  # unreadable: verifying the files says so, each by name
        return None
    images = sum(posixpath.splitext(f)[1].lower() in DEFAULT_EXTENSIONS for f in files)
    if images == len(files):
        return (
            f"a folder of images ({count(images, 'file')}), not of TFRecord files; "
            f"`beam-tfrecord build --input {pattern} --output OUT` makes shards of them"
        )
    some = f"; {images} of them images" if images else ""
    return f"a folder with no TFRecord files below it ({count(len(files), 'file')}, none one{some})"


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
    # Not there, and perhaps meant for a store (`s3:/b/x`): then say which URL was meant.
    return protocol_problem(pattern) or "no such file or directory"
