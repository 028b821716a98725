"""Servers the tests start on this machine: a free port for one, and waiting until it listens."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

__all__ = ["free_port", "wait_for_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server about to start."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(
    host: str,
    port: int,
    process: subprocess.Popen,
    log: Path,
    *,
    seconds: float,
    error: type[Exception] = RuntimeError,
) -> None:
    """Returns once `process` listens on `port`; raises `error` naming `log` (its last lines,
    when it is a file) if the process exits first or does not listen within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = f":\n{log.read_text()[-2000:]}" if log.is_file() else ""
            raise error(f"exited early; see {log}{tail}")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise error(f"did not listen on {port} in {seconds} s; see {log}")
