"""The metadata that flows through a build: one entry per image, one report line per input not
written, and per shard where it goes (ShardSpec) and what it holds (ShardResult)."""

from __future__ import annotations

import json
import posixpath
import re
import struct
from dataclasses import asdict, dataclass, field
from enum import Enum

__all__ = ["ImageEntry", "Reason", "ReportEntry", "ShardResult", "ShardSpec"]


class Reason(str, Enum):
    """Every reason code of the report: why an input was not written, or that it was changed.

    Codes are stable and never change meaning. A str enum: a reason is its code wherever a
    string is expected (report.jsonl, the manifest's counts, comparisons with a code read back).
    """

    # Each code's docstring is its meaning in the reference docs (docs/hooks/reference.py).
    # Labelling and planning.
    NO_LABEL = "no_label"
    """The label rule (`--labels dir` or `regex:...`) finds no label in the image's path."""
    UNKNOWN_CLASS = "unknown_class"
    """The image's label is not one of the classes `--classes` names."""
    BAD_CLASS_NAME = "bad_class_name"
    """The label cannot be a class name: it holds a line break or another control character, a
    byte that is not UTF-8, or white space at either end, which no labels file reads back equal
    (`labels.class_name_problem`). The name is never changed; rename the folder instead."""
    CONFLICTING_LABELS = "conflicting_labels"
    """An `--input-list` names one file on several lines that give it different labels."""
    # Reading the source.
    READ_ERROR = "read_error"
    """The file or object could not be read (no permission; a store that kept failing after
    its client's own retries; a named pipe, socket or device with an image's name, which is
    never opened). The message says what the disk or store answered."""
    VANISHED = "vanished"
    """Listed (matched, or named in `--input-list`) but not found when read: deleted since, a
    link to nothing, or a listed path that never existed."""
    SOURCE_CHANGED = "source_changed"
    """The file is not the size it was listed at when its shard is written: it changed since."""
    TOO_LARGE = "larger_than_max_shard_size"
    """The image's record alone is larger than `--max-shard-size`."""
    DUPLICATE = "duplicate"
    """With `--dedup`: byte-identical to another input (the one of the smallest relative path),
    which was written instead. That one has a line too, with action `kept`, naming its copies:
    it was written, and is not counted among the skipped."""
    # The image checks (ImageError.code, beam_tfrecord.images).
    EMPTY_FILE = "empty_file"
    """The file has zero bytes."""
    UNKNOWN_FORMAT = "unknown_format"
    """The content is not an image format the checker recognises (whatever the file's name)."""
    UNSUPPORTED = "unsupported"
    """A recognised image, but a format or feature this Pillow does not read (HEIC, JPEG XL, a
    colour mode it cannot convert to RGB...), or one the output format cannot hold (a side over
    65,500 pixels, as a JPEG)."""
    TRUNCATED = "truncated"
    """The data ends before the image does: a download cut off, a copy not finished."""
    CORRUPT = "corrupt"
    """The data is damaged or inconsistent: it does not decode, or its headers contradict it."""
    TOO_MANY_PIXELS = "too_many_pixels"
    """Width times height is above `--max-pixels` (a guard against decompression bombs), or,
    with `--resize`, that of the image it would be resized to."""
    NEED_FULL_DATA = "need_full_data"
    """Only a prefix of the file was checked, and the answer needs the whole file."""
    # Written, but re-encoded or transformed (action "modified").
    NORMALIZED = "normalized"
    """Written, but not as its original bytes: re-encoded so that TensorFlow decodes it as its
    record states (CMYK, 16-bit, EXIF rotation, transparency...), or transformed as `--resize`,
    `--encode` or `--store raw` asks. Its `notes` say what was done."""

    # The code itself, not "Reason.TRUNCATED", in str() and f-strings, on every Python version.
    __str__ = str.__str__
    __format__ = str.__format__


