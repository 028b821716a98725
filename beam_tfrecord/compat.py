"""Every reliance on a private or version-specific part of Python or Beam that needs no Beam
import, each with the versions it was checked on; tests/test_compat.py fails when one breaks.

The reliances that need Beam's objects are in `beam_tfrecord.beam.compat`, which imports Beam.
What is here is imported by the command line before Beam is (or without it): Python's own
privates, and the names and texts of Beam's that the package matches as strings.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import signal
import sys
import time
import types

__all__ = [
    "BEAM_CHECKED",
    "BEAM_DATAFLOW_JOB_LOGGER",
    "BEAM_IMPORT_NOISE",
    "BEAM_MONGODB_LOGGER",
    "BEAM_MONGODB_NOISE",
    "BEAM_TRANSFORM_ERROR_LOGGER",
    "BEAM_TYPE_HINT_LOGGER",
    "BEAM_WORKER_RECORDS_LOGGER",
    "PYTHON_CHECKED",
    "SpawnWithoutMain",  # noqa: F822 (defined when first asked for)
    "end_fork_server",
    "import_beam_for_one_local_build",
    "option_strings",
    "process_running",
    "release_named_semaphores",
    "reuse_image_memory",
    "run_exit_handlers",
    "subcommand_parsers",
    "wait_for_exit",
]

# The versions each reliance here and in `beam.compat` was checked on, from the first release
# it was seen on to the last (tests/test_compat.py checks them again on whatever is installed).
# pyproject.toml allows apache-beam 2.60 and later, Python 3.10 and later: releases outside
# these ranges are unchecked until that test has passed on them.
BEAM_CHECKED = ("2.77.0", "2.77.0")
PYTHON_CHECKED = ("3.11", "3.11")


# --- Python's standard library -------------------------------------------------------------


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string `parser` takes (`-v`, `--verbose`, ...), in declaration order.

    argparse keeps them in the private `_option_string_actions`; there is no public way to ask
    (checked: PYTHON_CHECKED). Used for "did you mean" suggestions, ours and Beam's flags alike.
    """
    return list(parser._option_string_actions)


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of `parser`'s subcommands, by name (`add_subparsers`' choices).

    argparse keeps its actions in the private `_actions`, and the subcommands' action is the
    private `_SubParsersAction` (checked: PYTHON_CHECKED).
    """
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def run_exit_handlers() -> None:
    """Runs the atexit handlers now, as the interpreter would at its exit (each once).

    `atexit._run_exitfuncs` is private (checked: PYTHON_CHECKED); a process ended by `os._exit`,
    to skip the interpreter's teardown, runs its handlers through it.
    """
    atexit._run_exitfuncs()


def end_fork_server(seconds: float = 5.0) -> None:
    """Ends multiprocessing's fork server of this process, if it started one, and reaps it.

    The server reaps the processes it forked; reaped by this process, its CPU time and theirs
    count as this process's children's, which `time` and the parent's `getrusage` report, as
    spawned processes' do. Left to end on its own when this process exits (it watches a pipe),
    it is no one's child by then, and every worker's CPU goes unreported. Called once the
    processes it forked have ended (their pool closed: each one's end came from the server,
    which had reaped it), so nothing is left for it to do: it is ended by SIGTERM, and killed
    if it has not ended within `seconds`.

    The server's pid and the write end of the pipe it watches are `ForkServer`'s private
    `_forkserver_pid` and `_forkserver_alive_fd` (checked: PYTHON_CHECKED); cleared, the next
    process forked starts a new server.
    """
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    # Ended by its pipe alone, it would leave as a Python program does, freeing every module it
    # imported one at a time: 40 ms of the end of every build, for nothing it holds. SIGTERM,
    # which it takes as the system's default does, ends it at once (`_start_fork_server` in
    # `shard_processes`), and what it reaped is counted all the same. Sent before its pipe is
    # closed: the other way round, a server woken at once by the closing was already on its
    # way out as a program when the signal came.
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(OSError):
        os.close(server._forkserver_alive_fd)
    server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
    deadline = time.monotonic() + seconds
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.001)
    except ChildProcessError:  # reaped already
        return


def release_named_semaphores() -> None:
    """Unlinks the named semaphores of this process's multiprocessing locks and queues (a
    process pool's) now, as the first step of a normal exit does, even of those still in use.

    A process that ends by `os._exit` skips that step: the resource tracker then unlinks them
    itself and says so on stderr ("leaked semaphore objects"). The step is multiprocessing's
    private `util._run_finalizers(0)` (checked: PYTHON_CHECKED): the finalizers of exit
    priority 0 and above, which unlink semaphores and close queues without waiting on anything;
    the ones that join threads have lower priorities and do not run.
    """
    import multiprocessing.util

    multiprocessing.util._run_finalizers(0)


# --- Pillow and the C library's allocator -------------------------------------------------

# Pillow keeps no freed image memory by default, and glibc's malloc hands memory back to the
# system as soon as a few hundred KB are free at the top of its heap: each decode, resize and
# encode of a photograph then maps fresh pages and faults on every one of them (1.2 MB for a
# 640x480 image decoded). A resized build's worker processes took about a million page faults
# for 1,500 images each, and twice the plain loop's system time. A process of the tool's own
# keeps freed image memory for its next images:
# - Pillow keeps up to PILLOW_BLOCKS freed blocks of at most PILLOW_BLOCK_SIZE (32 MB): 3% less
#   CPU and wall time on 3,000 JPEGs resized (farm-bench, both orders);
# - glibc serves requests up to MALLOC_MMAP_THRESHOLD from its heap, and keeps up to
#   MALLOC_TRIM_THRESHOLD free at its top: about 5% less again (resized, and 15,000 JPEGs
#   kept as they are), system time 0.58 against 1.39 s.
PILLOW_BLOCKS = 8
PILLOW_BLOCK_SIZE = 4 * 1024 * 1024
MALLOC_MMAP_THRESHOLD = 4 * 1024 * 1024
MALLOC_TRIM_THRESHOLD = 32 * 1024 * 1024
# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# What a user sets these with, which is then theirs to decide.
_PILLOW_ENVIRONMENT = ("PILLOW_BLOCKS_MAX", "PILLOW_BLOCK_SIZE")
_MALLOC_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def reuse_image_memory() -> None:
    """Has this process keep freed image memory for its next images (see above): Pillow's block
    allocator (what Pillow's `PILLOW_BLOCKS_MAX` and `PILLOW_BLOCK_SIZE` set when it is imported;
    `Image.core`'s setters are what it calls with them, checked on Pillow 12) and, with glibc,
    malloc's thresholds (`mallopt`, what `MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_`
    set). Settings the environment gives either are left as they are; so is an allocator other
    than glibc's."""
    if not any(name in os.environ for name in _PILLOW_ENVIRONMENT):
        from PIL import Image

        Image.core.set_block_size(PILLOW_BLOCK_SIZE)
        Image.core.set_blocks_max(PILLOW_BLOCKS)
    if not any(name in os.environ for name in _MALLOC_ENVIRONMENT):
        mallopt = _glibc_mallopt()
        if mallopt is not None:
            mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)
            mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD)


