"""Verifying TFRecord files: every record's CRCs, that it is an Example, and what the manifest says.

A shard in a build's output folder is also held to what the build's manifest.json says of it:
its record count, its size, the CRC32C of the whole file and its record index. A shard the
manifest lists but the folder lacks is reported missing, and a file named like a shard that it
does not list is damage: a reader globbing the build's shards would read it too.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from google.protobuf.message import DecodeError

from beam_tfrecord.build_folder import missing_shards, mixed_sets, shard_names
from beam_tfrecord.codec.example import Example
from beam_tfrecord.codec.framing import (
    ChecksummedReader,
    CorruptRecordError,
    file_crc32c,
    framed_size,
)
from beam_tfrecord.codec.reader import TFRecordReader
from beam_tfrecord.codec.record_index import IndexCheck, index_candidates
from beam_tfrecord.locations import has_protocol
from beam_tfrecord.manifest import (
    BUILD_FILES,
    BUILD_FOLDERS,
    MANIFEST_FILE,
    ManifestError,
    parse_manifest,
)
from beam_tfrecord.shard_names import is_shard_name
from beam_tfrecord.storage import sequential_read_options
from beam_tfrecord.wording import count

__all__ = [
    "FileReport",
    "ManifestShards",
    "check_against_manifest",
    "expand_paths",
    "incomplete_builds",
    "verify_file",
]

# Files a directory of shards commonly holds besides shards: a build's manifest.json,
# report.jsonl and labels.txt, TFDS's dataset_info.json and *.index, notes.
_SIDECAR_SUFFIXES = frozenset(
    {".json", ".jsonl", ".txt", ".index", ".yaml", ".yml", ".md", ".csv", ".tsv", ".pbtxt", ".log"}
)
_GLOB_CHARS = frozenset("*?[")
# A raw TFRecord file read as Examples would list every record; beyond this, only count them.
_MAX_ERRORS = 100


@dataclass
class FileReport:
    """What verifying one file found.

    Attributes:
        path: The file's URL or path.
        records: Intact records read (those that are not Examples included).
        bytes: The file's size on its filesystem.
        errors: One message per problem, each naming the file and byte offset (or the
            index file and line); empty when the file is sound.
        index: The record index checked against the file, if one was.
        manifest: Whether the file was held to its build's manifest.
        crc32c: The CRC32C of the file's bytes (8 hex digits), taken as it was read; None when
            framing damage ended the reading.
    """

    path: str
    records: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
    index: str | None = None
    manifest: bool = False
    crc32c: str | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong with the file."""
        return not self.errors


def verify_file(
    url: str,
    compression: str | None = "auto",
    *,
    examples: bool = True,
    index: str | None = "auto",
    **storage_options: Any,
) -> FileReport:
    """Reads a whole TFRecord file, checking every CRC and (by default) every Example.

    Damage does not raise: a record with a bad data CRC is reported and reading goes on;
    framing damage is reported and ends the file. A record index (DALI's `offset length`
    lines) is checked in the same pass: line n must give record n's offset and framed length.

    Args:
        url: A local path or fsspec URL.
        compression: "NONE", "GZIP", "ZLIB" or "auto" (suffix, then content).
        examples: Also check that each record parses as a tf.train.Example.
        index: The file's record index; "auto" checks `index/{name}.index` beside the file, as
            a build writes it, or else `{name}.index`, when there is one; None checks none.
        **storage_options: Passed to fsspec.

    Returns:
        The file's report.

    Raises:
        FileNotFoundError: If there is no such file (other OSErrors of the filesystem too).
    """
    fs, path = url_to_fs(url, **storage_options)
    report = FileReport(path=url, bytes=fs.size(path))
    if index == "auto":
        index = next((c for c in index_candidates(url) if _exists(c, **storage_options)), None)
    problems: list[tuple[int, str]] = []
    with contextlib.ExitStack() as stack:
        # The file's CRC32C is taken in the same pass as its records: the manifest's check
        # needs it, and a second pass would download a shard on an object store twice.
        stream = ChecksummedReader(
            stack.enter_context(fs.open(path, "rb", **sequential_read_options(fs))), url
        )
        reader = TFRecordReader(
            stream,
            compression,
            skip_damaged=True,
            with_offsets=True,
            log_damage=False,  # the report carries every damage
        )
        check = None
        if index is not None:
            check = IndexCheck(
                index, stack.enter_context(fsspec.open(index, "r", **storage_options))
            )
            report.index = index
        numbers = _Numbering()
        not_examples = _read_through(reader, check, examples, url, problems, numbers)
        # Framing damage ends reading: the index lines past it cannot be checked, and the rest
        # of the file may be anything, gigabytes of a file that is no TFRecord file at all.
        read_to_the_end = all(_frame_is_whole(d) for d in reader.damage)
        if check is not None:
            check.finish(complete=read_to_the_end)
        if read_to_the_end:
            # At most a compressed stream's trailer is left. Otherwise the file is read again
            # only if a manifest wants its checksum.
            report.crc32c = stream.crc32c()
    # Numbered from 0 as `inspect` numbers records, the damaged ones counted in their place.
    problems.extend(
        (damage.offset, f"{damage}; it is record {numbers.of[damage.offset]}")
        for damage in reader.damage
    )
    report.records = reader.records_read
    report.errors = [message for _, message in sorted(problems)]
    if check is not None:
        report.errors.extend(check.errors)
    if not_examples > _MAX_ERRORS:
        report.errors.append(
            f"{url}: {not_examples - _MAX_ERRORS} more records are not tf.train.Examples"
        )
    return report


