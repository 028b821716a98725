"""beam-tfrecord: image folders to sharded TFRecord datasets, with Apache Beam."""

__all__ = ["__version__"]


def __getattr__(name: str):
    # Looked up when asked for: importing the package (the first step of every command, where a
    # Ctrl-C is caught only once the command's modules load) stays instant.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        return metadata.version("beam-tfrecord")
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"
