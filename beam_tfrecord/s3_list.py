"""One page of an S3 listing (ListObjectsV2), signed here as `s3_get` signs its GETs.

Through s3fs, each page of 1,000 names goes through botocore's client: its request handling,
then a parse of the answer into a dictionary per object, each object's LastModified made a
datetime by dateutil. On the benchmarks' store (gofakes3) that cost about 100 us of CPU an
object listed: 0.3 s of a 3,000-image build's one core, 100 CPU-seconds for a folder of a
million images. A listing needs each object's key and size, and nothing else; here the answer
is parsed by ElementTree for those (`parse_page`), and the request is signed and sent as a
GET is (`s3_get.bucket_route`: the filesystem's own endpoint, region and credentials).

Where `s3_get` would not read a bucket itself (a filesystem set up for more, a bucket in
another region), `list_page` says so, and the page is asked of s3fs as before.
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import unquote_plus
from xml.etree import ElementTree

from beam_tfrecord import s3_get
from beam_tfrecord.remote import backoff, is_transient

__all__ = ["LIST_TRIES", "Page", "list_page", "parse_page"]

# Tries of a page, with backoff (up to about 26 s of waits in all): more than a GET's
# (`s3_get.S3_TRIES`), as a listing stops the whole build where a read loses one image. S3 answers
# a burst of requests to one prefix with 503 SlowDown until it has scaled, for seconds.
LIST_TRIES = 10

# A page: (key, size) of each object, the common prefixes (folders, by delimiter), and whether
# the store has more names after these.
Page = tuple[list[tuple[str, int]], list[str], bool]


async def list_page(
    fs,
    bucket: str,
    prefix: str,
    *,
    delimiter: str | None,
    start_after: str | None,
    max_keys: int,
    before: str | None = None,
) -> Page | None:
    """A page of `bucket`'s objects below `prefix`, after `start_after`, on `fs`'s event loop;
    None where s3fs must ask for it (`s3_get.bucket_route`). Tried `LIST_TRIES` times over
    transient failures. With `before`, read only up to that name (`parse_page`).

    Raises:
        FileNotFoundError: no such bucket.
        PermissionError: the store refuses the listing.
        S3Error: any other error answer.
    """
    found = await s3_get.bucket_route(fs, bucket)
    if found is None:
        return None
    session, reached = found
    # Where botocore lists it: path-style `http://host/bucket`, virtual-hosted
    # `https://bucket.host/` (an endpoint's own path kept as it has it).
    url = reached.listing
    query = {"list-type": "2", "prefix": prefix, "max-keys": str(max_keys)}
    query["encoding-type"] = "url"  # keys any XML can carry, as botocore asks for them
    if delimiter:
        query["delimiter"] = delimiter
    if start_after is not None:
        query["start-after"] = start_after
    where = f"{bucket}/{prefix}"
    for attempt in range(LIST_TRIES):
        try:
            status, body = await s3_get.signed_get(session, reached, url, query)
            if status == 200:
                return parse_page(body, before)
            if s3_get.is_elsewhere(status, body):
                s3_get.leave_to_s3fs(fs, f"{bucket}/")
                return None
            raise s3_get.error_of(status, body, where)
        except Exception as err:
            if attempt + 1 == LIST_TRIES or not is_transient(err):
                raise
        await asyncio.sleep(backoff(attempt))
    raise AssertionError("unreachable")


def parse_page(body: bytes, before: str | None = None) -> Page:
    """The objects, common prefixes and truncation of a ListObjectsV2 answer's XML; names
    decoded where the store says it URL-encoded them (EncodingType), as botocore decodes them.

    With `before`, names from `before` on are left out, and the page is not truncated if any
    was: S3 has no end to a listing's range, so a range's page runs on into the next ranges'
    names (up to 1,000 of them), which their own pages give: those are not decoded at all.

    Raises:
        OSError: the answer is not a listing.
    """
    files, folders, truncated = _plain_page(body, before) or _parsed_page(body)
    if before is None:
        return files, folders, truncated
    kept = [(name, size) for name, size in files if name < before]
    short = len(kept) < len(files) or any(folder >= before for folder in folders)
    return kept, [f for f in folders if f < before], truncated and not short


_KEY = re.compile(rb"<Key>([^<]*)</Key>")
_SIZE = re.compile(rb"<Size>\s*(\d+)\s*</Size>")
_FOLDER = re.compile(rb"<CommonPrefixes>\s*<Prefix>([^<]*)</Prefix>\s*</CommonPrefixes>")
_TRUNCATED = re.compile(rb"<IsTruncated>\s*true\s*</IsTruncated>")


def _plain_page(body: bytes, before: str | None = None) -> Page | None:
    """A page of S3's own plain form read with a few regular expressions, at under half of
    ElementTree's CPU (0.7-0.8 against 1.9-2.3 ms a page of 1,000 names): names URL-encoded (no XML
    escapes in them), each <Contents> with one <Key> and one <Size>, each <CommonPrefixes>
    with one <Prefix>. None for any other answer, which ElementTree reads. Objects are made
    of its keys up to the first one from `before` on (in the store's order, the names')."""
    if b"<ListBucketResult" not in body[:512] or b"<EncodingType>url</EncodingType>" not in body:
        return None
    keys, sizes, folders = _KEY.findall(body), _SIZE.findall(body), _FOLDER.findall(body)
    if (
        len(keys) != len(sizes)
        or len(keys) != body.count(b"<Contents>")
        or len(folders) != body.count(b"<CommonPrefixes>")
        or b"&" in b"".join(keys)
        or b"&" in b"".join(folders)
    ):
        return None
    files = []
    for key, size in zip(keys, sizes, strict=True):
        files.append((_decoded(key), int(size)))
        if before is not None and files[-1][0] >= before:
            break  # the first name past the range, which tells parse_page that it ended
    return files, [_decoded(folder) for folder in folders], _TRUNCATED.search(body) is not None


def _decoded(name: bytes) -> str:
    """A URL-encoded name as botocore decodes it (unquote_plus), at once where it has nothing
    to decode."""
    text = name.decode()
    return unquote_plus(text) if b"%" in name or b"+" in name else text


def _parsed_page(body: bytes) -> Page:
    """`parse_page` by ElementTree: any listing well-formed XML can hold."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as err:
        raise OSError(f"the store's listing is not XML: {err}") from err
    namespace = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if root.tag != f"{namespace}ListBucketResult":
        raise OSError(f"the store answered a listing with <{root.tag}>")
    encoded = root.findtext(f"{namespace}EncodingType") == "url"
    name = unquote_plus if encoded else str
    key_tag, size_tag = f"{namespace}Key", f"{namespace}Size"
    files = [
        (name(item.findtext(key_tag) or ""), int(item.findtext(size_tag) or 0))
        for item in root.iter(f"{namespace}Contents")
    ]
    folders = [
        name(item.findtext(f"{namespace}Prefix") or "")
        for item in root.iter(f"{namespace}CommonPrefixes")
    ]
    truncated = (root.findtext(f"{namespace}IsTruncated") or "").strip().lower() == "true"
    return files, folders, truncated
