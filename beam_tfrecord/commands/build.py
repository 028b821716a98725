"""`beam-tfrecord build`: settings from a YAML file and flags (flags win); other flags go to Beam."""

from __future__ import annotations

import argparse
import collections.abc
import contextlib
import functools
import gc
import logging
import os
import posixpath
import re
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from beam_tfrecord.build_folder import finished_shard_names, finished_shards
from beam_tfrecord.checks import refuse_placeholders
from beam_tfrecord.commands.console import (
    Interruption,
    again_command,
    configure_logging,
    end_child_processes,
    resume_command,
    stop_on_signals,
    terminal_stream,
)
from beam_tfrecord.commands.starting import is_the_command, stopped_before_starting
from beam_tfrecord.commands.summary import print_submitted, print_summary
from beam_tfrecord.compat import option_strings, release_named_semaphores, reuse_image_memory
from beam_tfrecord.config import (
    COMMAND_LINE,
    BuildConfig,
    ConfigError,
    unknown_setting,
)
from beam_tfrecord.locations import is_memory_url
from beam_tfrecord.progress import Progress
from beam_tfrecord.settings import SETTINGS, Setting
from beam_tfrecord.storage import written_at
from beam_tfrecord.verdict import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    BuildFailed,
    Withdrawal,
    of_published,
)
from beam_tfrecord.wording import count

__all__ = ["add_arguments", "config_from_args", "run"]

_LOG = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.allow_abbrev = False  # an abbreviation could swallow one of Beam's flags
    parser.epilog = (
        "Other flags must be Beam's pipeline options (--runner, --direct_num_workers, ...); "
        "anything else is refused."
    )
    parser.add_argument("--config", metavar="FILE", help="YAML file of settings; flags override it")
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="show Beam's own log lines, and a line per shard written",
    )  # fmt: skip
    groups: dict[str, Any] = {}
    for setting in SETTINGS:  # each a flag, in its section, as the table declares it
        if setting.group not in groups:
            groups[setting.group] = parser.add_argument_group(setting.group)
        groups[setting.group].add_argument(*setting.flags, **_flag(setting))
    group = parser.add_argument_group("running")
    group.add_argument(
        "--no-wait", dest="wait", action="store_false",
        help="return once the runner has the job, print its id; verify the output once it is "
        "done (default: wait for the build and print its summary)",
    )  # fmt: skip


def _flag(setting: Setting) -> dict[str, Any]:
    """add_argument's keywords for a setting's flag. Its default is None, whatever the
    setting's: a flag not given leaves the config file's value, or the setting's default."""
    declared: dict[str, Any] = {"dest": setting.key, "help": argparse.SUPPRESS}
    if not setting.hidden:
        shown = setting.shown_default()
        text = setting.help
        if shown is not None and "{default}" not in text:
            text += " (default: {default})"
        declared["help"] = text.format(default=shown)
    if setting.kind == "switch":
        declared.update(action="store_false" if setting.default else "store_true", default=None)
        return declared
    if setting.repeatable:
        declared["action"] = "append"
    if setting.choices:
        declared["choices"] = list(setting.choices)
    if setting.kind in ("integer", "number"):
        declared["type"] = int if setting.kind == "integer" else float
    if setting.metavar:
        declared["metavar"] = setting.metavar
    return declared


# Dataflow's job labels share the flag (`--labels KEY=VALUE`; the Airflow Beam provider adds
# `--labels=airflow-version=...` to every Dataflow launch): those go to Beam. No label rule
# looks like one: rules are `dir`, `none` or start with `regex:`. A job label keyed by a rule's
# name (`regex=...`) is a rule mistyped, which the rule's check refuses: taken as a job label,
# a DirectRunner would ignore it, and the build would label by folder without a word.
_JOB_LABEL_RE = re.compile(r"^(?!(?:regex|dir|none)=)[a-z][a-z0-9_-]*=")


def split_labels(values: Sequence[str] | None) -> tuple[str | None, list[str]]:
    """The label rule (the last one given) and the Dataflow job labels among `--labels` values."""
    rules = [v for v in values or () if v.startswith("regex:") or not _JOB_LABEL_RE.match(v)]
    job_labels = [v for v in values or () if v not in rules]
    return (rules[-1] if rules else None), job_labels


