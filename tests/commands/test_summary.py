"""The summary after a build: what it says of images changed on writing, and why."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from imagegen import make_collection

from beam_tfrecord.cli import main
from beam_tfrecord.commands.summary import print_summary
from beam_tfrecord.config import BuildConfig

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "fruits"


def _summary(modified: int, classes=("cat", "dog"), **settings) -> str:
    manifest = {
        "name": "pets",
        "inputs": {"listed": 45, "written": 45, "modified": modified, "skipped": 0},
        "splits": {"train": {"examples": 45, "shards": 1, "bytes": 10**6}},
        "classes": list(classes),
    }
    config = BuildConfig.from_settings(dict(inputs=("src/**",), output="out", **settings))
    out = io.StringIO()
    print_summary(SimpleNamespace(manifest=manifest, seconds=1.0), config, out)
    return out.getvalue()


def test_images_normalized_for_tensorflow_are_said_to_be():
    assert "  1 image was re-encoded so TensorFlow decodes it (report.jsonl)" in _summary(1)


@pytest.mark.parametrize(
    ("settings", "flags"),
    [
        ({"resize": "64"}, "--resize"),
        ({"resize": "64", "encode": "jpeg"}, "--resize/--encode"),
        ({"store": "raw"}, "--store raw"),
    ],
)
def test_images_transformed_as_asked_are_not_blamed_on_tensorflow(settings, flags):
    # Re-encoding every image because the user asked to resize them is not a TensorFlow fix.
    assert (
        f"  45 images were re-encoded as {flags} asked, or so that TensorFlow decodes them "
        "(report.jsonl)"
    ) in _summary(45, **settings)


def test_a_build_without_labels_says_it_has_no_classes():
    """It said `classes: 0 (labels.txt)`, pointing at an empty file."""
    assert "  classes: 2 (labels.txt)\n" in _summary(0)
    summary = _summary(0, classes=(), labels="none")
    assert "  classes: none (--labels none)\n" in summary and "labels.txt" not in summary


def _resumed(counters: dict[str, int], found: int) -> list[str]:
    from beam_tfrecord.commands.summary import print_resumed

    out = io.StringIO()
    print_resumed(counters, found, "out/pets", out)
    return out.getvalue().splitlines()


@pytest.mark.parametrize(
    ("kept", "found", "said"),
    [
        (3, 3, "  resumed: kept 3 of 3 finished shards"),
        (1, 1, "  resumed: kept 1 of 1 finished shard"),
        (0, 0, "  resumed: the output held no finished shards to keep"),
        (
            0,
            1,
            "WARNING: --resume kept none of the 1 finished shard in out/pets: it did not match "
            "this build's plan (settings or inputs changed since it was written, or it was "
            "damaged or held an image that could not be read, to be tried again) and was "
            "replaced; the build's log names it, with why",
        ),
        (
            2,
            5,
            "WARNING: --resume kept 2 of the 5 finished shards in out/pets: the other 3 did not "
            "match this build's plan (settings or inputs changed since they were written, or one "
            "was damaged or held an image that could not be read, to be tried again) and were "
            "replaced; the build's log names each, with why",
        ),
    ],
)
def test_resume_says_in_one_line_how_many_finished_shards_it_kept(kept, found, said):
    counters = {"images_listed": 45, **({"shards_kept": kept} if kept else {})}
    assert _resumed(counters, found) == [said]


def test_resume_on_a_runner_without_metrics_does_not_guess():
    assert _resumed({}, 4) == [
        "  resumed: 4 finished shards found; the runner did not say how many were kept"
    ]


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        (
            r"patient(\d+)",
            r"WARNING: --split-by 'patient(\d+)' matched none of the 46 images planned: each "
            "was split on its own, as without --split-by",
        ),
        (
            "(apple)",
            "NOTE: --split-by '(apple)' matched 15 of the 46 images planned; the other 31 were "
            "each split on their own",
        ),
        ("(.)", None),  # every image in a group: nothing to say
    ],
)
def test_a_split_by_pattern_that_leaves_images_alone_is_said_to(tmp_path, pattern, said):
    """A --split-by pattern with a typo matches nothing, and splits every image on its own as
    if it were not given: without a word, a user would trust groups that do not exist."""
    from test_command_line import run

    done = run("build", "--input", str(SAMPLES), "--output", str(tmp_path / "out"),
               "--split-by", pattern, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    if said is None:
        assert not [line for line in lines if "--split-by" in line], lines
    else:
        assert said in lines, lines


def _named(output: str, **settings) -> list[str]:
    manifest = {
        "name": "any",
        "inputs": {"listed": 4, "written": 4, "modified": 0, "skipped": 0},
        "splits": {"train": {"examples": 4, "shards": 1, "bytes": 10**4}},
        "classes": ["cat"],
    }
    config = BuildConfig.from_settings(dict(inputs=("src/**",), output=output, **settings))
    out = io.StringIO()
    print_summary(SimpleNamespace(manifest=manifest, seconds=1.0), config, out)
    return [line for line in out.getvalue().splitlines() if "named" in line]


@pytest.mark.parametrize(
    ("output", "name", "folder"),
    [
        ("out/données", "donn_es", "données"),
        ("out/my photos/", "my_photos", "my photos"),
        ("gs://bucket/v1 (final)", "v1__final_", "v1 (final)"),
    ],
)
def test_a_name_made_of_the_output_folder_with_characters_replaced_is_said_to_be(
    output, name, folder
):
    """`--output out/données` built `donn_es-train.tfrecord-...` and said nothing of it."""
    assert _named(output) == [
        f"NOTE: the dataset is named {name!r} after its output folder {folder!r}, with '_' for "
        "each character a name cannot hold; --name NAME names it otherwise"
    ]


@pytest.mark.parametrize(
    ("output", "settings"),
    [
        ("out/fruits", {}),
        ("out/photos-v1.0", {}),
        ("/", {}),
        ("out/données", {"name": "donnees"}),
        ("out/fruits", {"name": "f_uits"}),
    ],
)
def test_a_name_as_the_folder_has_it_or_as_given_needs_no_note(output, settings):
    assert _named(output, **settings) == []


def test_the_build_named_after_a_folder_with_characters_replaced_says_so(tmp_path, capsys):
    make_collection(tmp_path / "src", {"cat": 2, "dog": 2}, seed=1)
    out = tmp_path / "données"
    flags = ["--input", str(tmp_path / "src"), "--output", str(out), "--splits", "train=1"]
    assert main(["build", *flags]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"Built 'donn_es' in {out}: ")
    assert (
        "NOTE: the dataset is named 'donn_es' after its output folder 'données', with '_' for "
        "each character a name cannot hold; --name NAME names it otherwise\n"
    ) in printed
    assert [p.name for p in out.glob("*.tfrecord-*")] == ["donn_es-train.tfrecord-00000-of-00001"]


def test_a_job_submitted_under_a_name_made_of_its_folder_says_so_too():
    from beam_tfrecord.commands.summary import print_submitted

    submitted = SimpleNamespace(
        transforms=12, graph_bytes=40_000, state="RUNNING", dry_run=False, job_id="j1",
        runner="DataflowRunner",
    )  # fmt: skip
    config = BuildConfig.from_settings({"inputs": ("src/**",), "output": "gs://b/données"})
    out = io.StringIO()
    print_submitted(submitted, config, out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Submitted 'donn_es' to DataflowRunner: job j1 ")
    assert lines[-1].startswith("NOTE: the dataset is named 'donn_es' after its output folder ")
