"""A Ctrl-C while the command is still starting: one line, not an import's traceback.

The `beam-tfrecord` script imports the command line before any of its code runs, and a command
imports more (Beam, for a build) before it can catch anything: an interrupt then was Python's
40-line traceback of whichever import it hit. Imported first of the command's modules, this
answers SIGINT and SIGTERM with the one line a stopped command gives, until `main` hands them
to the command's own handling. Only in the `beam-tfrecord` process: a program that imports the
command line (a test, a notebook) keeps its own handlers.
"""

import os
import signal
import sys

__all__ = ["is_the_command", "quiet_while_starting", "started", "stopped_before_starting"]

_COMMANDS = ("build", "inspect", "verify", "spec", "preview")
_installed: dict[int, object] = {}


def is_the_command() -> bool:
    """Whether this process is the `beam-tfrecord` command (the script, or `python -m
    beam_tfrecord.cli`), which runs one command and ends: not a program that imported it."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return program.startswith("beam-tfrecord") or sys.argv[0].endswith(
        os.path.join("beam_tfrecord", "cli.py")
    )


def _stopped(signum, frame) -> None:
    stopped_before_starting(signum)


def stopped_before_starting(signum: int) -> None:
    """Ends a command stopped by `signum` before it wrote anything, in one line."""
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    name = f"beam-tfrecord {command}" if command in _COMMANDS else "beam-tfrecord"
    # Nothing was written yet: no output to tidy, no buffered line worth flushing.
    os.write(2, f"{name}: interrupted\n".encode())
    os._exit(128 + signum)


def quiet_while_starting() -> None:
    """Installs the one-line stop for SIGINT and SIGTERM, in the command's own process only.

    A signal the process was started ignoring (`cmd &` from a script ignores Ctrl-C) stays
    ignored.
    """
    if not is_the_command():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            _installed[signum] = signal.signal(signum, _stopped)


def started() -> None:
    """Gives SIGINT and SIGTERM back to what they were: the command's own handling takes over."""
    while _installed:
        signum, previous = _installed.popitem()
        if signal.getsignal(signum) is _stopped:
            signal.signal(signum, previous)
