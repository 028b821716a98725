"""Checks a config against the world before a pipeline starts, so a bad build fails with nothing written."""

from __future__ import annotations

import functools
import posixpath
import uuid

import fsspec

from beam_tfrecord.config import BuildConfig, ConfigError
from beam_tfrecord.listing import first_match, has_magic, input_list_chunks, pattern_base
from beam_tfrecord.manifest import MANIFEST_FILE
from beam_tfrecord.remote import run_concurrently
from beam_tfrecord.storage import is_object_store

__all__ = ["preflight"]


def _canonical(url: str) -> str:
    fs, path = fsspec.core.url_to_fs(url)
    return fs.unstrip_protocol(path.rstrip("/"))


def preflight(config: BuildConfig) -> None:
    """Refuses a build that cannot work, naming the setting, before anything is written.

    Raises:
        ConfigError: an input matches nothing, the output is inside an input, the output holds
            an earlier build and neither --overwrite nor --resume is given, or it is not writable.
    """
    output = _canonical(config.output)
    for pattern in config.inputs:
        try:
            fs, path = fsspec.core.url_to_fs(pattern)
        except (ValueError, ImportError) as err:
            raise ConfigError("input", f"{pattern!r}: {err}") from None
        base = _canonical(
            pattern if not has_magic(path) else fs.unstrip_protocol(pattern_base(path))
        )
        if output == base or output.startswith(base.rstrip("/") + "/"):
            raise ConfigError(
                "output",
                f"{config.output!r} is inside input {pattern!r}; the build would read its own output",
            )
    # Each check is a few round trips to a store; they run at once, and the first failing one,
    # in this order, is the error. The output is checked after: its check writes (a probe),
    # and a build refused for its inputs must leave no trace.
    checks = [functools.partial(_check_input, pattern, config) for pattern in config.inputs]
    if config.input_list is not None:
        checks.append(functools.partial(_check_input_list, config.input_list))
    run_concurrently(checks)
    _check_output(config)


def _check_input(pattern: str, config: BuildConfig) -> None:
    try:
        first = first_match(pattern, config.extensions)
    except OSError as err:
        raise ConfigError("input", f"{pattern!r} cannot be listed: {err}") from None
    if first is None:
        raise ConfigError(
            "input",
            f"{pattern!r} matches no image file (extensions {', '.join(config.extensions)}; "
            "hidden files and folders are ignored)",
        )


def _check_input_list(input_list: str) -> None:
    try:
        if not input_list_chunks(input_list):
            raise ConfigError("input_list", f"{input_list!r} is empty")
    except (OSError, ValueError) as err:
        raise ConfigError("input_list", f"{input_list!r} cannot be read: {err}") from None


def _check_output(config: BuildConfig) -> None:
    fs, path = fsspec.core.url_to_fs(config.output)
    try:
        existing = fs.ls(path, detail=False) if fs.isdir(path) else []
    except FileNotFoundError:
        existing = []
    if fs.isfile(path):
        raise ConfigError("output", f"{config.output!r} is a file, not a folder")
    if existing and not (config.overwrite or config.resume):
        has_build = any(posixpath.basename(p.rstrip("/")) == MANIFEST_FILE for p in existing)
        what = "an earlier build" if has_build else f"{len(existing)} files"
        raise ConfigError(
            "output", f"{config.output!r} already holds {what}; pass --overwrite to replace it"
        )
    # Prove the output is writable with a real write, so the failure comes now and not after
    # hours of work on the first shard.
    probe = posixpath.join(path, f".write-probe-{uuid.uuid4().hex}")
    try:
        # On object stores folders are implicit, and makedirs would create a missing bucket
        # (s3fs does): a typo in a bucket name must be refused, not become a new bucket.
        if not is_object_store(fs):
            fs.makedirs(path, exist_ok=True)
        fs.pipe_file(probe, b"")
        fs.rm(probe)
    except (OSError, ValueError) as err:
        raise ConfigError("output", f"{config.output!r} is not writable: {err}") from None
