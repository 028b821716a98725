"""Config: sizes, splits, classes, YAML plus flags, and a clear error naming every bad setting."""

import argparse
import json

import pytest
import yaml

from beam_tfrecord.commands.build import add_arguments, config_from_args
from beam_tfrecord.config import (
    IMAGE_SETTINGS,
    BuildConfig,
    ConfigError,
    parse_classes,
    parse_size,
    parse_splits,
)
from beam_tfrecord.images.policy import ImagePolicy, Resize
from beam_tfrecord.settings import KINDS, SETTINGS


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args, extra = parser.parse_known_args(list(argv))
    assert not extra, extra
    return args


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100MB", 100_000_000),
        ("200 MB", 200_000_000),
        ("64MiB", 64 * 2**20),
        ("1.5GB", 1_500_000_000),
        ("2gib", 2 * 2**30),
        ("512", 512),
        ("10KB", 10_000),
        ("7KiB", 7 * 1024),
        (4096, 4096),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "10XB", "-5MB", "0", "1e3MB", "ten MB", True])
def test_parse_size_refuses(text):
    with pytest.raises(ConfigError, match="size"):
        parse_size(text, "max_shard_size")


def test_parse_splits():
    assert parse_splits("train=0.8,validation=0.1,test=0.1") == (
        ("train", 0.8),
        ("validation", 0.1),
        ("test", 0.1),
    )
    assert parse_splits({"a": 0.5, "b": 0.5}) == (("a", 0.5), ("b", 0.5))
    assert parse_splits("every=1") == (("every", 1.0),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train=0.8,test=0.1", "sum to 1, they sum to 0.9"),
        ("train=1.2,test=-0.2", "ratio of 'test' must be between 0 and 1"),
        ("train=abc", "not a number: 'abc'"),
        ("train", "expected name=ratio, got 'train'"),
        ("tr/ain=1", "split name 'tr/ain'"),
        ("a=0.5,a=0.5", "named twice"),
        ("", "at least one split"),
    ],
)
def test_parse_splits_refuses(text, message):
    with pytest.raises(ConfigError, match="--splits") as err:
        parse_splits(text)
    assert message in str(err.value)


def test_parse_classes(tmp_path):
    assert parse_classes("cat, dog,bird") == ("cat", "dog", "bird")
    listing = tmp_path / "classes.txt"
    listing.write_text("zebra\n\nant\n")
    assert parse_classes(f"@{listing}") == ("zebra", "ant")
    with pytest.raises(ConfigError, match="listed twice"):
        parse_classes("a,b,a")
    with pytest.raises(ConfigError, match="'apple,,banana' has an empty class name"):
        parse_classes("apple,,banana")
    with pytest.raises(ConfigError, match="cannot read class list"):
        parse_classes(f"@{tmp_path / 'missing.txt'}")


@pytest.mark.parametrize("output", ["gs://", "s3:///", "memory://", "file:///"])
def test_an_output_url_that_names_no_folder_is_refused(output):
    """`--output gs://` built into a folder `gs:` here: the slashes were taken off as the end
    of a folder's path."""
    with pytest.raises(ConfigError) as err:
        BuildConfig(inputs=("a",), output=output)
    assert str(err.value) == f"--output: {output!r} names a filesystem, but no folder in it"


def test_defaults_and_name_from_output():
    config = BuildConfig(inputs=("data/**",), output="gs://bucket/datasets/flowers-v2/")
    assert config.name == "flowers-v2"
    assert config.output == "gs://bucket/datasets/flowers-v2"
    assert config.min_shard_size == 100 * 10**6 and config.max_shard_size == 200 * 10**6
    assert config.split_names == ("train", "validation", "test")
    assert config.image == ImagePolicy() and config.image.validate == "decode"
    assert ".jpg" in config.extensions and ".png" in config.extensions


