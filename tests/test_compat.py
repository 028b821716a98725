"""Each private or version-specific part of Python and Beam the package relies on, gathered in
`compat` and `beam.compat`, still there and behaving as relied on: a test per entry, failing on
the release that changes it."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import subprocess
import sys
import textwrap
import threading
from importlib import metadata
from pathlib import Path

import pytest

from beam_tfrecord import compat


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def test_the_ranges_checked_hold_the_versions_these_tests_ran_on():
    """Bump BEAM_CHECKED or PYTHON_CHECKED when this file passes on a release outside them."""
    beam = _release(metadata.version("apache-beam"))
    low, high = (_release(v) for v in compat.BEAM_CHECKED)
    python = sys.version_info[:2]
    py_low, py_high = (_release(v) for v in compat.PYTHON_CHECKED)
    if not (low <= beam <= high and py_low <= python <= py_high):
        pytest.skip(f"apache-beam {beam} / Python {python}: outside the ranges checked")
    assert low <= beam <= high


# --- Python ----------------------------------------------------------------------------------


def test_option_strings_are_argparses_every_flag_in_order():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-v", "--verbose", action="store_true")
    group = parser.add_argument_group("g")
    group.add_argument("--input-list")
    assert compat.option_strings(parser) == ["-v", "--verbose", "--input-list"]


def test_subcommand_parsers_are_found_by_name():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    build = sub.add_parser("build")
    verify = sub.add_parser("verify")
    assert compat.subcommand_parsers(parser) == {"build": build, "verify": verify}


def test_run_exit_handlers_runs_each_once_before_a_hard_exit():
    code = textwrap.dedent(
        """
        import atexit, os, sys
        from beam_tfrecord.compat import run_exit_handlers
        atexit.register(lambda: sys.stdout.write("ran\\n"))
        run_exit_handlers()
        sys.stdout.flush()
        os._exit(0)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "ran\n"


@pytest.mark.parametrize("released", [False, True])
def test_release_named_semaphores_leaves_the_resource_tracker_nothing_to_warn_of(released):
    """A process pool still held when the process ends by `os._exit` (an interrupted build):
    released first, the resource tracker has no leak to report on stderr; not released, it has
    (which shows this test can tell)."""
    code = textwrap.dedent(
        f"""
        import os
        from concurrent.futures import ProcessPoolExecutor
        from beam_tfrecord.compat import SpawnWithoutMain, release_named_semaphores
        pool = ProcessPoolExecutor(1, mp_context=SpawnWithoutMain())
        assert pool.submit(os.getpid).result(timeout=60) != os.getpid()
        if {released}:
            release_named_semaphores()
        for process in list(pool._processes.values()):
            process.kill()
        os._exit(130)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    leaked = "leaked semaphore" in done.stderr
    assert leaked != released, done.stderr


def test_end_fork_server_makes_the_forked_processes_cpu_this_processs_childrens():
    """The fork server reaped, the CPU of the processes it forked counts in this process's
    RUSAGE_CHILDREN (what `time` reports); and the next fork starts a new server."""
    code = textwrap.dedent(
        """
        import multiprocessing, resource
        from beam_tfrecord.compat import end_fork_server

        def children():
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            return usage.ru_utime + usage.ru_stime

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([])
        with context.Pool(1) as pool:  # sum, a builtin: nothing of this script to unpickle
            pool.apply(sum, (range(30_000_000),))
        before = children()
        end_fork_server()
        print(round(children() - before, 1) >= 0.2)
        with context.Pool(1) as pool:
            print(pool.apply(sum, (range(4),)))
        end_fork_server()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "6"], done.stderr


