"""The Beam shell: composite transforms that wire the pure modules together, and the build pipeline."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

from beam_tfrecord.compat import BEAM_IMPORT_NOISE


@contextlib.contextmanager
def callers_logging_kept() -> Iterator[None]:
    """Keeps Beam from setting up the program's logging while the block runs.

    Beam calls `logging.basicConfig()` as it makes its pipeline options, and logs with
    `logging.warning` as it is imported without its Google Cloud extras ("apitools not
    found..."); with no handler on the root logger, either gives it one, and a program that
    imported or called this package would then print every later warning of every library as
    `WARNING:root:...`, a choice that is the program's to make. Meanwhile the root logger has
    the handler Python uses when there is none (`logging.lastResort`: warnings and worse, bare,
    to stderr), so what is logged shows as it would have; the import's one message is dropped.
    """
    root = logging.getLogger()
    placeholder = logging.lastResort if not root.handlers else None

    def noise(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(BEAM_IMPORT_NOISE)

    root.addFilter(noise)
    if placeholder is not None:
        root.addHandler(placeholder)
    try:
        yield
    finally:
        root.removeFilter(noise)
        if placeholder is not None:
            root.removeHandler(placeholder)


if "apache_beam" not in sys.modules:
    with callers_logging_kept():
        import apache_beam  # noqa: F401
