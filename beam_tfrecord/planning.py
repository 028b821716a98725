"""Planning a listed file without reading it: its label, split, shuffle key and record size.

A build reads each image once, when its shard is written. What the plan needs of an image is
its record's size, and for an image that keeps its bytes that follows from the listed file size:
the record is those bytes plus fields of bounded size. An image the build transforms (`--resize`,
`--encode`, `--store raw`) gets an estimate, and its shard holds the real bytes; see
`estimated_encoded_size`.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import itertools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import fsspec

from beam_tfrecord.codec.records import encoded_record_size, image_record_size, other_fields_size
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry, Reason, ReportEntry
from beam_tfrecord.images import ImagePolicy, Resize
from beam_tfrecord.labels import ClassMap, LabelRule, class_name_problem
from beam_tfrecord.listing import SourceFile
from beam_tfrecord.locations import has_protocol
from beam_tfrecord.splits import assign_split, shuffle_key

__all__ = ["Preparer", "estimated_encoded_size", "preparer", "size_is_estimated"]

# The header fields of a record whose values are only known once the image is read, at their
# largest: a planned record is never smaller than the one written for an image that keeps its
# bytes, and at most a few bytes larger.
_LARGEST_SIDE = (1 << 21) - 1  # 3-byte varint; --max-pixels keeps real sides far below
_LONGEST_FORMAT = "jpeg"
_MOST_CHANNELS = 4

# The size model of images the build encodes, in bytes per pixel. Measured on photographs
# (benchmarks/collection.py, 640x480 scaled to 341x256): JPEG 0.11 at quality 75, 0.22 at 90,
# 0.36 at 95; PNG 1.6 for three channels. Drawn images and screenshots compress far better, and
# a build of them makes smaller shards than planned (docs/guide/shard-sizes.md).
_JPEG_BYTES_PER_PIXEL = ((50, 0.07), (75, 0.11), (90, 0.22), (95, 0.36), (100, 0.9))
_PNG_BYTES_PER_CHANNEL = 0.55
# What a source file holds per pixel, by its name's suffix: how many pixels a file of a given
# size has, for an image that is re-encoded without a resize that fixes its size.
_SOURCE_BYTES_PER_PIXEL = {
    "jpg": 0.33, "jpeg": 0.33, "jpe": 0.33, "jfif": 0.33, "png": 1.6, "webp": 0.25,
    "gif": 0.5, "bmp": 3.0, "tif": 2.0, "tiff": 2.0, "ppm": 3.0, "pgm": 1.0, "pnm": 3.0,
}  # fmt: skip
_LOSSY_SUFFIXES = frozenset({"jpg", "jpeg", "jpe", "jfif", "webp", "jp2", "j2k", "avif"})


def estimated_encoded_size(source_size: int, relpath: str, policy: ImagePolicy) -> int:
    """The bytes an image will be stored as, judged from its file's size and name alone.

    Exact for an image the policy keeps as it is (its own bytes). For one it transforms, an
    estimate: the output's pixels (what the resize makes of the pixels a file of this size and
    kind holds) times what a pixel costs in the output format. Only the plan uses it; shards hold
    the real bytes, so a poor estimate moves shard sizes, never what a record holds.
    """
    suffix = _suffix(relpath)
    if not size_is_estimated(relpath, policy):
        return source_size
    pixels = source_size / _SOURCE_BYTES_PER_PIXEL.get(suffix, 1.0)
    if policy.resize is not None:
        pixels = _resized_pixels(policy.resize, pixels)
    channels = {"rgb": 3, "gray": 1}.get(policy.color, 3)
    if policy.store == "raw":
        return round(pixels) * channels
    if (policy.encode or _kind(suffix)) == "jpeg":
        estimate = round(pixels * _interpolate(_JPEG_BYTES_PER_PIXEL, policy.jpeg_quality))
    else:
        estimate = round(pixels * _PNG_BYTES_PER_CHANNEL * channels)
    if (
        policy.resize is not None
        and policy.resize.mode == "fit"
        and policy.encode in (None, _kind(suffix))
    ):
        # An image already within the bounds keeps its bytes.
        estimate = min(estimate, source_size)
    return max(estimate, 1)


def size_is_estimated(relpath: str, policy: ImagePolicy) -> bool:
    """Whether `estimated_encoded_size` only estimates this image's size: the policy transforms
    it (a resize, another format, raw pixels), so its bytes are known only once it is encoded."""
    suffix = _suffix(relpath)
    return not (
        policy.store != "raw" and policy.resize is None and policy.encode in (None, _kind(suffix))
    )


def _kind(suffix: str) -> str:
    return "jpeg" if suffix in _LOSSY_SUFFIXES else "png"


def _resized_pixels(resize: Resize, pixels: float) -> float:
    if resize.mode == "exact":
        return resize.width * resize.height
    if resize.mode == "fit":  # never enlarges; a 4:3 image in the box
        return min(pixels, resize.width * resize.height * 0.75)
    return resize.size * resize.size * 4 / 3  # the shorter side, of a 4:3 image


def _interpolate(table: Sequence[tuple[int, float]], x: int) -> float:
    for (x0, y0), (x1, y1) in itertools.pairwise(table):
        if x <= x1:
            return y0 + (y1 - y0) * max(0, x - x0) / (x1 - x0)
    return table[-1][1]


@dataclass(frozen=True)
class Preparer:
    """The per-image planning logic of a build, as plain picklable data.

    Attributes:
        label_rule: how labels are derived.
        fixed_classes: the class list when the user fixed it, else None.
        splits: (name, ratio) pairs.
        seed: the build's seed.
        policy: how images are checked and normalized (for the record size estimate).
        max_record_size: records larger than this cannot fit in any shard.
        split_by: a regex whose capture (the first group, or the group named `group`) in the
            relative path is the split key, so images of one subject share a split; None to
            split image by image.
    """

    label_rule: LabelRule
    fixed_classes: tuple[str, ...] | None
    splits: Sequence[tuple[str, float]]
    seed: int
    policy: ImagePolicy
    max_record_size: int
    split_by: str | None = None

    def split_key(self, relpath: str) -> str:
        """What an image's split is drawn from: its relative path, or its --split-by capture."""
        if self.split_by is None:
            return relpath
        pattern = _compiled(self.split_by)
        match = pattern.search(relpath)
        if match is None:
            return relpath  # an image outside every group is a group of its own
        group = match.group("group" if "group" in pattern.groupindex else 1)
        # The prefix keeps a capture from ever colliding with some other image's path.
        return relpath if group is None else f"split-by:{group}"

    def grouped(self, relpath: str) -> bool:
        """Whether --split-by's pattern matches this path (an image of a group); False without
        --split-by."""
        return self.split_by is not None and _compiled(self.split_by).search(relpath) is not None

    def label(self, source: SourceFile) -> str | ReportEntry | None:
        """The source's label, None when labels are off, or the report entry saying why it has none."""
        if not self.label_rule.enabled:
            return None
        label = (
            source.label
            if source.label is not None
            else self.label_rule.label(source.url, source.relpath)
        )
        if label is None:
            return ReportEntry(
                source.url, source.relpath, Reason.NO_LABEL,
                f"--labels {self.label_rule.spec} finds no label in {source.relpath!r}",
            )  # fmt: skip
        problem = class_name_problem(label)
        if problem is not None:
            return ReportEntry(
                source.url, source.relpath, Reason.BAD_CLASS_NAME,
                f"class name {label!r} {problem}", label=label,
            )  # fmt: skip
        if self.fixed_classes is not None and label not in self.fixed_classes:
            return ReportEntry(
                source.url, source.relpath, Reason.UNKNOWN_CLASS,
                f"label {label!r} is not in --classes", label=label,
            )  # fmt: skip
        return label

    def class_map(self, labels: Iterable[str]) -> ClassMap:
        """The build's classes, from the labels of every listed input: --classes when given,
        else the labels found, in name order; none when labels are off."""
        if not self.label_rule.enabled:
            return ClassMap(self.fixed_classes or ())
        if self.fixed_classes is not None:
            return ClassMap(self.fixed_classes)
        return ClassMap.from_labels(labels)

    def plan(
        self, source: SourceFile, label: str | None, class_id: int | None
    ) -> ImageEntry | ReportEntry:
        """The image's planned entry, or the report entry saying why it cannot be written.

        Reads nothing of the image: an input list that gave no size costs one size look-up.
        """
        split = assign_split(self.split_key(source.relpath), self.splits, self.seed)

        def skipped(reason: str, message: str) -> ReportEntry:
            return ReportEntry(
                source.url, source.relpath, reason, message, split=split, label=label
            )

        size = source.size
        # Named in an input list, which gives no sizes (nothing has looked at it yet), or a
        # local link to nothing, which the listing keeps for this report.
        if size < 0:
            try:
                fs, path = fsspec.core.url_to_fs(source.url)
                size = fs.size(path)
            except FileNotFoundError:
                if not has_protocol(source.url) and os.path.islink(source.url):
                    target = os.readlink(source.url)
                    return skipped(Reason.VANISHED, f"a link to {target!r}, which does not exist")
                # It may never have existed: not "gone", which says it was seen once.
                return skipped(Reason.VANISHED, "not found (named in --input-list)")
            except OSError as err:
                if err.errno == errno.ELOOP:
                    return skipped(Reason.READ_ERROR, "a link in a loop of links, to no file")
                return skipped(Reason.READ_ERROR, f"cannot read: {err}")
        relpath = source.relpath
        exact = self._keeps_bytes(_suffix(relpath))
        if exact:
            # The common case, planned for every image: its record holds the file's own bytes.
            record_size = _kept_record_size(size, relpath, class_id, label)
        else:
            record_size = self.record_size(
                estimated_encoded_size(size, relpath, self.policy), relpath, class_id, label
            )
        # Only a size known here refuses an image: an estimate may be far off either way, so a
        # transformed image is refused where its record is made (measured or written), by its
        # own size.
        if exact and record_size > self.max_record_size:
            return skipped(
                Reason.TOO_LARGE,
                f"its record is {record_size} bytes, over --max-shard-size {self.max_record_size}",
            )
        return ImageEntry.planned(
            source.url,
            relpath,
            size,
            split,
            shuffle_key(relpath, self.seed),
            label,
            class_id,
            record_size,
        )

    def _keeps_bytes(self, suffix: str) -> bool:
        """Whether an image with this suffix keeps its own bytes (`size_is_estimated`'s
        negation), asked once a suffix: it is asked for every image."""
        kept = self.__dict__.get("_kept_suffixes")
        if kept is None:
            kept = {}
            # Not a field: a cache the frozen dataclass holds beside them (and pickles empty).
            object.__setattr__(self, "_kept_suffixes", kept)
        answer = kept.get(suffix)
        if answer is None:
            answer = kept[suffix] = not size_is_estimated("x." + suffix, self.policy)
        return answer

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_kept_suffixes", None)
        return state

    @staticmethod
    def record_size(
        encoded_size: int, relpath: str, class_id: int | None, label: str | None
    ) -> int:
        """The planned size of a record holding `encoded_size` image bytes: its fields whose
        values only the image knows (format, height, width, channels) at their largest."""
        return image_record_size(
            encoded_size,
            image_format=_LONGEST_FORMAT,
            height=_LARGEST_SIDE,
            width=_LARGEST_SIDE,
            channels=_MOST_CHANNELS,
            filename=relpath,
            label=class_id,
            label_text=label,
        )


