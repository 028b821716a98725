"""S3 listings signed and parsed by us (s3_list), against s3fs's own and moto's server."""

from __future__ import annotations

import functools
import gzip
import http.server
import threading
import urllib.parse

import fsspec
import pytest

# The fixtures are imported for pytest to find them; tests ask for them by name.
from cloud_servers import s3_store  # noqa: F401
from fsspec.asyn import sync
from latency_proxy import request_kind

from beam_tfrecord import s3_get, s3_list, store_listing
from beam_tfrecord.storage import store_reason
from beam_tfrecord.store_listing import _s3fs_page

KEYS = [
    "plain.jpg",
    "a folder/with spaces+plus=eq&amp<lt>.jpg",
    "a folder/deeper/x.jpg",
    "ünïcode/日本/ñ.png",
    "tilde~and%percent/#hash?.jpg",
    "z%2Bnot-an-escape.jpg",
]


@pytest.fixture
def bucket(s3_store):  # noqa: F811
    """A new bucket holding KEYS under `data/`, and the proxy with its counts reset."""
    url = s3_store.new_bucket("list")
    fs = s3_store.fs
    name = url.split("://", 1)[1]
    fs.pipe({f"{name}/data/{key}": key.encode() for key in KEYS})
    s3_store.proxy.reset_counts()
    yield fs, name, s3_store.proxy
    s3_store.proxy.fault = None


def _ours(fs, bucket: str, prefix: str, delimiter=None, start_after=None, max_keys=1000):
    return sync(
        fs.loop,
        s3_list.list_page,
        fs,
        bucket,
        prefix,
        delimiter=delimiter,
        start_after=start_after,
        max_keys=max_keys,
    )


def _theirs(fs, bucket: str, prefix: str, delimiter=None, start_after=None):
    return sync(
        fs.loop, _s3fs_page, fs, bucket, prefix, delimiter=delimiter, start_after=start_after
    )


@pytest.mark.parametrize(
    "prefix, delimiter, start_after",
    [
        ("data/", None, None),
        ("data/", "/", None),
        ("data/a folder/", "/", None),
        ("data/", None, "data/a folder/with"),
        ("data/ünïcode/", None, None),
        ("nothing/", None, None),
    ],
)
def test_a_page_holds_what_s3fs_lists(bucket, prefix, delimiter, start_after):
    fs, name, _ = bucket
    ours = _ours(fs, name, prefix, delimiter, start_after)
    assert ours == _theirs(fs, name, prefix, delimiter, start_after)
    if prefix == "data/" and not delimiter and not start_after:
        assert sorted(key for key, _ in ours[0]) == sorted(f"data/{key}" for key in KEYS)
        assert dict(ours[0])[f"data/{KEYS[1]}"] == len(KEYS[1].encode())


def test_a_short_page_says_more_is_to_come(bucket):
    fs, name, _ = bucket
    files, folders, more = _ours(fs, name, "data/", max_keys=2)
    assert len(files) == 2 and not folders and more
    files, _, more = _ours(fs, name, "data/", start_after=files[-1][0], max_keys=1000)
    assert len(files) == len(KEYS) - 2 and not more


def test_a_folder_is_listed_without_botocore(bucket, monkeypatch):
    """botocore's client costs about 100 us of CPU an object listed; every page goes out
    signed here, and the listing is the one s3fs gives."""
    fs, name, proxy = bucket
    expected = sorted(fs.find(f"{name}/data"))
    fs.invalidate_cache()
    proxy.reset_counts()
    listed, through = _listed_spying_on_botocore(fs, f"{name}/data", monkeypatch)
    assert sorted(listed) == expected and len(listed) == len(KEYS)
    assert through == []
    assert proxy.reset_counts() == {"list": 1}


def test_a_transient_failure_is_retried_and_a_lasting_one_raised(bucket, monkeypatch):
    fs, name, proxy = bucket
    failed = []

    def once(method, target):
        if request_kind(method, target) == "list" and not failed:
            failed.append(target)
            return 503
        return None

    proxy.fault = once
    files, _, _ = _ours(fs, name, "data/")
    assert failed and len(files) == len(KEYS)
    monkeypatch.setattr(s3_list, "backoff", lambda attempt: 0)  # the waits, not the tries
    proxy.reset_counts()
    proxy.fault = lambda method, target: 500 if request_kind(method, target) == "list" else None
    with pytest.raises(s3_get.S3Error, match="500"):
        _ours(fs, name, "data/")
    assert proxy.reset_counts() == {"list": s3_list.LIST_TRIES}


