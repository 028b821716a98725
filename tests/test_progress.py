"""Progress counts: summed over worker files, shown as lines, a no-op with no launcher watching."""

from __future__ import annotations

import collections
import io
import json
import os
import time

import pytest

from beam_tfrecord import progress
from beam_tfrecord.progress import ENV, Progress, read_counts


def test_counts_are_a_no_op_when_no_launcher_watches(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    progress.add("listed", 3)
    progress.set_total(3)
    assert list(tmp_path.iterdir()) == []


def test_the_launcher_sums_every_worker_file(tmp_path):
    (tmp_path / "11.json").write_text(json.dumps({"listed": 3, "total": 9, "written_bytes": 5}))
    (tmp_path / "12.json").write_text(json.dumps({"listed": 6, "total": 9, "written_bytes": 7}))
    (tmp_path / "13.json.99.tmp").write_text("{half a fil")  # being replaced: not read
    counts = read_counts(str(tmp_path))
    assert counts == collections.Counter(listed=9, total=9, written_bytes=12)


def test_not_on_a_terminal_a_line_every_interval(monkeypatch):
    out = io.StringIO()
    with Progress(out, tty=False, log_every=0.2) as shown:
        assert os.environ[ENV]
        progress.add("listed", 4)
        progress.set_total(4)
        planning = progress.Tally()
        for _ in range(4):
            planning.add_planned(type("Entry", (), {"record_size": 1000})())
        planning.flush()
        progress.add("written", 2, 2000)
        deadline = time.monotonic() + 30
        # Workers write their counts a few times a second; wait for them to show, and for
        # three lines in all.
        while time.monotonic() < deadline and not (
            shown.updates >= 3 and out.getvalue().splitlines()[-1].startswith("listed 4 ")
        ):
            time.sleep(0.05)
    folder_gone = ENV not in os.environ
    lines = out.getvalue().splitlines()
    assert folder_gone
    assert len(lines) >= 3
    assert "\r" not in out.getvalue()
    assert lines[-1].startswith("listed 4 | planned 4 of 4 | written 2 of 4 images, 2.0 KB")


def test_a_tally_hands_its_counts_on_when_due_and_when_flushed(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path))
    now = [50.0]
    tally = progress.Tally(clock=lambda: now[0])
    tally.add("listed", 2)
    tally.add_planned(type("Entry", (), {"record_size": 1000})())
    tally.add_planned(type("Report", (), {})())  # planned, but to no shard
    progress.flush(str(tmp_path))
    assert read_counts(str(tmp_path)) == collections.Counter()  # all still in the tally
    now[0] += progress._FLUSH_SECONDS
    tally.add("written", 1, 50)  # due: this count and the ones before it go out
    progress.flush(str(tmp_path))
    handed_on = collections.Counter(
        listed=2, planned=2, to_write=1, to_write_bytes=1000, written=1, written_bytes=50
    )
    assert read_counts(str(tmp_path)) == handed_on
    tally.add("listed")
    tally.flush()
    progress.flush(str(tmp_path))
    assert read_counts(str(tmp_path)) == handed_on + collections.Counter(listed=1)


def _line_after(seconds: float, written: int, written_bytes: int) -> str:
    """The line of 10 planned images (10 MB), `seconds` after a first line with none written."""
    now = [100.0]
    shown = Progress(io.StringIO(), tty=True, clock=lambda: now[0])
    counts = collections.Counter(
        listed=10, total=10, planned=10, to_write=10, to_write_bytes=10_000_000
    )
    shown.line(counts)
    now[0] += seconds
    return shown.line(collections.Counter(counts, written=written, written_bytes=written_bytes))


def test_the_line_gives_rate_and_eta():
    line = _line_after(2, 4, 4_000_000)
    assert line == (
        "listed 10 | planned 10 of 10 | written 4 of 10 images, 4.0 MB, 2.0 MB/s "
        "| 0:02 elapsed, ETA 0:03"
    )


def test_an_eta_under_a_second_is_not_shown_as_zero():
    line = _line_after(1, 9, 9_500_000)
    assert line.endswith("| 0:01 elapsed, ETA 0:01"), line


def test_every_image_written_shows_finishing_not_an_eta_for_bytes_never_coming():
    """A record's planned size is an upper bound, so the bytes written can stay under the plan's
    with every image in: the line then says the build is finishing."""
    line = _line_after(2, 10, 9_999_000)
    assert line.endswith("| 0:02 elapsed, finishing"), line