def test_end_fork_server_ends_it_without_its_interpreters_exit(tmp_path):
    """The server has nothing left to do once its processes have ended: it is ended at once,
    not left to free every module it imported (its exit handlers, which would, never run)."""
    (tmp_path / "left_as_a_program.py").write_text(
        textwrap.dedent(
            f"""
            import atexit, pathlib
            atexit.register(pathlib.Path({str(tmp_path / "exited")!r}).write_text, "ran")
            """
        )
    )
    code = textwrap.dedent(
        """
        import multiprocessing
        from beam_tfrecord.compat import end_fork_server

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["left_as_a_program"])
        with context.Pool(1) as pool:
            print(pool.apply(sum, (range(4),)))
        end_fork_server()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["6"], done.stderr
    assert not (tmp_path / "exited").exists()


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, [compat.PILLOW_BLOCKS, compat.PILLOW_BLOCK_SIZE]),
        # The user's own settings of Pillow's allocator are theirs.
        ({"PILLOW_BLOCKS_MAX": "0"}, [0, 16 * 1024 * 1024]),
        ({"PILLOW_BLOCK_SIZE": "1m"}, [0, 1024 * 1024]),
    ],
)
def test_reuse_image_memory_sets_pillows_block_cache_unless_the_environment_does(
    environment, expected
):
    code = textwrap.dedent(
        """
        from PIL import Image
        from beam_tfrecord.compat import reuse_image_memory

        reuse_image_memory()
        print(Image.core.get_blocks_max(), Image.core.get_block_size())
        Image.new("RGB", (640, 480)).resize((320, 240))  # allocates and frees with the cache
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PILLOW_", "MALLOC_"))}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, **environment},
    )
    assert done.returncode == 0, done.stderr
    assert [int(v) for v in done.stdout.split()] == expected


@pytest.mark.parametrize(
    ("environment", "calls"),
    [
        (
            {},
            [
                (compat._M_MMAP_THRESHOLD, compat.MALLOC_MMAP_THRESHOLD),
                (compat._M_TRIM_THRESHOLD, compat.MALLOC_TRIM_THRESHOLD),
            ],
        ),
        ({"MALLOC_TRIM_THRESHOLD_": "131072"}, []),  # the user's own settings are theirs
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}, []),
    ],
)
def test_reuse_image_memory_sets_mallocs_thresholds_unless_the_environment_does(
    monkeypatch, environment, calls
):
    for name in compat._MALLOC_ENVIRONMENT + compat._PILLOW_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PILLOW_BLOCKS_MAX", "0")  # this process's Pillow left as it is
    made = []
    monkeypatch.setattr(compat, "_glibc_mallopt", lambda: lambda *call: made.append(call) or 1)
    compat.reuse_image_memory()
    assert made == calls


@pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""),
    reason="glibc's malloc only",
)
def test_glibcs_mallopt_takes_the_thresholds():
    """mallopt answers 1 where it took a setting (0 where it did not)."""
    mallopt = compat._glibc_mallopt()
    assert mallopt is not None
    assert mallopt(compat._M_MMAP_THRESHOLD, compat.MALLOC_MMAP_THRESHOLD) == 1
    assert mallopt(compat._M_TRIM_THRESHOLD, compat.MALLOC_TRIM_THRESHOLD) == 1


def test_spawned_processes_do_not_import_the_launchers_main_again(tmp_path):
    script = tmp_path / "launcher.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            from concurrent.futures import ProcessPoolExecutor

            if __name__ != "__main__":
                raise SystemExit("the launcher's __main__ was imported again")

            from beam_tfrecord.compat import SpawnWithoutMain

            with ProcessPoolExecutor(1, mp_context=SpawnWithoutMain()) as pool:
                child = pool.submit(os.getpid).result(timeout=60)
            print(child != os.getpid())
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


# --- Beam's names and texts ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        compat.BEAM_DATAFLOW_JOB_LOGGER,
        compat.BEAM_WORKER_RECORDS_LOGGER,
        compat.BEAM_TYPE_HINT_LOGGER,
        compat.BEAM_TRANSFORM_ERROR_LOGGER,
        compat.BEAM_MONGODB_LOGGER,
    ],
)
def test_beams_loggers_are_where_they_are_named(name):
    module = importlib.import_module(name)
    assert module._LOGGER.name == name


def test_beams_import_noise_is_the_text_its_bigquery_client_logs():
    import inspect

    from apache_beam.io.gcp.internal.clients import bigquery

    assert compat.BEAM_IMPORT_NOISE in inspect.getsource(bigquery)


def test_beams_mongodb_noise_is_the_text_its_connector_logs_without_a_driver():
    import inspect

    from apache_beam.io import mongodbio

    assert compat.BEAM_MONGODB_NOISE in inspect.getsource(mongodbio)


