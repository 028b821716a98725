"""The record of the settings a build's shards are made with, written into its output folder as
the build starts (`build-settings.json`): a --resume with other settings is refused, rather than
given shards made with the old ones.

A record shows only some of the settings that made it (its format, channels and size), and
`resume.keep_finished` checks those; another `--jpeg-quality`, `--background`, a larger
`--resize` box or `--encode` left out show in none. The record of the settings shows them all.
"""

from __future__ import annotations

import json
import logging
import posixpath
import shlex
from typing import Any

import fsspec

from beam_tfrecord.build_folder import shard_names
from beam_tfrecord.config import BuildConfig, ConfigError
from beam_tfrecord.manifest import SETTINGS_FILE, discard_manifest
from beam_tfrecord.settings import Setting, setting
from beam_tfrecord.storage import is_store_refusal, publish, store_reason

__all__ = ["RECORDED", "check_resumed", "recorded_settings", "settings_text", "start_output"]

_LOG = logging.getLogger(__name__)

# The record's layout: a record of another layout is not read as this one.
_FORMAT = "beam-tfrecord-settings/1"

# The settings the record holds, in the manifest's order: every setting a --resume may not
# change (`Setting.resume_may_change`), a new one too unless it says so.
RECORDED: tuple[str, ...] = tuple(
    name for name in BuildConfig.setting_names() if not setting(name).resume_may_change
)


def recorded_settings(config: BuildConfig) -> dict[str, Any]:
    """The settings that make what `config`'s build writes (its records' bytes, its plan, its
    shards' names), named and written as manifest.json's `config` has them."""
    resolved = config.to_dict()
    return {name: resolved[name] for name in RECORDED}


def settings_text(config: BuildConfig) -> str:
    """The record of `config`'s settings, as its build writes it: the same text for the same
    settings (no time, no path), so two builds alike write the same file."""
    record = {"format": _FORMAT, "settings": recorded_settings(config)}
    return json.dumps(record, indent=1, ensure_ascii=False) + "\n"


def start_output(config: BuildConfig) -> None:
    """What a build does to its output folder before it writes anything else there: with
    --overwrite, the earlier build's manifest goes (a folder half-way through being replaced
    must not claim to be a finished build); then the record of this build's settings is
    published, so that every shard published after it was made with them.

    A --resume writes none where the folder holds finished shards: with a record there,
    `checks.preflight` found its settings to be these (and its time is what the shards are
    older than, `resume`); with none, they were written by an earlier version of this tool and
    would pass for this record's (`resume.keep_finished`), what made them not known, which a
    warning says. With no shard to keep, a record there (of a start that made none) is
    replaced.

    Raises:
        ConfigError: the folder could not be written or asked (nothing of the build is written).
    """
    try:
        if config.overwrite:
            discard_manifest(config.output)
        fs, path = fsspec.core.url_to_fs(config.output)
        if config.resume and not _to_record_on_resume(fs, path, config.output):
            return
        publish(fs, posixpath.join(path, SETTINGS_FILE), settings_text(config).encode("utf-8"))
    except Exception as err:
        if not is_store_refusal(err):
            raise
        # As the checks refuse an output they cannot write: nothing of the build is written yet.
        raise ConfigError(
            "output", f"{config.output!r} is not writable: {store_reason(err)}"
        ) from None


def _to_record_on_resume(fs, path: str, output: str) -> bool:
    """Whether a --resume into `output` writes the record of its settings: only into a folder
    that holds no finished shard (an interrupted build that had written nothing, its record
    then replaced, or a build that published nothing and left its report alone)."""
    fs.invalidate_cache(path)  # object stores cache listings
    try:
        names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return True
    if not shard_names(names):
        return True
    if SETTINGS_FILE not in names:
        _LOG.warning(
            "%s holds finished shards and no %s (an earlier version of beam-tfrecord wrote "
            "them, or it was removed): --resume checks what their records show, not every "
            "setting they were made with; after changing an image setting, build with "
            "--overwrite",
            output,
            SETTINGS_FILE,
        )
    return False


