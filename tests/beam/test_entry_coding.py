"""What crosses the planning shuffles: ImageEntry's compact encoding, used by the pipeline's coders."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.runners import pipeline_context
from entry_strategies import entries, sources
from hypothesis import given

from beam_tfrecord.beam.pipeline import ConvertImages, build
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry
from beam_tfrecord.listing import SourceFile


@given(entries)
def test_an_entry_survives_its_encoding(entry):
    assert ImageEntry.from_bytes(entry.to_bytes()) == entry


@given(entries)
def test_the_coder_sizes_an_entry_without_encoding_it(entry):
    from beam_tfrecord.beam.transforms import _ImageEntryCoder

    size = len(entry.to_bytes())
    texts = (entry.url, entry.relpath, entry.split, entry.label or "", entry.prepared)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ImageEntry, "to_bytes", None)  # Beam sizes every element it outputs
        estimate = _ImageEntryCoder().estimate_size(entry)
    assert estimate == size if all(t.isascii() for t in texts) else 0 < estimate <= size


@given(sources)
def test_a_listed_file_survives_its_encoding(source):
    assert SourceFile.from_bytes(source.to_bytes()) == source


@given(sources)
def test_the_coder_sizes_a_listed_file_without_encoding_it(source):
    from beam_tfrecord.beam.transforms import _SourceFileCoder

    size = len(source.to_bytes())
    texts = (source.url, source.relpath, source.label or "")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SourceFile, "to_bytes", None)
        estimate = _SourceFileCoder().estimate_size(source)
    assert estimate == size if all(t.isascii() for t in texts) else 0 < estimate <= size


def test_undecodable_file_names_survive_too():
    entry = ImageEntry("/x/caf\udce9.jpg", "caf\udce9.jpg", 10, "train", 5, "c\udcff", 0, 99)
    assert ImageEntry.from_bytes(entry.to_bytes()) == entry


def test_the_encoding_is_compact():
    entry = ImageEntry(
        "gs://bucket/photos/cat/IMG_0001.jpg", "cat/IMG_0001.jpg", 123456, "train", 2**63, "cat",
        3, 123700,
    )  # fmt: skip
    assert len(entry.to_bytes()) < 120


def test_the_planning_shuffles_carry_entries_as_compressed_batch_bytes():
    """An in-process runner holds a shuffle's values as its coder decodes them, all at once:
    planning's chunks cross as bytes as `hold` keeps them (a reference into a spool, or the
    bytes), never as a batch of ImageEntry objects."""
    pipeline = beam.Pipeline()
    config = BuildConfig(inputs=("samples/fruits/**",), output="unused", dedup=True)
    _ = pipeline | ConvertImages(config)
    proto = pipeline.to_runner_api()
    context = pipeline_context.PipelineContext(proto.components)
    coders = {}
    for transform in proto.components.transforms.values():
        if transform.spec.urn == "beam:transform:group_by_key:v1":
            (pcollection,) = transform.inputs.values()
            coder_id = proto.components.pcollections[pcollection].coder_id
            coders[transform.unique_name] = repr(context.coders.get_by_id(coder_id))
    for step in ("/GroupBuckets/", "/GroupShards", "/GroupCopies/"):
        (coder,) = (c for name, c in coders.items() if step in name)
        assert coder.endswith(", _HeldCoder]"), coder
        assert "Pickle" not in coder and "FastPrimitives" not in coder
    # The reshuffles before reading images move batches as bytes too.
    (spread,) = (c for name, c in coders.items() if "HashImages/Spread" in name)
    assert "_HeldCoder" in spread and "Pickle" not in spread, spread


def test_listed_files_cross_in_their_compact_coder_too():
    """Labelled files are kept for the census, in chunks; two patterns' files meet by URL in
    chunks of one range of URL hashes, which cross the shuffle as their compressed bytes."""
    pipeline = beam.Pipeline()
    config = BuildConfig(inputs=("samples/fruits/apple/*", "samples/fruits/**"), output="unused")
    _ = pipeline | ConvertImages(config)
    proto = pipeline.to_runner_api()
    context = pipeline_context.PipelineContext(proto.components)
    coders = {}
    for transform in proto.components.transforms.values():
        name = transform.unique_name
        if name.endswith(("PlanImages/Label", "ListImages/KeyByUrl")):
            (pcollection,) = transform.outputs.values()
        elif transform.spec.urn == "beam:transform:group_by_key:v1" and "/GroupByUrl/" in name:
            (pcollection,) = transform.inputs.values()
        else:
            continue
        coder_id = proto.components.pcollections[pcollection].coder_id
        coders[name.split("/")[-1]] = repr(context.coders.get_by_id(coder_id))
    assert coders["Label"] == "_LabelledBatchCoder"
    assert coders["KeyByUrl"].endswith(", _SourceBatchCoder]"), coders
    assert coders["Group"].endswith(", _HeldCoder]"), coders
    assert "Pickle" not in coders["Group"] and "FastPrimitives" not in coders["Group"]


def _refuse_pickling(self, protocol):
    raise AssertionError(
        f"a {type(self).__name__} was pickled: some PCollection of them lacks its compact coder"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"dedup": True},
        {"input": ["samples/fruits/apple/*", "samples/fruits/**"]},
        {"listing": "launcher"},
        {"input_list": "LIST"},
    ],
    ids=["default", "dedup", "two-patterns", "listed-on-launcher", "input-list"],
)
def test_no_image_entry_or_listed_file_is_pickled_anywhere_in_a_build(
    settings, tmp_path, monkeypatch
):
    """Not only at the shuffles: wherever Beam cuts the graph between fused stages (a side input
    does), every element is encoded, and sized, with its PCollection's coder; where no type was
    declared that is a pickle per image."""
    fruits = sorted(p for p in Path("samples/fruits").rglob("*") if p.is_file())
    if settings.get("input_list"):
        listing = tmp_path / "list.csv"
        listing.write_text("path\n" + "".join(f"{p.resolve()}\n" for p in fruits))
        settings = {"input_list": str(listing), "labels": "none"}
    else:
        settings = {"input": ["samples/fruits/**"], **settings}
    monkeypatch.setattr(ImageEntry, "__reduce_ex__", _refuse_pickling)
    monkeypatch.setattr(SourceFile, "__reduce_ex__", _refuse_pickling)
    result = build(
        BuildConfig.from_settings({"output": str(tmp_path / "out"), **settings}),
        [],
    )
    inputs = result.manifest["inputs"]
    assert inputs["listed"] == len(fruits) and inputs["unaccounted"] == 0
    assert inputs["written"] + inputs["skipped"] == len(fruits) and inputs["written"] > 40
