"""beam-tfrecord: image folders to sharded TFRecord datasets, with Apache Beam.

The public API, in one import::

    from beam_tfrecord import (
        build, BuildConfig, BuildFailed, ConfigError, Dataset, list_shards, release_output
    )

and what `build` returns, `BuildResult` (a finished build) or `SubmittedBuild` (a job not waited
for). Each name is imported when first asked for, so importing the package, or reading a dataset
with `Dataset`, loads neither Beam nor Pillow nor numpy: only `build` (and the classes it
returns) brings in Beam.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = [
    "BuildConfig",
    "BuildFailed",
    "BuildResult",
    "ConfigError",
    "Dataset",
    "SubmittedBuild",
    "__version__",
    "build",
    "list_shards",
    "release_output",
]

# Each public name -> the module that defines it.
_HOMES = {
    "BuildConfig": "beam_tfrecord.config",
    "BuildFailed": "beam_tfrecord.verdict",
    "BuildResult": "beam_tfrecord.beam.pipeline",
    "ConfigError": "beam_tfrecord.config",
    "Dataset": "beam_tfrecord.reader",
    "SubmittedBuild": "beam_tfrecord.beam.pipeline",
    "build": "beam_tfrecord.beam.pipeline",
    "list_shards": "beam_tfrecord.reader",
    "release_output": "beam_tfrecord.output_lock",
}

if TYPE_CHECKING:
    from beam_tfrecord.beam.pipeline import BuildResult, SubmittedBuild, build
    from beam_tfrecord.config import BuildConfig, ConfigError
    from beam_tfrecord.output_lock import release_output
    from beam_tfrecord.reader import Dataset, list_shards
    from beam_tfrecord.verdict import BuildFailed


def __getattr__(name: str):
    # Looked up when asked for: importing the package (the first step of every command, where a
    # Ctrl-C is caught only once the command's modules load) stays instant, and a reader's
    # import does not load the build's Beam.
    if name == "__version__":
        return _version()
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("beam-tfrecord")
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"
