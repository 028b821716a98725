"""--resume: whether a shard an earlier run of the same build finished can be kept as it is."""

from __future__ import annotations

import logging
import os
import posixpath
from collections import Counter
from dataclasses import dataclass, field

import fsspec

from beam_tfrecord import progress
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.framing import ChecksummedReader, framed_size
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.codec.record_index import index_file_name, index_line
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry, ShardResult, ShardSpec
from beam_tfrecord.images import ImagePolicy
from beam_tfrecord.locations import has_protocol, is_local
from beam_tfrecord.manifest import SETTINGS_FILE
from beam_tfrecord.report import shard_report_name
from beam_tfrecord.storage import publish, sequential_read_options, written_at
from beam_tfrecord.wording import count

__all__ = ["keep_finished"]

_LOG = logging.getLogger(__name__)


def keep_finished(
    spec: ShardSpec, ordered: list[ImageEntry], policy: ImagePolicy
) -> tuple[ShardResult, list[ReportEntry]] | str | None:
    """--resume: the result and report of the shard an earlier run of this build finished,
    when it verifies against the plan (its index published again: that run may have died
    between the shard and its index); else why it is to be written again (None: not there)."""
    fs, final_path = fsspec.core.url_to_fs(spec.url)
    folder = posixpath.dirname(final_path)
    report_path = posixpath.join(folder, shard_report_name(spec.file_name))
    kept = _verify_existing(fs, final_path, report_path, spec, ordered, policy)
    if kept is None or isinstance(kept, str):
        return kept
    result, index, report = kept
    publish(fs, posixpath.join(folder, index_file_name(spec.file_name)), index.encode("ascii"))
    progress.add("kept", result.examples, result.bytes)  # not this run's writing
    _LOG.debug("kept finished shard %s (%s)", spec.file_name, count(result.examples, "example"))
    return result, report


def _verify_existing(
    fs,
    final_path: str,
    report_path: str,
    spec: ShardSpec,
    ordered: list[ImageEntry],
    policy: ImagePolicy,
) -> tuple[ShardResult, str, list[ReportEntry]] | str | None:
    """The result, index and report lines of a shard already written by an earlier run of the
    same build, if it is intact; else why it is not (None: it is not there).

    Intact means: it was written after the record of the build's settings, where there is one
    (`_written_before_its_build`); its report lines are there, and none says an image could not
    be read (the store may answer now); every record's CRCs check; the records are the planned
    images in the planned order, less exactly those its report says were left out; and each
    record says what this build would: the image's class id and name, and, of the image
    settings, what a record shows (`_settings_show`).
    """
    fs.invalidate_cache(posixpath.dirname(final_path))  # object stores cache listings
    try:
        shard = fs.open(final_path, "rb", **sequential_read_options(fs))
    except OSError:  # most often not there: not written yet
        return None
    with shard:
        if _written_before_its_build(fs, final_path):
            return (
                f"it was written before this build began (before its {SETTINGS_FILE}): a "
                "shard of the build an --overwrite was replacing, whose settings its records "
                "may not show"
            )
        report = _finished_report(fs, report_path, spec)
        if isinstance(report, str):
            return report
        why = _report_disagreement(fs, final_path, ordered, report)
        if why is not None:
            return why
        held = _read_finished(shard, final_path, ordered, report, policy)
        if isinstance(held, str):
            return held
    result = ShardResult(
        split=spec.split,
        index=spec.index,
        file_name=spec.file_name,
        examples=held.examples,
        bytes=held.size,
        crc32c=held.crc32c,
        class_counts=tuple(sorted(held.class_counts.items())),
        resumed=True,
        index_file=index_file_name(spec.file_name),
        planned_bytes=sum(e.record_size for e in ordered),
    )
    return result, "".join(held.index), report


def _finished_report(fs, report_path: str, spec: ShardSpec) -> list[ReportEntry] | str:
    """The report lines the earlier run wrote beside the shard; else why they cannot be had."""
    try:
        return [
            ReportEntry.from_json(line)
            for line in fs.cat_file(report_path).decode("utf-8").splitlines()
        ]
    except (OSError, ValueError, TypeError, KeyError) as err:
        name = shard_report_name(spec.file_name)
        return f"its report file {name} is missing or unreadable ({err})"


