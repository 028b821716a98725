"""A build's settings, each declared once: its kind, default, flag, help and meaning.

Everything else is made from this table: the `build` command's flags (commands/build.py), how a
config file's values are read and checked (config.py), BuildConfig's defaults, and the reference
pages of the flags and the config file (docs/hooks/reference.py). A new setting is one entry
here, and a field of BuildConfig (or ImagePolicy) that holds it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from beam_tfrecord.images import policy as _policy

__all__ = [
    "DEFAULT_EXTENSIONS",
    "KINDS",
    "SETTINGS",
    "Setting",
    "default",
    "image_settings",
    "in_python_names",
    "setting",
]

# Every suffix the image checker reads, plus those it only recognises (HEIC, JPEG XL): such a
# file is reported as unsupported rather than silently passed over.
DEFAULT_EXTENSIONS: tuple[str, ...] = (
    ".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".apng", ".gif", ".bmp", ".dib", ".webp",
    ".tif", ".tiff", ".ico", ".ppm", ".pgm", ".pbm", ".pnm", ".jp2", ".j2k", ".jpf", ".avif",
    ".heic", ".heif", ".jxl",
)  # fmt: skip

# How a setting's value is read from a flag or a config file and checked (config.py holds each
# kind's reading and check; ImagePolicy checks the image settings' values itself):
KINDS = {
    "paths": "one fsspec glob or path, or a list of them",
    "text": "a file's path or URL, taken as given",
    "output": "a folder, any fsspec URL",
    "name": "a letter or digit, followed by letters, digits, '-', '_' or '.'",
    "choice": "one of the setting's choices",
    "extensions": "comma-separated suffixes, or a list of them",
    "labels": "dir, none or regex:PATTERN",
    "classes": "a,b,c, @FILE or a list",
    "splits": "name=ratio,... or a mapping",
    "integer": "a whole number, within the setting's bounds if it has them",
    "number": "a number, within the setting's bounds",
    "size": "a byte count, or a size with a unit (100MB, 64MiB)",
    "switch": "true or false",
    "regex": "a regex with a capture group",
    "color": "#RRGGBB, R,G,B or three integers",
    "resize": "N, WxH or exact:WxH[:crop|pad|stretch]",
}

# The sections of `beam-tfrecord build --help`, in their order.
_READ = "what to read"
_WRITE = "what to write"
_CHECKS = "image checks"
_TRANSFORMS = "image transforms"
_COPIES = "duplicates and leakage"
_THROUGHPUT = "throughput"


@dataclass(frozen=True)
class Setting:
    """One build setting.

    Attributes:
        name: the setting's name: BuildConfig's field, or for an image setting the key that
            sets ImagePolicy's `policy_field`; manifest.json's `config` names it so.
        kind: how a value is read and checked (KINDS).
        group: its section of `beam-tfrecord build --help`.
        help: its line in --help; the default is added as `(default: ...)`, or where
            `{default}` stands.
        about: its meaning in the config file reference; empty for an image setting, whose
            meaning is ImagePolicy's docstring for its field.
        default: its value when not given (an image setting's is ImagePolicy's).
        choices: the values a `choice` setting takes.
        bounds: the lowest and highest value of a number (None: no bound on that side).
        unit: what a number counts, said when it is out of bounds (`images`).
        flags: its command-line flags; by default `--name-with-dashes`, or `--no-...` for a
            switch that is on unless given.
        metavar: the value's name in --help.
        default_words: the default as --help says it, where the value does not (None, off).
        hidden: a flag --help does not show (tests use it).
        repeatable: the flag may be given more than once, each value kept.
        key: the setting as flags and config files spell it, where it differs from `name`.
        policy_field: for an image setting, the ImagePolicy field it sets.
        resume_may_change: a `--resume` may give it another value than the build it goes on
            with was started with: it changes nothing a finished shard holds, nor the plan (where
            and how fast to work, when to publish), or each shard shows its change (the
            inputs). Every other setting is in the build's record of its settings, and a
            `--resume` with another value of it is refused (`settings_record`).
    """

    name: str
    kind: str
    group: str
    help: str
    about: str = ""
    default: Any = None
    choices: tuple[str, ...] = ()
    bounds: tuple[float | None, float | None] = (None, None)
    unit: str = ""
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    default_words: str | None = None
    hidden: bool = False
    repeatable: bool = False
    key: str = ""
    policy_field: str | None = None
    resume_may_change: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"setting {self.name!r}: unknown kind {self.kind!r}")
        if not self.key:
            object.__setattr__(self, "key", self.name)
        if not self.flags:
            on = self.kind == "switch" and self.default is True
            flag = ("--no-" if on else "--") + self.key.replace("_", "-")
            object.__setattr__(self, "flags", (flag,))

    def shown_default(self) -> str | None:
        """The default as --help states it (`100MB`, `train=0.8,...`), or None if it says none."""
        if self.default_words is not None:
            return self.default_words
        value = self.default
        if value is None or value is False or value in ((), ""):
            return None
        return self.shown(value)

    def shown(self, value: Any) -> str:
        """A value of the setting as a flag takes it (`100MB`, `train=0.8,test=0.2`, `a,b`), as
        BuildConfig or its `to_dict` holds it."""
        if self.kind == "size":
            return _shown_size(value)
        if self.kind == "splits":
            pairs = value.items() if isinstance(value, dict) else value
            return ",".join(f"{name}={ratio:g}" for name, ratio in pairs)
        if self.kind == "extensions":
            return ", ".join(value)
        if isinstance(value, (tuple, list)):
            return ",".join(str(v) for v in value)
        return str(value)


def _shown_size(num_bytes: int) -> str:
    """A byte count in the largest decimal unit that holds it exactly: `100MB`."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if num_bytes % size == 0:
            return f"{num_bytes // size}{unit}"
    return str(num_bytes)


