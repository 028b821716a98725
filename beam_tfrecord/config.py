"""Build configuration: one frozen dataclass, loaded from YAML and flags, validated before anything runs."""

from __future__ import annotations

import contextvars
import dataclasses
import math
import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from beam_tfrecord.images.policy import ImagePolicy, PolicyError
from beam_tfrecord.labels import class_name_problem
from beam_tfrecord.locations import has_protocol, is_store_url, without_protocol
from beam_tfrecord.settings import (
    DEFAULT_EXTENSIONS,
    SETTINGS,
    Setting,
    default,
    image_settings,
    in_python_names,
)
from beam_tfrecord.settings import setting as setting_named
from beam_tfrecord.wording import nearest

__all__ = [
    "DEFAULT_EXTENSIONS",
    "IMAGE_SETTINGS",
    "BuildConfig",
    "ConfigError",
    "folder_renamed",
    "for_the_caller",
    "format_size",
    "parse_classes",
    "parse_size",
    "parse_splits",
    "unknown_setting",
]

_SIZE_UNITS = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}  # fmt: skip
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
# Split names end up in file names, so keep them to characters that are safe on every filesystem.
# A split's name is part of its shards' file names (`{name}-{split}.tfrecord-...`, so no '-'),
# and what TFDS's `split=` reads (its names are `[\w-]+`, so no '.': `a.b` was refused there).
_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]*$")
_SPLIT_NAME_RULE = "must start with a letter or digit, followed by letters, digits or '_'"
# A dataset's name starts its shards' file names (`photos-v1.0-train.tfrecord-...`): a split name
# follows it, so it may hold '.' and '-' (`photos-v1.0`).
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NAME_RULE = "must start with a letter or digit, followed by letters, digits, '-', '_' or '.'"
_RATIO_TOLERANCE = 1e-6

# The settings (flags, config keys, the manifest's `config`) that make a build's ImagePolicy, in
# the manifest's order, with the policy field each one sets.
IMAGE_SETTINGS: dict[str, str] = image_settings()


class ConfigError(ValueError):
    """A setting is invalid. `setting` names it as the user spelled it on the command line;
    `message` says what is wrong, the text after `--setting: `."""

    def __init__(self, setting: str, message: str):
        self.setting = setting
        self.message = message
        super().__init__(f"--{setting.lstrip('-').replace('_', '-')}: {message}")

    def for_python(self) -> ConfigError:
        """The same refusal as a Python caller reads it: the settings its words name (the
        switches to pass among them) as BuildConfig's fields (`overwrite=True`,
        `max_skipped_fraction`), not as flags (`--overwrite`)."""
        return ConfigError(self.setting, in_python_names(self.message))


# Set while the command line reads its settings and runs a build: its refusals name flags, not
# BuildConfig's fields.
COMMAND_LINE = contextvars.ContextVar("beam_tfrecord_command_line", default=False)


