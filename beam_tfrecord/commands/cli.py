"""The `beam-tfrecord` command: one entry point, one module per subcommand."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import itertools
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

from beam_tfrecord.commands.console import quiet_libraries, stop_on_signals
from beam_tfrecord.commands.starting import started
from beam_tfrecord.compat import option_strings, run_exit_handlers, subcommand_parsers
from beam_tfrecord.wording import flag_meant, nearest

# Subcommand name -> module exposing `add_arguments(parser)` and `run(args, extra) -> int`.
# Modules are imported only when their command runs, so `inspect` never pays for importing Beam.
_COMMANDS = {
    "build": ("beam_tfrecord.commands.build", "convert a folder of images into TFRecord shards"),
    "inspect": ("beam_tfrecord.commands.inspect", "show the records of TFRecord files"),
    "verify": ("beam_tfrecord.commands.verify", "check every record of TFRecord files"),
    "spec": ("beam_tfrecord.commands.spec", "print the feature spec that parses a dataset"),
    "preview": ("beam_tfrecord.commands.preview", "draw a contact sheet of a dataset's images"),
}


_DESCRIPTION = (
    "Turn folders of JPEG/PNG images (local, gs://, s3://) into sharded TFRecord files of "
    "tf.train.Example records, with Apache Beam; check, inspect and preview the result."
)


class _Parser(argparse.ArgumentParser):
    """Refuses bad arguments in one line, as every other error of the tool is given."""

    def error(self, message: str):
        missing = re.fullmatch(r"argument (-[-\w]+)(?:/-[-\w]+)*: expected one argument", message)
        if missing and _followed_by_a_dash(missing[1], sys.argv[1:]):
            # argparse takes a value that starts with '-' (`--min-shard-size -5MB`) for a flag.
            message += f"; a value that starts with '-' is given as {missing[1]}=VALUE"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _followed_by_a_dash(flag: str, argv: Sequence[str]) -> bool:
    """Whether `flag` is followed in `argv` by an argument that starts with '-'."""
    return any(arg == flag and after.startswith("-") for arg, after in itertools.pairwise(argv))


def _command_word(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first argument that is not a flag (the tool's own flags,
    --help and --version, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    from beam_tfrecord import __version__

    parser = _Parser(prog="beam-tfrecord", description=_DESCRIPTION, allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _command_word(argv)
    for name, (module_name, help_text) in _COMMANDS.items():
        # No command takes a flag abbreviated (`inspect --rec 1` for --records): build cannot,
        # where one could swallow a Beam flag, and a habit one command took, another refused.
        sub_parser = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        if name == chosen:  # only the command that runs is imported
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_module=module, _parser=sub_parser)
    return parser


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """The command line's own parser (under "") and each command's, every argument declared:
    what the reference docs are generated from (docs/hooks/reference.py)."""
    parsers: dict[str, argparse.ArgumentParser] = {"": _parser([])}
    for name in _COMMANDS:
        top = _parser([name])
        parsers[name] = subcommand_parsers(top)[name]
    return parsers


def _unrecognized(extra: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """Why a command refuses the arguments it does not know: each unknown flag, with the flag
    a typo of it meant; other arguments as argparse names them."""
    flags = option_strings(parser)
    unknown = [arg.split("=", 1)[0] for arg in extra if arg.startswith("-") and arg != "-"]
    if not unknown:
        return f"unrecognized arguments: {' '.join(extra)}"
    meant = {flag: flag_meant(flag, flags) for flag in unknown}
    if len(unknown) == 1:
        flag = unknown[0]
        return f"{flag}: no such flag" + (f"; did you mean {meant[flag]}?" if meant[flag] else "")
    named = [flag + (f" (did you mean {meant[flag]}?)" if meant[flag] else "") for flag in unknown]
    return f"no such flags: {', '.join(named)}"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(argv)
    chosen = _command_word(argv)
    if chosen is not None and chosen not in _COMMANDS:
        meant = nearest(chosen, _COMMANDS)
        parser.error(
            f"{chosen!r} is not a command; "
            + (f"did you mean {meant!r}?" if meant else f"the commands: {', '.join(_COMMANDS)}")
        )
    # Only `build` passes unknown flags on (to Beam's PipelineOptions); the others refuse them.
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "build":
        args._parser.error(_unrecognized(extra, args._parser))
    if args.command != "build":  # which sets up its own logging
        quiet_libraries(sys.stderr)
    # SIGTERM stops a command as Ctrl-C does, and says so: by default it would end the process
    # without a word. And a Ctrl-C that lands in an import's lock, whose KeyboardInterrupt
    # Python prints as "Exception ignored" and drops (a build then ran on to its end, exit
    # status 0), is raised again once the import is done. A build replaces this with its own
    # handling once it starts.
    with stop_on_signals((signal.SIGINT, signal.SIGTERM)) as stopped:
        try:
            started()  # a Ctrl-C from here on is the command's to handle
            status = int(args._module.run(args, extra) or 0)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`| head`): what is left to print has no one to read it.
            _silence_stdout()
            return 141  # 128 + SIGPIPE, as a tool killed by the closed pipe would
        except KeyboardInterrupt:  # Ctrl-C outside a build's own handling (which says more)
            print(f"beam-tfrecord {args.command}: interrupted", file=sys.stderr)
            return stopped.exit_status if stopped.signum else 128 + signal.SIGINT
        except Exception as err:
            from beam_tfrecord.storage import is_store_refusal, store_reason

            if isinstance(err, StdoutFailed):
                # `> /dev/full`: the command's own output cannot be written, which is not the
                # build's output disk being full.
                _silence_stdout()
                print(
                    f"beam-tfrecord {args.command}: error: cannot write to standard output: "
                    f"{err.strerror or err}",
                    file=sys.stderr,
                )
                return 1
            if _from_fsspec_registry(err):
                # A URL no filesystem here opens (`foo://`, `az://` without adlfs): the user's
                # to fix, in one line naming it, as `spec`, `preview` and `build` name it.
                print(
                    f"beam-tfrecord {args.command}: error: {_refused_url(argv, err)}",
                    file=sys.stderr,
                )
                return 2
            if not is_store_refusal(err):
                raise
            # A store that cannot be asked (no credentials, a wrong endpoint) is the user's to
            # fix: one line, not the client library's traceback, naming the store's URL.
            from beam_tfrecord.locations import is_store_url

            url = next((a for a in argv if not a.startswith("-") and is_store_url(a)), None)
            where = f"{url}: " if url else ""
            print(
                f"beam-tfrecord {args.command}: error: {where}{store_reason(err)}",
                file=sys.stderr,
            )
            return 1
        finally:
            _end_processes_not_taken()
    return status


class StdoutFailed(OSError):
    """Standard output could not be written (`> /dev/full`): not the build's own output."""


