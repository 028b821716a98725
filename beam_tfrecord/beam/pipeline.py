"""The image-to-TFRecord build: the pipeline graph, the checks before it, and the run around it."""

from __future__ import annotations

import errno
import functools
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    TestOptions,
)
from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
from apache_beam.runners.runner import PipelineRunner, PipelineState

from beam_tfrecord import build_warnings
from beam_tfrecord.beam import callers_logging_kept
from beam_tfrecord.beam.compat import (
    BuildOptions,
    dofn_specs_remembered,
    job_id_of,
    job_of,
    raised_in,
    refused_job,
    run_on_fn_api_runner,
    without_step_names,
)
from beam_tfrecord.beam.measuring import MeasureImages, discard_kept_records
from beam_tfrecord.beam.options import check_beam_args, check_job_service, runner_name
from beam_tfrecord.beam.transforms import (
    METRICS_NAMESPACE,
    DropDuplicates,
    HashImages,
    ListImages,
    PlanImages,
    PlanShards,
)
from beam_tfrecord.beam.writing import WriteReport, WriteShards
from beam_tfrecord.build_folder import finished_shard_names
from beam_tfrecord.checks import preflight
from beam_tfrecord.compat import BEAM_TRANSFORM_ERROR_LOGGER
from beam_tfrecord.config import COMMAND_LINE, BuildConfig, ConfigError, for_the_caller
from beam_tfrecord.early_start import (
    checked_before_beam,
    checking_here,
    head_start,
    taken_before_beam,
)
from beam_tfrecord.entries import ShardResult
from beam_tfrecord.listing import InputListError, local_bytes_reach
from beam_tfrecord.locations import has_protocol, is_local_url, is_store_url, reached_alike
from beam_tfrecord.manifest import (
    REPORT_FILE,
    build_manifest,
    forget_written_here,
    manifest_written_here,
    read_manifest,
    remove_files,
    stale_files,
    withdraw_build,
    withdrawn_failure,
    write_build_files,
)
from beam_tfrecord.measurement import measures
from beam_tfrecord.output_lock import is_lockable, release_output
from beam_tfrecord.planning import preparer
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.remote import read_depth
from beam_tfrecord.report import PARTS_DIR, compose_report, remove_parts, shard_report_name
from beam_tfrecord.settings import in_python_names
from beam_tfrecord.settings_record import start_output
from beam_tfrecord.shard_processes import (
    PROCESSES_MIN_BYTES,
    PROCESSES_MIN_IMAGES,
    discard_started,
    settings_travel,
    start_early,
)
from beam_tfrecord.spool import spooling
from beam_tfrecord.storage import is_store_refusal, store_reason
from beam_tfrecord.tfds_metadata import tfds_files
from beam_tfrecord.verdict import BuildFailed, Counts, Verdict, decide, skipped_fraction
from beam_tfrecord.wording import count

__all__ = [
    "BuildResult",
    "ConvertImages",
    "LocalRunner",
    "SubmittedBuild",
    "build",
    "preparer",
    "read_depth",
]

_LOG = logging.getLogger(__name__)

T = TypeVar("T")

_MAIN_SESSION_FLAGS = ("--save_main_session", "--no_save_main_session")


class _ClassCountsFn(beam.CombineFn):
    """Per split, the records of each class the shards hold, summed on the workers."""

    def create_accumulator(self) -> dict[str, Counter]:
        return {}

    def add_input(self, accumulator: dict[str, Counter], result: ShardResult):
        accumulator.setdefault(result.split, Counter()).update(dict(result.class_counts))
        return accumulator

    def merge_accumulators(self, accumulators) -> dict[str, Counter]:
        merged: dict[str, Counter] = {}
        for accumulator in accumulators:
            for split, counts in accumulator.items():
                merged.setdefault(split, Counter()).update(counts)
        return merged

    def extract_output(self, accumulator) -> dict[str, dict[str, int]]:
        return {split: dict(counts) for split, counts in accumulator.items()}


