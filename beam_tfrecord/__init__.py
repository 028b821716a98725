"""beam-tfrecord: image folders to sharded TFRecord datasets, with Apache Beam."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("beam-tfrecord")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
