"""How the command ends its process: as sys.exit would, without the interpreter's teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

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


def test_an_interrupted_overwrite_counts_its_own_shards_not_the_replaced_builds(tmp_path, capsys):
    """The replaced build's shards stay until the new build publishes: a new user's interrupted
    --overwrite said "123 finished shards kept", 87 of them the old build's."""
    import datetime
    import types

    from beam_tfrecord.commands import build as command
    from beam_tfrecord.config import BuildConfig
    from beam_tfrecord.storage import written_at

    out = tmp_path / "out"
    out.mkdir()
    for index in range(3):  # the replaced build's, written an hour before
        old = out / f"out-train.tfrecord-{index:05d}-of-00003"
        old.write_bytes(b"")
        os.utime(old, (time.time() - 3600, time.time() - 3600))
    for index in range(2):  # this build's
        (out / f"out-train.tfrecord-{index:05d}-of-00005").write_bytes(b"")
    (out / ".out-train.tfrecord-00002-of-00005.tmp-1").write_bytes(b"")  # not finished

    assert command._finished_shards(str(out), since=time.time() - 60) == (5, 3)
    assert command._finished_shards(str(out)) == (5, 0)
    config = BuildConfig(inputs=("x/**",), output=str(out), overwrite=True)
    sigint = types.SimpleNamespace(name="SIGINT")
    command._report_interruption("beam-tfrecord build", config, sigint, 60.0, time.monotonic() + 5)
    assert (
        f"after 60.0 s; 2 finished shards kept in {out} (beside 3 shards of the build it was "
        "replacing), no manifest.json yet." in capsys.readouterr().err
    )

    # What each file system says of when a file was written.
    when = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.timezone.utc)
    assert written_at({"mtime": when.timestamp()}) == when.timestamp()
    assert written_at({"LastModified": when}) == when.timestamp()  # s3fs
    assert written_at({"updated": "2026-11-28T12:00:00.000Z"}) == when.timestamp()
    assert written_at({"size": 1}) is None