def for_the_caller(error: Exception) -> Exception:
    """`error` (a ConfigError or BuildFailed) in the words of whoever called: as it is for the
    command line, its `for_python()` for a Python caller."""
    return error if COMMAND_LINE.get() else error.for_python()


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
    elif isinstance(value, (list, tuple)) and all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in value
    ):
        items = [(str(name), ratio) for name, ratio in value]
    elif not isinstance(value, str):  # a config file's `splits: [train, test]`, `splits: 5`
        got = f"a list: {value!r}" if isinstance(value, (list, tuple)) else repr(value)
        raise ConfigError(
            "splits",
            f"expected split names with their ratios, such as {{train: 0.8, test: 0.2}} in a "
            f"config file, got {got}",
        )
    else:
        items = []
        for part in value.split(","):
            if not part.strip():
                continue
            name, sep, ratio = part.partition("=")
            if not sep:
                raise ConfigError(
                    "splits",
                    f"expected name=ratio, got {part.strip()!r} (such as train=0.8,test=0.2; in "
                    "a config file, a mapping: {train: 0.8, test: 0.2})",
                )
            items.append((name.strip(), ratio.strip()))
    if not items:
        raise ConfigError("splits", "at least one split is needed, e.g. train=1")
    splits: list[tuple[str, float]] = []
    for name, raw in items:
        if not _SPLIT_NAME_RE.match(name):
            raise ConfigError(
                "splits",
                f"split name {name!r} {_SPLIT_NAME_RULE} (it is part of file names, and what "
                "TFDS's split= reads)",
            )
        if name.lower() == "all":
            raise ConfigError(
                "splits",
                f"split name {name!r} is TFDS's name for every split at once; choose another",
            )
        try:
            if isinstance(raw, bool):  # `{train: yes}` is no ratio of 1
                raise TypeError(raw)
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
                with fsspec.open(path, "rt", encoding="utf-8-sig") as f:  # a BOM is no name
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

    Its fields are the build's settings, each declared once in `beam_tfrecord.settings` (its
    kind, default, flag, help and meaning; the config file reference lists them all), and
    checked here by its kind when the config is made. One field is not a setting itself:

    Attributes:
        image: how each image is checked, normalized and transformed. As settings (flags, config
            files, the manifest) it is nine (IMAGE_SETTINGS), named as users write them;
            `from_settings` makes the policy from them.
    """

    inputs: tuple[str, ...] = default("inputs")
    output: str = default("output")
    input_list: str | None = default("input_list")
    listing: str = default("listing")
    name: str | None = default("name")
    extensions: tuple[str, ...] = default("extensions")
    labels: str = default("labels")
    classes: tuple[str, ...] | None = default("classes")
    splits: tuple[tuple[str, float], ...] = default("splits")
    seed: int = default("seed")
    min_shard_size: int = default("min_shard_size")
    max_shard_size: int = default("max_shard_size")
    overwrite: bool = default("overwrite")
    resume: bool = default("resume")
    image: ImagePolicy = field(default_factory=ImagePolicy)
    dedup: bool = default("dedup")
    transformed_sizes: str = default("transformed_sizes")
    split_by: str | None = default("split_by")
    max_skipped_fraction: float | None = default("max_skipped_fraction")
    allow_missing_classes: bool = default("allow_missing_classes")
    planning_bucket_records: int = default("planning_bucket_records")
    read_ahead: int | None = default("read_ahead")

    def __post_init__(self) -> None:
        try:
            self._check()
        except ConfigError as err:
            raise for_the_caller(err) from None

    def _check(self) -> None:
        """Checks each setting by its kind, in the table's order, holding it as checked."""
        if not isinstance(self.image, ImagePolicy):
            raise ConfigError("image", f"expected an ImagePolicy, got {self.image!r}")
        given = {"min_shard_size": self.min_shard_size, "max_shard_size": self.max_shard_size}
        for setting in _OWN_SETTINGS:  # in the table's order: `name` follows `output`, ...
            value = _CHECKS[setting.kind](setting, getattr(self, setting.name), self)
            object.__setattr__(self, setting.name, value)
        _check_unitless_bound(given, self.min_shard_size, self.max_shard_size)
        if self.min_shard_size > self.max_shard_size:
            raise _crossed_bounds(given, self.min_shard_size, self.max_shard_size)
        if self.overwrite and self.resume:
            raise ConfigError(
                "resume", "--resume keeps finished shards; it cannot go with --overwrite"
            )

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits)

    def places(self) -> list[tuple[str, str]]:
        """Where the build reads and writes, each URL with its setting: the inputs, the output,
        the input list."""
        places = [("input", url) for url in self.inputs] + [("output", self.output)]
        if self.input_list:
            places.append(("input_list", self.input_list))
        return places

    def reaches_a_store(self) -> bool:
        """Whether the build reads or writes an object store (not this machine's disk or memory)."""
        return any(is_store_url(url) for _, url in self.places())

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
        """Builds a config from a mapping whose keys may use `-` or `_` (YAML files, merged flags).

        A path (`input`, `output`, `input_list`, and the file of `classes`, `@FILE` in a flag)
        may be given as text or as an `os.PathLike` such as `pathlib.Path`.

        Raises:
            ConfigError: a setting is unknown, missing or invalid; from Python, its words name
                the settings as this mapping does (`overwrite=True`), not as flags.
        """
        try:
            return cls._from_mapping(settings)
        except ConfigError as err:
            raise for_the_caller(err) from None

    @classmethod
    def _from_mapping(cls, settings: Mapping[str, Any]) -> BuildConfig:
        if not isinstance(settings, Mapping):
            raise ConfigError(
                "config",
                "from_settings takes a mapping of settings to their values, such as "
                f"{{'input': ['photos/**'], 'output': 'out/photos'}}, not a "
                f"{type(settings).__name__}: {settings!r}",
            )
        values: dict[str, Any] = {}
        for key, value in settings.items():
            if not isinstance(key, str):  # a mapping made in code: `{5: 3}`
                raise ConfigError(
                    "config", f"a setting's name must be text, such as 'seed', got {key!r}"
                )
            norm = cls.setting_of(key)
            if norm is None:
                raise ConfigError(key, unknown_setting(key))
            values[norm] = value
        for required in ("inputs", "output"):
            if required == "inputs" and values.get("input_list"):
                values.setdefault("inputs", ())
                continue
            if values.get(required) in (None, "", [], ()):
                key = setting_named(required).key
                # A config file is the command's; a Python caller gives the mapping alone.
                where = f" (give --{key} or set it in --config)" if COMMAND_LINE.get() else ""
                raise ConfigError(key, f"is required{where}")
        values = {name: _read(setting_named(name), value) for name, value in values.items()}
        policy = {
            IMAGE_SETTINGS[name]: values.pop(name) for name in IMAGE_SETTINGS if name in values
        }
        try:
            values["image"] = ImagePolicy(**policy)
        except PolicyError as err:  # named as the setting the user gave
            setting = next(name for name, f in IMAGE_SETTINGS.items() if f == err.field)
            raise ConfigError(setting, err.problem) from None
        try:
            return cls(**values)
        except TypeError as err:  # a YAML value of the wrong shape, e.g. a mapping for a string
            raise ConfigError("config", str(err)) from None


