"""The tf.io.parse_example feature spec of a built dataset, read from its records."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from beam_tfrecord.codec.example import decode_example_kinds
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.codec.records import sample_record
from beam_tfrecord.manifest import MANIFEST_FILE, read_manifest
from beam_tfrecord.reader import MissingRecordsError, Shard, list_shards
from beam_tfrecord.shard_names import parse_shard_name

__all__ = ["feature_spec", "spec_to_python"]

_DTYPES = {"bytes": "string", "int64": "int64", "float": "float32"}


def _layout(labels: bool) -> dict[str, str]:
    """Feature name -> kind of the records a build writes, read from what the writer writes."""
    kinds = decode_example_kinds(sample_record(labels=labels))
    # The order of docs/reading/index.md's record table: the image, its shape, its class, then where it came from.
    order = ["image/encoded", "image/format", "image/height", "image/width", "image/channels",
             "image/class/label", "image/class/text", "image/filename", "image/key/sha256"]  # fmt: skip
    names = sorted(
        kinds, key=lambda name: (order.index(name) if name in order else len(order), name)
    )
    return {name: kinds[name][0] for name in names}


@dataclass
class _Seen:
    """What the scanned records hold for one feature."""

    present: int = 0
    kinds: set[str] = field(default_factory=set)
    lengths: set[int] = field(default_factory=set)


def _scan_order(shards: list[Shard]) -> list[Shard]:
    """The first shard of every split, then the second..., so every split is scanned early."""

    def index(shard: Shard) -> int:
        name = parse_shard_name(posixpath.basename(shard.url))
        return name.index if name else 0

    return sorted(shards, key=index)  # stable: splits keep the manifest's order


def _records(shards: list[Shard], limit: int | None) -> Iterator[tuple[str, int, bytes]]:
    left = limit
    for shard in _scan_order(shards):
        found = 0
        for offset, data in read_records(shard.url, with_offsets=True):
            if left is not None:
                if left == 0:
                    return
                left -= 1
            found += 1
            yield shard.url, offset, data
        missing = MissingRecordsError.of(shard.url, found, shard.examples)
        if missing is not None:
            raise missing


def _scan_limit(scan: int | None) -> int | None:
    """The records to read at most; None for all (0 or None, as `spec --scan 0`)."""
    if scan is not None and scan < 0:
        raise ValueError(f"scan must be a number of records, or 0 or None for all; got {scan}")
    return scan or None


def feature_spec(source: str, scan: int | None = 1000, *, loose: bool = False) -> dict[str, Any]:
    """Works out the feature spec of a built dataset, from its manifest and its records.

    A feature present in every scanned record with lists of one length k is a
    ``FixedLenFeature`` (shape ``[]`` for k = 1, ``[k]`` otherwise); one whose lists vary, or
    that some records lack, is a ``VarLenFeature``. The manifest says which features a build
    wrote (no class features with ``--labels none``) and holds them constant, which covers
    the records not scanned and a dataset with no records at all.

    Args:
        source: The build's output folder, a path or any fsspec URL.
        scan: At most this many records are read (the first shard of every split first);
            None or 0 reads them all, as `beam-tfrecord spec --scan 0` does.
        loose: Read the shards of a build that did not finish (no manifest.json), as
            ``list_shards`` does.

    Returns:
        A JSON-ready description: ``source``, ``manifest`` (whether there is one),
        ``records`` (the total, None when unknown), ``scanned`` and ``features``, name ->
        ``{"kind", "dtype", "parser", "shape"}`` (shape None for a VarLenFeature).

    Raises:
        FileNotFoundError: If there is no dataset at ``source``, or only the shards of a build
            that did not finish (and not ``loose``).
        CorruptRecordError: If a scanned record is damaged.
        MissingRecordsError: If a shard read to its end holds another number of records than
            the manifest says.
        ValueError: If ``source`` is empty, a record is not a tf.train.Example, a feature's
            kind varies, or `scan` is negative.
    """
    scan = _scan_limit(scan)
    shards = list_shards(source, loose=loose)  # first: it refuses an empty source by name
    try:
        manifest: Mapping[str, Any] | None = read_manifest(source)
    except FileNotFoundError:
        manifest = None
    expected: dict[str, str] = {}
    total = None
    if manifest is not None:
        expected = _layout(labels=manifest.get("config", {}).get("labels") != "none")
        total = sum(int(shard["examples"]) for shard in manifest.get("shards", []))
    seen: dict[str, _Seen] = {}
    scanned = 0
    for url, offset, data in _records(shards, scan):
        try:
            features = decode_example_kinds(data)
        except ValueError as error:
            raise ValueError(f"{url}: record at byte offset {offset}: {error}") from None
        scanned += 1
        for name, (kind, values) in features.items():
            stats = seen.setdefault(name, _Seen())
            stats.present += 1
            stats.lengths.add(len(values))
            if kind is not None:  # a list of no kind reads as an empty list of any
                stats.kinds.add(kind)
                if len(stats.kinds) > 1:
                    raise ValueError(
                        f"{url}: record at byte offset {offset}: feature {name!r} holds "
                        f"{kind} values, other records {' and '.join(sorted(stats.kinds - {kind}))}; "
                        f"tf.io.parse_example cannot parse it"
                    )
    if total is None and (scan is None or scanned < scan):
        total = scanned  # every record was read
    spec: dict[str, Any] = {}
    for name in [*expected, *sorted(set(seen) - set(expected))]:
        stats = seen.get(name)
        kinds = stats.kinds if stats else set()
        # A feature whose lists are all empty has no kind to see: the manifest's, or bytes.
        kind = next(iter(kinds), None) or expected.get(name) or "bytes"
        if stats is None:
            # Expected but never seen: constant in a build with no records, absent otherwise.
            fixed_length = 1 if scanned == 0 else None
        elif stats.present == scanned and len(stats.lengths) == 1 and min(stats.lengths) > 0:
            fixed_length = min(stats.lengths)
        else:
            fixed_length = None
        spec[name] = {
            "kind": kind,
            "dtype": _DTYPES[kind],
            "parser": "VarLenFeature" if fixed_length is None else "FixedLenFeature",
            "shape": None
            if fixed_length is None
            else ([] if fixed_length == 1 else [fixed_length]),
        }
    return {
        "source": source,
        "manifest": manifest is not None,
        "records": total,
        "scanned": scanned,
        "features": spec,
    }


def spec_to_python(description: Mapping[str, Any], variable: str = "feature_spec") -> str:
    """Ready-to-paste Python for a ``feature_spec`` description.

    Args:
        description: What ``feature_spec`` returned.
        variable: The name the spec is assigned to.

    Returns:
        Python source that imports TensorFlow and defines ``variable``.
    """
    scanned, total = description["scanned"], description["records"]
    if total is not None and scanned == total:
        evidence = f"all {total} records" if total != 1 else "its one record"
    elif total is not None:
        evidence = (
            f"the first {scanned} of {total} records"
            if scanned != 1
            else f"the first record of {total}"
        )
    else:
        evidence = f"the first {scanned} records" if scanned != 1 else "the first record"
    evidence = f"{MANIFEST_FILE} and {evidence}" if description["manifest"] else evidence
    lines = [
        f"# The tf.io.parse_example feature spec of {description['source']}, from {evidence}",
        "# (written by `beam-tfrecord spec`).",
        "import tensorflow as tf",
        "",
        f"{variable} = {{",
    ]
    for name, feature in description["features"].items():
        dtype = f"tf.{feature['dtype']}"
        if feature["parser"] == "FixedLenFeature":
            parser = f"tf.io.FixedLenFeature({feature['shape']}, {dtype})"
        else:
            parser = f"tf.io.VarLenFeature({dtype})"
        lines.append(f"    {json.dumps(name)}: {parser},")
    lines.append("}")
    return "\n".join(lines) + "\n"
