"""No silent success: a build that writes no image fails, and an empty split is named, not hidden.

A scheduled build's exit status and files are all the next job sees. A build that writes nothing
exits 1 with its report and a one-line reason, and leaves nothing that claims a dataset; a split
that receives no images is warned about and left out of TFDS's metadata, so TFDS loads the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from imagegen import make_collection

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.manifest import BuildFailed
from beam_tfrecord.tfds_metadata import dataset_info_json

_REPO = Path(__file__).resolve().parents[2]
# What a build writes that claims a dataset.
_CLAIMS = (
    "manifest.json",
    "labels.txt",
    "dataset_info.json",
    "features.json",
    "image.class.label.labels.txt",
)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(_REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "build", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=_REPO,
    )


def _files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src")
    make_collection(root, {"cat": 60, "dog": 60}, seed=15, size=(16, 24))
    return root


@pytest.mark.slow
def test_a_build_that_labels_nothing_exits_1_with_its_report_and_no_manifest(src, tmp_path):
    out = tmp_path / "out"
    temp = tmp_path / "tmp"
    temp.mkdir()
    run = _cli(
        "--input", f"{src}/**", "--output", str(out), "--labels", "regex:^(x*)",
        env={"TMPDIR": str(temp)},
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    # The one line: no pointer to a log of Beam's output, which has nothing to say here.
    assert run.stderr.splitlines() == [
        "beam-tfrecord build: error: no image was written: 120 inputs were reported "
        f"(no_label: 120); nothing was published, see {out}/report.jsonl"
    ]
    assert not list(temp.glob("beam-tfrecord-*.log"))
    assert "Traceback" not in run.stderr
    assert "Built" not in run.stdout, "no summary of a dataset that was not built"
    assert _files(out) == ["report.jsonl"]
    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    assert len(report) == 120
    assert {r["reason"] for r in report} == {"no_label"}


@pytest.mark.slow
@pytest.mark.parametrize("again", ["overwrite", "resume"])
def test_an_empty_rebuild_leaves_no_earlier_build_claiming_success(src, tmp_path, again):
    out = tmp_path / "out"
    settings = dict(
        inputs=(f"{src}/**",), output=str(out), min_shard_size="20KB", max_shard_size="100KB"
    )
    first = build(BuildConfig.from_settings(settings), [])
    assert first.manifest["inputs"]["written"] == 120
    assert all((out / name).exists() for name in _CLAIMS)
    if again == "resume":
        # Its record of its settings would refuse other labels (tests/test_resume_settings.py):
        # as a folder an earlier version built, which has none.
        (out / "build-settings.json").unlink()
    with pytest.raises(BuildFailed, match=r"no image was written: 120 inputs were reported"):
        build(
            BuildConfig.from_settings(dict(**settings, labels="regex:^(x*)", **{again: True})), []
        )
    # The earlier build's shards, indexes and metadata went with it: only the report is left,
    # and no folder its files were in.
    assert _files(out) == ["report.jsonl"]
    assert sorted(p.name for p in out.iterdir()) == ["report.jsonl"]


@pytest.fixture(scope="module")
def with_empty_split(src, tmp_path_factory):
    """A build whose validation split receives no image, through the command line."""
    out = tmp_path_factory.mktemp("build") / "pets"
    run = _cli(
        "--input", f"{src}/**", "--output", str(out), "--min-shard-size", "20KB", "--max-shard-size", "100KB",
        "--splits", "train=0.6,validation=0,test=0.4",
    )  # fmt: skip
    return out, run


@pytest.mark.slow
def test_an_empty_split_is_warned_about_in_the_summary(with_empty_split):
    out, run = with_empty_split
    assert run.returncode == 0, run.stderr
    assert (
        "WARNING: split 'validation' received no images; it is left out of TFDS's dataset_info.json"
    ) in run.stdout.splitlines()
    assert "WARNING: split 'train'" not in run.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["validation"] == {
        "examples": 0,
        "bytes": 0,
        "shards": 0,
        "class_counts": {},
    }


@pytest.mark.slow
def test_tfds_loads_the_other_splits_and_names_the_empty_one(tfds, with_empty_split):
    out, _ = with_empty_split
    manifest = json.loads((out / "manifest.json").read_text())
    builder = tfds.builder_from_directory(str(out))
    assert set(builder.info.splits) == {"train", "test"}
    assert "validation received no images" in builder.info.description
    total = 0
    for split in ("train", "test"):
        examples = list(tfds.as_numpy(builder.as_dataset(split=split)))
        assert len(examples) == manifest["splits"][split]["examples"] > 0
        total += len(examples)
    assert total == manifest["inputs"]["written"] == 120
    assert len(list(tfds.as_numpy(builder.as_dataset(split="all")))) == 120
    with pytest.raises(ValueError, match="Unknown split 'validation'"):
        builder.as_dataset(split="validation")


def test_dataset_info_leaves_out_an_empty_split_and_says_so():
    manifest = {
        "name": "pets",
        "config": {"labels": "dir"},
        "splits": {
            "train": {"examples": 3, "bytes": 30},
            "validation": {"examples": 0, "bytes": 0},
            "test": {"examples": 0, "bytes": 0},
        },
        "shards": [{"split": "train", "examples": 3}],
    }
    info = dataset_info_json(manifest)
    assert [s["name"] for s in info["splits"]] == ["train"]
    assert info["description"].endswith(
        "Splits validation, test received no images and are left out here; manifest.json "
        "lists them with 0 examples."
    )
    manifest["splits"].pop("test")
    assert (
        "Split validation received no images and is left out"
        in dataset_info_json(manifest)["description"]
    )


@pytest.mark.slow
def test_a_build_that_skipped_too_many_is_withheld_by_the_pipeline_itself(src, tmp_path):
    import apache_beam as beam

    from beam_tfrecord.beam.pipeline import ConvertImages

    out = tmp_path / "out"
    # The dogs get no label: half of the inputs are skipped, more than the quarter allowed.
    config = BuildConfig.from_settings(
        dict(
            inputs=(f"{src}/**",),
            output=str(out),
            labels="regex:^(cat)/",
            max_skipped_fraction=0.25,
            min_shard_size="20KB",
            max_shard_size="100KB",
        )
    )
    # The graph alone, on Beam's own runner, with no command line and no build() around it.
    with beam.Pipeline(runner="BundleBasedDirectRunner") as pipeline:
        _ = pipeline | ConvertImages(config)
    files = _files(out)
    assert not set(_CLAIMS) & set(files)
    shards = [name for name in files if ".tfrecord-" in name and "/" not in name]
    assert shards and "report.jsonl" in files
    # The folder is an interrupted build's. build() says why (in a Python caller's words), and
    # that --resume can publish it.
    with pytest.raises(BuildFailed) as failed:
        build(replace(config, resume=True), [])
    assert str(failed.value) == (
        "60 of 120 inputs (50.0%) were skipped (no_label: 60), more than "
        "max_skipped_fraction 0.25 allows; nothing was published (the finished shards are "
        f"kept), see {out}/report.jsonl"
    )
    assert failed.value.resumable
    assert not set(_CLAIMS) & set(_files(out))


@pytest.mark.slow
def test_a_build_withheld_for_a_classes_typo_names_the_labels_it_left_out(src, tmp_path):
    """A withheld build prints no summary, so its one line must say what --classes left out:
    before, `--classes cta,dgo` said only `unknown_class: 120`."""
    out = tmp_path / "nothing"
    run = _cli("--input", f"{src}/**", "--output", str(out), "--classes", "cta,dgo")
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines() == [
        "beam-tfrecord build: error: no image was written: 120 inputs were reported "
        f"(unknown_class: 120); nothing was published, see {out}/report.jsonl; --classes left "
        "out the labels 'cat' (60 inputs; --classes has 'cta': a typo?), 'dog' (60 inputs; "
        "--classes has 'dgo': a typo?)"
    ]

    def withheld(out: Path, classes: str) -> list[str]:
        run = _cli(
            "--input", f"{src}/**", "--output", str(out), "--classes", classes,
            "--max-skipped-fraction", "0.2",
        )  # fmt: skip
        assert run.returncode == 1, run.stderr
        return run.stderr.splitlines()

    out = tmp_path / "withheld"
    first, publish = withheld(out, "cat,dgo")
    assert first.endswith(
        f"see {out}/report.jsonl; --classes left out the label 'dog' (60 inputs; --classes has "
        "'dgo': a typo?)"
    )
    assert "--max-skipped-fraction 0.2 allows" in first
    assert publish.startswith("To publish it anyway: ")

    # A label left out on purpose, with no --classes name near it, is named without a guess.
    lines = withheld(tmp_path / "on-purpose", "cat")
    assert lines[0].endswith("; --classes left out the label 'dog' (60 inputs)")