def process_running(pid: int) -> bool:
    """Whether process `pid` is running (a zombie counts): signal 0 reaches it. One of another
    user's, which may have taken the number of one of ours that ended, counts as not."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def wait_for_exit(pid: int) -> None:
    """Returns once process `pid` (not a child of this one) has ended: a pidfd becomes readable
    then (Linux 5.3 and newer, Python 3.9 and newer); elsewhere, asked each second."""
    import select

    try:
        ended = os.pidfd_open(pid)
    except (AttributeError, OSError):
        while process_running(pid):
            time.sleep(1.0)
        return
    try:
        select.select([ended], [], [])
    finally:
        os.close(ended)


def _glibc_mallopt():
    """glibc's `mallopt`, or None where the C library is another (musl, macOS, Windows)."""
    import ctypes

    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return None
    except (ValueError, OSError, AttributeError):  # no such name here
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def _spawn_without_main() -> None:
    """Defines `SpawnWithoutMain`, a spawn context whose processes do not import the launcher's
    `__main__` again, and its process class, as this module's own (a spawned process finds the
    class by its name here).

    Spawn runs the launcher's main module again in each process (a notebook's, a test
    runner's, a program's), which may be slow, fail, or start work of its own; processes that
    run only this package's functions need none of it. It overrides `SpawnProcess._Popen`,
    the private hook that starts the process (checked: PYTHON_CHECKED). Defined when first
    asked for: multiprocessing costs the command line's start some 12 ms it mostly does not use.
    """
    import multiprocessing.context

    class _ProcessWithoutMain(multiprocessing.context.SpawnProcess):
        @staticmethod
        def _Popen(process_obj):
            # What a spawned process imports is read from sys.modules["__main__"] as it
            # starts: a bare module there names nothing to import.
            main = sys.modules["__main__"]
            sys.modules["__main__"] = types.ModuleType("__main__")
            try:
                return multiprocessing.context.SpawnProcess._Popen(process_obj)
            finally:
                sys.modules["__main__"] = main

    class SpawnWithoutMain(multiprocessing.context.SpawnContext):
        Process = _ProcessWithoutMain

    for cls in (_ProcessWithoutMain, SpawnWithoutMain):
        cls.__qualname__ = cls.__name__
        globals()[cls.__name__] = cls


