"""The image-to-TFRecord build: the pipeline graph, the checks before it, and the run around it."""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.config import BuildConfig
from beam_tfrecord.images import ImagePolicy, Resize
from beam_tfrecord.labels import LabelRule
from beam_tfrecord.manifest import (
    build_manifest,
    discard_manifest,
    publish_text,
    read_manifest,
    remove_stale_files,
    write_build_files,
)
from beam_tfrecord.preflight import preflight
from beam_tfrecord.preparation import Preparer
from beam_tfrecord.tfds_metadata import tfds_files
from beam_tfrecord.transforms import (
    METRICS_NAMESPACE,
    CheckImages,
    DropDuplicates,
    LabelImages,
    ListImages,
    PlanShards,
    WriteShards,
)
from beam_tfrecord.wording import count

__all__ = ["BuildResult", "ConvertImages", "build", "image_policy", "preparer"]

_LOG = logging.getLogger(__name__)


def image_policy(config: BuildConfig) -> ImagePolicy:
    return ImagePolicy(
        validate=config.validate,
        color=config.color,
        max_pixels=config.max_pixels,
        background=config.background,
        jpeg_quality=config.jpeg_quality,
        apply_exif_orientation=config.exif_orientation,
        resize=Resize.parse(config.resize) if config.resize else None,
        encode=config.encode,
        store=config.store,
    )


def preparer(config: BuildConfig) -> Preparer:
    return Preparer(
        label_rule=LabelRule(config.labels),
        fixed_classes=config.classes,
        splits=config.splits,
        seed=config.seed,
        policy=image_policy(config),
        max_record_size=config.max_shard_size,
        split_by=config.split_by,
        hash_sources=config.dedup,
    )


def _finalize(results, report, census, config_dict, split_names, output_dir):
    """Runs once, after every shard is written: metadata files last, then stale files go."""
    manifest = build_manifest(
        config=config_dict,
        split_names=split_names,
        classes=census.classes,
        shards=results,
        report=report,
        listed=census.listed,
    )
    # TFDS's files describe the same build; they go before manifest.json, which comes last.
    tfds = tfds_files(manifest)
    for name, text in tfds.items():
        publish_text(posixpath.join(output_dir, name), text)
    write_build_files(output_dir, manifest, census.classes, report)
    keep = [*tfds, *(s["file"] for s in manifest["shards"])]
    keep += [s["index_file"] for s in manifest["shards"] if s["index_file"]]
    removed = remove_stale_files(output_dir, keep=keep)
    if removed:
        _LOG.info(
            "removed %s of an earlier build: %s",
            count(len(removed), "stale file"),
            ", ".join(removed[:5]),
        )
    return manifest["inputs"]


class ConvertImages(beam.PTransform):
    """The whole build: list, label, check, plan and write, then the manifest, labels and report.

    Applied to a pipeline's root. Returns a dict of the PCollections tests and callers may watch:
    `entries`, `shards` (ShardResult), `report` (ReportEntry) and `summary`.
    """

    def __init__(self, config: BuildConfig):
        super().__init__()
        self._config = config

    def expand(self, pbegin):
        config = self._config
        prep = preparer(config)
        sources = pbegin | "ListImages" >> ListImages(
            config.inputs, config.extensions, input_list=config.input_list, listing=config.listing
        )
        labeled = sources | "LabelImages" >> LabelImages(prep)
        census = labeled["census"]
        checked = labeled["labeled"] | "CheckImages" >> CheckImages(
            prep, census, read_ahead=config.read_ahead
        )
        entries, reports = checked["entries"], [labeled["report"], checked["report"]]
        if config.dedup:
            unique = entries | "DropDuplicates" >> DropDuplicates()
            entries = unique["entries"]
            reports.append(unique["report"])
        # No split can hold more images than were listed: that bounds the planning buckets.
        most = census | "ListedCount" >> beam.Map(lambda c: c.listed)
        planned = entries | "PlanShards" >> PlanShards(
            config.min_shard_size, config.max_shard_size, config.planning_bucket_records, most
        )
        written = planned["shards"] | "WriteShards" >> WriteShards(
            config.output,
            config.name,
            image_policy(config),
            planned["plan"],
            resume=config.resume,
            read_ahead=config.read_ahead,
        )
        report = (*reports, written["report"]) | "Report" >> beam.Flatten()
        summary = (
            pbegin
            | "Finalize" >> beam.Create([None])
            | "WriteManifest"
            >> beam.Map(
                lambda _, results, report, census: _finalize(
                    results,
                    report,
                    census,
                    config.to_dict(),
                    config.split_names,
                    config.output,
                ),
                results=pvalue.AsList(written["results"]),
                report=pvalue.AsList(report),
                census=pvalue.AsSingleton(census),
            )
        )
        return {
            "entries": entries,
            "shards": written["results"],
            "report": report,
            "summary": summary,
        }


@dataclass(frozen=True)
class BuildResult:
    """What a finished build says about itself: its manifest, and the Beam counters it kept."""

    manifest: dict[str, Any]
    counters: dict[str, int]
    seconds: float

    @property
    def skipped_fraction(self) -> float:
        inputs = self.manifest["inputs"]
        return inputs["skipped"] / inputs["listed"] if inputs["listed"] else 0.0


def build(config: BuildConfig, beam_args: Sequence[str] = ()) -> BuildResult:
    """Checks the config against the world, runs the build and waits for it.

    Args:
        config: the build.
        beam_args: flags for Beam's PipelineOptions (`--runner`, `--direct_num_workers`, ...).

    Raises:
        ConfigError: the config cannot work (before anything is written).
    """
    preflight(config)
    if config.overwrite:
        # A folder half-way through being replaced must not claim to be a finished build.
        discard_manifest(config.output)
    options = PipelineOptions(list(beam_args))
    started = time.monotonic()
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | "ConvertImages" >> ConvertImages(config)
    result = pipeline.run()
    result.wait_until_finish()
    counters = {}
    try:
        query = result.metrics().query(
            beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE)
        )
        for counter in query["counters"]:
            counters[counter.key.metric.name] = (
                counters.get(counter.key.metric.name, 0) + counter.committed
            )
    except (NotImplementedError, AttributeError, KeyError):  # some runners report no metrics
        pass
    return BuildResult(read_manifest(config.output), counters, time.monotonic() - started)
