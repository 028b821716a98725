"""Metadata moves in batches: what a runner moves from step to step while a build lists and
plans, shuffles included, grows with batches, not images."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace

import apache_beam as beam
import pytest
from apache_beam.metrics import monitoring_infos
from PIL import Image
from written_shards import file_digests

from beam_tfrecord import spool
from beam_tfrecord.batches import BATCH
from beam_tfrecord.beam import pipeline as pipeline_module
from beam_tfrecord.beam.pipeline import ConvertImages, LocalRunner
from beam_tfrecord.beam.transforms import REPORT
from beam_tfrecord.config import BuildConfig

pytestmark = pytest.mark.slow

IMAGES = 3 * BATCH + 100


def _element_counts(pipeline: beam.Pipeline, result, shuffles_only: bool) -> dict[str, int]:
    """Elements the runner moved, by the step that made them (the runner's own counts of each
    PCollection); `shuffles_only`: into each GroupByKey, by the shuffle's name."""
    proto = pipeline.to_runner_api()
    names = {}
    for transform in proto.components.transforms.values():
        name = transform.unique_name.removeprefix("ConvertImages/")
        if transform.spec.urn == "beam:transform:group_by_key:v1":
            (pcollection,) = transform.inputs.values()
            names[pcollection] = name
        elif not shuffles_only and not transform.subtransforms:
            names.update({pc: f"{name}[{tag}]" for tag, pc in transform.outputs.items()})
    counts = dict.fromkeys(names.values(), 0)
    for info in result.monitoring_infos():
        if info.urn == monitoring_infos.ELEMENT_COUNT_URN:
            name = names.get(info.labels.get(monitoring_infos.PCOLLECTION_LABEL))
            if name is not None:
                counts[name] += monitoring_infos.extract_counter_value(info)
    return counts


