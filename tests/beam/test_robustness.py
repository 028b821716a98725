"""Dirty collections and killed builds: nothing crashes, nothing is lost, nothing is half-written."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_images import hostile_corpus
from imagegen import make_collection

from beam_tfrecord.cli import main
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.reader import read_records

REPO = Path(__file__).resolve().parents[2]
SHARD_RE = re.compile(r"^ds-[a-z]+\.tfrecord-\d{5}-of-\d{5}$")
pytestmark = pytest.mark.slow


def _shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if SHARD_RE.match(p.name)}


@pytest.fixture(scope="module")
def hostile_build(tmp_path_factory):
    """A build over the hostile corpus, each case in a folder of its own name (so its label)."""
    cases = hostile_corpus()
    src = tmp_path_factory.mktemp("hostile")
    for case in cases:
        folder = src / case.name
        folder.mkdir()
        (folder / Path(case.filename).name).write_bytes(case.data)
    out = tmp_path_factory.mktemp("out") / "ds"
    status = main(
        ["build", "--input", f"{src}/**", "--output", str(out), "--splits", "train=0.5,test=0.5"]
    )
    return cases, out, status


def test_hostile_build_succeeds_and_accounts_for_every_case(hostile_build, capsys):
    cases, out, status = hostile_build
    assert len(cases) >= 25
    assert status == 0, "bad images never fail the build by default"
    written = {}
    for name in _shards(out):
        for record in read_records(str(out / name)):
            features = decode_example(record)
            written[features["image/class/text"][0].decode()] = features
    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    skipped = {
        r["label"] if "label" in r else r["relpath"].split("/")[0]: r
        for r in report
        if r["action"] == "skipped"
    }
    for case in cases:
        if case.expect.outcome == "written":
            assert case.name in written, case.name
            assert case.name not in skipped
            features = written[case.name]
            assert features["image/format"] == [case.expect.format.encode()], case.name
            width, height = case.expect.size
            assert (features["image/width"], features["image/height"]) == ([width], [height]), (
                case.name
            )
            if not case.expect.reencode:
                assert features["image/encoded"] == [case.data], "untouched images keep their bytes"
        else:
            assert case.name not in written, case.name
            assert skipped[case.name]["reason"] == case.expect.code, case.name
            assert skipped[case.name]["message"]
    manifest = json.loads((out / "manifest.json").read_text())
    n_skipped = sum(c.expect.outcome == "skipped" for c in cases)
    assert manifest["inputs"]["skipped"] == n_skipped
    assert manifest["inputs"]["written"] == len(cases) - n_skipped


def test_every_written_hostile_image_decodes_in_tensorflow_as_stated(hostile_build, tf):
    _, out, _ = hostile_build
    count = 0
    for name in _shards(out):
        for record in read_records(str(out / name)):
            f = decode_example(record)
            channels = f["image/channels"][0]
            image = tf.io.decode_image(
                f["image/encoded"][0], channels=channels, expand_animations=False
            )
            assert tuple(image.shape) == (f["image/height"][0], f["image/width"][0], channels), f[
                "image/class/text"
            ]
            count += 1
    assert count > 15


def test_max_skipped_fraction_fails_after_writing_the_report_and_publishes_nothing(
    hostile_build, tmp_path, capsys
):
    _, out, _ = hostile_build
    src = Path(json.loads((out / "manifest.json").read_text())["config"]["inputs"][0][:-3])
    target = tmp_path / "ds"
    status = main(
        ["build", "--input", f"{src}/**", "--output", str(target), "--max-skipped-fraction", "0.05"]
    )
    assert status == 1
    captured = capsys.readouterr()
    assert "more than --max-skipped-fraction 0.05 allows; nothing was published" in captured.err
    assert "Built" not in captured.out
    assert not (target / "manifest.json").exists() and not (target / "labels.txt").exists()

    def skipped(folder):
        lines = [json.loads(line) for line in (folder / "report.jsonl").read_text().splitlines()]
        return sorted((r["relpath"], r["reason"]) for r in lines if r["action"] == "skipped")

    assert skipped(target) == skipped(out), "the report is written before the build fails"


def _command(src: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", f"{src}/**", "--output", str(out),
        "--name", "ds", "--min-shard-size", "20KB", "--max-shard-size", "60KB", "--validate", "header",
        *extra,
    ]  # fmt: skip


def test_killed_build_leaves_no_partial_shard_and_resume_finishes_it(tmp_path):
    src = tmp_path / "src"
    make_collection(src, {"a": 250, "b": 250, "c": 250}, seed=9, size=(64, 128))
    reference = tmp_path / "reference"
    subprocess.run(_command(src, reference), check=True, capture_output=True, timeout=600)
    expected = _shards(reference)
    assert len(expected) > 40

    out = tmp_path / "out"
    proc = subprocess.Popen(
        _command(src, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and len([p for p in out.iterdir() if SHARD_RE.match(p.name)]) >= 5:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), (
        "the build was killed part-way, not after it finished"
    )

    finished = {p.name: p.stat() for p in out.iterdir() if SHARD_RE.match(p.name)}
    assert 0 < len(finished) < len(expected)
    for name in finished:
        assert (out / name).read_bytes() == expected[name], f"{name} is whole under its final name"

    again = subprocess.run(
        _command(src, out, "--resume"), capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert _shards(out) == expected, "a resumed build ends with the bytes of an uninterrupted one"
    for name, stat in finished.items():
        assert (out / name).stat().st_mtime_ns == stat.st_mtime_ns, (
            f"{name} was kept, not rewritten"
        )
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "no temporaries are left"
