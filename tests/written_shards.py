"""Helpers for tests that compare shards written two ways: a one-shard spec, and a folder's files."""

from __future__ import annotations

import hashlib
from pathlib import Path

from beam_tfrecord.entries import ShardSpec

__all__ = ["file_digests", "one_shard"]


def file_digests(folder: Path) -> dict[str, str]:
    """Every file below `folder` (shards, indexes, report lines), by relative path: its SHA-256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def one_shard(folder: Path) -> ShardSpec:
    """The spec of a split's one shard, written into `folder`."""
    return ShardSpec(str(folder), "ds-train.tfrecord-00000-of-00001", "train", 0, 1)
