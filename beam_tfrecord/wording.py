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

    Flags are compared without their leading dashes (which would make `--n` look like
    `--json`) and without case; a flag's dashes and underscores are taken as the same, since
    Beam's flags use underscores where this tool's use dashes.
    """

    def body(name: str) -> str:
        return name.lstrip("-").lower().replace("_", "-")

    by_body: dict[str, str] = {}
    for name in known:
        by_body.setdefault(body(name), name)
    close = difflib.get_close_matches(body(word), list(by_body), n=1, cutoff=0.6)
    return by_body[close[0]] if close else None
