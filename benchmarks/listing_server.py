"""A store that only lists, N names in one flat prefix, for bench_bucket.py's listing run: GCS's
JSON API (objects.list) and S3's ListObjectsV2.

    python benchmarks/listing_server.py --objects 200000 --port 9023

fake-gcs-server takes minutes to hold 200,000 objects (20,000 loaded from a folder took 250 s on
this machine) and a third of a second to list a page of a bucket of 20,000, its cost growing with
the bucket; a real store's page does not. This server answers `objects.list` (prefix, delimiter,
startOffset, endOffset, maxResults, pageToken) and S3's ListObjectsV2 (`GET /BUCKET?list-type=2`:
prefix, delimiter, start-after, max-keys, continuation-token, encoding-type; unsigned requests
taken as signed ones) from a sorted list of names `PREFIX/img0000000.jpg` ..., by bisection: a
page costs the same whatever the bucket holds, so the benchmark measures how the client lists,
not how the emulator scales. Any other request is a 404. 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import bisect
import json

from aiohttp import web

_STAMP = "2026-01-01T00:00:00.000Z"


def _page(
    names: list[str], prefix: str, delimiter: str, i: int, end: int, most: int
) -> tuple[list[str], list[str], str | None, bool]:
    """The names of one page from `names[i]` (sorted) up to `names[end]`: the objects, the
    folders by delimiter, the last name given, and whether more follow."""
    keys, prefixes, last = [], [], None
    while i < end and names[i].startswith(prefix) and len(keys) + len(prefixes) < most:
        name = names[i]
        cut = name.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            folder = name[: cut + len(delimiter)]
            prefixes.append(folder)
            last = folder
            i = bisect.bisect_left(names, folder[:-1] + chr(ord(folder[-1]) + 1))
            continue
        keys.append(name)
        last = name
        i += 1
    return keys, prefixes, last, i < end and i < len(names) and names[i].startswith(prefix)


def listing(names: list[str], bucket: str, query) -> dict:
    """One page of objects.list over the sorted `names`."""
    prefix = query.get("prefix", "")
    start = max(prefix, query.get("startOffset", ""))
    i = bisect.bisect_left(names, start)
    if "pageToken" in query:
        i = max(i, bisect.bisect_right(names, query["pageToken"]))
    end = bisect.bisect_left(names, query["endOffset"]) if query.get("endOffset") else len(names)
    most = min(int(query.get("maxResults", 1000)), 1000)
    keys, prefixes, last, more = _page(names, prefix, query.get("delimiter", ""), i, end, most)
    items = [
        {"kind": "storage#object", "name": name, "bucket": bucket, "size": "0",
         "generation": "1", "metageneration": "1", "updated": _STAMP, "timeCreated": _STAMP}
        for name in keys
    ]  # fmt: skip
    page: dict = {"kind": "storage#objects", "items": items, "prefixes": prefixes}
    if more:
        page["nextPageToken"] = last
    return page


def s3_listing(names: list[str], bucket: str, query) -> bytes:
    """One page of ListObjectsV2 over the sorted `names`, as S3's XML."""
    prefix = query.get("prefix", "")
    most = min(int(query.get("max-keys", 1000)), 1000)
    after = query.get("continuation-token") or query.get("start-after", "")
    i = bisect.bisect_left(names, prefix)
    if after:
        i = max(i, bisect.bisect_right(names, after))
    keys, prefixes, last, more = _page(
        names, prefix, query.get("delimiter", ""), i, len(names), most
    )
    # The names are plain: URL-encoded (`encoding-type=url`, as clients ask) they are the same.
    encoding = "<EncodingType>url</EncodingType>" if query.get("encoding-type") == "url" else ""
    body = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
        f"<Name>{bucket}</Name><Prefix>{prefix}</Prefix><KeyCount>{len(keys)}</KeyCount>",
        encoding,
        f"<MaxKeys>{most}</MaxKeys><IsTruncated>{'true' if more else 'false'}</IsTruncated>",
    ]
    if more:
        body.append(f"<NextContinuationToken>{last}</NextContinuationToken>")
    body += [
        f"<Contents><Key>{key}</Key><LastModified>{_STAMP}</LastModified>"
        '<ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><Size>0</Size>'
        "<StorageClass>STANDARD</StorageClass></Contents>"
        for key in keys
    ]
    body += [f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>" for p in prefixes]
    body.append("</ListBucketResult>")
    return "".join(body).encode()


def app(objects: int, bucket: str, prefix: str) -> web.Application:
    names = [f"{prefix}/img{i:07d}.jpg" for i in range(objects)]

    async def objects_list(request: web.Request) -> web.Response:
        if request.match_info["bucket"] != bucket:
            return _not_found()
        page = listing(names, bucket, request.query)
        return web.Response(body=json.dumps(page).encode(), content_type="application/json")

    async def s3_list(request: web.Request) -> web.Response:
        if request.match_info["bucket"] != bucket or request.query.get("list-type") != "2":
            return _not_found()
        body = s3_listing(names, bucket, request.query)
        return web.Response(body=body, content_type="application/xml")

    async def other(request: web.Request) -> web.Response:
        return _not_found()

    application = web.Application()
    application.router.add_get("/storage/v1/b/{bucket}/o", objects_list)
    application.router.add_get("/{bucket}", s3_list)
    application.router.add_route("*", "/{tail:.*}", other)
    return application


def _not_found() -> web.Response:
    body = {"error": {"code": 404, "message": "Not Found"}}
    return web.Response(status=404, body=json.dumps(body).encode(), content_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--bucket", default="flat")
    parser.add_argument("--prefix", default="photos")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(
        app(args.objects, args.bucket, args.prefix),
        host="127.0.0.1",
        port=args.port,
        print=None,
        access_log=None,
    )


if __name__ == "__main__":
    main()
