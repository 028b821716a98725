"""Build configuration: one frozen dataclass, loaded from YAML and flags, validated before anything runs."""

from __future__ import annotations

import contextvars
import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from beam_tfrecord.images.policy import ImagePolicy, PolicyError
from beam_tfrecord.labels import class_name_problem
from beam_tfrecord.locations import without_protocol
from beam_tfrecord.wording import nearest

__all__ = [
    "DEFAULT_EXTENSIONS",
    "IMAGE_SETTINGS",
    "BuildConfig",
    "ConfigError",
    "format_size",
    "parse_classes",
    "parse_size",
    "parse_splits",
    "unknown_setting",
]

# Every suffix the image checker reads, plus those it only recognises (HEIC, JPEG XL): such a
# file is reported as unsupported rather than silently passed over.
DEFAULT_EXTENSIONS: tuple[str, ...] = (
    ".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".apng", ".gif", ".bmp", ".dib", ".webp",
    ".tif", ".tiff", ".ico", ".ppm", ".pgm", ".pbm", ".pnm", ".jp2", ".j2k", ".jpf", ".avif",
    ".heic", ".heif", ".jxl",
)  # fmt: skip

_SIZE_UNITS = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}  # fmt: skip
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
# Split names end up in file names, so keep them to characters that are safe on every filesystem.
_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")
_RATIO_TOLERANCE = 1e-6

# The settings (flags, config keys, the manifest's `config`) that make a build's ImagePolicy, in
# the manifest's order, with the policy field each one sets.
IMAGE_SETTINGS: dict[str, str] = {
    "validate": "validate",
    "color": "color",
    "max_pixels": "max_pixels",
    "jpeg_quality": "jpeg_quality",
    "background": "background",
    "exif_orientation": "apply_exif_orientation",
    "resize": "resize",
    "encode": "encode",
    "store": "store",
}


class ConfigError(ValueError):
    """A setting is invalid. `setting` names it as the user spelled it on the command line."""

    def __init__(self, setting: str, message: str):
        self.setting = setting
        self.message = message
        super().__init__(f"--{setting.replace('_', '-')}: {message}")

    def for_python(self) -> ConfigError:
        """The same refusal as a Python caller reads it: the switches it says to pass named
        as BuildConfig's fields (`overwrite=True`), not as flags (`--overwrite`)."""
        message = self.message
        for switch in ("overwrite", "resume", "allow_missing_classes"):
            flag = "--" + switch.replace("_", "-")
            message = re.sub(rf"(pass |, or ){flag}\b", rf"\g<1>{switch}=True", message)
        return ConfigError(self.setting, message)


# Set while the command line runs a build: its refusals name flags, not BuildConfig's fields.
COMMAND_LINE = contextvars.ContextVar("beam_tfrecord_command_line", default=False)


