"""Where a path or URL points: this machine's disk, memory, or an object store, and which one.

The one place that answers "is this local?": every other module asks here, by URL (no filesystem
made) or by fsspec filesystem. A URL names its protocol (`gs://b/x`, `memory://x`); a plain path
(`data/cats`, `/data`) is on this machine's disk.
"""

from __future__ import annotations

import importlib.util
import posixpath
import re

import fsspec
from fsspec.registry import known_implementations, registry
from fsspec.utils import get_protocol

__all__ = [
    "AsyncStores",
    "async_store",
    "has_dot_segment",
    "has_protocol",
    "is_gcsfs",
    "is_local",
    "is_local_url",
    "is_memory_url",
    "is_object_store",
    "is_remote",
    "is_s3fs",
    "is_store_url",
    "normalized",
    "protocol_of",
    "protocol_problem",
    "reached_alike",
    "without_protocol",
]

# This machine's disk.
_LOCAL = frozenset({"file", "local"})
# This machine's disk and memory: every other protocol is an object store's.
_NOT_STORES = _LOCAL | {"memory"}
# What a process this one starts reaches as this one does (memory is each process's own).
_SHARED = _LOCAL | {"gs", "gcs", "s3", "s3a"}
# A URL with a slash or its colon left out (`s3:/bucket/x`, `s3//bucket/x`): a plain path to
# fsspec, which a build would take for a folder on this machine's disk.
# Without the colon only a store's (a folder `data//x` is no `data://` URL).
_MISTYPED = re.compile(r"^(?P<protocol>[A-Za-z][A-Za-z0-9+.-]*)(?P<sep>:/|//)(?P<rest>[^/].*)$")


def has_protocol(url: str) -> bool:
    """Whether `url` names its protocol (`gs://b/x`, `file:///x`), rather than being a plain
    path on this machine (as listing gives local files)."""
    return "://" in url


def protocol_problem(url: str) -> str | None:
    """Why no filesystem on this machine opens `url`: a protocol fsspec does not know, or one
    whose package is not installed (`az://` without adlfs); None when one does. Nothing is
    imported to tell. A plain path that is a store's URL mistyped (`s3:/b/x`, `gs//b/x`) is
    refused too: taken as it is, it names a folder here, and a build's output went there."""
    if not has_protocol(url):
        return _mistyped(url)
    protocol = get_protocol(url)
    if protocol in registry:
        return None
    known = known_implementations.get(protocol)
    if known is None:
        return f"no filesystem is known for {protocol}:// (such as gs://, s3://, or a path)"
    package = known["class"].split(".", 1)[0]
    if importlib.util.find_spec(package) is None:
        return known.get("err") or f"{protocol}:// needs the package {package}, not installed"
    return None


def _mistyped(path: str) -> str | None:
    """Why a plain path looks like a URL with a slash or its colon left out; None if not."""
    match = _MISTYPED.match(path)
    if match is None:
        return None
    protocol = match["protocol"]
    if match["sep"] == "//":
        known = protocol in _SHARED - _LOCAL
    else:  # `file:/x` is a file URI; `C:/x` a Windows path
        known = protocol not in _LOCAL and (
            protocol in registry or protocol in known_implementations
        )
    if not known:
        return None
    fixed = f"{protocol}://{match['rest']}"
    return f"a mistyped URL, taken for a path on this disk; did you mean {fixed!r}?"


def without_protocol(url: str) -> str:
    """`url` without its `protocol://`: `gs://b/x` -> `b/x`; a plain path as it is."""
    return url.split("://", 1)[-1]


def normalized(url: str) -> str:
    """`url` with `.` and `..` taken out of its path, as `posixpath.normpath` takes them out of
    a plain one: `s3://b/lists/../x.jpg` -> `s3://b/x.jpg` (a store has no `lists/..` folder).
    A URL without them is left as it is: a store's key may hold `//`, which normpath folds."""
    if not has_protocol(url):
        return posixpath.normpath(url)
    protocol, path = url.split("://", 1)
    if not has_dot_segment(path):
        return url
    return f"{protocol}://{posixpath.normpath(path)}"


