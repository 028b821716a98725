"""Reading a dataset pulls in neither Beam, Pillow nor numpy: they are the build's, not a reader's."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_reader_loads_no_beam_pillow_or_numpy():
    assert _loaded_after("import beam_tfrecord.reader") == []


def test_a_shard_process_loads_no_beam_or_numpy():
    # What a shard process imports to write shards and measure records: each process pays for
    # it as it starts, and a build starts one per core. Pillow it needs.
    assert _loaded_after("import beam_tfrecord.shard_processes") == ["PIL"]


def _loaded_after(statement: str) -> list[str]:
    """Which of Beam, Pillow and numpy a fresh interpreter has loaded after `statement`."""
    code = (
        f"{statement}; import json, sys; "
        "print(json.dumps([m for m in ('apache_beam', 'PIL', 'numpy') if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(done.stdout)


def test_the_public_api_is_one_import_and_loads_beam_only_for_build():
    assert _loaded_after("import beam_tfrecord") == []
    assert _loaded_after("from beam_tfrecord import Dataset, list_shards") == []
    # A config is made and checked without decoding anything.
    settings = "{'input': ['x/**'], 'output': 'o', 'resize': '64'}"
    config = f"from beam_tfrecord import BuildConfig; BuildConfig.from_settings({settings})"
    assert _loaded_after(config) == []
    assert _loaded_after("from beam_tfrecord import BuildFailed, ConfigError, release_output") == []
    assert "apache_beam" in _loaded_after("from beam_tfrecord import build")


def test_every_public_name_is_the_one_its_module_defines():
    import beam_tfrecord
    from beam_tfrecord.config import BuildConfig
    from beam_tfrecord.reader import Dataset

    assert beam_tfrecord.BuildConfig is BuildConfig and beam_tfrecord.Dataset is Dataset
    for name in beam_tfrecord.__all__:
        assert getattr(beam_tfrecord, name) is not None
    assert set(beam_tfrecord.__all__) <= set(dir(beam_tfrecord))