def _images(tmp_path) -> list:
    """IMAGES tiny PNGs below tmp_path/src, in 3 classes of 7 parts each; every tenth image a
    copy of the one before it, for --dedup to find."""
    paths = []
    for i in range(IMAGES):
        folder = tmp_path / "src" / f"class{i % 3}" / f"part{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        shade = i - 1 if i % 10 == 9 else i
        Image.new("RGB", (4, 4), (shade % 256, shade // 256, 10)).save(buffer, "PNG")
        paths.append(folder / f"{i:05d}.png")
        paths[-1].write_bytes(buffer.getvalue())
    return paths


def _built(config: BuildConfig) -> tuple[beam.Pipeline, object]:
    pipeline = beam.Pipeline(runner=LocalRunner())
    outputs = pipeline | ConvertImages(config)
    _ = outputs["summary"]
    result = pipeline.run()
    result.wait_until_finish()
    return pipeline, result


@pytest.mark.parametrize("dedup", [False, True], ids=["default", "dedup"])
def test_no_shuffle_of_a_build_carries_an_element_per_image(tmp_path, dedup):
    _images(tmp_path)
    config = BuildConfig(inputs=(f"{tmp_path}/src/**",), output=str(tmp_path / "out"), dedup=dedup)
    pipeline, result = _built(config)
    counts = _element_counts(pipeline, result, shuffles_only=True)
    # Every shuffle of the default build, listing to manifest, was counted.
    for step in ("ListImages/Spread0", "PlanImages/Census", "PlanShards/GroupBuckets",
                 "PlanShards/SizeOfBuckets", "PlanShards/GroupShards", "WriteReport/GroupParts",
                 *(["HashImages/Spread", "DropDuplicates/GroupCopies"] if dedup else [])):  # fmt: skip
        assert any(name.startswith(step) for name in counts), (step, sorted(counts))
    # The listing's folders (its tasks), a batch per two thousand images, a combine's partial
    # results: a few dozen elements at most, for thousands of images.
    folders = 1 + 3 + 3 * 7
    # The report is a line an element: of a --dedup build, the copies dropped and kept, two
    # lines for each tenth image; no other shuffle carries an element per image.
    lines = 2 * (IMAGES // 10) if dedup else 0
    for name, moved in counts.items():
        most = folders + 3 * IMAGES // BATCH + 10
        assert moved <= most + (lines if name.startswith("WriteReport/") else 0), (name, counts)
    assert sum(counts.values()) < IMAGES / 20 + 3 * lines, counts
    # Nor does any step between them: the listing hands on batches, and the plan makes them.
    steps = _element_counts(pipeline, result, shuffles_only=False)
    planning = {
        name: n
        for name, n in steps.items()
        if name.startswith(
            ("ListImages/", "PlanImages/", "PlanShards/", "HashImages/", "DropDuplicates/")
        )
        and "/Create/" not in name
        and not name.endswith(f"[{REPORT}]")  # a line an element: the images reported
    }
    assert "PlanImages/Plan/ParDo(_PlanFn)[None]" in planning, sorted(planning)
    assert max(planning.values()) <= folders + 3 * IMAGES // BATCH + 10, planning
    assert (tmp_path / "out" / "manifest.json").exists()
    if dedup:
        assert "DropDuplicates/KeepOne/ParDo(_KeepOneCopyFn)[None]" in planning, sorted(planning)


@pytest.mark.parametrize("listing", ["two-patterns", "input-list"])
def test_files_listed_twice_meet_in_batches_not_one_element_each(tmp_path, listing):
    """Where a file can be listed twice (overlapping patterns, an input list naming it on two
    lines), the listings meet by URL in chunks of one range of URL hashes: the shuffle that
    makes each file one input moves batches, and every file is still written once."""
    paths = _images(tmp_path)
    out = str(tmp_path / "out")
    if listing == "two-patterns":
        # class0's files match both patterns: a third of the images are listed twice.
        inputs = (f"{tmp_path}/src/**", f"{tmp_path}/src/class0/**")
        config = BuildConfig(inputs=inputs, output=out, labels="none")
        listings = IMAGES + len([p for p in paths if p.parent.parent.name == "class0"])
    else:
        lines = [f"{p},{p.parent.parent.name}" for p in paths]
        lines += lines[: IMAGES // 2]  # half of the files on two lines, with the same label
        (tmp_path / "list.csv").write_text("path,label\n" + "\n".join(lines) + "\n")
        config = BuildConfig(input_list=str(tmp_path / "list.csv"), output=out)
        listings = len(lines)
    pipeline, result = _built(config)
    (group,) = (
        moved
        for name, moved in _element_counts(pipeline, result, shuffles_only=True).items()
        if name.startswith("ListImages/GroupByUrl")
    )
    # A chunk per range of URL hashes (one here) per batch of listings, at most.
    assert 0 < group <= listings // BATCH + 4, group
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["inputs"]["listed"] == manifest["inputs"]["written"] == IMAGES
    written = sum(split["examples"] for split in manifest["splits"].values())
    assert written == IMAGES


def test_a_local_build_holds_references_to_its_metadata_in_a_spool(tmp_path, monkeypatch):
    """An in-process runner keeps each step's output until the next step has read all of it:
    the listing, then the plan by bucket, then by shard, each in two or three copies at once.
    A local build's batches wait in a spool file instead, and what the runner holds and copies
    of each is a reference of a few dozen bytes: the launcher's memory stays flat in the
    collection's size (`benchmarks/bench_cost.py --scale`). The shards are the same bytes."""
    _images(tmp_path)
    spooled, references = [], []
    put, encoded = spool._Spool.put, spool.Held.encoded

    def spooled_put(self, data):
        spooled.append(len(data))
        return put(self, data)

    def reference(self):
        references.append(encoded(self))
        return references[-1]

    monkeypatch.setattr(spool._Spool, "put", spooled_put)
    monkeypatch.setattr(spool.Held, "encoded", reference)
    config = BuildConfig(inputs=(f"{tmp_path}/src/**",), output=str(tmp_path / "spooled"))
    _built(config)
    # The listing, the labelled files, the plan's chunks by bucket and by shard, at least.
    assert sum(spooled) > 4 * IMAGES * 10, sum(spooled)
    assert references and all(ref[:1] == b"\1" for ref in references)
    assert max(map(len, references)) < 200
    spooled.clear()
    monkeypatch.setattr(pipeline_module, "spooling", lambda enabled: contextlib.nullcontext())
    _built(replace(config, output=str(tmp_path / "held")))
    assert not spooled
    shards = {
        name: digest
        for name, digest in file_digests(tmp_path / "spooled").items()
        if name != "manifest.json"  # it says when it was made
    }
    assert len(shards) > 3 and shards.items() <= file_digests(tmp_path / "held").items()