def _finalize(results, class_counts, tally, parts, census, config_dict, split_names, output_dir):
    """Runs once, after every shard and report part is written: metadata files last, then stale
    files go. Holds one small ShardResult per shard (its class counts come combined, per split)
    and one number per report part, never a report line."""
    manifest = build_manifest(
        config=config_dict,
        split_names=split_names,
        classes=census.classes,
        shards=results,
        report=tally,
        listed=census.listed,
        class_counts=class_counts,
        given_classes=census.given_classes() if config_dict.get("classes") is not None else None,
    )
    composed = sum(lines for _, lines in parts)
    if composed != tally.lines:  # the runner lost (or repeated) report lines between stages
        raise RuntimeError(
            f"the report's parts hold {composed} lines, but {tally.lines} were reported"
        )
    compose_report(output_dir, (part for part, _ in parts), REPORT_FILE)
    shard_files = [s["file"] for s in manifest["shards"]]
    shard_files += [s["index_file"] for s in manifest["shards"] if s["index_file"]]
    shard_files += [shard_report_name(s["file"]) for s in manifest["shards"]]
    missing = _missing_classes(manifest, config_dict)
    verdict = decide(
        Counts.of(manifest["inputs"]), config_dict.get("max_skipped_fraction"), missing
    )
    if not verdict.published:
        # Decided here, not by the command line, so that no runner publishes such a build,
        # which would pass for complete wherever manifest.json is what says a build is done.
        # Its finished shards stay, as an interrupted build's do: --resume publishes them. The
        # verdict goes to the launcher as a metric, which says why without guessing.
        beam.metrics.Metrics.string_set(METRICS_NAMESPACE, _VERDICT).add(verdict.to_json())
        for name in missing:
            beam.metrics.Metrics.string_set(METRICS_NAMESPACE, _CLASSES_NOT_FOUND).add(name)
        remove_parts(output_dir)
        withdraw_build(output_dir, keep=shard_files if verdict.keeps_shards else ())
        return manifest["inputs"]
    # TFDS's files describe the same build; they go before manifest.json, which comes last.
    # With them, at once (on a store each is a round trip, and none waits for another): the
    # report's parts go, and the files of earlier builds are looked for. Those go once the
    # manifest is written.
    tfds = tfds_files(manifest)
    _, stale = write_build_files(
        output_dir,
        manifest,
        census.classes,
        extra=tfds,
        meanwhile=[
            functools.partial(remove_parts, output_dir),
            # (The parts' folder is remove_parts' to remove.)
            functools.partial(stale_files, output_dir, [*tfds, *shard_files, PARTS_DIR]),
        ],
    )
    removed = remove_files(output_dir, stale)
    if removed:
        # Housekeeping, shown with -v: a build is quiet by default.
        _LOG.debug(
            "removed %s of an earlier build: %s",
            count(len(removed), "stale file"),
            ", ".join(removed[:5]) + (f" and {len(removed) - 5} more" if len(removed) > 5 else ""),
        )
    return manifest["inputs"]


# The metric naming the --classes names no input has, in a build withheld for them.
_CLASSES_NOT_FOUND = "classes_not_found"
# The metric holding a withdrawn build's verdict (`Verdict.to_json`).
_VERDICT = "verdict"


def _missing_classes(manifest: dict, config_dict: dict) -> list[str]:
    """The --classes names no input is labelled with, when the build may not publish them."""
    if config_dict.get("allow_missing_classes"):
        return []
    return list((manifest.get("given_classes") or {}).get("not_found", ()))