def has_dot_segment(path: str) -> bool:
    """Whether one of a path's segments is `.` or `..`."""
    return any(part in (".", "..") for part in path.split("/"))


def protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    """The filesystem's main protocol: `file`, `memory`, `gs`, `s3`, ..."""
    return fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]


def is_gcsfs(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether `fs` is gcsfs's own GCS filesystem, whose request parts (`_call`,
    `_get_headers`, `_location`) the reads, uploads and listings of a bucket use in place of
    its file-level methods; another gs:// filesystem gets only fsspec's interface."""
    cls = type(fs)
    return (
        cls.__module__.startswith("gcsfs.")
        and hasattr(cls, "_call")
        and hasattr(cls, "_get_headers")
    )


def is_s3fs(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether `fs` is s3fs's own S3 filesystem, whose client per bucket (`get_s3`) and
    settings the reads of objects use in place of `_cat_file` (`s3_get`); another s3://
    filesystem gets only fsspec's interface."""
    cls = type(fs)
    return cls.__module__.startswith("s3fs.") and hasattr(cls, "get_s3")


def is_local_url(url: str) -> bool:
    """Whether `url` is on this machine's disk (a plain path, or `file://`)."""
    return get_protocol(url) in _LOCAL


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether paths on `fs` are plain local paths."""
    return protocol_of(fs) in _LOCAL


def is_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether `fs` is an object store: no real folders and no atomic rename.

    There a rename is a copy and a delete (tens of seconds on the GCS emulator) and makedirs may
    create a bucket, but an object only appears once its upload completes. So files are written
    under their final names, and folders are never made. Elsewhere (local disk, memory) files are
    written under a temporary name and renamed, which publishes them whole.
    """
    return protocol_of(fs) not in _NOT_STORES


def is_store_url(url: str) -> bool:
    """`is_object_store` for a URL, with no filesystem made: not this machine's disk or memory."""
    return get_protocol(url) not in _NOT_STORES


def is_memory_url(url: str) -> bool:
    """Whether `url` is in fsspec's memory filesystem (`memory://x`, or a chain that reaches it:
    `simplecache::memory://x`): this process's own, holding nothing when it starts and gone
    when it ends."""
    return any(get_protocol(part) == "memory" for part in url.split("::"))


def reached_alike(url: str) -> bool:
    """Whether a process this one starts reaches `url` as this one does: not `memory://` (each
    process's own), nor a protocol whose settings may not travel to it."""
    return get_protocol(url) in _SHARED


def async_store(url: str) -> tuple[fsspec.AbstractFileSystem, str] | None:
    """The filesystem and path of `url` when it is on an object store reached through an async
    fsspec filesystem (gcsfs, s3fs), whose requests can be sent many at once; None otherwise."""
    if not has_protocol(url):
        return None
    fs, path = fsspec.core.url_to_fs(url)
    if not getattr(fs, "async_impl", False) or not is_object_store(fs):
        return None
    return fs, path


class AsyncStores:
    """`async_store` for many URLs: a protocol's filesystem found once, then given for every
    URL of it that names no options of its own (an object's version, say, or a chained URL),
    which still go through `async_store`. `fsspec.core.url_to_fs` took 25 us a URL."""

    def __init__(self):
        # protocol -> its async store's filesystem, or None where the protocol has none
        self._by_protocol: dict[str, fsspec.AbstractFileSystem | None] = {}

    def __call__(self, url: str) -> tuple[fsspec.AbstractFileSystem, str] | None:
        if not has_protocol(url) or "::" in url:
            return async_store(url)
        protocol = get_protocol(url)
        if protocol not in self._by_protocol:
            target = async_store(url)
            self._by_protocol[protocol] = None if target is None else target[0]
            return target
        fs = self._by_protocol[protocol]
        if fs is None:
            return None
        if fs._get_kwargs_from_urls(url):
            return async_store(url)
        return fs, fs._strip_protocol(url)


def is_remote(url: str) -> bool:
    """Whether `url` is on an object store reached through an async fsspec filesystem."""
    return async_store(url) is not None