def hash_source(entry: ImageEntry, data: bytes | OSError) -> ImageEntry | ReportEntry:
    """The entry with the SHA-256 of its source's bytes (for --dedup), or why it has none."""
    if isinstance(data, FileNotFoundError):
        return _skipped(entry, Reason.VANISHED, "the file was listed but is gone")
    if isinstance(data, OSError):
        return _skipped(entry, Reason.READ_ERROR, f"cannot read: {data}")
    return dataclasses.replace(entry, source_sha256=hashlib.sha256(data).hexdigest())


def _skipped(entry: ImageEntry, reason: str, message: str) -> ReportEntry:
    return ReportEntry(
        entry.url, entry.relpath, reason, message, split=entry.split, label=entry.label
    )


def _suffix(relpath: str) -> str:
    """The name's suffix, lower case and without its dot, as `estimated_encoded_size` reads it:
    `posixpath.splitext`'s, which a name's leading dots do not start (`.png` has none)."""
    name = relpath[relpath.rfind("/") + 1 :]
    dot = name.rfind(".")
    if dot <= 0 or not name[:dot].strip("."):
        return ""
    return name[dot + 1 :].lower()


def _kept_record_size(size: int, relpath: str, class_id: int | None, label: str | None) -> int:
    """`Preparer.record_size(size, ...)`, the image's own bytes stored: what
    `image_record_size` gives with the header fields at their largest, from a cache of the
    fields other than the image's bytes (a build has few filename lengths and labels)."""
    others = _others_of(len(relpath.encode("utf-8", "surrogateescape")), class_id, label)
    return encoded_record_size(size, others)


@functools.lru_cache(maxsize=4096)
def _others_of(filename_size: int, class_id: int | None, label: str | None) -> int:
    return other_fields_size(
        len(_LONGEST_FORMAT),
        _LARGEST_SIDE,
        _LARGEST_SIDE,
        _MOST_CHANNELS,
        filename_size,
        class_id,
        None if class_id is None else len((label or "").encode("utf-8")),
    )


@functools.lru_cache(maxsize=8)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def preparer(config: BuildConfig) -> Preparer:
    """The build's per-image planning logic, from its settings."""
    return Preparer(
        label_rule=LabelRule(config.labels),
        fixed_classes=config.classes,
        splits=config.splits,
        seed=config.seed,
        policy=config.image,
        max_record_size=config.max_shard_size,
        split_by=config.split_by,
    )