def __getattr__(name: str):
    if name in ("SpawnWithoutMain", "_ProcessWithoutMain"):
        _spawn_without_main()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- Beam's import ---------------------------------------------------------------------------

# Modules that Beam's own import loads, each behind an `except ImportError`, that a build on
# this machine never uses: Beam's file systems for object stores (a build reads and writes them
# through fsspec), its BigQuery and Pub/Sub connectors (loaded with the first), the Dataflow
# API's client, the Google API client library (apitools), Arrow (for Beam's Arrow type hints
# and Parquet) and MongoDB's driver (for Beam's MongoDB connector, about 70 ms of CPU alone).
# Together about half of the 1.2 to 2 s of CPU that `import apache_beam` takes, all in the
# launcher, while the worker processes need those cores (checked: BEAM_CHECKED, where each is
# imported as said).
BEAM_UNUSED_BY_A_LOCAL_BUILD = (
    "apache_beam.io.gcp.gcsfilesystem",
    "apache_beam.io.aws.s3filesystem",
    "apache_beam.io.azure.blobstoragefilesystem",
    "apache_beam.io.gcp.bigquery",
    "google.cloud.dataflow",
    "apitools",
    "pyarrow",
    "bson",
    "pymongo",
)


def import_beam_for_one_local_build() -> None:
    """Imports Beam without `BEAM_UNUSED_BY_A_LOCAL_BUILD`, for a process that runs one local
    build and ends (`beam-tfrecord build` without Beam flags): Beam stays without them for the
    process's life (no gs:// in Beam's `FileSystems`, no `beam.io.ReadFromBigQuery`, no
    Dataflow job states), so nothing else may call this. Does nothing once Beam is imported.

    A module set to None in `sys.modules` is one whose import raises ModuleNotFoundError, which
    is what Beam expects of an extra not installed. A Beam whose import needs one of them is
    imported whole.
    """
    if "apache_beam" in sys.modules:
        return
    left_out = [name for name in BEAM_UNUSED_BY_A_LOCAL_BUILD if name not in sys.modules]
    for name in left_out:
        sys.modules[name] = None  # type: ignore[assignment]
    # Beam's MongoDB connector warns, as it is imported, that it found no driver.
    mongodb = logging.getLogger(BEAM_MONGODB_LOGGER)
    mongodb.addFilter(_without_mongodb_noise)
    try:
        import apache_beam
    except ImportError:
        for name in [n for n in sys.modules if n.split(".")[0] == "apache_beam"]:
            del sys.modules[name]
    finally:
        mongodb.removeFilter(_without_mongodb_noise)
        for name in left_out:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    import apache_beam  # noqa: F401  (done above, unless it needed what was left out)


# --- Beam's names and texts, matched as strings ----------------------------------------------

# The logger of Beam's Dataflow client: its "Created job with id: [...]" line is how
# schedulers (Airflow's Beam provider) find a submitted job.
BEAM_DATAFLOW_JOB_LOGGER = "apache_beam.runners.dataflow.internal.apiclient"
# The logger under which the DirectRunner's job service logs its worker processes' records
# again, at their own level.
BEAM_WORKER_RECORDS_LOGGER = "apache_beam.runners.portability.local_job_service"
# The logger of Beam's notes on string type hints ("Converting string literal type hint").
BEAM_TYPE_HINT_LOGGER = "apache_beam.typehints.native_type_compatibility"
# Where Beam logs an error a transform raised, before it raises it again.
BEAM_TRANSFORM_ERROR_LOGGER = "apache_beam.runners.common"
# What Beam logs to the root logger as it is imported without its Google Cloud extras: the
# BigQuery client it does not need here cannot be loaded.
BEAM_IMPORT_NOISE = "apitools not found"
# The logger of Beam's MongoDB connector, and what it logs as it is imported without MongoDB's
# driver (`import_beam_for_one_local_build` leaves the driver out).
BEAM_MONGODB_LOGGER = "apache_beam.io.mongodbio"
BEAM_MONGODB_NOISE = "Could not find a compatible bson package"


def _without_mongodb_noise(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(BEAM_MONGODB_NOISE)