class _GuardedStdout:
    """Standard output, whose write errors are StdoutFailed: told apart from the same error on
    the build's output folder (`No space left on device`, either way)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        with _as_stdout_failure():
            return self._stream.write(text)

    def flush(self) -> None:
        with _as_stdout_failure():
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _as_stdout_failure() -> Iterator[None]:
    """An OSError writing stdout, as StdoutFailed; a reader gone (`| head`) is handled as such."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as err:
        raise StdoutFailed(err.errno, err.strerror) from err


def _from_fsspec_registry(err: BaseException) -> bool:
    """Whether `err` is fsspec's refusal of a URL's protocol: raised where it looks protocols
    up (an unknown one, or one whose package is missing)."""
    if not isinstance(err, (ValueError, ImportError)) or err.__traceback__ is None:
        return False
    tb = err.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.endswith(os.path.join("fsspec", "registry.py"))


def _refused_url(argv: Sequence[str], err: BaseException) -> str:
    """fsspec's refusal of a URL's protocol, as the commands that check first word it
    (`locations.protocol_problem`): the first argument it refuses, and why; fsspec's own
    words where no argument is the one."""
    from beam_tfrecord.locations import protocol_problem

    for arg in argv:
        if arg.startswith("-"):
            continue
        problem = protocol_problem(arg)
        if problem is not None:
            return f"{arg}: {problem}"
    return str(err)


def _end_processes_not_taken() -> None:
    """Ends worker processes a build started before Beam's import that its pipeline never took
    (the command stopped first: a Ctrl-C during the import), and the shards they write: else
    the exit would wait for every shard of their head start."""
    processes = sys.modules.get("beam_tfrecord.shard_processes")
    if processes is not None:
        processes.discard_started()


def entry() -> None:
    """The `beam-tfrecord` executable: runs the command, then ends the process (`exit_process`)."""
    _open_closed_streams()
    exit_process(main())


def _open_closed_streams() -> None:
    """A command started with stdout or stderr closed (`>&-`) has None there: what it would
    print goes nowhere, as to /dev/null, rather than failing on the first print. And an error
    writing to stdout is told apart from one writing the build (`_GuardedStdout`). A character
    the stream's encoding lacks (a class `café` under PYTHONIOENCODING=ascii) is written as an
    escape, `caf\\xe9`, as Python writes it on stderr, not a UnicodeEncodeError's traceback."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  # for the life of the process
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    sys.stdout = _GuardedStdout(sys.stdout)


def exit_process(status: int) -> None:
    """Ends the process with `status` as `sys.exit` would, less the interpreter's teardown.

    That teardown frees every module and object one at a time: with Beam loaded, about half a
    second after a build has finished, for nothing a finished command needs. What an exit must
    still do is done: atexit handlers run (logging's flush, multiprocessing's clean-up) and
    stdout and stderr are flushed. Another thread still running (not a daemon) would be waited
    for by `sys.exit`, so then it is `sys.exit`.
    """
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and not t.daemon for t in others):
        sys.exit(status)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe or stream has no one left to read what it holds.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _silence_stdout() -> None:
    """Points stdout at /dev/null, so that the interpreter's last flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    entry()
