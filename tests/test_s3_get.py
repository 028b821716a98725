"""Reads of S3 objects in one GET signed by us (s3_get), against botocore's signer and moto's server."""

from __future__ import annotations

import asyncio
import calendar
import functools
import gc
import threading
import time
import urllib.parse

import fsspec
import pytest

# The fixtures are imported for pytest to find them; tests ask for them by name.
from certificates import self_signed
from cloud_servers import s3_store  # noqa: F401
from fsspec.asyn import sync
from latency_proxy import request_kind

from beam_tfrecord import remote, s3_get
from beam_tfrecord.remote import fetch_in_order, is_transient

botocore_auth = pytest.importorskip("botocore.auth")
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

KEYS = [
    "plain.jpg",
    "a folder/with spaces+plus=eq&amp.jpg",
    "ünïcode/日本/ñ.png",
    "tilde~and%percent/#hash?.jpg",
]


def _botocore(url: str, region: str, token: str | None) -> dict[str, str]:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    request = AWSRequest("GET", url, headers={})
    botocore_auth.S3SigV4Auth(credentials, "s3", region).add_auth(request)
    return dict(request.headers.items())


@pytest.mark.parametrize(
    "base",
    [
        "http://127.0.0.1:9000/bucket/",  # path-style, a port
        "https://photos.s3.eu-west-1.amazonaws.com/",  # virtual-hosted
    ],
)
@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEXAMPLETOKEN//+=="])
@pytest.mark.parametrize("key", KEYS)
def test_the_signature_is_botocores(base, token, key):
    url = base + urllib.parse.quote(key, safe="/~")
    region = "eu-west-1"
    theirs = _botocore(url, region, token)
    when = calendar.timegm(time.strptime(theirs["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
    ours = s3_get.signed_headers(
        url, region, "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token, when
    )
    assert ours["Authorization"] == theirs["Authorization"]
    for name in ("X-Amz-Date", "X-Amz-Content-SHA256", "X-Amz-Security-Token"):
        assert ours.get(name) == theirs.get(name), name
    assert ours["Host"] == urllib.parse.urlsplit(url).netloc


def _read(fs, path: str) -> bytes:
    return sync(fs.loop, s3_get.read_s3_object, fs, path)


@pytest.fixture
def bucket(s3_store):  # noqa: F811
    """A new bucket holding KEYS (each object its own key's bytes, repeated), and the proxy in
    front of the store with its counts reset and no fault."""
    url = s3_store.new_bucket("get")
    fs = s3_store.fs
    name = url.split("://", 1)[1]
    fs.pipe({f"{name}/{key}": key.encode() * 1000 for key in KEYS})
    s3_store.proxy.reset_counts()
    yield fs, name, s3_store.proxy
    s3_store.proxy.fault = None


def test_objects_are_read_in_one_get_each_as_s3fs_reads_them(bucket):
    fs, name, proxy = bucket
    for key in KEYS:
        path = f"{name}/{key}"
        assert _read(fs, path) == fs.cat_file(path, max_concurrency=1) == key.encode() * 1000
    counts = proxy.reset_counts()
    assert counts == {"read": 2 * len(KEYS)}, counts  # ours and s3fs's: no HEAD, no listing


def test_a_new_filesystem_reads_before_anything_else_set_it_up(bucket):
    """As in a worker process: the first thing the filesystem does is this read."""
    _, name, proxy = bucket
    fresh = fsspec.filesystem("s3", skip_instance_cache=True)
    assert _read(fresh, f"{name}/plain.jpg") == b"plain.jpg" * 1000
    assert proxy.reset_counts() == {"read": 1}


def test_a_filesystem_equal_to_one_collected_keeps_its_reads_in_flight(bucket):
    """fsspec's filesystems made alike compare and hash equal. One of them collected while
    the other's reads are in flight must not close the connections those reads are on."""
    _, name, proxy = bucket
    first = fsspec.filesystem("s3", skip_instance_cache=True)
    second = fsspec.filesystem("s3", skip_instance_cache=True)
    assert first == second and first is not second
    assert _read(first, f"{name}/plain.jpg") == b"plain.jpg" * 1000
    paths = [f"{name}/{key}" for key in KEYS] * 4

    async def all_of_them():
        return await asyncio.gather(*(s3_get.read_s3_object(second, path) for path in paths))

    got = []
    reading = threading.Thread(target=lambda: got.append(sync(second.loop, all_of_them)))
    proxy.reset_counts()
    proxy.delay = 0.5
    try:
        reading.start()
        deadline = time.monotonic() + 5
        while proxy.counts["read"] < len(paths) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.counts["read"] == len(paths)  # all sent, none answered yet
        del first
        gc.collect()
        reading.join(10)
    finally:
        proxy.delay = 0.0
    assert got == [[path.split("/", 1)[1].encode() * 1000 for path in paths]]
    assert proxy.reset_counts() == {"read": len(paths)}


def test_what_the_store_refuses_keeps_its_kind_and_the_stores_words(bucket):
    fs, name, proxy = bucket
    with pytest.raises(FileNotFoundError, match="does not exist") as missing:
        _read(fs, f"{name}/no/such.jpg")
    assert missing.value.filename == f"{name}/no/such.jpg"
    assert not is_transient(missing.value)

    failing = {"403": 403, "503": 503, "500": 500, "429": 429}
    fs.pipe({f"{name}/{text}.jpg": b"x" for text in failing})
    proxy.fault = lambda method, target: next(
        (status for text, status in failing.items() if f"/{text}.jpg" in target), None
    )
    with pytest.raises(PermissionError, match="injected 403"):
        _read(fs, f"{name}/403.jpg")
    for text, status in failing.items():
        if status == 403:
            continue
        with pytest.raises(s3_get.S3Error) as refused:
            _read(fs, f"{name}/{text}.jpg")
        assert refused.value.status == status and f"injected {status}" in str(refused.value)
        assert is_transient(refused.value)


def test_a_transient_failure_is_retried_and_one_for_good_is_given_up_within_seconds(bucket):
    _, name, proxy = bucket
    tries = {"plain.jpg": 0, "ünïcode/日本/ñ.png": 0}

    def fault(method, target):
        for key in tries:
            if request_kind(method, target) == "read" and urllib.parse.quote(key) in target:
                tries[key] += 1
                # the first read fails and its retry succeeds; the other fails every time
                return 503 if key != "plain.jpg" or tries[key] == 1 else None
        return None

    proxy.fault = fault
    urls = [(key, f"s3://{name}/{key}", 0) for key in tries]
    started = time.monotonic()
    got = dict(fetch_in_order(urls, depth=4))
    took = time.monotonic() - started
    assert got["plain.jpg"] == b"plain.jpg" * 1000 and tries["plain.jpg"] == 2
    lost = got["ünïcode/日本/ñ.png"]
    assert isinstance(lost, OSError) and "503" in str(lost)
    assert tries["ünïcode/日本/ñ.png"] == remote.ATTEMPTS * s3_get.S3_TRIES
    assert took < 15, took


def test_a_bucket_the_store_redirects_is_read_through_s3fs_from_then_on(bucket, monkeypatch):
    """A bucket in another region than the client's: S3 answers 301 (or 400 naming the region);
    s3fs's client follows, so that bucket's reads go through it."""
    fs, name, proxy = bucket
    through = []
    real = type(fs)._cat_file

    @functools.wraps(real)  # its signature, which storage.whole_read_options reads and caches
    async def spied(self, path, **kwargs):
        through.append(path)
        return await real(self, path, **kwargs)

    monkeypatch.setattr(type(fs), "_cat_file", spied)
    answered = []

    def moved_once(method, target):
        if request_kind(method, target) == "read" and not answered:
            answered.append(target)
            return 301
        return None

    proxy.fault = moved_once
    assert _read(fs, f"{name}/plain.jpg") == b"plain.jpg" * 1000
    assert _read(fs, f"{name}/{KEYS[1]}") == KEYS[1].encode() * 1000
    assert answered and through == [f"{name}/plain.jpg", f"{name}/{KEYS[1]}"]


@pytest.mark.parametrize(
    "setting",
    [
        {"requester_pays": True},
        {"s3_additional_kwargs": {"SSECustomerAlgorithm": "AES256"}},
        {"config_kwargs": {"s3": {"addressing_style": "virtual"}}},
    ],
)
def test_a_filesystem_set_up_for_more_than_a_plain_get_is_read_through_s3fs(
    s3_store,  # noqa: F811
    setting,
    monkeypatch,
):
    plain = s3_store.fs
    url = s3_store.new_bucket("setup")
    plain.pipe_file(f"{url}/a.jpg", b"a")
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **setting)
    called = []

    @functools.wraps(type(fs)._cat_file)  # its signature, which whole_read_options caches
    async def instead(self, path, **kwargs):
        called.append(path)
        return b"through s3fs"

    monkeypatch.setattr(type(fs), "_cat_file", instead)
    path = url.split("://", 1)[1] + "/a.jpg"
    assert _read(fs, path) == b"through s3fs" and called == [path]
    assert _read(plain, path) == b"a" and called == [path]  # a plain one sends its own GET


def test_an_object_whose_store_goes_silent_is_given_up_after_the_clients_read_timeout(bucket):
    """botocore's `read_timeout` (60 s unless set) limits each try's silence, as it did through
    s3fs; the tries are ours, S3_TRIES of them, not s3fs's 5 of botocore's 5."""
    _, name, proxy = bucket
    tries = []
    proxy.fault = lambda method, target: (
        tries.append(target) or "stall" if "/plain.jpg" in target else None
    )
    fs = fsspec.filesystem("s3", skip_instance_cache=True, config_kwargs={"read_timeout": 1})
    started = time.monotonic()
    with pytest.raises(OSError, match="Timeout") as silent:
        sync(fs.loop, remote._read_object, fs, f"{name}/plain.jpg", 1)
    took = time.monotonic() - started
    assert is_transient(silent.value.__cause__)
    assert len(tries) == s3_get.S3_TRIES and s3_get.S3_TRIES <= took < s3_get.S3_TRIES + 10


def test_a_netrc_default_entry_adds_nothing_to_the_signed_get(bucket, tmp_path, monkeypatch):
    """aiohttp, told to trust the environment, would add ~/.netrc's login to a request that has
    no auth of its own, and refuse one that has an Authorization header besides."""
    _, name, _ = bucket
    netrc = tmp_path / "netrc"
    netrc.write_text("default login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    fresh = fsspec.filesystem("s3", skip_instance_cache=True, config_kwargs={"retries": {}})
    assert _read(fresh, f"{name}/plain.jpg") == b"plain.jpg" * 1000


def test_the_proxy_the_environment_names_carries_the_gets(bucket, monkeypatch):
    """HTTP_PROXY, as botocore honours it: the store's address is one only the proxy reaches
    (192.0.2.1, a documentation address; the latency proxy forwards the request, its absolute
    URL and all, to moto)."""
    _, name, proxy = bucket
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    unreachable = fsspec.filesystem(
        "s3", skip_instance_cache=True, endpoint_url="http://192.0.2.1:9000"
    )
    assert _read(unreachable, f"{name}/plain.jpg") == b"plain.jpg" * 1000
    assert proxy.reset_counts()["read"] == 1


def test_a_store_whose_certificate_the_clients_ca_bundle_trusts_is_read_and_listed(
    tmp_path, monkeypatch
):
    """A store of a private CA (MinIO, Ceph, a company's own), which botocore trusts through
    AWS_CA_BUNDLE (or `ca_bundle` in ~/.aws/config): s3fs reads and lists it, and so must the
    build, whose GETs left botocore's trust behind: every listing failed 'certificate verify
    failed', the build with it."""
    import subprocess
    import sys

    from cloud_servers import point_s3_at
    from local_ports import free_port, wait_for_port

    from beam_tfrecord import store_listing

    pytest.importorskip("moto.server")
    cert, key = self_signed(tmp_path, "127.0.0.1")
    port = free_port()
    log = tmp_path / "moto.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port),
             "-c", cert, "-k", key],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        wait_for_port("127.0.0.1", port, server, log, seconds=60)
        point_s3_at(monkeypatch, f"https://127.0.0.1:{port}", tmp_path)
        monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        fs.mkdir("private")
        fs.pipe_file("private/data/a.jpg", b"jpeg" * 1000)
        assert _read(fs, "private/data/a.jpg") == b"jpeg" * 1000
        pages = store_listing.pages(fs, "private/data", recursive=True)
        assert [entry["name"] for page in pages for entry in page] == ["private/data/a.jpg"]
    finally:
        server.terminate()
        server.wait(10)