def _read_through(
    reader: TFRecordReader,
    check: IndexCheck | None,
    examples: bool,
    url: str,
    problems: list[tuple[int, str]],
    numbers: _Numbering,
) -> int:
    """Reads every record: each checked against the index (when there is one) and, with
    `examples`, parsed as an Example; the first `_MAX_ERRORS` that are not go to `problems`.
    `numbers` numbers the damaged records. Returns how many records are
    not Examples."""
    parse = Example.FromString
    not_examples = 0
    for offset, record in reader:
        _note_damaged(check, numbers.damaged(reader.damage))
        numbers.records += 1
        if check is not None:
            check.record(offset, framed_size(len(record)))
        if examples:
            try:
                parse(record)
            except DecodeError:
                not_examples += 1
                if not_examples <= _MAX_ERRORS:
                    message = f"{url}: record at byte offset {offset} is not a tf.train.Example"
                    problems.append((offset, message))
    _note_damaged(check, numbers.damaged(reader.damage))
    return not_examples


class _Numbering:
    """Records numbered from 0 in file order as they are read, damaged ones in their place."""

    def __init__(self):
        self.records = 0
        self.of: dict[int, int] = {}  # a damaged record's offset: its number

    def damaged(self, damage: list[CorruptRecordError]) -> list[CorruptRecordError]:
        """Numbers the damaged records the reader noted since last asked; returns them."""
        new = damage[len(self.of) :]
        for error in new:
            self.of[error.offset] = self.records
            self.records += 1
        return new


def check_against_manifest(
    report: FileReport, shard: dict[str, Any], **storage_options: Any
) -> None:
    """Adds to `report` what differs from the manifest's entry for the file: records, bytes,
    CRC32C, and a record index it names that is not there.

    The checksum is the one `verify_file` took as it read the records; a report without one
    costs one more read of the file.
    """
    url = report.path
    report.manifest = True
    index_file = shard.get("index_file")
    if index_file:
        index = posixpath.join(posixpath.dirname(url), index_file)
        if report.index != index and not _exists(index, **storage_options):
            report.errors.append(
                f"{index}: missing: manifest.json names it as this shard's record index "
                "(DALI needs it)"
            )
    if report.records != shard.get("examples"):
        report.errors.append(
            f"{url}: {count(report.records, 'record')}, but manifest.json lists "
            f"{shard.get('examples')}"
        )
    if report.bytes != shard.get("bytes"):
        report.errors.append(
            f"{url}: {report.bytes} bytes, but manifest.json lists {shard.get('bytes')}"
        )
    expected = shard.get("crc32c")
    if expected is None:
        return  # a manifest of an older build, which kept a SHA-256 instead
    checksum = report.crc32c
    if checksum is None:  # a report made without reading the file whole
        fs, path = url_to_fs(url, **storage_options)
        with fs.open(path, "rb", **sequential_read_options(fs)) as f:
            checksum = file_crc32c(f)
    if checksum != expected:
        report.errors.append(
            f"{url}: CRC32C {checksum}, but manifest.json lists {expected}: the bytes differ "
            "from what the build wrote"
        )


