"""The files that describe a build: manifest.json, labels.txt and report.jsonl, and the cleanup after it."""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import platform
import posixpath
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from typing import Any, TypedDict

import fsspec

from beam_tfrecord.codec.record_index import INDEX_DIR, INDEX_SUFFIX
from beam_tfrecord.entries import Reason, ReportEntry, ShardResult
from beam_tfrecord.labels import ClassMap
from beam_tfrecord.locations import is_local, is_object_store
from beam_tfrecord.remote import run_concurrently
from beam_tfrecord.report import SHARD_REPORT_SUFFIX, SHARD_REPORTS_DIR, ReportTally, tally_counts
from beam_tfrecord.shard_names import is_shard_name
from beam_tfrecord.storage import is_temporary, publish, read_source, remove
from beam_tfrecord.tfds_metadata import DATASET_INFO_FILE, TFDS_FILES
from beam_tfrecord.verdict import (  # BuildFailed and the skip bound's: imported from here too
    BuildFailed,
    Counts,
    Verdict,
    decide,
    left_out_labels,
    skipped_fraction,
    too_many_skipped,
)

__all__ = [
    "BUILD_FILES",
    "BUILD_FOLDERS",
    "LABELS_FILE",
    "MANIFEST_FILE",
    "REPORT_FILE",
    "SETTINGS_FILE",
    "BuildFailed",
    "GivenClasses",
    "Inputs",
    "Manifest",
    "ManifestError",
    "ShardSummary",
    "SplitSummary",
    "Work",
    "build_manifest",
    "discard_manifest",
    "forget_written_here",
    "is_build_file",
    "manifest_written_here",
    "parse_manifest",
    "publish_text",
    "published_here",
    "read_manifest",
    "remove_files",
    "remove_stale_files",
    "remove_temporaries",
    "skipped_fraction",
    "stale_files",
    "too_many_skipped",
    "withdraw_build",
    "withdrawn_failure",
    "write_build_files",
]

MANIFEST_FILE = "manifest.json"
LABELS_FILE = "labels.txt"
REPORT_FILE = "report.jsonl"
# The record of the settings a build's shards are made with, written as it starts: --resume
# refuses other settings (`settings_record`).
SETTINGS_FILE = "build-settings.json"
_METADATA_FILES = (MANIFEST_FILE, LABELS_FILE, REPORT_FILE, SETTINGS_FILE)
# What a build writes beside its shards, none of it a TFRecord file (and the folders of its
# shards' record indexes and report parts).
BUILD_FILES = (*_METADATA_FILES, *TFDS_FILES)
BUILD_FOLDERS = (INDEX_DIR, SHARD_REPORTS_DIR)


# manifest.json, declared: build_manifest writes these fields and no others (a test compares a
# real build's manifest with them), and the reference docs are generated from their docstrings.


class Inputs(TypedDict):
    """What became of the inputs: `listed` = `written` + `skipped` + `unaccounted`.

    Attributes:
        listed: inputs the listing found (each file once).
        written: images written, one record each.
        skipped: inputs not written, each a line of report.jsonl with its reason.
        skipped_by_reason: the skipped inputs counted by reason code (`truncated: 1`).
        modified: images written, but re-encoded or transformed (report lines `normalized`).
        unaccounted: inputs neither written nor reported: lost by the runner between stages.
            A published build has 0; a build that would not have publishes no manifest.
    """

    listed: int
    written: int
    skipped: int
    skipped_by_reason: dict[str, int]
    modified: int
    unaccounted: int


class Work(TypedDict):
    """What the shard writers did, counted: each source is read once, and decoded and encoded
    at most once (benchmarks/README.md reads these).

    Attributes:
        reads: sources the shard writers read, those read and then refused (truncated, not
            an image...) too. A build that measures its images' sizes first (`--resize`,
            `--encode`) refuses some before any writer reads them: those are not counted.
        bytes_read: their bytes (the collection's size, when every image is read once).
        decodes: images decoded in full (`--validate decode`, or an image re-encoded).
        encodes: images encoded (normalized or transformed).
    """

    reads: int
    bytes_read: int
    decodes: int
    encodes: int


