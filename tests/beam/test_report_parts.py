"""report.jsonl written by the workers as sorted key-range parts, composed in order; counts by combine."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_runner_api_pb2
from imagegen import make_collection

from beam_tfrecord.beam.pipeline import ConvertImages, build
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ReportEntry
from beam_tfrecord.labels import ClassMap
from beam_tfrecord.manifest import REPORT_FILE, build_manifest, write_build_files
from beam_tfrecord.report import (
    PARTS_DIR,
    ReportTally,
    compose_report,
    part_bounds,
    part_of,
    report_key,
    write_part,
)

_REPO = Path(__file__).resolve().parents[2]


def _entries(count: int, seed: int) -> list[ReportEntry]:
    rng = random.Random(seed)
    entries = []
    for i in range(count):
        folder = rng.choice(["a", "b", "b/c", "z", "é"])
        action = rng.choice(["skipped", "modified"])
        reason = (
            rng.choice(["truncated", "corrupt", "no_label"])
            if action == "skipped"
            else "normalized"
        )
        entries.append(
            ReportEntry(f"file:///src/{folder}/{i:04d}.jpg", f"{folder}/{i:04d}.jpg", reason,
                        f"message {i}", action=action)
        )  # fmt: skip
    # The same input can be reported twice (a kept duplicate, say): equal relpaths must tie.
    entries.append(ReportEntry(entries[0].url, entries[0].relpath, "duplicate", "kept", "kept"))
    return entries


def _compose(out: Path, entries: list[ReportEntry], part_lines: int) -> bytes:
    keys = sorted(report_key(e) for e in entries)
    quantiles = [keys[round(i * (len(keys) - 1) / 16)] for i in range(17)] if keys else []
    bounds = part_bounds(quantiles, len(entries), part_lines)
    parts: dict[int, list[tuple[str, str]]] = {}
    for entry in entries:
        parts.setdefault(part_of(report_key(entry), bounds), []).append(
            (report_key(entry), entry.to_json())
        )
    written = {part: write_part(str(out), part, lines) for part, lines in parts.items()}
    assert sum(written.values()) == len(entries)
    compose_report(str(out), written, REPORT_FILE)
    return (out / REPORT_FILE).read_bytes()


@pytest.mark.parametrize("part_lines", [1, 7, 50, 10_000])
def test_composed_parts_are_the_report_a_single_sort_writes(tmp_path, part_lines):
    entries = _entries(300, seed=part_lines)
    reference = tmp_path / "reference"
    write_build_files(str(reference), {}, ClassMap(()), list(reversed(entries)))
    composed = _compose(tmp_path / "parts", entries, part_lines)
    assert composed == (reference / REPORT_FILE).read_bytes()
    assert composed.count(b"\n") == len(entries)
    if part_lines < len(entries):
        assert len(list((tmp_path / "parts" / PARTS_DIR).iterdir())) > 1


def test_an_empty_report_is_an_empty_file(tmp_path):
    assert _compose(tmp_path, [], 10) == b""


def test_part_bounds_cut_the_keys_into_parts_of_the_asked_size():
    quantiles = [f"k{i:03d}" for i in range(101)]
    assert part_bounds(quantiles, lines=1000, part_lines=100) == [
        f"k{i:03d}" for i in range(10, 100, 10)
    ]
    assert part_bounds(quantiles, lines=10, part_lines=100) == []  # one part
    # 101 quantiles (smallest and largest included) make at most 100 parts: 99 bounds.
    assert len(part_bounds(quantiles, lines=10**9, part_lines=1)) == 99
    assert part_bounds([], lines=0, part_lines=5) == []


def test_the_tally_counts_what_the_manifest_counted_from_lines():
    entries = _entries(500, seed=1)
    halves = ReportTally.of(entries[:200]).merge(ReportTally.of(entries[200:]))
    from_tally = build_manifest(config={}, split_names=["train"], classes=ClassMap(()),
                                shards=[], report=halves, listed=1000)  # fmt: skip
    from_lines = build_manifest(config={}, split_names=["train"], classes=ClassMap(()),
                                shards=[], report=entries, listed=1000)  # fmt: skip
    assert from_tally["inputs"] == from_lines["inputs"]
    assert halves.lines == len(entries)
    assert from_tally["inputs"]["modified"] == sum(e.action == "modified" for e in entries)


def _side_input_producers(pipeline_proto) -> set[str]:
    producers = {}
    for transform in pipeline_proto.components.transforms.values():
        if not transform.subtransforms:
            for pcoll in transform.outputs.values():
                producers[pcoll] = transform.unique_name
    found = set()
    for transform in pipeline_proto.components.transforms.values():
        if transform.subtransforms or transform.spec.urn != "beam:transform:pardo:v1":
            continue
        payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
        found |= {producers[transform.inputs[tag]] for tag in payload.side_inputs}
    return found


def test_no_side_input_is_fed_by_the_report(tmp_path):
    (tmp_path / "src" / "cat").mkdir(parents=True)
    config = BuildConfig(inputs=(str(tmp_path / "src"),), output=str(tmp_path / "out"))
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"]))
    _ = pipeline | "ConvertImages" >> ConvertImages(config)
    producers = _side_input_producers(pipeline.to_runner_api())
    assert producers  # the census, the plan, the shard results... are side inputs
    # The report (every line) is the Flatten named Report; only its tally and part counts, both
    # small, reach another step as side inputs.
    assert not {p for p in producers if p.startswith("ConvertImages/Report")}
    assert not {p for p in producers if p.startswith(("ConvertImages/PlanImages/Plan",))}
    report_side = {p.split("/")[2] for p in producers if p.startswith("ConvertImages/WriteReport/")}
    assert report_side == {"Tally", "KeyQuantiles", "PartBounds", "WriteParts"}


@pytest.mark.slow
def test_a_build_reporting_every_image_agrees_with_verify_inspect_and_manifest(tmp_path):
    src = tmp_path / "src"
    images = make_collection(src, {"cat": 12, "dog": 10, "fox": 8}, seed=4)
    (src / "dog" / "broken.jpg").write_bytes(images["dog/dog_0000.jpg"][:300])
    (src / "loose.jpg").write_bytes(images["cat/cat_0000.jpg"])  # labelled "src": fine
    out = tmp_path / "out"
    # --resize re-encodes every image, so every written image is a report line ("modified");
    # parts of at most 4 lines make the report out of many parts.
    config = BuildConfig.from_settings(dict(
        inputs=(str(src),), output=str(out), resize="24", seed=3, planning_bucket_records=4,
        min_shard_size=2_000, max_shard_size=8_000,
    ))  # fmt: skip
    result = build(config, ["--runner=DirectRunner"])
    lines = (out / REPORT_FILE).read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    keys = [(e["relpath"], e["url"], e["reason"]) for e in entries]
    assert keys == sorted(keys)
    inputs = result.manifest["inputs"]
    modified = [e for e in entries if e["action"] == "modified"]
    skipped = [e for e in entries if e["action"] == "skipped"]
    assert inputs["listed"] == 32 and inputs["unaccounted"] == 0
    assert inputs["modified"] == len(modified) == inputs["written"] == 31
    assert inputs["skipped"] == len(skipped) == 1 and skipped[0]["relpath"] == "dog/broken.jpg"
    assert result.counters["report_parts_written"] >= 4  # 32 lines, at most 4 a part, roughly
    assert not (out / PARTS_DIR).exists()

    verify = subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "verify", str(out)],
        capture_output=True, text=True, cwd=_REPO, timeout=300,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{inputs['written']} records" in verify.stdout.splitlines()[-1]
    inspect = subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "inspect", "--json", "-n", "0", str(out)],
        capture_output=True, text=True, cwd=_REPO, timeout=300,
    )  # fmt: skip
    assert inspect.returncode == 0, inspect.stderr
    records = [json.loads(line) for line in inspect.stdout.splitlines() if line.startswith("{")]
    filenames = sorted(r["features"]["image/filename"]["values"][0] for r in records)
    assert filenames == sorted(e["relpath"] for e in modified)
