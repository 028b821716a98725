"""The settings table is the one declaration of a build's settings: BuildConfig's fields, the
`build` flags, the config file template, the README's flag table and the config reference all
follow it (or are checked against it), and nothing else declares a setting's default or
meaning."""

from __future__ import annotations

import argparse
import dataclasses
import html
import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from beam_tfrecord.commands.build import add_arguments, config_from_args
from beam_tfrecord.config import IMAGE_SETTINGS, BuildConfig, ConfigError
from beam_tfrecord.images.policy import ImagePolicy
from beam_tfrecord.settings import KINDS, SETTINGS, Setting, setting

REPO = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def _hook():
    """docs/hooks/reference.py, which makes the reference pages when the site is built."""
    path = REPO / "docs" / "hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_setting_is_a_field_of_the_config_or_of_its_image_policy():
    own = [f.name for f in dataclasses.fields(BuildConfig) if f.name != "image"]
    assert sorted(s.name for s in SETTINGS if s.policy_field is None) == sorted(own)
    policy_fields = [f.name for f in dataclasses.fields(ImagePolicy)]
    set_by = [s.policy_field for s in SETTINGS if s.policy_field]
    assert sorted(set_by) == sorted(policy_fields), "each policy field is one setting's"
    assert sorted(BuildConfig.setting_names()) == sorted(s.name for s in SETTINGS)
    assert {s.name: s.policy_field for s in SETTINGS if s.policy_field} == IMAGE_SETTINGS


def test_the_config_takes_its_defaults_from_the_table():
    fields = {f.name: f for f in dataclasses.fields(BuildConfig)}
    policy = ImagePolicy()
    for declared in SETTINGS:
        if declared.policy_field:
            assert getattr(policy, declared.policy_field) == declared.default, declared.name
        else:
            assert fields[declared.name].default == declared.default, declared.name


def test_the_docstrings_declare_no_setting_again():
    """A setting's meaning is its `about` in the table: BuildConfig's docstring describes only
    `image`, the one field that is not a setting."""
    assert set(_hook()._attributes(BuildConfig.__doc__)) == {"image"}
    assert all(s.about for s in SETTINGS if not s.policy_field), "the reference needs each"


def test_a_setting_of_an_unknown_kind_is_refused_when_declared():
    with pytest.raises(ValueError, match="unknown kind 'colour'"):
        Setting("tint", "colour", "image checks", "a tint")
    assert {s.kind for s in SETTINGS} <= set(KINDS)


@pytest.mark.parametrize("declared", SETTINGS, ids=lambda s: s.name)
def test_each_setting_is_a_flag_as_the_table_declares_it(declared):
    actions = _parser()._option_string_actions
    for flag in declared.flags:
        action = actions[flag]
        assert action.dest == declared.key
        assert action.default is None, "a flag not given leaves the file's value"
        assert (action.help == argparse.SUPPRESS) == declared.hidden
        if declared.choices:
            assert tuple(action.choices) == declared.choices
    flag = declared.flags[0]
    if declared.kind == "switch":
        given = config_from_args(_parser().parse_args(["--input", "a", "--output", "o", flag]))
        assert given.to_dict()[declared.name] is (not declared.default)


def test_a_flag_and_a_config_key_take_a_value_alike(tmp_path):
    """The table's kinds read a flag's text and a file's text the same way."""
    config = tmp_path / "c.yaml"
    config.write_text("input: [a]\noutput: o\nseed: '7'\nmax_pixels: '1000'\nread_ahead: 8\n")
    from_file = config_from_args(_parser().parse_args(["--config", str(config)]))
    flags = ["--seed", "7", "--max-pixels", "1000", "--read-ahead", "8"]
    from_flags = config_from_args(_parser().parse_args(["--input", "a", "--output", "o", *flags]))
    assert from_file == from_flags
    assert (from_file.seed, from_file.image.max_pixels, from_file.read_ahead) == (7, 1000, 8)
    with pytest.raises(ConfigError, match=r"^--read-ahead: must be between 0 and 1024 images"):
        BuildConfig.from_settings({"input": "a", "output": "o", "read_ahead": "2000"})


def _template_lines() -> list[tuple[str, str]]:
    """(key, value) of each line of configs/default.yaml that sets a key or shows one commented."""
    lines = (REPO / "configs" / "default.yaml").read_text().splitlines()
    found = []
    for line in lines:
        match = re.match(r"^(?:# )?([a-z_-]+):(.*)$", line)
        if match:
            found.append((match.group(1), match.group(2).split("#")[0].strip()))
    return found


def test_the_config_template_sets_each_setting_to_the_tables_default():
    """configs/default.yaml: every setting at its default, spelled out. Each key it sets or
    shows commented is a setting, and each it sets is at the table's default."""
    keys = [key for key, _ in _template_lines()]
    unknown = [key for key in keys if BuildConfig.setting_of(key) is None]
    assert not unknown, f"configs/default.yaml names no such setting: {unknown}"
    data = yaml.safe_load((REPO / "configs" / "default.yaml").read_text())
    data.update(input=["photos/**"], output="out/images-v1")
    written = BuildConfig.from_settings(data).to_dict()
    defaults = BuildConfig.defaults()
    changed = {key: data[key] for key in data if key in defaults and written[key] != defaults[key]}
    assert not changed, f"configs/default.yaml: not the default: {changed}"
    assert len(data) > 10


