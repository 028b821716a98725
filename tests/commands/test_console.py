"""The pieces of the command line around a build: the command that resumes, Beam's defaults."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import types

import pytest

from beam_tfrecord.beam.options import local_defaults, runs_here
from beam_tfrecord.commands import console


def test_resume_command_is_the_same_with_resume(monkeypatch):
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    command = console.resume_command(
        ["/nowhere/bin/beam-tfrecord", "build", "--input", "a b/**", "--output", "o", "--overwrite"]
    )
    # Not on the PATH under that name: the whole path, so that it runs as printed.
    assert command == "/nowhere/bin/beam-tfrecord build --input 'a b/**' --output o --resume"


def test_resume_command_of_the_beam_driver(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="pipelines.images_to_tfrecord")
    monkeypatch.setitem(sys.modules, "__main__", main)
    command = console.resume_command(["/repo/pipelines/images_to_tfrecord.py", "--resume"])
    assert command.endswith(" -m pipelines.images_to_tfrecord --resume")


@pytest.mark.parametrize("in_venv", [True, False])
def test_the_interpreter_is_named_alone_only_where_that_name_runs_it(tmp_path, in_venv):
    """A venv's `python` links to the interpreter it was made from: the PATH's `python`, the
    same file, printed as `python -m ...`, ran without the venv's packages (found by a
    new-user trial: `ModuleNotFoundError: No module named 'fsspec'`)."""
    base = tmp_path / "base" / "bin"
    base.mkdir(parents=True)
    (base / "python").write_text("#!/bin/sh\n")
    (base / "python").chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base}\n")
    (venv / "bin" / "python").symlink_to(base / "python")
    path_dir = venv / "bin" if in_venv else base
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(path_dir))
        # The build ran as `venv/bin/python -m ...`.
        typed = console._as_typed(str(venv / "bin" / "python"))
    assert typed == ("python" if in_venv else str(venv / "bin" / "python"))


def test_local_defaults():
    plain = argparse.Namespace(runner=None)
    assert local_defaults([], plain) == ["--direct_running_mode=in_memory"]
    given = ["--direct_num_workers=2"]
    assert local_defaults(given, plain) == given
    remote = argparse.Namespace(runner="DataflowRunner")
    assert not runs_here(remote)
    assert local_defaults(["--project=p"], remote) == ["--project=p"]
    assert runs_here(argparse.Namespace(runner="DirectRunner"))


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds child processes in /proc")
def test_ending_child_processes_leaves_the_resource_tracker_and_does_not_wait_for_it():
    """multiprocessing's resource tracker ignores SIGTERM by design; waiting for it cost an
    interrupted build its whole 2 s of grace, then killed what would have cleaned up."""
    script = textwrap.dedent(
        """
        import concurrent.futures, multiprocessing, os, sys, time
        from beam_tfrecord.commands.console import _alive, _children, end_child_processes
        pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        worker = pool.submit(os.getpid).result(timeout=60)
        before = set(_children(os.getpid()))
        started = time.monotonic()
        end_child_processes(grace=5.0)
        took = time.monotonic() - started
        after = {pid for pid in before if _alive(pid)}
        print(took < 2.0, worker in before and worker not in after, len(after))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "1"], done.stdout  # the tracker is left


def test_a_written_template_is_not_called_submitted(capsys):
    """--template_location: DataflowRunner writes the job to a file and submits nothing."""
    from beam_tfrecord.beam.pipeline import SubmittedBuild
    from beam_tfrecord.commands.summary import print_submitted
    from beam_tfrecord.config import BuildConfig

    written = SubmittedBuild("DataflowRunner", "TEMPLATE_WRITTEN", None, False, 116, 171_000)
    config = BuildConfig(inputs=("gs://b/src/**",), output="gs://b/ds/pets", name="pets")
    print_submitted(written, config, template="gs://b/templates/pets.json")
    out = capsys.readouterr().out
    assert out.startswith(
        "Wrote the job for 'pets' (116 transforms, a 171.0 KB graph) as a template to "
        "gs://b/templates/pets.json; nothing was submitted."
    )
    assert "Submitted" not in out
    assert out.rstrip().endswith("beam-tfrecord verify gs://b/ds/pets")
