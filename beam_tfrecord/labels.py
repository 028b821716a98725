"""Class labels: derived from an image's folder or from a regex over its path, and mapped to ids."""

from __future__ import annotations

import functools
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Sequence

from beam_tfrecord.locations import without_protocol

__all__ = ["ClassMap", "LabelRule", "class_name_problem"]

# Unicode categories a class name may not hold: control characters (Cc: tab, CR, LF, NEL, ...),
# line and paragraph separators (Zl, Zp), and the lone surrogates (Cs) Python puts in place of
# bytes of a file name that are not UTF-8, which no UTF-8 file can hold.
_REFUSED_CATEGORIES = {
    "Cc": "a control character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Cs": "a byte that is not UTF-8",
}
# The control characters str.splitlines breaks a line at.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85"


# Every image's label is checked, and a build has few distinct labels: remembering the answers
# takes the check from ~4 us a call (a Unicode lookup per character) to a dictionary lookup.
@functools.lru_cache(maxsize=4096)
def class_name_problem(name: str) -> str | None:
    """Why a class name cannot be a class of a build, or None when it can.

    A class name is written to labels.txt (one a line), manifest.json, TFDS's label names file
    and every Example, and must read back equal from each. Line-based readers split a name at
    any line break (`str.splitlines` at CR, LF, NEL, U+2028 and more; TFDS at LF) and TFDS
    strips each line, so a name must hold no control character or line separator and neither
    start nor end with white space.

    Returns:
        The problem as a phrase that follows the quoted name ("starts with white space"), or None.
    """
    if not name.strip():
        return "is only white space" if name else "is empty"
    for char in name:
        category = unicodedata.category(char)
        if category in _REFUSED_CATEGORIES:
            if 0xDC80 <= ord(char) <= 0xDCFF:  # surrogateescape's stand-in for byte 0x80-0xFF
                return f"holds a byte that is not UTF-8 (0x{ord(char) - 0xDC00:02X})"
            what = "a line break" if char in _LINE_BREAKS else _REFUSED_CATEGORIES[category]
            return f"holds {what} (U+{ord(char):04X})"
    if name != name.lstrip():
        return "starts with white space"
    if name != name.rstrip():
        return "ends with white space"
    return None


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
            # The last folder's name, found without posixpath's general rules (this runs for
            # every image): its answer wherever the name before the file is a plain one.
            parent = url.rpartition("/")[0].rpartition("/")[2]
            if not parent:  # no folder, a doubled slash, or only a protocol
                parent = posixpath.basename(posixpath.dirname(without_protocol(url)))
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
        for name in self.names:  # labels.txt must give these names back, line i class i
            problem = class_name_problem(name)
            if problem is not None:
                raise ValueError(f"class name {name!r} {problem}")

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
