"""WriteShards with worker processes of its own (a local build's): the same shards, results and
report lines as when its worker writes every shard itself."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from command_process import with_stalling_disk
from test_transform_write_shards import _shards

from beam_tfrecord import shard_writer
from beam_tfrecord.batches import EntryBatch, PackedEntries
from beam_tfrecord.beam.pipeline import shard_processes
from beam_tfrecord.beam.writing import WriteShards
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry, ShardSpec
from beam_tfrecord.readahead import usable_cores
from beam_tfrecord.shard_names import shard_file_name
from beam_tfrecord.shard_processes import (
    ShardProcesses,
    discard_started,
    start_early,
    take_started,
)
from beam_tfrecord.shard_writer import write_shard

pytestmark = pytest.mark.slow

SPLITS = (("train", 0.5), ("test", 0.5))


@pytest.fixture
def shards(tmp_path, put_images, planned, memfs):
    """Six shards of images on local disk, two of them not images a build can write."""
    images = put_images("/src", {"cat": 14, "dog": 12})
    images["cat/truncated.jpg"] = images["cat/cat_0000.jpg"][:-300]
    images["dog/notes.jpg"] = b"not an image at all"
    entries = planned("/src", images, splits=SPLITS)
    src = tmp_path / "src"
    for relpath, data in images.items():
        (src / relpath).parent.mkdir(parents=True, exist_ok=True)
        (src / relpath).write_bytes(data)
    local = [replace(e, url=str(src / e.relpath)) for e in entries]
    return _shards(local, per_split=3)


POLICY = BuildConfig(inputs=("unused",), output="unused").image


def _digests(out: Path) -> dict[str, str]:
    return {
        str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(out.rglob("*"))
        if path.is_file()
    }


def _written_in_processes(p, shard_list, plan, out: Path):
    """WriteShards in two processes of its own, whatever the plan's size."""
    return (
        p
        | "Shards" >> beam.Create(shard_list)
        | WriteShards(
            str(out),
            "ds",
            POLICY,
            p | "Plan" >> beam.Create([plan]),
            max_record_size=1 << 20,
            read_ahead=4,
            processes=2,
            processes_min_bytes=0,
        )
    )


def test_worker_processes_write_the_same_shards_results_and_report(
    pipeline, shards, tmp_path, caplog
):
    shard_list, plan = shards
    # Each shard written here, by the library alone: what the processes must match.
    here = tmp_path / "here"
    expected_results, expected_report = [], []
    for (split, index), entries in shard_list:
        name = shard_file_name("ds", split, index, plan[split].shards)
        spec = ShardSpec(str(here), name, split, index, plan[split].shards)
        result, report = write_shard(spec, entries, POLICY, max_record_size=1 << 20)
        expected_results.append(result)
        expected_report.extend(report)
    assert {r.relpath for r in expected_report} == {"cat/truncated.jpg", "dog/notes.jpg"}
    assert sum(r.examples for r in expected_results) == 26

    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    pooled = tmp_path / "pooled"
    with pipeline as p:
        written = _written_in_processes(p, shard_list, plan, pooled)
        assert_that(written["results"], equal_to(expected_results), label="Results")
        assert_that(written["report"], equal_to(expected_report), label="Report")
    assert "writing shards in 2 worker processes" in caplog.text
    assert _digests(pooled) == _digests(here)
    assert not [name for name in _digests(pooled) if name.startswith(".") or "/." in name]


def _packed_shards(shard_list):
    """Each shard's entries as PlanShards hands them over: the compressed bytes of the batches
    they crossed the shuffle in, in no particular order."""
    packed = []
    for key, entries in shard_list:
        batches = [EntryBatch(entries[i : i + 2]).to_bytes() for i in range(0, len(entries), 2)]
        packed.append((key, PackedEntries(reversed(batches))))
    return packed