@dataclass(frozen=True)
class ImageEntry:
    """One image as planned from its listing; no pixel data, and nothing read from the image.

    The planner places it by `shuffle_key` and `record_size`; the shard writer reads `url`,
    checks and frames the image, and reports it if it is no longer what was listed.

    Attributes:
        record_size: the framed record's planned size: exact but for a few bytes of header
            fields when the image keeps its bytes, an estimate when the build transforms it.
        source_sha256: of the source's bytes, when the build hashes sources (--dedup); else "".
        prepared: where the record of a transformed image already is, when measuring its size
            made it (`beam_tfrecord.measurement.Prepared`): the shard writer copies it from
            there, and neither reads nor transforms the image again; else "".
    """

    url: str
    relpath: str
    source_size: int
    split: str
    shuffle_key: int
    label: str | None = None
    class_id: int | None = None
    record_size: int = 0
    source_sha256: str = ""
    prepared: str = ""

    @property
    def sort_key(self) -> tuple[int, str, str]:
        # The URL breaks the tie of two inputs with one relative path (the same names below two
        # --input folders): their order would otherwise be the runner's, and so their shards.
        return (self.shuffle_key, self.relpath, self.url)

    def to_bytes(self) -> bytes:
        """A compact, deterministic encoding (what crosses a shuffle); `from_bytes` reverses it."""
        url = self.url.encode("utf-8", "surrogateescape")
        relpath = self.relpath.encode("utf-8", "surrogateescape")
        split = self.split.encode("utf-8", "surrogateescape")
        label = b"" if self.label is None else self.label.encode("utf-8", "surrogateescape")
        sha = self.source_sha256.encode("ascii")
        prepared = self.prepared.encode("utf-8", "surrogateescape")
        return (
            _ENTRY_HEAD.pack(
                self.shuffle_key,
                self.source_size,
                self.record_size,
                -1 if self.class_id is None else self.class_id,
                len(url),
                len(relpath),
                len(split),
                _NONE if self.label is None else len(label),
                len(sha),
                len(prepared),
            )
            + url
            + relpath
            + split
            + label
            + sha
            + prepared
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ImageEntry:
        # Unrolled, and built without the frozen dataclass's __init__ (a checked setattr per
        # field) or a call per field: this runs for every image at every shuffle.
        key, source_size, record_size, class_id, n_url, n_rel, n_split, n_label, n_sha, n_prep = (
            _ENTRY_HEAD.unpack_from(data)
        )
        url_end = _ENTRY_HEAD.size + n_url
        rel_end = url_end + n_rel
        split_end = rel_end + n_split
        if n_label == _NONE:
            label, label_end = None, split_end
        else:
            label_end = split_end + n_label
            label = data[split_end:label_end].decode("utf-8", "surrogateescape")
        sha_end = label_end + n_sha
        entry = object.__new__(cls)
        entry.__dict__.update(
            {
                "url": data[_ENTRY_HEAD.size : url_end].decode("utf-8", "surrogateescape"),
                "relpath": data[url_end:rel_end].decode("utf-8", "surrogateescape"),
                "source_size": source_size,
                "split": data[rel_end:split_end].decode("utf-8", "surrogateescape"),
                "shuffle_key": key,
                "label": label,
                "class_id": None if class_id < 0 else class_id,
                "record_size": record_size,
                "source_sha256": data[label_end:sha_end].decode("ascii") if n_sha else "",
                "prepared": (
                    data[sha_end : sha_end + n_prep].decode("utf-8", "surrogateescape")
                    if n_prep
                    else ""
                ),
            }
        )
        return entry

    @staticmethod
    def sizes_of(data: bytes) -> tuple[int, int]:
        """The source size and record size of the entry `data` encodes (`to_bytes`), read
        without decoding it."""
        _, source_size, record_size = _ENTRY_PLACED.unpack_from(data)
        return source_size, record_size

    @staticmethod
    def placed_by(data: bytes | bytearray, offset: int = 0) -> tuple[int, int]:
        """The shuffle key and record size of the entry encoded (`to_bytes`) at `offset` in
        `data`, read without decoding it: what placing it in a shard needs, but for a tie of
        keys."""
        key, _, record_size = _ENTRY_PLACED.unpack_from(data, offset)
        return key, record_size

    @classmethod
    def planned(
        cls,
        url: str,
        relpath: str,
        source_size: int,
        split: str,
        shuffle_key: int,
        label: str | None,
        class_id: int | None,
        record_size: int,
        source_sha256: str = "",
        prepared: str = "",
    ) -> ImageEntry:
        """The entry with these fields, built without the frozen dataclass's __init__ (a
        checked setattr per field): the planner and every shuffle make one for each image."""
        entry = object.__new__(cls)
        entry.__dict__.update(
            url=url,
            relpath=relpath,
            source_size=source_size,
            split=split,
            shuffle_key=shuffle_key,
            label=label,
            class_id=class_id,
            record_size=record_size,
            source_sha256=source_sha256,
            prepared=prepared,
        )
        return entry

    def encoded_size(self) -> int:
        """About `len(self.to_bytes())`, without encoding: exact when the texts are ASCII."""
        return (
            _ENTRY_HEAD.size
            + len(self.url)
            + len(self.relpath)
            + len(self.split)
            + len(self.label or "")
            + len(self.source_sha256)
            + len(self.prepared)
        )


# shuffle key, source size, record size, class id (-1: none), then the six texts' lengths.
_ENTRY_HEAD = struct.Struct("<QqqqIIIIII")
_ENTRY_PLACED = struct.Struct("<Qqq")  # the head's first three fields
_NONE = 0xFFFFFFFF
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class ReportEntry:
    """One line of the report: an input that was not written (or was changed), and why.

    Attributes:
        url: the input's full path or URL, as the listing found it.
        relpath: its path relative to its `--input` folder (or as an `--input-list` names it):
            the name the build knows it by, and `image/filename` in a written record.
        reason: the code (`Reason`) saying why it was not written, or `normalized`.
        message: one line for people, naming what was wrong (`--labels ... finds no label in
            'x.jpg'`, `the data ends before the image does`...).
        action: `skipped` (not written), `modified` (written, but changed), or `kept` (with
            `--dedup`, the one copy of identical inputs that was written: reason `duplicate`,
            its message naming the copies left out; not counted as skipped).
        split: the split it was planned for, when it got that far.
        label: its label, when it has one.
        notes: for `modified`, what was changed (`NOTE_CODES`: `cmyk_converted`, `resized`...).
    """

    url: str
    relpath: str
    reason: str
    message: str
    action: str = "skipped"  # or "modified" (written, changed), or "kept" (--dedup's copy kept)
    split: str | None = None
    label: str | None = None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> str:
        """One line of report.jsonl, valid UTF-8 whatever the file names.

        A path read from a file name whose bytes are not UTF-8 holds lone surrogates (Python's
        surrogateescape), which no UTF-8 file can hold. They are written as JSON escapes
        (`\\udcff`): `json.loads` gives back the same str, whose `os.fsencode` is the file name's
        bytes.
        """
        data = {k: v for k, v in asdict(self).items() if v not in (None, ())}
        if "notes" in data:
            data["notes"] = list(data["notes"])
        text = json.dumps(data, ensure_ascii=False, sort_keys=True)
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)

    @classmethod
    def from_json(cls, line: str) -> ReportEntry:
        """The entry `to_json` wrote."""
        data = json.loads(line)
        if "notes" in data:
            data["notes"] = tuple(data["notes"])
        return cls(**data)

    @property
    def sort_key(self) -> tuple[str, str, str]:
        return (self.relpath, self.url, self.reason)


@dataclass(frozen=True)
class ShardSpec:
    """Where one shard goes and what it holds."""

    output_dir: str
    file_name: str
    split: str
    index: int
    num_shards: int

    @property
    def url(self) -> str:
        return posixpath.join(self.output_dir, self.file_name)


@dataclass(frozen=True)
class ShardResult:
    """What a written shard holds, for the manifest."""

    split: str
    index: int
    file_name: str
    examples: int
    bytes: int
    crc32c: str  # of the whole file, 8 hex digits, as `gcloud storage hash --hex` prints it
    class_counts: tuple[tuple[str, int], ...] = ()
    resumed: bool = False
    index_file: str | None = None  # its record index, relative to the output folder
    planned_bytes: int = 0  # what the plan cut it at: its records' planned sizes, summed
    # What writing it cost, counted: sources read and their bytes, images decoded and encoded.
    reads: int = 0
    bytes_read: int = 0
    decodes: int = 0
    encodes: int = 0
    # Why --resume did not keep the finished shard it replaced ("" when it found none): logged
    # by the step that receives the result, where the build's log is (not a shard process's).
    replaced: str = ""
