"""Live progress of a local build: workers count, the launcher shows the sums.

Beam's metrics reach the launcher only when the DirectRunner finishes, and its multi-process
mode runs the work in child processes. So, when the launcher watches (only for runners whose
workers run on its machine), it names a fresh folder in the environment variable `ENV`, which
in-process workers and child processes both see; each worker process keeps its counts in memory
and, a few times a second, replaces one small JSON file of its own in that folder. The launcher
sums the files. Without the variable (remote workers, tests, library use) a count is a no-op.

Counts: `listed` images, `total` (the census: every listed input, once known), `planned` inputs
(with `to_write`, those planned into a shard, and their records' planned bytes), `measured`
images (a transformed build sizes its records before planning shards; `measure_skipped`, those
it found it cannot write), `written` images and bytes, and `kept` ones (in the shards --resume
kept: not this run's work).
"""

from __future__ import annotations

import atexit
import collections
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from beam_tfrecord.config import format_size

__all__ = ["ENV", "Progress", "Tally", "add", "reserve_folder", "set_total"]

ENV = "BEAM_TFRECORD_PROGRESS"
_FLUSH_SECONDS = 0.2

# A build with images left to write that has written none for this long says so on its line.
STALL_SECONDS = 60.0

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "counts": None, "dirty": False, "folder": None}


def _counts(folder: str) -> collections.Counter:
    """This process's counts (called under the lock); starts its flusher on first use."""
    if _state["pid"] != os.getpid() or _state["folder"] != folder:
        _state.update(pid=os.getpid(), counts=collections.Counter(), folder=folder, dirty=False)
        threading.Thread(target=_flush_loop, args=(folder,), daemon=True).start()
    _state["dirty"] = True
    return _state["counts"]


