"""What runs in a shard process to read its threads' signal masks: a module of its own, which
imports nothing else, so that unpickling the probe there starts no thread (a test module's
imports, Beam's and numpy's, would start theirs with the probe's own mask)."""

from __future__ import annotations

import os
import signal

__all__ = ["sigterm_blocked_by_thread"]


def sigterm_blocked_by_thread() -> dict[str, bool]:
    """Whether each thread of this process blocks SIGTERM ('main': the main one), and whether
    numpy is loaded here ('numpy')."""
    import sys

    found = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as status:
            mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigBlk:"))
        name = "main" if int(tid) == os.getpid() else tid
        found[name] = bool(mask & (1 << (signal.SIGTERM - 1)))
    found["numpy"] = "numpy" in sys.modules
    return found
