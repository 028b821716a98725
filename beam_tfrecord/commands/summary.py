"""What `beam-tfrecord build` prints of a build: the summary of a finished one, with its warnings
and notes, and the job of one submitted."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from beam_tfrecord import build_warnings
from beam_tfrecord.config import BuildConfig, folder_renamed, format_size
from beam_tfrecord.wording import count

__all__ = ["print_resumed", "print_submitted", "print_summary"]


def print_summary(
    result,
    config: BuildConfig,
    out=None,
    seconds: float | None = None,
    finished_before: int | Sequence[str] | None = None,
) -> None:
    """The summary of a finished build; `finished_before` is the finished shards the output
    held when a --resume build started, by name or counted (None: not resuming, or not known)."""
    out = out or sys.stdout
    manifest = result.manifest
    inputs = manifest["inputs"]
    seconds = result.seconds if seconds is None else seconds
    print(
        f"Built {manifest['name']!r} in {config.output}: {inputs['written']} of "
        f"{count(inputs['listed'], 'image')} in {seconds:.1f} s",
        file=out,
    )
    width = max((len(name) for name in manifest["splits"]), default=5)
    for name, split in manifest["splits"].items():
        examples, shards = split["examples"], split["shards"]
        print(
            f"  {name:<{width}}  {examples:>9} example{'s' if examples != 1 else ' '}"
            f"  {shards:>5} shard{'s' if shards != 1 else ' '}  {format_size(split['bytes']):>10}",
            file=out,
        )
    if config.labels == "none":  # its labels.txt is empty: there is nothing to point at
        print("  classes: none (--labels none)", file=out)
    else:
        print(f"  classes: {len(manifest['classes'])} (labels.txt)", file=out)
    if config.resume and finished_before is not None:
        _print_resume_outcome(result, config, finished_before, out)
    if inputs["modified"]:
        _print_modified(inputs["modified"], config, out)
    counters = getattr(result, "counters", None) or {}
    _note_renamed_folder(config, out)
    _warn(build_warnings.out_of_bounds(manifest.get("shards", ()), config), out)
    _warn([build_warnings.folder_class(manifest["classes"], config)], out)
    _note_other_extensions(counters, config, out)
    _warn([build_warnings.split_by_unmatched(counters, config)], out)
    _warn([build_warnings.duplicates_labelled_apart(counters)], out)
    _note_split_by(counters, config, out)
    if config.image.validate in ("header", "none"):
        # Documented, but a user who wrote a truncated download without a word should hear it.
        checked = "by header only" if config.image.validate == "header" else "not at all"
        print(
            f"NOTE: images were checked {checked} (--validate {config.image.validate}): "
            "truncated or corrupt image data is not detected; --validate decode finds it",
            file=out,
        )
    _warn(build_warnings.empty_splits(manifest), out)
    _warn(build_warnings.empty_classes(manifest), out)
    _warn([build_warnings.skipped_inputs(manifest, config.output)], out)


def _warn(warnings, out) -> None:
    """Each warning (`build_warnings`) on a line of its own; None for none."""
    for warning in warnings:
        if warning:
            print(f"WARNING: {warning}", file=out)


def _print_resume_outcome(
    result, config: BuildConfig, finished_before: int | Sequence[str], out
) -> None:
    """What --resume did with the finished shards the output held: kept, replaced, or removed
    as another plan's."""
    stale = 0
    if not isinstance(finished_before, int):
        # Shards under names this build does not write (another seed, split or size moved
        # its plan) were neither kept nor replaced: the build removed them as stale.
        planned = {s["file"] for s in result.manifest.get("shards", ())}
        stale = sum(1 for name in finished_before if name not in planned)
        finished_before = len(finished_before) - stale
    if finished_before or not stale:
        print_resumed(result.counters, finished_before, config.output, out)
    if stale:
        # All of them stale: "the output held no finished shards" would contradict this.
        kept_none = "" if finished_before else "kept none: "
        print(
            f"  resumed: {kept_none}removed {count(stale, 'finished shard')} of another plan, under "
            "names this build does not write (seed, splits or shard sizes changed, or "
            "left by another build)",
            file=out,
        )


def _print_modified(modified: int, config: BuildConfig, out) -> None:
    """One line: how many images were re-encoded, and why."""
    asked = [
        flag
        for flag, given in (
            ("--resize", config.image.resize),
            ("--encode", config.image.encode),
            ("--store raw", config.image.store != "encoded"),
        )
        if given
    ]
    why = (
        f"as {'/'.join(asked)} asked, or so that TensorFlow decodes "
        f"{'it' if modified == 1 else 'them'}"
        if asked
        else f"so TensorFlow decodes {'it' if modified == 1 else 'them'}"
    )
    print(
        f"  {count(modified, 'image')} {'was' if modified == 1 else 'were'} re-encoded "
        f"{why} (report.jsonl)",
        file=out,
    )


