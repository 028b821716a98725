"""A whole S3 object in one GET, signed here (AWS Signature Version 4), not through s3fs's layers.

A build reads every image from S3 once, in one GET. Through s3fs's `_cat_file` each GET runs the
whole of botocore's client around the request: parameter validation, the endpoint rule set, a
dozen event hooks, the signer, response parsing and checksum handlers. On the benchmarks' store
(moto's server behind tests/latency_proxy.py, 100 KB objects, 64 reads in flight) that cost
about 1,500 us of CPU a read; the same GET signed here and sent with aiohttp took about 450
(`benchmarks/bench_store_clients.py --store s3`), and the store's own work falls a little too:
the request is the plain GET and nothing more. It is sent with `http_get` (aiohttp's own
request and response objects cost about 50 us more), or with aiohttp where the environment
names a proxy for the bucket.

What stays botocore's is everything that decides the request: each bucket's base URL (endpoint,
virtual-hosted or path-style addressing) comes from the filesystem's own client for that bucket
(a presigned URL of it, made once, sends nothing), the signing region from that client's
settings, the credentials are that client's, refreshed as botocore refreshes them, and so is
the trust in an https store's certificate (AWS_CA_BUNDLE, `ca_bundle`: a private store's CA).
Where the filesystem is set up for
something this GET does not do (requester pays, customer-held encryption keys, versioned paths,
a signature other than SigV4, a client option other than the endpoint and region), and for a
bucket whose store answers with a redirect (a bucket in another region than the client's), the
read goes through s3fs as before.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import re
import ssl
import time
import weakref
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

# s3fs's own dependencies (through aiobotocore): this module is imported only to read with it.
import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from beam_tfrecord import http_get

__all__ = [
    "S3_TRIES",
    "S3Error",
    "bucket_route",
    "canonical_query",
    "error_of",
    "is_elsewhere",
    "leave_to_s3fs",
    "quote_key",
    "read_s3_object",
    "route",
    "signed_for",
    "signed_get",
    "signed_headers",
]

# Tries of one read by ours, with backoff, where s3fs gave botocore's and its own.
S3_TRIES = 5

# The SHA-256 of no bytes: a GET's payload, as botocore signs it.
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"
# Reads in flight on one filesystem's connections at most, unless its `max_pool_connections`
# says otherwise (a build reads remote.OBJECT_STORE_DEPTH ahead per worker, the rest queued).
_CONNECTIONS = 64
# What a filesystem may be set up with and still be read here.
_PLAIN_CLIENT_KWARGS = frozenset({"endpoint_url", "region_name"})
_PLAIN_CONFIG_KWARGS = frozenset(
    {"max_pool_connections", "connect_timeout", "read_timeout", "retries"}
)
# Answers that say the bucket is elsewhere: s3fs's client follows them, this GET does not.
_ELSEWHERE = frozenset({301, 307, 400})


def is_elsewhere(status: int, body: bytes) -> bool:
    """Whether an answer says the bucket is in another region than the client's."""
    return status in _ELSEWHERE and (status != 400 or b"<Region>" in body or b"region" in body)


def quote_key(key: str) -> str:
    """An object's key as it goes in a URL's path (and is signed)."""
    return quote(key, safe="/~")


_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")


class S3Error(OSError):
    """An S3 GET answered with an error: `status` is its HTTP status (remote.is_transient reads
    it), `code` the store's own error code ("SlowDown", "InternalError"...)."""

    def __init__(self, status: int, code: str, message: str, path: str):
        super().__init__(
            errno.EIO, f"{status} {code}: {message}" if message else f"{status} {code}"
        )
        self.status = status
        self.code = code
        self.filename = path