# BuildConfig's own settings (not ImagePolicy's), checked in this order when a config is made.
_OWN_SETTINGS: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.policy_field is None)


# The kinds whose value is one path, with what it names: a config file's list, mapping or
# number is refused as a list of inputs is.
_ONE_PATH = {"output": "folder", "text": "file"}

# The kinds whose value is text (extensions and classes: or a list of texts), with what it must
# be and, for a name, what it names: a config file's `classes: 5` or `split_by: 5` reached
# Python as a number ('int' object is not iterable), `extensions: {a: 1}` was taken as `.a`,
# `labels: [dir]` as the text "['dir']", and `classes: [yes, no]` as 'True' and 'False'.
_TEXT = {
    "name": ("a dataset name", "dataset"),
    "labels": ("dir, none or regex:PATTERN", None),
    "regex": ("a regex with a capture group", None),
    "extensions": ("file suffixes, comma-separated or a list of them", None),
    "classes": ("class names: a,b,c, @FILE or a list of them", "class"),
}
_TEXTS = ("extensions", "classes")


def _read(setting: Setting, value: Any) -> Any:
    """A value as a config file or a flag gives it (text, YAML's types), made the setting's
    type where that is plain (`seed: "7"`); BuildConfig and ImagePolicy check it then."""
    value = _path_as_text(setting, value)
    if setting.kind == "paths":
        if not isinstance(value, (str, list, tuple)) or not all(isinstance(p, str) for p in value):
            # `input: [a, 5]` was the folder '5'.
            raise ConfigError(
                setting.key, f"must be a path or glob, or a list of them, got {value!r}"
            )
        return tuple(value) if isinstance(value, list) else value
    elif setting.kind in _ONE_PATH and not isinstance(value, (str, os.PathLike, type(None))):
        # YAML's `output: [a, b]` made a name of its text ('__a____b__', then refused as --name);
        # `output: 7` built into ./7.
        kind = _ONE_PATH[setting.kind]
        hint = _unquoted(value, kind)
        raise ConfigError(setting.key, f"must be a {kind}'s path or URL, got {value!r}{hint}")
    elif setting.kind in ("integer", "number") and isinstance(value, str):
        kind, word = (int, "an integer") if setting.kind == "integer" else (float, "a number")
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(setting.key, f"must be {word}, got {value!r}") from None
    elif setting.kind in _TEXT:
        _check_text(setting, value)
    elif setting.kind == "splits" and isinstance(value, Mapping):
        for name in (name for name in value if not isinstance(name, str)):
            # `{5: 1}` was the split '5', `{yes: 1}` the split 'True'.
            hint = _unquoted(name, "split")
            raise ConfigError(setting.key, f"a split's name must be text, got {name!r}{hint}")
    elif setting.kind == "switch":
        _check_switch(setting.key, value)
    return value