def test_yaml_then_flags_flags_win(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(
        "input: [a/**, b/*.png]\noutput: out/x\nseed: 7\nsplits: {train: 0.5, test: 0.5}\n"
        "min-shard-size: 1MB\nmax_shard_size: 3MB\nclasses: [b, a]\n"
    )
    config = config_from_args(
        _args("--config", str(yaml_file), "--seed", "9", "--max-shard-size", "4MB")
    )
    assert config.inputs == ("a/**", "b/*.png")
    assert config.seed == 9
    assert config.splits == (("train", 0.5), ("test", 0.5))
    assert (config.min_shard_size, config.max_shard_size) == (10**6, 4 * 10**6)
    assert config.classes == ("b", "a")
    flags_only = config_from_args(
        _args("--input", "x/**", "--input", "y/**", "--output", "o", "--overwrite")
    )
    assert flags_only.inputs == ("x/**", "y/**") and flags_only.overwrite


@pytest.mark.parametrize(("in_file", "flag"), [("overwrite", "resume"), ("resume", "overwrite")])
def test_resume_or_overwrite_as_a_flag_answers_for_the_file(tmp_path, in_file, flag):
    """Both say what becomes of an earlier build in --output: the flag's answer replaces the
    file's, where giving both as flags (or both in the file) is refused."""
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(f"input: [a]\noutput: o\n{in_file}: true\n")
    config = config_from_args(_args("--config", str(yaml_file), f"--{flag}"))
    assert getattr(config, flag) and not getattr(config, in_file)
    yaml_file.write_text("input: [a]\noutput: o\noverwrite: true\nresume: true\n")
    with pytest.raises(ConfigError, match="cannot go with"):
        config_from_args(_args("--config", str(yaml_file)))


@pytest.mark.parametrize(
    ("yaml_text", "flags", "setting", "message"),
    [
        ("output: o\n", [], "--input", "is required"),
        ("input: [a]\n", [], "--output", "is required"),
        ("input: [a]\noutput: o\nlabels: 'regex:([a-z'\n", [], "--labels", "does not compile"),
        ("input: [a]\noutput: o\nlabels: 'regex:[a-z]+'\n", [], "--labels", "no capture group"),
        ("input: [a]\noutput: o\nlabels: folder\n", [], "--labels", "expected dir, none or regex"),
        (
            "input: [a]\noutput: o\nlabels: regex=(a)\\d\n",
            [],
            "--labels",
            "got 'regex=(a)\\d'; did you mean 'regex:(a)\\d'?",
        ),
        ("input: [a]\noutput: o\n", ["--splits", "train=0.9,test=0.2"], "--splits", "sum to 1"),
        (
            "input: [a]\noutput: o\n",
            ["--splits", "train=1.1,test=-0.1"],
            "--splits",
            "between 0 and 1",
        ),
        ("input: [a]\noutput: o\n", ["--min-shard-size", "300MB"], "--min-shard-size", "is above"),
        (
            "input: [a]\noutput: o\ncolour: rgb\n",
            [],
            "--config",
            "unknown setting 'colour'; did you mean 'color'?",
        ),
        ("input: [a]\noutput: o\nvalidate: full\n", [], "--validate", "expected one of"),
        ("input: [a]\noutput: o\njpeg_quality: 0\n", [], "--jpeg-quality", "1 to 100"),
        ("input: [a]\noutput: o\nbackground: '#12'\n", [], "--background", "R,G,B"),
        (
            "input: [a]\noutput: o\nmax_skipped_fraction: 2\n",
            [],
            "--max-skipped-fraction",
            "between 0",
        ),
        ("input: [a]\noutput: o\nclasses: []\n", [], "--classes", "empty"),
        ("input: [a]\noutput: o\nlabels: none\nclasses: [a]\n", [], "--classes", "needs --labels"),
        ("input: [a]\noutput: o\n", ["--overwrite", "--resume"], "--resume", "cannot go with"),
        ("- a\n- b\n", [], "--config", "must hold a mapping"),
        ("input: [a\n", [], "--config", "cannot be read, line 2: expected ',' or ']'"),
        # A glob or regex written as in a shell read as YAML's own syntax: an alias (`*`) and a
        # double-quoted escape (`\d`). The parser's words alone ("expected alphabetic or
        # numeric character, but found '*'") said nothing of quoting.
        (
            "input: **/*.jpg\noutput: o\n",
            [],
            "--config",
            "line 1: expected alphabetic or numeric character, but found '*' (a value that "
            "starts with * is an alias to YAML: quote it, as in input: '**/*.jpg')",
        ),
        (
            "input:\n  - *.jpg\noutput: o\n",
            [],
            "--config",
            "(a value that starts with * is an alias to YAML: quote it, as in input: '**/*.jpg')",
        ),
        (
            'input: [a]\noutput: o\nlabels: "regex:([a-z]+)\\d+"\n',
            [],
            "--config",
            "line 3: found unknown escape character 'd' (in double quotes YAML reads a backslash "
            "as an escape: write a regex in single quotes, as in labels: 'regex:([a-z]+)\\d+', "
            "or with none)",
        ),
        (
            "input: [a]\nseed: 1\noutput: o\nseed: 2\n",
            [],
            "--config",
            "line 4: 'seed' is given twice",
        ),
        # A list as a key was a traceback (unhashable type: 'list'), from the check for keys
        # given twice.
        ("input: [a]\noutput: o\nsplits: {[a]: 1}\n", [], "--config", "line 3: found unhashable"),
        ("input: [a]\n[o]: o\n", [], "--config", "cannot be read, line 2: found unhashable key"),
        (
            "input: [a]\nmin_shard_size: 1MB\noutput: o\nmin-shard-size: 2MB\n",
            [],
            "--config",
            "sets min_shard_size twice ('min_shard_size' and 'min-shard-size'); keep one",
        ),
        ("input: 5\noutput: o\n", [], "--input", "must be a path or glob, or a list of them"),
        ("input: [a]\noutput: [a, b]\n", [], "--output", "a folder's path or URL, got ['a', 'b']"),
        ("input: [a]\noutput: {a: 1}\n", [], "--output", "a folder's path or URL, got {'a': 1}"),
        ("input: [a]\noutput: 7\n", [], "--output", "got 7 (quote it, '7', for a folder of that"),
        ("output: o\ninput_list: [a.csv]\n", [], "--input-list", "a file's path or URL, got"),
        ("output: o\ninput_list: 5\n", [], "--input-list", "got 5 (quote it, '5', for a file of"),
        ("input: [a]\noutput: o\nresize: 6.5\n", [], "--resize", "a size such as 256"),
    ],
)
def test_bad_settings_name_the_setting(tmp_path, yaml_text, flags, setting, message):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        config_from_args(_args("--config", str(yaml_file), *flags))
    assert str(err.value).startswith(setting + ":"), str(err.value)
    assert message in str(err.value)


# For each kind of setting (settings.KINDS), values a config file may give that are not of it:
# YAML's numbers, switches, lists and mappings, each with what its refusal shows of it where
# that is not the whole value.
_WRONG_KINDS = {
    "paths": ["5", "{a: 1}", "[a, 5]"],
    "text": ["5", "[a.csv]", "{a: 1}", "true"],
    "output": ["5", "[a, b]", "{a: 1}", "true"],
    "name": ["5", "[a]", "{a: 1}", "no"],
    "choice": ["5", "[a]", "{a: 1}", "true"],
    "extensions": ["5", "{a: 1}", "true", "[jpg, 5]", "[[jpg]]", ""],
    "labels": ["5", "[dir]", "{a: 1}", "true"],
    "classes": ["5", "{a: 1}", "true", "[a, 5]", "[a, [b]]", "[yes, no]"],
    "splits": ["5", "true", "[train]", ("{5: 1}", "got 5"), ("{train: yes}", ": True")],
    "integer": ["[1]", "{a: 1}", "true", "1.5"],
    "number": ["[1]", "{a: 1}", "true"],
    "size": ["[1]", "{a: 1}", "true"],
    "switch": ["5", "[true]", "{a: 1}", "'yes'"],
    "regex": ["5", "[a]", "{a: 1}", "true"],
    "color": ["5", "{a: 1}", "true"],
    "resize": ["[1]", "{a: 1}", "true"],
}


def test_every_kind_of_setting_has_values_of_another_kind_to_refuse():
    assert set(_WRONG_KINDS) == set(KINDS)


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        (s.key, *(case if isinstance(case, tuple) else (case, None)))
        for s in SETTINGS
        for case in _WRONG_KINDS[s.kind]
    ],
)
def test_a_config_value_of_another_kind_is_refused_in_words(tmp_path, key, value, shown):
    """`classes: 5` and `extensions: 5` were refused as `--config: 'int' object is not
    iterable`, `split_by: 5` as `--config: first argument must be string or compiled
    pattern`; `extensions: [jpg, 5]` ended in a traceback, `extensions: {a: 1}` took `.a`
    files and `classes: [yes, no]` the classes 'True' and 'False'. Every setting names itself
    and the value it was given, in words."""
    settings = {"input": "[a]", "output": "o", key: value}
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("".join(f"{k}: {v}\n" for k, v in settings.items()))
    with pytest.raises(ConfigError) as err:
        config_from_args(_args("--config", str(yaml_file)))
    message = str(err.value)
    assert message.startswith(f"--{key.replace('_', '-')}: "), message
    assert (shown or repr(yaml.safe_load(value))) in message, message
    python_speak = ("object", "iterable", "argument", "unhashable", "NoneType", "Error")
    assert not any(word in message for word in python_speak), message


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("classes: [0, 1]", "--classes: must be class names: a,b,c, @FILE or a list of them, "
         "got [0, 1] (quote it, '0', for a class of that name)"),
        ("classes: [yes, no]", "got [True, False] (YAML reads an unquoted yes, no, on, off, "
         "true or false as a switch: quote a class so named)"),
        ("name: 2024", "--name: must be a dataset name, got 2024 (quote it, '2024', for a "
         "dataset of that name)"),
        ("splits: {1: 0.5, 2: 0.5}", "--splits: a split's name must be text, got 1 (quote it, "
         "'1', for a split of that name)"),
    ],
)  # fmt: skip
def test_a_name_yaml_reads_as_a_number_or_a_switch_is_refused_with_how_to_quote_it(
    tmp_path, yaml_text, message
):
    """YAML reads `classes: [0, 1]` as numbers, and `[yes, no]` as true and false: the build
    took them as the classes '0' and '1' (and `[007]` as '7'), 'True' and 'False'."""
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(f"input: [a]\noutput: o\n{yaml_text}\n")
    with pytest.raises(ConfigError) as err:
        config_from_args(_args("--config", str(yaml_file)))
    assert message in str(err.value)
    quoted = yaml_text.replace("[0, 1]", "['0', '1']").replace("[yes, no]", "['yes', 'no']")
    quoted = quoted.replace("2024", "'2024'").replace("{1: 0.5, 2: 0.5}", "{'1': 0.5, '2': 0.5}")
    yaml_file.write_text(f"input: [a]\noutput: o\n{quoted}\n")
    config_from_args(_args("--config", str(yaml_file)))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-shard-size", "50MB"], "--max-shard-size: 50.0 MB is below --min-shard-size's "
         "default, 100.0 MB; set --min-shard-size too"),
        (["--min-shard-size", "300MB"], "--min-shard-size: 300.0 MB is above --max-shard-size's "
         "default, 200.0 MB; set --max-shard-size too"),
        (["--min-shard-size", "3MB", "--max-shard-size", "2MB"], "--min-shard-size: 3.0 MB is "
         "above --max-shard-size 2.0 MB"),
        (["--max-shard-size", "150"], "--max-shard-size: 150 is 150 bytes (a size without a unit "
         "is bytes), below --min-shard-size's default, 100.0 MB; did you mean 150MB?"),
        # 10MB, the size meant, is below the default minimum too.
        (["--max-shard-size", "10"], "--max-shard-size: 10 is 10 bytes (a size without a unit "
         "is bytes), below --min-shard-size's default, 100.0 MB; did you mean 10MB, with "
         "--min-shard-size set too?"),
        (["--min-shard-size", "1MB", "--max-shard-size", "10"], "--max-shard-size: 10 is 10 "
         "bytes (a size without a unit is bytes), below --min-shard-size 1.0 MB; did you mean "
         "10MB?"),
    ],
)  # fmt: skip
def test_shard_size_bounds_that_cross_say_which_is_a_default(flags, message):
    """`--max-shard-size 50MB` was refused as `--min-shard-size: 100.0 MB is above
    --max-shard-size 50.0 MB`, a minimum the user never set, without a word of its being the
    default: named as the bound given, the other said to be its default, and to set it."""
    with pytest.raises(ConfigError) as err:
        config_from_args(_args("--input", "a", "--output", "o", *flags))
    assert str(err.value) == message


