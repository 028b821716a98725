"""The summary after a build: what it says of images changed on writing, and why."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest

from beam_tfrecord.commands.summary import print_summary
from beam_tfrecord.config import BuildConfig

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "fruits"


def _summary(modified: int, **settings) -> str:
    manifest = {
        "name": "pets",
        "inputs": {"listed": 45, "written": 45, "modified": modified, "skipped": 0},
        "splits": {"train": {"examples": 45, "shards": 1, "bytes": 10**6}},
        "classes": ["cat", "dog"],
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