def _path_as_text(setting: Setting, value: Any) -> Any:
    """A path given as an `os.PathLike` (a `pathlib.Path`, as `Dataset` takes one), or a list
    of inputs holding some, as the text of its path; a class list's file so given as `@FILE`.
    Any other value as it is."""
    if setting.kind == "paths" and isinstance(value, (list, tuple)):
        return [os.fspath(p) if isinstance(p, os.PathLike) else p for p in value]
    if not isinstance(value, os.PathLike) or setting.kind not in _PATH_KINDS:
        return value
    path = os.fspath(value)
    return "@" + path if setting.kind == "classes" and isinstance(path, str) else path


# The kinds of setting a path is given to: a file of class names is one way to give classes.
_PATH_KINDS = ("paths", "output", "text", "classes")


def _check_text(setting: Setting, value: Any) -> None:
    """Refuses a value of a text kind (`_TEXT`) that is not text: a config file's number,
    boolean, list or mapping (a list where a list of texts is taken, holding another)."""
    if isinstance(value, str) or (value is None and setting.default is None):
        return
    wrong = [value]
    if setting.kind in _TEXTS and isinstance(value, (list, tuple)):
        wrong = [item for item in value if not isinstance(item, str)]
        if not wrong:
            return
    what, noun = _TEXT[setting.kind]
    raise ConfigError(setting.key, f"must be {what}, got {value!r}{_unquoted(wrong[0], noun)}")


def _unquoted(value: Any, noun: str | None) -> str:
    """How to write a name that YAML read as a number or a boolean (`classes: [0, 1]`,
    `classes: [yes, no]`) as the text it is, said after the refusal; empty where none helps."""
    if noun is None:
        return ""
    if isinstance(value, bool):
        return (
            f" (YAML reads an unquoted yes, no, on, off, true or false as a switch: quote a "
            f"{noun} so named)"
        )
    if isinstance(value, (int, float)):
        return f" (quote it, '{value}', for a {noun} of that name)"
    return ""


# --- each kind's check (settings.KINDS): the value as given -> the value the config holds ------


def _paths(setting: Setting, value: Any, config: BuildConfig) -> tuple[str, ...]:
    if isinstance(value, (str, os.PathLike)):
        value = (value,)
    value = tuple(os.fspath(p) if isinstance(p, os.PathLike) else str(p) for p in value)
    if any(not p.strip() for p in value):
        raise ConfigError(setting.key, f"an input pattern is empty: {list(value)}")
    if not value and not config.input_list:
        raise ConfigError(setting.key, "at least one input pattern (or --input-list) is needed")
    if value and config.input_list:
        raise ConfigError("input_list", "give input patterns or an input list, not both")
    return value


def _text(setting: Setting, value: Any, config: BuildConfig) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _output(setting: Setting, value: Any, config: BuildConfig) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not value or not str(value).strip():
        raise ConfigError(setting.key, "an output folder is needed")
    output = str(value)
    if has_protocol(output) and not without_protocol(output).strip("/"):
        # `gs://` built into a folder `gs:` here, its slashes taken off as a folder's are.
        raise ConfigError(setting.key, f"{output!r} names a filesystem, but no folder in it")
    return output.rstrip("/") or "/"


def _name(setting: Setting, value: Any, config: BuildConfig) -> str:
    if value is None:
        return _name_of_folder(config.output)
    if not value or not isinstance(value, str) or not _NAME_RE.match(value):
        raise ConfigError(setting.key, f"{value!r} {_NAME_RULE}")
    return value