class ManifestShards:
    """The shard lists of the build folders files come from, each manifest read once."""

    def __init__(self) -> None:
        self._folders: dict[str, dict[str, dict[str, Any]] | None] = {}
        self._damaged: dict[str, str] = {}

    def damaged(self) -> list[tuple[str, str]]:
        """The manifests read that are not a build's (not JSON, or not the object a build
        writes), each with what is wrong: their folders' files are checked on their own."""
        return sorted(self._damaged.items())

    def shard(self, url: str) -> dict[str, Any] | None:
        """The manifest's entry for the file; None if its folder's manifest lists no such shard,
        or the folder has no manifest."""
        folder, name = posixpath.split(url)
        return (self._listing(folder) or {}).get(name)

    def unlisted(self, url: str) -> bool:
        """Whether the file is named like a shard in a folder whose manifest does not list it."""
        folder, name = posixpath.split(url)
        listing = self._listing(folder)
        return listing is not None and name not in listing and is_shard_name(name, suffix="")

    def missing(self) -> list[str]:
        """Shards a read manifest lists that are not in its folder."""
        gone = []
        for folder, listing in self._folders.items():
            for name in listing or ():
                url = posixpath.join(folder, name)
                if not _exists(url):
                    gone.append(url)
        return sorted(gone)

    def _listing(self, folder: str) -> dict[str, dict[str, Any]] | None:
        if folder not in self._folders:
            listing = None
            url = posixpath.join(folder, MANIFEST_FILE)
            with contextlib.suppress(OSError):  # none there: an unfinished build, or no build
                with fsspec.open(url, "rb") as f:
                    text = f.read()
                try:
                    listing = _shard_listing(text, url)
                except ManifestError as error:  # the files are checked on their own
                    self._damaged[url] = error.reason
            self._folders[folder] = listing
        return self._folders[folder]


def _shard_listing(text: bytes, url: str) -> dict[str, dict[str, Any]]:
    """The shards a manifest.json's text lists, by file name (`parse_manifest`'s ManifestError
    if it is not a build's)."""
    return {shard["file"]: shard for shard in parse_manifest(text, url)["shards"]}


def _frame_is_whole(damage: CorruptRecordError) -> bool:
    # Only a bad data CRC is found past the header (damage_offset is then the payload's first
    # byte): the record's length, and so where the next one starts, is known.
    return damage.damage_offset != damage.offset


def _note_damaged(check: IndexCheck | None, damage: list[CorruptRecordError]) -> None:
    """Gives the index check (if there is one) the damaged records just noted."""
    for error in damage if check is not None else ():
        if _frame_is_whole(error):
            check.damaged(error.offset)


def _exists(url: str, **storage_options: Any) -> bool:
    fs, path = url_to_fs(url, **storage_options)
    return fs.exists(path)


def _is_sidecar(relative: str) -> bool:
    """Whether a file found below a directory is not a shard: hidden, or a known sidecar."""
    if _is_hidden(relative):
        return True
    return posixpath.splitext(relative)[1].lower() in _SIDECAR_SUFFIXES


def _is_hidden(relative: str) -> bool:
    # Leading dots are hidden files (and our temporary shards); leading underscores are
    # Hadoop-style markers such as _SUCCESS.
    return any(part.startswith((".", "_")) for part in relative.split("/"))