def test_a_config_in_another_encoding_is_refused_and_a_byte_order_mark_is_no_key(tmp_path):
    """Notepad saves UTF-16, with a byte-order mark: refused in one line, not a traceback. A
    UTF-8 file with a mark (a spreadsheet's, an editor's) reads as it would without one."""
    text = "input: [a]\noutput: o\nseed: 7\n"
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes(text.encode("utf-16"))
    with pytest.raises(ConfigError) as err:
        config_from_args(_args("--config", str(utf16)))
    assert str(err.value) == (
        f"--config: {str(utf16)!r} is not UTF-8 text (byte 0xff at 0); save it as UTF-8"
    )
    marked = tmp_path / "marked.yaml"
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert config_from_args(_args("--config", str(marked))).seed == 7


def test_a_class_list_file_with_a_byte_order_mark(tmp_path):
    classes = tmp_path / "classes.txt"
    classes.write_bytes(b"\xef\xbb\xbfapple\r\nbanana\n")
    config = config_from_args(_args("--input", "a", "--output", "o", "--classes", f"@{classes}"))
    assert config.classes == ("apple", "banana")


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"--config: .* does not exist"):
        config_from_args(_args("--config", str(tmp_path / "nope.yaml")))


def test_to_dict_is_json_ready():
    config = BuildConfig(inputs=("a/**",), output="o", classes=("x", "y"))
    data = json.loads(json.dumps(config.to_dict()))
    assert data["splits"] == {"train": 0.8, "validation": 0.1, "test": 0.1}
    assert data["classes"] == ["x", "y"] and data["inputs"] == ["a/**"]