def _name_of_folder(output: str) -> str:
    """The name of a build not given one: its output folder's. One that cannot be a name is
    refused as the output's (the user gave --output, not --name), the folder named."""
    name = _default_name(output)
    if _NAME_RE.match(name):
        return name
    folder = _folder_name(output)
    made = "" if folder == name else f" {folder!r}, '_' for each character a name cannot hold"
    raise ConfigError(
        "output",
        f"{output!r} names the dataset {name!r} (its folder's name{made}; no --name was "
        f"given), but a dataset name {_NAME_RULE}; pass --name NAME to name it",
    )


def _choice(setting: Setting, value: Any, config: BuildConfig) -> Any:
    _check_choice(setting.key, value, setting.choices)
    return value


def _extensions(setting: Setting, value: Any, config: BuildConfig) -> tuple[str, ...]:
    # `*.jpg`, as a shell user writes a kind of file, is `.jpg`.
    given = (e.strip().lstrip("*") for e in (value.split(",") if isinstance(value, str) else value))
    exts = tuple(e.lower() if e.startswith(".") else "." + e.lower() for e in given if e)
    if not exts:
        raise ConfigError(setting.key, "at least one extension is needed")
    return exts


def _labels(setting: Setting, value: Any, config: BuildConfig) -> Any:
    labels = str(value)
    if labels in ("dir", "none"):
        return value
    if not labels.startswith("regex:"):
        # Quoted as given, not as repr: a pattern's backslashes would show doubled.
        hint = ""
        if labels.lower().startswith(("regex=", "regex ")):
            hint = f"; did you mean 'regex:{labels[len('regex=') :]}'?"
        raise ConfigError(setting.key, f"expected dir, none or regex:PATTERN, got '{labels}'{hint}")
    _check_regex(setting, labels[len("regex:") :], "mark the label with (...) or (?P<label>...)")
    return value


def _classes(setting: Setting, value: Any, config: BuildConfig) -> tuple[str, ...] | None:
    if value is None:
        return None
    if config.labels == "none":
        raise ConfigError(setting.key, "a class list needs --labels dir or regex:PATTERN")
    return parse_classes(_path_as_text(setting, value))


def _splits(setting: Setting, value: Any, config: BuildConfig) -> Any:
    if not isinstance(value, tuple) or any(not isinstance(s, tuple) for s in value):
        return parse_splits(value)
    parse_splits(dict(value))  # validates a programmatic value the same way
    return value


def _integer(setting: Setting, value: Any, config: BuildConfig) -> int | None:
    if value is None and setting.default is None:
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    low, high = setting.bounds
    if low is not None and high is not None:
        if not whole or not low <= value <= high:
            unit = f" {setting.unit}" if setting.unit else ""
            raise ConfigError(setting.key, f"must be between {low} and {high}{unit}, got {value!r}")
    elif not whole:
        raise ConfigError(setting.key, f"must be an integer, got {value!r}")
    elif low is not None and value < low:
        raise ConfigError(setting.key, f"must be at least {low}, got {value!r}")
    return value


def _number(setting: Setting, value: Any, config: BuildConfig) -> float | None:
    if value is None:
        return None
    low, high = setting.bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(setting.key, f"must be between {low} and {high}, got {value!r}")
    return value


def _size(setting: Setting, value: Any, config: BuildConfig) -> int:
    return parse_size(value, setting.key)


def _switch(setting: Setting, value: Any, config: BuildConfig) -> bool:
    _check_switch(setting.key, value)
    return value


def _regex(setting: Setting, value: Any, config: BuildConfig) -> str | None:
    if value is not None:
        _check_regex(setting, value, "mark the shared part with (...)")
    return value


def _check_regex(setting: Setting, pattern: str, mark: str) -> None:
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise ConfigError(
            setting.key, f"regex {_as_typed(pattern)} does not compile: {err}"
        ) from None
    if compiled.groups == 0:
        raise ConfigError(setting.key, f"regex {_as_typed(pattern)} has no capture group; {mark}")


_CHECKS = {
    "paths": _paths,
    "text": _text,
    "output": _output,
    "name": _name,
    "choice": _choice,
    "extensions": _extensions,
    "labels": _labels,
    "classes": _classes,
    "splits": _splits,
    "integer": _integer,
    "number": _number,
    "size": _size,
    "switch": _switch,
    "regex": _regex,
}


