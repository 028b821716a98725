"""Finding source images: fsspec glob patterns, their base folders, and the files they match."""

from __future__ import annotations

import csv
import fnmatch
import functools
import hashlib
import os
import posixpath
import re
import struct
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, replace

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import glob_translate

from beam_tfrecord.locations import has_dot_segment, has_protocol, normalized, without_protocol
from beam_tfrecord.storage import to_url
from beam_tfrecord.store_listing import pages

__all__ = [
    "InputListError",
    "ListingTask",
    "SourceFile",
    "expand_pattern",
    "expand_task",
    "first_match",
    "has_magic",
    "input_list_chunks",
    "is_hidden",
    "left_out_counter",
    "matching_folders",
    "one_input",
    "other_image_suffix",
    "parse_input_line",
    "pattern_base",
    "read_input_list_chunk",
    "split_listing",
    "split_task",
    "store_path",
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
    label: str | None = None  # given by an input list; otherwise derived by --labels

    def to_bytes(self) -> bytes:
        """A compact, deterministic encoding (what crosses a shuffle); `from_bytes` reverses it."""
        url = self.url.encode("utf-8", "surrogateescape")
        relpath = self.relpath.encode("utf-8", "surrogateescape")
        label = b"" if self.label is None else self.label.encode("utf-8", "surrogateescape")
        head = _SOURCE_HEAD.pack(
            self.size, len(url), len(relpath), _NONE if self.label is None else len(label)
        )
        return head + url + relpath + label

    def encoded_size(self) -> int:
        """About `len(self.to_bytes())`, without encoding: exact when the texts are ASCII."""
        return _SOURCE_HEAD.size + len(self.url) + len(self.relpath) + len(self.label or "")

    @classmethod
    def listed(cls, url: str, relpath: str, size: int, label: str | None = None) -> SourceFile:
        """The file with these fields, built without the frozen dataclass's __init__ (a checked
        setattr per field): a listing makes one for every file, and every shuffle again."""
        source = object.__new__(cls)
        source.__dict__.update(url=url, relpath=relpath, size=size, label=label)
        return source

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceFile:
        size, n_url, n_rel, n_label = _SOURCE_HEAD.unpack_from(data)
        at = _SOURCE_HEAD.size
        url = data[at : at + n_url].decode("utf-8", "surrogateescape")
        at += n_url
        relpath = data[at : at + n_rel].decode("utf-8", "surrogateescape")
        at += n_rel
        label = None if n_label == _NONE else data[at:].decode("utf-8", "surrogateescape")
        return cls.listed(url, relpath, size, label)


# size (-1: unknown), then the lengths of url, relpath and label (_NONE: no label).
_SOURCE_HEAD = struct.Struct("<qIII")
_NONE = 0xFFFFFFFF


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
    # A part starts with a dot where the path does, or where a dot follows a slash.
    return relpath.startswith(".") or "/." in relpath


@dataclass(frozen=True)
class ListingTask:
    """A piece of a pattern's listing that one worker can do alone.

    Attributes:
        pattern: a glob URL, covering a part of the original pattern's matches.
        base: the original pattern's base folder (URL), that relative paths are taken from.
    """

    pattern: str
    base: str

    @classmethod
    def for_pattern(cls, pattern: str) -> ListingTask:
        fs, path = fsspec.core.url_to_fs(pattern)
        path = _without_dot_dots(path) if isinstance(fs, LocalFileSystem) else store_path(fs, path)
        if has_magic(path):
            base = pattern_base(path)
        elif fs.isdir(path):
            # A folder means every file below it.
            base, path = path.rstrip("/"), path.rstrip("/") + "/**"
        else:
            base = posixpath.dirname(path)
        return cls(to_url(fs, path), to_url(fs, base))


def split_task(task: ListingTask) -> list[ListingTask]:
    """Splits a listing by the folders at its first wildcard, so that workers list in parallel.

    `data/**/*.jpg` becomes `data/*.jpg` plus `data/<d>/**/*.jpg` for every folder `d`;
    `data/*/x/*.png` becomes `data/<d>/x/*.png` for every folder `d`. The parts match exactly
    what the whole matches (less hidden folders, which a build never reads). A task that cannot
    be split is returned as it is.
    """
    return list(_split(task, None))  # type: ignore[arg-type]  # only tasks without suffixes


def split_listing(
    task: ListingTask,
    extensions: Iterable[str],
    left_out: Callable[[str], None] | None = None,
) -> Iterator[ListingTask | SourceFile]:
    """`split_task`'s parts, less the one its own listing already answered, and that one's files.

    To split `data/**` the folder `data` is listed for its subfolders. On an object store that
    listing (by delimiter) also holds the files right in `data`: the part `data/*` would list
    `data` a second time to find them. A split two levels deep then listed every class folder of
    a collection twice, in full: once for its subfolders, once for its images. Here such a part
    (one whose wildcards are all in its last name, in the listed folder) comes as its files, as
    `expand_task` would give them, and not as a task. The listing is read a page at a time
    (`store_listing.pages`), and its parts and files given as they come, so a folder of millions
    of objects is never held whole. On a local disk, where a listing costs no round trip, every
    part stays a task.
    """
    return _split(task, tuple(e.lower() for e in extensions), left_out)


def _split(
    task: ListingTask,
    suffixes: tuple[str, ...] | None,
    left_out: Callable[[str], None] | None = None,
) -> Iterator[ListingTask | SourceFile]:
    fs, path = fsspec.core.url_to_fs(task.pattern)
    if not has_magic(path):
        yield task
        return
    prefix = pattern_base(path)
    rest = path[len(prefix) + 1 :] if prefix else path
    first, _, tail = rest.partition("/")
    if not tail and first != "**":
        # The wildcard is in the last component: one folder listing, nothing to split.
        yield task
        return
    join = posixpath.join
    here = None
    if first == "**":
        # `**` matches no folder (the rest applies right here) or one folder and then `**` again.
        here = join(prefix, tail) if tail else join(prefix, "*")

    part = functools.partial(_part, fs, task, recursive=here is not None, first=first, tail=tail)
    folder = prefix or "/"
    if isinstance(fs, LocalFileSystem):
        try:
            folders = _subfolders(fs, folder)
        except FileNotFoundError:
            return
        if here is not None:
            yield ListingTask(to_url(fs, here), task.base)
        yield from filter(None, map(part, folders))
        return
    level = _last_level(here) if here is not None else None
    answered = suffixes is not None and level is not None and level[0] == prefix
    match = re.compile(glob_translate(here)).match if answered else None
    named = _relpaths(task.base) if answered else ""
    try:
        for page in pages(fs, folder):
            for entry in page:
                if entry["type"] == "directory":
                    if _is_subfolder(entry["name"], folder):
                        found = part(entry["name"].rstrip("/"))
                        if found is not None:
                            yield found
                elif match is not None and match(entry["name"]):
                    source = _source_file(fs, entry["name"], entry["size"], named, suffixes or ())
                    if source is not None:
                        yield source
                    elif left_out is not None:
                        left_out(_relpath(entry["name"], named))
    except FileNotFoundError:
        return
    if here is not None and not answered:
        yield ListingTask(to_url(fs, here), task.base)


def _part(
    fs: fsspec.AbstractFileSystem,
    task: ListingTask,
    folder: str,
    *,
    recursive: bool,
    first: str,
    tail: str,
) -> ListingTask | None:
    """The task listing what `task`'s pattern matches below one of its base's subfolders: all
    of its `**`, or the `tail` after its first part `first`; None if `first` does not match it."""
    if recursive:
        glob = posixpath.join(_as_pattern(folder), "**", *([tail] if tail else []))
    elif fnmatch.fnmatchcase(posixpath.basename(folder), first):
        glob = posixpath.join(_as_pattern(folder), tail)
    else:
        return None
    return ListingTask(to_url(fs, glob), task.base)


_GLOB_CHAR = re.compile(r"([*?[])")


def _as_pattern(folder: str) -> str:
    """A folder found by listing, as a glob that matches that folder alone.

    The wildcard characters of its name are bracketed (`f[1]` as `f[[]1]`, `what?` as
    `what[?]`): written as they are, `f[1]` would match the folder `f1` and never itself, and
    `what?` the folder `whats` too, so a part would lose the folder's images or list another
    part's twice. (Only its name: the folders above it come from the pattern, before its first
    wildcard.)
    """
    head, name = posixpath.split(folder)
    return posixpath.join(head, _GLOB_CHAR.sub(r"[\1]", name))


def _subfolders(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    """The folders in `path`, less hidden ones, sorted; on a local disk, links to folders too,
    but not one that leads back to `path` or a folder above it (see `_local_files`).

    On a local disk by `os.scandir`, which tells a folder without the stat fsspec's listing
    runs on every entry: the folders of a folder of images are few, its files many.

    Raises:
        FileNotFoundError: `path` does not exist.
    """
    if isinstance(fs, LocalFileSystem) and _plain_local(path):
        try:
            with os.scandir(path) as entries:
                found = [e for e in entries if not e.name.startswith(".") and _is_folder(e)]
        except NotADirectoryError:  # a file: fsspec lists it as itself, no folder
            return []
        above = _folders_above(path) if any(e.is_symlink() for e in found) else frozenset()
        return sorted(
            e.path for e in found if not e.is_symlink() or os.path.realpath(e.path) not in above
        )
    return sorted(
        entry["name"].rstrip("/")
        for page in pages(fs, path)
        for entry in page
        if entry["type"] == "directory" and _is_subfolder(entry["name"], path)
    )


def _is_subfolder(name: str, path: str) -> bool:
    """Whether a folder of `path`'s listing is one to go into: not hidden, not `path` itself.

    gcsfs lists a folder as a folder of itself when the store holds an object named for it
    (`data/cls/`, as the GCS console's "Create folder" makes): split again, it would list the
    folder's images twice.
    """
    name = name.rstrip("/")
    return not posixpath.basename(name).startswith(".") and name != path.rstrip("/")


def _without_dot_dots(path: str) -> str:
    """A local path or pattern with `.` and `..` taken out of its folders before any wildcard,
    as `os.path.abspath` takes them out: `data/../data` and `data` list the same files under the
    same names, so a file named both ways is one input. (Past a wildcard, `..` is left to the
    glob.)"""
    fixed = pattern_base(path) if has_magic(path) else path
    return posixpath.normpath(fixed) + path[len(fixed) :] if fixed else path


def store_path(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A store's path or pattern as its listing reads it: with `.` and `..` taken out of its
    folders before any wildcard, as a local one's are, for a store has no `lists/..` folder.
    Only a path that has them: a store's key may hold `//`, which normpath would fold. A local
    path is left to the system."""
    fixed = pattern_base(path) if has_magic(path) else path  # its folders before a wildcard
    if isinstance(fs, LocalFileSystem) or not has_dot_segment(fixed):
        return path
    return _without_dot_dots(path)


def _plain_local(path: str) -> bool:
    """Whether a local path is one that fsspec writes the names below as `os.scandir` does."""
    return os.sep == "/" and path.startswith("/") and posixpath.normpath(path) == path


def expand_task(
    task: ListingTask,
    extensions: Iterable[str],
    left_out: Callable[[str], None] | None = None,
) -> Iterator[SourceFile]:
    """Yields every non-hidden file of a listing task whose suffix is in `extensions`, sorted;
    `left_out` gets the relative path of each other file."""
    fs, path = fsspec.core.url_to_fs(task.pattern)
    suffixes = tuple(e.lower() for e in extensions)
    if not has_magic(path):
        try:
            info = fs.info(path)
        except FileNotFoundError:
            return
        files = [(path, int(info.get("size") or 0))] if info.get("type") == "file" else []
    elif isinstance(fs, LocalFileSystem):
        found = _local_glob_files(path)
        files = sorted((found if found is not None else _fsspec_glob_files(fs, path)).items())
    else:
        files = _store_files(fs, path)  # in the store's order: by name
    named = _relpaths(task.base)
    for name, size in files:
        source = _source_file(fs, name, size, named, suffixes)
        if source is not None:
            yield source
        elif left_out is not None:
            left_out(_relpath(name, named))


def _relpaths(base_url: str) -> str:
    """What is taken off the front of a listed path to make its relative path: `base_url`'s path
    and a slash."""
    _, base = fsspec.core.url_to_fs(base_url)
    return base.rstrip("/") + "/" if base.strip("/") else base


def _source_file(
    fs: fsspec.AbstractFileSystem, name: str, size: int, prefix: str, suffixes: tuple[str, ...]
) -> SourceFile | None:
    """A listed file as a build's input, named from below `prefix` (`_relpaths`); None for a
    hidden file or one whose suffix is not in `suffixes`."""
    relpath = _relpath(name, prefix)
    if is_hidden(relpath) or not relpath.lower().endswith(suffixes):
        return None
    return SourceFile.listed(to_url(fs, name), relpath, size)


def _relpath(name: str, prefix: str) -> str:
    """A listed path's relative path, below `prefix` (`_relpaths`)."""
    return name[len(prefix) :] if prefix and name.startswith(prefix) else name.lstrip("/")


def other_image_suffix(relpath: str, extensions: Iterable[str]) -> str | None:
    """The suffix of a file left out of a listing that an image of another kind has (`.png`
    under `--extensions jpg`), for the summary to count; None for a hidden or non-image file."""
    from beam_tfrecord.config import DEFAULT_EXTENSIONS

    suffix = posixpath.splitext(relpath)[1].lower()
    if is_hidden(relpath) or suffix not in DEFAULT_EXTENSIONS or suffix in extensions:
        return None
    return suffix


def left_out_counter(
    extensions: Iterable[str], counts: MutableMapping[str, int]
) -> Callable[[str], None]:
    """What a listing calls with each file it leaves out (`expand_task`'s `left_out`): counts
    the images of other kinds, by suffix (`other_image_suffix`), in `counts`."""

    def left_out(relpath: str) -> None:
        suffix = other_image_suffix(relpath, extensions)
        if suffix is not None:
            counts[suffix] = counts.get(suffix, 0) + 1

    return left_out


def _fsspec_glob_files(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, int]:
    return {
        name: int(info.get("size") or 0)
        for name, info in fs.glob(path, detail=True).items()
        if info.get("type") == "file"
    }


def _store_files(fs: fsspec.AbstractFileSystem, path: str) -> Iterator[tuple[str, int]]:
    """The files (path, size) that a glob over an object store matches, as fsspec's glob
    matches them, a page of the listing at a time.

    A pattern whose wildcards are all in its last name (`data/*.jpg`, the files right in a
    folder) takes a listing of that folder by delimiter; any other, a listing of everything
    below its fixed part (as gcsfs's and s3fs's own glob does, less holding it all).
    """
    level = _last_level(path)
    folder, recursive = (level[0], False) if level is not None and level[0] else (None, True)
    match = re.compile(glob_translate(path)).match
    try:
        for page in pages(fs, folder or pattern_base(path), recursive=recursive):
            for entry in page:
                if entry["type"] == "file" and match(entry["name"]):
                    yield entry["name"], entry["size"]
    except FileNotFoundError:
        return


def _last_level(path: str) -> tuple[str, str] | None:
    """(folder, name pattern) of a pattern whose wildcards are all in its last name, not `**`
    (`data/cat*`: `data`, `cat*`): what one listing of the folder answers. None otherwise."""
    folder, _, last = path.rpartition("/")
    if not has_magic(last) or "**" in last or has_magic(folder):
        return None
    return folder, last


def _local_glob_files(path: str) -> dict[str, int] | None:
    """`_glob_files` on a local disk, by `os.scandir`: what fsspec's glob matches, in a third of
    the time (its listing builds a dict of ten stat fields for every entry, about 12 us a file),
    and what it leaves out: links.

    The same walk as fsspec's (`LocalFileSystem.glob`: from the folder before the first wildcard,
    as deep as the pattern reaches, a folder that cannot be listed left out) and the same match
    (its pattern's regex), but links are followed, as Python's glob and TensorFlow's follow them:
    a collection assembled from links to folders or files is common, and a file it holds may not
    vanish from a build unreported (fsspec's glob takes a link for neither a file nor a folder).
    None for a path whose listing names fsspec would write otherwise (not an absolute path, say).
    """
    magic = min(i for i in (path.find("*"), path.find("?"), path.find("["), len(path)) if i >= 0)
    cut = path.rfind("/", 0, magic)
    top = path[:cut]
    if not _plain_local(top):
        return None
    depth = None if "**" in path else path[cut + 1 :].count("/") + 1
    match = re.compile(glob_translate(path)).match
    return {name: size for name, size in _local_files(top, depth) if match(name)}


def _local_files(
    top: str, depth: int | None, real: str | None = None, above: frozenset[str] | None = None
) -> Iterator[tuple[str, int]]:
    """(path, size) of the files in `top` and the folders below it, `depth` levels at most.

    Links are followed, to files and to folders, under the link's own name. A link to nothing
    is a file of size -1, so that the build reports it (it is gone when planned) rather than
    losing it; a named pipe, socket or device is a file too, which the build reports when it
    refuses to read it. A link to a folder the walk is already in (`top`, a folder above it,
    or one it came through) is not followed: it holds nothing new, and following it would
    never end.
    `real` is the real path of `top` and `above` the real paths of the folders it is in (both
    found here for the first call).
    """
    if real is None or above is None:
        real = os.path.realpath(top)
        above = _folders_above(top)
    folders, files = [], []
    try:
        with os.scandir(top) as entries:
            for entry in entries:
                try:
                    if entry.is_dir():
                        if not entry.is_symlink():
                            folders.append((entry.path, posixpath.join(real, entry.name)))
                        elif (target := os.path.realpath(entry.path)) not in above:
                            folders.append((entry.path, target))
                    elif entry.is_file():
                        files.append((entry.path, entry.stat().st_size))
                    elif entry.is_symlink() and not os.path.exists(entry.path):
                        files.append((entry.path, -1))
                    else:
                        # A named pipe, socket or device: listed, so that the build reports it
                        # (it is never read; `read_source` refuses it) rather than losing it.
                        files.append((entry.path, entry.stat().st_size))
                except FileNotFoundError:  # gone since the folder was read
                    continue
                except OSError:
                    # A link that cannot be followed (a loop of links: ELOOP): listed unsized,
                    # as a link to nothing is, so that the build reports it, not fails on it.
                    files.append((entry.path, -1))
    except OSError:  # not a folder, gone, or not ours to read: left out whole, as fsspec does
        return
    yield from files
    if depth is None or depth > 1:
        for folder, folder_real in folders:
            yield from _local_files(
                folder, None if depth is None else depth - 1, folder_real, above | {folder_real}
            )


def _is_folder(entry: os.DirEntry) -> bool:
    """Whether the entry is a folder, or a link to one; not a link that cannot be followed (a
    loop of links), which `_local_files` lists for the build to report."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _folders_above(path: str) -> frozenset[str]:
    """The real paths of `path`, of every folder above it, and of every folder its name goes
    through (`a/link/b`: the real `a`, whatever `link` leads to, and `b` there). A part of a
    split listing starts inside a link as the whole listing came to it, so both stop at the
    same links."""
    real = os.path.realpath(path)
    found = {real}
    while real != (parent := posixpath.dirname(real)):
        found.add(parent)
        real = parent
    through = path
    while through != (parent := posixpath.dirname(through)):
        found.add(os.path.realpath(parent))
        through = parent
    return frozenset(found)


def local_bytes_reach(
    patterns: Iterable[str],
    extensions: Iterable[str],
    threshold: int,
    most_files: int = 20_000,
    *,
    min_files: int | None = None,
) -> bool:
    """Whether the local folders the patterns start from hold `threshold` bytes of files with these
    suffixes (or, given `min_files`, that many files): a hint, found before the build lists, by a
    walk that stops once it has counted `threshold` bytes or `most_files` files. It may count a
    file the pattern would not take."""
    suffixes = tuple(e.lower() for e in extensions)
    if min_files is not None:
        most_files = max(most_files, min_files)  # a walk that gives up first never finds them
    total = files = 0
    for pattern in patterns:
        _, path = fsspec.core.url_to_fs(pattern)
        if has_magic(path):
            found = _local_files(pattern_base(path) or ".", None)
        elif os.path.isfile(path):
            found = iter([(path, os.path.getsize(path))])
        else:
            found = _local_files(path, None)
        for name, size in found:
            if size < 0 or not name.lower().endswith(suffixes):
                continue
            total += size
            files += 1
            if total >= threshold or (min_files is not None and files >= min_files):
                return True
            if files >= most_files:
                return False
    return False


def expand_pattern(pattern: str, extensions: Iterable[str]) -> Iterator[SourceFile]:
    """Yields every non-hidden file that `pattern` matches with a suffix in `extensions`, sorted.

    A pattern without wildcards that names a folder means every file below that folder. This
    lists on the calling machine; a pipeline lists with `split_task` and `expand_task` instead.

    Raises:
        FileNotFoundError: a pattern without wildcards names nothing that exists.
    """
    fs, path = fsspec.core.url_to_fs(pattern)
    if not has_magic(path) and not fs.exists(store_path(fs, path)):
        raise FileNotFoundError(f"input {pattern!r} does not exist")
    yield from expand_task(ListingTask.for_pattern(pattern), extensions)


def first_match(pattern: str, extensions: Iterable[str], depth: int = 4) -> SourceFile | None:
    """Some file the pattern matches, found without listing everything it matches.

    Descends folder by folder (as `split_listing` splits) and lists only the first non-empty
    branch, so checking a pattern over millions of objects costs a few listings.
    """
    fs, path = fsspec.core.url_to_fs(pattern)
    if not has_magic(path) and not fs.exists(store_path(fs, path)):
        return None
    extensions = tuple(extensions)

    def search(task: ListingTask, level: int) -> SourceFile | None:
        parts: list[ListingTask] = []
        for item in split_listing(task, extensions) if level < depth else [task]:
            if isinstance(item, SourceFile):
                return item  # right in the folder the split lists: no need to list on
            parts.append(item)
        if parts == [task]:
            return next(expand_task(task, extensions), None)
        for part in parts:
            found = search(part, level + 1)
            if found is not None:
                return found
        return None

    return search(ListingTask.for_pattern(pattern), 0)


def matching_folders(pattern: str) -> list[str]:
    """The folders (not hidden) that a pattern whose wildcards are all in its last name matches
    (`data/cat*`: `data/cat`, `data/catnip`), sorted, by one listing of the folder above them;
    none for any other pattern. For a refusal: such a pattern takes the files it matches, and
    no file below the folders it matches."""
    fs, path = fsspec.core.url_to_fs(pattern)
    level = _last_level(store_path(fs, path).rstrip("/"))
    if level is None:
        return []
    folder, last = level
    try:
        found = _subfolders(fs, folder or "/")
    except FileNotFoundError:
        return []
    return [to_url(fs, f) for f in found if fnmatch.fnmatchcase(posixpath.basename(f), last)]


def parse_input_line(line: str, list_url: str) -> SourceFile | None:
    """One line of an input list (`path` or `path,label`, CSV) as a source file; None for no entry.

    Relative paths are taken from the list file's folder, and are the images' relative paths;
    an absolute path or URL is its own relative path (less the protocol). The size is left
    unknown (-1) for the checking step to find, so reading a list never touches the images.

    Raises:
        ValueError: a line with more than two fields, or an empty path.
    """
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    fields = next(csv.reader([text]))
    if fields and fields[0].strip().lower() == "path" and fields[1:2] in ([], ["label"]):
        return None  # a header row
    if len(fields) > 2 or not fields or not fields[0].strip():
        raise ValueError(
            f"expected `path` or `path,label` (a path with a comma is quoted: "
            f'"my,photo.jpg",cat), got {line.rstrip()!r}'
        )
    path = fields[0].strip()
    label = fields[1].strip() if len(fields) == 2 and fields[1].strip() else None
    if has_protocol(path):
        url, relpath = path, without_protocol(path).lstrip("/")
    elif path.startswith("/"):
        # The file's own name, as a relative line beside it gives it: one file is one input.
        url = posixpath.normpath(path)
        relpath = url.lstrip("/")
    else:
        relpath = posixpath.normpath(path)
        url = normalized(posixpath.join(posixpath.dirname(list_url), relpath))
    return SourceFile(url=url, relpath=relpath, size=-1, label=label)


def url_key(url: str) -> int:
    """A 64-bit hash of a file's URL, the same in every process and on every runner (Python's
    `hash` of a string is not): the range it falls in is where the listings of one file meet."""
    digest = hashlib.blake2b(url.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def one_input(sources: Iterable[SourceFile]) -> tuple[SourceFile, tuple[str, ...]]:
    """The one input that a file listed several times is (by overlapping patterns, or on several
    lines of an input list), and the labels those lines disagree on.

    Returns:
        The listing under the smallest relative path, with the label its lines give (a line
        without a label gives none, and defers to the others); and the distinct labels, sorted,
        when they are more than one (empty otherwise): which one is meant is not ours to guess.
    """
    sources = list(sources)
    kept = min(sources, key=lambda s: (s.relpath, s.url))
    labels = sorted({s.label for s in sources if s.label is not None})
    if len(labels) > 1:
        return kept, tuple(labels)
    return (replace(kept, label=labels[0]) if labels else kept), ()


def input_list_chunks(list_url: str, chunk_bytes: int = 64 << 20) -> list[tuple[str, int, int]]:
    """Byte ranges of an input list for workers to read in parallel: (url, start, end).

    Raises:
        FileNotFoundError: the list does not exist.
    """
    fs, path = fsspec.core.url_to_fs(list_url)
    size = fs.size(path)
    if not has_protocol(list_url):
        # The list's relative lines then name their files as its absolute lines do, wherever
        # the chunks are read.
        list_url = path
    return [
        (list_url, start, min(start + chunk_bytes, size)) for start in range(0, size, chunk_bytes)
    ]


class InputListError(ValueError):
    """A line of an input list that is not `path` or `path,label` in UTF-8 text; the message
    names the list and the line (by its number in a list read from its start, else by the byte
    it starts at)."""


# What a spreadsheet's "CSV UTF-8" puts at the front of the file: not part of the first path.
_BOM = b"\xef\xbb\xbf"


def read_input_list_chunk(chunk: tuple[str, int, int]) -> Iterator[SourceFile]:
    """The entries of the lines that start inside one byte range of an input list.

    A line belongs to the range its first byte is in, so ranges split anywhere read every line
    exactly once.

    Raises:
        InputListError: a line that is not UTF-8, or not `path` or `path,label`.
    """
    list_url, start, end = chunk
    fs, path = fsspec.core.url_to_fs(list_url)
    with fs.open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                f.readline()  # the line in progress belongs to the previous range
        number = 0
        while (at := f.tell()) < end:
            raw = f.readline()
            if not raw:
                break
            number += 1
            if at == 0 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            where = f"line {number}" if start == 0 else f"the line at byte {at}"
            try:
                entry = parse_input_line(raw.decode("utf-8"), list_url)
            except UnicodeDecodeError as err:
                raise InputListError(
                    f"{list_url}: {where} is not UTF-8 text (byte 0x{raw[err.start]:02x}); "
                    "save the list as UTF-8"
                ) from None
            except ValueError as err:
                raise InputListError(f"{list_url}: {where}: {err}") from None
            if entry is not None:
                yield entry