def _image(name: str, kind: str, help: str, field: str | None = None, **more: Any) -> Setting:
    """An image setting: its default (and its choices) are ImagePolicy's, declared there."""
    field = field or name
    value = {f.name: f for f in dataclasses.fields(_policy.ImagePolicy)}[field].default
    return Setting(
        name, kind, more.pop("group", _CHECKS), help, default=value, policy_field=field, **more
    )


# A table, one setting an entry: its name, kind, section and help on its first lines.
# fmt: off
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "inputs", "paths", _READ, "fsspec glob, ** recursive; repeatable",
        about="fsspec glob patterns (`**` is recursive); a plain directory means every file "
        "below it.",
        default=(), key="input", metavar="PATTERN", repeatable=True,
        resume_may_change=True,  # each finished shard shows whether its images are the plan's
    ),
    Setting(
        "input_list", "text", _READ,
        "file of `path` or `path,label` lines (CSV) instead of --input",
        about="a file listing the inputs instead (`path` or `path,label` lines, CSV).",
        metavar="FILE", resume_may_change=True,  # as --input
    ),
    Setting(
        "extensions", "extensions", _READ, "comma-separated suffixes to take, case-insensitive",
        about="file suffixes to take (case-insensitive); hidden files and folders are never "
        "taken.",
        default=DEFAULT_EXTENSIONS, resume_may_change=True,  # which files are inputs: as --input
    ),
    Setting(
        "listing", "choice", _READ,
        "who expands the patterns: the workers, in parallel by folder, or this machine",
        about="`pipeline` (workers list the patterns in parallel, by folder) or `launcher`.",
        default="pipeline", choices=("pipeline", "launcher"),
        resume_may_change=True,  # who lists, not what is listed
    ),
    Setting(
        "output", "output", _WRITE, "output folder, any fsspec URL",
        about="the output folder, any fsspec URL.",
        default="", metavar="DIR",
        resume_may_change=True,  # a folder moved or copied holds the same build
    ),
    Setting(
        "name", "name", _WRITE, "dataset name in shard file names",
        about="dataset name used in shard file names: a letter or digit, followed by letters, "
        "digits, `-`, `_` or `.`; defaults to the output folder's name, with `_` for each "
        "character a name cannot hold (`données` makes `donn_es`, which the summary says).",
        default_words="the output folder's name",
    ),
    Setting(
        "labels", "labels", _WRITE,
        "where class names come from (default: {default}); KEY=VALUE is a Dataflow job label",
        about="`dir` (the parent folder's name), `regex:PATTERN` or `none`.",
        default="dir", metavar="dir|regex:PATTERN|none", repeatable=True,
    ),
    Setting(
        "classes", "classes", _WRITE, "fix the class list and its order",
        about="the fixed class list (ids in this order), or None for the sorted distinct labels.",
        metavar="a,b,c|@FILE", default_words="the sorted distinct labels",
    ),
    Setting(
        "splits", "splits", _WRITE, "split names and ratios summing to 1",
        about="(name, ratio) pairs summing to 1.",
        default=(("train", 0.8), ("validation", 0.1), ("test", 0.1)), metavar="NAME=RATIO,...",
    ),
    Setting(
        "seed", "integer", _WRITE, "salts split assignment and shuffling",
        about="salts split assignment and shuffling.",
        default=0,
    ),
    Setting(
        "min_shard_size", "size", _WRITE,
        "smallest shard, in B, KB, MB, GB, KiB, MiB or GiB",
        about="the smallest shard, in bytes (B, KB, MB, GB, KiB, MiB or GiB in a file or flag); "
        "a split holding less is one shard, below it.",
        default=100 * 10**6,
    ),
    Setting(
        "max_shard_size", "size", _WRITE, "largest shard",
        about="the largest shard, in bytes; shards are cut at equal planned bytes, aimed at the "
        "middle of the two bounds.",
        default=200 * 10**6,
    ),
    Setting(
        "overwrite", "switch", _WRITE, "replace an earlier build in --output",
        about="replace an earlier build in `output`.",
        default=False, resume_may_change=True,  # what becomes of an earlier build
    ),
    Setting(
        "resume", "switch", _WRITE,
        "keep the shards an interrupted run of the same build (same settings and inputs) finished",
        about="keep shards an interrupted run of the same build already finished.",
        default=False, resume_may_change=True,
    ),
    _image(
        "validate", "choice",
        "how each image is checked: decode finds truncated data and data the decoder refuses, "
        "header is fast and does not",
        choices=_policy.VALIDATE_MODES,
    ),
    _image(
        "color", "choice", "channels written images decode to", choices=_policy.COLORS
    ),
    _image("max_pixels", "integer", "refuse larger images, decompression bombs"),
    _image(
        "jpeg_quality", "integer", "JPEG quality of every image the build encodes",
        flags=("--jpeg-quality", "--quality"),
    ),
    _image(
        "background", "color",
        "colour alpha is flattened onto, white unless given as #RRGGBB or R,G,B",
    ),
    _image(
        "exif_orientation", "switch",
        "do not apply EXIF orientation, which TensorFlow ignores",
        field="apply_exif_orientation", default_words="applied",
    ),
    Setting(
        "max_skipped_fraction", "number", _CHECKS,
        "fail, publishing nothing, when more of the inputs are skipped",
        about="fail the build when more inputs are skipped: it writes the report and its "
        "shards, and publishes nothing (no manifest), as an interrupted build.",
        bounds=(0, 1), default_words="off, never fail for it",
        resume_may_change=True,  # when to publish: --resume publishes a withheld build
    ),
    Setting(
        "allow_missing_classes", "switch", _CHECKS,
        "publish a build whose --classes names a class no input has",
        about="publish a build whose `classes` names a class no input is labelled with (it "
        "keeps its id and gets no image); by default such a build fails, as "
        "`max_skipped_fraction` does, since the name is most often a typo.",
        default=False, default_words="such a build fails, publishing nothing",
        resume_may_change=True,  # when to publish, as --max-skipped-fraction
    ),
    _image(
        "resize", "resize",
        "shorter side to N; or fit within WxH; or exactly WxH, cropped unless :pad or :stretch",
        group=_TRANSFORMS, metavar="N|WxH|exact:WxH[:crop|pad|stretch]", default_words="off",
    ),
    _image(
        "encode", "choice", "write every image in this format",
        group=_TRANSFORMS, choices=_policy.ENCODINGS,
        default_words="per image, each keeps its own",
    ),
    _image(
        "store", "choice", "raw: decoded uint8 pixels, for small images",
        group=_TRANSFORMS, choices=_policy.STORES,
    ),
    Setting(
        "transformed_sizes", "choice", _TRANSFORMS,
        "how a transformed image is sized for the shard plan: measure (encoded once more while "
        "planning; every shard within the size bounds) or estimate (a size model: faster, "
        "shards may leave the bounds)",
        about="how an image the build transforms (`resize`, `encode`, `store: raw`) is sized "
        "for the shard plan: `measure` (transformed once while planning, as its shard writer "
        "will: every shard within the bounds, for a second read, decode and encode of each "
        "such image) or `estimate` (a size model: one read, and shards that may leave the "
        "bounds, which the summary names).",
        default="measure", choices=("measure", "estimate"),
    ),
    Setting(
        "dedup", "switch", _COPIES,
        "write one of each set of byte-identical images; report the other copies",
        about="write one of each set of byte-identical images and report the other copies.",
        default=False,
    ),
    Setting(
        "split_by", "regex", _COPIES,
        "images whose capture in the relative path is equal share a split, e.g. a patient id",
        about="a regex over the relative path; images whose capture (first group, or the group "
        "named `group`) is equal share a split (one subject, patient or scene).",
        metavar="REGEX", default_words="off",
    ),
    Setting(
        "read_ahead", "integer", _THROUGHPUT, "images each worker reads concurrently",
        about="images each worker reads concurrently, ahead of the one it checks or writes; "
        "None to choose by the inputs' store (deep for object stores, where every read waits a "
        "round trip, shallow for local disk).",
        bounds=(0, 1024), unit="images", metavar="N",
        default_words="256 when an input is on an object store, else 16",
        resume_may_change=True,  # how fast
    ),
    Setting(
        "planning_bucket_records", "integer", _THROUGHPUT,
        "records per planning bucket",
        about="records per planning bucket; bounds the metadata one worker holds.",
        default=200_000, bounds=(1, None), hidden=True,
        resume_may_change=True,  # how planning is spread: the plan is the same (sharding.py)
    ),
)
# fmt: on

