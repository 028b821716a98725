"""Checks a config against the world before a pipeline starts, so a bad build fails with nothing written."""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import posixpath
import re
import threading
import uuid
from collections.abc import Iterator

import fsspec

from beam_tfrecord.build_folder import shard_names
from beam_tfrecord.config import BuildConfig, ConfigError
from beam_tfrecord.listing import (
    InputListError,
    first_match,
    has_magic,
    input_list_chunks,
    matching_folders,
    pattern_base,
    read_input_list_chunk,
    store_path,
)
from beam_tfrecord.locations import (
    has_protocol,
    is_local,
    is_object_store,
    is_store_url,
    protocol_problem,
)
from beam_tfrecord.manifest import MANIFEST_FILE, REPORT_FILE, SETTINGS_FILE
from beam_tfrecord.output_lock import LOCK_FILE, lock_output
from beam_tfrecord.remote import run_concurrently
from beam_tfrecord.settings_record import check_resumed
from beam_tfrecord.storage import is_store_refusal, remove, special_file_kind, store_reason
from beam_tfrecord.wording import count

__all__ = ["STORE_TIMEOUT_SECONDS", "preflight", "refuse_placeholders"]


def _canonical(url: str) -> str:
    fs, path = fsspec.core.url_to_fs(url)
    if is_local(fs):
        # `out/../data` is `data`, as the listing takes it; and a link is where it leads, as
        # the listing follows links: `link/out` is inside `data` when `link` leads there.
        path = os.path.realpath(path)
    return fs.unstrip_protocol(path.rstrip("/"))


def _inside(url: str, folder: str) -> bool:
    """Whether canonical `url` is `folder` or below it."""
    return url == folder or url.startswith(folder.rstrip("/") + "/")


def _check_list_entries_outside(config: BuildConfig, output: str) -> None:
    """Refuses an --input-list that names a file inside the output folder.

    Only a rebuild into a folder that holds files (--overwrite, --resume) can be hit, so only
    then is the list read here, once more: a fresh output folder holds nothing to name. It runs
    after `_check_input_list`, which says a list missing or unreadable as the setting's; a bad
    line past what that reads is said here as it is, before the pipeline would.
    """
    if config.input_list is None or not (config.overwrite or config.resume):
        return
    try:
        for chunk in input_list_chunks(config.input_list):
            for source in read_input_list_chunk(chunk):
                if _inside(_canonical(source.url), output):
                    raise ConfigError(
                        "input_list",
                        f"{config.input_list!r} names {source.url!r}, inside --output "
                        f"{config.output!r}; the build would read its own output",
                    )
    except InputListError as err:
        raise ConfigError("input_list", str(err)) from None


# How long the checks may wait on an object store before the build is refused: long enough for
# a slow answer, short enough that a store out of reach (no network, a wrong endpoint) is
# reported at once rather than after minutes of retries.
STORE_TIMEOUT_SECONDS = 8.0
# GCS bucket names are lowercase. S3's are too, but for buckets made before March 2018 in
# us-east-1, which may hold capitals: an S3 name is left to the store to judge.
_BUCKET = re.compile(r"^(?P<protocol>gs|gcs)://(?P<bucket>[^/]*)")


def refuse_placeholders(config: BuildConfig) -> None:
    """Refuses a URL no filesystem here opens (`protocol_problem`), and a placeholder left in:
    GCS bucket names are lowercase, so an uppercase one is."""
    urls = [("input", u) for u in config.inputs] + [("output", config.output)]
    if config.input_list:
        urls.append(("input_list", config.input_list))
    for setting, url in urls:
        problem = protocol_problem(url)
        if problem is not None:
            raise ConfigError(setting, f"{url!r}: {problem}")
        match = _BUCKET.match(url)
        bucket = match["bucket"] if match else ""
        if bucket != bucket.lower():
            if bucket.isupper():  # YOUR-BUCKET, as the default config has it
                fix = "is a placeholder; put the name of your bucket there"
            else:
                fix = f"names none; did you mean {bucket.lower()!r}?"
            raise ConfigError(setting, f"{url!r}: bucket names are lowercase, so {bucket!r} {fix}")


