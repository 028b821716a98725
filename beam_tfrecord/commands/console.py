"""What a person at the terminal sees of a build: Beam's own output kept out of the way, and
Ctrl-C (SIGINT) or SIGTERM ending it cleanly, child workers included."""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from beam_tfrecord.compat import (
    BEAM_DATAFLOW_JOB_LOGGER,
    BEAM_TYPE_HINT_LOGGER,
    BEAM_WORKER_RECORDS_LOGGER,
)

__all__ = [
    "Interruption",
    "again_command",
    "configure_logging",
    "end_child_processes",
    "quiet_libraries",
    "resume_command",
    "stop_on_signals",
    "terminal_stream",
]


_SHOWN = ("beam_tfrecord", BEAM_DATAFLOW_JOB_LOGGER)


def configure_logging(stream: TextIO, verbose: bool) -> None:
    """Our own log lines to `stream`; everything else's only with `verbose`.

    Quiet: warnings of this tool and nothing of Beam, gRPC or the storage libraries (their
    retries and internals mean nothing to a person building a dataset). Verbose: everything at
    INFO, and this tool's per-shard lines (DEBUG).
    """
    root = logging.getLogger()
    handler = _our_handler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if not verbose:
        handler.addFilter(lambda record: record.name.startswith(_SHOWN))
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("beam_tfrecord").setLevel(logging.DEBUG if verbose else logging.INFO)
    # Beam sets levels of its own on some of its loggers; quiet means none of them print...
    logging.getLogger("apache_beam").setLevel(logging.INFO if verbose else logging.CRITICAL)
    # ...but for the line that names a submitted Dataflow job ("Created job with id: [...]"),
    # by which schedulers (Airflow's Beam provider) find the job.
    logging.getLogger(BEAM_DATAFLOW_JOB_LOGGER).setLevel(logging.INFO)
    # Worker processes send their records to the launcher, which logs them again under this
    # logger at their own level: verbose shows our workers' per-shard lines (DEBUG) too.
    logging.getLogger(BEAM_WORKER_RECORDS_LOGGER).setLevel(
        logging.DEBUG if verbose else logging.CRITICAL
    )
    # A line per string annotation of ours ("Converting string literal type hint to Any"), 30
    # of them before a build starts: Beam's bookkeeping, no help to the reader of `-v`.
    logging.getLogger(BEAM_TYPE_HINT_LOGGER).setLevel(logging.WARNING)


def quiet_libraries(stream: TextIO) -> None:
    """For the commands other than build: this tool's warnings, as bare lines, and nothing the
    storage libraries log.

    With no handler set, Python prints every warning and error logged to stderr, and gcsfs logs
    its last failed retry as an error with the whole traceback: `verify` of a shard the store
    would not give printed it above verify's own one-line verdict.
    """
    handler = _our_handler(stream)
    handler.setLevel(logging.WARNING)
    handler.addFilter(lambda record: record.name.startswith("beam_tfrecord"))
    logging.getLogger().addHandler(handler)


def _our_handler(stream: TextIO) -> logging.Handler:
    """A handler to `stream`, in place of the one an earlier call added to the root logger."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_beam_tfrecord", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler._beam_tfrecord = True  # type: ignore[attr-defined]
    return handler


@contextlib.contextmanager
def terminal_stream(quiet: bool, expected: tuple[type, ...] = ()) -> Iterator[TextIO]:
    """Yields a stream to the real stderr; while quiet, file descriptor 2 goes to a log file.

    Beam's worker processes inherit descriptor 2, and gRPC and Beam print to it directly, so
    only redirecting the descriptor keeps them quiet. The log file is kept (and named) when
    the block raises anything but an interruption or an `expected` error and something was
    written to it; it is removed otherwise.
    """
    if not quiet:
        yield sys.stderr
        return
    sys.stderr.flush()
    saved = os.dup(2)
    stream = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in the finally below)
        prefix="beam-tfrecord-", suffix=".log", delete=False
    )
    os.dup2(log.fileno(), 2)
    keep = False
    try:
        yield stream
    except (KeyboardInterrupt, SystemExit, *expected):
        raise
    except BaseException:
        keep = True
        raise
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        log.close()
        with contextlib.suppress(OSError):
            stream.flush()
        if keep and os.path.getsize(log.name) > 0:
            print(f"(Beam's own output is in {log.name})", file=sys.stderr)
        else:  # nothing worth pointing to: an empty log is no lead
            with contextlib.suppress(OSError):
                os.unlink(log.name)


class Interruption:
    """Which signal, if any, asked the build to stop."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at: float | None = None  # time.monotonic() when it came

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    @property
    def exit_status(self) -> int:
        return 128 + (self.signum or 0)