def _decodes_here(monkeypatch) -> list[bytes]:
    """The entries this process decodes from here on (ImageEntry.from_bytes), as a list that
    fills as they are; the worker processes' own decoding is not seen."""
    decoded: list[bytes] = []
    real_from_bytes = ImageEntry.from_bytes

    def counted(cls, data):
        decoded.append(data)
        return real_from_bytes(data)

    monkeypatch.setattr(ImageEntry, "from_bytes", classmethod(counted))
    return decoded


def test_packed_shards_go_to_their_process_as_bytes_and_make_the_same_shards(
    pipeline, shards, tmp_path, monkeypatch
):
    """The launcher holds every planned shard until it is written, and passes it on: as the
    batches' compressed bytes, never decoded there, and the shards are the same."""
    shard_list, plan = shards
    here = tmp_path / "here"
    for (split, index), entries in shard_list:
        name = shard_file_name("ds", split, index, plan[split].shards)
        spec = ShardSpec(str(here), name, split, index, plan[split].shards)
        write_shard(spec, entries, POLICY, max_record_size=1 << 20)
    sent = []
    real_submit = ProcessPoolExecutor.submit

    def spied(self, fn, *args, **kwargs):
        sent.extend(arg for arg in args if isinstance(arg, (list, PackedEntries)))
        return real_submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", spied)
    decoded = _decodes_here(monkeypatch)
    pooled = tmp_path / "pooled"
    with pipeline as p:
        _written_in_processes(p, _packed_shards(shard_list), plan, pooled)
    assert _digests(pooled) == _digests(here)
    assert len(sent) == len(shard_list)
    assert all(isinstance(shard, PackedEntries) for shard in sent)
    assert decoded == [], "decoded in the launcher"
    unpacked = [e.to_bytes() for _, entries in shard_list for e in entries]
    assert sum(len(pickle.dumps(s)) for s in sent) < len(pickle.dumps(unpacked))


@pytest.mark.parametrize("packed", [False, True], ids=["entries", "packed"])
def test_a_plan_of_few_shards_has_every_process_prepare_each_shard(
    pipeline, shards, tmp_path, caplog, monkeypatch, packed
):
    """Two shards for two processes: each shard's images are prepared by both, in segments, and
    the shards are the bytes one writer per shard makes. Packed shards (PlanShards') are
    ordered and cut into segments from their bytes, none decoded here."""
    shard_list, plan = shards
    by_split: dict[str, list[ImageEntry]] = {}
    for (split, _), entries in shard_list:
        by_split.setdefault(split, []).extend(entries)
    few = [((split, 0), entries) for split, entries in sorted(by_split.items())]
    plan = {split: replace(p, shards=1) for split, p in plan.items()}
    here = tmp_path / "here"
    for (split, index), entries in few:
        spec = ShardSpec(str(here), shard_file_name("ds", split, index, 1), split, index, 1)
        write_shard(spec, entries, POLICY, max_record_size=1 << 20)
    monkeypatch.setattr(shard_writer, "SEGMENT_IMAGES", 3)  # several segments a shard
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    decoded = []
    if packed:
        few = _packed_shards(few)
        decoded = _decodes_here(monkeypatch)
    pooled = tmp_path / "pooled"
    with pipeline as p:
        written = _written_in_processes(p, few, plan, pooled)
        counted = written["results"] | beam.Map(lambda r: r.examples) | beam.CombineGlobally(sum)
        assert_that(counted, equal_to([26]))
    assert "each shard's images prepared in all 2 processes" in caplog.text
    assert _digests(pooled) == _digests(here)
    assert decoded == [], "decoded in the launcher"