class ConvertImages(beam.PTransform):
    """The whole build: list, plan, write, then the manifest, labels and report.

    Applied to a pipeline's root. Returns a dict of the PCollections tests and callers may watch:
    `entries`, `shards` (ShardResult), `report` (ReportEntry) and `summary`.
    """

    def __init__(self, config: BuildConfig, shard_processes: int = 0):
        super().__init__()
        self._config = config
        self._shard_processes = shard_processes

    def expand(self, pbegin):
        """The pipeline graph, in one piece: its steps read top to bottom as the build runs
        them, each a line or a few, with why it is there."""
        config = self._config
        prep = preparer(config)
        read_ahead = read_depth(config)
        # Images of this machine are read by the shard processes before their shards are
        # written too, where a build reads them for their hashes or measures them (an object's
        # read waits on its GET: that keeps the read-ahead of this process's event loop); and
        # they list its folders, while this process labels and plans what they found.
        here = self._shard_processes > 1 and not _reads_a_store(config)
        listed = pbegin | "ListImages" >> ListImages(
            config.inputs,
            config.extensions,
            input_list=config.input_list,
            listing=config.listing,
            bucket_records=config.planning_bucket_records,
            in_processes=here,
        )
        planned_images = listed["sources"] | "PlanImages" >> PlanImages(prep, listed.get("report"))
        census = planned_images["census"]
        entries, reports = planned_images["entries"], [planned_images["report"]]
        # No split can hold more images than were listed: that bounds the planning buckets.
        most = census | "ListedCount" >> beam.Map(lambda c: c.listed)
        if config.dedup:
            # The one setting that reads images before planning: content hashes. Copies meet
            # by their content, in chunks of one range of hashes.
            hashed = entries | "HashImages" >> HashImages(read_ahead=read_ahead, in_processes=here)
            unique = hashed["entries"] | "DropDuplicates" >> DropDuplicates(
                config.planning_bucket_records, most
            )
            entries = unique["entries"]
            reports += [hashed["report"], unique["report"]]
        if measures(config.image, config.transformed_sizes):
            # Transformed images are planned on their records' real sizes, not a model's guess.
            measured = entries | "MeasureImages" >> MeasureImages(
                config.image,
                config.max_shard_size,
                read_ahead=read_ahead,
                keep_records=here,  # and the shards written here copy the records it made
            )
            entries = measured["entries"]
            reports.append(measured["report"])
        planned = entries | "PlanShards" >> PlanShards(
            config.min_shard_size, config.max_shard_size, config.planning_bucket_records, most
        )
        written = planned["shards"] | "WriteShards" >> WriteShards(
            config.output,
            config.name,
            config.image,
            planned["plan"],
            max_record_size=config.max_shard_size,
            resume=config.resume,
            read_ahead=read_ahead,
            processes=self._shard_processes,
            # A shard on a store waits on round trips more than on the CPU: two written at once
            # take about the time of one, however small the build.
            processes_min_bytes=0 if config.reaches_a_store() else None,
            # Without processes (one core), two shards at once: one's last upload and commit
            # overlap the other's reads.
            shards_at_once=2 if config.reaches_a_store() else 1,
        )
        report = (*reports, written["report"]) | "Report" >> beam.Flatten()
        # The report's lines go to files from the workers; the manifest gets only their counts.
        written_report = report | "WriteReport" >> WriteReport(
            config.output, config.planning_bucket_records
        )
        # A shard's class counts (one per class it holds) stay on the workers: the finalize
        # step gets them summed per split, and one small result per shard.
        class_counts = written["results"] | "ClassCounts" >> beam.CombineGlobally(_ClassCountsFn())
        results = written["results"] | "ShardFiles" >> beam.Map(
            lambda r: replace(r, class_counts=())
        )
        summary = (
            pbegin
            | "Finalize" >> beam.Create([None])
            | "WriteManifest"
            >> beam.Map(
                lambda _, results, class_counts, tally, parts, census: _finalize(
                    results,
                    class_counts,
                    tally,
                    parts,
                    census,
                    config.to_dict(),
                    config.split_names,
                    config.output,
                ),
                results=pvalue.AsList(results),
                class_counts=pvalue.AsSingleton(class_counts),
                tally=pvalue.AsSingleton(written_report["tally"]),
                parts=pvalue.AsList(written_report["parts"]),
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
    """What a finished build says about itself: its manifest, and the Beam counters it kept.

    Attributes:
        manifest: the dict `manifest.json` holds (its reference lists every field): the
            inputs listed, written and skipped, each split's examples and shards, the classes.
        counters: the build's Beam counters by name (`images_listed`, `images_written`,
            `shards_kept` of a `resume=True` build...); empty where the runner reports none.
        seconds: how long the build ran, from its checks to its manifest.
    """

    manifest: dict[str, Any]
    counters: dict[str, int]
    seconds: float

    @property
    def skipped_fraction(self) -> float:
        """The share of the listed inputs the build skipped (report.jsonl names each), 0 when
        none was listed: what `max_skipped_fraction` bounds."""
        return skipped_fraction(self.manifest["inputs"])


@dataclass(frozen=True)
class SubmittedBuild:
    """A build whose job was built, and submitted unless a dry run, but that has not finished.

    Nothing of it can be known yet but the job: its manifest is written when the job ends.

    Attributes:
        runner: the runner the job went to (`DataflowRunner`).
        state: the job's state when `build` returned (`RUNNING`, `PENDING`...), or
            `TEMPLATE_WRITTEN` for a job written to `--template_location`, not submitted.
        job_id: the runner's id of the job, if it gives one; None for a dry run.
        dry_run: the job was built and not submitted (`--dry_run=True`).
        transforms: transforms in the job's pipeline graph.
        graph_bytes: the serialized pipeline graph's size, as the runner receives it.
        job: the runner's own object for the job, where it keeps one.
    """

    runner: str
    state: str
    job_id: str | None
    dry_run: bool
    transforms: int  # transforms in the job's pipeline graph
    graph_bytes: int  # the serialized pipeline graph, as a runner receives it
    job: Any = field(default=None, repr=False, compare=False)  # the runner's own, if it keeps one


def _runner_name(options: PipelineOptions) -> str:
    return runner_name(options.view_as(StandardOptions)) or "DirectRunner"


# The build's steps, by the transform a failure names ("[while running 'ConvertImages/...']").
_STEPS = (
    ("ListImages", "listing the inputs"),
    ("HashImages", "reading the images for --dedup"),
    ("MeasureImages", "measuring the transformed images"),
    ("WriteShards", "writing the shards"),
    ("WriteReport", "writing the report"),
    ("WriteManifest", "writing the manifest"),
)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, then what it was raised from or while handling, and so on: at most 10 deep.

    Beam wraps what a transform raised in a RuntimeError naming the transform; the error itself
    is further down the chain.
    """
    seen: BaseException | None = error
    for _ in range(10):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _io_failure(error: BaseException, output: str) -> BuildFailed | None:
    """A run that stopped on a file or object it could not read or write (after the store
    clients' own retries), as the one line a person needs: which step, the store's reason, and
    that the finished shards stay. None for any other failure, which is a bug to show whole.
    """
    step = None
    for seen in _chain(error):
        if isinstance(seen, (KeyboardInterrupt, SystemExit)):
            return None
        step = step or next((what for name, what in _STEPS if raised_in(seen, name)), None)
        if is_store_refusal(seen):
            reason = without_step_names(store_reason(seen))
            message = f"{step or 'the build'} failed: {reason}"
            fix = _lasting_fix(seen)
            if fix and step in _BEFORE_WRITING:
                # No shard was written, and the same run fails the same way until it is fixed:
                # --resume would go on from nothing.
                return BuildFailed(f"{message}; {fix}, then build again (nothing was written)")
            if fix:
                message += f"; {fix}, then go on"
            if step is None and finished_shard_names(output) == []:
                # The runner itself, before any step: a Flink or Spark runner fetching its job
                # server offline. There is nothing to go on from.
                return BuildFailed(f"{message}; nothing was written")
            if step in _BEFORE_WRITING:
                # A store's passing trouble (a listing that timed out) before any shard: the
                # same build again may pass, and there are no finished shards to speak of.
                return BuildFailed(f"{message}; nothing was written", retry=True)
            return BuildFailed(
                f"{message}; the shards it finished are kept in {output}",
                resumable=True,
                retry=True,
            )
    return None


# The steps that run before any shard is written.
_BEFORE_WRITING = (
    "listing the inputs",
    "reading the images for --dedup",
    "measuring the transformed images",
)


def _lasting_fix(error: BaseException) -> str | None:
    """What to fix for an error no rerun clears by itself (a permission, a path that is not
    there, a full disk); None for one that may pass (a store's trouble)."""
    if isinstance(error, PermissionError):
        return "give the build access to that path"
    if isinstance(error, (FileNotFoundError, NotADirectoryError)):
        return "restore the path or correct the setting that names it"
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space on the disk it writes to"
    return None


def _interruption(error: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or SystemExit that Beam's error for a transform wraps, if any."""
    return next((e for e in _chain(error) if isinstance(e, (KeyboardInterrupt, SystemExit))), None)


class _NoInterruptTracebacks(logging.Filter):
    """Drops Beam's ERROR line and traceback for a transform an interrupt stopped."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        return not (kind is not None and issubclass(kind, (KeyboardInterrupt, SystemExit)))


@contextmanager
def _interrupts_unlogged() -> Iterator[None]:
    """While a build runs, an interrupt is not logged by Beam as a transform's error: the
    caller gets the interrupt, and a Ctrl-C is not a bug to show a traceback for."""
    beam_log = logging.getLogger(BEAM_TRANSFORM_ERROR_LOGGER)
    quiet = _NoInterruptTracebacks()
    beam_log.addFilter(quiet)
    try:
        yield
    finally:
        beam_log.removeFilter(quiet)


def _refused_as_config_error(runner, options: PipelineOptions, step: Callable[[], T]) -> T:
    """`step()`, with a remote runner's refusal of the job (`refused_job`) as a ConfigError."""
    try:
        return step()
    except (ValueError, RuntimeError) as err:
        refusal = None if isinstance(runner, LocalRunner) else refused_job(err)
        if refusal is None:
            raise
        raise ConfigError("runner", f"{_runner_name(options)}: {refusal}") from None
    except Exception as err:
        if isinstance(runner, LocalRunner) or not _is_rpc_error(err):
            raise
        # A job service's answer to the submission (a portable runner's): what it said, not
        # a gRPC traceback. Something that is no job service answers so too (an HTTP server
        # says UNIMPLEMENTED).
        code = err.code() if callable(getattr(err, "code", None)) else None
        said = err.details() if callable(getattr(err, "details", None)) else str(err)
        endpoint = options.get_all_options().get("job_endpoint")
        where = f" at {endpoint!r}" if endpoint else ""
        raise ConfigError(
            "runner",
            f"{_runner_name(options)}: the job service{where} refused the job"
            f"{f' ({code.name})' if code is not None else ''}: {said}",
        ) from None


def _is_rpc_error(err: BaseException) -> bool:
    """Whether `err` is gRPC's error for a call that failed (grpc is imported only then)."""
    if not type(err).__module__.startswith("grpc"):
        return False
    import grpc

    return isinstance(err, grpc.RpcError)


def _submitted(
    result, pipeline, options: PipelineOptions, dry_run: bool, state: str | None = None
) -> SubmittedBuild:
    job = job_of(result)  # DataflowRunner's, which keeps the job it built
    proto = getattr(job, "proto_pipeline", None) or pipeline.to_runner_api()
    job_id = None if dry_run else job_id_of(result)
    return SubmittedBuild(
        runner=_runner_name(options),
        state=state or str(result.state),
        job_id=job_id,
        dry_run=dry_run,
        transforms=len(proto.components.transforms),
        graph_bytes=len(proto.SerializeToString()),
        job=job,
    )


class LocalRunner(SwitchingDirectRunner):
    """The DirectRunner, straight to its batch engine (the FnApiRunner).

    Beam's DirectRunner first offers a pipeline to Prism, a runner it downloads from GitHub
    on first use. Offline that fails, costing half a second, and it falls back to the
    FnApiRunner; online, a build would download a binary and run on a runner other than the
    one its `--direct_running_mode`, progress and tests are made for. A build that names no
    runner, or the DirectRunner, runs here: the same engine, built as the DirectRunner builds
    it, without the detour.
    """

    def run_pipeline(self, pipeline, options):
        # In memory with one worker, every step's output waits in this process for the next
        # step, and every bundle runs on this thread: in a spool (`spool`), the launcher holds
        # references to the outputs, not the metadata of every image. Worker processes or
        # threads of Beam's own keep theirs as Beam does.
        direct = options.view_as(DirectOptions)
        one_thread = direct.direct_running_mode == "in_memory" and direct.direct_num_workers == 1
        with spooling(one_thread):
            return run_on_fn_api_runner(pipeline, options)


def shard_processes(config: BuildConfig, options: PipelineOptions) -> int:
    """Processes to write shards in: the cores, for a build that runs in this one process
    (LocalRunner in memory) and reads and writes local files and gs:// or s3:// objects only;
    else 0, each worker writing its own shards.

    A process of its own finds the stores as this one does: through the environment it
    inherits and the fsspec settings it is given (`shard_processes`). A `memory://` store, or a
    filesystem registered by this process alone, is not there for it.
    """
    direct = options.view_as(DirectOptions)
    if (
        not isinstance(_runner(options), LocalRunner)
        or (direct.direct_running_mode or "in_memory") != "in_memory"
        or (direct.direct_num_workers or 1) != 1
    ):
        return 0
    if not all(reached_alike(url) for _, url in config.places()):
        return 0
    if config.reaches_a_store() and not settings_travel():
        return 0
    cores = usable_cores()
    return cores if cores > 1 else 0


def _runner(options: PipelineOptions) -> str | PipelineRunner:
    name = _runner_name(options)
    return LocalRunner() if name.lower() in ("directrunner", "direct") else name


@callers_logging_kept()
def build(
    config: BuildConfig, beam_args: Sequence[str] = (), *, wait: bool = True
) -> BuildResult | SubmittedBuild:
    """Checks the config against the world, runs the build and, unless told not to, waits for it.

    A dry run (`--dry_run=True`, which DataflowRunner honours by building the job and not
    submitting it) and a run not waited for return a SubmittedBuild: the manifest is read only
    from a pipeline that finished.

    Args:
        config: the build.
        beam_args: flags for Beam's PipelineOptions (`--runner`, `--direct_num_workers`, ...).
        wait: wait for the job to finish (runners that run in this process finish anyway).

    A local output folder is locked (`output_lock`) while this process runs or waits for the
    build, from before anything in it is written or removed: a second build into it is
    refused. An interrupted build (KeyboardInterrupt, SystemExit) keeps the lock: its threads
    and worker processes may still be writing; call `release_output` once they have ended (the
    command does), or the lock goes when the process does.

    Raises:
        ConfigError: the config is no BuildConfig or cannot work, another build is writing
            into the output folder, or `--dry_run` is given to a runner that would run the
            build anyway (before anything is written).
        BuildFailed: the build must not be published: it wrote no image, skipped more than
            `max_skipped_fraction` of its inputs, was given `classes` no input is labelled
            with, or its runner lost inputs between stages; or it stopped on a file or object
            it could not read or write. Nothing claims a finished dataset, and report.jsonl
            says why where it was written; its `resumable`, `retry` and `withdrawal` say what
            was kept and what to do.
    """
    if not isinstance(config, BuildConfig):  # a mapping of settings, say: not read as one
        raise ConfigError(
            "config",
            "build takes a BuildConfig, made by BuildConfig.from_settings({'input': "
            f"['photos/**'], 'output': 'out/photos'}}), not a {type(config).__name__}: "
            f"{config!r}",
        )
    if isinstance(beam_args, (str, bytes)):
        raise ConfigError(
            "beam_args",
            f"a list of Beam flags, such as ['--runner=DataflowRunner'], not one string: "
            f"{beam_args!r}",
        )
    # As the command line checks them: Beam would drop an unknown flag with a log line (a
    # setting meant for the build among them, which would then build with its default) and end
    # the caller's process (SystemExit) on a bad value.
    check_beam_args(list(beam_args), (), settings=(*BuildConfig.setting_names(), "input"))
    beam_args = list(beam_args)
    if not any(a.split("=", 1)[0] in _MAIN_SESSION_FLAGS for a in beam_args):
        # Beam pickles the launcher's __main__ for a service runner's workers by default: a
        # build needs nothing of it (its DoFns are the package's own), and must not depend on
        # the machine it was launched from.
        beam_args.append("--no_save_main_session")
    options = BuildOptions(beam_args)
    dry_run = bool(options.view_as(TestOptions).dry_run)
    name = _runner_name(options)
    on_dataflow = "dataflow" in name.lower()
    if dry_run and not on_dataflow:
        # Other runners ignore the flag and run the build.
        raise ConfigError(
            "runner",
            f"{name} would run the build: only DataflowRunner honours "
            "--dry_run=True (it builds the job and does not submit it)",
        )
    if on_dataflow:
        _refuse_local_paths(config, name)
    runner = _runner(options)
    if not isinstance(runner, LocalRunner):
        config = _whole_local_paths(config)
        check_job_service(name, options.get_all_options())
    # A job not waited for runs on after this process has returned, maybe ended: no lock
    # held here would cover it. Nor is there one on object stores.
    lock = not dry_run and (wait or isinstance(runner, LocalRunner)) and is_lockable(config.output)
    with _released_at_end(config.output, lock), _worded_for_the_caller():
        return _build(config, options, runner, dry_run, wait, lock)


def _reads_a_store(config: BuildConfig) -> bool:
    """Whether the build's images (or its input list) are on an object store."""
    return any(is_store_url(url) for url in (*config.inputs, config.input_list) if url)


def _refuse_local_paths(config: BuildConfig, runner: str) -> None:
    """Dataflow's workers run elsewhere: a path on this machine is one they cannot reach."""
    for setting, url in config.places():
        if is_local_url(url):
            raise ConfigError(
                setting,
                f"{url!r} is a path on this machine, which {runner}'s workers cannot reach; "
                "give a URL they can (gs://...)",
            )


def _whole_local_paths(config: BuildConfig) -> BuildConfig:
    """The config with its relative local paths made whole from this process's folder, where
    they were checked: a runner's workers (Flink's, Spark's) run in folders of their own."""

    def whole(url: str) -> str:
        if has_protocol(url) or os.path.isabs(url) or not is_local_url(url):
            return url
        return os.path.abspath(url)

    return replace(
        config,
        inputs=tuple(whole(url) for url in config.inputs),
        output=whole(config.output),
        input_list=whole(config.input_list) if config.input_list else config.input_list,
    )


@contextmanager
def _worded_for_the_caller() -> Iterator[None]:
    """The build's refusal or failure in its caller's words: a Python caller's names the
    settings as BuildConfig's fields (`overwrite=True`), the command line's as flags."""
    try:
        yield
    except (ConfigError, BuildFailed) as err:
        worded = for_the_caller(err)
        if worded is err:
            raise
        raise worded.with_traceback(err.__traceback__) from err.__cause__


@contextmanager
def _released_at_end(output: str, lock: bool) -> Iterator[None]:
    """Releases the output's lock when the build ends or fails; not when it is interrupted."""
    if not lock:
        yield
        return
    try:
        yield
    except Exception:
        release_output(output, failed=True)
        raise
    release_output(output)


def _build(
    config: BuildConfig,
    options: PipelineOptions,
    runner: str | PipelineRunner,
    dry_run: bool,
    wait: bool,
    lock: bool,
) -> BuildResult | SubmittedBuild:
    # Before anything is looked at or written: DataflowRunner checks its options here.
    pipeline = _refused_as_config_error(
        runner, options, lambda: beam.Pipeline(runner=runner, options=options)
    )
    early = taken_before_beam(config)
    # The command checked a plain build before Beam was imported, or while it was.
    checked = early or checked_before_beam(config)
    if not checked:
        checks = checking_here(config)  # a build stopped in them has written nothing
        preflight(config, lock=lock)
        checks.set()
    if not dry_run and not checked:
        # Before anything else is written there (`early` started its own).
        start_output(config)
    forget_written_here(config.output)  # an earlier build's, in this process: not this one's
    started = time.monotonic()
    processes = shard_processes(config, options)  # none for a dry run: that is Dataflow's
    if processes and (
        config.reaches_a_store()
        or (
            not config.input_list
            and local_bytes_reach(
                config.inputs,
                config.extensions,
                PROCESSES_MIN_BYTES,
                min_files=PROCESSES_MIN_IMAGES,
            )
        )
    ):
        head_start(start_early(processes, keep=early), config)
    result = _run(pipeline, config, processes, options, runner, dry_run=dry_run, wait=wait)
    if dry_run:
        return _submitted(result, pipeline, options, dry_run=True)
    if getattr(result, "has_job", True) is False:
        # DataflowRunner wrote the job to --template_location instead of submitting it (this is
        # how a Flex Template launches): the service runs it later, and its result says DONE.
        return _submitted(result, pipeline, options, dry_run=False, state="TEMPLATE_WRITTEN")
    if result.state != PipelineState.DONE:
        return _submitted(result, pipeline, options, dry_run=False)
    finished = _finished(result, config, started)
    _warn_a_python_caller(finished, config)
    return finished


def _warn_a_python_caller(result: BuildResult, config: BuildConfig) -> None:
    """What the command's summary warns of (inputs skipped, a split with no image...), logged
    at WARNING for a Python caller, who gets no summary, in its words. Not for the command
    line, which prints them in its summary."""
    if COMMAND_LINE.get():
        return
    for warning in build_warnings.of_build(result.manifest, result.counters, config):
        _LOG.warning("%s", in_python_names(warning))


def _run(
    pipeline: beam.Pipeline,
    config: BuildConfig,
    processes: int,
    options: PipelineOptions,
    runner: str | PipelineRunner,
    *,
    dry_run: bool,
    wait: bool,
):
    """Runs the build's graph (and waits for it, unless told not to); Beam's errors translated:
    an interrupt re-raised as it was, an output that cannot be written as BuildFailed."""
    try:
        with dofn_specs_remembered():
            _ = pipeline | "ConvertImages" >> ConvertImages(config, processes)
            with _interrupts_unlogged():
                # Beam first sends a pipeline through its runner-API form and back, as a check,
                # unless the runner runs from that form anyway; it knows its DirectRunner does, not
                # this one.
                result = _refused_as_config_error(
                    runner,
                    options,
                    lambda: pipeline.run(test_runner_api=not isinstance(runner, LocalRunner)),
                )
                if not dry_run and wait and getattr(result, "has_job", True) is not False:
                    result.wait_until_finish()
    except Exception as err:
        listed = next((e for e in _chain(err) if isinstance(e, InputListError)), None)
        if listed is not None:  # a bad line past what the checks read: the list is to fix
            raise ConfigError("input_list", without_step_names(str(listed))) from None
        interrupt = _interruption(err)
        if interrupt is not None:
            # Beam wraps what stopped a transform in a RuntimeError, a Ctrl-C too: the caller (a
            # notebook, a scheduler's signal handler) gets the interrupt it caused, and the
            # output keeps its lock (`_released_at_end`) while shard processes may still write.
            raise interrupt from None
        failure = _io_failure(err, config.output)
        if failure is None:
            raise
        raise failure from err
    finally:
        discard_started()  # started, and not taken: the plan was too small after all
        discard_kept_records()  # no shard copies a measured record now
    return result


def _finished(result, config: BuildConfig, started: float) -> BuildResult:
    """A finished pipeline's BuildResult: its manifest and counters; BuildFailed, with the
    verdict its last step reached, if it published no manifest."""
    counters = {}
    try:
        query = result.metrics().query(
            beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE)
        )
        for counter in query["counters"]:
            counters[counter.key.metric.name] = (
                counters.get(counter.key.metric.name, 0) + counter.committed
            )
        string_sets = {s.key.metric.name: s.committed for s in query.get("string_sets", ())}
        missing_classes = sorted(string_sets.get(_CLASSES_NOT_FOUND, ()))
        verdicts = string_sets.get(_VERDICT, ())
    except (NotImplementedError, AttributeError, KeyError):  # some runners report no metrics
        missing_classes, verdicts = [], ()
    try:
        # Taken as the finalize step wrote it, when it ran in this process; else read at once,
        # not looked for first: on an object store a look is three round trips.
        manifest = manifest_written_here(config.output) or read_manifest(config.output)
    except FileNotFoundError:
        raise withdrawn_failure(
            config.output,
            # One finalize step, one verdict; more would be a retried step's, all alike.
            Verdict.from_json(min(verdicts), config.max_skipped_fraction) if verdicts else None,
            max_skipped_fraction=config.max_skipped_fraction,
            listed=counters.get("images_listed"),
            written=counters.get("images_written"),
            classes=config.classes,
            missing_classes=missing_classes,
        ) from None
    return BuildResult(manifest, counters, time.monotonic() - started)
