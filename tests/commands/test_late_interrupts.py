"""A build interrupted at its very end: after its manifest is written, or while its partial
files are tidied away. What it says must be what the folder holds."""

from __future__ import annotations

import logging
import signal

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.commands.build import _discard_partial_files, _report_interruption
from beam_tfrecord.commands.console import Interruption
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.manifest import forget_written_here


def test_an_interrupt_after_the_manifest_says_the_build_is_whole(tmp_path, capsys):
    """It said "no manifest.json yet. To go on: ... --resume" of a build that was published."""
    out = tmp_path / "out"
    config = BuildConfig.from_settings(
        {"input": ["samples/fruits"], "output": str(out), "splits": "train=1"}
    )
    build(config, [])
    interrupted = Interruption()
    interrupted.signum = signal.SIGINT
    _report_interruption("beam-tfrecord build", config, interrupted, 2.5, until=None)
    assert capsys.readouterr().err == (
        "beam-tfrecord build: interrupted (SIGINT) after 2.5 s, once the build was published: "
        f"{out} holds it whole (manifest.json is written); only its summary was not printed. "
        f"To check it: beam-tfrecord verify {out}\n"
    )
    forget_written_here(str(out))  # a build that starts there again is another one
    _report_interruption("beam-tfrecord build", config, interrupted, 2.5, until=None)
    assert "no manifest.json yet" in capsys.readouterr().err


def test_tidying_an_interrupted_build_removes_the_report_parts_folder_too(tmp_path, caplog):
    """The parts folder's name is a temporary's: removing it as a file failed ("Cannot delete
    directory, set recursive=True", logged as a warning), and it was left behind."""
    out = tmp_path / "out"
    (out / ".report.tmp-parts").mkdir(parents=True)
    (out / ".report.tmp-parts" / "part-0.jsonl").write_text("{}\n")
    (out / ".ds-train.tfrecord-00000-of-00001.tmp-1234").write_bytes(b"half")
    (out / "ds-test.tfrecord-00000-of-00001").write_bytes(b"finished")
    with caplog.at_level(logging.WARNING):
        _discard_partial_files(str(out))
    assert caplog.records == []
    assert sorted(p.name for p in out.iterdir()) == ["ds-test.tfrecord-00000-of-00001"]
