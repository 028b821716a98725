"""What a finished build warns of, each warning worded once: the command prints them in its
summary, and `build` logs them for a Python caller, who has no summary."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from beam_tfrecord.config import BuildConfig, format_size
from beam_tfrecord.wording import count

__all__ = [
    "duplicates_labelled_apart",
    "empty_classes",
    "empty_splits",
    "folder_class",
    "of_build",
    "out_of_bounds",
    "skipped_inputs",
    "split_by_unmatched",
]


def of_build(manifest: Mapping, counters: Mapping[str, int], config: BuildConfig) -> list[str]:
    """Every warning of a finished build, as the summary prints them (after `WARNING: `), in its
    order; `counters`, the build's Beam counters (empty where the runner reports none)."""
    warnings = out_of_bounds(manifest.get("shards", ()), config)
    warnings += [folder_class(manifest["classes"], config), split_by_unmatched(counters, config)]
    warnings.append(duplicates_labelled_apart(counters))
    warnings += empty_splits(manifest) + empty_classes(manifest)
    warnings.append(skipped_inputs(manifest, config.output))
    return [warning for warning in warnings if warning]


def skipped_inputs(manifest: Mapping, output: str) -> str | None:
    """The inputs not written, by reason, and where the report names each; None for none."""
    inputs = manifest["inputs"]
    skipped = inputs["skipped"]
    if not skipped:
        return None
    reasons = ", ".join(f"{reason}: {n}" for reason, n in inputs["skipped_by_reason"].items())
    return (
        f"{skipped} of {count(inputs['listed'], 'input')} "
        f"{'was' if skipped == 1 else 'were'} NOT written ({reasons}); "
        f"see {output.rstrip('/')}/report.jsonl"
    )


def empty_splits(manifest: Mapping) -> list[str]:
    """A warning for each split that received no image."""
    return [
        f"split {name!r} received no images; it is left out of TFDS's dataset_info.json"
        for name, split in manifest["splits"].items()
        if not split["examples"]
    ]


def empty_classes(manifest: Mapping) -> list[str]:
    """Warnings for the classes of labels.txt no image was written for, when others got some."""
    written = {c for split in manifest["splits"].values() for c in split.get("class_counts", {})}
    empty = [name for name in manifest["classes"] if name not in written]
    if not (empty and written):
        return []
    # Its ids stay as listed (labels.txt), so a class whose images come back later moves no
    # other class; but a model trained on this split has never seen it.
    given = manifest.get("given_classes") or {}
    unlabelled = set(given.get("not_found", ()))
    found = [
        _classes(
            [name for name in empty if name in unlabelled],
            "of --classes {has} no input labelled with {it}, so no image",
            lambda name: _meant(name, given.get("meant", {})),
        ),
        _classes(
            [name for name in empty if name not in unlabelled],
            "in labels.txt got no image written",
            lambda name: "",
            after=" ({their} inputs are in report.jsonl)",
        ),
    ]
    return [warning for warning in found if warning]


def duplicates_labelled_apart(counters: Mapping[str, int]) -> str | None:
    """Copies --dedup left out that were labelled otherwise than the copy written (which keeps
    its own label): a sign of mislabelled images, said only in the report otherwise."""
    from beam_tfrecord.beam.transforms import DUPLICATES_LABELLED_APART

    apart = counters.get(DUPLICATES_LABELLED_APART, 0)
    if not apart:
        return None
    return (
        f"{count(apart, 'duplicate')} left out by --dedup had another label than the copy "
        "written, which keeps its own (report.jsonl, reason duplicate, says which)"
    )


def split_by_unmatched(counters: Mapping[str, int], config: BuildConfig) -> str | None:
    """A --split-by pattern that matched none of the images planned (a typo, most often): each
    was split on its own, with no other sign. None where it matched any, or was not given."""
    if config.split_by is None:
        return None
    from beam_tfrecord.beam.transforms import SPLIT_BY_ALONE, SPLIT_BY_GROUPED

    alone, grouped = counters.get(SPLIT_BY_ALONE, 0), counters.get(SPLIT_BY_GROUPED, 0)
    if not alone or grouped:
        return None
    return (
        f"--split-by '{config.split_by}' matched none of the {count(alone, 'image')} planned: "
        "each was split on its own, as without --split-by"
    )


def folder_class(classes: Sequence[str], config: BuildConfig) -> str | None:
    """When `--labels dir` gave every image the name of the --input folder it is right in: a
    flat folder, whose classes are most often in the file names.

    A warning, not a refusal: the build is sound, and a one-class build of a folder given as
    --input (positives only, a class built alone) is meant so; the line shows the fix.
    """
    if config.labels != "dir" or config.classes is not None or len(classes) != 1:
        return None
    from beam_tfrecord.listing import pattern_base

    (name,) = classes
    folders = {posixpath.basename(pattern_base(p).rstrip("/")) for p in config.inputs}
    if name not in folders:
        return None
    return (
        f"the images are right in the --input folder {name!r}, so --labels dir "
        f"(the default) gave them all one class, {name!r}; if the class is in the file "
        "names (apple01.jpg), build with --labels 'regex:^([a-z]+)'"
    )


def out_of_bounds(shards, config: BuildConfig) -> list[str]:
    """A warning for each reason shards are outside the size bounds, naming up to five."""
    from beam_tfrecord.measurement import measures
    from beam_tfrecord.shard_bounds import shards_out_of_bounds

    estimated = config.transformed_sizes == "estimate" and measures(config.image, "measure")
    low, high = config.min_shard_size, config.max_shard_size
    by_why: dict[str, list] = {}
    for shard in shards_out_of_bounds(shards, low, high, estimated=estimated):
        by_why.setdefault(shard.why, []).append(shard)
    warnings = []
    for why, found in by_why.items():
        named = ", ".join(shard.describe(low, high) for shard in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        warnings.append(
            f"{count(len(found), 'shard')} outside --min-shard-size "
            f"{format_size(low)} .. --max-shard-size {format_size(high)}, {why}: {named}{more}"
        )
    return warnings


def _meant(name: str, meant_by: Mapping[str, str]) -> str:
    """For a --classes name no input has: the label its inputs have, if it is a typo of one."""
    meant = meant_by.get(name)
    if meant is None:
        return ""
    return f" (did you mean {meant!r}? its inputs were skipped as unknown_class)"


def _classes(names, what: str, note, after: str = "") -> str | None:
    """One warning naming up to five classes `what` says of, each with its `note`."""
    if not names:
        return None
    one = len(names) == 1
    shown = ", ".join(f"{name!r}{note(name)}" for name in names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    words = {"has": "has" if one else "have", "it": "it" if one else "them"}
    return (
        f"{count(len(names), 'class', 'classes')} {what.format(**words)}: "
        f"{shown}{more}{after.format(their='its' if one else 'their')}"
    )