def signed_headers(
    url: str,
    region: str,
    key_id: str,
    secret: str,
    token: str | None,
    when: float,
    *,
    method: str = "GET",
    query: dict[str, str] | None = None,
    payload: str = _EMPTY_SHA256,
    amz: dict[str, str] | None = None,
) -> dict[str, str]:
    """The headers that sign a request for `url` (already percent-encoded, no query) with AWS
    Signature Version 4 for S3 in `region`, at the time `when` (seconds since the epoch).

    A GET by default. `query` is the request's query, sent as `canonical_query(query)` gives
    it; `payload` the body's SHA-256 in hex, or "UNSIGNED-PAYLOAD"; `amz` more x-amz- headers
    to send, signed with the rest (names in lower case)."""
    parts = urlsplit(url)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    day = stamp[:8]
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload, "x-amz-date": stamp}
    if token:
        headers["x-amz-security-token"] = token
    if amz:
        headers.update(amz)
        headers = dict(sorted(headers.items()))
    names = ";".join(headers)  # in sorted order
    canonical = "\n".join(
        [
            method,
            parts.path or "/",
            canonical_query(query or {}),
            "".join(f"{name}:{value}\n" for name, value in headers.items()),
            names,
            payload,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join([_ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signature = hmac.new(
        _signing_key(secret, day, region), to_sign.encode(), hashlib.sha256
    ).hexdigest()
    return {
        "Host": parts.netloc,
        **{
            _SPELLING.get(name, name): value
            for name, value in headers.items()
            if name.startswith("x-amz-")
        },
        "Authorization": f"{_ALGORITHM} Credential={key_id}/{scope}, "
        f"SignedHeaders={names}, Signature={signature}",
    }


_SPELLING = {
    "x-amz-content-sha256": "X-Amz-Content-SHA256",
    "x-amz-date": "X-Amz-Date",
    "x-amz-security-token": "X-Amz-Security-Token",
}


def canonical_query(query: dict[str, str]) -> str:
    """A query as SigV4 signs it, and as it must then be sent: sorted, every name and value
    percent-encoded but for RFC 3986's unreserved characters."""
    return "&".join(
        f"{quote(name, safe='-_.~')}={quote(value, safe='-_.~')}"
        for name, value in sorted(query.items())
    )


_KEYS: dict[tuple[str, str, str], bytes] = {}


def _signing_key(secret: str, day: str, region: str) -> bytes:
    """SigV4's key for a day and region: four HMACs, made once a day."""
    found = _KEYS.get((secret, day, region))
    if found is None:
        found = ("AWS4" + secret).encode()
        for part in (day, region, "s3", "aws4_request"):
            found = hmac.new(found, part.encode(), hashlib.sha256).digest()
        if len(_KEYS) > 64:
            _KEYS.clear()
        _KEYS[(secret, day, region)] = found
    return found


@dataclass(frozen=True)
class _Bucket:
    """How a bucket's objects are reached: `base` + the quoted key, signed for `region` with
    `credentials` (botocore's, None for an anonymous filesystem), within the client's time
    limits (`timeout`, an aiohttp.ClientTimeout)."""

    base: str
    region: str
    credentials: object | None
    timeout: object
    proxy: dict  # aiohttp's `proxy` and `proxy_auth` for this bucket's URL, from the environment
    # Whether uploads carry a checksum: botocore's `request_checksum_calculation` is
    # "when_supported" (its default), not "when_required".
    checksums: bool = True
    # The URL the bucket is listed at (`s3_list`), as botocore sends ListObjectsV2.
    listing: str = ""
    # Requests in flight at once to its store: botocore's `max_pool_connections` if set.
    connections: int = _CONNECTIONS
    # Whom its store's certificate must be signed by: the CA bundle botocore's configuration
    # names; None for the system's trust.
    tls: ssl.SSLContext | None = None


class _Reader:
    """A filesystem's GETs: its aiohttp session, on the filesystem's event loop, and what each
    bucket needs; None for a bucket read through s3fs."""

    def __init__(self, fs, loop: asyncio.AbstractEventLoop):
        config = fs.config_kwargs or {}
        self.loop = loop
        self.buckets: dict[str, _Bucket | None] = {}
        # Not `trust_env`: it would look in ~/.netrc for every request, on a thread, and a
        # `default` entry there would add a second Authorization to every GET. The proxy the
        # environment names (HTTP(S)_PROXY, NO_PROXY), which botocore honours, is found once
        # per bucket (`_reach`).
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=config.get("max_pool_connections", _CONNECTIONS)),
            auto_decompress=False,  # the object's bytes, as stored
            # ...and so asked for as stored, as botocore asks (aiohttp's default asks for gzip,
            # which a proxy in front of the store may then give: a listing's XML unreadable).
            headers={"Accept-Encoding": "identity"},
        )
        weakref.finalize(self, _close_session, loop, self.session)

    async def bucket(self, fs, bucket: str) -> _Bucket | None:
        if bucket not in self.buckets:
            self.buckets[bucket] = await _reach(fs, bucket)
        return self.buckets[bucket]


def _trust(ca_bundle: str) -> ssl.SSLContext:
    """The TLS context of botocore's `ca_bundle`: that bundle's CAs alone (its file is read
    here: on a thread)."""
    return ssl.create_default_context(cafile=ca_bundle)


def _close_session(loop: asyncio.AbstractEventLoop, session) -> None:
    """Closes a reader's session as the process ends, as gcsfs closes its own: on its loop while
    that runs, else its connections at once (no 'Unclosed client session' on stderr)."""
    if session.closed:
        return
    try:
        if loop.is_running() and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(1)
            return
    except Exception:  # the process is ending: close what can be closed, below
        pass
    connector = session.connector
    if connector is not None:
        connector._close()


async def _reach(fs, bucket: str) -> _Bucket | None:
    """How to GET `bucket`'s objects, as the filesystem's client for it would; None when this
    GET would not send what s3fs sends.

    The base URL is that of a presigned URL (botocore's endpoint rules, no request sent); its
    signature is no guide (botocore presigns with SigV2 where its requests use SigV4), so the
    signature and region are the client's own settings."""
    await fs.set_session()
    client = await fs.get_s3(bucket)
    probe = await client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60
    )
    url = probe.partition("?")[0]
    if not url.endswith("/k") or urlsplit(url).scheme not in ("http", "https"):
        return None
    listing = await client.generate_presigned_url(
        "list_objects_v2", Params={"Bucket": bucket}, ExpiresIn=60
    )
    listing = listing.partition("?")[0]
    try:
        proxy, proxy_auth = get_env_proxy_for_url(URL(url))
        through = {"proxy": proxy, "proxy_auth": proxy_auth}
    except LookupError:  # none named for this URL
        through = {}
    config = client.meta.config
    # botocore's limits on a connection's making and on an answer's silence (60 s each unless
    # set), as s3fs's requests had them.
    timeout = aiohttp.ClientTimeout(
        sock_connect=config.connect_timeout, sock_read=config.read_timeout
    )
    checksums = getattr(config, "request_checksum_calculation", None) != "when_required"
    connections = (fs.config_kwargs or {}).get("max_pool_connections", _CONNECTIONS)
    # The CA bundle botocore's configuration names (AWS_CA_BUNDLE, a profile's ca_bundle): a
    # private store's CA. Without one botocore trusts certifi's bundle, and this GET the
    # system's (as aiohttp does); `verify` itself is a client option, which s3fs is left.
    # Read only for an https store: reading a bundle is tens of ms of CPU.
    ca_bundle = fs.session.get_config_variable("ca_bundle") if url.startswith("https:") else None
    tls = await asyncio.to_thread(_trust, ca_bundle) if ca_bundle else None
    limits = (checksums, listing, connections, tls)
    if fs.anon:
        return _Bucket(url[:-1], "", None, timeout, through, *limits)
    if config.signature_version not in (None, "s3v4", "v4"):
        return None
    credentials = client._get_credentials()
    if credentials is None:
        return None
    region = client.meta.region_name or "us-east-1"
    return _Bucket(url[:-1], region, credentials, timeout, through, *limits)


# Where a filesystem keeps its readers, one per event loop it reads on. On the filesystem
# itself, not in a mapping keyed by it: fsspec's filesystems made alike compare (and hash)
# equal, so such a mapping would hand one filesystem's session to an equal one, and close it
# under that one's reads in flight when the first is collected.
_READERS = "_beam_tfrecord_s3_readers"


def _readers(fs) -> dict:
    """{event loop: _Reader} of `fs`, the very filesystem."""
    return vars(fs).setdefault(_READERS, {})


def _reader(fs, loop: asyncio.AbstractEventLoop) -> _Reader:
    """`fs`'s reader on `loop`, the running one. A reader of another loop is left alone: its
    reads may be in flight there; one whose loop has closed goes, with its session."""
    readers = _readers(fs)
    reader = readers.get(loop)
    if reader is None:
        for closed in [other for other in readers if other.is_closed()]:
            del readers[closed]
        reader = readers[loop] = _Reader(fs, loop)
    return reader


def _plain(fs) -> bool:
    """Whether `fs` is set up for nothing but what `read_s3_object` sends."""
    return (
        not fs.req_kw
        and not fs.s3_additional_kwargs
        and set(fs.client_kwargs or {}) <= _PLAIN_CLIENT_KWARGS
        and set(fs.config_kwargs or {}) <= _PLAIN_CONFIG_KWARGS
    )


async def read_s3_object(fs, path: str) -> bytes:
    """The whole object at `path` of s3fs filesystem `fs`, in one GET, on `fs`'s event loop.

    Raises:
        FileNotFoundError: no such object.
        PermissionError: the store refuses it (403).
        S3Error: any other error answer (a transient one has a `status` of 5xx or 429).
        aiohttp.ClientError, asyncio.TimeoutError: the connection failed.
    """
    found = await route(fs, path)
    if found is None:
        return await _through_s3fs(fs, path)
    session, reached, url = found
    status, body = await signed_get(session, reached, url)
    if status == 200:
        return body
    if is_elsewhere(status, body):
        leave_to_s3fs(fs, path)
        return await _through_s3fs(fs, path)
    raise error_of(status, body, path)


async def signed_get(
    session, reached: _Bucket, url: str, query: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One GET of `url` (percent-encoded, with `query`) in `reached`'s bucket, signed for it
    (`signed_for`): the answer's status and body. Sent with `http_get`, or on `session` where
    the environment names a proxy for the bucket."""
    headers = await signed_for(reached, url, query=query)
    target = f"{url}?{canonical_query(query)}" if query else url
    if not reached.proxy:
        # The session's own header, which http_get does not add.
        headers["Accept-Encoding"] = "identity"
        timeouts = http_get.Timeouts.as_aiohttp(reached.timeout)
        return await http_get.get(
            target, headers, timeouts, limit=reached.connections, tls=reached.tls
        )
    async with session.get(
        URL(target, encoded=True),
        headers=headers,
        timeout=reached.timeout,
        ssl=reached.tls or True,
        **reached.proxy,
    ) as response:
        body = await response.read()
        return response.status, body


async def signed_for(reached: _Bucket, url: str, **signing) -> dict[str, str]:
    """The headers that sign a request for `url` in `reached`'s bucket with its credentials
    (`signed_headers`, given `signing`: method, query, payload, amz), as botocore refreshes
    them; none for an anonymous filesystem."""
    if reached.credentials is None:
        return {}
    frozen = await reached.credentials.get_frozen_credentials()
    return signed_headers(
        url,
        reached.region,
        frozen.access_key,
        frozen.secret_key,
        frozen.token,
        time.time(),
        **signing,
    )


async def route(fs, path: str):
    """(the aiohttp session, the object's `_Bucket`, its URL) for requests signed here for the
    object at `path` of `fs`, on `fs`'s event loop; None where s3fs must send them (a version,
    a bucket alone, a filesystem set up for more than `plain`, a bucket `_reach` leaves)."""
    bucket, key, version = fs.split_path(path)
    if version or not key:
        return None
    found = await bucket_route(fs, bucket)
    if found is None:
        return None
    session, reached = found
    return session, reached, reached.base + quote_key(key)


async def bucket_route(fs, bucket: str):
    """(the aiohttp session, the `_Bucket`) for requests signed here to `bucket` of `fs` (its
    objects, or its listing: `s3_list`), on `fs`'s event loop; None where s3fs must send them
    (a filesystem set up for more than `plain`, a bucket `_reach` leaves)."""
    if not _plain(fs):
        return None
    reader = _reader(fs, asyncio.get_running_loop())
    reached = await reader.bucket(fs, bucket)
    return None if reached is None else (reader.session, reached)


def leave_to_s3fs(fs, path: str) -> None:
    """The bucket of `path` answered from elsewhere (another region): from now on its
    requests go through s3fs, whose client follows."""
    bucket = fs.split_path(path)[0]
    for reader in list(_readers(fs).values()):
        reader.buckets[bucket] = None


def error_of(status: int, body: bytes, path: str) -> OSError:
    """The OSError for an S3 error answer: FileNotFoundError, PermissionError or S3Error."""
    code = _CODE.search(body)
    message = _MESSAGE.search(body)
    code_text = code.group(1).decode("utf-8", "replace") if code else "error"
    message_text = message.group(1).decode("utf-8", "replace") if message else ""
    if status == 404:
        return FileNotFoundError(errno.ENOENT, message_text or "no such object", path)
    if status == 403:
        return PermissionError(errno.EACCES, message_text or "access denied", path)
    return S3Error(status, code_text, message_text, path)


async def _through_s3fs(fs, path: str) -> bytes:
    from beam_tfrecord.storage import whole_read_options

    return await fs._cat_file(path, **whole_read_options(fs))