class SplitSummary(TypedDict):
    """One split, totalled over its shards.

    Attributes:
        examples: records written to the split (0 for a split that received no image).
        bytes: the size of its shards.
        shards: how many shards it has.
        class_counts: records per class name, classes with none left out.
    """

    examples: int
    bytes: int
    shards: int
    class_counts: dict[str, int]


class ShardSummary(TypedDict):
    """One shard, as `verify` checks it.

    Attributes:
        file: the shard's file name, relative to the build folder.
        split: its split.
        index: its number within the split, from 0.
        examples: records it holds.
        bytes: its size.
        planned_bytes: the size the plan cut it at (its records' planned sizes, summed).
        crc32c: the whole file's CRC32C, 8 hex digits, as `gcloud storage hash --hex` prints it.
        index_file: its record index, relative to the build folder (`index/{file}.index`).
    """

    file: str
    split: str
    index: int
    examples: int
    bytes: int
    planned_bytes: int
    crc32c: str
    index_file: str | None


class GivenClasses(TypedDict):
    """How the listing's labels met `--classes` (only in a build given `--classes`).

    Attributes:
        not_found: names `--classes` gives that no listed input is labelled with.
        meant: for such a name, the left-out label it most likely mistypes.
        other_labels: labels of inputs that `--classes` does not name (those inputs are
            reported `unknown_class`), the first 100 by name.
        other_label_count: how many such labels there are in all.
    """

    not_found: list[str]
    meant: dict[str, str]
    other_labels: list[str]
    other_label_count: int


class _ManifestFields(TypedDict):
    """The fields every manifest has."""

    format: str
    name: str
    created: str
    versions: dict[str, str]
    seed: int
    config: dict[str, Any]
    classes: list[str]
    inputs: Inputs
    work: Work
    splits: dict[str, SplitSummary]
    shards: list[ShardSummary]


