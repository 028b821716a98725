"""Class names that could not survive labels.txt or TFDS's label file are refused or reported.

A name is written to labels.txt, manifest.json, TFDS's label names file and every Example; line i
of labels.txt must be class i, and TFDS must give back the same names. A name with a line break,
another control character or white space at either end cannot: from --classes it is refused
before anything is written, from a folder or an input list its images are reported as
`bad_class_name`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from imagegen import jpeg_bytes

from beam_tfrecord.beam.pipeline import build, preparer
from beam_tfrecord.cli import main
from beam_tfrecord.config import BuildConfig, ConfigError, parse_classes
from beam_tfrecord.entries import Reason, ReportEntry
from beam_tfrecord.labels import ClassMap, class_name_problem
from beam_tfrecord.listing import SourceFile

# The names of the issue, a carriage return, a name of spaces only and one ending in a space.
BAD = {
    "new\nline": "holds a line break (U+000A)",
    "cr\rclass": "holds a line break (U+000D)",
    "tab\tclass": "holds a control character (U+0009)",
    " lead": "starts with white space",
    "trail ": "ends with white space",
    "   ": "is only white space",
}
GOOD = ["comma,class", 'quote"class', "späce ünïcode"]
# A folder name whose bytes are not UTF-8 (Latin-1 "é"), as Python lists it (surrogateescape).
UNDECODABLE = os.fsdecode(b"caf\xe9")


@pytest.mark.parametrize("name, problem", [*BAD.items(), *((g, None) for g in GOOD)])
def test_class_name_problem(name, problem):
    assert class_name_problem(name) == problem


@pytest.mark.parametrize(
    "name, problem",
    [
        ("a\u2028b", "holds a line separator (U+2028)"),  # str.splitlines breaks here
        ("a\x85b", "holds a line break (U+0085)"),
        ("nbsp\xa0", "ends with white space"),  # TFDS strips every line of its label file
        ("\u3000ideographic", "starts with white space"),
        ("x\udcffy", "holds a byte that is not UTF-8 (0xFF)"),  # an undecodable folder name
        ("x\ud800y", "holds a byte that is not UTF-8 (U+D800)"),
        ("", "is empty"),
        ("a b", None),
        ("zero\u200bwidth", None),  # not white space to str.strip, so it survives every file
    ],
)
def test_class_name_problem_beyond_ascii(name, problem):
    assert class_name_problem(name) == problem


def test_a_class_map_refuses_a_name_labels_txt_could_not_give_back():
    with pytest.raises(ValueError, match=r"class name 'new\\nline' holds a line break"):
        ClassMap(["cat", "new\nline"])
    assert ClassMap(GOOD).to_text().splitlines() == GOOD


@pytest.mark.parametrize("name", list(BAD))
def test_class_list_refuses_each_name_that_cannot_survive(tmp_path, name):
    expected = f"class {name!r} {BAD[name]}"
    with pytest.raises(ConfigError) as err:  # a YAML list, taken as written
        BuildConfig(inputs=("a/**",), output="o", classes=["cat", name])
    assert expected in str(err.value)
    listing = tmp_path / "classes.txt"
    listing.write_bytes(f"cat\n{name}\ndog\n".encode())
    if "\n" in name or "\r" in name:
        # A file's lines end at CR as at LF (universal newlines): the file names two classes.
        assert parse_classes(f"@{listing}") == ("cat", *name.splitlines(), "dog")
    else:
        with pytest.raises(ConfigError, match="--classes") as err:
            parse_classes(f"@{listing}")
        assert expected in str(err.value)


def test_class_list_keeps_names_that_survive_and_strips_only_around_commas(tmp_path):
    listing = tmp_path / "classes.txt"
    listing.write_text("".join(f"{name}\n" for name in GOOD) + "\n", encoding="utf-8")
    assert parse_classes(f"@{listing}") == tuple(GOOD)
    assert parse_classes(GOOD) == tuple(GOOD)
    assert parse_classes(' lead, quote"class ,späce ünïcode') == (
        "lead",
        'quote"class',
        "späce ünïcode",
    )
    with pytest.raises(ConfigError, match=r"class 'new\\nline' holds a line break"):
        parse_classes("cat,new\nline")


def test_a_bad_name_in_classes_is_refused_on_the_command_line(tmp_path, capsys):
    src = tmp_path / "src" / "cat"
    src.mkdir(parents=True)
    (src / "a.jpg").write_bytes(jpeg_bytes(np.random.default_rng(0), 40, 30))
    out = tmp_path / "out"
    status = main(
        ["build", "--input", f"{src.parent}/**", "--output", str(out), "--classes", "cat,tab\tx"]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert "beam-tfrecord build: error: --classes: class 'tab\\tx' holds a control character" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists(), "nothing was written"


def _label(config: BuildConfig, source: SourceFile):
    return preparer(config).label(source)


def test_a_bad_folder_name_is_reported_with_a_reason_of_its_own():
    config = BuildConfig(inputs=("src/**",), output="o")
    source = SourceFile(url="src/ lead/a.jpg", relpath=" lead/a.jpg", size=10)
    entry = _label(config, source)
    assert isinstance(entry, ReportEntry)
    assert entry.reason == Reason.BAD_CLASS_NAME == "bad_class_name"
    assert entry.message == "class name ' lead' starts with white space"
    assert entry.label == " lead" and entry.relpath == " lead/a.jpg"
    # The name is the problem, not the class list: the reason stays with --classes too.
    fixed = BuildConfig(inputs=("src/**",), output="o", classes=("lead",))
    assert _label(fixed, source).reason == Reason.BAD_CLASS_NAME
    good = SourceFile(url="src/comma,class/a.jpg", relpath="comma,class/a.jpg", size=10)
    assert _label(config, good) == "comma,class"


def test_a_bad_label_from_an_input_list_is_reported():
    config = BuildConfig(input_list="list.csv", output="o")
    source = SourceFile(url="a.jpg", relpath="a.jpg", size=10, label="tab\tclass")
    entry = _label(config, source)
    assert entry.reason == Reason.BAD_CLASS_NAME
    assert entry.message == "class name 'tab\\tclass' holds a control character (U+0009)"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, dict]:
    """A build over one folder per name, good and bad, of two images each."""
    src = tmp_path_factory.mktemp("src")
    rng = np.random.default_rng(15)
    for name in [*BAD, *GOOD, UNDECODABLE]:
        (src / name).mkdir()
        for i in range(2):
            (src / name / f"{i}.jpg").write_bytes(jpeg_bytes(rng, 40 + i, 30))
    out = tmp_path_factory.mktemp("build") / "hostile"
    result = build(
        BuildConfig(
            inputs=(f"{src}/**",),
            output=str(out),
            splits="train=1",
            min_shard_size="10KB",
            max_shard_size="1MB",
        ),
        [],
    )
    return out, result.manifest


@pytest.mark.slow
def test_labels_txt_manifest_and_examples_agree_and_bad_names_are_reported(hostile):
    out, manifest = hostile
    names = sorted(GOOD)
    assert (out / "labels.txt").read_text(encoding="utf-8").splitlines() == names
    on_disk = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert on_disk["classes"] == manifest["classes"] == names
    assert manifest["inputs"]["written"] == 2 * len(GOOD)
    assert manifest["inputs"]["skipped_by_reason"] == {"bad_class_name": 2 * len(BAD) + 2}
    # report.jsonl is UTF-8 JSON even where a name is not: its bytes come back as JSON escapes.
    text = (out / "report.jsonl").read_text(encoding="utf-8")
    report = [json.loads(line) for line in text.split("\n") if line]
    assert sorted((r["label"], r["relpath"]) for r in report) == sorted(
        (name, f"{name}/{i}.jpg") for name in [*BAD, UNDECODABLE] for i in range(2)
    )
    relpaths = {os.fsencode(r["relpath"]) for r in report if r["label"] == UNDECODABLE}
    assert relpaths == {b"caf\xe9/0.jpg", b"caf\xe9/1.jpg"}
    assert all(r["reason"] == "bad_class_name" and repr(r["label"]) in r["message"] for r in report)
    assert (out / "image.class.label.labels.txt").read_text(encoding="utf-8").splitlines() == names


@pytest.mark.slow
def test_tfds_names_and_examples_agree_with_labels_txt(tfds, hostile):
    out, manifest = hostile
    builder = tfds.builder_from_directory(str(out))
    names = builder.info.features["image/class/label"].names
    assert names == (out / "labels.txt").read_text(encoding="utf-8").splitlines()
    examples = list(tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False)))
    assert len(examples) == manifest["inputs"]["written"]
    for ex in examples:
        folder = ex["image/filename"].decode("utf-8").split("/")[0]
        text = ex["image/class/text"].decode("utf-8")
        assert names[ex["image/class/label"]] == text == folder
    assert {ex["image/class/text"].decode("utf-8") for ex in examples} == set(GOOD)