_LEAN_IMPORT = """
import sys
from beam_tfrecord import compat
{before}
compat.import_beam_for_one_local_build()
import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to
left_out = [m for m in compat.BEAM_UNUSED_BY_A_LOCAL_BUILD if m in sys.modules]
with beam.Pipeline() as p:
    assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2), equal_to([2, 4, 6]))
import apache_beam.io.gcp.gcsfilesystem  # importable later, as if never left out
print(left_out, flush=True)
"""


def _lean_import(before: str = "") -> subprocess.CompletedProcess:
    code = textwrap.dedent(_LEAN_IMPORT).format(before=before)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_beam_is_imported_for_a_local_build_without_what_it_never_uses():
    """Each module left out exists in this Beam, and Beam's import loads it when not left out:
    else leaving it out would save nothing and this list would be stale."""
    done = _lean_import()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert done.stderr == "", "leaving them out makes Beam log nothing"
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, apache_beam; print(sorted(sys.modules))"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    for name in compat.BEAM_UNUSED_BY_A_LOCAL_BUILD:
        assert repr(name) in loaded, f"Beam's import no longer loads {name}"


def test_a_beam_that_needs_a_module_left_out_is_imported_whole():
    done = _lean_import('compat.BEAM_UNUSED_BY_A_LOCAL_BUILD += ("apache_beam.coders.coders",)')
    assert done.returncode == 0, done.stderr
    assert "apache_beam.io.gcp.gcsfilesystem" in done.stdout, "imported whole, as usual"


# --- Beam's objects --------------------------------------------------------------------------


def test_views_of_beams_options_share_their_values():
    """What BuildOptions' one view per class relies on."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(["--runner=DirectRunner"])
    first = options.view_as(StandardOptions)
    assert first._all_options is options._all_options
    first.runner = "DataflowRunner"
    assert options.view_as(StandardOptions).runner == "DataflowRunner"


def test_the_fn_api_runner_runs_a_pipeline_with_its_options():
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.runner import PipelineState
    from apache_beam.testing.util import assert_that, equal_to

    from beam_tfrecord.beam.pipeline import LocalRunner

    pipeline = beam.Pipeline(runner=LocalRunner(), options=PipelineOptions([]))
    assert_that(pipeline | beam.Create([1, 2]) | beam.Map(lambda x: x * 10), equal_to([10, 20]))
    assert pipeline.run().state == PipelineState.DONE


def test_a_bundle_run_here_is_sampled_promptly_and_beams_sampler_is_back_after():
    """A bundle's end waits out its state sampler's sleep: within the run, Beam's sampler wakes
    every 20 ms at most, not every 200 ms; the samplers a bundle makes are still Beam's class,
    and after the run Beam's class is back as it was."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.worker import statesampler
    from apache_beam.testing.util import assert_that, equal_to

    from beam_tfrecord.beam.compat import PROMPT_SAMPLING_MS
    from beam_tfrecord.beam.pipeline import LocalRunner

    beams = statesampler.StateSampler

    def sampler_of_this_bundle(_):
        tracker = statesampler.get_current_tracker()
        return (isinstance(tracker, beams), tracker.sampling_period_ms)

    pipeline = beam.Pipeline(runner=LocalRunner(), options=PipelineOptions([]))
    seen = pipeline | beam.Create([1]) | beam.Map(sampler_of_this_bundle)
    assert_that(seen, equal_to([(True, PROMPT_SAMPLING_MS)]))
    pipeline.run().wait_until_finish()
    assert statesampler.StateSampler is beams
    assert statesampler.DEFAULT_SAMPLING_PERIOD_MS > PROMPT_SAMPLING_MS