def expand_paths(
    patterns: Iterable[str],
    *,
    others: list[str] | None = None,
    own: list[str] | None = None,
    **storage_options: Any,
) -> tuple[list[str], list[str]]:
    """Turns command-line paths into the TFRecord files they name.

    A file is taken as is, whatever its name. A directory stands for every file below it,
    except hidden ones and sidecars such as .json, .txt and .index files. A glob stands for
    what it matches, as in a shell: ``*`` does not match a leading dot (directories among
    the matches are expanded the same way).

    Args:
        patterns: Paths, fsspec URLs, directories or globs.
        others: If given, a directory holding a build's manifest.json stands for the build's
            files only: the shards the manifest lists and any file beside them named like a
            shard. The other files below it (a preview image, notes, a subfolder's files) are
            not the build's, and are appended here instead.
        own: If given, a build's own files that are not TFRecord files (its manifest.json,
            labels, report, TFDS metadata, and its `index` and `reports` folders), when named
            one by one (`verify out/*`, as a shell expands it), are appended here instead of
            being taken as files to read: a directory skips them anyway.
        **storage_options: Passed to fsspec.

    Returns:
        The files in order (each pattern's matches sorted), each once, and the patterns that
        matched nothing (a build's own files, taken into `own`, match something).
    """
    files: list[str] = []
    unmatched: list[str] = []
    builds_seen: dict[str, bool] = {}  # a folder: whether it holds a build's manifest.json
    for pattern in patterns:
        fs, path = url_to_fs(pattern, **storage_options)
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        local = "file" in protocols
        # A relative local path given gives relative paths, as a file named alone prints as
        # typed: fsspec makes every local path absolute.
        relative = local and not has_protocol(pattern) and not os.path.isabs(pattern)

        def url_of(found: str, fs: Any = fs, local: bool = local, relative: bool = relative) -> str:
            # Local paths print as paths; other filesystems keep their protocol.
            if relative:
                return os.path.relpath(found)
            return found if local else fs.unstrip_protocol(found)

        if _GLOB_CHARS & set(path) and not fs.exists(path):
            # A path that is there is taken as it is (a folder named `run[1]`) before it is
            # read as a pattern. fsspec's * matches dot-files, which a shell's does not; hidden files (our
            # temporary shards among them) are only matched by a pattern that asks for them.
            hidden_wanted = posixpath.basename(path).startswith(".")
            candidates = [
                match
                for match in sorted(fs.glob(path))
                if hidden_wanted or not posixpath.basename(match.rstrip("/")).startswith(".")
            ]
        elif fs.exists(path):
            candidates = [path]
        else:
            candidates = []
        found: list[str] = []
        skipped = False
        for candidate in candidates:
            if own is not None and _a_builds_own(fs, candidate, builds_seen):
                own.append(url_of(candidate.rstrip("/")))
                skipped = True
                continue
            if fs.isdir(candidate):
                root = candidate.rstrip("/")
                names = sorted(fs.find(root))
                builds = _BuildFolders(fs, names) if others is not None else None
                for name in names:
                    relative = name[len(root) :].lstrip("/")
                    if builds is not None and not _is_hidden(relative) and builds.holds(name):
                        # In a build folder the build's own files go unmentioned; any other
                        # file (notes.txt, a preview) is counted, whatever its name.
                        if not builds.wrote(name):
                            (found if builds.owns(name) else others).append(url_of(name))
                    elif not _is_sidecar(relative):
                        found.append(url_of(name))
            else:
                found.append(pattern if candidate == path else url_of(candidate))
        if found:
            files.extend(found)
        elif not skipped:
            unmatched.append(pattern)
    # A file named twice (`verify a.tfrecord a.tfrecord`, a folder and a glob in it) is one.
    return list(dict.fromkeys(files)), unmatched


def _a_builds_own(fs: Any, path: str, builds_seen: dict[str, bool]) -> bool:
    """Whether `path` is one of the files a build writes beside its shards, none of them a
    TFRecord file (`_build_wrote`), or its `index` or `reports` folder itself."""
    path = path.rstrip("/")
    folder, name = posixpath.split(path)
    parent, subfolder = posixpath.split(folder)
    if name in BUILD_FOLDERS:
        return fs.isdir(path) and _is_build_folder(fs, folder, builds_seen)
    if _build_wrote(name):
        return _is_build_folder(fs, folder, builds_seen)
    return _build_wrote(f"{subfolder}/{name}") and _is_build_folder(fs, parent, builds_seen)