def _report_disagreement(
    fs, final_path: str, ordered: list[ImageEntry], report: list[ReportEntry]
) -> str | None:
    """Why the shard's report, or its images' files, say it is to be written again; None if
    they do not."""
    if any(r.reason == Reason.READ_ERROR for r in report):
        # Worth another try: a store's error may have passed.
        return "it left out an image that could not be read, to be read again"
    changed = _changed_since_written(fs, final_path, ordered)
    if changed is not None:
        return (
            f"the file of its image {changed.relpath} changed after the shard was written "
            "(a change that keeps the file's size shows in no record)"
        )
    replaced = _left_out_and_replaced(fs, final_path, report)
    if replaced is not None:
        return (
            f"its image {replaced.relpath}, left out as {replaced.reason}, was written again "
            "after the shard was"
        )
    planned = {e.url for e in ordered}
    stranger = next((r for r in report if r.url not in planned), None)
    if stranger is not None:
        # Kept, its report would count an input this build did not list, and the books
        # would not balance.
        return (
            f"its report names {stranger.relpath}, which this build does not plan for it "
            "(inputs, seed, splits or shard sizes changed)"
        )
    return None


@dataclass
class _Held:
    """What a finished shard holds, read once: its records' index lines, classes and CRC."""

    examples: int = 0
    size: int = 0
    crc32c: str = ""
    index: list[str] = field(default_factory=list)
    class_counts: Counter[str] = field(default_factory=Counter)


def _read_finished(
    shard,
    final_path: str,
    ordered: list[ImageEntry],
    report: list[ReportEntry],
    policy: ImagePolicy,
) -> _Held | str:
    """Reads the finished shard through, checking each record against the one this build would
    write; what it holds, or why it is to be written again."""
    left_out = {r.url for r in report if r.action == "skipped"}
    modified = {r.url for r in report if r.action == "modified"}
    expected = [e for e in ordered if e.url not in left_out]
    held = _Held(examples=len(expected))
    # One pass reads the records and checksums the file: a shard on a store is read once.
    stream = ChecksummedReader(shard, final_path)
    try:
        records = read_records(stream, compression="NONE", with_offsets=True)
        # Not strict: a count that differs is a reason to give, not an error to catch.
        for entry, (offset, record) in zip(expected, records, strict=False):
            held.index.append(index_line(offset, framed_size(len(record))))
            differs = _record_disagreement(record, entry, policy, entry.url in modified)
            if differs is not None:
                return differs
            if entry.label is not None:
                held.class_counts[entry.label] += 1
        if len(held.index) < len(expected) or next(records, None) is not None:
            return (
                f"it does not hold the {count(len(expected), 'record')} this build plans "
                "for it (inputs or settings changed)"
            )
        held.crc32c = stream.crc32c()
    except OSError as err:  # CorruptRecordError among them
        return f"it is damaged or could not be read ({err})"
    except ValueError as err:  # a record that is not a tf.train.Example
        return f"it is damaged ({err})"
    held.size = stream.size
    return held


def _record_disagreement(
    record: bytes, entry: ImageEntry, policy: ImagePolicy, modified: bool
) -> str | None:
    """How one record differs from what this build would write for `entry`; None if it does
    not. `modified`: the report says the image was changed to be written."""
    features = decode_example(record)
    differs = _disagreement(features, entry, policy)
    if differs is not None:
        return differs
    (held,) = features.get("image/encoded") or [b""]
    if not modified and len(held) != entry.source_size:
        # An image written as it was holds its file's bytes: this file changed.
        return (
            f"its record of {entry.relpath} holds {count(len(held), 'byte')} of "
            f"image, where the file has {entry.source_size} now: it changed"
        )
    return None


def _written_before_its_build(fs, shard_path: str) -> bool:
    """Whether the shard was written before the record of the build's settings beside it was
    (`settings_record`), which a build publishes before its first shard: it is then a shard of
    the build an --overwrite was replacing, left when that was stopped, whose records may show
    nothing of the settings it differs in (another --jpeg-quality). False where there is no
    record (a folder an earlier version wrote) or a time is not told (fsspec's memory
    filesystem)."""
    record = posixpath.join(posixpath.dirname(shard_path), SETTINGS_FILE)
    try:
        started = written_at(fs.info(record))
        written = written_at(fs.info(shard_path))
    except OSError:  # most often no record
        return False
    return started is not None and written is not None and written < started


def _changed_since_written(fs, shard_path: str, ordered: list[ImageEntry]) -> ImageEntry | None:
    """The first planned image on this machine's disk whose file changed after the shard on
    this machine's disk was written (its status-change time, which a content change moves and
    no program can set back, is later than the shard's last write); None if there is none.

    A file rewritten to the same size (an edited header, a re-encode that happens to match)
    moves nothing in the plan, and a kept shard would keep the old image; one left out as
    broken and since replaced would stay left out. On an object store a look at each object
    would be a request per image, so only local sources and shards are looked at.
    """
    if not is_local(fs):
        return None
    try:
        written = os.stat(shard_path).st_mtime_ns
    except OSError:
        return None
    for entry in ordered:
        if has_protocol(entry.url):
            continue
        try:
            changed = os.stat(entry.url).st_ctime_ns
        except OSError:  # gone: the shard holds it as it was, or reports it
            continue
        if changed > written:
            return entry
    return None


