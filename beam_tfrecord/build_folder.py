"""What a build's output folder holds, judged by file names: finished shards, gaps, and traces.

A build publishes each shard under its final name when it is whole and writes manifest.json
last, so a folder with shards and no manifest.json is a build that did not finish.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Iterable

from beam_tfrecord.manifest import BUILD_FOLDERS, REPORT_FILE, SETTINGS_FILE
from beam_tfrecord.output_lock import LOCK_FILE
from beam_tfrecord.shard_names import is_shard_name, parse_shard_name, shard_order

__all__ = [
    "build_traces",
    "finished_shard_names",
    "finished_shards",
    "missing_shards",
    "mixed_sets",
    "shard_names",
]


def finished_shards(output: str) -> dict[str, dict] | None:
    """The finished shards the folder `output` holds, by name in shard order, each with what its
    file system's listing says of it (size, when it was written...); None if it cannot be
    listed."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(output)
        fs.invalidate_cache(path)  # object stores cache listings
        listed = fs.ls(path, detail=True) if fs.isdir(path) else []
    except OSError:
        return None
    by_name = {posixpath.basename(entry["name"].rstrip("/")): entry for entry in listed}
    return {name: by_name[name] for name in shard_names(by_name)}


def finished_shard_names(output: str) -> list[str] | None:
    """The finished shards (by their names) the folder `output` holds; None if it cannot be
    listed."""
    shards = finished_shards(output)
    return None if shards is None else list(shards)


def shard_names(paths: Iterable[str]) -> list[str]:
    """The base names among `paths` that are finished shards (hidden temporary files are not),
    in the order of their sets and indexes (not of their text: 100000 sorts after 99999)."""
    names = (posixpath.basename(p.rstrip("/")) for p in paths)
    return sorted((n for n in names if is_shard_name(n)), key=shard_order)


def missing_shards(names: Iterable[str]) -> list[str]:
    """Shards the names of the ones present say exist (`-of-N`) but that are not among them.

    A split whose shards name more than one count (`mixed_sets`) holds more than one build's
    shards: which set is this build's the names cannot say, so none of its gaps are listed.
    """
    present = set(names)
    mixed = mixed_sets(present)
    # One shard of each set stands for its set: a set is walked once, not once a shard.
    sets = {}
    for name in present:
        shard = parse_shard_name(name)
        if shard is not None and shard.stem not in mixed:
            sets.setdefault(shard.stem, shard)
    missing = set()
    for shard in sets.values():
        missing.update(n for n in map(shard.sibling, range(shard.count)) if n not in present)
    return sorted(missing, key=shard_order)


def mixed_sets(names: Iterable[str]) -> dict[str, dict[int, int]]:
    """The splits whose shards name more than one count (`x-train.tfrecord-00000-of-00002`
    beside `...-of-00003`, left by another build): for each split's file stem, how many shards
    of each count are there."""
    sets: dict[str, Counter[int]] = {}
    for name in set(names):
        shard = parse_shard_name(name)
        if shard is not None:
            sets.setdefault(shard.stem, Counter())[shard.count] += 1
    return {stem: dict(sorted(c.items())) for stem, c in sorted(sets.items()) if len(c) > 1}


def build_traces(files: Iterable[str], folders: Iterable[str]) -> list[str]:
    """What a build of this tool leaves in its output folder before it writes manifest.json, among
    the names of the folder's `files` and `folders`: its shards' `index/` and `reports/` folders
    (each shard's report lines are published before the shard itself), its `report.jsonl`, the
    record of its settings it writes as it starts, and the lock a local build holds. Shards
    another tool wrote come with none of them.

    Returns:
        The traces found, as a listing names them (`index/`, `report.jsonl`...).
    """
    files, folders = set(files), set(folders)
    found = [f"{name}/" for name in BUILD_FOLDERS if name in folders]
    return found + [name for name in (REPORT_FILE, SETTINGS_FILE, LOCK_FILE) if name in files]