def test_a_small_plan_is_written_without_worker_processes(pipeline, shards, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    shard_list, plan = shards
    with pipeline as p:
        written = (
            p
            | "Shards" >> beam.Create(shard_list)
            | WriteShards(
                str(tmp_path / "out"),
                "ds",
                POLICY,
                p | "Plan" >> beam.Create([plan]),
                max_record_size=1 << 20,
                processes=2,  # but the default threshold: far more bytes than these images
            )
        )
        counted = written["results"] | beam.combiners.Count.Globally()
        assert_that(counted, equal_to([6]))
    assert "worker processes" not in caplog.text


@pytest.mark.parametrize(
    ("inputs", "output", "flags", "expected"),
    [
        (("data/**",), "out", [], "cores"),
        (("/data/a/**", "file:///data/b"), "/out", ["--runner=DirectRunner"], "cores"),
        (("data/**",), "out", ["--direct_running_mode=in_memory"], "cores"),
        (("data/**",), "out", ["--direct_running_mode=multi_processing"], 0),
        (("data/**",), "out", ["--direct_running_mode=multi_threading"], 0),
        (("data/**",), "out", ["--direct_num_workers=2"], 0),
        (("memory://data/**",), "out", [], 0),
        (("data/**",), "gs://bucket/out", [], "cores"),
        (("s3://bucket/data/**",), "out", [], "cores"),
        (("s3://bucket/data/**",), "out", ["--direct_num_workers=2"], 0),
        (("data/**",), "memory://out", [], 0),
        (("hdfs://host/data/**",), "out", [], 0),
        (("data/**",), "out", ["--runner=FlinkRunner"], 0),
    ],
)
def test_only_a_one_process_build_of_files_and_objects_writes_in_processes(
    inputs, output, flags, expected
):
    config = BuildConfig(inputs=inputs, output=output)
    cores = usable_cores()
    want = (cores if cores > 1 else 0) if expected == "cores" else expected
    assert shard_processes(config, PipelineOptions(flags)) == want


def test_a_store_build_writes_here_when_its_fsspec_settings_cannot_travel(monkeypatch):
    """A worker process gets this process's fsspec settings (credentials, endpoints), pickled:
    a setting that cannot be (a credentials object) keeps a store build's shards here."""
    import fsspec.config

    monkeypatch.setitem(fsspec.config.conf, "gs", {"token": lambda: "a credentials object"})
    cores = usable_cores()
    local = BuildConfig(inputs=("data/**",), output="out")
    bucket = BuildConfig(inputs=("data/**",), output="gs://bucket/out")
    assert shard_processes(bucket, PipelineOptions([])) == 0
    assert shard_processes(local, PipelineOptions([])) == (cores if cores > 1 else 0)


def test_a_shard_process_silences_pillow_for_good_and_the_launcher_does_not():
    pool = ShardProcesses(1)
    try:
        probe = "__import__('beam_tfrecord.images.decode', fromlist=['_'])._quiet_for_good"
        assert pool._pool.submit(eval, probe).result(timeout=60) is True
    finally:
        pool.close()
    assert eval(probe) is False


def test_processes_started_early_go_to_the_shard_writer_that_takes_them_or_end():
    start_early(2)
    pool = take_started(2)
    assert pool is not None and pool.processes == 2
    assert len(multiprocessing.active_children()) == 2, "started before any shard is handed over"
    assert take_started(2) is None, "taken once"
    pool.close()
    start_early(2)
    assert take_started(3) is None, "another count: ended, not handed over"
    start_early(2)
    discard_started()
    assert take_started(2) is None
    assert multiprocessing.active_children() == []


def test_a_build_ends_the_processes_it_started_early_when_its_plan_is_small(
    tmp_path, monkeypatch, caplog
):
    """The early start goes by a hint (the bytes below the input folders); the shard writer by
    the plan. Processes started for a plan that turns out too small end with the build."""
    from imagegen import make_collection

    from beam_tfrecord.beam import pipeline

    make_collection(tmp_path / "src", {"cat": 4, "dog": 3}, seed=6)
    monkeypatch.setattr(pipeline, "PROCESSES_MIN_BYTES", 1)  # the hint's threshold only
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    config = BuildConfig.from_settings(
        {"inputs": [str(tmp_path / "src")], "output": str(tmp_path / "out")}
    )
    result = pipeline.build(config)
    assert result.manifest["inputs"]["written"] == 7
    processes = shard_processes(config, PipelineOptions([]))
    if processes:
        assert f"starting {processes} worker processes while the build lists" in caplog.text
    assert "writing shards in" not in caplog.text
    assert take_started(2) is None
    assert multiprocessing.active_children() == []


def test_a_build_of_many_small_images_writes_in_processes_started_early(
    tmp_path, monkeypatch, caplog
):
    """Bytes are not the only measure of work: a build of many small images (PROCESSES_MIN_IMAGES,
    20,000 in a real one) starts its worker processes while it lists and plans, and writes its
    shards in them, the same bytes as a build without processes."""
    from imagegen import make_collection

    from beam_tfrecord.beam import pipeline, writing

    if shard_processes(BuildConfig(inputs=("x",), output="y"), PipelineOptions([])) < 2:
        pytest.skip("one core: no worker processes")
    make_collection(tmp_path / "src", {"cat": 30, "dog": 30}, seed=8, size=(16, 32))

    def config(out: str) -> BuildConfig:
        return BuildConfig.from_settings(
            {
                "inputs": [str(tmp_path / "src")],
                "output": str(tmp_path / out),
                "name": "ds",
                "min_shard_size": "20KB",
                "max_shard_size": "60KB",
            }
        )

    alone = pipeline.build(config("alone"))
    assert alone.manifest["inputs"]["written"] == 60
    caplog.set_level(logging.DEBUG, logger="beam_tfrecord")
    for module in (pipeline, writing):
        monkeypatch.setattr(module, "PROCESSES_MIN_IMAGES", 50)
    pooled = pipeline.build(config("pooled"))
    assert "starting 2 worker processes while the build lists" in caplog.text
    assert "writing shards in 2 worker processes (started early)" in caplog.text
    assert pooled.manifest["inputs"] == alone.manifest["inputs"]

    def written(out: str) -> dict[str, str]:  # all but the files that name their folder
        named = ("manifest.json", "dataset_info.json")
        return {k: v for k, v in _digests(tmp_path / out).items() if k not in named}

    assert written("pooled") == written("alone")
    assert len(written("alone")) > 8, "four shards, their indexes, the labels"
    assert multiprocessing.active_children() == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
@pytest.mark.parametrize("stop", ["close", "sigterm"])
def test_a_shard_being_written_ends_when_the_build_stops_and_leaves_no_temporary(
    tmp_path, stop, monkeypatch
):
    """A shard that is being written ends, its temporary file removed: by close(cancel=True), as
    a stopping build's shard writer calls it, or by SIGTERM to its process, which then exits.
    Here the shard's image never arrives (a named pipe nobody writes to, which the worker reads
    as a stalled file: tests/stalling_disk): waiting would never see it end."""
    monkeypatch.setenv("PYTHONPATH", with_stalling_disk(dict(os.environ))["PYTHONPATH"])
    stuck = tmp_path / "src" / "cat" / "stuck.jpg"
    stuck.parent.mkdir(parents=True)
    os.mkfifo(stuck)
    out = tmp_path / "out"
    spec = ShardSpec(str(out), shard_file_name("ds", "train", 0, 1), "train", 0, 1)
    entry = ImageEntry(str(stuck), "cat/stuck.jpg", 1000, "train", 1, "cat", 0, 1100)
    pool = ShardProcesses(1)
    closer = threading.Thread(target=pool.close, kwargs={"cancel": True})
    try:
        future = pool.submit(spec, [entry], POLICY, max_record_size=1 << 20, resume=False,
                             read_ahead=0)  # fmt: skip
        deadline = time.monotonic() + 60
        while not (out.exists() and any(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the shard's temporary file is there: it is being written
        assert out.exists() and any(out.iterdir()), "the shard never started"
        if stop == "sigterm":
            (worker,) = multiprocessing.active_children()
            worker.terminate()
            worker.join(timeout=60)
            # The pool's own thread also waits for its processes, and may reap this one first:
            # then no exit code is left to read here, and the process is simply gone.
            gone = worker.exitcode is not None or not os.path.exists(f"/proc/{worker.pid}")
            assert gone, "the process went on after SIGTERM"
            assert worker.exitcode in (None, 128 + signal.SIGTERM), worker.exitcode
        closer.start()
        closer.join(timeout=60)
        assert not closer.is_alive(), "close waited for a shard that cannot finish"
        assert future.done()
        assert list(out.iterdir()) == [], "a temporary file or a shard was left"
        assert multiprocessing.active_children() == []
    finally:
        if closer.is_alive():  # let the read end, so that the test can finish
            os.close(os.open(stuck, os.O_WRONLY | os.O_NONBLOCK))
            closer.join()


# A launcher that writes one shard in a worker process, whose image never arrives: it prints
# the worker's process id once the shard's temporary file is there, and waits.
_STUCK_LAUNCHER = """
import multiprocessing, sys, time
from pathlib import Path
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import ImageEntry, ShardSpec
from beam_tfrecord.shard_processes import ShardProcesses
stuck, out = sys.argv[1], Path(sys.argv[2])
spec = ShardSpec(str(out), "ds-train.tfrecord-00000-of-00001", "train", 0, 1)
entry = ImageEntry(stuck, "cat/stuck.jpg", 1000, "train", 1, "cat", 0, 1100)
policy = BuildConfig(inputs=("unused",), output="unused").image
pool = ShardProcesses(1)
pool.submit(spec, [entry], policy, max_record_size=1 << 20, resume=False, read_ahead=0)
while not (out.exists() and any(out.iterdir())):
    time.sleep(0.05)
(worker,) = multiprocessing.active_children()
print(worker.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_worker_process_ends_when_its_launcher_is_killed(tmp_path, monkeypatch):
    """SIGKILL ends a launcher and nothing else: no handler of its runs. Its worker processes
    end by themselves, as SIGTERM ends them (the shard's temporary file removed), where they
    would go on writing the shards queued for them into an output no build holds any more."""
    monkeypatch.setenv("PYTHONPATH", with_stalling_disk(dict(os.environ))["PYTHONPATH"])
    stuck = tmp_path / "src" / "cat" / "stuck.jpg"
    stuck.parent.mkdir(parents=True)
    os.mkfifo(stuck)
    out = tmp_path / "out"
    launcher = subprocess.Popen(
        [sys.executable, "-c", _STUCK_LAUNCHER, str(stuck), str(out)],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    worker = None
    try:
        worker = int(launcher.stdout.readline())
        assert list(out.iterdir()), "the shard never started"
        launcher.kill()
        launcher.wait(timeout=60)
        deadline = time.monotonic() + 20
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(worker), "the worker went on after its launcher was killed"
        assert list(out.iterdir()) == [], "a temporary file or a shard was left"
    finally:
        launcher.kill()
        if worker is not None and _running(worker):
            os.kill(worker, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether process `pid` is there and not a zombie (its parent may be gone too, and
    whatever adopts it may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_only_a_shard_process_main_thread_takes_sigterm(shards, tmp_path, monkeypatch):
    """SIGTERM ends a shard through a handler that only the main thread runs, and only a signal
    delivered to that thread breaks a read it is blocked in. The kernel may hand a signal to any
    thread that does not block it, so every other thread must: the read-ahead threads, the
    progress flusher, and numpy's BLAS threads, started when a 16-bit image first needs numpy.
    Before they did, a SIGTERM taken by one of them left a shard process stuck in a stalled read
    for good."""
    from hostile_images import hostile_corpus
    from thread_masks import sigterm_blocked_by_thread

    from beam_tfrecord import progress

    watched = tmp_path / "progress"
    watched.mkdir()
    monkeypatch.setenv(progress.ENV, str(watched))  # as under a build's progress line
    shard_list, plan = shards
    (split, index), entries = shard_list[0]
    # A 16-bit image, which loads numpy in the shard process as it is written.
    deep = next(case for case in hostile_corpus() if case.name == "gray16_png")
    path = tmp_path / "deep" / "gray16.png"
    path.parent.mkdir()
    path.write_bytes(deep.data)
    alone = [replace(entries[0], url=str(path), relpath="deep/gray16.png",
                     source_size=len(deep.data), shuffle_key=7)]  # fmt: skip
    name = shard_file_name("ds", split, index, plan[split].shards)
    spec = ShardSpec(str(tmp_path / "out"), name, split, index, plan[split].shards)
    pool = ShardProcesses(1)
    how = {"max_record_size": 1 << 20, "resume": False}
    try:
        # Without read-ahead, on the process's main thread (which takes SIGTERM); then a
        # shard read ahead, on threads of its own.
        result, _ = pool.submit(spec, alone, POLICY, **how, read_ahead=0).result(timeout=120)
        pool.submit(spec, entries, POLICY, **how, read_ahead=4).result(timeout=120)
        blocked = pool._pool.submit(sigterm_blocked_by_thread).result(timeout=60)
    finally:
        pool.close()
    assert result.encodes == 1  # the 16-bit image was normalized, with numpy
    assert blocked.pop("numpy") is True
    assert blocked.pop("main") is False
    # The read-ahead threads and the flusher at least, and BLAS's (2 cores or more).
    assert len(blocked) >= 2 and all(blocked.values()), blocked


def test_a_worker_thread_blocks_sigterm_only_where_threads_have_signal_masks(monkeypatch):
    """Not POSIX (no pthread_sigmask): the read-ahead threads' initializer does nothing, where
    failing would break every shard process's thread pool."""
    from beam_tfrecord.shard_processes import _block_sigterm

    monkeypatch.delattr(signal, "pthread_sigmask")
    _block_sigterm()  # no AttributeError


def test_the_commands_fork_server_imports_the_workers_modules_and_the_stores_clients():
    """`fork_from_server` (the command's): its server imports this package's worker modules,
    the command's own (its `__main__` is imported again in each worker, as `__mp_main__`, where
    it costs nothing then) and the clients of the build's stores; a forked worker finds them
    imported. Run in a process of its own: a process has one fork server."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        from beam_tfrecord import shard_processes

        shard_processes.fork_from_server({"file", "gs"})
        context = shard_processes._context()
        wanted = ("gcsfs", "beam_tfrecord.shard_processes", "beam_tfrecord.commands.cli")
        with context.Pool(1) as pool:  # eval, a builtin: nothing of this script to unpickle
            found = pool.apply(eval, (f"sorted(set(__import__('sys').modules) & {set(wanted)})",))
        print(context.get_start_method(), found)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "forkserver ['beam_tfrecord.commands.cli', 'beam_tfrecord.shard_processes', 'gcsfs']"
    )


_ENDED_WHILE_STARTING = """
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from beam_tfrecord import shard_processes

ended = subprocess.Popen([sys.executable, "-c", ""])
ended.wait()  # a launcher already gone: the worker takes SIGTERM as it starts
shard_processes.fork_from_server({"file"})
pool = ProcessPoolExecutor(
    1,
    mp_context=shard_processes._context(),
    initializer=shard_processes._start_worker,
    initargs=(30, {}, 1, ended.pid),
)
try:
    pool.submit(abs, -1).result(timeout=60)
except BrokenProcessPool:
    print("ended")
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs POSIX signals")
def test_a_worker_process_ended_while_it_starts_ends_without_a_traceback():
    """A build stopped (Ctrl-C) as its shard processes start sends them SIGTERM while their
    initializer runs: each must end quietly, as it has nothing to clean up. Its handler, set
    before the initializer's end, raised SystemExit inside it, and ProcessPoolExecutor printed
    'Exception in initializer:' and a traceback below the build's two lines."""
    done = subprocess.run(
        [sys.executable, "-c", _ENDED_WHILE_STARTING],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout.strip() == "ended", done.stderr
    assert "Traceback" not in done.stderr, done.stderr
