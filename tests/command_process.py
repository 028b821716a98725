"""The `beam-tfrecord` command run as its script runs it, in a process of its own, reporting
which modules it had loaded when it ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

_SCRIPT = Path(sys.executable).parent / "beam-tfrecord"
# The command as a user runs it: its installed script, else the module.
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "beam_tfrecord.cli"]


def run_tool(
    *args: str, cwd: Path, env: dict | None = None, timeout: float = 300, **kwargs
) -> subprocess.CompletedProcess:
    """`beam-tfrecord ARGS` in `cwd`, its output captured as text, `env` added to this
    process's environment."""
    return subprocess.run(
        [*COMMAND, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


_COMMAND = """
import atexit, json, runpy, sys
def loaded():
    names = sorted(n for n, m in sys.modules.items() if m is not None)
    open({modules!r}, "w").write(json.dumps(names))
atexit.register(loaded)
sys.argv = ["beam-tfrecord", *{args!r}]
runpy.run_module("beam_tfrecord.cli", run_name="__main__", alter_sys=True)
"""


def run_command(args: list[str], scratch: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Runs `beam-tfrecord ARGS` (the script's process: `commands.starting.is_the_command`);
    what it printed, and the names of the modules it had loaded at its exit."""
    modules = scratch / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _COMMAND.format(modules=str(modules), args=list(args))],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    loaded = set(json.loads(modules.read_text())) if modules.exists() else set()
    return done, loaded


def group_is_gone(pgid: int, seconds: float = 10.0) -> bool:
    """Whether process group `pgid` (a command started in a session of its own, and every
    process it started) is gone within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def wide_terminal(columns: int = 400) -> None:
    """In a child on a pseudo-terminal (`pty.fork`), before it runs the command: a terminal
    wide enough for the whole progress line, which the command cuts to the terminal's width
    ($COLUMNS if set, as here, else the terminal's own)."""
    os.environ["COLUMNS"] = str(columns)


# A folder whose sitecustomize makes a named pipe read as a file whose read stalls until the
# test writes it (tests/stalling_disk): for the PYTHONPATH of a build that must stop mid-shard.
STALLING_DISK = str(Path(__file__).resolve().parent / "stalling_disk")


def with_stalling_disk(env: dict[str, str]) -> dict[str, str]:
    """`env` with the stalling disk's folder first on its PYTHONPATH."""
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": STALLING_DISK + (os.pathsep + rest if rest else "")}