def test_dofn_specs_are_found_once_per_dofn_within_the_block_and_beam_sees_state(monkeypatch):
    """Beam's callers find `get_dofn_specs` in its module at every call; within the block each
    DoFn's specs are found once, the same answer, and a stateful DoFn still runs with its
    state. After the block, Beam's function is back."""
    import apache_beam as beam
    from apache_beam.coders import VarIntCoder
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms import userstate

    from beam_tfrecord.beam.compat import dofn_specs_remembered
    from beam_tfrecord.beam.pipeline import LocalRunner

    asked = []
    original = userstate.get_dofn_specs

    def counted(dofn):
        asked.append(type(dofn).__name__)
        return original(dofn)

    monkeypatch.setattr(userstate, "get_dofn_specs", counted)

    class Totals(beam.DoFn):
        TOTAL = userstate.ReadModifyWriteStateSpec("total", VarIntCoder())

        def process(self, element, total=beam.DoFn.StateParam(TOTAL)):  # noqa: B008 (Beam's form)
            key, value = element
            now = (total.read() or 0) + value
            total.write(now)
            yield key, now

    class Plain(beam.DoFn):
        def process(self, element):
            yield element

    stateful, plain = Totals(), Plain()
    with dofn_specs_remembered():
        assert userstate.get_dofn_specs(stateful) == original(stateful)
        assert userstate.get_dofn_specs(stateful) == original(stateful)
        assert userstate.is_stateful_dofn(stateful) and not userstate.is_stateful_dofn(plain)
        # Found from their classes' methods, each class's once, not by Beam's function.
        assert asked == [], "Beam's function is not asked"
        pipeline = beam.Pipeline(runner=LocalRunner(), options=PipelineOptions([]))
        totals = (
            pipeline
            | beam.Create([("a", 1), ("a", 2), ("b", 5)])
            | beam.ParDo(Totals())
            | beam.ParDo(Plain())
            | beam.CombinePerKey(max)  # a running total per key, in any order: its last
        )
        assert_that(totals, equal_to([("a", 3), ("b", 5)]))
        pipeline.run().wait_until_finish()
    assert userstate.get_dofn_specs is counted


def test_specs_kept_by_class_are_beams_for_every_dofn_of_a_build(tmp_path, monkeypatch):
    """Within the block a DoFn's specs come from its class's, found once, and its hooked
    methods' (a Map's function): for every DoFn a real build asks about, Beam's own answer."""
    from apache_beam.transforms import userstate

    from beam_tfrecord.beam import compat as beam_compat
    from beam_tfrecord.beam import pipeline
    from beam_tfrecord.config import BuildConfig

    original = userstate.get_dofn_specs
    kept_by_class = beam_compat._class_specs
    checked: list[str] = []

    def checking(dofn, by_class):
        found = kept_by_class(dofn, by_class)
        assert found is not None, f"{type(dofn).__name__}: kept by class"
        assert found == original(dofn), type(dofn).__name__
        checked.append(type(dofn).__name__)
        return found

    monkeypatch.setattr(beam_compat, "_class_specs", checking)
    samples = Path(__file__).parent.parent / "samples" / "fruits"
    config = BuildConfig.from_settings({"inputs": [str(samples)], "output": str(tmp_path / "out")})
    assert pipeline.build(config).manifest["inputs"]["written"] == 45
    assert "CallableWrapperDoFn" in checked and "_WriteShardFn" in checked
    assert len(checked) > 2 * len(set(checked)), "the same classes asked about again and again"


def test_specs_kept_by_class_take_each_maps_own_function():
    """Two Maps share a class, not a function (whose parameters Beam reads only where it is a
    bound method); DoFns of one class with a method set on the object each get their own."""
    import apache_beam as beam
    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms import userstate

    from beam_tfrecord.beam.compat import _class_specs

    spec = userstate.ReadModifyWriteStateSpec("seen", VarIntCoder())

    def stateful(element, seen=beam.DoFn.StateParam(spec)):  # noqa: B008 (Beam's form)
        return element

    def plain(element):
        return element

    by_class: dict = {}
    for fn in (plain, stateful, plain, stateful):
        dofn = beam.Map(fn).fn
        assert _class_specs(dofn, by_class) == userstate.get_dofn_specs(dofn)
    assert len(by_class) == 1, "one class, the same names set on each object"

    class Holder:
        def keep(self, element, seen=beam.DoFn.StateParam(spec)):  # noqa: B008
            return element

    class Shadowed(beam.DoFn):
        def process(self, element):
            yield element

    # Set on the object, not its class: a function Beam passes over, a bound method it reads.
    for process in (stateful, Holder().keep, plain, Holder().keep):
        shadowed = Shadowed()
        shadowed.process = process
        assert _class_specs(shadowed, by_class) == userstate.get_dofn_specs(shadowed)
    assert _class_specs(shadowed, by_class)[0] == {spec}


