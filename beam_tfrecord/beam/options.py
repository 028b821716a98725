"""Checks the flags `build` passes to Beam, before anything runs or is written.

A flag that is neither the tool's nor one of Beam's pipeline options is refused (with the nearest
valid flag), and so is a Beam option with a bad value or a runner Beam does not know: Beam itself
would drop the first with a log line, and fail on the others with a traceback after the output
folder was created.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from beam_tfrecord.beam.compat import OptionRefused, beam_flags, beam_option_parser
from beam_tfrecord.compat import option_strings
from beam_tfrecord.config import ConfigError
from beam_tfrecord.locations import has_protocol
from beam_tfrecord.wording import flag_meant, nearest

__all__ = ["FlagError", "beam_flag_names", "check_beam_args", "check_job_service", "runner_name"]


class FlagError(ConfigError):
    """A flag refused with a message of its own (argparse's names the flag already): `message`
    is the whole of it, and `setting` names the flag or setting refused."""

    def __init__(self, setting: str, message: str):
        ValueError.__init__(self, message)
        self.setting = setting
        self.message = message

    def for_python(self) -> FlagError:
        """As it is: the flags it names are Beam's, given as flags from Python too."""
        return self


def beam_flag_names() -> list[str]:
    """Every `--flag` Beam's pipeline options know."""
    return sorted(beam_flags())


def _suggest(flag: str, candidates: Iterable[str]) -> str:
    close = nearest(flag, candidates)
    return f"; did you mean {close}?" if close else ""


def check_beam_args(
    extra: Sequence[str], own_flags: Iterable[str], *, settings: Iterable[str] = ()
) -> argparse.Namespace:
    """Refuses any flag neither ours nor Beam's, any bad option value and any unknown runner.

    Args:
        extra: the arguments the tool's own parser did not take.
        own_flags: the tool's own flags, for suggestions.
        settings: the build's setting names, where Beam's flags come apart from the build's
            config (the library's `build`): such a flag is named as the setting it is.

    Returns:
        Beam's options, parsed.

    Raises:
        ConfigError: naming the flag, with the nearest valid flag for an unknown one.
    """
    parser = beam_option_parser()
    try:
        known, unknown = parser.parse_known_args(list(extra))
    except OptionRefused as err:
        raise FlagError("beam_options", str(err).replace("argument ", "", 1)) from None
    for arg in unknown:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("-"):
            raise FlagError("beam_options", _unexpected(unknown))
        setting = flag.lstrip("-").replace("-", "_")
        if setting in set(settings):
            raise FlagError(
                setting,
                f"{flag} is a setting of the build, not a Beam option: give it in the "
                f"build's config (BuildConfig.from_settings({{{setting!r}: ...}}))",
            )
        candidates = [*own_flags, *(s for s in option_strings(parser) if s.startswith("--"))]
        raise _unknown_flag(flag, candidates)
    name = runner_name(known)
    if name is not None:
        _check_runner(name)
    _check_values(known, name)
    return known


def _check_values(known: argparse.Namespace, runner: str | None) -> None:
    """Refuses the option values Beam takes at parsing and fails on only once the pipeline
    runs, with a traceback (after the output folder was made)."""
    workers = getattr(known, "direct_num_workers", None)
    if workers is not None and workers < 0:
        raise FlagError(
            "direct_num_workers",
            f"--direct_num_workers: {workers} is not a number of workers (0: one a core)",
        )
    if (runner or "").lower() in ("portablerunner", "portable"):
        endpoint = getattr(known, "job_endpoint", None)
        if not endpoint:
            raise FlagError(
                "job_endpoint",
                f"--runner={runner} needs --job_endpoint, the address of the job service to "
                "submit to (host:port); or name the runner behind it (--runner=FlinkRunner, "
                "SparkRunner)",
            )


# How long a job service may take to accept a connection. Beam's own wait is
# --job_server_timeout (300 s), with no word meanwhile: a build given a wrong address sat
# silent for five minutes and then ended in a traceback.
_CONNECT_TIMEOUT = 10.0


def check_job_service(runner: str, options: Mapping[str, Any]) -> None:
    """Refuses, before anything is written, what a runner would fail on only once the job is
    submitted, in a traceback: a job server's jar (--flink_job_server_jar,
    --spark_job_server_jar) that is not a file here, where the runner starts it; and a portable
    runner's --job_endpoint that no server answers at, in one connection (Beam's gRPC channel
    would retry it, silently, for --job_server_timeout). Beam's own in-process job service
    ("embed") is not looked for."""
    for flag in ("flink_job_server_jar", "spark_job_server_jar"):
        jar = options.get(flag)
        if jar and not has_protocol(jar) and not os.path.isfile(jar):
            raise FlagError(
                flag,
                f"--{flag}: {jar!r} is not a file (give the job server's jar, or an http(s) URL "
                "to fetch it from; without the flag Beam downloads the one of its version)",
            )
    endpoint = options.get("job_endpoint")
    if runner.lower() not in ("portablerunner", "portable") or not endpoint or endpoint == "embed":
        return
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")  # [::1]:8099
    if not host or not port.isdigit():
        raise FlagError(
            "job_endpoint",
            f"--job_endpoint: {endpoint!r} is not an address (host:port, such as localhost:8099)",
        )
    try:
        socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT).close()
    except OSError as err:
        if isinstance(err, socket.gaierror):
            why = f"no host is called {host!r}"
        elif isinstance(err, TimeoutError):
            why = f"no answer in {_CONNECT_TIMEOUT:.0f} s"
        else:
            why = err.strerror or str(err)
            why = why[:1].lower() + why[1:]
        raise FlagError(
            "job_endpoint",
            f"--job_endpoint: no job service answers at {endpoint!r} ({why}); start it first "
            "(the Flink or Spark job server), or check the address",
        ) from None