_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The setting named `name` (as BuildConfig and manifest.json name it)."""
    return _BY_NAME[name]


def default(name: str) -> Any:
    """A setting's default: what BuildConfig's field holds when it is not given."""
    return _BY_NAME[name].default


def image_settings() -> dict[str, str]:
    """The image settings, each with the ImagePolicy field it sets, in the table's order."""
    return {s.name: s.policy_field for s in SETTINGS if s.policy_field}


def in_python_names(text: str) -> str:
    """`text` (a refusal, a failure, a warning), which names settings by their flags, as a
    Python caller names them: a switch by the value that turns it on (`pass --overwrite` ->
    `pass overwrite=True`, `--no-exif-orientation` -> `exif_orientation=False`), a flag with a
    quoted value or a placeholder as a keyword (`--labels 'regex:^(a)'` -> `labels='regex:^(a)'`,
    `--name NAME` -> `name=NAME`), any other flag by its key (`--max-skipped-fraction` ->
    `max_skipped_fraction`)."""
    for known in SETTINGS:
        for flag in known.flags:
            # Not part of a word, a path or a value quoted (a class named '--overwrite').
            named = rf"(?<![\w/'\"-]){re.escape(flag)}(?![\w-])"
            if known.kind == "switch":
                text = re.sub(named, f"{known.key}={not known.default}", text)
            else:
                text = re.sub(rf"{named} (?='|[A-Z]+\b)", f"{known.key}=", text)
                text = re.sub(named, known.key, text)
    return text
