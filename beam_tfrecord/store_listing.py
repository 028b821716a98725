"""A folder of an object store listed a page at a time, so that no listing is ever held whole.

gcsfs's and s3fs's `ls`, `find` and `glob` gather every page of a listing into one list before
they return it, about 3 KB an object while it is held (and kept after, in `fs.dircache`): a flat
folder of ten million images would need 30 GB on the one worker that lists it. Here the store's
list requests are sent one page (up to 1,000 names) at a time, through the filesystem's own
authenticated client, and each page is handed on before the next is asked for.

The entries are those `fs.ls(detail=True)` gives: `name` (`bucket/key`, no protocol), `size`,
`type` ("file" or "directory"), in the store's order, by name. A filesystem whose paging this
module does not know is listed whole, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fsspec
from fsspec.asyn import sync

from beam_tfrecord.locations import protocol_of

__all__ = ["PAGE_SIZE", "pages"]

PAGE_SIZE = 1000  # names per list request: the most either store gives


def pages(
    fs: fsspec.AbstractFileSystem, folder: str, *, recursive: bool = False
) -> Iterator[list[dict[str, Any]]]:
    """The entries of a folder's listing on an object store, a page at a time.

    By delimiter: the folder's files and its folders. With `recursive`: every object below it,
    however deep, and no folders.

    Raises:
        FileNotFoundError: the bucket does not exist (a folder with nothing in it lists as empty).
    """
    bucket, _, key = fs._strip_protocol(folder).strip("/").partition("/")
    prefix = key.rstrip("/") + "/" if key else ""
    protocol = protocol_of(fs)
    if protocol in ("gs", "gcs") and hasattr(fs, "_call"):
        yield from _gcs_pages(fs, bucket, prefix, recursive)
    elif protocol in ("s3", "s3a") and hasattr(fs, "_call_s3"):
        yield from _s3_pages(fs, bucket, prefix, recursive)
    else:
        try:
            if recursive:
                yield [e for e in fs.find(folder, detail=True).values() if e.get("type") == "file"]
            else:
                yield fs.ls(folder, detail=True)
        finally:
            # Not kept: a listing is read once, and a worker's filesystem object lives long.
            fs.invalidate_cache(folder)


def _gcs_pages(fs, bucket: str, prefix: str, recursive: bool) -> Iterator[list[dict[str, Any]]]:
    # The JSON API's objects.list: `prefixes` are the folders, `items` the objects. A folder may
    # come again on a later page (fake-gcs-server repeats the last one): each is given once.
    token = None
    folders: set[str] = set()
    while True:
        page = sync(
            fs.loop,
            fs._call,
            "GET",
            "b/{}/o",
            bucket,
            json_out=True,
            prefix=prefix or None,
            delimiter=None if recursive else "/",
            maxResults=PAGE_SIZE,
            pageToken=token,
        )
        new = [name for name in page.get("prefixes", []) if name not in folders]
        folders.update(new)
        entries = [_folder(bucket, name) for name in new]
        entries += [
            {"name": f"{bucket}/{item['name']}", "size": int(item.get("size") or 0), "type": "file"}
            for item in page.get("items", [])
        ]
        yield entries
        token = page.get("nextPageToken")
        if not token:
            return


def _s3_pages(fs, bucket: str, prefix: str, recursive: bool) -> Iterator[list[dict[str, Any]]]:
    from s3fs.errors import translate_boto_error

    request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_SIZE}
    if not recursive:
        request["Delimiter"] = "/"
    while True:
        try:
            page = sync(fs.loop, fs._call_s3, "list_objects_v2", **request)
        except Exception as error:
            if type(error).__name__ != "ClientError":
                raise
            raise translate_boto_error(error) from error
        entries = [_folder(bucket, p["Prefix"]) for p in page.get("CommonPrefixes", [])]
        entries += [
            {"name": f"{bucket}/{item['Key']}", "size": int(item.get("Size") or 0), "type": "file"}
            for item in page.get("Contents", [])
        ]
        yield entries
        if not page.get("IsTruncated"):
            return
        request["ContinuationToken"] = page["NextContinuationToken"]


def _folder(bucket: str, prefix: str) -> dict[str, Any]:
    return {"name": f"{bucket}/{prefix.rstrip('/')}", "size": 0, "type": "directory"}