def test_a_portable_runners_job_id_is_found():
    from apache_beam.runners.portability.portable_runner import PipelineResult

    from beam_tfrecord.beam.compat import job_id_of

    result = PipelineResult(None, "job-7", None, None)
    assert job_id_of(result) == "job-7"


def test_dataflows_job_is_found_on_its_result_or_runner():
    from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult

    from beam_tfrecord.beam.compat import job_of

    class Runner:
        job = "the job"

    assert job_of(DataflowPipelineResult(None, Runner())) == "the job"


def test_a_refused_job_is_recognised_by_beams_texts(tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.stager import Stager

    from beam_tfrecord.beam.compat import refused_job

    options = PipelineOptions(["--runner=DataflowRunner"])  # no project, region, temp_location
    with pytest.raises(ValueError) as invalid:
        beam.Pipeline(options=options)
    assert refused_job(invalid.value) and "\n" not in refused_job(invalid.value)
    missing = str(tmp_path / "requirements.txt")
    staging = PipelineOptions([f"--requirements_file={missing}"])
    with pytest.raises(RuntimeError) as not_found:
        Stager.create_job_resources(staging, str(tmp_path))
    assert refused_job(not_found.value) == " ".join(str(not_found.value).split())
    assert refused_job(RuntimeError("anything else")) is None


def test_a_transforms_error_names_its_step_and_is_logged_where_named(caplog):
    import apache_beam as beam

    from beam_tfrecord.beam.compat import raised_in, without_step_names
    from beam_tfrecord.beam.pipeline import LocalRunner

    def fail(_):
        raise OSError("the store said no")

    class WriteShards(beam.PTransform):  # a composite, as the build's steps are
        def expand(self, items):
            return items | "Write" >> beam.ParDo(fail)

    pipeline = beam.Pipeline(runner=LocalRunner())
    _ = pipeline | "Outer" >> (beam.Create([1]) | "WriteShards" >> WriteShards())
    errors = caplog.at_level(logging.ERROR, logger=compat.BEAM_TRANSFORM_ERROR_LOGGER)
    with errors, pytest.raises(Exception) as failed:
        pipeline.run().wait_until_finish()
    chain, seen = [], failed.value
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    assert any(raised_in(error, "WriteShards") for error in chain)
    # A step that is a transform itself, the last part of the label (a full disk in
    # 'ConvertImages/WriteManifest' was "the build failed").
    assert raised_in(OSError("no space [while running 'Build/WriteManifest']"), "WriteManifest")
    assert not raised_in(OSError("[while running 'Build/WriteManifests']"), "WriteManifest")
    # As Dataflow's Runner v2 labels it; and not a path that merely names the step.
    assert raised_in(OSError("[while running 'B/WriteManifest-ptransform-57']"), "WriteManifest")
    assert not raised_in(FileNotFoundError(2, "No such file", "/data/WriteReport"), "WriteReport")
    refused = next(e for e in chain if isinstance(e, OSError))
    assert without_step_names(str(refused)) == "the store said no"
    assert any(r.name == compat.BEAM_TRANSFORM_ERROR_LOGGER for r in caplog.records)


def test_beams_option_parser_knows_every_options_class_and_raises():
    from beam_tfrecord.beam.compat import OptionRefused, beam_flags, beam_option_parser

    flags = beam_flags()
    assert {"--runner", "--direct_num_workers", "--project", "--temp_location"} <= set(flags)
    parser = beam_option_parser()
    known, unknown = parser.parse_known_args(["--direct_num_workers=2", "--nope"])
    assert known.direct_num_workers == 2 and unknown == ["--nope"]
    with pytest.raises(OptionRefused):
        parser.parse_known_args(["--direct_num_workers=two"])


def test_a_process_is_running_until_it_ends_and_waited_for_by_one_not_its_parent():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        assert compat.process_running(child.pid)
        waiting = threading.Thread(target=compat.wait_for_exit, args=(child.pid,))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive(), "it returned before the process ended"
        child.stdin.close()
        child.wait(timeout=30)
        waiting.join(10)
        assert not waiting.is_alive()
        assert not compat.process_running(child.pid)
    finally:
        child.kill()
