"""Words as people write them: counts ("1 file", "2 files"), and the nearest of known names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["count", "nearest"]


def count(number: int, noun: str, plural: str | None = None) -> str:
    """`count(1, "file")` is "1 file"; `count(2, "file")` is "2 files"; `plural` for irregulars."""
    return f"{number} {noun if number == 1 else (plural or noun + 's')}"


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known name `word` most likely mistypes (`--lose` for `--loose`), if one is close.

    A flag's dashes and underscores are taken as the same: Beam's flags use underscores where
    this tool's use dashes.
    """
    known = list(known)
    body = word.lstrip("-")
    dashes = word[: len(word) - len(body)]
    for guess in (body, body.replace("_", "-"), body.replace("-", "_")):
        close = difflib.get_close_matches(dashes + guess, known, n=1, cutoff=0.6)
        if close:
            return close[0]
    return None
