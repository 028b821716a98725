"""A build's start before its pipeline's, while Beam is imported: for a local build, checks, the
output's lock, worker processes and a head start; for one that reaches a store, its checks.

`beam-tfrecord build` without Beam flags builds on this machine, with worker processes of its
own (`shard_processes`), and Beam's import alone takes 1.5 to 2.5 s of one core; then come the
graph, the runner's set-up and its stages of listing and planning. A build does first what
needs no Beam: it checks the config against the world and takes the output's lock
(`checks.preflight`, which the pipeline then does not repeat), starts its worker processes, and
gives them a head start (`head_start`): they list, plan and write the shards the pipeline
will ask for, which it takes only where its own plan is the same.

A build that reaches an object store checks it in round trips (the input listed for an image,
the output looked at, a probe written and removed, an earlier build's manifest removed): 0.35 s
at 50 ms a request, in which the launcher had nothing else to do. They run on a thread while
Beam is imported (`check_before_beam`), and the pipeline waits for them before it runs.
"""

from __future__ import annotations

import logging
import threading

from beam_tfrecord.config import BuildConfig
from beam_tfrecord.head_start import MIN_MEAN_BYTES, HeadStart
from beam_tfrecord.listing import local_bytes_reach
from beam_tfrecord.locations import is_local_url
from beam_tfrecord.measurement import measures
from beam_tfrecord.planning import preparer
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.remote import read_depth
from beam_tfrecord.shard_processes import (
    PROCESSES_MIN_BYTES,
    ShardProcesses,
    start_early,
)

__all__ = [
    "check_before_beam",
    "checked_before_beam",
    "checking_here",
    "head_start",
    "head_start_for",
    "start_before_beam",
    "taken_before_beam",
    "wrote_nothing_yet",
]

_LOG = logging.getLogger(__name__)

# The build `start_before_beam` checked, locked and started, until its pipeline takes it.
_early: list[BuildConfig] = []
# The build whose checks `check_before_beam` started, with their thread and outcome.
_checking: list[tuple[BuildConfig, threading.Thread, list[BaseException | None]]] = []
# The build whose checks `check_before_beam` started, and whether they got as far as writing
# to its output (its record of settings, the manifest an --overwrite removes).
_writing: list[tuple[BuildConfig, threading.Event]] = []


def head_start_for(config: BuildConfig) -> HeadStart | None:
    """The head start a build may have: one local pattern into a local folder, planned without
    reading an image first (no --dedup, no measured transform), not a --resume (whose summary
    counts the shards found finished before it started); else None."""
    if (
        len(config.inputs) != 1
        or config.input_list
        or config.dedup
        or config.resume
        or measures(config.image, config.transformed_sizes)
        or not is_local_url(config.inputs[0])
        or not is_local_url(config.output)
        or not _large_images(config)
    ):
        return None
    return HeadStart(
        pattern=config.inputs[0],
        extensions=tuple(config.extensions),
        preparer=preparer(config),
        bucket_records=config.planning_bucket_records,
        min_shard_size=config.min_shard_size,
        max_shard_size=config.max_shard_size,
        output=config.output,
        name=config.name,
        min_bytes=PROCESSES_MIN_BYTES,
        min_mean_bytes=MIN_MEAN_BYTES,
    )


# The files a build's first folders are sampled by, for the mean size of its images.
_SAMPLE_FILES = 1000


def _large_images(config: BuildConfig) -> bool:
    """Whether the first images below the input average MIN_MEAN_BYTES or more: a walk of a
    folder or two, where a head start's listing of small images would cost a second or more of
    a process for nothing (it plans no shard of them)."""
    if MIN_MEAN_BYTES <= 0:
        return True
    return local_bytes_reach(
        config.inputs, config.extensions, _SAMPLE_FILES * MIN_MEAN_BYTES, most_files=_SAMPLE_FILES
    )


def head_start(
    pool: ShardProcesses | None,
    config: BuildConfig,
    *,
    start: HeadStart | None = None,
    here: bool = False,
) -> None:
    """Gives `pool` the build's head start (`start`, else `head_start_for`'s), if it may have
    one and has none yet (a pool given one before Beam was imported keeps it); `here`: planned
    in this thread (`ShardProcesses.head_start`)."""
    if pool is None or pool.heading:
        return
    start = start or head_start_for(config)
    if start is None:
        return
    pool.head_start(
        start,
        config.image,
        max_record_size=config.max_shard_size,
        resume=config.resume,
        read_ahead=read_depth(config),
        here=here,
    )