class Manifest(_ManifestFields, total=False):
    """manifest.json: what a finished build holds. It is written last, so its presence means
    the build is complete; `verify` checks every shard against it.

    Attributes:
        format: `beam-tfrecord/1`, the version of this layout.
        name: the dataset's name, as in its shard names.
        created: when it was written, ISO 8601 in UTC.
        versions: of Python and the packages that made it (beam-tfrecord, apache-beam, ...).
        seed: the seed of split assignment and shuffling.
        config: every setting of the build, resolved (the config file's keys, defaults
            included); `BuildConfig.from_settings` reads it back to an equal config.
        classes: the class names; the list index is the class id (the lines of labels.txt).
        given_classes: only with `--classes`: how the labels met it (`GivenClasses`).
        inputs: what became of the inputs (`Inputs`).
        work: what the shard writers did (`Work`).
        splits: per split name, its totals (`SplitSummary`), splits without images included.
        shards: one entry per shard (`ShardSummary`), split by split, in order.
    """

    given_classes: GivenClasses


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("beam-tfrecord", "apache-beam", "protobuf", "Pillow", "fsspec", "crc32c"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def build_manifest(
    *,
    config: Mapping[str, Any],
    split_names: Sequence[str],
    classes: ClassMap,
    shards: Iterable[ShardResult],
    report: ReportTally | Iterable[ReportEntry],
    listed: int,
    class_counts: Mapping[str, Mapping[str, int]] | None = None,
    given_classes: Mapping[str, Any] | None = None,
) -> Manifest:
    """The manifest of a finished build, from what its shards and report hold.

    `report` is the report's tally (what a build merges from its workers), or its lines.
    `class_counts`, per split, replaces the shards' own class counts (a build combines them
    on the workers, so that the shard results gathered in one place stay small).
    `given_classes`, for a build given --classes: the classes no listed input has, and the
    labels inputs have that --classes does not name (`Census.given_classes`).
    """
    order = {name: i for i, name in enumerate(split_names)}
    shards = sorted(shards, key=lambda r: (order.get(r.split, len(order)), r.split, r.index))
    splits = _split_summaries(shards, split_names, classes, class_counts)
    tally = report if isinstance(report, ReportTally) else ReportTally.of(report)
    written = sum(s["examples"] for s in splits.values())
    return {
        "format": "beam-tfrecord/1",
        "name": config.get("name"),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "seed": config.get("seed"),
        "config": dict(config),
        "classes": list(classes.names),
        **({"given_classes": dict(given_classes)} if given_classes is not None else {}),
        "inputs": {
            "listed": listed,
            "written": written,
            **tally_counts(tally),
            # Every listed input is written or reported. Anything else was lost by the runner
            # between stages (seen with the DirectRunner's multi-process mode at millions of
            # elements), and the build must not pass for complete.
            "unaccounted": listed - written - tally.skipped,
        },
        # What the shard writers did, counted: each source is read once, and decoded and
        # encoded at most once (benchmarks/README.md reads these).
        "work": Work(**{key: sum(getattr(s, key) for s in shards) for key in Work.__annotations__}),
        "splits": splits,
        "shards": [
            ShardSummary(
                file=s.file_name,
                split=s.split,
                index=s.index,
                examples=s.examples,
                bytes=s.bytes,
                planned_bytes=s.planned_bytes,
                crc32c=s.crc32c,
                index_file=s.index_file,
            )
            for s in shards
        ],
    }


def _split_summaries(
    shards: Sequence[ShardResult],
    split_names: Sequence[str],
    classes: ClassMap,
    class_counts: Mapping[str, Mapping[str, int]] | None,
) -> dict[str, Any]:
    """Each split's totals over its shards (`shards` in order), splits without a shard included;
    `class_counts`, per split, replaces the shards' own."""
    splits: dict[str, Any] = {
        name: {"examples": 0, "bytes": 0, "shards": 0, "class_counts": {}} for name in split_names
    }
    for shard in shards:
        split = splits.setdefault(
            shard.split, {"examples": 0, "bytes": 0, "shards": 0, "class_counts": {}}
        )
        split["examples"] += shard.examples
        split["bytes"] += shard.bytes
        split["shards"] += 1
        counts = Counter(split["class_counts"])
        counts.update(dict(shard.class_counts))
        split["class_counts"] = {name: counts[name] for name in classes.names if counts[name]}
    for name, counts in (class_counts or {}).items():
        split = splits.setdefault(
            name, {"examples": 0, "bytes": 0, "shards": 0, "class_counts": {}}
        )
        split["class_counts"] = {c: counts[c] for c in classes.names if counts.get(c)}
    return splits


def publish_text(url: str, text: str) -> None:
    """Writes a small text file so that a reader sees the old file or the new one, never a part."""
    fs, path = fsspec.core.url_to_fs(url)
    publish(fs, path, text.encode("utf-8"))


def _report_text(report: Iterable[ReportEntry]) -> str:
    """report.jsonl: one JSON object a line, in path order."""
    return "".join(r.to_json() + "\n" for r in sorted(report, key=lambda r: r.sort_key))


def write_build_files(
    output_dir: str,
    manifest: Mapping[str, Any],
    classes: ClassMap,
    report: Iterable[ReportEntry] | None = None,
    extra: Mapping[str, str] | None = None,
    meanwhile: Sequence[Callable[[], Any]] = (),
) -> list[Any]:
    """Writes labels.txt, report.jsonl and `extra` files (name -> text) at once, then, last,
    manifest.json: a manifest means a finished build. Returns what the `meanwhile` calls
    returned, which ran at once with those writes, before the manifest.

    At once, because on an object store each is a round trip and none depends on another.
    With `report` None, report.jsonl is in place already (a build composes it from its parts).
    The manifest's text is kept for this process to take (`manifest_written_here`).
    """
    files = {**(extra or {}), LABELS_FILE: classes.to_text()}
    if report is not None:
        files[REPORT_FILE] = _report_text(report)
    done = run_concurrently(
        [
            *meanwhile,
            *(
                functools.partial(publish_text, posixpath.join(output_dir, name), text)
                for name, text in files.items()
            ),
        ]
    )
    text = json.dumps(manifest, indent=1, ensure_ascii=False) + "\n"
    publish_text(posixpath.join(output_dir, MANIFEST_FILE), text)
    _WRITTEN_HERE[output_dir] = text
    _PUBLISHED_HERE.add(output_dir)
    return list(done[: len(meanwhile)])


# The manifest this process last wrote into each output folder, as written: the launcher of a
# build that finalized here takes it without reading it back, a round trip on a store.
_WRITTEN_HERE: dict[str, str] = {}
# The output folders whose manifest this process wrote, since a build there started
# (`forget_written_here`): kept after the manifest itself is taken.
_PUBLISHED_HERE: set[str] = set()


def published_here(output_dir: str) -> bool:
    """Whether this process wrote `output_dir`'s manifest.json since a build there started
    (`forget_written_here`): the build there is published."""
    return output_dir in _PUBLISHED_HERE


def forget_written_here(output_dir: str) -> None:
    """Forgets a manifest this process wrote into `output_dir`: a build starts there."""
    _WRITTEN_HERE.pop(output_dir, None)
    _PUBLISHED_HERE.discard(output_dir)


def manifest_written_here(output_dir: str) -> dict[str, Any] | None:
    """The manifest this process wrote into `output_dir` since it last asked (None if none), as
    `read_manifest` would read it. Once: it is forgotten as it is taken."""
    text = _WRITTEN_HERE.pop(output_dir, None)
    return None if text is None else json.loads(text)


def withdraw_build(
    output_dir: str, report: Iterable[ReportEntry] | None = None, keep: Iterable[str] = ()
) -> None:
    """Leaves a build that must not be published as a folder holding its report.jsonl and the
    files in `keep` (its finished shards, for `--resume`, and then the record of the settings
    they were made with), and nothing else.

    Nothing may claim a dataset: no manifest.json, no labels.txt, no TFDS files, and no shard or
    index of an earlier build (which --overwrite or --resume asked to replace), so that neither
    we nor TFDS take the folder for a finished build. With `report` None, report.jsonl is in
    place already (a build composes it from its parts). `keep` names files relative to the
    folder, as `remove_stale_files` does.
    """
    discard_manifest(output_dir)
    if report is not None:
        publish_text(posixpath.join(output_dir, REPORT_FILE), _report_text(report))
    keep = list(keep)
    # With no shard kept there is nothing for a --resume to go on with: the record of the
    # settings goes too, and the folder holds the report alone, which a build may replace.
    gone = (LABELS_FILE, *TFDS_FILES) if keep else (LABELS_FILE, *TFDS_FILES, SETTINGS_FILE)
    for name in gone:
        fs, path = fsspec.core.url_to_fs(posixpath.join(output_dir, name))
        if fs.exists(path):
            remove(fs, path)
    remove_stale_files(output_dir, keep=keep)
    for name in (INDEX_DIR, SHARD_REPORTS_DIR):  # left empty: not worth leaving (local disks)
        fs, path = fsspec.core.url_to_fs(posixpath.join(output_dir, name))
        with contextlib.suppress(OSError):
            if is_local(fs) and fs.isdir(path) and not fs.ls(path):
                fs.rmdir(path)


def _holds_shards(output_dir: str) -> bool:
    fs, path = fsspec.core.url_to_fs(output_dir)
    fs.invalidate_cache(path)
    try:
        listed = fs.ls(path, detail=False)
    except FileNotFoundError:
        return False
    names = (posixpath.basename(p.rstrip("/")) for p in listed)
    return any(is_shard_name(n, suffix="") for n in names)


def withdrawn_failure(
    output_dir: str,
    carried: Verdict | None,
    *,
    max_skipped_fraction: float | None = None,
    listed: int | None = None,
    written: int | None = None,
    classes: Sequence[str] | None = None,
    missing_classes: Sequence[str] = (),
) -> BuildFailed:
    """The BuildFailed of a build withdrawn by its finalize step, which left report.jsonl.

    `carried`: the verdict the finalize step decided, as the runner's metrics brought it. A
    runner that reports none leaves only the folder to go by: the verdict is then decided
    again, by the same rules (`decide`), from the report's lines, its finished shards (none
    stay when no image was written) and `listed` and `written`, when known (a runner's
    counters), and `missing_classes`.
    `classes`, the build's --classes, if any: inputs skipped as unknown_class are then named by
    their labels, with the --classes name each most likely mistypes (a withdrawn build has no
    summary to say it).
    """
    url = posixpath.join(output_dir, REPORT_FILE)
    reasons, unknown = _skipped_in_report(url)
    hint = left_out_labels(unknown, classes) if classes is not None else ""
    if carried is None:
        if written is None and not _holds_shards(output_dir):
            written = 0
        counts = Counts(listed, written, reasons)
        carried = decide(counts, max_skipped_fraction, missing_classes, withdrawn=True)
    return carried.failure(url, hint)


# Distinct unknown_class labels a withdrawn build's reason counts (a bound on what it holds).
_UNKNOWN_LABELS_KEPT = 10_000


def _skipped_in_report(url: str) -> tuple[Counter[str], Counter[str]]:
    """The report's skipped inputs by reason, and those skipped as unknown_class by label."""
    reasons: Counter[str] = Counter()
    unknown: Counter[str] = Counter()  # labels --classes does not name, and their inputs
    with fsspec.open(url, "r", encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            if entry.get("action", "skipped") == "skipped":
                reasons[entry["reason"]] += 1
                label = entry.get("label")
                if (
                    entry["reason"] == Reason.UNKNOWN_CLASS
                    and label is not None
                    and (label in unknown or len(unknown) < _UNKNOWN_LABELS_KEPT)
                ):
                    unknown[label] += 1
    return reasons, unknown


def discard_manifest(output_dir: str) -> None:
    """Removes a finished build's manifest, if any, before its folder is rebuilt.

    TFDS's dataset_info.json goes too: to TFDS it is what says a folder holds a finished build.
    """

    def discard(name: str) -> None:
        fs, path = fsspec.core.url_to_fs(posixpath.join(output_dir, name))
        # One request: asking first whether the file exists is one or two more to a store.
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path)

    run_concurrently(
        [functools.partial(discard, name) for name in (MANIFEST_FILE, DATASET_INFO_FILE)]
    )


class ManifestError(ValueError):
    """A manifest.json that is not a build's: not JSON, or not the object a build writes.

    Its message is "URL: REASON"; `reason` alone says what is wrong."""

    def __init__(self, url: str, why: str):
        self.reason = f"not a build's manifest: {why}"
        super().__init__(f"{url}: {self.reason}")


def parse_manifest(text: str | bytes, url: str) -> dict[str, Any]:
    """A manifest.json's text as the build's manifest, checked for what every reader of it takes
    for granted: a JSON object with a list of shards, each an object naming its file.

    Raises:
        ManifestError: it is not; the message names `url` and what is wrong.
    """
    try:
        manifest = json.loads(text)
    except ValueError as error:  # also a UnicodeDecodeError of bytes that are not UTF-8
        raise ManifestError(url, f"not valid JSON ({error})") from None
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict):
        why = f"a JSON {type(manifest).__name__}, not an object"
    elif not isinstance(shards, list):
        why = 'no list of "shards"'
    elif not all(isinstance(s, dict) and isinstance(s.get("file"), str) for s in shards):
        why = 'a shard of its "shards" names no file'
    else:
        why = _inconsistency(manifest)
        if why is None:
            return manifest
    raise ManifestError(url, why)


