"""The Beam shell: composite transforms that wire the pure modules together, and the build pipeline."""

from __future__ import annotations

import logging
import sys

# What Beam logs to the root logger as it is imported without its Google Cloud extras (this
# package's own install): the BigQuery client it does not need here cannot be loaded.
_IMPORT_NOISE = "apitools not found"


def _import_beam_quietly() -> None:
    """Imports Apache Beam without its import-time warning of a missing BigQuery client.

    Beam logs it with `logging.warning`, which, when the root logger has no handler, also
    gives it one (`logging.basicConfig`): a program that imported this package would then
    print every later warning of every library as `WARNING:root:...`, a choice that is the
    program's to make. The import runs with a placeholder handler and a filter for that one
    message; both go once Beam is loaded.
    """
    if "apache_beam" in sys.modules:
        return
    root = logging.getLogger()
    placeholder = logging.NullHandler() if not root.handlers else None

    def noise(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_IMPORT_NOISE)

    root.addFilter(noise)
    if placeholder is not None:
        root.addHandler(placeholder)
    try:
        import apache_beam  # noqa: F401
    finally:
        root.removeFilter(noise)
        if placeholder is not None:
            root.removeHandler(placeholder)


_import_beam_quietly()
