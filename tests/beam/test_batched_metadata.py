"""Metadata moves in batches: what a runner moves from step to step while a build lists and
plans, shuffles included, grows with batches, not images."""

from __future__ import annotations

import io

import apache_beam as beam
import pytest
from apache_beam.metrics import monitoring_infos
from PIL import Image

from beam_tfrecord.batches import BATCH
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


@pytest.mark.parametrize("dedup", [False, True], ids=["default", "dedup"])
def test_no_shuffle_of_a_build_carries_an_element_per_image(tmp_path, dedup):
    for i in range(IMAGES):
        folder = tmp_path / "src" / f"class{i % 3}" / f"part{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        # Every tenth image a copy of the one before it, for --dedup to find.
        shade = i - 1 if i % 10 == 9 else i
        Image.new("RGB", (4, 4), (shade % 256, shade // 256, 10)).save(buffer, "PNG")
        (folder / f"{i:05d}.png").write_bytes(buffer.getvalue())
    config = BuildConfig(inputs=(f"{tmp_path}/src/**",), output=str(tmp_path / "out"), dedup=dedup)
    pipeline = beam.Pipeline(runner=LocalRunner())
    outputs = pipeline | ConvertImages(config)
    _ = outputs["summary"]
    result = pipeline.run()
    result.wait_until_finish()
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