def preflight(
    config: BuildConfig, timeout: float = STORE_TIMEOUT_SECONDS, *, lock: bool = False
) -> None:
    """Refuses a build that cannot work, naming the setting, before anything is written.

    Checks that reach an object store get `timeout` seconds in all. With `lock`, the output's
    lock (`output_lock`) is taken once the inputs passed, before the output is looked at, and
    held when this returns or raises: the caller releases it.

    Raises:
        ConfigError: an input matches nothing, the output is inside an input, another build
            holds the output's lock, the output holds an earlier build and neither --overwrite
            nor --resume is given, it is not writable, or a store does not answer in time.
    """
    refuse_placeholders(config)
    if not config.reaches_a_store():
        _preflight(config, lock)
        return
    outcome: list[BaseException | None] = []
    # What is being checked: (setting, URLs), the inputs' then the output's.
    checking: list[tuple[str, list[str]]] = []

    def check() -> None:
        try:
            _preflight(config, lock, checking)
            outcome.append(None)
        except BaseException as err:  # handed to the waiting thread
            outcome.append(err)

    # A daemon thread: a store that never answers must not hold the process open either.
    worker = threading.Thread(target=check, name="preflight", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        setting, waiting = checking[-1] if checking else ("output", [config.output])
        raise ConfigError(
            setting,
            f"{', '.join(map(repr, waiting))}: no answer from the store in {timeout:g} s: it "
            "did not respond, or only with errors its client retries (503, 429); check the "
            "network, the endpoint and the credentials",
        )
    if outcome[0] is not None:
        raise outcome[0]


def _preflight(
    config: BuildConfig, lock: bool, checking: list[tuple[str, list[str]]] | None = None
) -> None:
    checking = [] if checking is None else checking
    # What each step looks at, as it goes: a store's filesystem can stall in its making (gcsfs
    # asking a metadata server for credentials, with no network), before any request.
    checking.append(("output", [config.output]))
    output = _canonical(config.output)
    for pattern in config.inputs:
        checking.append(("input", [pattern]))
        try:
            fs, path = fsspec.core.url_to_fs(pattern)
        except (ValueError, ImportError) as err:
            raise ConfigError("input", f"{pattern!r}: {err}") from None
        path = store_path(fs, path)  # as it is listed: `s3://b/x/../data` is `s3://b/data`
        base = _canonical(fs.unstrip_protocol(pattern_base(path) if has_magic(path) else path))
        if _inside(output, base):
            raise ConfigError(
                "output",
                f"{config.output!r} is inside input {pattern!r}; the build would read its own output",
            )
    # Each check is a few round trips to a store; they run at once, and the first failing one,
    # in this order, is the error. The output is checked after: its check writes (a probe),
    # and a build refused for its inputs must leave no trace.
    checks = [functools.partial(_check_input, pattern, config) for pattern in config.inputs]
    sources = list(config.inputs)
    if config.input_list is not None:
        checks.append(functools.partial(_check_input_list, config.input_list, config.labels))
        sources.append(config.input_list)
    remote = [u for u in sources if is_store_url(u)]
    setting = "input_list" if remote == [config.input_list] else "input"
    checking.append((setting, remote or sources))
    run_concurrently(checks)
    _check_list_entries_outside(config, output)
    checking.append(("output", [config.output]))
    _check_output(config, lock)


@contextlib.contextmanager
def _store_refusals(
    setting: str, what: str, also: tuple[type[Exception], ...] = ()
) -> Iterator[None]:
    """Turns an error saying the store could not be asked (`is_store_refusal`), or one of
    `also`, into a ConfigError for `setting`: `{what}: {reason}`."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as err:
        if not (is_store_refusal(err) or isinstance(err, also)):
            raise
        raise ConfigError(setting, f"{what}: {store_reason(err)}") from None


def _check_input(pattern: str, config: BuildConfig) -> None:
    with _store_refusals("input", f"{pattern!r} cannot be listed"):
        first = first_match(pattern, config.extensions)
        if first is None:
            # Only to word the refusal (no round trip when the input is fine): a path named
            # outright, without a wildcard, may simply not exist, nor the folder a pattern
            # starts from.
            fs, path = fsspec.core.url_to_fs(pattern)
            path = store_path(fs, path)
            if not has_magic(path) and not fs.exists(path):
                raise ConfigError("input", f"{pattern!r} does not exist{_taken_from(pattern)}")
            if not has_magic(path) and is_local(fs) and (kind := special_file_kind(path)):
                raise ConfigError("input", f"{pattern!r} is {kind}, not an image file")
            if has_magic(path) and fs.exists(path):
                # `Photos [2023]`: a name that reads as a wildcard, and means itself.
                literal = glob.escape(pattern) + ("/**" if fs.isdir(path) else "")
                raise ConfigError(
                    "input",
                    f"{pattern!r} is a path whose name holds a wildcard character (*, ? or [), "
                    f"read as a pattern that matches no image file; to take it as it is, write "
                    f"{literal!r}",
                )
            base = pattern_base(pattern)
            if has_magic(path) and base and not fs.exists(pattern_base(path)):
                bucket = path.split("/", 1)[0]
                if is_object_store(fs) and _bucket_missing(fs, bucket):
                    raise ConfigError("input", f"{pattern!r}: the bucket {bucket!r} does not exist")
                raise ConfigError(
                    "input",
                    f"{pattern!r}: its folder {base!r} does not exist{_taken_from(pattern)}",
                )
            folders = matching_folders(pattern)
            if folders:
                raise ConfigError(
                    "input",
                    f"{pattern!r} matches {count(len(folders), 'folder')} and no image file; "
                    "to take the images below "
                    f"{'it' if len(folders) == 1 else 'them'}, write {pattern.rstrip('/') + '/**'!r}",
                )
    if first is None:
        raise ConfigError(
            "input",
            f"{pattern!r} matches no image file (extensions {', '.join(config.extensions)}; "
            f"hidden files and folders are ignored){_taken_from(pattern)}",
        )
    _check_folders_left_out(pattern, config)


def _check_folders_left_out(pattern: str, config: BuildConfig) -> None:
    """Refuses a pattern that matches image files and also folders holding images, which it
    does not take (`photos/*` over `photos/stray.jpg`, `photos/cat/`, `photos/dog/`): the build
    would take the one stray image and leave every class folder out without a word. A pattern
    ending in `/` names folders only: it takes no file."""
    below = pattern.rstrip("/") + "/**"
    if has_magic(pattern) and pattern.endswith("/"):
        raise ConfigError(
            "input",
            f"{pattern!r} ends with '/': it names folders, and takes no file; to take the "
            f"images below them, write {below!r}",
        )
    with _store_refusals("input", f"{pattern!r} cannot be listed"):
        folders = [
            folder
            for folder in matching_folders(pattern)
            if first_match(folder.rstrip("/") + "/**", config.extensions) is not None
        ]
    if folders:
        named = ", ".join(repr(posixpath.basename(f.rstrip("/"))) for f in folders[:3])
        more = f" and {len(folders) - 3} more" if len(folders) > 3 else ""
        raise ConfigError(
            "input",
            f"{pattern!r} matches image files, and {count(len(folders), 'folder')} of images "
            f"({named}{more}) whose images it does not take; to take them too, write "
            f"{pattern_base(pattern).rstrip('/') + '/**'!r}, or to take only the files, name "
            "them (*.jpg)",
        )


def _taken_from(pattern: str) -> str:
    """Where a relative local path was looked for (a config file's paths, too, are taken from
    the current folder, not the file's), to add to a refusal; nothing for any other."""
    if has_protocol(pattern) or os.path.isabs(pattern):
        return ""
    return f" (a relative path: taken from the current folder, {os.getcwd()})"


# The first bytes of an input list read before anything is written: a list saved in another
# encoding, or in another layout, shows it in its first lines; a later bad line stops the
# build as cleanly, once it runs.
_LIST_CHECKED_BYTES = 1 << 20


def _check_input_list(input_list: str, labels: str) -> None:
    with _store_refusals("input_list", f"{input_list!r} cannot be read", also=(ValueError,)):
        try:
            chunks = input_list_chunks(input_list)
        except FileNotFoundError:
            raise _missing_input_list(input_list) from None
        if not chunks:
            raise ConfigError("input_list", f"{input_list!r} is empty")
        url, start, end = chunks[0]
        try:
            for entry in read_input_list_chunk((url, start, min(end, _LIST_CHECKED_BYTES))):
                if labels == "none" and entry.label is not None:
                    # The list's labels would be dropped, yet still leave out a file that two
                    # lines label two ways: which is meant is the user's to say.
                    raise ConfigError(
                        "labels",
                        f"--labels none builds without labels, and {input_list!r} gives them "
                        f"({entry.relpath!r}: {entry.label!r}); leave --labels out to use "
                        "them, or give a list of paths alone",
                    )
        except InputListError as err:
            raise ConfigError("input_list", str(err)) from None


def _missing_input_list(input_list: str) -> ConfigError:
    """A list that is not there, said as --input says it: a store's client names only the
    object's path (`b/lists/l.csv`), which read as the reason."""
    fs, path = fsspec.core.url_to_fs(input_list)
    bucket = path.split("/", 1)[0]
    if is_object_store(fs) and _bucket_missing(fs, bucket):
        return ConfigError("input_list", f"{input_list!r}: the bucket {bucket!r} does not exist")
    return ConfigError("input_list", f"{input_list!r} does not exist{_taken_from(input_list)}")


def _bucket_missing(fs: fsspec.AbstractFileSystem, bucket: str) -> bool:
    """Whether the store says it has no such bucket. Not s3fs's `exists`, which is False for
    any error of its probes: a bucket that is there and refuses to be described (403, to an
    account granted its objects alone) is not missing, and an error that is no answer is the
    caller's to report."""
    try:
        fs.info(bucket)
    except FileNotFoundError:
        return True
    except PermissionError:  # there, and not ours to describe
        return False
    return False


def _check_output(config: BuildConfig, lock: bool) -> None:
    with _store_refusals("output", f"{config.output!r} cannot be checked"):
        _check_output_here(config, lock)


def _output_listing(
    config: BuildConfig, fs: fsspec.AbstractFileSystem, path: str, lock: bool
) -> list[dict]:
    """What the output folder holds (fsspec's listing entries), less the files no earlier build
    is to be replaced or finished for; a --resume refused if the folder's record of its
    settings names others (`settings_record.check_resumed`).

    With `lock`, the output's lock is taken first (a local folder's).
    """
    if is_object_store(fs):
        # One listing says both whether the output is a file and what it holds: asked apart,
        # each question is a round trip or two (no lock to take first: `output_lock`).
        try:
            listed = fs.ls(path, detail=True)
        except FileNotFoundError:
            listed = []
        if [(e["name"].rstrip("/"), e.get("type")) for e in listed] == [(path.rstrip("/"), "file")]:
            raise ConfigError("output", f"{config.output!r} is a file, not a folder")
    else:
        if fs.isfile(path):
            raise ConfigError("output", f"{config.output!r} is a file, not a folder")
        if lock:  # before the folder is looked at: what another build is writing is not a stray
            lock_output(config.output)
        try:
            listed = fs.ls(path, detail=True) if fs.isdir(path) else []
        except FileNotFoundError:
            listed = []
    names = [_name_of(e) for e in listed]
    if config.resume and SETTINGS_FILE in names and shard_names(names):
        # Before anything is written or removed: the shards there were made with those. With
        # none, the record is of a start that made nothing to keep: this build replaces it.
        check_resumed(config, fs.cat_file(posixpath.join(path, SETTINGS_FILE)))
    # A killed build's lock file (unlocked, or it would have refused this build) is not a file
    # of a build, nor the record of the settings a build writes as it starts (it may have been
    # stopped before it wrote anything else).
    listed = [e for e in listed if _name_of(e) not in (LOCK_FILE, SETTINGS_FILE)]
    # A build that published nothing (no image written, or none accepted) leaves its
    # report.jsonl alone, for the user to read why; a build run again after the fix replaces it.
    if [(_name_of(e), e.get("type")) for e in listed] == [(REPORT_FILE, "file")]:
        listed = []
    return listed


def _name_of(entry: dict) -> str:
    """The name of a file or folder in an fsspec listing entry."""
    return posixpath.basename(entry["name"].rstrip("/"))


def _check_output_here(config: BuildConfig, lock: bool) -> None:
    fs, path = fsspec.core.url_to_fs(config.output)
    listed = _output_listing(config, fs, path, lock)
    existing = [e["name"] for e in listed]
    if existing and not (config.overwrite or config.resume):
        has_build = any(posixpath.basename(p.rstrip("/")) == MANIFEST_FILE for p in existing)
        shards = shard_names(existing)
        if not has_build and shards:
            raise ConfigError(
                "output",
                f"{config.output!r} holds an interrupted build ({count(len(shards), 'finished shard')}"
                ", no manifest.json); pass --resume to finish it, or --overwrite to replace it",
            )
        if has_build:
            raise ConfigError(
                "output",
                f"{config.output!r} already holds an earlier build; pass --overwrite to replace it",
            )
        folders = sum(e.get("type") == "directory" for e in listed)
        kinds = [(len(existing) - folders, "file"), (folders, "folder")]
        what = " and ".join(count(n, kind) for n, kind in kinds if n)
        # --overwrite replaces a build's own files only (`remove_stale_files`): these would stay.
        raise ConfigError(
            "output",
            f"{config.output!r} already holds {what}; pass --overwrite to build beside "
            f"{'it' if len(existing) == 1 else 'them'} (it replaces only a build's own files)",
        )
    # Prove the output is writable with a real write, so the failure comes now and not after
    # hours of work on the first shard.
    probe = posixpath.join(path, f".write-probe-{uuid.uuid4().hex}")
    with _store_refusals("output", f"{config.output!r} is not writable", also=(ValueError,)):
        # On object stores folders are implicit, and makedirs would create a missing bucket
        # (s3fs does): a typo in a bucket name must be refused, not become a new bucket.
        if not is_object_store(fs):
            fs.makedirs(path, exist_ok=True)
        try:
            fs.pipe_file(probe, b"")
        except FileNotFoundError as err:
            if is_object_store(fs):  # nothing is missing for a write to a store but the bucket
                bucket = path.split("/", 1)[0]
                raise FileNotFoundError(f"the bucket {bucket!r} does not exist") from err
            raise
        remove(fs, probe)