# Why an image was left out that a new copy of its file may mend: its bytes, or its absence.
_MENDABLE = frozenset(
    {
        Reason.TRUNCATED, Reason.CORRUPT, Reason.EMPTY_FILE, Reason.UNKNOWN_FORMAT,
        Reason.UNSUPPORTED, Reason.TOO_MANY_PIXELS, Reason.NEED_FULL_DATA,
        Reason.SOURCE_CHANGED, Reason.VANISHED,
    }
)  # fmt: skip


def _left_out_and_replaced(fs, shard_path: str, report: list[ReportEntry]) -> ReportEntry | None:
    """On an object store, the first image the shard left out for its bytes whose object was
    written after the shard (a broken upload replaced, say); None if there is none.

    A kept record shows a change of size, and a local file a change of any kind
    (`_changed_since_written`); an image left out has no record, and on a store only its
    object's time shows it was replaced. One request for the shard and one for each such image,
    which are few.
    """
    if is_local(fs):
        return None
    left_out = [
        r for r in report if r.action == "skipped" and r.reason in _MENDABLE and has_protocol(r.url)
    ]
    if not left_out:
        return None
    try:
        shard_time = written_at(fs.info(shard_path))
    except OSError:
        return None
    if shard_time is None:
        return None
    for entry in left_out:
        source_fs, path = fsspec.core.url_to_fs(entry.url)
        source_fs.invalidate_cache(posixpath.dirname(path))
        try:
            when = written_at(source_fs.info(path))
        except OSError:  # still gone, or not ours to look at: as it was
            continue
        # S3 keeps whole seconds: an object written in the shard's second may be newer.
        if when is not None and when >= shard_time:
            return entry
    return None


def _disagreement(features: dict, entry: ImageEntry, policy: ImagePolicy) -> str | None:
    """How a record a shard holds differs from the one this build would write for `entry`, as
    far as its fields show (the image, its class, the image settings a record shows); None if
    it does not.

    A resumed build whose `--classes` or labelling changed, or whose `--color`, `--encode`,
    `--store` or `--resize` did, must not keep shards of the old one: their records would carry
    other class ids under the new labels.txt, or images of another kind.
    """
    if features.get("image/filename") != [entry.relpath.encode("utf-8", "surrogateescape")]:
        return (
            f"its records are not the images this build plans for it, in its order (at "
            f"{entry.relpath}: inputs, seed, splits or shard sizes changed)"
        )
    if entry.class_id is None:
        if "image/class/label" in features:
            return f"its record of {entry.relpath} has a class, and this build has no labels"
    elif features.get("image/class/label") != [entry.class_id] or features.get(
        "image/class/text"
    ) != [(entry.label or "").encode("utf-8")]:
        (held,) = features.get("image/class/label") or [None]
        return (
            f"its record of {entry.relpath} has class id {held}, where this build gives "
            f"{entry.class_id} ({entry.label}): labels or --classes changed"
        )
    if not _settings_show(features, policy):
        return (
            f"its record of {entry.relpath} is not what this build's image settings make "
            "(--encode, --store, --color or --resize changed)"
        )
    return None


def _settings_show(features: dict, policy: ImagePolicy) -> bool:
    """Whether a record's format, channels and size fit the build's image settings.

    What a record cannot show (`--jpeg-quality`, `--background`, `--exif-orientation`, a resize
    of an image it left as it was) the record of the build's settings does: a --resume with
    other settings is refused before it starts (`settings_record.check_resumed`).
    """
    (image_format,) = features.get("image/format") or [b""]
    if policy.store == "raw":
        if image_format != b"raw":
            return False
    elif policy.encode is not None and image_format != policy.encode.encode():
        return False
    expected_channels = {"rgb": 3, "gray": 1}.get(policy.color)
    if expected_channels is not None and features.get("image/channels") != [expected_channels]:
        return False
    resize = policy.resize
    if resize is None:
        return True
    (height,) = features.get("image/height") or [0]
    (width,) = features.get("image/width") or [0]
    if resize.mode == "exact":
        return (width, height) == (resize.width, resize.height)
    if resize.mode == "short":
        return min(width, height) == resize.size
    return width <= resize.width and height <= resize.height  # fit: within, never larger
