"""Facts about an fsspec filesystem that decide how a build reads and publishes files."""

from __future__ import annotations

import functools
import inspect
import posixpath
import uuid

import fsspec

from beam_tfrecord import store_timeouts
from beam_tfrecord.locations import has_protocol, is_local, is_object_store

__all__ = [
    "SEQUENTIAL_BLOCK_SIZE",
    "TEMP_MARKER",
    "is_store_refusal",
    "is_temporary",
    "publish",
    "read_source",
    "sequential_read_options",
    "store_reason",
    "temporary_name",
    "to_url",
    "whole_read_options",
]

# Every process that reads or writes through this module limits how long a gs:// request may go
# unanswered (gcsfs itself waits for ever).
store_timeouts.install()

# Temporary files are hidden (leading dot) and carry this marker, so that no reader's glob over
# shard names sees them and cleanup recognises them.
TEMP_MARKER = ".tmp-"


def temporary_name(path: str) -> str:
    """A hidden, unique name beside `path` to write it under before it is published."""
    folder, name = posixpath.split(path)
    return posixpath.join(folder, f".{name}{TEMP_MARKER}{uuid.uuid4().hex}")


def is_temporary(file_name: str) -> bool:
    """Whether a file name is one `temporary_name` gives: a file not (yet) published."""
    return file_name.startswith(".") and TEMP_MARKER in file_name


# The client libraries under gcsfs and s3fs raise errors of their own, not OSErrors, when a store
# cannot be asked at all: no credentials (botocore's NoCredentialsError), a token that cannot be
# refreshed (google.auth), a connection refused below the retries (aiohttp, requests).
_STORE_CLIENTS = ("botocore.", "google.auth.", "google.api_core.", "aiohttp.", "requests.")


def is_store_refusal(error: BaseException) -> bool:
    """Whether an error says that a store could not be reached or asked (an OSError, or one of
    its client library's own), rather than that something here went wrong."""
    if isinstance(error, OSError):
        return True
    return any(cls.__module__.startswith(_STORE_CLIENTS) for cls in type(error).__mro__[:-1])


def store_reason(error: BaseException) -> str:
    """An error as one line for a refusal: its message, and its kind where the message alone
    ('Unable to locate credentials') does not say whose it is."""
    message = " ".join(str(error).split()) or type(error).__name__
    return message if isinstance(error, OSError) else f"{message} ({type(error).__name__})"


def to_url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path as returned by `fs` back into a URL that `fsspec.open` understands anywhere."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


def publish(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Writes a small file so that a reader sees no file or the whole file, never a part."""
    if is_object_store(fs):
        fs.pipe_file(path, data)
        return
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    temp = temporary_name(path)
    try:
        fs.pipe_file(temp, data)
        fs.mv(temp, path)
    except BaseException:
        if fs.exists(temp):
            fs.rm(temp)
        raise


# Bytes per request when a file is read front to back (`sequential_read_options`).
SEQUENTIAL_BLOCK_SIZE = 16 * 1024 * 1024


def sequential_read_options(fs: fsspec.AbstractFileSystem) -> dict[str, str | int]:
    """Keywords for `fs.open(path, "rb", ...)` to read a file front to back, as a shard is read
    (to verify it, resume it, inspect or load it), in a request per 16 MiB.

    Not the filesystem's default cache: gcsfs's, an adaptive read-ahead, took the reads of a
    record at a time for random access and sent a request for each (586 GETs for a 4 MB shard
    of 200 records, where plain read-ahead sent one).
    """
    if not is_object_store(fs):
        return {}
    return {"cache_type": "readahead", "block_size": SEQUENTIAL_BLOCK_SIZE}


def whole_read_options(fs: fsspec.AbstractFileSystem) -> dict[str, int]:
    """Keywords for `fs.cat_file` (or `_cat_file`) that read a whole object with one request."""
    return {"max_concurrency": 1} if _splits_whole_reads(type(fs)) else {}


@functools.cache
def _splits_whole_reads(cls: type) -> bool:
    """Whether `cls._cat_file` may split a whole-object read into concurrent range reads.

    s3fs does, for objects larger than its block size, and to learn an object's size it first
    asks the store (a HEAD request) unless the object's folder is in its listing cache, which a
    worker's seldom is: a round trip and a billed request more per image, and the store's work
    doubled. A build reads many objects at once already, so each is read with one GET
    (`max_concurrency=1`), as gcsfs reads by default.
    """
    try:
        return "max_concurrency" in inspect.signature(cls._cat_file).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def read_source(url: str) -> bytes:
    """Reads a whole source file.

    Raises:
        FileNotFoundError: the file is gone.
        OSError: it cannot be read.
    """
    if not has_protocol(url):
        # A local path (listing gives local files as plain paths): a plain open is several
        # times cheaper than fsspec's layers, and this runs for every image of a build.
        with open(url, "rb") as f:
            return f.read()
    fs, path = fsspec.core.url_to_fs(url)
    return fs.cat_file(path, **whole_read_options(fs))