def _note_renamed_folder(config: BuildConfig, out) -> None:
    """One line when the build took its name from its output folder with characters replaced:
    its shards' names then differ from the folder's, which nothing else said."""
    folder = folder_renamed(config)
    if folder is not None:
        print(
            f"NOTE: the dataset is named {config.name!r} after its output folder {folder!r}, "
            "with '_' for each character a name cannot hold; --name NAME names it otherwise",
            file=out,
        )


def _note_other_extensions(counters: dict[str, int], config: BuildConfig, out) -> None:
    """One line counting the images of other kinds --extensions left out of the listing: they
    are not inputs (not in report.jsonl), but a user leaving a folder's PNGs out should know."""
    from beam_tfrecord.beam.transforms import OTHER_EXTENSIONS

    by_suffix = {
        name[len(OTHER_EXTENSIONS) :]: n
        for name, n in sorted(counters.items())
        if name.startswith(OTHER_EXTENSIONS) and n
    }
    if by_suffix:
        total = sum(by_suffix.values())
        kinds = ", ".join(f"{suffix}: {n}" for suffix, n in by_suffix.items())
        print(
            f"NOTE: {count(total, 'image file')} of other kinds {'was' if total == 1 else 'were'} "
            f"not taken ({kinds}): --extensions "
            f"{','.join(e.lstrip('.') for e in config.extensions)} leaves them out",
            file=out,
        )


def _note_split_by(counters: dict[str, int], config: BuildConfig, out) -> None:
    """How many images --split-by's pattern put in groups, where it left some alone (one that
    matched none is a warning: `build_warnings.split_by_unmatched`)."""
    if config.split_by is None:
        return
    from beam_tfrecord.beam.transforms import SPLIT_BY_ALONE, SPLIT_BY_GROUPED

    alone, grouped = counters.get(SPLIT_BY_ALONE, 0), counters.get(SPLIT_BY_GROUPED, 0)
    if not alone or not grouped:
        return
    planned = count(alone + grouped, "image")
    rest = "the other was split on its own" if alone == 1 else f"the other {alone} were"
    print(
        f"NOTE: --split-by '{config.split_by}' matched {grouped} of the {planned} planned; "
        + (rest if alone == 1 else f"{rest} each split on their own"),
        file=out,
    )


def print_resumed(counters: dict[str, int], found: int, output: str, out) -> None:
    """One line: how many of the finished shards --resume kept, and why not the others."""
    if not found:
        print("  resumed: the output held no finished shards to keep", file=out)
        return
    if not counters:  # the runner reported no metrics at all
        print(
            f"  resumed: {count(found, 'finished shard')} found; the runner did not say how "
            "many were kept",
            file=out,
        )
        return
    kept = min(counters.get("shards_kept", 0), found)
    if kept == found:
        print(f"  resumed: kept {kept} of {count(found, 'finished shard')}", file=out)
        return
    # A shard is kept only if it holds exactly what this build plans for it: another seed,
    # split, size bound, image setting or input moves images between shards; other class ids
    # or image settings change its records; an image it could not read is tried again.
    one = found - kept == 1
    others = f"the other {found - kept}" if kept else ("it" if one else "they")
    print(
        f"WARNING: --resume kept {kept or 'none'} of the {count(found, 'finished shard')} in "
        f"{output}: {others} did not match this build's plan (settings or inputs changed "
        f"since {'it was' if one else 'they were'} written, or {'it was' if one else 'one was'} "
        "damaged or held an image that could not be read, to be tried again) and "
        f"{'was' if one else 'were'} replaced; the build's log names {'it' if one else 'each'}, "
        "with why",
        file=out,
    )


def print_submitted(submitted, config: BuildConfig, out=None, template: str | None = None) -> None:
    out = out or sys.stdout
    _print_job(submitted, config, out, template)
    _note_renamed_folder(config, out)


def _print_job(submitted, config: BuildConfig, out, template: str | None) -> None:
    graph = f"{submitted.transforms} transforms, a {format_size(submitted.graph_bytes)} graph"
    if submitted.state == "TEMPLATE_WRITTEN":
        print(
            f"Wrote the job for {config.name!r} ({graph}) as a template to "
            f"{template or 'its --template_location'}; nothing was submitted. A job launched "
            f"from it is done when {config.output.rstrip('/')}/manifest.json exists; then check "
            f"it with:\n  beam-tfrecord verify {config.output}",
            file=out,
        )
        return
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