def add(name: str, number: int = 1, nbytes: int = 0) -> None:
    """Counts `number` items of `name` (and their bytes), when a launcher on this machine watches."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    with _lock:
        counts = _counts(folder)
        counts[name] += number
        if nbytes:
            counts[name + "_bytes"] += nbytes


class Tally:
    """Counts kept by one caller (a DoFn's bundle, a shard) and handed to `add` in sums.

    A count per image through `add` costs a look at the environment, a lock and a process id
    (about 4 us; four of them per image); here it costs a dict update. The sums go out at least
    every `_FLUSH_SECONDS`, when a count comes, so the display stays live, and on `flush()`,
    which the caller runs when its work is done.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._counts: collections.Counter = collections.Counter()
        self._due = clock() + _FLUSH_SECONDS

    def add(self, name: str, number: int = 1, nbytes: int = 0) -> None:
        """Counts as `progress.add` does, but in this tally until it is next flushed."""
        counts = self._counts
        counts[name] += number
        if nbytes:
            counts[name + "_bytes"] += nbytes
        if self._clock() >= self._due:
            self.flush()

    def add_planned(self, result: Any) -> None:
        """Counts one planned input: `to_write` too (with its record's bytes) when it is in a
        shard."""
        size = getattr(result, "record_size", None)
        if size is not None:
            self._counts["to_write"] += 1
            if size:
                self._counts["to_write_bytes"] += size
        self.add("planned")

    def flush(self) -> None:
        """Hands the counts so far to this process's counts (a no-op when no launcher watches)."""
        self._due = self._clock() + _FLUSH_SECONDS
        if not self._counts:
            return
        counts, self._counts = self._counts, collections.Counter()
        folder = os.environ.get(ENV)
        if not folder:
            return
        with _lock:
            _counts(folder).update(counts)


def set_total(number: int) -> None:
    """Records how many inputs were listed in all (the census), once it is known."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    with _lock:
        counts = _counts(folder)
        counts["total"] = max(counts["total"], number)


def _flush_loop(folder: str) -> None:
    if hasattr(signal, "pthread_sigmask"):
        # A signal to the process is the main thread's to take: delivered to this thread, it
        # would not break a call the main thread is blocked in.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    while _state["folder"] == folder and _state["pid"] == os.getpid():
        time.sleep(_FLUSH_SECONDS)
        if not flush(folder):
            return


def flush(folder: str) -> bool:
    """Writes this process's counts for `folder` now, if they changed; False once they are no
    longer this run's (another Progress since) or the folder is gone."""
    path = os.path.join(folder, f"{os.getpid()}.json")
    with _lock:
        if _state["folder"] != folder or _state["pid"] != os.getpid():
            # A newer run's counts (another Progress since): its own flusher writes them,
            # and taking them here would lose them in this run's folder.
            return False
        if not _state["dirty"]:
            return True
        text = json.dumps(dict(_state["counts"]))
        _state["dirty"] = False
    try:
        temp = f"{path}.{threading.get_ident()}.tmp"
        with open(temp, "w") as f:
            f.write(text)
        os.replace(temp, path)  # the launcher never reads half a file
    except OSError:
        return False  # the launcher is gone, and its folder with it
    return True


def read_counts(folder: str) -> collections.Counter:
    """The sums of every worker's counts in `folder`."""
    total: collections.Counter = collections.Counter()
    try:
        names = os.listdir(folder)
    except OSError:
        return total
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                counts = json.load(f)
        except (OSError, ValueError):
            continue
        for key, value in counts.items():
            if key == "total":
                total[key] = max(total[key], value)
            else:
                total[key] += value
    return total


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


# A folder named before its Progress starts (`reserve_folder`), for the Progress to show.
_reserved: list[str] = []


def _new_folder() -> str:
    return tempfile.mkdtemp(prefix="beam-tfrecord-progress-")


def reserve_folder() -> None:
    """Names the folder the next Progress of this process shows, now: processes started before
    it (worker processes started before Beam is imported) count into it from their start, as
    they see it in their environment. Removed at exit if no Progress takes it."""
    if _reserved:
        return
    folder = _new_folder()
    _reserved.append(folder)
    os.environ[ENV] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


class Progress:
    """Shows a build's counts while it runs: redrawn in place on a terminal at least once a
    second, otherwise one line every `log_every` seconds.

    A context manager: entering sets the environment variable workers count into, leaving stops
    the display and removes its folder.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        redraw_every: float = 0.5,
        log_every: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty() if tty is None else tty
        self._every = redraw_every if self._tty else log_every
        self._clock = clock
        self._started = clock()
        self._rates: collections.deque = collections.deque(maxlen=20)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._folder: str | None = None
        self._width = 0
        self.updates = 0
        # When the counts of images written last moved, or the planning ended (`line`).
        self._written: tuple[int, int] | None = None
        self._moved = self._started

    def __enter__(self) -> Progress:
        self._folder = _reserved.pop() if _reserved else _new_folder()
        os.environ[ENV] = self._folder
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._tty and self._folder:
            # The last frame has the final counts, however quick the build was between redraws
            # (this process's own, from an in-process build, are written out first).
            flush(self._folder)
            self.show()
        if self._tty and self._width:
            self._write("\r" + " " * self._width + "\r")
        if os.environ.get(ENV) == self._folder:
            del os.environ[ENV]
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _loop(self) -> None:
        if self._tty:  # at once: the line is there from the build's first moment
            self.show()
        while not self._stop.wait(self._every):
            self.show()

    def show(self) -> None:
        """Writes the current line (a new line when not on a terminal)."""
        counts = read_counts(self._folder) if self._folder else collections.Counter()
        if self._tty:
            # Within the terminal's width, less its last column: a line that wraps leaves its
            # first row behind at every redraw, since "\r" returns to the start of the last.
            # A width no one knows cuts nothing.
            columns = self._columns()
            line = self.line(counts, width=None if columns is None else max(1, columns - 1))
            pad = max(0, self._width - len(line))
            self._width = len(line)
            self._write("\r" + line + " " * pad)
        else:
            self._write(self.line(counts) + "\n")
        self.updates += 1

    def _columns(self) -> int | None:
        """The terminal's width: $COLUMNS if set, else the stream's terminal's; None when
        neither says (a terminal whose size was never set reports 0)."""
        if os.environ.get("COLUMNS", "").isdigit():
            return int(os.environ["COLUMNS"]) or None
        try:
            return os.get_terminal_size(self._stream.fileno()).columns or None
        except (AttributeError, ValueError, OSError):  # no descriptor, or not a terminal
            return None

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # a closed terminal or pipe: nothing to show it on
            self._stop.set()

    def line(self, counts: collections.Counter, width: int | None = None) -> str:
        """One line: images listed, planned and written against the total, MB/s, time, ETA.

        `width`: at most this many characters, cut from the end while the build plans. Once it
        writes, the counts of the steps before go first (listed, planned, measured), then the
        bytes and rate: in a narrow terminal, what it writes and when it will be done stay."""
        now = self._clock()
        elapsed = now - self._started
        total, to_write = counts["total"], counts["to_write"]
        written, written_bytes = counts["written"], counts["written_bytes"]
        kept = counts["kept"]  # in shards --resume kept: not this run's work, nor its rate
        of = f" of {total}" if total else ""
        parts = [f"listed {counts['listed']}", f"planned {counts['planned']}{of}"]
        if counts["measured"]:
            sizing = to_write + counts["measure_skipped"]
            parts.append(f"measured {counts['measured']}" + (f" of {sizing}" if total else ""))
        planning_done = bool(total) and counts["planned"] >= total
        target = f" of {to_write}" if planning_done else ""
        self._rates.append((now, written, written_bytes))
        then, images_before, bytes_before = self._rates[0]
        if now - then >= 1:
            rate = (written_bytes - bytes_before) / (now - then)
            image_rate = (written - images_before) / (now - then)
        else:  # too few samples yet (a line every few seconds): the average so far
            rate = written_bytes / elapsed if elapsed > 0 else 0.0
            image_rate = written / elapsed if elapsed > 0 else 0.0
        also = f" (and {kept} kept)" if kept else ""
        images = f"written {written}{also}{target} images"
        parts.append(f"{images}, {format_size(written_bytes)}, {rate / 1e6:.1f} MB/s")
        timing = f"{_clock(elapsed)} elapsed"
        left = to_write - written - kept
        if not planning_done or self._written != (written, written_bytes):
            self._written = (written, written_bytes) if planning_done else None
            self._moved = now
        still = now - self._moved
        if planning_done and to_write and left <= 0:
            # Every image is in (planned sizes are upper bounds: the bytes may never reach them).
            timing += ", finishing"
        elif planning_done and still >= STALL_SECONDS:
            # A store that stopped answering holds reads for minutes before its client gives
            # up; an ETA from the last minute's rate would say nothing of it.
            timing += f", nothing written for {_clock(still)}"
        elif planning_done and written and image_rate > 0:
            # From the images this run has written and how fast, not from planned bytes: a
            # transformed build planned on estimates (--transformed-sizes estimate) writes more
            # or fewer bytes than planned, and images are shuffled across shards, so the rate
            # so far holds for the rest. Rounded up: 'ETA 0:00' with images left reads as a stall.
            timing += f", ETA {_clock(math.ceil(left / image_rate))}"
        parts.append(timing)
        line = " | ".join(parts)
        if width is None or len(line) <= width or not planning_done:
            # Until the plan is whole, its counts are what moves: cut from the end.
            return line[:width]
        # Writing: the steps before are done. Then the bytes and rate go, before the time.
        while len(parts) > 2 and len(" | ".join(parts)) > width:
            del parts[0]
        if len(" | ".join(parts)) > width:
            parts[-2] = images
        return " | ".join(parts)[:width]
