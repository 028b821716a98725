"""Words as people write them: counts ("1 file", "2 files"), and the nearest of known names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["count", "flag_meant", "nearest"]


def count(number: int, noun: str, plural: str | None = None) -> str:
    """`count(1, "file")` is "1 file"; `count(2, "file")` is "2 files"; `plural` for irregulars."""
    return f"{number} {noun if number == 1 else (plural or noun + 's')}"


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known name `word` most likely mistypes (`--lose` for `--loose`), if one is close.

    Flags are compared without their leading dashes (which would make `--n` look like
    `--json`) and without case; a flag's dashes and underscores are taken as the same, since
    Beam's flags use underscores where this tool's use dashes.
    """

    by_body: dict[str, str] = {}
    for name in known:
        by_body.setdefault(_body(name), name)
    close = difflib.get_close_matches(_body(word), list(by_body), n=1, cutoff=0.6)
    return by_body[close[0]] if close else None


def flag_meant(flag: str, flags: Iterable[str]) -> str | None:
    """The flag an unknown `flag` most likely stands for: the nearest (`nearest`), or else the
    one it abbreviates, or the two or three (`--comp` for `--compression`, `--in` for `--input
    or --input-list`), which no command takes (`commands.cli`); None if none is likely."""
    flags = list(flags)
    close = nearest(flag, flags)
    if close is not None:
        return close
    begun: dict[str, str] = {}
    for name in flags:
        if _body(name).startswith(_body(flag)):
            begun.setdefault(_body(name), name)
    if not 1 <= len(begun) <= 3:
        return None
    *others, last = begun.values()
    return f"{', '.join(others)} or {last}" if others else last


def _body(name: str) -> str:
    """A name as names are compared: a flag without its dashes (which would make `--n` look
    like `--json`), in lower case, `_` taken as `-` (Beam's flags use underscores)."""
    return name.lstrip("-").lower().replace("_", "-")