def test_a_build_that_has_written_nothing_for_a_minute_says_so():
    """A store that stops answering holds its reads for minutes before the client gives up;
    the line said nothing of it. Counted from the last image written, or from the end of the
    planning: a long planning is not a stall."""
    now = [100.0]
    shown = Progress(io.StringIO(), tty=True, clock=lambda: now[0])
    planning = collections.Counter(listed=10, total=10, planned=5)
    now[0] += 200  # planning for minutes
    assert "nothing written" not in shown.line(planning)
    counts = collections.Counter(
        listed=10, total=10, planned=10, to_write=10, to_write_bytes=10_000_000
    )
    assert "nothing written" not in shown.line(counts)  # the plan is done: counted from here
    now[0] += 59
    assert "nothing written" not in shown.line(collections.Counter(counts, written=0))
    now[0] += 6
    assert shown.line(counts).endswith("| 4:25 elapsed, nothing written for 1:05")
    counts.update(written=4, written_bytes=4_000_000)
    now[0] += 1
    assert "nothing written" not in shown.line(counts)
    now[0] += 61
    assert shown.line(counts).endswith(", nothing written for 1:01")
    counts.update(written=6, written_bytes=6_000_000)  # every image in: finishing, not a stall
    now[0] += 120
    assert shown.line(counts).endswith(", finishing")


def test_an_in_process_build_counts_every_input(tmp_path):
    """Inputs reported at planning (no such class) count as planned too, so `planned` reaches the
    census total and the ETA can show."""
    from imagegen import make_collection

    from beam_tfrecord.beam.pipeline import build
    from beam_tfrecord.config import BuildConfig

    make_collection(tmp_path / "src", {"cat": 4, "dog": 3}, seed=6)
    config = BuildConfig.from_settings(
        {"inputs": [str(tmp_path / "src")], "output": str(tmp_path / "out"), "classes": "cat"}
    )
    with Progress(io.StringIO(), tty=False, log_every=3600):
        build(config, ["--direct_running_mode=in_memory"])
        time.sleep(4 * progress._FLUSH_SECONDS)
        counts = read_counts(os.environ[ENV])
    assert counts["listed"] == counts["total"] == counts["planned"] == 7
    assert counts["to_write"] == counts["written"] == 4
    assert counts["written_bytes"] == sum(
        p.stat().st_size for p in (tmp_path / "out").glob("out-*.tfrecord-*")
    )


@pytest.mark.parametrize("columns", [80, 40, 2])
def test_the_line_on_a_terminal_fits_within_its_width(monkeypatch, columns):
    """A line as wide as the terminal wraps, and "\\r" returns to the start of its last row
    only: every redraw would leave a row behind."""
    monkeypatch.setenv("COLUMNS", str(columns))
    counts = collections.Counter(listed=46, total=46, planned=46, to_write=46, written=45)
    wide = Progress(io.StringIO(), tty=True).line(counts) + " | and more to say"
    assert len(wide) > 80
    stream = io.StringIO()
    shown = Progress(stream, tty=True)
    monkeypatch.setattr(shown, "line", lambda _, width=None: wide[:width])
    shown.show()
    shown.show()
    frames = stream.getvalue().split("\r")[1:]
    assert len(frames) == 2
    assert all(frame == wide[: max(1, columns - 1)] for frame in frames)


def test_a_narrow_line_keeps_what_is_written_and_drops_the_steps_before():
    """At 40 columns every redraw read `listed 3000 | planned 3000 of 3000 | me`: the count
    written and the ETA were always cut off (found by a new-user trial)."""
    counts = collections.Counter(listed=3000, total=3000, planned=3000, to_write=3000, written=45)
    shown = Progress(io.StringIO(), tty=True)
    whole = shown.line(counts)
    assert whole.startswith("listed 3000 | planned 3000 of 3000 | written 45 of 3000 images")
    assert shown.line(counts, width=len(whole)) == whole
    wider = shown.line(counts, width=79)  # all of it, but the steps before
    assert wider.startswith("written 45 of 3000 images, ") and ", ETA " in wider
    narrow = shown.line(counts, width=50)  # then the bytes and rate, before the time
    assert narrow.startswith("written 45 of 3000 images | 0:00 elapsed, ETA "), narrow
    assert len(shown.line(counts, width=20)) == 20
    # While it lists and plans, what moves is at the start: cut from the end.
    listing = collections.Counter(listed=48213)
    assert shown.line(listing, width=39).startswith("listed 48213 | planned 0 | written 0")


def test_a_terminal_whose_width_no_one_knows_gets_the_whole_line(monkeypatch):
    """A terminal whose size was never set reports 0 columns (a pseudo-terminal, in CI): the
    line is not cut to nothing."""
    monkeypatch.delenv("COLUMNS", raising=False)
    stream = io.StringIO()  # no descriptor: no terminal to ask
    shown = Progress(stream, tty=True)
    wide = "listed 46 | planned 46 of 46 | written 45 of 46 images " * 3
    monkeypatch.setattr(shown, "line", lambda _, width=None: wide[:width])
    shown.show()
    assert stream.getvalue() == "\r" + wide
    monkeypatch.setenv("COLUMNS", "0")
    shown.show()
    assert stream.getvalue().endswith("\r" + wide)
