"""report.jsonl at any scale: its counts as a tally, its lines as sorted parts composed in order.

A build may report every input (with `--resize`, every image is "modified"), so no step may hold
every line. Workers sort and write the lines of one key range each (a part); one step then
concatenates the parts in key order, streaming, and the manifest's counts come from a tally that
a combine merges. The file is the same, byte for byte, however the lines were split into parts.
"""

from __future__ import annotations

import bisect
import posixpath
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import fsspec

from beam_tfrecord.entries import ReportEntry
from beam_tfrecord.locations import is_object_store
from beam_tfrecord.storage import TEMP_MARKER, read_source, remove, temporary_name
from beam_tfrecord.store_listing import pages
from beam_tfrecord.uploads import open_upload, upload_block_size

__all__ = [
    "PARTS_DIR",
    "SHARD_REPORTS_DIR",
    "SHARD_REPORT_SUFFIX",
    "ReportTally",
    "compose_report",
    "part_bounds",
    "part_of",
    "part_url",
    "remove_parts",
    "report_key",
    "shard_report_name",
    "tally_counts",
    "write_part",
]

# Each shard's report lines (images left out, images changed), published before the shard: a
# shard under its final name always has them, so `--resume` can keep the shard and still report
# what it holds; report.jsonl is all of them, sorted.
SHARD_REPORTS_DIR = "reports"
SHARD_REPORT_SUFFIX = ".jsonl"
# Parts live in a hidden folder of the output, marked temporary: no glob over shard names sees
# them, and a build that fails before composing them leaves nothing that passes for a report.
PARTS_DIR = f".report{TEMP_MARKER}parts"
_COPY_CHUNK = 4 << 20


def report_key(entry: ReportEntry) -> bytes:
    """Bytes that sort as `entry.sort_key` does (paths hold no NUL character).

    UTF-32 (big-endian) orders as the code points do, which is how str sorts, and it holds the
    lone surrogates of a file name that is not UTF-8, which UTF-8, and so Beam's coder for
    str, cannot.
    """
    return "\0".join(entry.sort_key).encode("utf-32-be", "surrogatepass")


@dataclass
class ReportTally:
    """The counts the manifest takes from the report, merged from any number of partial tallies."""

    lines: int = 0
    modified: int = 0
    skipped_by_reason: Counter = field(default_factory=Counter)

    @classmethod
    def of(cls, entries: Iterable[ReportEntry]) -> ReportTally:
        tally = cls()
        for entry in entries:
            tally.add(entry)
        return tally

    @property
    def skipped(self) -> int:
        return sum(self.skipped_by_reason.values())

    def add(self, entry: ReportEntry) -> ReportTally:
        self.lines += 1
        if entry.action == "skipped":
            self.skipped_by_reason[entry.reason] += 1
        elif entry.action == "modified":
            self.modified += 1
        return self

    def merge(self, other: ReportTally) -> ReportTally:
        self.lines += other.lines
        self.modified += other.modified
        self.skipped_by_reason.update(other.skipped_by_reason)
        return self


