"""`beam-tfrecord build`: settings from a YAML file and flags (flags win); other flags go to Beam."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from typing import Any

from beam_tfrecord.config import BuildConfig, ConfigError, format_size
from beam_tfrecord.manifest import BuildFailed

__all__ = ["add_arguments", "config_from_args", "run"]

# Flags whose value is a setting of BuildConfig, with the setting's name.
_VALUE_FLAGS = {
    "input": "inputs",
    "input_list": "input_list",
    "listing": "listing",
    "extensions": "extensions",
    "output": "output",
    "name": "name",
    "labels": "labels",
    "classes": "classes",
    "splits": "splits",
    "seed": "seed",
    "min_shard_size": "min_shard_size",
    "max_shard_size": "max_shard_size",
    "validate": "validate",
    "color": "color",
    "max_pixels": "max_pixels",
    "jpeg_quality": "jpeg_quality",
    "background": "background",
    "resize": "resize",
    "encode": "encode",
    "store": "store",
    "split_by": "split_by",
    "max_skipped_fraction": "max_skipped_fraction",
    "planning_bucket_records": "planning_bucket_records",
    "read_ahead": "read_ahead",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.allow_abbrev = False  # an abbreviation could swallow one of Beam's flags
    parser.epilog = (
        "Flags not listed here go to Beam's PipelineOptions (--runner, --direct_num_workers, ...)."
    )
    parser.add_argument("--config", metavar="FILE", help="YAML file of settings; flags override it")
    group = parser.add_argument_group("what to read")
    group.add_argument(
        "--input", action="append", metavar="PATTERN", help="fsspec glob, ** recursive; repeatable"
    )
    group.add_argument(
        "--input-list",
        metavar="FILE",
        help="file of `path` or `path,label` lines (CSV) instead of --input",
    )
    group.add_argument("--extensions", help="comma-separated suffixes to take (case-insensitive)")
    group.add_argument(
        "--listing", choices=["pipeline", "launcher"],
        help="who expands the patterns: the workers, in parallel by folder (default), or this machine",
    )  # fmt: skip
    group = parser.add_argument_group("what to write")
    group.add_argument("--output", metavar="DIR", help="output folder, any fsspec URL")
    group.add_argument(
        "--name", help="dataset name in shard file names (default: the output folder's name)"
    )
    group.add_argument(
        "--labels",
        action="append",
        metavar="dir|regex:PATTERN|none",
        help="where class names come from (default dir); KEY=VALUE is a Dataflow job label",
    )
    group.add_argument("--classes", metavar="a,b,c|@FILE", help="fix the class list and its order")
    group.add_argument(
        "--splits", metavar="NAME=RATIO,...", help="default train=0.8,validation=0.1,test=0.1"
    )
    group.add_argument("--seed", type=int, help="salts split assignment and shuffling (default 0)")
    group.add_argument(
        "--min-shard-size", help="default 100MB (units B, KB, MB, GB, KiB, MiB, GiB)"
    )
    group.add_argument("--max-shard-size", help="default 200MB")
    group.add_argument(
        "--overwrite",
        action="store_true",
        default=None,
        help="replace an earlier build in --output",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        default=None,
        help="keep shards an interrupted run finished",
    )
    group = parser.add_argument_group("image checks")
    group.add_argument("--validate", choices=["decode", "header", "none"], help="default decode")
    group.add_argument(
        "--color",
        choices=["rgb", "gray", "keep"],
        help="channels written images decode to (default rgb)",
    )
    group.add_argument("--max-pixels", type=int, help="refuse larger images (decompression bombs)")
    group.add_argument(
        "--jpeg-quality", "--quality", dest="jpeg_quality", type=int,
        help="JPEG quality of every image the build encodes (default 95)",
    )  # fmt: skip
    group.add_argument("--background", help="colour alpha is flattened onto: #RRGGBB or R,G,B")
    group.add_argument(
        "--no-exif-orientation", dest="exif_orientation", action="store_false", default=None,
        help="do not apply EXIF orientation",
    )  # fmt: skip
    group.add_argument(
        "--max-skipped-fraction", type=float, help="fail when more of the inputs are skipped"
    )
    group = parser.add_argument_group("image transforms")
    group.add_argument(
        "--resize", metavar="N|WxH|exact:WxH[:crop|pad|stretch]",
        help="shorter side to N; or fit within WxH; or exactly WxH (default crop)",
    )  # fmt: skip
    group.add_argument("--encode", choices=["jpeg", "png"], help="write every image in this format")
    group.add_argument(
        "--store", choices=["encoded", "raw"], help="raw: decoded uint8 pixels (for small images)"
    )
    group = parser.add_argument_group("duplicates and leakage")
    group.add_argument(
        "--dedup", action="store_true", default=None,
        help="write one of each set of byte-identical images; report the other copies",
    )  # fmt: skip
    group.add_argument(
        "--split-by", metavar="REGEX",
        help="images whose capture in the relative path is equal share a split (e.g. a patient id)",
    )  # fmt: skip
    group = parser.add_argument_group("throughput")
    group.add_argument(
        "--read-ahead", type=int, metavar="N",
        help="images each worker reads concurrently (default: 64 from object stores, 16 from disk)",
    )  # fmt: skip
    group.add_argument("--planning-bucket-records", type=int, help=argparse.SUPPRESS)
    group = parser.add_argument_group("running")
    group.add_argument(
        "--no-wait", dest="wait", action="store_false",
        help="return once the runner has the job (print its id; verify the output once it is done)",
    )  # fmt: skip


# Dataflow's job labels share the flag (`--labels KEY=VALUE`; the Airflow Beam provider adds
# `--labels=airflow-version=...` to every Dataflow launch): those go to Beam. No label rule
# looks like one: rules are `dir`, `none` or start with `regex:`.
_JOB_LABEL_RE = re.compile(r"^[a-z][a-z0-9_-]*=")


def split_labels(values: Sequence[str] | None) -> tuple[str | None, list[str]]:
    """The label rule (the last one given) and the Dataflow job labels among `--labels` values."""
    rules = [v for v in values or () if v.startswith("regex:") or not _JOB_LABEL_RE.match(v)]
    job_labels = [v for v in values or () if v not in rules]
    return (rules[-1] if rules else None), job_labels


def _load_yaml(path: str) -> dict[str, Any]:
    import fsspec
    import yaml

    try:
        with fsspec.open(path, "r", encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError("config", f"{path!r} does not exist") from None
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError("config", f"{path!r} cannot be read: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            "config", f"{path!r} must hold a mapping of settings, not {type(data).__name__}"
        )
    return data


def config_from_args(args: argparse.Namespace) -> BuildConfig:
    """Merges defaults, the YAML file and the flags (in that order of precedence) into a config."""
    settings: dict[str, Any] = _load_yaml(args.config) if args.config else {}
    for flag, setting in _VALUE_FLAGS.items():
        value = getattr(args, flag)
        if flag == "labels" and isinstance(value, list):
            value = split_labels(value)[0]
        if value is not None:
            settings.pop(setting, None)
            settings.pop(flag, None)
            settings[setting] = value
    for flag in ("overwrite", "resume", "exif_orientation", "dedup"):
        if getattr(args, flag) is not None:
            settings[flag] = getattr(args, flag)
    return BuildConfig.from_settings(settings)


def _print_summary(result, config: BuildConfig, out=None) -> None:
    out = out or sys.stdout
    manifest = result.manifest
    inputs = manifest["inputs"]
    print(
        f"Built {manifest['name']!r} in {config.output}: {inputs['written']} of {inputs['listed']} images "
        f"in {result.seconds:.1f} s",
        file=out,
    )
    width = max((len(name) for name in manifest["splits"]), default=5)
    for name, split in manifest["splits"].items():
        shards = split["shards"]
        print(
            f"  {name:<{width}}  {split['examples']:>9} examples  {shards:>5} shard{'s' if shards != 1 else ' '}"
            f"  {format_size(split['bytes']):>10}",
            file=out,
        )
    print(f"  classes: {len(manifest['classes'])} (labels.txt)", file=out)
    if inputs["modified"]:
        print(
            f"  {inputs['modified']} images were re-encoded so TensorFlow decodes them (report.jsonl)",
            file=out,
        )
    for name, split in manifest["splits"].items():
        if not split["examples"]:
            print(
                f"WARNING: split {name!r} received no images; it is left out of TFDS's "
                "dataset_info.json",
                file=out,
            )
    if inputs["skipped"]:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in inputs["skipped_by_reason"].items())
        print(
            f"WARNING: {inputs['skipped']} of {inputs['listed']} inputs were NOT written ({reasons}); "
            f"see {config.output.rstrip('/')}/report.jsonl",
            file=out,
        )


def _print_submitted(submitted, config: BuildConfig, out=None) -> None:
    out = out or sys.stdout
    graph = f"{submitted.transforms} transforms, a {format_size(submitted.graph_bytes)} graph"
    if submitted.dry_run:
        print(
            f"Dry run: {submitted.runner} built the job for {config.name!r} ({graph}) and did not "
            f"submit it; nothing was written to {config.output}",
            file=out,
        )
        return
    job = f"job {submitted.job_id}" if submitted.job_id else "the job"
    print(
        f"Submitted {config.name!r} to {submitted.runner}: {job} ({graph}), {submitted.state}.\n"
        f"The build is done when {config.output.rstrip('/')}/manifest.json exists; then check it "
        f"with:\n  beam-tfrecord verify {config.output}",
        file=out,
    )


def run(args: argparse.Namespace, extra: Sequence[str]) -> int:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("beam_tfrecord").setLevel(logging.INFO)
    # Beam's "Created job with id: [...]" line: schedulers (Airflow's Beam provider) find the
    # Dataflow job by it.
    logging.getLogger("apache_beam.runners.dataflow.internal.apiclient").setLevel(logging.INFO)
    prog = "beam-tfrecord build"
    extra = [*extra, *(f"--labels={label}" for label in split_labels(args.labels)[1])]
    try:
        config = config_from_args(args)
        from beam_tfrecord.pipeline import (  # Beam is imported only once the config is sound
            SubmittedBuild,
            build,
        )

        result = build(config, extra, wait=args.wait)
    except ConfigError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except BuildFailed as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    if isinstance(result, SubmittedBuild):  # not finished: there is no manifest to read yet
        if args.wait and not result.dry_run and result.state != "TEMPLATE_WRITTEN":
            # Waited for, and ended otherwise than done (cancelled, say).
            print(f"{prog}: error: the job ended {result.state}", file=sys.stderr)
            return 1
        _print_submitted(result, config)
        return 0
    _print_summary(result, config)
    unaccounted = result.manifest["inputs"].get("unaccounted", 0)
    if unaccounted:
        print(
            f"{prog}: error: {unaccounted} of the {result.manifest['inputs']['listed']} listed inputs were "
            "neither written nor reported: the runner lost them between stages. The shards are "
            "incomplete; build again (the DirectRunner's in_memory mode does not lose data)",
            file=sys.stderr,
        )
        return 1
    if (
        config.max_skipped_fraction is not None
        and result.skipped_fraction > config.max_skipped_fraction
    ):
        print(
            f"{prog}: error: {result.skipped_fraction:.1%} of the inputs were skipped, more than "
            f"--max-skipped-fraction {config.max_skipped_fraction:g}",
            file=sys.stderr,
        )
        return 1
    return 0
