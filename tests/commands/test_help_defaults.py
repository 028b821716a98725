"""Every option's --help states its default; a build option's, made from the settings table, is
the default a build takes."""

from __future__ import annotations

import argparse
import re
import subprocess

import pytest
from command_process import COMMAND

from beam_tfrecord.commands import cli
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.remote import default_depth
from beam_tfrecord.settings import SETTINGS

# `(default: VALUE)`, or `(default: VALUE; more words)`.
_DEFAULT = re.compile(r"\(default: ([^()]*)\)")

# Build options with no default: the inputs, the output, and where settings come from.
_NO_DEFAULT = {"--config", "--input", "--input-list", "--output"}


def _options(command: str) -> list[tuple[argparse.Action, str]]:
    """The command's options (not -h), each with its help as --help prints it."""
    parser = cli._parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command_parser = sub.choices[command]
    formatter = command_parser._get_formatter()
    return [
        (action, formatter._expand_help(action))
        for action in command_parser._actions
        if action.option_strings
        and action.help is not argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction)
    ]


def _documented(help_text: str) -> str | None:
    found = _DEFAULT.findall(help_text)
    assert len(found) <= 1, f"more than one default in {help_text!r}"
    return found[0].split("; ")[0] if found else None


def _minimal(**settings) -> BuildConfig:
    return BuildConfig.from_settings({"inputs": ["photos/**"], "output": "out/pets", **settings})


def _resolved(config: BuildConfig, setting: str):
    """A setting's value in a config: its own field, or its image policy's."""
    for holder in (config, config.image):
        if hasattr(holder, setting):
            return getattr(holder, setting)
    raise AssertionError(f"BuildConfig has no setting {setting!r}")


def _is_switch(action: argparse.Action) -> bool:
    return isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))


@pytest.mark.parametrize("command", sorted(cli._COMMANDS))
def test_every_option_with_a_default_states_it(command):
    missing = []
    for action, help_text in _options(command):
        name = max(action.option_strings, key=len)
        if command == "build" and name in _NO_DEFAULT:
            continue
        if _is_switch(action) and action.dest not in ("exif_orientation", "wait"):
            continue  # a switch is off unless given
        if _documented(help_text) is None:
            missing.append(name)
    assert missing == []


@pytest.mark.parametrize("command", sorted(set(cli._COMMANDS) - {"build"}))
def test_argparse_defaults_are_the_ones_stated(command):
    for action, help_text in _options(command):
        if action.default not in (None, False) and not _is_switch(action):
            assert _documented(help_text) == str(action.default), help_text


def _build_settings() -> list[tuple[str, str]]:
    """(setting, documented default) for each build option that is a setting of BuildConfig."""
    settings = {s.key: s.name for s in SETTINGS}
    found = []
    for action, help_text in _options("build"):
        documented = _documented(help_text)
        if action.dest in settings and documented is not None:
            found.append((settings[action.dest], documented))
    return found


def test_the_documented_build_defaults_cover_every_setting_flag():
    documented = {setting for setting, _ in _build_settings()}
    expected = {s.name for s in SETTINGS} - {"inputs", "input_list", "output"}
    expected -= {"overwrite", "resume", "dedup"}  # switches, off unless given
    expected -= {"planning_bucket_records"}  # a hidden flag (tests bound planning buckets)
    assert documented == expected


@pytest.mark.parametrize(("setting", "documented"), _build_settings(), ids=lambda v: str(v))
def test_a_documented_build_default_is_the_config_default(setting, documented):
    default = _minimal()
    declared = next(s for s in SETTINGS if s.name == setting)
    if declared.kind == "switch":  # said in words: on (exif_orientation) or off
        assert documented == declared.default_words
        assert default == _minimal(**{setting: declared.default})
        assert default != _minimal(**{setting: not declared.default})
    elif declared.default_words is not None:
        # Said in words where the value does not say it: a setting left unset, decided later.
        assert documented == declared.default_words
        if setting == "name":
            assert default.name == "pets"
        else:
            assert _resolved(default, setting) is None, f"{setting} now has a default"
        if setting == "read_ahead":
            assert default_depth(["gs://bucket/photos/**"]) == 256
            assert default_depth(["photos/**"]) == 16
    else:
        # Given as the flag's value, the documented default changes nothing: a list shown with
        # spaces after its commas is given without them.
        given = _minimal(**{setting: documented.replace(", ", ",")})
        assert given == default, (setting, documented)


def test_a_default_that_drifts_is_caught():
    # The check above is not vacuous: a value other than the default makes another config.
    assert _minimal(min_shard_size="99MB") != _minimal()
    assert _minimal(extensions=".jpg,.png") != _minimal()


def test_build_help_prints_the_defaults():
    done = subprocess.run(
        [*COMMAND, "build", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    text = " ".join(done.stdout.split("\noptions:\n", 1)[1].split())  # argparse wraps lines
    for flag, stated in [
        ("--seed SEED", "(default: 0)"),
        ("--min-shard-size MIN_SHARD_SIZE", "(default: 100MB)"),
        ("--max-shard-size MAX_SHARD_SIZE", "(default: 200MB)"),
        ("--validate {decode,header,none}", "(default: decode)"),
    ]:
        assert flag in text
        assert stated in text.split(flag, 1)[1].split(" --", 1)[0], flag
