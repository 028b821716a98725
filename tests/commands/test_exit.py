"""How the command ends its process: as sys.exit would, without the interpreter's teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# Output to a pipe buffered, as it is by default: what is left to flush at exit is the point.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_ENV,
    )


def test_exit_process_keeps_the_status_flushes_output_and_runs_atexit_handlers():
    done = _run(
        """
        import atexit, sys
        from beam_tfrecord.commands.cli import exit_process
        atexit.register(lambda: print("atexit ran"))
        print("buffered", end=" ")  # a pipe: block-buffered, still in memory
        sys.stderr.write("to stderr")
        exit_process(3)
        print("not reached")
        """
    )
    assert done.returncode == 3
    assert done.stdout == "buffered atexit ran\n"
    assert done.stderr == "to stderr"


def test_exit_process_waits_for_a_thread_still_running_as_sys_exit_would():
    done = _run(
        """
        import threading, time
        from beam_tfrecord.commands.cli import exit_process
        def late():
            time.sleep(0.5)
            print("thread finished")
        threading.Thread(target=late).start()
        exit_process(4)
        """
    )
    assert done.returncode == 4
    assert done.stdout == "thread finished\n"


def test_exit_process_says_nothing_when_its_reader_has_gone():
    # `true` exits without reading: the last flush meets a closed pipe, as after `| head`.
    done = subprocess.run(
        f"{sys.executable} -c 'import time; from beam_tfrecord.commands.cli import exit_process; "
        f'print("x" * 100, end=""); time.sleep(0.3); exit_process(0)\' | true',
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        env=_ENV,
    )
    assert done.stderr == ""
