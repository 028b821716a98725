"""Finding source images: fsspec glob patterns, their base folders, and the files they match."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

__all__ = [
    "SourceFile",
    "expand_pattern",
    "has_magic",
    "is_hidden",
    "pattern_base",
    "to_url",
]

_MAGIC = frozenset("*?[")


@dataclass(frozen=True, order=True)
class SourceFile:
    """One matched input file.

    Attributes:
        url: where to read it (a plain path for local files, `proto://...` otherwise).
        relpath: its path relative to its pattern's base folder; labels and splits are derived from it,
            so moving a whole collection to another bucket changes nothing in the dataset.
        size: its size in bytes at listing time.
    """

    url: str
    relpath: str
    size: int


def has_magic(pattern: str) -> bool:
    return any(c in _MAGIC for c in pattern)


def pattern_base(pattern: str) -> str:
    """The folder part of a pattern before its first wildcard: `data/**/*.jpg` -> `data`."""
    for i, char in enumerate(pattern):
        if char in _MAGIC:
            return pattern[:i].rsplit("/", 1)[0] if "/" in pattern[:i] else ""
    return pattern.rstrip("/")


def is_hidden(relpath: str) -> bool:
    """Whether any component of a relative path is hidden (`.git/`, `.DS_Store`, `._x.jpg`)."""
    return any(part.startswith(".") for part in relpath.split("/") if part)


def to_url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path as returned by `fs` back into a URL that `fsspec.open` understands anywhere."""
    if _is_local(fs):
        return path
    return fs.unstrip_protocol(path)


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def expand_pattern(
    pattern: str, extensions: Iterable[str], **storage_options: Any
) -> Iterator[SourceFile]:
    """Yields every non-hidden file that `pattern` matches and whose suffix is in `extensions`, sorted.

    A pattern without wildcards that names a folder means every file below that folder.

    Raises:
        FileNotFoundError: a pattern without wildcards names nothing that exists.
    """
    fs, path = fsspec.core.url_to_fs(pattern, **storage_options)
    suffixes = tuple(e.lower() for e in extensions)
    if not has_magic(path):
        if fs.isdir(path):
            base = path.rstrip("/")
            matches = fs.find(base, detail=True)
        elif fs.isfile(path):
            base = posixpath.dirname(path)
            matches = {path: fs.info(path)}
        else:
            raise FileNotFoundError(f"input {pattern!r} does not exist")
    else:
        base = pattern_base(path)
        matches = fs.glob(path, detail=True)
    prefix = base.rstrip("/") + "/" if base else ""
    for name in sorted(matches):
        info = matches[name]
        if info.get("type") != "file":
            continue
        relpath = name[len(prefix) :] if prefix and name.startswith(prefix) else name.lstrip("/")
        if is_hidden(relpath) or not relpath.lower().endswith(suffixes):
            continue
        yield SourceFile(url=to_url(fs, name), relpath=relpath, size=int(info.get("size") or 0))
