"""Class labels: derived from an image's folder or from a regex over its path, and mapped to ids."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence

__all__ = ["ClassMap", "LabelRule"]


class LabelRule:
    """Turns an image's path into its class name, per `--labels dir | regex:PATTERN | none`.

    Plain data plus a compiled regex, so it pickles into Beam workers by value.
    """

    def __init__(self, spec: str):
        self.spec = spec
        self._regex: re.Pattern[str] | None = None
        if spec.startswith("regex:"):
            self._regex = re.compile(spec[len("regex:") :])
            if self._regex.groups == 0:
                raise ValueError(f"label regex {self._regex.pattern!r} has no capture group")
        elif spec not in ("dir", "none"):
            raise ValueError(
                f"label rule must be dir (the parent folder), none or regex:PATTERN, got {spec!r}"
            )

    @property
    def enabled(self) -> bool:
        return self.spec != "none"

    def label(self, url: str, relpath: str) -> str | None:
        """The class name of an image, or None when the rule finds none.

        Args:
            url: where the image is; `dir` takes the name of its parent folder.
            relpath: its path relative to its pattern's base; `regex:` searches this.
        """
        if self._regex is None:
            if self.spec == "none":
                return None
            parent = posixpath.basename(posixpath.dirname(url.split("://", 1)[-1]))
            return parent or None
        match = self._regex.search(relpath)
        if match is None:
            return None
        group = "label" if "label" in self._regex.groupindex else 1
        return match.group(group) or None

    def __reduce__(self):
        return (LabelRule, (self.spec,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelRule) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash(self.spec)

    def __repr__(self) -> str:
        return f"LabelRule({self.spec!r})"


class ClassMap:
    """Class names in id order: line i of labels.txt is class i."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        self._ids = {name: i for i, name in enumerate(self.names)}
        if len(self._ids) != len(self.names):
            raise ValueError(f"class names repeat: {list(self.names)}")

    @classmethod
    def from_labels(cls, labels: Iterable[str]) -> ClassMap:
        """The sorted distinct labels, so ids never depend on listing or worker order."""
        return cls(sorted(set(labels)))

    def id_of(self, name: str) -> int | None:
        return self._ids.get(name)

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClassMap) and other.names == self.names

    def __repr__(self) -> str:
        return f"ClassMap({list(self.names)!r})"

    def to_text(self) -> str:
        return "".join(f"{name}\n" for name in self.names)
