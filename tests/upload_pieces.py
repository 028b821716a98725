"""What the upload tests write: a shard's bytes in pieces, to an upload of one class."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Iterator

from beam_tfrecord.uploads import open_upload


def pieces_of(total: int, seed: int, largest: int) -> list[bytes]:
    """`total` random bytes in pieces of uneven sizes up to `largest`, as a shard's records
    come."""
    rng = random.Random(seed)
    pieces, held = [], 0
    while held < total:
        size = min(rng.randint(1, largest), total - held)
        pieces.append(os.urandom(size))
        held += size
    return pieces


def written(fs, path: str, block: int, pieces: list[bytes], kind: type):
    """An upload of `path` opened with `block`, of class `kind`, each piece written to it."""
    upload = open_upload(fs, path, block)
    assert isinstance(upload, kind)
    for piece in pieces:
        assert upload.write(piece) == len(piece)
    return upload


@contextlib.contextmanager
def first_answered(proxy, matches: Callable[[str, str], bool], status: int) -> Iterator[list[str]]:
    """While inside, the latency proxy answers `status` to the first request for which
    `matches(method, target)` holds, and forwards every other; yields the targets it answered."""
    answered: list[str] = []

    def fault(method: str, target: str) -> int | None:
        if not answered and matches(method, target):
            answered.append(target)
            return status
        return None

    proxy.fault = fault
    try:
        yield answered
    finally:
        proxy.fault = None