_CRC32C_HEX = re.compile(r"^[0-9a-f]{8}$")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _inconsistency(manifest: dict[str, Any]) -> str | None:
    """What in a manifest contradicts itself, or points outside its folder; None if nothing.

    A build writes every figure from the same shards, so figures that disagree were edited or
    damaged since, and a reader would act on them: a shard listed twice read twice, a shard
    filed under another split read with it, an index path followed out of the folder.
    """
    why = _shards_inconsistency(manifest["shards"])
    if why is not None:
        return why
    splits = manifest.get("splits")
    if splits is None:
        return None
    if not isinstance(splits, dict) or not all(isinstance(v, dict) for v in splits.values()):
        return '"splits" is not an object of splits'
    for shard in manifest["shards"]:
        if "split" in shard and shard["split"] not in splits:
            return f"shard {shard['file']} is of split {shard['split']!r}, which it does not list"
    classes = manifest.get("classes")
    named = set(map(str, classes)) if isinstance(classes, list) else None
    for split, info in splits.items():
        own = [s for s in manifest["shards"] if s.get("split") == split]
        for key, total in (
            ("examples", sum(s.get("examples", 0) for s in own)),
            ("bytes", sum(s.get("bytes", 0) for s in own)),
            ("shards", len(own)),
        ):
            if key in info and info[key] != total:
                return f"split {split!r} lists {key} {info[key]!r}, but its shards hold {total}"
        counts = info.get("class_counts")
        if isinstance(counts, dict) and "examples" in info:
            if not all(_is_count(n) for n in counts.values()):
                return f"split {split!r}: its class_counts are not counts"
            # A build without labels (--labels none) counts no classes, and names none.
            labelled = bool(counts) or bool(named)
            if labelled and sum(counts.values()) != info["examples"]:
                return (
                    f"split {split!r}: its class_counts add up to {sum(counts.values())}, "
                    f"not its {info['examples']} examples"
                )
            if named is not None and not set(counts) <= named:
                stranger = sorted(set(counts) - named)[0]
                return f"split {split!r} counts class {stranger!r}, which its classes do not list"
    inputs = manifest.get("inputs")
    written = inputs.get("written") if isinstance(inputs, dict) else None
    examples = sum(info.get("examples", 0) for info in splits.values())
    if written is not None and written != examples:
        return f"inputs.written is {written!r}, but its splits hold {examples} examples"
    return None