def _build_wrote(relative: str) -> bool:
    """Whether a path below a build folder (relative to it) is a file the build writes beside
    its shards: its manifest.json, labels, report and TFDS metadata (`BUILD_FILES`), or a file
    in its `index` or `reports` folder (`BUILD_FOLDERS`)."""
    head, _, rest = relative.partition("/")
    if not rest:
        return head in BUILD_FILES
    return head in BUILD_FOLDERS and "/" not in rest


def _is_build_folder(fs: Any, folder: str, builds_seen: dict[str, bool]) -> bool:
    """Whether `folder` holds a build's manifest.json (asked once per folder)."""
    key = f"{fs.protocol}:{folder}"
    if key not in builds_seen:
        try:
            builds_seen[key] = fs.isfile(posixpath.join(folder, MANIFEST_FILE))
        except OSError:
            builds_seen[key] = False
    return builds_seen[key]


class _BuildFolders:
    """The build folders among the files below a directory: those holding a build's
    manifest.json, each read once (the listing names them, so no other folder is probed)."""

    def __init__(self, fs: Any, names: Iterable[str]) -> None:
        self._fs = fs
        self._manifests = {
            posixpath.dirname(n) for n in names if posixpath.basename(n) == MANIFEST_FILE
        }
        self._listings: dict[str, dict[str, dict[str, Any]] | None] = {}

    def holds(self, name: str) -> bool:
        """Whether `name` is below a build folder."""
        return self._build_of(name) is not None

    def wrote(self, name: str) -> bool:
        """Whether `name` is one of the files its build writes beside its shards (manifest,
        labels, report, TFDS files, and its index and reports folders' files)."""
        build = self._build_of(name)
        return build is not None and _build_wrote(name[len(build) :].lstrip("/"))

    def _build_of(self, name: str) -> str | None:
        probe = posixpath.dirname(name)
        while probe not in self._manifests:
            parent = posixpath.dirname(probe)
            if parent == probe:
                return None
            probe = parent
        return probe

    def owns(self, name: str) -> bool:
        """False for a file that is not its build's: below the nearest build folder above it,
        neither a shard its manifest lists nor beside them named like a shard (which verifying
        then finds unlisted). Every file outside build folders is taken."""
        folder = posixpath.dirname(name)
        probe = folder
        while True:
            listing = self._listing(probe)
            if listing is not None:
                base = posixpath.basename(name)
                return probe == folder and (base in listing or is_shard_name(base, suffix=""))
            parent = posixpath.dirname(probe)
            if parent == probe:
                return True
            probe = parent

    def _listing(self, folder: str) -> dict[str, dict[str, Any]] | None:
        if folder not in self._manifests:
            return None
        if folder not in self._listings:
            listing = None
            url = posixpath.join(folder, MANIFEST_FILE)
            # Not a build's manifest: its folder's files are checked on their own (and
            # `ManifestShards` says why).
            with contextlib.suppress(OSError, ManifestError), self._fs.open(url, "rb") as f:
                listing = _shard_listing(f.read(), url)
            self._listings[folder] = listing
        return self._listings[folder]


def incomplete_builds(
    patterns: list[str], files: Iterable[str] = ()
) -> list[tuple[str, list[str], list[str], dict[str, dict[int, int]]]]:
    """The folders that hold shards but no manifest.json: each with its shards, the shards
    their names say are missing, and the splits whose shards are of more than one build
    (`mixed_sets`).

    The folders looked at are those named on the command line, and those of the `files` to be
    verified that are named like a build's shards (`verify 'out/*.tfrecord*'`): checked one by
    one, the shards an interrupted or withheld build left would each be sound.
    """
    folders = [p for p in patterns if not _GLOB_CHARS & set(p)]
    folders += [posixpath.dirname(url) for url in files if shard_names([url])]
    found = []
    seen: set[str] = set()
    for pattern in folders:
        try:
            fs, path = url_to_fs(pattern)
            key = f"{fs.protocol}:{path.rstrip('/')}"
            if key in seen:
                continue
            seen.add(key)
            if not fs.isdir(path):
                continue
            names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)]
        except OSError:
            continue
        shards = shard_names(names)
        if shards and MANIFEST_FILE not in names:
            folder = pattern.rstrip("/") or pattern
            found.append((folder, shards, missing_shards(shards), mixed_sets(shards)))
    return found
