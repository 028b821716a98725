"""A time limit on the silence of every Google Cloud Storage request, so a build never waits for ever.

gcsfs sends its requests with no time limit (`requests_timeout=None`). A connection that the store
or the network dropped without a word (a NAT or load balancer that forgot it, a store front end
that stopped answering) then holds its read, its upload or its listing, and with it a shard and
the whole build, for ever: a scheduled build neither ends nor reports.

So unless a program set `requests_timeout` itself (as an argument, in fsspec's settings, or as
`FSSPEC_GS='{"requests_timeout": ...}'`), a gs:// filesystem gets one: a connection not made in
`CONNECT_SECONDS`, or an answer that stops coming for `SILENCE_SECONDS`, fails as a timeout. gcsfs
retries it on a new connection (6 tries, with backoff); an image that still cannot be read is a
report line, a shard that cannot be uploaded a failed task. It limits silence, not length: an
upload block or a large image on a slow link takes as long as it takes while bytes keep coming.

The default is put in place when fsspec first imports gcsfs's filesystem class: `install` puts
this module in fsspec's registry for "gs" and "gcs", in front of gcsfs. The launcher, its shard
processes and every runner's workers import `beam_tfrecord.storage`, so each gets the default,
and a build that never touches gs:// does not import aiohttp for it.
"""

from __future__ import annotations

from typing import Any

import fsspec
import fsspec.config
from fsspec.registry import known_implementations, registry

__all__ = ["CONNECT_SECONDS", "SILENCE_SECONDS", "apply_default", "install"]

CONNECT_SECONDS = 30
SILENCE_SECONDS = 60

_PROTOCOLS = ("gs", "gcs")
_GCSFS_CLASS = "gcsfs.GCSFileSystem"


def install() -> None:
    """Makes every gs:// filesystem made through fsspec from now on get the default time limit."""
    if any(protocol in registry for protocol in _PROTOCOLS):
        apply_default()  # gcsfs, and so aiohttp, are imported already
        return
    for protocol in _PROTOCOLS:
        entry = known_implementations.get(protocol)
        if entry is not None and entry["class"] == _GCSFS_CLASS:
            fsspec.register_implementation(
                protocol, f"{__name__}.GCSFileSystem", clobber=True, errtxt=entry["err"]
            )


def apply_default() -> None:
    """Puts the time limit in fsspec's settings for gs://, unless a program put one there."""
    settings = fsspec.config.conf.setdefault("gs", {})
    if "requests_timeout" in settings or "requests_timeout" in fsspec.config.conf.get("gcs", {}):
        return
    import aiohttp

    settings["requests_timeout"] = aiohttp.ClientTimeout(
        sock_connect=CONNECT_SECONDS, sock_read=SILENCE_SECONDS
    )


def __getattr__(name: str) -> Any:
    # What fsspec's registry imports for gs:// in place of gcsfs.GCSFileSystem: that very class,
    # once the default is in place.
    if name == "GCSFileSystem":
        import gcsfs

        apply_default()
        return gcsfs.GCSFileSystem
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