def test_a_listing_the_store_stops_answering_is_said_to_in_its_own_words(bucket, monkeypatch):
    """fsspec's `sync` turns a timeout of the listing's coroutine into a bare FSTimeoutError,
    with the words in its cause: a build stopped by it said only "listing the inputs failed:
    FSTimeoutError", not that the store was silent."""
    _, name, proxy = bucket
    quick = fsspec.filesystem("s3", skip_instance_cache=True, config_kwargs={"read_timeout": 0.5})
    monkeypatch.setattr(s3_list, "LIST_TRIES", 1)  # the words, not the tries
    proxy.fault = lambda method, target: "stall" if request_kind(method, target) == "list" else None
    with pytest.raises(TimeoutError) as caught:
        list(store_listing.pages(quick, f"{name}/data", recursive=True))
    assert store_reason(caught.value) == "the store was silent for 0.5 s"


def test_a_missing_bucket_is_not_found_and_a_refused_one_not_permitted(bucket):
    fs, name, proxy = bucket
    with pytest.raises(FileNotFoundError):
        _ours(fs, f"{name}-never-made", "data/")
    proxy.fault = lambda method, target: 403 if request_kind(method, target) == "list" else None
    with pytest.raises(PermissionError):
        _ours(fs, name, "data/")


def test_a_bucket_the_store_redirects_is_listed_through_s3fs(bucket):
    fs, name, proxy = bucket
    proxy.fault = lambda method, target: 301 if request_kind(method, target) == "list" else None
    assert _ours(fs, name, "data/") is None
    proxy.fault = None
    assert _ours(fs, name, "data/") is None  # from now on: s3fs's client follows a redirect
    listed = [e["name"] for page in store_listing.pages(fs, f"{name}/data", recursive=True)
              for e in page]  # fmt: skip
    assert len(listed) == len(KEYS)


def test_a_filesystem_set_up_for_more_lists_through_s3fs(s3_store, monkeypatch):  # noqa: F811
    url = s3_store.new_bucket("setup")
    s3_store.fs.pipe_file(f"{url}/data/a.jpg", b"a")
    fs = fsspec.filesystem("s3", skip_instance_cache=True, requester_pays=True)
    name = url.split("://", 1)[1]
    assert _ours(fs, name, "data/") is None
    listed, through = _listed_spying_on_botocore(fs, f"{name}/data", monkeypatch)
    assert listed == [f"{name}/data/a.jpg"] and through == ["list_objects_v2"]


def _listed_spying_on_botocore(fs, folder: str, monkeypatch) -> tuple[list[str], list[str]]:
    """The names a recursive listing of `folder` gives, and the botocore calls it made."""
    through = []
    real = type(fs)._call_s3

    @functools.wraps(real)
    async def spied(self, method, *args, **kwargs):
        through.append(method)
        return await real(self, method, *args, **kwargs)

    monkeypatch.setattr(type(fs), "_call_s3", spied)
    pages = store_listing.pages(fs, folder, recursive=True)
    return [entry["name"] for page in pages for entry in page], through


_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _answer(body: str, encoded: bool = True) -> bytes:
    kind = "<EncodingType>url</EncodingType>" if encoded else ""
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_NS}">'
            f"<Name>b</Name>{kind}{body}</ListBucketResult>").encode()  # fmt: skip


def test_names_the_store_encoded_are_decoded_as_botocore_decodes_them():
    name = "a folder/plus+and&amp<é>.jpg"
    encoded = urllib.parse.quote_plus(name, safe="/")
    body = (
        f"<IsTruncated>true</IsTruncated><Contents><Key>{encoded}</Key><Size>7</Size></Contents>"
        f"<CommonPrefixes><Prefix>{urllib.parse.quote_plus('x y/', safe='/')}</Prefix>"
        "</CommonPrefixes>"
    )
    assert s3_list.parse_page(_answer(body)) == ([(name, 7)], ["x y/"], True)
    plain = (
        "<IsTruncated>false</IsTruncated><Contents><Key>a+b%20.jpg</Key><Size>1</Size></Contents>"
    )
    assert s3_list.parse_page(_answer(plain, encoded=False)) == ([("a+b%20.jpg", 1)], [], False)


def test_a_plain_page_is_read_as_elementtree_reads_it_and_any_other_by_elementtree():
    names = [f"photos/img{i:04d}.jpg" for i in range(3)] + ["a b/+%.jpg"]
    contents = "".join(
        f"<Contents><Key>{urllib.parse.quote_plus(n, safe='/')}</Key><LastModified>x"
        f"</LastModified><ETag>&quot;e&quot;</ETag><Size>{i}</Size></Contents>"
        for i, n in enumerate(names)
    )
    folders = "<CommonPrefixes><Prefix>x%2By/</Prefix></CommonPrefixes>"
    body = _answer(f"<IsTruncated>true</IsTruncated>{contents}{folders}")
    expected = ([(n, i) for i, n in enumerate(names)], ["x+y/"], True)
    assert s3_list._plain_page(body) == s3_list._parsed_page(body) == expected
    # Names not URL-encoded (escaped for XML), or tags of a namespace prefix: ElementTree's.
    escaped = _answer(
        "<IsTruncated>false</IsTruncated><Contents><Key>a&amp;b</Key><Size>1</Size></Contents>"
    )
    assert s3_list._plain_page(escaped) is None
    assert s3_list.parse_page(escaped) == ([("a&b", 1)], [], False)
    prefixed = (
        f'<s3:ListBucketResult xmlns:s3="{_NS}"><s3:EncodingType>url</s3:EncodingType>'
        "<s3:IsTruncated>false</s3:IsTruncated><s3:Contents><s3:Key>k</s3:Key>"
        "<s3:Size>2</s3:Size></s3:Contents></s3:ListBucketResult>"
    ).encode()
    assert s3_list._plain_page(prefixed) is None
    assert s3_list.parse_page(prefixed) == ([("k", 2)], [], False)


