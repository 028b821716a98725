"""Record index files: one `offset length` line per record, the format of DALI's tfrecord2idx.

NVIDIA DALI's `fn.readers.tfrecord(index_path=...)` needs one per file, and the `tfrecord` PyPI
package reads the same format: line n holds record n's first byte in the file and its whole
framed length (header, payload and footer), in decimal, separated by a space.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from beam_tfrecord.codec.framing import framed_size
from beam_tfrecord.wording import count

__all__ = [
    "INDEX_DIR",
    "INDEX_SUFFIX",
    "IndexCheck",
    "index_candidates",
    "index_file_name",
    "index_line",
]

# Index files sit in a folder of their own beside the shards, as NVIDIA's examples keep them,
# so that no glob over shard names (`name-train.tfrecord-*`) also matches an index file.
INDEX_DIR = "index"
INDEX_SUFFIX = ".index"
_LINE = re.compile(r"^\s*(\d+)\s+(\d+)\s*$")
_MAX_ERRORS = 100
_FRAMING = framed_size(0)  # a record's header and footer


def index_file_name(shard_file_name: str) -> str:
    """A shard's index file, relative to the shard's folder: `index/{shard}.index`."""
    return f"{INDEX_DIR}/{shard_file_name}{INDEX_SUFFIX}"


def index_line(offset: int, length: int) -> str:
    """One line of an index: a record's first byte and its framed length."""
    return f"{offset} {length}\n"


def index_candidates(shard_url: str) -> tuple[str, str]:
    """Where an index of a TFRecord file may be: the place a build writes it, then beside it."""
    folder, name = posixpath.split(shard_url)
    return posixpath.join(folder, index_file_name(name)), shard_url + INDEX_SUFFIX


class IndexCheck:
    """Compares an index, line by line, with the records of its file as they are read.

    Feed it every record of the file in order, with `record` or, for a record whose data CRC is
    bad, `damaged`; then call `finish`. `errors` then holds one message per wrong line, each
    naming the index file and the line.
    """

    def __init__(self, name: str, lines: Iterable[str]):
        """Args:
        name: the index file, as messages name it.
        lines: its lines (an open text file will do: it is read as the records are).
        """
        self.name = name
        self.errors: list[str] = []
        self._lines = enumerate(lines, start=1)
        self._records = 0
        self._unlisted = 0
        self._wrong = 0
        self._damaged: list[int] = []

    def _next_entry(self) -> tuple[int, str] | None:
        for number, text in self._lines:
            if text.strip():  # a blank line (a final newline too many) is no entry
                return number, text
        return None

    def _error(self, message: str) -> None:
        self._wrong += 1
        if self._wrong <= _MAX_ERRORS:
            self.errors.append(f"{self.name}: {message}")

    def damaged(self, offset: int) -> None:
        """The file's next record is whole but its data CRC is bad: its framed length is known
        once the record after it starts."""
        self._damaged.append(offset)

    def record(self, offset: int, length: int) -> None:
        """The file's next record: its first byte and framed length."""
        self._flush_damaged(offset)
        self._check(offset, length)

    def _flush_damaged(self, next_offset: int | None) -> None:
        if not self._damaged:
            return
        ends = [*self._damaged[1:], next_offset]
        for start, end in zip(self._damaged, ends, strict=True):
            self._check(start, None if end is None else end - start)
        self._damaged.clear()

    def _check(self, offset: int, length: int | None) -> None:
        self._records += 1
        entry = self._next_entry()
        if entry is None:
            self._unlisted += 1
            return
        number, text = entry
        match = _LINE.match(text)
        if match is None:
            self._error(f"line {number}: expected 'offset length', got {text.rstrip()!r}")
            return
        listed = (int(match[1]), int(match[2]))
        if listed[0] != offset or (length is not None and listed[1] != length):
            # Records are numbered from 0, as `inspect` numbers them, and sized both ways: the
            # index lists framed lengths, `inspect` gives payloads.
            actual = (
                f", {length} bytes framed ({count(length - _FRAMING, 'byte')} of payload)"
                if length is not None
                else ""
            )
            self._error(
                f"line {number}: lists {listed[1]} bytes framed at byte offset {listed[0]}, but "
                f"record {self._records - 1} is at byte offset {offset}{actual}"
            )

    def finish(self, complete: bool = True) -> None:
        """After the last record. `complete` is False when the file's framing is damaged and
        its records could not all be read: lines past the damage are then not checked."""
        self._flush_damaged(None)
        extra = 0
        while self._next_entry() is not None:
            extra += 1
        lines = self._records - self._unlisted + extra
        if not complete:
            # Its lines past the damage cannot be checked; that it lists more is still worth
            # saying (a file cut off mid-record lists its lost records there).
            if lines > self._records:
                self._error(
                    f"has {count(lines, 'entry', 'entries')}; the file's framing is damaged "
                    f"at record {self._records}, and the entries past it are not checked"
                )
        elif lines != self._records:
            self._error(
                f"has {count(lines, 'entry', 'entries')}, but the file has "
                f"{count(self._records, 'record')}"
            )
        if self._wrong > _MAX_ERRORS:
            self.errors.append(f"{self.name}: {self._wrong - _MAX_ERRORS} more wrong lines")