def parse_size(value: str | int, setting: str = "size") -> int:
    """Parses `100MB`, `64 MiB`, `1.5GB` or a plain byte count into bytes (KB = 1000, KiB = 1024)."""
    if isinstance(value, bool):
        raise ConfigError(setting, f"expected a size such as 100MB, got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.match(str(value))
        unit = match.group(2).upper() if match else None
        if not match or unit not in _SIZE_UNITS:
            raise ConfigError(
                setting,
                f"expected a size such as 100MB or 64MiB (units B, KB, MB, GB, KiB, MiB, GiB), "
                f"got {value!r}",
            )
        size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise ConfigError(setting, f"must be positive, got {value!r}")
    return size


def format_size(num_bytes: float) -> str:
    """Formats a byte count for people: `1.5 MB`."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(num_bytes) < 1000 or unit == "TB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    raise AssertionError("unreachable")


def parse_splits(value: str | Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """Parses `train=0.8,validation=0.1,test=0.1` (or a mapping) into ordered (name, ratio) pairs."""
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    else:
        items = []
        for part in str(value).split(","):
            if not part.strip():
                continue
            name, sep, ratio = part.partition("=")
            if not sep:
                raise ConfigError("splits", f"expected name=ratio, got {part.strip()!r}")
            items.append((name.strip(), ratio.strip()))
    if not items:
        raise ConfigError("splits", "at least one split is needed, e.g. train=1")
    splits: list[tuple[str, float]] = []
    for name, raw in items:
        if not _SPLIT_NAME_RE.match(name):
            raise ConfigError(
                "splits",
                f"split name {name!r} must be letters, digits, '_' or '.' (it is used in file names)",
            )
        try:
            ratio = float(raw)
        except (TypeError, ValueError):
            raise ConfigError("splits", f"ratio of {name!r} is not a number: {raw!r}") from None
        if not math.isfinite(ratio) or ratio < 0:
            raise ConfigError("splits", f"ratio of {name!r} must be between 0 and 1, got {raw!r}")
        if name in dict(splits):
            raise ConfigError("splits", f"split {name!r} is named twice")
        splits.append((name, ratio))
    total = sum(ratio for _, ratio in splits)
    if abs(total - 1.0) > _RATIO_TOLERANCE:
        raise ConfigError("splits", f"ratios must sum to 1, they sum to {total:g}")
    return tuple(splits)


def parse_classes(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """Parses `a,b,c`, `@classes.txt` (one class a line) or a list into the fixed class order.

    White space around the commas of `a, b, c` is not part of a name, and empty lines of a file
    are skipped; otherwise names are taken as written, and one that could not survive the files
    it is written to (`labels.class_name_problem`: a line break, a control character, white
    space at either end) is refused.
    """
    if value is None:
        return None
    if isinstance(value, str):
        if value.startswith("@"):
            import fsspec

            path = value[1:]
            try:
                with fsspec.open(path, "rt", encoding="utf-8") as f:
                    names = [line.rstrip("\n") for line in f]
            except (OSError, ValueError) as err:
                raise ConfigError("classes", f"cannot read class list {path!r}: {err}") from None
        else:
            names = [name.strip() for name in value.split(",")]
            if len(names) > 1 and "" in names:  # `a,,b`: a name left out, not a name
                raise ConfigError("classes", f"{value!r} has an empty class name between commas")
    else:
        names = [str(name) for name in value]
    names = [name for name in names if name]
    if not names:
        raise ConfigError("classes", f"the class list is empty: {value!r}")
    seen: set[str] = set()
    for name in names:
        problem = class_name_problem(name)
        if problem is not None:
            raise ConfigError(
                "classes",
                f"class {name!r} {problem}: a class name must read back equal from labels.txt "
                "and TFDS's label file",
            )
        if name in seen:
            raise ConfigError("classes", f"class {name!r} is listed twice")
        seen.add(name)
    return tuple(names)


@dataclass(frozen=True)
class BuildConfig:
    """Everything a build depends on. Equal configs over equal inputs give byte-identical shards.

    Attributes:
        inputs: fsspec glob patterns (`**` is recursive); a plain directory means every file below it.
        output: the output folder, any fsspec URL.
        input_list: a file listing the inputs instead (`path` or `path,label` lines, CSV).
        listing: `pipeline` (workers list the patterns in parallel, by folder) or `launcher`.
        name: dataset name used in shard file names; defaults to the output folder's name.
        extensions: file suffixes to take (case-insensitive); hidden files and folders are never taken.
        labels: `dir` (the parent folder's name), `regex:PATTERN` or `none`.
        classes: the fixed class list (ids in this order), or None for the sorted distinct labels.
        splits: (name, ratio) pairs summing to 1.
        seed: salts split assignment and shuffling.
        min_shard_size: the smallest shard, in bytes (B, KB, MB, GB, KiB, MiB or GiB in a file
            or flag); a split holding less is one shard, below it.
        max_shard_size: the largest shard, in bytes; shards are cut at equal planned bytes,
            aimed at the middle of the two bounds.
        overwrite: replace an earlier build in `output`.
        resume: keep shards an interrupted run of the same build already finished.
        image: how each image is checked, normalized and transformed. As settings (flags, config
            files, the manifest) it is nine (IMAGE_SETTINGS), named as users write them:
            `validate` (`decode`, `header` or `none`), `color` (`rgb`, `gray` or `keep`),
            `max_pixels`, `jpeg_quality`, `background`, `exif_orientation` (apply EXIF
            orientation, which TensorFlow ignores), `resize` (`N` for the shorter side, `WxH` to
            fit within, `exact:WxH[:crop|pad|stretch]`), `encode` (`jpeg` or `png`) and `store`
            (`encoded` or `raw`); `from_settings` makes the policy from them.
        transformed_sizes: how an image the build transforms (`resize`, `encode`, `store: raw`)
            is sized for the shard plan: `measure` (transformed once while planning, as its
            shard writer will: every shard within the bounds, for a second read, decode and
            encode of each such image) or `estimate` (a size model: one read, and shards that
            may leave the bounds, which the summary names).
        dedup: write one of each set of byte-identical images and report the other copies.
        split_by: a regex over the relative path; images whose capture (first group, or the
            group named `group`) is equal share a split (one subject, patient or scene).
        max_skipped_fraction: fail the build when more inputs are skipped: it writes the report
            and its shards, and publishes nothing (no manifest), as an interrupted build.
        allow_missing_classes: publish a build whose `classes` names a class no input is
            labelled with (it keeps its id and gets no image); by default such a build fails,
            as `max_skipped_fraction` does, since the name is most often a typo.
        planning_bucket_records: records per planning bucket; bounds the metadata one worker holds.
        read_ahead: images each worker reads concurrently, ahead of the one it checks or writes;
            None to choose by the inputs' store (deep for object stores, where every read waits
            a round trip, shallow for local disk).
    """

    inputs: tuple[str, ...] = ()
    output: str = ""
    input_list: str | None = None
    listing: str = "pipeline"
    name: str | None = None
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS
    labels: str = "dir"
    classes: tuple[str, ...] | None = None
    splits: tuple[tuple[str, float], ...] = (("train", 0.8), ("validation", 0.1), ("test", 0.1))
    seed: int = 0
    min_shard_size: int = 100 * 10**6
    max_shard_size: int = 200 * 10**6
    overwrite: bool = False
    resume: bool = False
    image: ImagePolicy = field(default_factory=ImagePolicy)
    dedup: bool = False
    transformed_sizes: str = "measure"
    split_by: str | None = None
    max_skipped_fraction: float | None = None
    allow_missing_classes: bool = False
    planning_bucket_records: int = 200_000
    read_ahead: int | None = None

    def __post_init__(self) -> None:
        for setting in ("overwrite", "resume", "dedup", "allow_missing_classes"):
            _check_switch(setting, getattr(self, setting))
        if not isinstance(self.image, ImagePolicy):
            raise ConfigError("image", f"expected an ImagePolicy, got {self.image!r}")
        if isinstance(self.inputs, str):
            object.__setattr__(self, "inputs", (self.inputs,))
        object.__setattr__(self, "inputs", tuple(str(p) for p in self.inputs))
        if any(not p.strip() for p in self.inputs):
            raise ConfigError("input", f"an input pattern is empty: {list(self.inputs)}")
        if not self.inputs and not self.input_list:
            raise ConfigError("input", "at least one input pattern (or --input-list) is needed")
        if self.inputs and self.input_list:
            raise ConfigError("input_list", "give input patterns or an input list, not both")
        _check_choice("listing", self.listing, ("pipeline", "launcher"))
        _check_choice("transformed_sizes", self.transformed_sizes, ("measure", "estimate"))
        if not self.output or not str(self.output).strip():
            raise ConfigError("output", "an output folder is needed")
        object.__setattr__(self, "output", str(self.output).rstrip("/") or "/")
        if self.name is None:
            object.__setattr__(self, "name", _default_name(self.output))
        if not self.name or not _SPLIT_NAME_RE.match(self.name.replace("-", "_")):
            raise ConfigError("name", f"{self.name!r} must be letters, digits, '-', '_' or '.'")
        exts = tuple(
            e.lower() if e.startswith(".") else "." + e.lower()
            for e in (
                self.extensions.split(",") if isinstance(self.extensions, str) else self.extensions
            )
            if e.strip()
        )
        if not exts:
            raise ConfigError("extensions", "at least one extension is needed")
        object.__setattr__(self, "extensions", exts)
        self._validate_labels()
        if isinstance(self.classes, (str, list)):
            object.__setattr__(self, "classes", parse_classes(self.classes))
        if self.classes is not None and self.labels == "none":
            raise ConfigError("classes", "a class list needs --labels dir or regex:PATTERN")
        if not isinstance(self.splits, tuple) or any(not isinstance(s, tuple) for s in self.splits):
            object.__setattr__(self, "splits", parse_splits(self.splits))
        else:
            parse_splits(dict(self.splits))  # validates a programmatic value the same way
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError("seed", f"must be an integer, got {self.seed!r}")
        given = {"min_shard_size": self.min_shard_size, "max_shard_size": self.max_shard_size}
        object.__setattr__(
            self, "min_shard_size", parse_size(self.min_shard_size, "min_shard_size")
        )
        object.__setattr__(
            self, "max_shard_size", parse_size(self.max_shard_size, "max_shard_size")
        )
        _check_unitless_bound(given, self.min_shard_size, self.max_shard_size)
        if self.min_shard_size > self.max_shard_size:
            raise ConfigError(
                "min_shard_size",
                f"{format_size(self.min_shard_size)} is above --max-shard-size "
                f"{format_size(self.max_shard_size)}",
            )
        if self.split_by is not None:
            try:
                compiled = re.compile(self.split_by)
            except re.error as err:
                raise ConfigError(
                    "split_by", f"regex {_as_typed(self.split_by)} does not compile: {err}"
                ) from None
            if compiled.groups == 0:
                raise ConfigError(
                    "split_by",
                    f"regex {_as_typed(self.split_by)} has no capture group; mark the shared part with (...)",
                )
        if self.max_skipped_fraction is not None and not 0 <= self.max_skipped_fraction <= 1:
            raise ConfigError(
                "max_skipped_fraction",
                f"must be between 0 and 1, got {self.max_skipped_fraction!r}",
            )
        if self.planning_bucket_records < 1:
            raise ConfigError("planning_bucket_records", "must be at least 1")
        if self.read_ahead is not None and (
            isinstance(self.read_ahead, bool)
            or not isinstance(self.read_ahead, int)
            or not 0 <= self.read_ahead <= 1024
        ):
            raise ConfigError(
                "read_ahead", f"must be between 0 and 1024 images, got {self.read_ahead!r}"
            )
        if self.overwrite and self.resume:
            raise ConfigError(
                "resume", "--resume keeps finished shards; it cannot go with --overwrite"
            )

    def _validate_labels(self) -> None:
        labels = str(self.labels)
        if labels in ("dir", "none"):
            return
        if not labels.startswith("regex:"):
            raise ConfigError("labels", f"expected dir, none or regex:PATTERN, got {labels!r}")
        pattern = labels[len("regex:") :]
        try:
            compiled = re.compile(pattern)
        except re.error as err:
            raise ConfigError(
                "labels", f"regex {_as_typed(pattern)} does not compile: {err}"
            ) from None
        if compiled.groups == 0:
            raise ConfigError(
                "labels",
                f"regex {_as_typed(pattern)} has no capture group; mark the label with (...) or (?P<label>...)",
            )

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits)

    def to_dict(self) -> dict[str, Any]:
        """The resolved settings as plain JSON-able data (for the manifest): flat, named as
        users write them, so `from_settings` reads them back to an equal config."""
        data = {
            name: getattr(self.image, IMAGE_SETTINGS[name])
            if name in IMAGE_SETTINGS
            else getattr(self, name)
            for name in self.setting_names()
        }
        data["splits"] = dict(self.splits)
        data["inputs"] = list(self.inputs)
        data["extensions"] = list(self.extensions)
        data["classes"] = list(self.classes) if self.classes is not None else None
        data["background"] = list(self.image.background)
        data["resize"] = str(self.image.resize) if self.image.resize is not None else None
        return data

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """Every setting, in the manifest's order: the fields, with `image` as its nine."""
        names: list[str] = []
        for f in dataclasses.fields(cls):
            names.extend(IMAGE_SETTINGS if f.name == "image" else (f.name,))
        return tuple(names)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each setting's default, as `to_dict` writes it (`inputs` and `output` have none)."""
        policy = ImagePolicy()
        data: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "image":
                data.update((name, getattr(policy, f)) for name, f in IMAGE_SETTINGS.items())
            elif f.name not in ("inputs", "output"):
                data[f.name] = f.default
        data["background"] = list(policy.background)
        data["splits"] = dict(data["splits"])
        data["extensions"] = list(data["extensions"])
        return data

    @classmethod
    def setting_of(cls, key: str) -> str | None:
        """The setting a key of a config file or a flag names (`-` or `_`, `input` for
        `inputs`), or None for none."""
        norm = str(key).replace("-", "_")
        norm = "inputs" if norm == "input" else norm
        return norm if norm in cls.setting_names() else None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> BuildConfig:
        """Builds a config from a mapping whose keys may use `-` or `_` (YAML files, merged flags)."""
        values: dict[str, Any] = {}
        for key, value in settings.items():
            norm = cls.setting_of(key)
            if norm is None:
                raise ConfigError(key, unknown_setting(key))
            values[norm] = value
        for required in ("inputs", "output"):
            if required == "inputs" and values.get("input_list"):
                values.setdefault("inputs", ())
                continue
            if values.get(required) in (None, "", [], ()):
                raise ConfigError(
                    "input" if required == "inputs" else required,
                    f"is required (give --{'input' if required == 'inputs' else required} or set it in --config)",
                )
        inputs = values.get("inputs")
        if isinstance(inputs, list):
            values["inputs"] = tuple(inputs)
        elif not isinstance(inputs, (str, tuple)) or not all(
            isinstance(p, str) for p in values["inputs"]
        ):
            raise ConfigError("input", f"must be a path or glob, or a list of them, got {inputs!r}")
        if isinstance(values.get("extensions"), list):
            values["extensions"] = tuple(values["extensions"])
        if isinstance(values.get("splits"), (str, Mapping)):
            values["splits"] = parse_splits(values["splits"])
        if "classes" in values:
            values["classes"] = parse_classes(values["classes"])
        for int_key in (
            "seed", "max_pixels", "jpeg_quality", "planning_bucket_records", "read_ahead",
        ):  # fmt: skip
            if isinstance(values.get(int_key), str):
                try:
                    values[int_key] = int(values[int_key])
                except ValueError:
                    raise ConfigError(
                        int_key, f"must be an integer, got {values[int_key]!r}"
                    ) from None
        if isinstance(values.get("max_skipped_fraction"), str):
            try:
                values["max_skipped_fraction"] = float(values["max_skipped_fraction"])
            except ValueError:
                raise ConfigError(
                    "max_skipped_fraction",
                    f"must be a number, got {values['max_skipped_fraction']!r}",
                ) from None
        policy = {
            IMAGE_SETTINGS[name]: values.pop(name) for name in IMAGE_SETTINGS if name in values
        }
        _check_switch("exif_orientation", policy.get("apply_exif_orientation", True))
        try:
            values["image"] = ImagePolicy(**policy)
        except PolicyError as err:  # named as the setting the user gave
            setting = next(name for name, f in IMAGE_SETTINGS.items() if f == err.field)
            raise ConfigError(setting, err.problem) from None
        try:
            return cls(**values)
        except (
            TypeError
        ) as err:  # a YAML value of the wrong shape, e.g. a mapping where a string goes
            raise ConfigError("config", str(err)) from None


def _default_name(output: str) -> str:
    tail = output.rstrip("/").rsplit("/", 1)[-1]
    tail = without_protocol(tail) or "dataset"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", tail) or "dataset"


def unknown_setting(key: str) -> str:
    """Why `key` is refused as a setting: the nearest known one, else the list of them all."""
    names = sorted("input" if name == "inputs" else name for name in BuildConfig.setting_names())
    close = nearest(key, names)
    if close:
        return f"unknown setting {key!r}; did you mean {close!r}?"
    return f"unknown setting {key!r}; known: {', '.join(names)}"


def _check_unitless_bound(given: Mapping[str, Any], low: int, high: int) -> None:
    """Refuses bounds that cross because one was given without a unit (`--max-shard-size 10`
    is 10 bytes): named as the bound given so, with the unit most likely meant."""
    defaults = {f.name: f.default for f in dataclasses.fields(BuildConfig)}
    unitless = [
        setting
        for setting, value in given.items()
        if value != defaults[setting]  # a default is no typo
        and not isinstance(value, bool)
        and str(value).strip().replace(".", "", 1).isdigit()
    ]
    if low <= high or len(unitless) != 1:
        return  # in order, or both alike: the bounds' clash is worded as it always was
    (setting,) = unitless
    number = str(given[setting]).strip()
    other, bound = (
        ("min-shard-size", low) if setting == "max_shard_size" else ("max-shard-size", high)
    )
    side = "below" if setting == "max_shard_size" else "above"
    raise ConfigError(
        setting,
        f"{number} is {number} bytes (a size without a unit is bytes), {side} --{other} "
        f"{format_size(bound)}; did you mean {number}MB?",
    )


def _check_switch(setting: str, value: Any) -> None:
    # A YAML `overwrite: "no"` is a non-empty string, true to Python: it must not replace a build
    # (nor deduplicate, nor resume, nor keep EXIF rotation) that nobody asked to.
    if not isinstance(value, bool):
        raise ConfigError(setting, f"expected true or false, got {value!r}")


def _check_choice(setting: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(setting, f"expected one of {', '.join(choices)}, got {value!r}")


def _as_typed(pattern: str) -> str:
    """A regex in quotes as the user typed it, where `repr` would double every backslash."""
    return f"'{pattern}'"
