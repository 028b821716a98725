"""The `beam-tfrecord verify` command: check every record's CRCs, and that it is an Example.

A shard in a build's output folder is also held to what the build's manifest.json says of it:
its record count, its size, the CRC32C of the whole file and its record index. A shard the
manifest lists but the folder lacks is reported missing; a file named like a shard that it does
not list is a stray (or damaged, if its records are): sound or not, a reader globbing the
build's shards would read it too. Other files in the folder (a preview image, notes) are not the
build's, and are only counted.
"""

from __future__ import annotations

import argparse
import posixpath

from beam_tfrecord.commands.arguments import (
    add_compression_argument,
    builds_own,
    expand_or_complain,
    given_path,
    print_error,
)
from beam_tfrecord.shard_names import count_suffix
from beam_tfrecord.verification import (
    FileReport,
    ManifestShards,
    check_against_manifest,
    incomplete_builds,
    verify_file,
)

__all__ = ["add_arguments", "run"]


# What the exit status says, in --help and the commands reference: the reading commands' rule.
_EXIT_STATUSES = (
    "Exit status: 0 when every file is sound; 1 on any finding (DAMAGED, STRAY, MISSING, "
    "INCOMPLETE, MIXED, UNREADABLE) or a path naming nothing to check (none there, or a "
    "folder with no TFRecord files); 2 for a bad flag or value."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declares the command's arguments."""
    parser.epilog = _EXIT_STATUSES
    parser.add_argument(
        "paths",
        nargs="+",
        type=given_path,
        metavar="PATH",
        help="TFRecord files, directories (every file below, hidden and .json/.txt/.index "
        "files excepted; in a build folder, only the build's shards and files named like them), "
        "globs; local or any fsspec URL (gs://...)",
    )
    add_compression_argument(parser)
    parser.add_argument(
        "--loose",
        action="store_true",
        help="check the files on their own: a build folder without manifest.json is not an error",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="only check framing and CRCs: records need not be tf.train.Examples",
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _renamed_from(report: FileReport, missing: list[str], manifests: ManifestShards) -> str | None:
    """The missing listed shard a stray file holds, byte for byte (a shard renamed)."""
    for url in missing:
        listed = manifests.shard(url) or {}
        if (listed.get("bytes"), listed.get("crc32c")) == (report.bytes, report.crc32c):
            return posixpath.basename(url)
    return None


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Verifies the files; returns 0 when all are sound, 1 otherwise."""
    del extra  # the dispatcher refuses unknown flags for this command
    others: list[str] = []  # files of build folders that are not the build's
    own: list[str] = []  # a build's manifest, labels, report and indexes, named one by one
    files, unmatched = expand_or_complain(
        args.paths, "verify", others=others, own=own, compression=args.compression
    )
    totals = {"records": 0, "bytes": 0, "damaged": 0, "stray": 0, "unreadable": 0}
    manifests = ManifestShards()
    for url in files:  # each folder's manifest read first, for the shards it lists are missing
        manifests.shard(url)
    missing = manifests.missing()
    not_examples = _check_files(files, args, manifests, missing, totals)
    for url in missing:
        print(f"MISSING  {url}: manifest.json lists this shard, but it is not there")
    # A build folder whose manifest cannot be read as one is no finished build: its shards were
    # held to nothing. With --loose, as for a folder without one, the files alone count.
    damaged_manifests = [] if args.loose else manifests.damaged()
    for url, why in damaged_manifests:
        print(f"DAMAGED  {url}: {why}; the shards beside it were checked on their own")
    incomplete = [] if args.loose else incomplete_builds(args.paths, files)
    _print_incomplete(incomplete)
    failed = (
        totals["damaged"]
        or totals["stray"]
        or totals["unreadable"]
        or missing
        or incomplete
        or damaged_manifests
    )
    mixed_sets = sum(len(mixed) for *_, mixed in incomplete)
    sound = len(files) - totals["damaged"] - totals["stray"] - totals["unreadable"]
    print(
        f"total: {_count(len(files), 'file')}, {_count(totals['records'], 'record')}, "
        f"{_count(totals['bytes'], 'byte')}; "
        f"{sound} OK, {totals['damaged']} DAMAGED"
        + (f", {totals['stray']} STRAY" if totals["stray"] else "")
        + (
            f", {totals['unreadable']} UNREADABLE (not read: run verify again, or check access)"
            if totals["unreadable"]
            else ""
        )
        + (f", {len(missing)} MISSING" if missing else "")
        + (f", {_count(len(damaged_manifests), 'manifest')} DAMAGED" if damaged_manifests else "")
        + (f", {len(incomplete)} INCOMPLETE" if incomplete else "")
        + (f", {mixed_sets} MIXED" if mixed_sets else "")
        + (f"; {_count(len(others), 'other file')} not checked (not the build's)" if others else "")
        + (f"; not checked: {builds_own(own)}" if own else "")
        + (f"; {len(unmatched)} matched nothing" if unmatched else "")
    )
    if not_examples:
        print("(files of records that are not tf.train.Examples can be checked with --raw)")
    if not files and own:  # `verify out/labels.txt`: a script's `verify ... &&` must not pass
        print_error("verify", f"nothing to check: {builds_own(own)}")
    return 1 if unmatched or failed or not files else 0


def _check_files(
    files: list[str],
    args: argparse.Namespace,
    manifests: ManifestShards,
    missing: list[str],
    totals: dict[str, int],
) -> bool:
    """Checks and prints each file, adding its figures to `totals`; whether one's records are
    not Examples (which --raw would check)."""
    not_examples = False
    for url in files:
        report, unreadable, stray = _check_file(url, args, manifests, missing)
        not_examples = _print_file(url, report, unreadable, stray) or not_examples
        totals["records"] += report.records
        totals["bytes"] += report.bytes
        totals["unreadable"] += unreadable
        totals["stray"] += stray
        totals["damaged"] += not report.ok and not stray and not unreadable
    return not_examples


def _check_file(
    url: str, args: argparse.Namespace, manifests: ManifestShards, missing: list[str]
) -> tuple[FileReport, bool, bool]:
    """One file checked, in itself and against its folder's manifest: its report, whether it
    could not be read, and whether it is a stray (sound, named like a shard, not listed)."""
    try:
        report = verify_file(url, args.compression, examples=not args.raw)
        shard = manifests.shard(url)
        unlisted = shard is None and manifests.unlisted(url)
        # Sound in itself, but not the build's: not damage, and not to be left there.
        stray = unlisted and report.ok
        if shard is not None:
            check_against_manifest(report, shard)
        elif unlisted:
            renamed = _renamed_from(report, missing, manifests) if stray else None
            report.errors.append(
                f"{url}: not in manifest.json, but named like a shard: a reader globbing "
                "the build's shards would read it too; "
                + (
                    f"it holds what manifest.json lists for {renamed}, which is missing: "
                    "rename it back"
                    if renamed
                    else "remove it"
                )
            )
    except OSError as error:  # unreadable: permissions, a vanished file, the network
        # Not damage: the file may be sound, and the store's trouble pass.
        return FileReport(path=url, errors=[f"{url}: cannot read: {error}"]), True, False
    return report, False, stray


def _print_file(url: str, report: FileReport, unreadable: bool, stray: bool) -> bool:
    """Prints a file's verdict and its errors; whether one says its records are not Examples."""
    if unreadable:
        print(f"UNREADABLE {url}")
    else:
        state = "STRAY" if stray else "OK" if report.ok else "DAMAGED"
        # "checked" of a sound file only: a damaged one's lines below say what did not hold.
        held = "checked" if report.ok else "compared"
        print(
            f"{state:8s} {url}: {_count(report.records, 'record')}, "
            f"{_count(report.bytes, 'byte')}"
            + (f", index {held}" if report.index else "")
            + (f", manifest {held}" if report.manifest else "")
        )
    not_examples = False
    for message in report.errors:
        print(f"         {message}")
        not_examples = not_examples or "tf.train.Example" in message
    return not_examples


def _print_incomplete(
    incomplete: list[tuple[str, list[str], list[str], dict[str, dict[int, int]]]],
) -> None:
    """Prints the build folders without manifest.json: their gaps, and their mixed sets."""
    for folder, shards, gaps, mixed in incomplete:
        print(
            f"INCOMPLETE {folder}: a build folder without manifest.json (an interrupted or "
            f"unfinished build): {_count(len(shards), 'shard')} there"
            + (f", {_count(len(gaps), 'shard')} missing by their names" if gaps else "")
            + "; finish it with `beam-tfrecord build ... --resume`, or pass --loose to check "
            "the files alone"
        )
        for name in gaps[:10]:
            print(f"MISSING  {posixpath.join(folder, name)}")
        if len(gaps) > 10:
            print(f"         ... and {_count(len(gaps) - 10, 'more shard')}")
        for stem, sets in mixed.items():
            described = "; ".join(
                f"{count_suffix(total)}: {'all' if there == total else there} of {total} there"
                for total, there in sets.items()
            )
            print(
                f"MIXED    {posixpath.join(folder, stem)}-*: shards of more than one build "
                f"({described}); a reader globbing them reads them all: remove the set that is "
                "not this build's"
            )