def test_transform_flags_reach_the_config():
    config = config_from_args(
        _args("--input", "a/**", "--output", "o", "--resize", "exact:64x64:pad", "--encode", "png",
              "--quality", "80")
    )  # fmt: skip
    image = config.image
    assert image.resize == Resize("exact", width=64, height=64, policy="pad")
    assert (image.encode, image.jpeg_quality) == ("png", 80)
    assert config.to_dict()["resize"] == "exact:64x64:pad"
    raw = config_from_args(
        _args("--input", "a/**", "--output", "o", "--store", "raw", "--resize", "32")
    )
    assert (raw.image.store, raw.image.resize) == ("raw", Resize("short", size=32))
    assert raw.to_dict()["resize"] == "32"


def test_the_image_settings_are_the_policy_and_read_back_from_the_manifest():
    settings = {
        "input": ["a/**"], "output": "o", "validate": "header", "color": "keep",
        "max_pixels": "1000000", "jpeg_quality": 70, "background": "#102030",
        "exif_orientation": False, "resize": "fit:640x480", "encode": "png", "store": "encoded",
    }  # fmt: skip
    config = BuildConfig.from_settings(settings)
    assert config.image == ImagePolicy(
        validate="header", color="keep", max_pixels=1_000_000, jpeg_quality=70,
        background=(16, 32, 48), apply_exif_orientation=False,
        resize=Resize("fit", width=640, height=480), encode="png",
    )  # fmt: skip
    data = config.to_dict()
    # The manifest keeps the nine flat, named as users write them, in the settings' order.
    names = list(data)
    assert names[names.index("resume") + 1 : names.index("dedup")] == list(IMAGE_SETTINGS)
    assert "image" not in data and "image" not in BuildConfig.setting_names()
    assert data["resize"] == "640x480" and data["background"] == [16, 32, 48]
    assert data["exif_orientation"] is False
    assert BuildConfig.from_settings(json.loads(json.dumps(data))) == config


