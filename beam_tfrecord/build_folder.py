"""What a build's output folder holds, judged by file names: finished shards, and gaps.

A build publishes each shard under its final name when it is whole and writes manifest.json
last, so a folder with shards and no manifest.json is a build that did not finish.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

__all__ = ["SHARD_NAME", "missing_shards", "shard_names"]

# `{name}-{split}.tfrecord-00003-of-00010`, as sharding.shard_file_name writes them.
SHARD_NAME = re.compile(r"^(?P<stem>[^/]+\.tfrecord)-(?P<index>\d{5})-of-(?P<count>\d{5})$")


def shard_names(paths: Iterable[str]) -> list[str]:
    """The base names among `paths` that are finished shards (hidden temporary files are not)."""
    names = (posixpath.basename(p.rstrip("/")) for p in paths)
    return sorted(n for n in names if SHARD_NAME.match(n))


def missing_shards(names: Iterable[str]) -> list[str]:
    """Shards the names of the ones present say exist (`-of-N`) but that are not among them."""
    present = set(names)
    missing = set()
    for name in present:
        match = SHARD_NAME.match(name)
        if match is None:
            continue
        count = int(match["count"])
        for index in range(count):
            expected = f"{match['stem']}-{index:05d}-of-{count:05d}"
            if expected not in present:
                missing.add(expected)
    return sorted(missing)