def _load_yaml(path: str) -> dict[str, Any]:
    import fsspec
    import yaml

    try:
        # utf-8-sig: a byte-order mark (Notepad's, a spreadsheet's) is not part of the first key.
        with fsspec.open(path, "rb") as f:
            text = f.read().decode("utf-8-sig")
        data = yaml.load(text, Loader=_unique_keys_loader())
    except FileNotFoundError:
        raise ConfigError("config", f"{path!r} does not exist") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            "config",
            f"{path!r} is not UTF-8 text (byte 0x{err.object[err.start]:02x} at {err.start}); "
            "save it as UTF-8",
        ) from None
    except yaml.MarkedYAMLError as err:  # one line: where, and what is wrong there
        mark = err.problem_mark
        where = f", line {mark.line + 1}" if mark is not None else ""
        hint = _yaml_hint(err.context, err.problem)
        raise ConfigError(
            "config", f"{path!r} cannot be read{where}: {err.problem or err.context}{hint}"
        ) from None
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError("config", f"{path!r} cannot be read: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            "config", f"{path!r} must hold a mapping of settings, not {type(data).__name__}"
        )
    named: dict[str, str] = {}
    for key in data:  # refused here, where the file can be named
        setting = BuildConfig.setting_of(key)
        if setting is None:
            raise ConfigError("config", f"{path!r}: {unknown_setting(str(key))}")
        if setting in named:  # `min_shard_size` and `min-shard-size`: which one is meant?
            raise ConfigError(
                "config",
                f"{path!r} sets {setting} twice ({named[setting]!r} and {key!r}); keep one",
            )
        named[setting] = str(key)
    return data


def _yaml_hint(context: str | None, problem: str | None) -> str:
    """How to write what YAML read as its own syntax (the parser's error's `context` and
    `problem`): a glob or a regex typed as in a shell is the mistake most likely in this file,
    and the parser's words do not say to quote."""
    problem = problem or ""
    if context == "while scanning an alias" or problem.startswith("found undefined alias"):
        return (
            " (a value that starts with * is an alias to YAML: quote it, as in input: '**/*.jpg')"
        )
    if context == "while scanning a double-quoted scalar" and "escape" in problem:
        return (
            " (in double quotes YAML reads a backslash as an escape: write a regex in single "
            r"quotes, as in labels: 'regex:([a-z]+)\d+', or with none)"
        )
    return ""