def check_resumed(config: BuildConfig, text: bytes) -> None:
    """Refuses a --resume whose settings differ from those of the record `text` (the output
    folder's build-settings.json), naming each that does, with its value there and here.

    A setting the record does not hold (one added since it was written) is taken as it was
    then: at its default.

    Raises:
        ConfigError: they differ, or the record is not one.
    """
    recorded = _read_record(text, config.output)
    defaults = BuildConfig.defaults()
    # As the record holds them: through JSON (tuples made lists).
    current = json.loads(json.dumps(recorded_settings(config)))
    changes = []
    for name, value in current.items():
        before = recorded.get(name, defaults.get(name))
        if _comparable(before) != _comparable(value):
            changes.append(_change(setting(name), before, value))
    if changes:
        raise ConfigError(
            "resume",
            f"{config.output!r} was built with other settings ({SETTINGS_FILE}): "
            f"{'; '.join(changes)}. To go on with it, run again with the settings it was built "
            "with (before each ->); to build it anew with these, run with --overwrite "
            "instead of --resume",
        )


def _read_record(text: bytes, output: str) -> dict[str, Any]:
    """The settings a record holds; ConfigError if it is not a record of this layout."""
    try:
        record = json.loads(text)
    except ValueError as err:  # a UnicodeDecodeError too
        why = f"not JSON: {err}"
    else:
        settings = record.get("settings") if isinstance(record, dict) else None
        if not isinstance(record, dict) or record.get("format") != _FORMAT:
            found = record.get("format") if isinstance(record, dict) else None
            why = f"its format is {found!r}, not {_FORMAT!r}"
        elif not isinstance(settings, dict):
            why = "it holds no settings"
        else:
            return settings
    raise ConfigError(
        "resume",
        f"{output!r}: its {SETTINGS_FILE} is not a record of a build's settings ({why}); to "
        "build it anew, run with --overwrite instead of --resume",
    )


def _comparable(value: Any) -> Any:
    """A setting's value as two records' are compared: a mapping as its pairs in order (the
    order of splits is part of the plan), a tuple as a list."""
    if isinstance(value, dict):
        return [[key, _comparable(item)] for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        return [_comparable(item) for item in value]
    return value


def _change(declared: Setting, before: Any, now: Any) -> str:
    """A setting's change as a refusal names it, by its flag: `--jpeg-quality 95 -> 80`, a
    switch's as `with --dedup -> without` (`with dedup=True -> without` to a Python caller,
    `config.in_python_names`)."""
    flag = declared.flags[0]
    if declared.kind == "switch":
        given = before != declared.default
        return f"{'with' if given else 'without'} {flag} -> {'without' if given else 'with'}"
    return (
        f"{flag} {' -> '.join(_around_difference(_shown(declared, before), _shown(declared, now)))}"
    )


# A value shown longer than this (a --classes list of a thousand names) is shown around where
# the two differ, not whole twice on the refusal's one line.
_LONGEST_SHOWN = 60
_CONTEXT = 20


def _around_difference(before: str, now: str) -> tuple[str, str]:
    """The two values as shown, each cut to the stretch around the first character where they
    differ when either is long, with `...` where it was cut."""
    if max(len(before), len(now)) <= _LONGEST_SHOWN:
        return before, now
    same = next(
        (i for i, (a, b) in enumerate(zip(before, now, strict=False)) if a != b),
        min(len(before), len(now)),
    )
    start = max(0, same - _CONTEXT)

    def cut(text: str) -> str:
        end = start + 2 * _CONTEXT
        return f"{'...' if start else ''}{text[start:end]}{'...' if end < len(text) else ''}"

    return cut(before), cut(now)


def _shown(declared: Setting, value: Any) -> str:
    """A setting's value as a flag gives it (quoted for a shell where it must be), or that it
    is not given."""
    if value is None:
        return "not given"
    return shlex.quote(declared.shown(value))
