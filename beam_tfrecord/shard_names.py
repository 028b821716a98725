"""Shard file names: the one place that formats, parses and matches them.

A build names its shards as TensorFlow Datasets does, `{name}-{split}.tfrecord-00003-of-00010`:
the index and the count are written with at least five digits, and with as many more as a count
of 100,000 shards or more needs. Every reader of a build folder (the reader, `verify`, resume,
the manifest's clean-up) recognizes names through this module, so a name the writer gives is a
name they all know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ShardName",
    "count_suffix",
    "is_shard_name",
    "parse_shard_name",
    "shard_file_name",
    "shard_name_prefix",
    "shard_order",
    "shard_stem",
    "tfds_filepath_template",
]

# The digits of an index and of a count: five at least, as TFDS writes them, more when needed.
_DIGITS = 5
_PATTERN = re.compile(r"(?P<prefix>[^/]+)\.tfrecord-(?P<index>\d{5,})-of-(?P<count>\d{5,})")


@dataclass(frozen=True)
class ShardName:
    """A shard's file name taken apart: `{prefix}.tfrecord-{index}-of-{count}`.

    `prefix` is `{name}-{split}`; `stem` is `{prefix}.tfrecord`, what all of a split's shards
    share.
    """

    prefix: str
    index: int
    count: int

    @property
    def stem(self) -> str:
        return shard_stem(self.prefix)

    @property
    def split(self) -> str | None:
        """The split the name gives: what follows the prefix's last "-" (a split's name has
        none); None for a prefix without one, which names no split."""
        name, dash, split = self.prefix.rpartition("-")
        return split if dash and name else None

    def __str__(self) -> str:
        return f"{self.stem}-{self.index:0{_DIGITS}d}{count_suffix(self.count)}"

    def sibling(self, index: int) -> str:
        """The name of shard `index` of the same set."""
        return str(ShardName(self.prefix, index, self.count))


def count_suffix(count: int) -> str:
    """How the names of a set of `count` shards end: `-of-00010`."""
    return f"-of-{count:0{_DIGITS}d}"


def shard_stem(prefix: str) -> str:
    """What all shards of a split share: `{name}-{split}.tfrecord`."""
    return f"{prefix}.tfrecord"


def shard_name_prefix(name: str, split: str) -> str:
    """The prefix of a split's shard names: `{name}-{split}`."""
    return f"{name}-{split}"


def shard_file_name(name: str, split: str, index: int, shards: int) -> str:
    """TensorFlow Datasets' naming: `{name}-{split}.tfrecord-00003-of-00010`."""
    return str(ShardName(shard_name_prefix(name, split), index, shards))


def parse_shard_name(file_name: str) -> ShardName | None:
    """The parts of a shard's file name (a base name); None for any other name.

    A hidden temporary a shard is written under before it is published is not a shard's name.
    """
    match = _PATTERN.fullmatch(file_name)
    if match is None or file_name.startswith("."):
        return None
    return ShardName(match["prefix"], int(match["index"]), int(match["count"]))


def tfds_filepath_template(name: str) -> str:
    """The shard names of dataset `name` in TFDS's template language (its `filepathTemplate`).

    The dataset name is spelled out rather than left to {DATASET}: TFDS's {DATASET} only matches
    names that are Python identifiers, and ours may hold '-' and '.'.
    """
    return f"{shard_name_prefix(name, '{SPLIT}')}.{{FILEFORMAT}}-{{SHARD_X_OF_Y}}"


def shard_order(file_name: str) -> tuple[str, int, int]:
    """A sort key for shard names: by split, then count, then index, the numbers as numbers."""
    shard = parse_shard_name(file_name)
    return (file_name, 0, 0) if shard is None else (shard.prefix, shard.count, shard.index)


def is_shard_name(file_name: str, suffix: str | None = None) -> bool:
    """Whether a base name is a shard's, or with `suffix` a shard's name and then `suffix`
    (`.index`); with `suffix=""`, a shard's name followed by anything (what a reader's glob
    `*.tfrecord-*-of-*` over a split's shards would also match)."""
    if file_name.startswith("."):
        return False
    if suffix is None:
        return _PATTERN.fullmatch(file_name) is not None
    if suffix == "":
        return _PATTERN.match(file_name) is not None
    return file_name.endswith(suffix) and is_shard_name(file_name[: -len(suffix)])