def test_image_is_not_a_setting_and_its_nine_are_named_in_errors():
    with pytest.raises(ConfigError, match=r"unknown setting 'image'"):
        BuildConfig.from_settings({"input": "a", "output": "o", "image": {"color": "rgb"}})
    with pytest.raises(ConfigError, match=r"^--exif-orientation: expected true or false, got 'no'"):
        BuildConfig.from_settings({"input": "a", "output": "o", "exif_orientation": "no"})
    with pytest.raises(ConfigError, match=r"^--jpeg-quality: must be an integer from 1 to 100"):
        BuildConfig.from_settings({"input": "a", "output": "o", "jpeg_quality": 101})
    with pytest.raises(ConfigError, match=r"^--image: expected an ImagePolicy"):
        BuildConfig(inputs=("a",), output="o", image="rgb")


def test_defaults_name_each_setting_as_the_manifest_writes_it():
    defaults = BuildConfig.defaults()
    assert set(defaults) == set(BuildConfig.setting_names()) - {"inputs", "output"}
    written = BuildConfig(inputs=("a",), output="o").to_dict()
    # Every default but the name (taken from the output folder) is what the manifest writes.
    assert defaults.pop("name") is None and written.pop("name") == "o"
    assert {name: written[name] for name in defaults} == defaults