def part_bounds(quantiles: Sequence[bytes], lines: int, part_lines: int) -> list[bytes]:
    """The keys that cut the report into parts of about `part_lines` lines each.

    Args:
        quantiles: approximate quantiles of the report's keys, smallest and largest included.
        lines: how many lines the report has.
        part_lines: lines one part should hold at most (so one worker sorts no more).

    Returns:
        Sorted keys; part i holds the keys from bound i-1 (included) up to bound i (excluded).
        Fewer parts than wanted when `quantiles` has fewer cut points.
    """
    parts = min(max(1, -(-lines // part_lines)), max(1, len(quantiles) - 1))
    last = len(quantiles) - 1
    bounds = {quantiles[round(i * last / parts)] for i in range(1, parts)}
    return sorted(bounds)


def part_of(key: bytes, bounds: Sequence[bytes]) -> int:
    return bisect.bisect_right(bounds, key)


def shard_report_name(shard_file_name: str) -> str:
    """A shard's report lines, relative to the shard's folder: `reports/{shard}.jsonl`."""
    return f"{SHARD_REPORTS_DIR}/{shard_file_name}{SHARD_REPORT_SUFFIX}"


def part_url(output_dir: str, part: int) -> str:
    return posixpath.join(output_dir, PARTS_DIR, f"part-{part:05d}.jsonl")


def _open_for_publish(fs: fsspec.AbstractFileSystem, path: str):
    """Where to write a file that must appear whole: on object stores the object itself (an
    upload only appears once complete), elsewhere a hidden temporary renamed by `_publish`."""
    if is_object_store(fs):
        return path
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    return temporary_name(path)


def _publish(fs: fsspec.AbstractFileSystem, written: str, path: str) -> None:
    if written != path:
        fs.mv(written, path)


def write_part(output_dir: str, part: int, keyed_lines: Iterable[tuple[bytes, str]]) -> int:
    """Sorts one part's (report_key, JSON line) pairs and writes the lines whole; a retry
    rewrites the same file. Returns the number of lines written."""
    lines = sorted(keyed_lines)
    fs, path = fsspec.core.url_to_fs(part_url(output_dir, part))
    target = _open_for_publish(fs, path)
    try:
        with fs.open(target, "wb") as f:
            for _, line in lines:
                f.write(line.encode("utf-8") + b"\n")
        _publish(fs, target, path)
    except BaseException:
        if target != path and fs.exists(target):
            fs.rm(target)
        raise
    return len(lines)


def compose_report(output_dir: str, parts: Iterable[int], report_file: str) -> None:
    """Concatenates the written parts, in order, into `report_file`, streaming: the memory this
    takes does not grow with the report. The parts stay until `remove_parts`."""
    fs, path = fsspec.core.url_to_fs(posixpath.join(output_dir, report_file))
    if is_object_store(fs):
        _upload_report(fs, path, [part_url(output_dir, part) for part in sorted(set(parts))])
        return
    target = _open_for_publish(fs, path)
    try:
        with fs.open(target, "wb") as out:
            for part in sorted(set(parts)):
                with fsspec.open(part_url(output_dir, part), "rb") as f:
                    shutil.copyfileobj(f, out, _COPY_CHUNK)
        _publish(fs, target, path)
    except BaseException:
        if target != path and fs.exists(target):
            fs.rm(target)
        raise


def _upload_report(fs: fsspec.AbstractFileSystem, path: str, part_urls: list[str]) -> None:
    """The report as an upload that appears only when complete: a part at a time, each read
    in one request, and a report within an upload block (most are) sent in one, where a file
    opened on the store took two for an empty report and several round trips for each part."""
    upload = open_upload(fs, path, upload_block_size(fs))
    try:
        for url in part_urls:
            upload.write(read_source(url))
        upload.commit()
    except BaseException:
        upload.abandon()
        raise


def remove_parts(output_dir: str) -> None:
    """Removes the parts folder, this build's and whatever an interrupted one left."""
    fs, path = fsspec.core.url_to_fs(posixpath.join(output_dir, PARTS_DIR))
    fs.invalidate_cache(path)
    if is_object_store(fs):
        # One listing, where a look at the folder, then the removal's own look and listing,
        # took three round trips in turn after every build.
        found = [entry["name"] for page in pages(fs, path, recursive=True) for entry in page]
        if found:
            remove(fs, found)
        return
    if fs.exists(path):
        fs.rm(path, recursive=True)


def tally_counts(tally: ReportTally) -> Mapping[str, object]:
    """The manifest's `inputs` fields the report decides."""
    return {
        "skipped": tally.skipped,
        "skipped_by_reason": dict(sorted(tally.skipped_by_reason.items())),
        "modified": tally.modified,
    }