def _default_name(output: str) -> str:
    """The output folder's own name, as a dataset name: each character a name cannot hold made
    '_' (`my photos` -> `my_photos`); `dataset` for a folder with no name (`/`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", _folder_name(output)) or "dataset"


def _folder_name(output: str) -> str:
    """The output folder's own name: `.` and `..` are the names of folders they stand for
    (`--output .` in a folder `flowers` is `flowers`); empty for the root."""
    path = output if has_protocol(output) else os.path.abspath(output or ".")
    tail = posixpath.basename(without_protocol(path).rstrip("/"))
    return "" if tail in (".", "..") else tail


def folder_renamed(config: BuildConfig) -> str | None:
    """The output folder's name when the build is named after it with '_' for the characters a
    name cannot hold (`données` built as `donn_es`); None when the name is the folder's as it
    is, or not made from it."""
    folder = _folder_name(config.output)
    if folder and folder != config.name and config.name == _default_name(config.output):
        return folder
    return None


def unknown_setting(key: str) -> str:
    """Why `key` is refused as a setting: the nearest known one, else the list of them all."""
    hidden = {setting.name for setting in SETTINGS if setting.hidden}
    names = sorted(
        "input" if name == "inputs" else name
        for name in BuildConfig.setting_names()
        if name not in hidden
    )
    close = nearest(key, names)
    if close:
        return f"unknown setting {key!r}; did you mean {close!r}?"
    return f"unknown setting {key!r}; known: {', '.join(names)}"


def _check_unitless_bound(given: Mapping[str, Any], low: int, high: int) -> None:
    """Refuses bounds that cross because one was given without a unit (`--max-shard-size 10`
    is 10 bytes): named as the bound given so, with the unit most likely meant."""
    unitless = [
        setting
        for setting, value in given.items()
        if value != default(setting)  # a default is no typo
        and not isinstance(value, bool)
        and str(value).strip().replace(".", "", 1).isdigit()
    ]
    if low <= high or len(unitless) != 1:
        return  # in order, or both alike: the bounds' clash is worded as it always was
    (setting,) = unitless
    number = str(given[setting]).strip()
    other, bound = (
        ("min_shard_size", low) if setting == "max_shard_size" else ("max_shard_size", high)
    )
    side = "below" if setting == "max_shard_size" else "above"
    meant = float(number) * 10**6
    # `--max-shard-size 10` meant as 10MB is below the default minimum (100MB) all the same.
    crossed = meant < low if setting == "max_shard_size" else meant > high
    also = f", with {_flag(other)} set too" if crossed and _is_default(given, other) else ""
    raise ConfigError(
        setting,
        f"{number} is {number} bytes (a size without a unit is bytes), {side} "
        f"{_bound(given, other, bound)}; did you mean {number}MB{also}?",
    )


def _crossed_bounds(given: Mapping[str, Any], low: int, high: int) -> ConfigError:
    """The refusal of shard size bounds that cross: named as the bound given, the other one
    said to be its default where it is (`--max-shard-size 50MB` alone was refused as
    `--min-shard-size: 100.0 MB is above ...`, a size the user never gave), and to set it."""
    if _is_default(given, "min_shard_size") and not _is_default(given, "max_shard_size"):
        return ConfigError(
            "max_shard_size",
            f"{format_size(high)} is below {_bound(given, 'min_shard_size', low)}; set "
            "--min-shard-size too",
        )
    also = "; set --max-shard-size too" if _is_default(given, "max_shard_size") else ""
    return ConfigError(
        "min_shard_size",
        f"{format_size(low)} is above {_bound(given, 'max_shard_size', high)}{also}",
    )


def _bound(given: Mapping[str, Any], setting: str, size: int) -> str:
    """A shard size bound as a refusal names it: `--max-shard-size 50.0 MB`, or one not given
    `--max-shard-size's default, 200.0 MB`."""
    if _is_default(given, setting):
        return f"{_flag(setting)}'s default, {format_size(size)}"
    return f"{_flag(setting)} {format_size(size)}"


def _is_default(given: Mapping[str, Any], setting: str) -> bool:
    return given[setting] == default(setting)


def _flag(setting: str) -> str:
    return "--" + setting.replace("_", "-")


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
