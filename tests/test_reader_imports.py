"""Reading a dataset pulls in neither Beam, Pillow nor numpy: they are the build's, not a reader's."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_reader_loads_no_beam_pillow_or_numpy():
    code = (
        "import beam_tfrecord.reader, json, sys; "
        "print(json.dumps([m for m in ('apache_beam', 'PIL', 'numpy') if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout) == []


def test_a_shard_process_loads_no_beam_or_numpy():
    # What a shard process imports to write shards and measure records: each process pays for
    # it as it starts, and a build starts one per core.
    code = (
        "import beam_tfrecord.shard_processes, json, sys; "
        "print(json.dumps([m for m in ('apache_beam', 'numpy') if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout) == []