def test_a_resize_written_as_a_number_is_the_resize_its_text_is(tmp_path):
    """`resize: 256` in a YAML file is a number; it was refused as "must be a Resize"."""
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("input: [a]\noutput: o\nresize: 256\n")
    config = config_from_args(_args("--config", str(yaml_file)))
    assert config.image.resize == Resize.parse("256")
    assert BuildConfig.from_settings(
        {"input": ["a"], "output": "o", "resize": 64}
    ).image.resize == (Resize.parse("64"))


@pytest.mark.parametrize(
    ("output", "name"),
    [
        (".", "here"),
        ("./", "here"),
        ("x/.", "x"),
        ("x/sub/..", "x"),
        ("out/fruits/", "fruits"),
        ("gs://bucket/datasets/v1/", "v1"),
        ("/", "dataset"),
        ("my photos", "my_photos"),
    ],
)
def test_the_name_is_the_output_folders_own(tmp_path, monkeypatch, output, name):
    """`--output .` was named '.', which the name's own check then refused, naming --name."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert BuildConfig.from_settings({"input": ["a"], "output": output}).name == name


@pytest.mark.parametrize(
    ("splits", "says"),
    [
        ("a.b=0.5,c=0.5", "split name 'a.b' must start with a letter or digit, followed by"),
        ("_x=1", "split name '_x' must start with a letter or digit, followed by letters"),
        ("all=0.5,train=0.5", "split name 'all' is TFDS's name for every split at once"),
        (["train", "test"], "expected split names with their ratios, such as {train: 0.8"),
        ("train", "expected name=ratio, got 'train' (such as train=0.8,test=0.2"),
    ],
)
def test_split_names_tfds_cannot_load_and_a_list_of_names_are_refused(splits, says):
    """TFDS refused `split='a.b'`, and `split='all'` recursed until Python stopped it; a list
    of names in a config file was refused with a fragment of its Python form."""
    with pytest.raises(ConfigError) as err:
        BuildConfig.from_settings({"input": ["a"], "output": "o", "splits": splits})
    assert str(err.value).startswith(f"--splits: {says}")


def test_paths_from_python_may_be_path_objects(tmp_path):
    """`Dataset` took a `pathlib.Path`, `from_settings` refused one: `--input: must be a path or
    glob, or a list of them, got [PosixPath('samples/fruits')]`."""
    from pathlib import Path

    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    config = BuildConfig.from_settings(
        {"input": [Path("samples/fruits"), "more/**"], "output": Path("out/p"),
         "classes": tmp_path / "classes.txt"}
    )  # fmt: skip
    assert config.inputs == ("samples/fruits", "more/**") and config.output == "out/p"
    assert config.classes == ("cat", "dog")  # a class list's file, as `@FILE` gives it
    assert BuildConfig.from_settings(json.loads(json.dumps(config.to_dict()))) == config
    alone = BuildConfig.from_settings({"input": Path("a"), "output": "o"})
    assert alone.inputs == ("a",)
    listed = BuildConfig.from_settings({"input_list": Path("in.csv"), "output": "o"})
    assert listed.input_list == "in.csv" and isinstance(listed.input_list, str)
    made = BuildConfig(inputs=Path("a"), output=Path("o"), classes=tmp_path / "classes.txt")
    assert (made.inputs, made.output, made.classes) == (("a",), "o", ("cat", "dog"))
    made = BuildConfig(inputs=(), output="o", input_list=Path("in.csv"))
    assert made.input_list == "in.csv" and isinstance(made.input_list, str)


@pytest.mark.parametrize("settings", [["input=a"], "input: a", None])
def test_settings_that_are_no_mapping_are_refused_in_words(settings):
    with pytest.raises(ConfigError) as err:
        BuildConfig.from_settings(settings)
    assert str(err.value) == (
        "--config: from_settings takes a mapping of settings to their values, such as "
        f"{{'input': ['photos/**'], 'output': 'out/photos'}}, not a "
        f"{type(settings).__name__}: {settings!r}"
    )


@pytest.mark.parametrize("key", [5, None, ("input",)])
def test_a_setting_named_by_no_text_is_refused_naming_it(key):
    """A mapping built in code, `{5: 3}`, raised AttributeError: 'int' object has no attribute
    'lstrip', naming neither the key nor the setting."""
    with pytest.raises(ConfigError) as err:
        BuildConfig.from_settings({"input": "a", "output": "o", key: 3})
    assert str(err.value) == (
        f"--config: a setting's name must be text, such as 'seed', got {key!r}"
    )


@pytest.mark.parametrize(
    ("settings", "python", "command_line"),
    [
        ({"input": ["a"]}, "--output: is required",
         "--output: is required (give --output or set it in --config)"),
        ({"input": ["a"], "output": "o", "resume": True, "overwrite": True},
         "--resume: resume=True keeps finished shards; it cannot go with overwrite=True",
         "--resume: --resume keeps finished shards; it cannot go with --overwrite"),
        ({"input": ["a"], "output": "o", "labels": "none", "classes": "x,y"},
         "--classes: a class list needs labels dir or regex:PATTERN",
         "--classes: a class list needs --labels dir or regex:PATTERN"),
        ({"input": ["a"], "output": "o", "max_shard_size": "50MB"},
         "--max-shard-size: 50.0 MB is below min_shard_size's default, 100.0 MB; set "
         "min_shard_size too",
         "--max-shard-size: 50.0 MB is below --min-shard-size's default, 100.0 MB; set "
         "--min-shard-size too"),
    ],
)  # fmt: skip
def test_a_python_caller_is_told_the_settings_the_command_line_the_flags(
    settings, python, command_line
):
    """from_settings said `--resume: --resume keeps finished shards; it cannot go with
    --overwrite` to a caller that had passed resume=True and overwrite=True."""
    with pytest.raises(ConfigError) as err:
        BuildConfig.from_settings(settings)
    assert str(err.value) == python
    assert err.value.message == python.split(": ", 1)[1]
    if "output" in settings:  # as BuildConfig's fields, too
        with pytest.raises(ConfigError) as err:
            BuildConfig(**{("inputs" if k == "input" else k): v for k, v in settings.items()})
        assert str(err.value) == python
    flags = []
    for key, value in settings.items():
        flags += [f"--{key.replace('_', '-')}"] + (
            [] if value is True else [value[0] if key == "input" else value]
        )
    with pytest.raises(ConfigError) as err:
        config_from_args(_args(*flags))
    assert str(err.value) == command_line


def test_splits_as_pairs_from_python():
    config = BuildConfig.from_settings(
        {"input": ["a"], "output": "o", "splits": [("train", 0.75), ["test", 0.25]]}
    )
    assert config.splits == (("train", 0.75), ("test", 0.25))


def test_extensions_written_as_shell_patterns_are_their_suffixes():
    config = BuildConfig.from_settings(
        {"input": ["a"], "output": "o", "extensions": "*.jpg, PNG ,.webp"}
    )
    assert config.extensions == (".jpg", ".png", ".webp")


@pytest.mark.parametrize("name", ["photos-v1.0", "a.b", "x.5", "v1_2-rc.3"])
def test_a_dataset_name_may_hold_dots_and_dashes(name):
    """Split names lost their '.', which TFDS cannot read; a dataset's name shared their rule by
    mistake, and `--output out/photos-v1.0` was refused."""
    assert BuildConfig.from_settings({"input": ["a"], "output": f"out/{name}"}).name == name
    assert BuildConfig.from_settings({"input": ["a"], "output": "o", "name": name}).name == name


@pytest.mark.parametrize("name", [".hidden", "-dash", "_abc", "a b", "a/b", "ünï"])
def test_a_dataset_name_that_cannot_start_a_file_name_is_refused(name):
    """The refusal said "must be letters, digits, '-', '_' or '.'", which `_abc` is: the first
    character's rule went unsaid."""
    with pytest.raises(ConfigError) as err:
        BuildConfig.from_settings({"input": ["a"], "output": "o", "name": name})
    assert str(err.value) == (
        f"--name: {name!r} must start with a letter or digit, followed by letters, digits, '-', "
        "'_' or '.'"
    )