def _shards_inconsistency(shards: list[dict[str, Any]]) -> str | None:
    """What in a manifest's shard list contradicts itself, or points outside its folder."""
    seen: set[str] = set()
    for shard in shards:
        name = shard["file"]
        if not name or "/" in name or name in (".", ".."):
            return f"shard {name!r} is not a file name in the build's folder"
        if name in seen:
            return f"it lists shard {name!r} twice"
        seen.add(name)
        for key in ("examples", "bytes", "index"):
            if key in shard and not _is_count(shard[key]):
                return f"shard {name}: {key} {shard[key]!r} is not a count"
        index_file = shard.get("index_file")
        if index_file is not None and (
            not isinstance(index_file, str)
            or index_file.startswith("/")
            or posixpath.normpath(index_file) != index_file
            or index_file.split("/", 1)[0] == ".."
        ):
            return f"shard {name}: index_file {index_file!r} is not a path in the build's folder"
        if "crc32c" in shard and not (
            isinstance(shard["crc32c"], str) and _CRC32C_HEX.match(shard["crc32c"])
        ):
            return f"shard {name}: crc32c {shard['crc32c']!r} is not a CRC32C (8 hex digits)"
    return None


def read_manifest(output_dir: str) -> dict[str, Any]:
    """The build's manifest.

    Raises:
        FileNotFoundError: the folder holds no manifest, or does not exist.
        NotADirectoryError: `output_dir` is a file.
        ManifestError: its manifest.json is not a build's (`parse_manifest`).
    """
    url = posixpath.join(output_dir, MANIFEST_FILE)
    try:
        # One request on an object store: opened as a file, it took seven round trips in turn
        # (gcsfs asks after the object and its "folder" twice before the read), at the end of
        # every build.
        text = read_source(url)
    except NotADirectoryError:
        raise NotADirectoryError(f"{output_dir}: a file, not a build folder") from None
    return parse_manifest(text, url)