def test_a_page_read_up_to_its_range_end_stops_there_by_either_reader(monkeypatch):
    """S3 lists a range with no end: its page runs on into the names of the ranges after it.
    Read up to `before`, the page ends at the range's end, is not truncated, and the names past
    it are not decoded. Names compare decoded, as the store orders them."""
    names = ["p/a+b.jpg", "p/a b.jpg", "p/a%b.jpg", "p/ab.jpg", "p/b.jpg", "p/c.jpg"]
    contents = "".join(
        f"<Contents><Key>{urllib.parse.quote_plus(n, safe='/')}</Key><Size>{i}</Size></Contents>"
        for i, n in enumerate(sorted(names))
    )
    folders = "<CommonPrefixes><Prefix>p/b/</Prefix></CommonPrefixes>"
    body = _answer(f"<IsTruncated>true</IsTruncated>{contents}{folders}")
    kept = [(n, i) for i, n in enumerate(sorted(names)) if n < "p/ab"]
    assert len(kept) == 3
    assert s3_list.parse_page(body, "p/ab") == (kept, [], False)
    assert s3_list.parse_page(body, "p/zz") == (s3_list.parse_page(body)[0], ["p/b/"], True)
    decoded = []
    real = s3_list._decoded
    monkeypatch.setattr(s3_list, "_decoded", lambda name: decoded.append(name) or real(name))
    s3_list.parse_page(body, "p/ab")
    assert len(decoded) == 4 + 1  # the three kept, the first past the end, and the folder
    escaped = _answer(  # ElementTree's reader: the same cut
        "<IsTruncated>true</IsTruncated><Contents><Key>a&amp;b</Key><Size>1</Size></Contents>"
        "<Contents><Key>c</Key><Size>2</Size></Contents>"
    )
    assert s3_list.parse_page(escaped, "b") == ([("a&b", 1)], [], False)


@pytest.mark.parametrize(
    "body, words",
    [
        (b"<html>oops", "not XML"),
        (b"<Error><Code>SlowDown</Code></Error>", "<Error>"),
    ],
)
def test_an_answer_that_is_not_a_listing_is_an_error(body, words):
    with pytest.raises(OSError, match=words):
        s3_list.parse_page(body)


class _Gzipping(http.server.BaseHTTPRequestHandler):
    """A listing served as a reverse proxy with gzip on (nginx's `gzip_types application/xml`)
    serves it: compressed for a client that says it takes gzip."""

    def do_GET(self):
        body = _answer("<IsTruncated>false</IsTruncated><Contents><Key>a.jpg</Key><Size>3</Size>"
                       "</Contents>", encoded=False)  # fmt: skip
        gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
        body = gzip.compress(body) if gzipped else body
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_listing_is_asked_for_as_is_where_a_proxy_would_gzip_it(monkeypatch):
    """botocore asks for every answer as is (Accept-Encoding: identity); aiohttp's default asks
    for gzip, which our session, keeping bytes as stored, would not undo: the XML unreadable."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gzipping)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    endpoint = f"http://127.0.0.1:{server.server_port}"
    fs = fsspec.filesystem("s3", skip_instance_cache=True, client_kwargs={"endpoint_url": endpoint})
    try:
        assert _theirs(fs, "b", "") == ([("a.jpg", 3)], [], False)
        assert _ours(fs, "b", "") == ([("a.jpg", 3)], [], False)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "endpoint, style, listed",
    [
        ("http://127.0.0.1:9000", "path", "http://127.0.0.1:9000/photos"),
        ("http://store.example/s3/", "path", "http://store.example/s3/photos"),
        ("http://store.example/s3/", "virtual", "http://photos.store.example/s3/"),
    ],
)
def test_a_bucket_is_listed_at_botocores_url(tmp_path, monkeypatch, endpoint, style, listed):
    """The listing URL is the one botocore's client would send ListObjectsV2 to, addressing
    style (here from an AWS config file) and an endpoint's own path included; nothing is sent
    to find it."""
    s3fs = pytest.importorskip("s3fs")
    config = tmp_path / "aws-config"
    config.write_text(f"[default]\ns3 =\n    addressing_style = {style}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    fs = s3fs.S3FileSystem(
        key="AKID", secret="secret", endpoint_url=endpoint, skip_instance_cache=True
    )
    found = sync(fs.loop, s3_get.bucket_route, fs, "photos")
    assert found is not None
    assert found[1].listing == listed