@contextlib.contextmanager
def stop_on_signals(
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> Iterator[Interruption]:
    """While the block runs, `signals` raise KeyboardInterrupt in the main thread and are
    noted in the Interruption yielded (Beam may wrap the exception in one of its own)."""
    interruption = Interruption()
    if threading.current_thread() is not threading.main_thread():
        yield interruption
        return

    lost = threading.Event()  # a KeyboardInterrupt Python ignored, to be raised again
    ended = threading.Event()

    def handler(signum, frame):
        if interruption.signum is None or lost.is_set():
            if interruption.signum is None:
                interruption.signum = signum
                interruption.at = time.monotonic()
            lost.clear()
            raise KeyboardInterrupt

    def unraisable(args) -> None:
        # A signal that lands in code whose exceptions Python ignores (an import lock's or a
        # weak reference's callback) was printed as "Exception ignored in ..." with a
        # traceback, and its KeyboardInterrupt lost: it is raised again, quietly, once the
        # main thread has left that code.
        if issubclass(args.exc_type, KeyboardInterrupt) and interruption.signum is not None:
            lost.set()
            return
        hook(args)

    def raise_again() -> None:
        # On a thread of its own: from the hook, in the main thread, it would be lost again.
        while True:
            lost.wait()
            if ended.is_set():
                return
            _thread.interrupt_main(interruption.signum)
            time.sleep(0.01)

    # A signal this process was started ignoring stays ignored: a job started in the background
    # from a script (`cmd &`) ignores Ctrl-C, as its starter meant.
    previous = {
        s: signal.signal(s, handler) for s in signals if signal.getsignal(s) is not signal.SIG_IGN
    }
    hook, sys.unraisablehook = sys.unraisablehook, unraisable
    threading.Thread(target=raise_again, name="interrupts", daemon=True).start()
    try:
        yield interruption
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        sys.unraisablehook = hook
        ended.set()
        lost.set()


def _children(pid: int) -> list[int]:
    """Every descendant of `pid`, from /proc (Linux); none where there is no /proc."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found.extend(kids)
        frontier.extend(kids)
    return found


def end_child_processes(grace: float = 2.0) -> None:
    """Stops the worker processes this process started (SIGTERM, then SIGKILL after `grace`).

    Not multiprocessing's resource tracker: it ignores SIGTERM, by design, so that it outlives
    the processes it tracks and removes what they leave; it ends when this process does.
    """
    children = [pid for pid in _children(os.getpid()) if not _is_resource_tracker(pid)]
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while children and time.monotonic() < deadline:
        children = [pid for pid in children if _alive(pid)]
        time.sleep(0.05)
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.resource_tracker" in f.read()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (OSError, IndexError):
        return False


def _as_typed(path: str) -> str:
    """A program's name when the PATH finds this very program by it, else its whole path.

    The very program: the same file, in the same virtual environment. A venv's `python` is a
    link to the interpreter it was made from, which runs without the venv's packages when
    started by its own name."""
    import shutil

    name = os.path.basename(path)
    found = shutil.which(name)
    same = (
        found is not None
        and os.path.realpath(found) == os.path.realpath(path)
        and _environment_of(found) == _environment_of(path)
    )
    return name if same else path


def _environment_of(program: str) -> str | None:
    """The virtual environment a program started by this path runs in (the folder of its
    `pyvenv.cfg`, beside it or one up, as Python looks for it), or None."""
    folder = os.path.dirname(os.path.abspath(program))
    for place in (folder, os.path.dirname(folder)):
        if os.path.isfile(os.path.join(place, "pyvenv.cfg")):
            return os.path.realpath(place)
    return None


def resume_command(argv: list[str]) -> str:
    """The command line that goes on with an interrupted build: the same, with --resume."""
    args = [a for a in argv[1:] if a != "--overwrite"]
    if "--resume" not in args:
        args.append("--resume")
    return _command_line(argv, args)


def again_command(argv: list[str]) -> str:
    """The command line as it was run: for a build that wrote nothing and may pass if run again."""
    return _command_line(argv, argv[1:])


def _command_line(argv: list[str], args: list[str]) -> str:
    import shlex

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        program = [_as_typed(sys.executable), "-m", spec.name]
    else:
        program = [_as_typed(argv[0]) if argv and argv[0] else "beam-tfrecord"]
    return shlex.join([*program, *args])
