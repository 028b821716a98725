"""The metadata that flows through a build: one entry per image, one report line per input not written."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

__all__ = ["ImageEntry", "Reason", "ReportEntry"]


class Reason:
    """Stable reason codes of the report, one per way an input can fail to be written."""

    NO_LABEL = "no_label"
    UNKNOWN_CLASS = "unknown_class"
    BAD_CLASS_NAME = "bad_class_name"  # a name no labels file can hold (labels.class_name_problem)
    READ_ERROR = "read_error"
    VANISHED = "vanished"
    SOURCE_CHANGED = "source_changed"
    TOO_LARGE = "larger_than_max_shard_size"
    DUPLICATE = "duplicate"  # byte-identical to another input, which was written instead
    # Image checks add their own codes (empty_file, truncated, corrupt, too_many_pixels, ...).


@dataclass(frozen=True)
class ImageEntry:
    """Everything known about one image before its shard is written; no pixel data.

    The planner places it by `shuffle_key` and `record_size`; the shard writer reads `url` and
    checks that what it reads is still what was planned.
    """

    url: str
    relpath: str
    source_size: int
    split: str
    shuffle_key: int
    label: str | None = None
    class_id: int | None = None
    image_format: str = ""
    height: int = 0
    width: int = 0
    channels: int = 0
    reencode: bool = False
    encoded_size: int = 0
    record_size: int = 0
    notes: tuple[str, ...] = ()
    source_sha256: str = ""  # of the source's bytes, when the build hashes sources (--dedup)

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.shuffle_key, self.relpath)


@dataclass(frozen=True)
class ReportEntry:
    """One line of the report: an input that was not written (or was changed), and why."""

    url: str
    relpath: str
    reason: str
    message: str
    action: str = "skipped"  # "skipped", or "modified" for written images the build had to change
    split: str | None = None
    label: str | None = None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v not in (None, ())}
        if "notes" in data:
            data["notes"] = list(data["notes"])
        return json.dumps(data, ensure_ascii=False, sort_keys=True)

    @property
    def sort_key(self) -> tuple[str, str, str]:
        return (self.relpath, self.url, self.reason)
