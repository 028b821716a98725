"""The pieces of the command line around a build: the command that resumes, Beam's defaults."""

from __future__ import annotations

import argparse
import sys
import types

from beam_tfrecord.commands import console
from beam_tfrecord.commands.beam_flags import local_defaults, runs_here


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


def test_local_defaults():
    plain = argparse.Namespace(runner=None)
    assert local_defaults([], plain) == ["--direct_running_mode=in_memory"]
    given = ["--direct_num_workers=2"]
    assert local_defaults(given, plain) == given
    remote = argparse.Namespace(runner="DataflowRunner")
    assert not runs_here(remote)
    assert local_defaults(["--project=p"], remote) == ["--project=p"]
    assert runs_here(argparse.Namespace(runner="DirectRunner"))
