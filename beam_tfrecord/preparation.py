"""Turning a listed file into planned metadata: its label, split, shuffle key, image check and record size."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import fsspec

from beam_tfrecord.catalog import ImageEntry, Reason, ReportEntry
from beam_tfrecord.images import ImageError, ImageInfo, ImagePolicy, NeedFullData, check_image
from beam_tfrecord.labels import LabelRule, class_name_problem
from beam_tfrecord.listing import SourceFile
from beam_tfrecord.records import image_record_size
from beam_tfrecord.splits import assign_split, shuffle_key

__all__ = ["HEADER_BYTES", "Fetched", "Preparer", "read_source"]

# Enough for the headers of most images (a camera's EXIF block with its thumbnail can be more;
# such an image is read again, whole). Small on purpose: with --validate header a build reads
# each image's bytes once, when its shard is written, and only this much before.
HEADER_BYTES = 16 * 1024


def read_source(url: str, length: int | None = None) -> bytes:
    """Reads a whole source file, or its first `length` bytes.

    Raises:
        FileNotFoundError: the file is gone.
        OSError: it cannot be read.
    """
    if "://" not in url:
        # A local path (listing gives local files as plain paths): a plain open is several times
        # cheaper than fsspec's layers, and this runs twice for every image of a build.
        if length is None:
            with open(url, "rb") as f:
                return f.read()
        fd = os.open(url, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                # A prefix only: without this the kernel reads ahead 128 KiB, the whole of a
                # typical image, and the disk moves every byte twice in a build.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            return os.pread(fd, length, 0)
        finally:
            os.close(fd)
    fs, path = fsspec.core.url_to_fs(url)
    if length is None:
        return fs.cat_file(path)
    return fs.cat_file(path, start=0, end=length)


@dataclass(frozen=True)
class Fetched:
    """What a check reads of a source: its size and its bytes, all of them or a prefix."""

    size: int
    data: bytes

    @property
    def complete(self) -> bool:
        return len(self.data) == self.size


@dataclass(frozen=True)
class Preparer:
    """The per-image planning logic of a build, as plain picklable data.

    Attributes:
        label_rule: how labels are derived.
        fixed_classes: the class list when the user fixed it, else None.
        splits: (name, ratio) pairs.
        seed: the build's seed.
        policy: how images are checked and normalized.
        max_record_size: records larger than this cannot fit in any shard.
        split_by: a regex whose capture (the first group, or the group named `group`) in the
            relative path is the split key, so images of one subject share a split; None to
            split image by image.
        hash_sources: read every source whole and record its SHA-256 (for --dedup).
    """

    label_rule: LabelRule
    fixed_classes: tuple[str, ...] | None
    splits: Sequence[tuple[str, float]]
    seed: int
    policy: ImagePolicy
    max_record_size: int
    split_by: str | None = None
    hash_sources: bool = False

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

    @functools.cached_property
    def planning_policy(self) -> ImagePolicy:
        """The policy images are checked with for planning.

        With validate="decode" the full decode waits for the shard writer, which decodes the
        very bytes it writes; planning needs only what the header says (and a full decode of
        the images it must re-encode, which this policy still does). So each image is read once,
        not once to check it and again to write it.
        """
        if self.policy.validate == "decode":
            return dataclasses.replace(self.policy, validate="header")
        return self.policy

    def fetch(self, source: SourceFile) -> Fetched:
        """Reads what the check of `source` needs: a prefix when the header will do, else all.

        Only IO, so that it can run ahead of the checks on other threads.

        Raises:
            FileNotFoundError: the file is gone.
            OSError: it cannot be read.
        """
        size = source.size
        if size < 0:  # an input list leaves the size to be found here
            fs, path = fsspec.core.url_to_fs(source.url)
            size = fs.size(path)
        if size > HEADER_BYTES and not self.hash_sources:
            return Fetched(size, read_source(source.url, HEADER_BYTES))
        # Whole: a content hash needs every byte, and a file listed as empty may have been
        # written since (a vanished one must be reported as vanished).
        data = read_source(source.url)
        return Fetched(len(data), data)

    def prepare(
        self,
        source: SourceFile,
        label: str | None,
        class_id: int | None,
        fetched: Fetched | OSError | None = None,
    ) -> ImageEntry | ReportEntry:
        """Checks the image and returns its planned entry, or the report entry saying why it is left out.

        Args:
            source, label, class_id: the image, as listed and labelled.
            fetched: what `fetch(source)` returned, or the OSError it raised, when the read
                was done ahead; None to read now.
        """
        split = assign_split(self.split_key(source.relpath), self.splits, self.seed)

        def skipped(reason: str, message: str) -> ReportEntry:
            return ReportEntry(
                source.url, source.relpath, reason, message, split=split, label=label
            )

        try:
            if fetched is None:
                fetched = self.fetch(source)
            elif isinstance(fetched, OSError):
                raise fetched
            info, size, digest = self._check(source, fetched)
        except ImageError as err:
            return skipped(err.code, err.message)
        except FileNotFoundError:
            return skipped(Reason.VANISHED, "the file was listed but is gone")
        except OSError as err:
            return skipped(Reason.READ_ERROR, f"cannot read: {err}")
        encoded_size = info.encoded_size if info.encoded_size is not None else size
        record_size = image_record_size(
            encoded_size,
            image_format=info.format,
            height=info.height,
            width=info.width,
            channels=info.channels,
            filename=source.relpath,
            label=class_id,
            label_text=label,
        )
        if record_size > self.max_record_size:
            return skipped(
                Reason.TOO_LARGE,
                f"its record is {record_size} bytes, over --max-shard-size {self.max_record_size}",
            )
        return ImageEntry(
            url=source.url,
            relpath=source.relpath,
            source_size=size,
            split=split,
            shuffle_key=shuffle_key(source.relpath, self.seed),
            label=label,
            class_id=class_id,
            image_format=info.format,
            height=info.height,
            width=info.width,
            channels=info.channels,
            reencode=info.reencode,
            encoded_size=encoded_size,
            record_size=record_size,
            notes=tuple(info.notes),
            source_sha256=digest,
        )

    def _check(self, source: SourceFile, fetched: Fetched) -> tuple[ImageInfo, int, str]:
        """The image's check, its size now, and the SHA-256 of its bytes when sources are hashed
        (else "")."""
        if not fetched.complete:
            try:
                info = check_image(fetched.data, self.planning_policy, size=fetched.size)
                return info, fetched.size, ""
            except NeedFullData:
                pass  # the rare header past the prefix (a large EXIF block)
            fetched = Fetched(fetched.size, read_source(source.url))
        data = fetched.data
        digest = hashlib.sha256(data).hexdigest() if self.hash_sources else ""
        return check_image(data, self.planning_policy, size=len(data)), len(data), digest


@functools.lru_cache(maxsize=8)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)
