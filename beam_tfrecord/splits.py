"""Split assignment and shuffle order from salted hashes of an image's relative path.

Both depend only on the seed and the path, never on what else is in the collection or on worker
order, so adding images never moves an old image to another split, and any runner gives the same
order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["assign_split", "shuffle_key", "unit_interval"]

_TWO_64 = float(2**64)


# blake2b's `person` keeps the split hash and the shuffle hash independent for the same seed.
# A hasher set up once per purpose and copied for each key costs a fifth less than a new one
# with its parameters (two hashes for every image a build plans); the digests are the same.
_HASHERS = {
    purpose: hashlib.blake2b(digest_size=8, person=purpose)
    for purpose in (b"bt-split", b"bt-shufl")
}


def _hash64(purpose: bytes, seed: int, key: str) -> int:
    hasher = _HASHERS[purpose].copy()
    hasher.update(f"{seed}\x00{key}".encode("utf-8", "surrogatepass"))
    return int.from_bytes(hasher.digest(), "big")


def unit_interval(seed: int, key: str) -> float:
    """A uniform number in [0, 1) fixed by `seed` and `key`."""
    return _hash64(b"bt-split", seed, key) / _TWO_64


def assign_split(key: str, splits: Sequence[tuple[str, float]], seed: int) -> str:
    """The split of the image whose relative path (or group key) is `key`.

    Args:
        key: the image's relative path.
        splits: (name, ratio) pairs whose ratios sum to 1.
        seed: the build's seed.
    """
    u = unit_interval(seed, key)
    cumulative = 0.0
    for name, ratio in splits:
        cumulative += ratio
        if u < cumulative:
            return name
    # Rounding can leave the cumulative sum a hair under 1; the remainder belongs to the last
    # split with a non-zero ratio.
    return next(name for name, ratio in reversed(splits) if ratio > 0)


def shuffle_key(key: str, seed: int) -> int:
    """A 64-bit sort key that orders a split's records at random, the same on every runner."""
    return _hash64(b"bt-shufl", seed, key)