@pytest.mark.parametrize(
    ("output", "made"),
    [
        ("out/_staging", "'_staging' (its folder's name;"),
        ("out/.hidden", "'.hidden' (its folder's name;"),
        ("out/日本", "'__' (its folder's name '日本', '_' for each character a name cannot hold;"),
        (
            "out/spa ce/ünï",
            "'_n_' (its folder's name 'ünï', '_' for each character a name cannot hold;",
        ),
        ("gs://bucket/_tmp/", "'_tmp' (its folder's name;"),
    ],
)
def test_an_output_folder_that_makes_no_dataset_name_is_refused_as_the_output(output, made):
    """Refused as `--name`, a flag the user never gave, with a rule that left out the first
    character's: `out/_staging` "must be letters, digits, '-', '_' or '.'"."""
    with pytest.raises(ConfigError) as err:
        config_from_args(_args("--input", "a", "--output", output))
    given = output.rstrip("/")
    assert str(err.value) == (
        f"--output: {given!r} names the dataset {made} no --name was given), but a dataset name "
        "must start with a letter or digit, followed by letters, digits, '-', '_' or '.'; pass "
        "--name NAME to name it"
    )
    named = BuildConfig.from_settings({"input": ["a"], "output": output, "name": "staging"})
    assert named.name == "staging"


def test_a_setting_given_with_its_dashes_is_named_with_two():
    """`from_settings({"--seed": 3})` was refused as `----seed: ...`."""
    with pytest.raises(ConfigError) as refused:
        BuildConfig.from_settings({"input": ["a"], "output": "o", "--seed": 3})
    assert str(refused.value).startswith("--seed: unknown setting '--seed'; did you mean 'seed'?")