def test_the_config_template_spells_out_every_setting():
    """The README and the config file guide call configs/default.yaml "every setting at its
    default and spelled out": a setting it leaves out (--resize, --dedup, --split-by...) is one
    a user copying it never learns of."""
    shown = {BuildConfig.setting_of(key) for key, _ in _template_lines()}
    missing = [s.name for s in SETTINGS if not s.hidden and s.name not in shown]
    assert not missing, f"configs/default.yaml leaves out: {missing}"


def _readme_rows() -> list[tuple[list[str], str, str]]:
    """The README's flag table: (flags, meaning, default) of each row."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## The flags most builds need\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`--"):
            flags = [f.split()[0] for f in re.findall(r"`(--[^`]+)`", cells[0])]
            rows.append((flags, cells[1], cells[2]))
    return rows


def test_the_readme_flag_table_states_the_tables_defaults():
    by_flag = {flag: s for s in SETTINGS for flag in s.flags}
    rows = _readme_rows()
    assert len(rows) >= 8
    for flags, meaning, stated in rows:
        declared = [by_flag[flag] for flag in flags]  # a KeyError: no such flag
        values = re.findall(r"`([^`]+)`", stated)
        if values:  # `100MB`, `200MB`: each flag's, in order
            assert values == [s.shown_default() for s in declared], flags
        elif stated == "required":
            assert {s.name for s in declared} <= {"inputs", "output"}, flags
        elif stated == "as shown":
            assert f"`{declared[0].shown_default()}`" in meaning, flags
        else:  # in words (off, sorted labels): a setting not set unless given
            assert all(s.default in (None, False) for s in declared), flags


def test_the_config_reference_states_each_settings_meaning_and_default():
    hook = _hook()
    page = hook.config_page()
    rows = dict(re.findall(r'<tr><td><a id="([a-z_]+)".*?</td>(.*?)</tr>', page))
    assert len(rows) == len(SETTINGS)
    for declared in SETTINGS:
        row = rows[declared.key]
        if not declared.policy_field:
            assert hook._inline(hook._sentence(declared.about)) in row, declared.name
        for flag in declared.flags:
            assert f"<code>{html.escape(flag)}</code>" in row, (declared.name, flag)
    assert "<code>&quot;dir&quot;</code>" in rows["labels"]
    assert "<code>100MB</code>" in rows["min_shard_size"]


def test_a_setting_is_looked_up_by_the_name_the_manifest_uses():
    assert setting("inputs").key == "input" and setting("inputs").flags == ("--input",)
    assert setting("exif_orientation").flags == ("--no-exif-orientation",)
    assert setting("min_shard_size").shown_default() == "100MB"
    assert setting("splits").shown_default() == "train=0.8,validation=0.1,test=0.1"


def test_the_flex_template_states_the_tables_defaults_and_choices():
    """deploy/flex_template/metadata.json says a parameter's default and checks its choices
    in the console's own words: they are the table's."""
    metadata = json.loads((REPO / "deploy" / "flex_template" / "metadata.json").read_text())
    by_key = {s.key: s for s in SETTINGS}
    stated = checked = 0
    for parameter in metadata["parameters"]:
        declared = by_key.get(parameter["name"])
        if declared is None:  # --config, not a setting
            continue
        text = parameter["helpText"]
        default = re.search(r"\bDefault (\S+?)\.?$", text) or re.search(r"(\w+) \(default\b", text)
        if default:
            assert default.group(1) == declared.shown_default(), parameter["name"]
            stated += 1
        for regex in parameter.get("regexes", []):
            choices = re.fullmatch(r"\^\(([\w|]+)\)\$", regex)
            if choices:
                assert set(choices.group(1).split("|")) == set(declared.choices), regex
                checked += 1
    assert stated >= 4 and checked >= 3


@pytest.mark.parametrize(
    ("flags", "python"),
    [
        ("pass --overwrite to replace it", "pass overwrite=True to replace it"),
        ("--resume keeps finished shards; it cannot go with --overwrite",
         "resume=True keeps finished shards; it cannot go with overwrite=True"),
        ("or pass --allow-missing-classes to publish it", "or pass allow_missing_classes=True to "
         "publish it"),
        ("--no-exif-orientation", "exif_orientation=False"),
        ("more than --max-skipped-fraction 0.25 allows",
         "more than max_skipped_fraction 0.25 allows"),
        ("build with --labels 'regex:^([a-z]+)'", "build with labels='regex:^([a-z]+)'"),
        ("pass --name NAME to name it", "pass name=NAME to name it"),
        ("the --input folder; (or --input-list)", "the input folder; (or input_list)"),
        ("--quality", "jpeg_quality"),
        # Not a flag: part of a path, or of a Beam flag, or of another word.
        ("see out/--overwrite/report.jsonl", "see out/--overwrite/report.jsonl"),
        ("class '--resume' is listed twice", "class '--resume' is listed twice"),
        ("--runner=DataflowRunner needs --job_endpoint", "--runner=DataflowRunner needs "
         "--job_endpoint"),
        ("--inputs-extra", "--inputs-extra"),
    ],
)  # fmt: skip
def test_words_naming_flags_name_the_settings_for_python(flags, python):
    from beam_tfrecord.settings import in_python_names

    assert in_python_names(flags) == python