def start_before_beam(config: BuildConfig) -> bool:
    """For a plain local build (no Beam flags: the DirectRunner in this process), checks the
    config and locks the output, then starts the worker processes with a head start; whether it
    did. The pipeline then finds the processes started (`start_early`) and the config checked.

    Raises:
        ConfigError: as `checks.preflight`, before anything is written.
    """
    from beam_tfrecord.checks import preflight
    from beam_tfrecord.output_lock import is_lockable, release_output
    from beam_tfrecord.settings_record import start_output

    processes = usable_cores()
    start = head_start_for(config) if processes > 1 else None
    if (
        start is None
        or not is_lockable(config.output)
        or not local_bytes_reach(config.inputs, config.extensions, PROCESSES_MIN_BYTES)
    ):
        return False
    try:
        preflight(config, lock=True)
        # Before the first shard: the record of the settings every shard is made with.
        start_output(config)
    except BaseException:
        release_output(config.output)
        raise
    _early[:] = [config]
    # Planned here, while the processes start (half a second: Python, Pillow, fsspec): the
    # first shards go to them as soon as they can take them, and Beam's import comes after.
    head_start(start_early(processes), config, start=start, here=True)
    _LOG.debug("checked, locked and started %d worker processes before Beam's import", processes)
    return True


def taken_before_beam(config: BuildConfig) -> bool:
    """Whether `start_before_beam` checked this build (and holds its output's lock) and started
    its worker processes, for its pipeline to skip the checks (its own shards, written since,
    are no earlier build's) and keep the processes (`start_early`). Once: the pipeline takes
    it, and any other build checks for itself."""
    early = _early == [config]
    _early.clear()
    return early


def check_before_beam(config: BuildConfig) -> bool:
    """For a plain build that reaches an object store (no Beam flags: the DirectRunner in this
    process), starts its checks (`checks.preflight`) and its output's start (with --overwrite,
    the removal of an earlier build's manifest; the record of its settings:
    `settings_record.start_output`), on a thread while Beam is imported; whether it did. The
    pipeline waits for them and raises what they raised (`checked_before_beam`) before it runs."""
    if not config.reaches_a_store():
        return False
    from beam_tfrecord.checks import preflight
    from beam_tfrecord.settings_record import start_output

    outcome: list[BaseException | None] = []
    writing = checking_here(config)  # the checks' thread is this build's: it sets it

    def check() -> None:
        try:
            preflight(config)
            writing.set()
            start_output(config)
            outcome.append(None)
        except BaseException as err:  # raised by the thread that waits for it
            outcome.append(err)

    # A daemon: a build stopped meanwhile ends without waiting for the store (preflight gives
    # up on one that does not answer in time, after which the pipeline raises that).
    thread = threading.Thread(target=check, name="checks", daemon=True)
    _checking[:] = [(config, thread, outcome)]
    thread.start()
    return True


def checking_here(config: BuildConfig) -> threading.Event:
    """Notes that `config`'s checks are under way (on this thread or on one started for them);
    the event given is to be set once they have passed, before the build writes anything to its
    output (`wrote_nothing_yet`)."""
    writing = threading.Event()
    _writing[:] = [(config, writing)]
    return writing


def wrote_nothing_yet(config: BuildConfig) -> bool:
    """Whether `config`'s build is still in the checks `check_before_beam` started, short of
    writing to its output: a build stopped now has started nothing (a store that does not
    answer holds its checks for up to their time limit, long after Beam's import)."""
    return bool(_writing) and _writing[0][0] is config and not _writing[0][1].is_set()


def checked_before_beam(config: BuildConfig) -> bool:
    """Whether `check_before_beam` checked this build and started its output (with --overwrite,
    removed an earlier build's manifest), once they have ended. Once: the pipeline takes it.

    Raises:
        ConfigError: what the checks refused, as `checks.preflight`.
    """
    if not _checking or _checking[0][0] != config:
        _checking.clear()
        return False
    _, thread, outcome = _checking.pop()
    thread.join()
    if outcome and outcome[0] is not None:
        raise outcome[0]
    return bool(outcome)