@functools.cache
def _unique_keys_loader() -> type:
    """yaml's SafeLoader, refusing a mapping that gives one key twice (where it keeps the last
    without a word: `seed: 1` then, further down, `seed: 2`)."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, collections.abc.Hashable):
                    break  # `{[a]: 1}`: yaml's own refusal says where (`found unhashable key`)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{key!r} is given twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeys


def config_from_args(args: argparse.Namespace) -> BuildConfig:
    """Merges defaults, the YAML file and the flags (in that order of precedence) into a config."""
    settings: dict[str, Any] = _load_yaml(args.config) if args.config else {}
    for setting in SETTINGS:
        value = getattr(args, setting.key)
        if setting.name == "labels" and isinstance(value, list):
            value = split_labels(value)[0]
        if value is not None:
            settings.pop(setting.name, None)
            settings.pop(setting.key, None)
            settings[setting.name] = value
    # Two answers to one question, what becomes of an earlier build in --output: one given as
    # a flag replaces the file's answer, as any flag does. `overwrite: true` in a file would
    # otherwise refuse the --resume of the command an interrupted build prints.
    for flag, other in (("resume", "overwrite"), ("overwrite", "resume")):
        if getattr(args, flag) and getattr(args, other) is None:
            settings.pop(other, None)
    with _naming_flags():
        return BuildConfig.from_settings(settings)


def _own_flags() -> list[str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return [flag for flag in option_strings(parser) if flag.startswith("--")]


_PROG = "beam-tfrecord build"


class _EarlyStart:
    """The signal handling of a build whose worker processes started before Beam's import.

    On from their start until `_run_build`'s own takes over, so that a stop anywhere in
    between (Beam's import, the flags' checks) ends as a build stopped later does: its workers
    ended, its partial files and lock removed, its finished shards kept and the command to go
    on printed. A build that started nothing keeps the one-line stop (`starting`).
    """

    def __init__(self) -> None:
        self._signals = contextlib.ExitStack()
        self.interruption: Interruption | None = None
        self._config: BuildConfig | None = None

    def watch(self, config: BuildConfig) -> None:
        self._config = config
        self.interruption = self._signals.enter_context(stop_on_signals())

    def stopped(self) -> bool:
        return self.interruption is not None and self.interruption.signum is not None

    def end(self, started: float) -> NoReturn:
        """Ends the stopped build: its shards end, each removing its temporary file."""
        from beam_tfrecord.shard_processes import discard_started

        discard_started()
        _end_interrupted(self._config, self.interruption, started)

    def release(self) -> None:
        """Signals as they were before the build started."""
        self._signals.close()


def _start_before_beam(
    config: BuildConfig, extra: Sequence[str], started: float, early: _EarlyStart
) -> None:
    """What a build does before Beam is imported: refuses placeholders at once, and a plain
    local build (no Beam flags) checks the world, locks its output and starts its worker
    processes with a head start (`early_start`), which write while Beam is imported (in the
    command's own process, a Beam without the parts no build on this machine uses); one that
    reaches a store checks it meanwhile, on a thread (`check_before_beam`). Stopped
    from then on, it ends as a build stopped later does, its finished shards kept for --resume
    (`_EarlyStart`)."""
    refuse_placeholders(config)
    if extra:
        return
    from fsspec.utils import get_protocol

    from beam_tfrecord import progress
    from beam_tfrecord.early_start import check_before_beam, start_before_beam
    from beam_tfrecord.shard_processes import fork_from_server

    if is_the_command():
        # Its worker processes fork from a server that imported their modules, and the store
        # clients of the build's input and output, once.
        fork_from_server({get_protocol(url) for url in (*config.inputs, config.output)})

    # The build's progress line is drawn once Beam is imported; worker processes started before
    # count into its folder from their start, as they find it in their environment.
    progress.reserve_folder()
    early.watch(config)
    try:
        if not start_before_beam(config):
            early.release()  # nothing started: a stop is still one line
            # A build that reaches a store checks it while Beam is imported.
            check_before_beam(config)
            return
        # The import the worker processes overlap.
        if not _imported_lean_beam(extra):
            import apache_beam  # noqa: F401
    except BaseException:
        if not early.stopped():
            early.release()
            raise
    if early.stopped():
        early.end(started)


def _imported_lean_beam(extra: Sequence[str]) -> bool:
    """Whether Beam was imported here, lean: the `beam-tfrecord` process runs one build and
    ends, and without Beam flags that build runs on this machine, from folders or buckets
    alike, with a Beam that leaves out what such a build never uses
    (`compat.import_beam_for_one_local_build`)."""
    from beam_tfrecord.compat import import_beam_for_one_local_build

    if extra or not is_the_command():
        return False
    import_beam_for_one_local_build()
    return True


def run(args: argparse.Namespace, extra: Sequence[str]) -> int:
    started = time.monotonic()
    verbose = bool(getattr(args, "verbose", False))
    configure_logging(sys.stderr, verbose)
    extra = [*extra, *(f"--labels={label}" for label in split_labels(args.labels)[1])]
    config = None
    early = _EarlyStart()
    if is_the_command():
        # Until Beam is imported (`_run_build`), no garbage collection: the imports make objects
        # that live as long as the process, and collections while they are made cost 50 ms.
        # Not in a program that runs the command line: its collector is its own.
        gc.disable()
    try:
        try:
            config, options, beam_args = _settings(args, extra, verbose, started, early)
            finished_before = finished_shard_names(config.output) if config.resume else None
            result, interruption = _run_build(config, options, beam_args, args.wait, verbose)
        except BaseException:
            if early.stopped():
                early.end(started)
            raise
        finally:
            early.release()
        configure_logging(sys.stderr, verbose)
    except ConfigError as err:
        print(f"{_PROG}: error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    except BuildFailed as err:
        print(f"{_PROG}: error: {err}", file=sys.stderr)
        if err.withdrawal is Withdrawal.TOO_MANY_SKIPPED:
            print(f"To publish it anyway: {_publish_anyway_command(config)}", file=sys.stderr)
        if err.retry and err.resumable:
            print(f"To go on from them: {resume_command(sys.argv)}", file=sys.stderr)
        elif err.retry:
            print(f"To try again: {again_command(sys.argv)}", file=sys.stderr)
        return err.exit_code
    if interruption.signum is not None:
        _end_interrupted(config, interruption, started)
    return _finished(result, config, options, args.wait, started, finished_before)


def _settings(
    args: argparse.Namespace, extra: list[str], verbose: bool, started: float, early: _EarlyStart
) -> tuple[BuildConfig, argparse.Namespace, list[str]]:
    """The build's config, Beam's options as parsed, and the flags to give Beam, all checked:
    a bad one raises ConfigError before anything is written. A plain local build has started
    writing by the time this returns (`_start_before_beam`)."""
    try:
        config = config_from_args(args)
    except ConfigError:
        if any(arg.startswith("-") for arg in extra):
            # A mistyped flag (`--inptu`) often leaves a required setting unset: the typo,
            # named with the flag meant, says more than "--input is required".
            from beam_tfrecord.beam.options import check_beam_args

            check_beam_args(extra, _own_flags())
        raise
    _refuse_memory(config)
    _start_before_beam(config, extra, started, early)  # at once: before Beam is imported
    # Beam is imported only once the config is sound (a build that started early has it).
    # Stopped meanwhile, a build that has started nothing says so in one line (`starting`).
    _imported_lean_beam(extra)
    from beam_tfrecord.beam.options import check_beam_args, local_defaults

    options = check_beam_args(extra, _own_flags())
    beam_args = local_defaults(extra, options)
    if verbose and not any(a.startswith("--sdk_harness_log_level_overrides") for a in extra):
        # Worker processes log at INFO; our per-shard lines are DEBUG.
        beam_args.append('--sdk_harness_log_level_overrides={"beam_tfrecord": "DEBUG"}')
    _LOG.debug("Beam options: %s", " ".join(beam_args) or "(none)")
    return config, options, beam_args


def _refuse_memory(config: BuildConfig) -> None:
    """Refuses fsspec's memory filesystem as a place of the command's build: it is this
    process's own, so a build written there is lost when the command ends (which said "Built
    'x' in memory://x", exit status 0), and an input there holds nothing yet. The library's
    `build` takes it, in one process with its caller (tests use it)."""
    for setting, url in config.places():
        if is_memory_url(url):
            held = (
                "gone when the command ends: the build would be lost"
                if setting == "output"
                else "empty when a command starts"
            )
            raise ConfigError(
                setting, f"{url!r} is in memory (fsspec's memory filesystem), {held}; give a "
                "path on disk or in a bucket",
            )  # fmt: skip


def _run_build(
    config: BuildConfig,
    options: argparse.Namespace,
    beam_args: list[str],
    wait: bool,
    verbose: bool,
):
    """Runs the build, quiet unless verbose, with progress where it runs here; its result (None
    if it was interrupted) and the interruption (whose `signum` is None if there was none)."""
    from beam_tfrecord.beam.options import runs_here
    from beam_tfrecord.beam.pipeline import build

    if is_the_command():
        # What this process has imported (Beam, most of it) lives as long as it does: out of
        # the garbage collector's reach, its full collections skip them. Planning 120,000
        # images here took 12 of them, 0.35 s, each walking every object of every module.
        gc.freeze()
        # And a young-generation collection every 10,000 new objects, not 700: planning makes
        # millions that refcounting frees; 1,500 collections of them took 0.09 s of 120,000
        # PNGs'.
        gc.set_threshold(10_000, 10, 10)
        gc.enable()
        # Where this process checks images itself (a build without worker processes).
        reuse_image_memory()
    result = None
    with (
        terminal_stream(not verbose, (ConfigError, BuildFailed)) as terminal,
        stop_on_signals() as interruption,
        _naming_flags(),
    ):
        configure_logging(terminal, verbose)
        try:
            if runs_here(options):
                with Progress(terminal):
                    result = build(config, beam_args, wait=wait)
            else:
                result = build(config, beam_args, wait=wait)
        except BaseException:
            if interruption.signum is None:
                raise
            end_child_processes()
    return result, interruption


def _end_interrupted(config: BuildConfig, interruption: Interruption, started: float) -> NoReturn:
    """Tidies up after an interrupted build, says what it finished, and ends the process."""
    from beam_tfrecord.early_start import wrote_nothing_yet
    from beam_tfrecord.output_lock import release_output

    if wrote_nothing_yet(config):
        # Stopped while its checks waited for a store: nothing to tidy, count or go on from
        # (but the lock of a local output, and the folder it made, where the checks took it).
        release_output(config.output, failed=True)
        stopped_before_starting(interruption.signum)

    # Tidying up and counting share one wait for a store that stopped answering.
    deadline = time.monotonic() + _TIDY_SECONDS
    answered = not _owns_output(config.output) or _within(
        _TIDY_SECONDS, lambda: _discard_partial_files(config.output)
    )
    if not answered:
        print(
            f"{_PROG}: the store did not answer in {_TIDY_SECONDS:g} s; what the build was "
            f"writing in {config.output} may be left (--resume removes it)",
            file=sys.stderr,
        )
    # The interrupted build kept the output locked until its workers and partial files
    # were gone (build()); the lock file goes too, for the next build to start clean.
    release_output(config.output)
    _report_interruption(
        _PROG,
        config,
        interruption,
        (interruption.at or time.monotonic()) - started,
        until=deadline if answered else None,
    )
    # Beam's threads (and a worker stuck in a read) must not hold the exit up. A process pool
    # a shard writer still holds has named semaphores, which a normal exit would unlink: left,
    # the resource tracker would unlink them and warn of a leak below the two lines above.
    release_named_semaphores()
    os._exit(interruption.exit_status)


def _finished(
    result,
    config: BuildConfig,
    options: argparse.Namespace,
    wait: bool,
    started: float,
    finished_before: list[str] | None,
) -> int:
    """Prints what became of a build that ended (or was submitted); its exit status."""
    from beam_tfrecord.beam.pipeline import SubmittedBuild

    if isinstance(result, SubmittedBuild):  # not finished: there is no manifest to read yet
        if wait and not result.dry_run and result.state != "TEMPLATE_WRITTEN":
            # Waited for, and ended otherwise than done (cancelled, say).
            print(f"{_PROG}: error: the job ended {result.state}", file=sys.stderr)
            return EXIT_FAILED
        print_submitted(result, config, template=getattr(options, "template_location", None))
        return EXIT_OK
    print_summary(
        result, config, seconds=time.monotonic() - started, finished_before=finished_before
    )
    verdict = of_published(result.manifest["inputs"])
    if not verdict.succeeded:
        report = posixpath.join(config.output, "report.jsonl")
        print(f"{_PROG}: error: {verdict.message(report)}", file=sys.stderr)
    return verdict.exit_code


@contextlib.contextmanager
def _naming_flags():
    """While the command reads its settings and runs its build, refusals name flags
    (`--overwrite`), not BuildConfig's fields (`overwrite=True`) as they do for a Python
    caller."""
    token = COMMAND_LINE.set(True)
    try:
        yield
    finally:
        COMMAND_LINE.reset(token)


def _publish_anyway_command(config: BuildConfig) -> str:
    """The command that publishes a build withdrawn for --max-skipped-fraction: the same, with
    --resume (which keeps its finished shards) and no bound on the inputs skipped."""
    argv, i = [], 0
    while i < len(sys.argv):
        arg = sys.argv[i]
        if arg == "--max-skipped-fraction":
            i += 2
            continue
        if not arg.startswith("--max-skipped-fraction="):
            argv.append(arg)
        i += 1
    if config.max_skipped_fraction is not None and len(argv) == len(sys.argv):
        argv.append("--max-skipped-fraction=1")  # the bound came from the YAML file
    return resume_command(argv)


def _owns_output(output: str) -> bool:
    """Whether the partial files in `output` may be this build's: it holds the folder's lock,
    or takes it now. Interrupted before it took it (while checking its inputs), it wrote
    nothing, and what is there belongs to the build that holds it. Object stores have no lock.
    """
    import fsspec

    from beam_tfrecord.output_lock import is_lockable, lock_output

    if not is_lockable(output):
        return True
    if not os.path.isdir(fsspec.core.url_to_fs(output)[1]):
        return False
    try:
        lock_output(output)  # kept as it is if this process holds it
    except ConfigError:
        return False
    return True


# How long an interrupted build waits for its output's store to answer while it tidies up and
# counts what it finished: a stop must end the process, even if the store has stopped answering.
_TIDY_SECONDS = 10.0


def _within(seconds: float, call) -> bool:
    """Runs call() on a thread of its own; whether it ended in `seconds`.

    A store that does not answer holds a call for ever (fsspec waits on its event loop with no
    time limit), and an interrupted build must end all the same: the thread is a daemon, and the
    process ends with `os._exit`. A second Ctrl-C stops the waiting at once.
    """
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except Exception as err:  # tidying up is best effort; the interruption is the news
            _LOG.warning("%s", err)
        finally:
            done.set()

    threading.Thread(target=run, name="tidy-up", daemon=True).start()
    try:
        return done.wait(seconds)
    except KeyboardInterrupt:
        return False


def _discard_partial_files(output: str) -> None:
    """What the stopped workers were half-way through writing goes; their finished shards stay.

    A worker stopped mid-shard (a thread of this process, or a process ended with it) cannot
    remove its own temporary file. On object stores there is none (an upload appears only once
    complete); the report's parts folder (`.report.tmp-parts`) goes on any store.
    """
    from beam_tfrecord.manifest import remove_temporaries
    from beam_tfrecord.report import remove_parts

    try:
        remove_temporaries(output)
        remove_parts(output)
    except OSError as err:
        _LOG.warning("could not remove the partial files in %s: %s", output, err)


def _finished_shards(output: str, since: float | None = None) -> tuple[int, int] | None:
    """How many finished shards (by their names) `output` holds, and of those how many were
    written before `since` (a time.time(); 0 when not asked, or when the store does not say
    when a shard was written); None if it cannot be listed."""
    shards = finished_shards(output)
    if shards is None:
        return None
    if since is None:
        return len(shards), 0
    # A second's grace for file systems that keep coarse times.
    older = [n for n, entry in shards.items() if (written_at(entry) or since) < since - 1.0]
    return len(shards), len(older)


def _report_interruption(
    prog: str, config: BuildConfig, interruption, seconds: float, until: float | None
) -> None:
    """One or two lines: what the interrupted build finished (counted if the store answers by
    `until`, a time.monotonic(); not asked when None), and the command that goes on."""
    from beam_tfrecord.manifest import MANIFEST_FILE, published_here

    if published_here(config.output):
        # Stopped after its manifest was written: the build is whole, only its summary and
        # last tidying were left. Saying "no manifest.json yet, --resume" would be untrue.
        print(
            f"{prog}: interrupted ({interruption.name}) after {seconds:.1f} s, once the build "
            f"was published: {config.output} holds it whole ({MANIFEST_FILE} is written); only "
            f"its summary was not printed. To check it: beam-tfrecord verify {config.output}",
            file=sys.stderr,
            flush=True,
        )
        return
    counted: list[tuple[int, int] | None] = []
    # With --overwrite the replaced build's shards stay until this one publishes: they are not
    # what this one finished (its --resume removes those of another plan).
    since = time.time() - seconds if config.overwrite else None
    if until is not None:
        _within(
            max(0.0, until - time.monotonic()),
            lambda: counted.append(_finished_shards(config.output, since)),
        )
    finished = counted[0] if counted else None
    if finished is not None:
        shards, older = finished
        kept = f"{count(shards - older, 'finished shard')} kept in {config.output}"
        if older:
            kept += f" (beside {count(older, 'shard')} of the build it was replacing)"
    else:
        kept = f"the finished shards kept in {config.output}"
    print(
        f"{prog}: interrupted ({interruption.name}) after {seconds:.1f} s; {kept}, "
        "no manifest.json yet.\n"
        f"To go on: {resume_command(sys.argv)}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
