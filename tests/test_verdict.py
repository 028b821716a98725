"""The build's verdict, decided once from what became of its inputs: published or withdrawn (and
why), its exit code and its one line, the same wherever it is asked for."""

from __future__ import annotations

import json

import pytest
from imagegen import make_collection

from beam_tfrecord.verdict import (
    EXIT_FAILED,
    EXIT_OK,
    BuildFailed,
    Counts,
    Verdict,
    Withdrawal,
    decide,
    of_published,
)

URL = "out/report.jsonl"


@pytest.mark.parametrize(
    ("counts", "bound", "missing", "withdrawal"),
    [
        (Counts(100, 90, {"truncated": 10}), None, (), None),
        (Counts(100, 90, {"truncated": 10}), 0.1, (), None),  # at the bound is allowed
        (Counts(100, 89, {"truncated": 11}), 0.1, (), Withdrawal.TOO_MANY_SKIPPED),
        (Counts(100, 0, {"truncated": 100}), 0.1, (), Withdrawal.NO_IMAGE),  # no image first
        (Counts(0, 0, {}), None, (), Withdrawal.NO_IMAGE),
        (Counts(100, 95, {"truncated": 5}), None, ("dgo",), Withdrawal.MISSING_CLASSES),
        # Too many skipped comes before the missing classes, which come before lost inputs.
        (Counts(100, 50, {"unknown_class": 49}), 0.2, ("dgo",), Withdrawal.TOO_MANY_SKIPPED),
        (Counts(100, 95, {"truncated": 4}), None, ("dgo",), Withdrawal.MISSING_CLASSES),
        (Counts(100, 95, {"truncated": 4}), None, (), Withdrawal.UNACCOUNTED),
        (Counts(100, 95, {"truncated": 4}), 0.5, (), Withdrawal.UNACCOUNTED),
        # Not known (a runner without metrics): a bound set counts it as too many.
        (Counts(None, None, {"truncated": 4}), 0.5, (), Withdrawal.TOO_MANY_SKIPPED),
    ],
)
def test_the_order_of_the_reasons(counts, bound, missing, withdrawal):
    assert decide(counts, bound, missing).withdrawal is withdrawal


@pytest.mark.parametrize(
    ("withdrawal", "resumable", "retry", "keeps_shards"),
    [
        (None, False, False, False),
        (Withdrawal.NO_IMAGE, False, False, False),
        (Withdrawal.TOO_MANY_SKIPPED, True, False, True),
        # Its message said "--resume keeps the finished shards", with resumable False.
        (Withdrawal.MISSING_CLASSES, True, False, True),
        (Withdrawal.UNACCOUNTED, True, True, True),
    ],
)
def test_what_each_verdict_implies(withdrawal, resumable, retry, keeps_shards):
    verdict = Verdict(Counts(10, 5, {"truncated": 5}), 0.1, withdrawal, ("dgo",))
    assert (verdict.resumable, verdict.retry, verdict.keeps_shards) == (
        resumable,
        retry,
        keeps_shards,
    )
    assert verdict.exit_code == (EXIT_OK if withdrawal is None else EXIT_FAILED)
    if withdrawal is not None:
        failure = verdict.failure(URL)
        assert isinstance(failure, BuildFailed) and failure.exit_code == EXIT_FAILED
        assert (failure.resumable, failure.retry) == (resumable, retry)
        assert failure.withdrawal is withdrawal and failure.withdrawal == withdrawal.value
        assert "\n" not in str(failure) and "nothing was published" in str(failure)
        # Its words agree: the shards it says are kept, --resume keeps.
        assert ("the finished shards are kept" in str(failure)) is failure.resumable


def test_a_build_known_withdrawn_whose_counts_pass_lost_inputs():
    """The launcher, without the pipeline's verdict, knows only that no manifest came: counts
    that would have passed mean the books did not balance where the counts cannot show it."""
    counts = Counts(10, 10, {})
    assert decide(counts).published
    verdict = decide(counts, withdrawn=True)
    assert verdict.withdrawal is Withdrawal.UNACCOUNTED
    assert verdict.message(URL).startswith("inputs were neither written nor reported: ")


def test_the_messages_word_for_word():
    too_many = decide(Counts(120, 60, {"no_label": 60}), 0.25)
    assert too_many.message(URL) == (
        "60 of 120 inputs (50.0%) were skipped (no_label: 60), more than "
        "--max-skipped-fraction 0.25 allows; nothing was published (the finished shards are "
        "kept), see out/report.jsonl"
    )
    no_image = decide(Counts(120, 0, {"unknown_class": 100, "corrupt": 20}))
    assert no_image.message(URL, "; HINT") == (
        "no image was written: 120 inputs were reported (corrupt: 20, unknown_class: 100); "
        "nothing was published, see out/report.jsonl; HINT"
    )
    assert decide(Counts(1, 0, {"empty_file": 1})).message(URL) == (
        "no image was written: 1 input was reported (empty_file: 1); nothing was published, "
        "see out/report.jsonl"
    )
    assert decide(Counts(0, 0, {})).message(URL) == (
        "no image was written and no input was reported: none was listed, or the runner lost "
        "them between stages; nothing was published"
    )
    lost = decide(Counts(4, 3, {}))
    assert lost.message(URL) == (
        "1 of 4 listed inputs was neither written nor reported: the runner lost them between "
        "stages; nothing was published (the finished shards are kept), see out/report.jsonl. "
        "Build again with --resume (the DirectRunner's in_memory mode, a local build's "
        "default, does not lose data)"
    )
    missing = decide(Counts(10, 10, {}), None, ("sqare",))
    assert missing.message(URL) == (
        "--classes names 1 class no input is labelled with: 'sqare'; nothing was published "
        "(the finished shards are kept), see out/report.jsonl. Correct --classes (and build "
        "with --overwrite), or pass --allow-missing-classes to publish it with no image "
        "(--resume keeps the finished shards)"
    )


