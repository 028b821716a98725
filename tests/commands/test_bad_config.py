"""A bad config is refused before the pipeline starts: exit status 2, the setting named, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from imagegen import make_collection
from PIL import Image

from beam_tfrecord.cli import main


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src")
    make_collection(root, {"cat": 3, "dog": 3}, seed=2)
    return root


def _snapshot(path: Path) -> dict[str, bytes] | None:
    if not path.exists():
        return None
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


CASES = [
    # (id, extra flags, expected start of the message, the message must also say)
    ("regex_does_not_compile", ["--labels", "regex:([a-z+"], "--labels:", "does not compile"),
    ("regex_without_group", ["--labels", "regex:[a-z]+"], "--labels:", "has no capture group"),
    # Shown as typed: repr would double the backslash.
    ("regex_as_typed", ["--labels", r"regex:^\w+/"], "--labels:", r"regex '^\w+/' has no"),
    ("ratios_do_not_sum_to_1", ["--splits", "train=0.7,test=0.2"], "--splits:", "sum to 0.9"),
    (
        "negative_ratio",
        ["--splits", "train=1.2,test=-0.2"],
        "--splits:",
        "'test' must be between 0 and 1",
    ),
    (
        "min_above_max",
        ["--min-shard-size", "300MB"],
        "--min-shard-size:",
        "is above --max-shard-size",
    ),
    # Refused as `--min-shard-size: 100.0 MB is above ...`, a size the user never gave.
    (
        "max_below_the_default_min",
        ["--max-shard-size", "50MB"],
        "--max-shard-size: 50.0 MB is below --min-shard-size's default, 100.0 MB;",
        "set --min-shard-size too\n",
    ),
    ("bad_size_unit", ["--max-shard-size", "200MQ"], "--max-shard-size:", "'200MQ'"),
    # Each rule said "must be letters, digits ... or '_'", which these are: the first
    # character's rule went unsaid.
    (
        "name_starting_with_an_underscore",
        ["--name", "_abc"],
        "--name: '_abc' must start with a letter or digit, followed by letters, digits,",
        "'-', '_' or '.'\n",
    ),
    (
        "split_name_starting_with_an_underscore",
        ["--splits", "_x=1"],
        "--splits: split name '_x' must start with a letter or digit, followed by letters,",
        "digits or '_' (it is part of file names",
    ),
    ("unknown_color", ["--color", "cmyk"], None, "invalid choice: 'cmyk'"),
    ("negative_read_ahead", ["--read-ahead", "-1"], "--read-ahead:", "between 0 and 1024"),
    (
        "unknown_classes_file",
        ["--classes", "@/nonexistent/classes.txt"],
        "--classes:",
        "cannot read",
    ),
    # Beam takes these at parsing and fails on them only as the pipeline runs, in a traceback.
    (
        "negative_workers",
        ["--direct_num_workers=-1"],
        "--direct_num_workers:",
        "-1 is not a number of workers",
    ),
    (
        "job_server_jar_that_is_not_there",
        ["--runner=SparkRunner", "--spark_job_server_jar=no/such/job-server.jar"],
        "--spark_job_server_jar: 'no/such/job-server.jar' is not a file",
        "http(s) URL",
    ),
    (
        "portable_runner_without_its_job_service",
        ["--runner=PortableRunner"],
        "--runner=PortableRunner needs --job_endpoint",
        "host:port",
    ),
]


@pytest.mark.parametrize(
    ("flags", "starts", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_setting(src, tmp_path, capsys, flags, starts, says):
    out = tmp_path / "out"
    try:
        status = main(["build", "--input", f"{src}/**", "--output", str(out), *flags])
    except SystemExit as exit:  # argparse refuses a value outside its choices by itself
        status = exit.code
    assert status == 2
    err = capsys.readouterr().err
    if starts is not None:
        assert f"beam-tfrecord build: error: {starts}" in err
    assert says in err
    assert not out.exists(), "nothing was written"


@pytest.mark.parametrize(
    ("folder", "named"),
    [
        ("_staging", "'_staging' (its folder's name;"),
        (".hidden", "'.hidden' (its folder's name;"),
        ("日本", "'__' (its folder's name '日本', '_' for each character a name cannot hold;"),
    ],
)
def test_an_output_folder_that_makes_no_dataset_name_says_so_and_how_to_name_it(
    src, tmp_path, capsys, folder, named
):
    """`--output out/_staging` was refused as `--name`, a flag the user never gave, by a rule
    that `_staging` seemed to follow ("must be letters, digits, '-', '_' or '.'")."""
    out = tmp_path / folder
    assert main(["build", "--input", f"{src}/**", "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --output: {str(out)!r} names the dataset {named} no --name "
        "was given), but a dataset name must start with a letter or digit, followed by letters, "
        "digits, '-', '_' or '.'; pass --name NAME to name it\n"
    )
    assert not out.exists(), "nothing was written"


def test_an_output_folder_that_makes_no_dataset_name_builds_with_the_name_it_is_given(
    src, tmp_path, capsys
):
    out = tmp_path / "_staging"
    assert main(["build", "--input", f"{src}/**", "--output", str(out), "--name", "pets"]) == 0
    assert capsys.readouterr().out.startswith(f"Built 'pets' in {out}: ")
    assert json.loads((out / "manifest.json").read_text())["name"] == "pets"


def test_input_that_matches_nothing(src, tmp_path, capsys):
    out = tmp_path / "out"
    status = main(
        ["build", "--input", f"{src}/**", "--input", f"{src}/**/*.webp", "--output", str(out)]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert f"--input: '{src}/**/*.webp' matches no image file" in err
    assert not out.exists()


def test_a_pattern_that_matches_only_folders_says_how_to_take_their_images(tmp_path, capsys):
    """`photos/cat*` takes the files it matches, not the files below the folders it matches:
    the refusal says which it found, and the pattern that takes their images."""
    for name in ["cat/1.jpg", "catnip/2.jpg", "dog/3.jpg"]:
        (tmp_path / "photos" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "photos" / name).write_bytes(b"x")
    out = tmp_path / "out"
    pattern = f"{tmp_path}/photos/cat*"
    assert main(["build", "--input", pattern, "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input: {pattern!r} matches 2 folders and no image "
        f"file; to take the images below them, write {pattern + '/**'!r}\n"
    )
    # A pattern that matches no folder either is refused as before.
    assert main(["build", "--input", f"{tmp_path}/photos/bird*", "--output", str(out)]) == 2
    assert "matches no image file (extensions" in capsys.readouterr().err
    assert not out.exists()


def test_a_pattern_that_matches_a_stray_file_and_class_folders_is_refused(tmp_path, capsys):
    """`photos/*` over a stray image and two class folders took the one image and left both
    folders out without a word; a pattern ending in `/` (folders only) took the file too."""
    for name in ["cat/1.jpg", "dog/2.jpg", "stray.jpg", "notes/readme.txt"]:
        (tmp_path / "photos" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "photos" / name).write_bytes(b"x")
    out = tmp_path / "out"
    photos = f"{tmp_path}/photos"
    assert main(["build", "--input", f"{photos}/*", "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input: '{photos}/*' matches image files, and 2 folders "
        f"of images ('cat', 'dog') whose images it does not take; to take them too, write "
        f"'{photos}/**', or to take only the files, name them (*.jpg)\n"
    )
    assert main(["build", "--input", f"{photos}/*/", "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input: '{photos}/*/' ends with '/': it names folders, "
        f"and takes no file; to take the images below them, write '{photos}/*/**'\n"
    )
    assert not out.exists()
    # Naming the files takes them alone; a folder of no images (notes/) refuses nothing.
    (tmp_path / "photos" / "cat" / "1.jpg").unlink()
    (tmp_path / "photos" / "dog" / "2.jpg").unlink()
    assert main(["build", "--input", f"{photos}/*", "--output", str(out)]) != 2


@pytest.mark.parametrize("checked_bytes", [1 << 20, 16], ids=["checked", "found-by-the-pipeline"])
def test_a_bad_input_list_line_is_one_line_naming_it_and_nothing_is_left(
    src, tmp_path, capsys, monkeypatch, checked_bytes
):
    """A list in another encoding, or with a line that is not `path,label`, ended in a Beam
    traceback, after the output folder was made. The checks read the list's first megabyte; a
    bad line further on stops the pipeline that reads it, as cleanly."""
    from beam_tfrecord import checks

    monkeypatch.setattr(checks, "_LIST_CHECKED_BYTES", checked_bytes)
    images = sorted(p.relative_to(src) for p in src.rglob("*.jpg"))
    listing = tmp_path / "list.csv"
    lines = [f"{src / p},{p.parent}" for p in images] + ["dir/my,photo.jpg,cat"]
    listing.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert main(["build", "--input-list", str(listing), "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input-list: {listing}: line {len(lines)}: expected "
        '`path` or `path,label` (a path with a comma is quoted: "my,photo.jpg",cat), got '
        "'dir/my,photo.jpg,cat'\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("again", ["--overwrite", "--resume"])
@pytest.mark.parametrize("checked_bytes", [1 << 20, 16], ids=["checked", "past-the-checks"])
def test_a_bad_input_list_of_a_rebuild_is_one_line_and_the_build_is_left(
    src, tmp_path, capsys, monkeypatch, checked_bytes, again
):
    """A scheduled rebuild (--overwrite, --resume) reads the list once more, for a file inside
    the output, before the list's own checks: a bad line ended in a traceback of
    InputListError, and a missing list in "error: [Errno 2] No such file..." naming no
    setting."""
    from beam_tfrecord import checks

    monkeypatch.setattr(checks, "_LIST_CHECKED_BYTES", checked_bytes)
    images = sorted(p.relative_to(src) for p in src.rglob("*.jpg"))
    listing = tmp_path / "list.csv"
    listing.write_text("".join(f"{src / p},{p.parent}\n" for p in images))
    out = tmp_path / "out"
    args = ["build", "--input-list", str(listing), "--output", str(out), "--splits", "train=1"]
    assert main(args) == 0
    built = _snapshot(out)
    capsys.readouterr()
    lines = [f"{src / p},{p.parent}" for p in images] + [",cat"]
    listing.write_text("\n".join(lines) + "\n")
    assert main([*args, again]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input-list: {listing}: line {len(lines)}: expected "
        '`path` or `path,label` (a path with a comma is quoted: "my,photo.jpg",cat), got '
        "',cat'\n"
    )
    listing.unlink()
    assert main([*args, again]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input-list: {str(listing)!r} does not exist\n"
    )
    assert _snapshot(out) == built


def test_a_folder_whose_name_reads_as_a_wildcard_says_how_to_take_it(tmp_path, capsys):
    """`Photos [2023]` is a glob (`[2023]`: one of 2, 0, 3) that matches nothing: it was refused
    as matching no image file, with no word of the escape that takes the folder."""
    folder = tmp_path / "src" / "Photos [2023]"
    (folder / "cat").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(folder / "cat" / "1.jpg")
    out = tmp_path / "out"
    assert main(["build", "--input", str(folder), "--output", str(out)]) == 2
    escaped = f"{tmp_path}/src/Photos [[]2023]/**"
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input: {str(folder)!r} is a path whose name holds a "
        "wildcard character (*, ? or [), read as a pattern that matches no image file; to take "
        f"it as it is, write {escaped!r}\n"
    )
    assert not out.exists()
    assert main(["build", "--input", escaped, "--output", str(out), "--splits", "train=1"]) == 0


def test_labels_none_with_a_labelled_input_list_is_refused(src, tmp_path, capsys):
    """The list's labels were dropped without a word, yet a file two lines labelled two ways was
    still left out as conflicting_labels, in a build without labels."""
    image = sorted(src.rglob("*.jpg"))[0]
    listing = tmp_path / "list.csv"
    listing.write_text(f"{image},apple\n{image},banana\n")
    out = tmp_path / "out"
    assert (
        main(["build", "--input-list", str(listing), "--output", str(out), "--labels", "none"]) == 2
    )
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --labels: --labels none builds without labels, and "
        f"{str(listing)!r} gives them ({str(image).lstrip('/')!r}: 'apple'); leave --labels out "
        "to use them, or give a list of paths alone\n"
    )
    assert not out.exists()


def test_input_folder_that_does_not_exist(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["build", "--input", str(tmp_path / "nope"), "--output", str(out)]) == 2
    assert f"--input: '{tmp_path / 'nope'}' does not exist" in capsys.readouterr().err
    assert not out.exists()


def test_an_input_that_is_a_named_pipe_is_refused_without_waiting_on_it(tmp_path, capsys):
    """Opened the plain way, a named pipe waits for a writer for ever: the build is refused at
    once, saying what the path is."""
    pipe = tmp_path / "photo.jpg"
    os.mkfifo(pipe)
    out = tmp_path / "out"
    assert main(["build", "--input", str(pipe), "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --input: {str(pipe)!r} is a named pipe, not an image file\n"
    )
    assert not out.exists()


def test_a_relative_input_that_finds_nothing_says_where_it_was_looked_for(
    tmp_path, capsys, monkeypatch
):
    """A config file's relative paths are taken from the current folder, not the file's: a
    build started elsewhere says so, and names the folder that is not there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    config = tmp_path / "build.yaml"
    config.write_text("input: [samples/fruits/**]\noutput: out\n")
    assert main(["build", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert (
        "--input: 'samples/fruits/**': its folder 'samples/fruits' does not exist "
        f"(a relative path: taken from the current folder, {tmp_path})"
    ) in err, err
    assert main(["build", "--input", "empty/**", "--output", "out"]) == 2
    assert "matches no image file (extensions" in (err := capsys.readouterr().err), err
    assert f"taken from the current folder, {tmp_path})" in err
    assert not (tmp_path / "out").exists()


def test_output_inside_an_input(src, capsys):
    before = _snapshot(src)
    status = main(["build", "--input", f"{src}/**", "--output", str(src / "cat" / "dataset")])
    assert status == 2
    assert "--output:" in capsys.readouterr().err
    assert _snapshot(src) == before


def test_unwritable_output(src, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where a folder should be")
    status = main(["build", "--input", f"{src}/**", "--output", str(blocker / "out")])
    assert status == 2
    assert f"--output: '{blocker / 'out'}' is not writable" in capsys.readouterr().err
    assert blocker.read_text() == "a file where a folder should be"


def test_non_empty_output_without_overwrite(src, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    assert main(["build", "--input", f"{src}/**", "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --output: {str(out)!r} already holds 1 file; pass "
        "--overwrite to build beside it (it replaces only a build's own files)\n"
    )
    assert _snapshot(out) == {"keep.txt": b"precious"}
    # As it says: the build goes in beside the file, which stays.
    assert main(["build", "--input", f"{src}/**", "--output", str(out), "--overwrite"]) == 0
    assert _snapshot(out)["keep.txt"] == b"precious"


def test_a_build_that_published_nothing_is_built_again_without_overwrite(src, tmp_path, capsys):
    """A build that writes no image leaves its report.jsonl, to say why; run again after the
    fix, the build is not refused for the file the tool itself left, and replaces it."""
    out = tmp_path / "out"
    typo = ["--labels", r"regex:^(\w+)/.*\.jpeg$"]  # no image ends in .jpeg
    assert main(["build", "--input", f"{src}/**", "--output", str(out), *typo]) == 1
    assert "no image was written" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["report.jsonl"]
    left = (out / "report.jsonl").read_text().splitlines()
    assert left and all(json.loads(line)["reason"] == "no_label" for line in left)

    assert main(["build", "--input", f"{src}/**", "--output", str(out)]) == 0
    assert (out / "manifest.json").exists()
    assert (out / "report.jsonl").read_text() != "\n".join(left) + "\n"
    # Anything more than that report is still a folder to refuse.
    other = tmp_path / "other"
    other.mkdir()
    (other / "report.jsonl").write_text("")
    (other / "notes.txt").write_text("mine")
    assert main(["build", "--input", f"{src}/**", "--output", str(other)]) == 2
    assert "already holds 2 files" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("files", "folders", "says"),
    [(0, 1, "1 folder"), (1, 2, "1 file and 2 folders"), (2, 0, "2 files")],
)
def test_a_non_empty_output_is_counted_in_files_and_folders(
    src, tmp_path, capsys, files, folders, says
):
    out = tmp_path / "out"
    out.mkdir()
    for i in range(files):
        (out / f"keep{i}.txt").write_text("precious")
    for i in range(folders):
        (out / f"sub{i}").mkdir()  # empty: once counted as a file
    assert main(["build", "--input", f"{src}/**", "--output", str(out)]) == 2
    them = "it" if files + folders == 1 else "them"
    assert (
        f"already holds {says}; pass --overwrite to build beside {them}" in capsys.readouterr().err
    )


def test_unknown_yaml_setting_and_missing_config(src, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(f"input: ['{src}/**']\noutput: {tmp_path / 'out'}\nshard_size: 10MB\n")
    assert main(["build", "--config", str(config)]) == 2
    assert "unknown setting 'shard_size'; did you mean 'min_shard_size'?" in (
        capsys.readouterr().err
    )
    config.write_text(f"input: ['{src}/**']\noutput: {tmp_path / 'out'}\nfrobnicate: 1\n")
    assert main(["build", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    known = "known: allow_missing_classes, background, "
    assert f"--config: '{config}': unknown setting 'frobnicate'; {known}" in err
    assert " input, " in err and "inputs" not in err, "settings as a config file names them"
    config.write_text(f"input: ['{src}/**']\noutput: {tmp_path / 'out'}\nsed: 3\n")
    assert main(["build", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"beam-tfrecord build: error: --config: '{config}': unknown setting 'sed'; did you mean 'seed'?\n"
    )
    assert main(["build", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "--config:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("yaml_text", "says"),
    [
        ("output: [a, b]", "--output: must be a folder's path or URL, got ['a', 'b']"),
        ("output: {a: 1}", "--output: must be a folder's path or URL, got {'a': 1}"),
        (
            "output: 7",
            "--output: must be a folder's path or URL, got 7 (quote it, '7', for a folder of "
            "that name)",
        ),
        ("output: o\ninput_list: 5", "--input-list: must be a file's path or URL, got 5 (quote"),
        ("output: o\ninput_list: [a.csv]", "--input-list: must be a file's path or URL, got ['a"),
    ],
)
def test_a_path_setting_of_another_kind_is_refused_as_a_list_of_inputs_is(
    src, tmp_path, monkeypatch, capsys, yaml_text, says
):
    """`output: [a, b]` was refused as `--name: '__a____b__' must be ...`, a flag nobody gave;
    `output: 7` built into ./7; `input_list: 5` ended in a traceback."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    inputs = "" if "input_list" in yaml_text else f"input: ['{src}/**']\n"
    config.write_text(f"{inputs}{yaml_text}\n")
    assert main(["build", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beam-tfrecord build: error: {says}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"], "nothing was written"


@pytest.mark.parametrize(
    ("yaml_text", "says"),
    [
        ("classes: 5", "--classes: must be class names: a,b,c, @FILE or a list of them, got 5 "
         "(quote it, '5', for a class of that name)"),
        ("extensions: 5", "--extensions: must be file suffixes, comma-separated or a list of "
         "them, got 5"),
        ("extensions: [jpg, 5]", "--extensions: must be file suffixes, comma-separated or a "
         "list of them, got ['jpg', 5]"),
        ("split_by: 5", "--split-by: must be a regex with a capture group, got 5"),
        ("labels: [dir]", "--labels: must be dir, none or regex:PATTERN, got ['dir']"),
        ("classes: [yes, no]", "--classes: must be class names: a,b,c, @FILE or a list of "
         "them, got [True, False] (YAML reads an unquoted yes, no, on, off, true or false as "
         "a switch: quote a class so named)"),
    ],
)  # fmt: skip
def test_a_setting_of_another_kind_is_refused_in_words_naming_it(
    src, tmp_path, monkeypatch, capsys, yaml_text, says
):
    """`classes: 5` and `extensions: 5` were refused as `--config: 'int' object is not
    iterable`, `split_by: 5` as `--config: first argument must be string or compiled
    pattern`, `extensions: [jpg, 5]` in a traceback; `labels: [dir]` as the text "['dir']";
    `classes: [yes, no]` built, and every input was refused as of no class."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(f"input: ['{src}/**']\noutput: out\n{yaml_text}\n")
    assert main(["build", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == f"beam-tfrecord build: error: {says}\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"], "nothing was written"


_IN_MEMORY = "is in memory (fsspec's memory filesystem),"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--output", "memory://built"], f"--output: 'memory://built' {_IN_MEMORY} gone when "
         "the command ends: the build would be lost; give a path on disk or in a bucket"),
        (["--output", "simplecache::memory://built"], "--output: 'simplecache::memory://built' "
         f"{_IN_MEMORY} gone when the command ends: the build would be lost;"),
        (["--input", "memory://src", "--output", "out"], f"--input: 'memory://src' {_IN_MEMORY} "
         "empty when a command starts; give a path on disk or in a bucket"),
        (["--input-list", "memory://list.csv", "--output", "out"], "--input-list: "
         f"'memory://list.csv' {_IN_MEMORY} empty when a command starts;"),
    ],
    ids=["output", "chained_output", "input", "input_list"],
)  # fmt: skip
def test_the_command_refuses_memory_which_ends_with_it(
    src, tmp_path, monkeypatch, capsys, flags, says
):
    """`build --output memory://x` printed "Built 'x' in memory://x", exit status 0: the build
    was in the command's own memory, gone as it ended. The library's `build` takes memory, in
    one process with its caller (the tests use it)."""
    import fsspec

    monkeypatch.chdir(tmp_path)
    memory = fsspec.filesystem("memory")
    memory.pipe("/src/cat/a.png", next((src / "cat").iterdir()).read_bytes())
    memory.pipe("/list.csv", b"memory://src/cat/a.png\n")
    inputs = [] if "--input" in flags or "--input-list" in flags else ["--input", str(src)]
    try:
        assert main(["build", *inputs, *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"beam-tfrecord build: error: {says}") and err.count("\n") == 1
        assert list(tmp_path.iterdir()) == [], "nothing was written"
        assert not memory.exists("/built")
    finally:
        memory.rm("/src", recursive=True)
        memory.rm("/list.csv")


@pytest.mark.parametrize(
    ("setting", "value"),
    [("overwrite", '"no"'), ("overwrite", "maybe"), ("dedup", '"false"'), ("resume", "1")],
)
def test_an_on_off_setting_must_be_true_or_false(src, tmp_path, capsys, setting, value):
    # YAML reads `"no"` as a string, true to Python: it must not overwrite (or dedup) unasked.
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier build")
    config = tmp_path / "c.yaml"
    config.write_text(f"input: ['{src}/**']\noutput: {out}\n{setting}: {value}\n")
    assert main(["build", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"--{setting}: expected true or false, got " in err
    assert _snapshot(out) == {"keep.txt": b"an earlier build"}


def test_a_mistyped_flag_is_named_even_when_it_leaves_a_required_setting_unset(
    src, tmp_path, capsys
):
    out = tmp_path / "out"
    assert main(["build", "--inptu", str(src), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "beam-tfrecord build: error: --inptu: no such flag, of this tool or of Beam; "
        "did you mean --input?\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("flag", "meant"),
    [
        ("--in", "--input or --input-list"),
        ("--jpeg", "--jpeg-quality"),
        ("--split", "--splits"),  # the nearest, of the two it begins
    ],
)
def test_an_abbreviated_flag_is_refused_naming_the_flags_it_begins(
    src, tmp_path, capsys, flag, meant
):
    """`build --in DIR` was refused with no flag named: too short for `nearest`'s likeness."""
    out = tmp_path / "out"
    assert main(["build", flag, str(src), "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: {flag}: no such flag, of this tool or of Beam; did you "
        f"mean {meant}?\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("biuld", "'biuld' is not a command; did you mean 'build'?"),
        ("verfy", "'verfy' is not a command; did you mean 'verify'?"),
        (
            "convert",
            "'convert' is not a command; the commands: build, inspect, verify, spec, preview",
        ),
    ],
)
def test_a_mistyped_command_is_named_with_the_one_it_meant(tmp_path, capsys, command, says):
    with pytest.raises(SystemExit) as exit:
        main([command, "--input", str(tmp_path), "--output", str(tmp_path / "out")])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (f"beam-tfrecord: error: {says} (see beam-tfrecord --help)\n")
    assert not (tmp_path / "out").exists()


def test_a_value_argparse_refuses_is_one_line(src, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["build", "--input", str(src), "--output", str(tmp_path / "out"), "--seed", "abc"])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        "beam-tfrecord build: error: argument --seed: invalid int value: 'abc' "
        "(see beam-tfrecord build --help)\n"
    )


@pytest.mark.parametrize("flags", [["--splits", "train=0.7,test=0.2"], ["--splits", "train=1"]])
def test_a_program_running_the_command_line_keeps_its_garbage_collector(src, tmp_path, flags):
    """The `beam-tfrecord` process tunes its garbage collector for one build (off while it
    imports, then Beam's modules frozen out of it); a program that runs the command line, with a
    bad config or a good one, finds its collector as it was."""
    import gc

    before = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    main(["build", "--input", f"{src}/**", "--output", str(tmp_path / "out"), *flags])
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == before