def is_build_file(file_name: str) -> bool:
    """Whether a file in an output folder is one a build writes (shards, their indexes, report
    parts and temporaries, metadata). `file_name` is relative to the folder: `index/{shard}.index`."""
    folder, name = posixpath.split(file_name)
    if folder == INDEX_DIR:
        return is_temporary(name) or is_shard_name(name, suffix=INDEX_SUFFIX)
    if folder == SHARD_REPORTS_DIR:
        return is_temporary(name) or is_shard_name(name, suffix=SHARD_REPORT_SUFFIX)
    return not folder and (
        name in _METADATA_FILES
        or name in TFDS_FILES
        or is_temporary(name)
        or is_shard_name(name, suffix="")
    )


def remove_temporaries(output_dir: str) -> list[str]:
    """Removes the temporaries of shards, indexes and report parts that a build stopped half-way
    through writing leaves behind; what it finished stays. Returns their names (relative).

    An object store has none (a file there is written under its final name, and appears only
    once complete): its folders are not listed for them.
    """
    fs, path = fsspec.core.url_to_fs(output_dir)
    if is_object_store(fs):
        return []
    fs.invalidate_cache(path)
    removed = []
    for folder in ("", INDEX_DIR, SHARD_REPORTS_DIR):
        try:
            listed = fs.ls(posixpath.join(path, folder) if folder else path, detail=True)
        except FileNotFoundError:
            continue
        files = [e["name"] for e in listed if e.get("type") != "directory"]
        # A temporary folder (the report's parts) is `report.remove_parts`'s to remove.
        for name in sorted(posixpath.basename(p.rstrip("/")) for p in files):
            if is_temporary(name):
                remove(
                    fs, posixpath.join(path, folder, name) if folder else posixpath.join(path, name)
                )
                removed.append(posixpath.join(folder, name))
    return removed