def test_a_failure_for_python_names_the_settings_as_fields():
    failure = decide(Counts(10, 10, {}), 0.5, ("sqare",)).failure(URL)
    python = failure.for_python()
    assert isinstance(python, BuildFailed)
    assert str(python) == (
        "classes names 1 class no input is labelled with: 'sqare'; nothing was published "
        "(the finished shards are kept), see out/report.jsonl. Correct classes (and build "
        "with overwrite=True), or pass allow_missing_classes=True to publish it with no image "
        "(resume=True keeps the finished shards)"
    )
    assert (python.resumable, python.retry, python.exit_code) == (
        failure.resumable,
        failure.retry,
        failure.exit_code,
    )


def test_a_published_build_whose_books_do_not_balance_fails_with_the_manifests_count():
    inputs = {"listed": 3, "written": 3, "skipped_by_reason": {}, "unaccounted": 1}
    verdict = of_published(inputs)
    assert verdict.published and not verdict.succeeded and verdict.exit_code == EXIT_FAILED
    assert verdict.message(URL).startswith("1 of 3 listed inputs was neither written nor ")
    assert of_published({**inputs, "unaccounted": 0}).exit_code == EXIT_OK


def test_the_verdict_travels_as_json_unchanged():
    verdict = decide(Counts(120, 60, {"no_label": 60}), 0.25, ("a",))
    again = Verdict.from_json(verdict.to_json(), 0.25)
    assert again == verdict
    assert json.loads(verdict.to_json())["withdrawal"] == "too_many_skipped"


def test_the_pipelines_verdict_reaches_the_command_line_not_a_guess(
    tmp_path, runner_loses_an_input, capsys
):
    """The finalize step decides and hands its verdict on: the launcher's message counts what
    the finalize step counted (4 listed), where a guess from the runner's counters and the
    report (3 listed, 3 written, none reported) could only say "inputs were"."""
    from beam_tfrecord.cli import main

    src = tmp_path / "src"
    make_collection(src, {"a": 3}, seed=1)
    out = tmp_path / "out"
    status = main(["build", "--input", f"{src}/**", "--output", str(out), "--splits", "train=1"])
    assert status == EXIT_FAILED
    err = capsys.readouterr().err
    assert "error: 1 of 4 listed inputs was neither written nor reported: " in err


def test_without_the_pipelines_verdict_the_folder_gives_the_same_one(tmp_path):
    """A runner that reports no metrics hands no verdict on: it is decided again, by the same
    rules, from the withdrawn folder (its report and whether shards stay)."""
    from beam_tfrecord.manifest import withdrawn_failure

    (tmp_path / "report.jsonl").write_text(
        "".join(
            json.dumps({"path": f"/s/{i}.jpg", "reason": "no_label", "detail": "x"}) + "\n"
            for i in range(60)
        )
    )
    (tmp_path / "out-train.tfrecord-00000-of-00001").write_bytes(b"")
    pipelines = decide(Counts(120, 60, {"no_label": 60}), 0.25)
    folders = withdrawn_failure(str(tmp_path), None, max_skipped_fraction=0.25, listed=120)
    assert str(folders) == pipelines.message(f"{tmp_path}/report.jsonl")
    assert folders.resumable
    (tmp_path / "out-train.tfrecord-00000-of-00001").unlink()
    empty = withdrawn_failure(str(tmp_path), None, max_skipped_fraction=0.25, listed=120)
    assert str(empty).startswith("no image was written: 60 inputs were reported (no_label: 60)")


def test_the_command_offers_to_publish_anyway_only_past_the_skipped_bound(tmp_path, capsys):
    """A build withheld for a --classes typo is resumable too, but dropping
    --max-skipped-fraction would not publish it: its own line says what would."""
    from beam_tfrecord.cli import main

    src = tmp_path / "src"
    make_collection(src, {"a": 3, "b": 2}, seed=1)
    out = tmp_path / "out"
    flags = ["build", "--input", f"{src}/**", "--output", str(out), "--splits", "train=1"]
    assert main([*flags, "--classes", "a,bb"]) == EXIT_FAILED
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("beam-tfrecord build: error: --classes names 1 class no input ")
    assert line.endswith("Correct --classes (and build with --overwrite), or pass "
                         "--allow-missing-classes to publish it with no image (--resume "
                         "keeps the finished shards)")  # fmt: skip
    assert main([*flags, "--overwrite", "--max-skipped-fraction", "0.1"]) == EXIT_OK
    assert main([*flags, "--overwrite", "--classes", "a", "--max-skipped-fraction", "0.1"]) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith("To publish it anyway: ")
