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

    # Labelling and planning.
    NO_LABEL = "no_label"
    UNKNOWN_CLASS = "unknown_class"
    BAD_CLASS_NAME = "bad_class_name"  # a name no labels file can hold (labels.class_name_problem)
    CONFLICTING_LABELS = "conflicting_labels"  # one file, lines of an input list that disagree
    # Reading the source.
    READ_ERROR = "read_error"
    VANISHED = "vanished"  # listed (matched, or named in --input-list) but not found when read
    SOURCE_CHANGED = "source_changed"
    TOO_LARGE = "larger_than_max_shard_size"
    DUPLICATE = "duplicate"  # byte-identical to another input, which was written instead
    # The image checks (ImageError.code, beam_tfrecord.images).
    EMPTY_FILE = "empty_file"  # zero bytes
    UNKNOWN_FORMAT = "unknown_format"  # the content is not an image format we recognise
    UNSUPPORTED = "unsupported"  # a recognised image, but a format or feature not decoded
    TRUNCATED = "truncated"  # the data ends before the image does
    CORRUPT = "corrupt"  # the data is damaged or inconsistent
    TOO_MANY_PIXELS = "too_many_pixels"  # width * height is above ImagePolicy.max_pixels
    NEED_FULL_DATA = "need_full_data"  # a prefix was checked, and the answer needs the whole file
    # Written, but re-encoded or transformed (action "modified").
    NORMALIZED = "normalized"

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
            )
            + url
            + relpath
            + split
            + label
            + sha
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ImageEntry:
        key, source_size, record_size, class_id, n_url, n_rel, n_split, n_label, n_sha = (
            _ENTRY_HEAD.unpack_from(data)
        )
        # Unrolled, and built without the frozen dataclass's __init__ (a checked setattr per
        # field): this runs for every image at every shuffle.
        at = _ENTRY_HEAD.size
        url = data[at : at + n_url].decode("utf-8", "surrogateescape")
        at += n_url
        relpath = data[at : at + n_rel].decode("utf-8", "surrogateescape")
        at += n_rel
        split = data[at : at + n_split].decode("utf-8", "surrogateescape")
        at += n_split
        if n_label == _NONE:
            label = None
        else:
            label = data[at : at + n_label].decode("utf-8", "surrogateescape")
            at += n_label
        entry = object.__new__(cls)
        entry.__dict__.update(
            url=url,
            relpath=relpath,
            source_size=source_size,
            split=split,
            shuffle_key=key,
            label=label,
            class_id=None if class_id < 0 else class_id,
            record_size=record_size,
            source_sha256=data[at : at + n_sha].decode("ascii"),
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
        )


# shuffle key, source size, record size, class id (-1: none), then the five texts' lengths.
_ENTRY_HEAD = struct.Struct("<QqqqIIIII")
_NONE = 0xFFFFFFFF
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class ReportEntry:
    """One line of the report: an input that was not written (or was changed), and why."""

    url: str
    relpath: str
    reason: str
    message: str
    action: str = "skipped"  # "skipped", or "modified" for written images the build had to change
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