def remove_stale_files(output_dir: str, keep: Iterable[str]) -> list[str]:
    """Removes the shards and temporaries of earlier or failed attempts that this build did not write.

    Only files a build writes are touched; anything else a user keeps in the folder stays.
    Names, kept and removed, are relative to the folder: a stale shard's index is
    `index/{shard}.index`.
    """
    return remove_files(output_dir, stale_files(output_dir, keep))


def stale_files(output_dir: str, keep: Iterable[str]) -> list[str]:
    """The files `remove_stale_files` would remove, found and left in place."""
    fs, path = fsspec.core.url_to_fs(output_dir)
    # s3fs and gcsfs cache listings for the life of the process; this one must be fresh.
    fs.invalidate_cache(path)
    keep = set(keep) | set(_METADATA_FILES)

    def listing(folder: str) -> list[str]:
        try:
            return fs.ls(posixpath.join(path, folder) if folder else path, detail=False)
        except FileNotFoundError:
            return []

    folders = ("", INDEX_DIR, SHARD_REPORTS_DIR)
    stale = []
    # Listed at once: on an object store each listing is a round trip.
    for folder, listed in zip(
        folders, run_concurrently([functools.partial(listing, f) for f in folders]), strict=True
    ):
        for name in sorted(posixpath.basename(p.rstrip("/")) for p in listed):
            relative = posixpath.join(folder, name)
            if relative not in keep and is_build_file(relative):
                stale.append(relative)
    return stale


def remove_files(output_dir: str, names: Iterable[str]) -> list[str]:
    """Removes files of the folder (names relative to it) at once (on a store, a round trip);
    the names of those it removed, not of those already gone (a temporary file a publish was
    writing when the folder was listed)."""
    fs, path = fsspec.core.url_to_fs(output_dir)

    def remove_one(name: str) -> str | None:
        try:
            remove(fs, posixpath.join(path, name))
        except FileNotFoundError:
            return None
        return name

    return [n for n in run_concurrently([functools.partial(remove_one, n) for n in names]) if n]
