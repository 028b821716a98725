"""Counts as people write them: "1 file", "2 files"."""

from __future__ import annotations

__all__ = ["count"]


def count(number: int, noun: str, plural: str | None = None) -> str:
    """`count(1, "file")` is "1 file"; `count(2, "file")` is "2 files"; `plural` for irregulars."""
    return f"{number} {noun if number == 1 else (plural or noun + 's')}"