def _looks_like_path(arg: str) -> bool:
    return (
        any(c in arg for c in "/\\*?[") or bool(posixpath.splitext(arg)[1]) or os.path.lexists(arg)
    )


def _unexpected(unknown: Sequence[str]) -> str:
    """One line on the first argument no flag takes: paths most often come from a pattern the
    shell expanded (`--input samples/**` unquoted), whose first path went to --input."""
    extra = [arg for arg in unknown if not arg.startswith("-")]
    more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
    message = f"unexpected argument {extra[0]!r}{more}"
    if any(_looks_like_path(arg) for arg in extra):
        message += (
            "; if the shell expanded a pattern, quote it so that it does not "
            "(--input 'DIR/**'), or give --input once per path"
        )
    return message


def _unknown_flag(flag: str, candidates: Iterable[str]) -> ConfigError:
    meant = flag_meant(flag, candidates)
    hint = f"; did you mean {meant}?" if meant else ""
    return FlagError(flag.lstrip("-"), f"{flag}: no such flag, of this tool or of Beam{hint}")


def runner_name(options: argparse.Namespace) -> str | None:
    runner = getattr(options, "runner", None)
    if runner is None or isinstance(runner, str):
        return runner
    return type(runner).__name__


def _check_runner(name: str) -> None:
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners.runner import create_runner

    try:
        create_runner(name)
    except (ValueError, ImportError, AttributeError) as err:
        known = sorted({path.rsplit(".", 1)[-1] for path in StandardOptions.ALL_KNOWN_RUNNERS})
        if isinstance(err, ImportError):
            message = f"runner {name!r} is not available here: {err}"
        else:
            hint = _suggest(name, known) or f" (known: {', '.join(known)})"
            message = f"Beam has no runner {name!r}{hint}"
        raise ConfigError("runner", message) from None


# Runners whose workers run on this machine: threads of this process, or its child processes.
_LOCAL_RUNNERS = frozenset(
    {"directrunner", "direct", "switchingdirectrunner", "bundlebaseddirectrunner"}
)


def runs_here(options: argparse.Namespace) -> bool:
    """Whether the build's workers run on this machine (so they can report progress here)."""
    name = runner_name(options)
    return name is None or name.lower() in _LOCAL_RUNNERS


# A plain local build's DirectRunner mode: in this process, its checks and writes on threads of
# their own as many at once as there are cores. Measured against Beam's multi_threading and
# multi_processing modes on 2,000 images: see CHANGELOG.md ("A local build's parallelism").
LOCAL_RUNNING_MODE = "in_memory"


def local_defaults(extra: Sequence[str], options: argparse.Namespace) -> list[str]:
    """Beam's flags with this tool's defaults for a plain local build added.

    Unless the runner is another one, or the running mode or worker count was given, a local
    build runs in LOCAL_RUNNING_MODE, said explicitly so that a change of Beam's default does
    not change it.
    """
    args = list(extra)
    if not runs_here(options):
        return args
    given = {arg.split("=", 1)[0] for arg in args}
    if given & {"--direct_running_mode", "--direct_num_workers"}:
        return args
    return [*args, f"--direct_running_mode={LOCAL_RUNNING_MODE}"]
