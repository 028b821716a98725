"""What a build's output folder holds, judged by file names: finished shards, and gaps.

A build publishes each shard under its final name when it is whole and writes manifest.json
last, so a folder with shards and no manifest.json is a build that did not finish.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from collections.abc import Iterable

__all__ = ["SHARD_NAME", "missing_shards", "mixed_sets", "shard_names"]

# `{name}-{split}.tfrecord-00003-of-00010`, as sharding.shard_file_name writes them.
SHARD_NAME = re.compile(r"^(?P<stem>[^/]+\.tfrecord)-(?P<index>\d{5})-of-(?P<count>\d{5})$")


def shard_names(paths: Iterable[str]) -> list[str]:
    """The base names among `paths` that are finished shards (hidden temporary files are not)."""
    names = (posixpath.basename(p.rstrip("/")) for p in paths)
    return sorted(n for n in names if SHARD_NAME.match(n))


def missing_shards(names: Iterable[str]) -> list[str]:
    """Shards the names of the ones present say exist (`-of-N`) but that are not among them.

    A split whose shards name more than one count (`mixed_sets`) holds more than one build's
    shards: which set is this build's the names cannot say, so none of its gaps are listed.
    """
    present = set(names)
    mixed = mixed_sets(present)
    missing = set()
    for name in present:
        match = SHARD_NAME.match(name)
        if match is None or match["stem"] in mixed:
            continue
        count = int(match["count"])
        for index in range(count):
            expected = f"{match['stem']}-{index:05d}-of-{count:05d}"
            if expected not in present:
                missing.add(expected)
    return sorted(missing)


def mixed_sets(names: Iterable[str]) -> dict[str, dict[int, int]]:
    """The splits whose shards name more than one count (`x-train.tfrecord-00000-of-00002`
    beside `...-of-00003`, left by another build): for each split's file stem, how many shards
    of each count are there."""
    sets: dict[str, Counter[int]] = {}
    for name in set(names):
        match = SHARD_NAME.match(name)
        if match is not None:
            sets.setdefault(match["stem"], Counter())[int(match["count"])] += 1
    return {stem: dict(sorted(c.items())) for stem, c in sorted(sets.items()) if len(c) > 1}
