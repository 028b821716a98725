"""Shard uploads to S3 in requests signed by us (s3_upload), against botocore's signer and moto."""

from __future__ import annotations

import base64
import calendar
import hashlib
import time
import zlib

import fsspec
import pytest

# The fixture is imported for pytest to find it; tests ask for it by name.
from cloud_servers import s3_store  # noqa: F401
from upload_pieces import first_answered, pieces_of, written

from beam_tfrecord import s3_get, s3_upload
from beam_tfrecord.uploads import BufferedUpload, open_upload

botocore_auth = pytest.importorskip("botocore.auth")
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

PART = 5 * 1024 * 1024  # S3's least part, the block these tests upload in


def _pieces(total: int) -> list[bytes]:
    return pieces_of(total, seed=3, largest=300_000)


def _path(store, name: str) -> str:
    return f"{store.new_bucket('uploads')[len('s3://') :]}/{name}"


def _upload(fs, path: str, pieces: list[bytes]):
    return written(fs, path, PART, pieces, s3_upload.S3Upload)


@pytest.mark.parametrize(
    ("method", "query", "body"),
    [
        ("PUT", {}, b"a shard's bytes"),
        ("PUT", {"partNumber": "3", "uploadId": "a/b+c=d~e"}, b"\x00" * 1000),
        ("POST", {"uploads": ""}, b""),
        ("DELETE", {"uploadId": "xyz"}, b""),
    ],
)
@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEXAMPLETOKEN//+=="])
def test_the_signature_of_an_upload_request_is_botocores(method, query, body, token):
    url = "http://127.0.0.1:9000/bucket/" + s3_get.quote_key("a folder/ünï+shard.tfrecord")
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    checksum = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    query_string = s3_get.canonical_query(query)
    request = AWSRequest(
        method,
        f"{url}?{query_string}" if query_string else url,
        data=body,
        headers={"x-amz-checksum-crc32": checksum},
    )
    botocore_auth.S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(request)
    theirs = dict(request.headers.items())
    when = calendar.timegm(time.strptime(theirs["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
    ours = s3_get.signed_headers(
        url,
        "eu-west-1",
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        token,
        when,
        method=method,
        query=query,
        payload=hashlib.sha256(body).hexdigest(),
        amz={"x-amz-checksum-crc32": checksum},
    )
    assert ours["Authorization"] == theirs["Authorization"]


@pytest.mark.parametrize("size", [0, 1, PART - 1, PART, PART + 1, 2 * PART + 12_345])
def test_what_was_written_is_the_object_byte_for_byte(s3_store, size):  # noqa: F811
    fs = s3_store.fs
    path = _path(s3_store, "shard")
    pieces = _pieces(size)
    upload = _upload(fs, path, pieces)
    fs.invalidate_cache()
    assert not fs.exists(path)  # nothing is seen before the commit, parts sent or not
    upload.commit()
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)
    assert fs.list_multipart_uploads(path.split("/")[0]) == []


@pytest.mark.parametrize("name", ["a b+c%20d&e=f?g#h~i", "photos/ünï/ço.tfrecord"])
@pytest.mark.parametrize("size", [PART - 1, PART + 7])
def test_a_name_that_needs_quoting_is_the_object_name(s3_store, name, size):  # noqa: F811
    fs = s3_store.fs
    folder = _path(s3_store, "odd-names")
    pieces = _pieces(size)
    _upload(fs, f"{folder}/{name}", pieces).commit()
    fs.invalidate_cache()
    assert fs.find(folder) == [f"{folder}/{name}"]
    assert fs.cat_file(f"{folder}/{name}") == b"".join(pieces)


def test_a_shard_of_whole_blocks_sends_no_empty_last_part(s3_store):  # noqa: F811
    fs, proxy = s3_store.fs, s3_store.proxy
    path = _path(s3_store, "whole-blocks")
    pieces = _pieces(2 * PART)
    proxy.reset_counts()
    _upload(fs, path, pieces).commit()
    # start, two parts, the completion
    assert proxy.reset_counts()["upload"] == 4
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)


def test_a_shard_within_one_block_is_one_request_and_a_larger_one_a_request_a_block(s3_store):  # noqa: F811
    fs, proxy = s3_store.fs, s3_store.proxy
    small, large = _path(s3_store, "small"), _path(s3_store, "large")
    proxy.reset_counts()
    _upload(fs, small, _pieces(PART - 10)).commit()
    assert proxy.reset_counts()["upload"] == 1
    _upload(fs, large, _pieces(2 * PART + 5)).commit()
    # start, two full blocks, the last part with the rest, the completion
    assert proxy.reset_counts()["upload"] == 5


@pytest.mark.parametrize("sent", [0, 1, 2])
def test_an_abandoned_upload_leaves_nothing_and_no_parts(s3_store, sent, caplog):  # noqa: F811
    fs = s3_store.fs
    path = _path(s3_store, "abandoned")
    upload = _upload(fs, path, _pieces(sent * PART + 100))
    upload.abandon()
    fs.invalidate_cache()
    assert not fs.exists(path)
    assert fs.list_multipart_uploads(path.split("/")[0]) == []
    # The abort's 204 is its success: no warning that parts were left behind.
    assert "could not cancel" not in caplog.text


def test_a_request_the_store_fails_with_a_503_is_sent_again(s3_store):  # noqa: F811
    fs, proxy = s3_store.fs, s3_store.proxy
    path = _path(s3_store, "retried")
    pieces = _pieces(3 * PART)
    second = lambda method, target: method == "PUT" and "partNumber=2" in target  # noqa: E731
    with first_answered(proxy, second, 503) as failed:
        _upload(fs, path, pieces).commit()
    assert failed
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)


@pytest.mark.parametrize("size", [100, 2 * PART])
def test_a_refusal_names_the_object_and_is_not_retried(s3_store, size):  # noqa: F811
    fs, proxy = s3_store.fs, s3_store.proxy
    path = _path(s3_store, "refused")
    refused = []

    def fault(method, target):
        if method in ("PUT", "POST"):
            refused.append(target)
            return 403
        return None

    proxy.fault = fault
    try:
        upload = open_upload(fs, path, PART)
        with pytest.raises(PermissionError) as raised:
            for piece in _pieces(size):
                upload.write(piece)
            upload.commit()
    finally:
        proxy.fault = None
    assert raised.value.filename == path
    assert len(refused) == 1
    upload.abandon()
    fs.invalidate_cache()
    assert not fs.exists(path)


def test_a_filesystem_set_up_for_more_than_this_upload_sends_uploads_through_s3fs(s3_store):  # noqa: F811
    # Server-side encryption asked of s3fs: its own file sends it with every request.
    fs = fsspec.filesystem(
        "s3", s3_additional_kwargs={"ServerSideEncryption": "AES256"}, skip_instance_cache=True
    )
    path = _path(s3_store, "through-s3fs")
    upload = open_upload(fs, path, PART)
    assert isinstance(upload, BufferedUpload)
    upload.write(b"abc")
    upload.commit()
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"abc"


def test_a_shard_in_one_request_carries_its_crc32_for_the_store_to_check(s3_store):  # noqa: F811
    fs = s3_store.fs
    path = _path(s3_store, "checked")
    pieces = _pieces(PART // 2)
    _upload(fs, path, pieces).commit()
    bucket, key = path.split("/", 1)
    head = fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    crc = zlib.crc32(b"".join(pieces)).to_bytes(4, "big")
    assert head["ChecksumCRC32"] == base64.b64encode(crc).decode()


def test_a_multipart_upload_declares_its_checksum_and_lists_each_parts(s3_store):  # noqa: F811
    # S3 refuses a part's checksum unless its upload declared the algorithm, and then wants
    # each part's in the completion; the object's checksum is then the parts' (composite).
    fs = s3_store.fs
    path = _path(s3_store, "checked-parts")
    pieces = _pieces(2 * PART + 1)
    _upload(fs, path, pieces).commit()
    bucket, key = path.split("/", 1)
    head = fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    # The parts' composite: the CRC32 of their CRC32s, which S3 gives with "-3" after it.
    data = b"".join(pieces)
    parts = (data[:PART], data[PART : 2 * PART], data[2 * PART :])
    crcs = b"".join(zlib.crc32(part).to_bytes(4, "big") for part in parts)
    composite = base64.b64encode(zlib.crc32(crcs).to_bytes(4, "big")).decode()
    assert head["ChecksumCRC32"] in (composite, f"{composite}-3")
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)


def test_no_checksum_goes_where_the_client_asks_for_them_only_when_required(
    s3_store,  # noqa: F811
    monkeypatch,
):
    # A store that refuses checksums is reached with botocore set so (here through the
    # environment); its uploads are then sent as botocore would send them, with none.
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    path = _path(s3_store, "unchecked")
    pieces = _pieces(PART // 2)
    _upload(fs, path, pieces).commit()
    bucket, key = path.split("/", 1)
    head = fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert "ChecksumCRC32" not in head
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)


def test_a_bucket_that_answers_from_elsewhere_is_uploaded_through_s3fs(s3_store):  # noqa: F811
    # A bucket in another region than the client's answers with a redirect, which botocore's
    # client follows and these requests do not: the upload goes on through s3fs's own file,
    # and the bucket's later uploads (and reads) go there at once. (The redirect answers the
    # start of a multipart upload, which has no body: the proxy answers a faulted request
    # without reading its body, and a client still sending one sees a dropped connection.)
    fs, proxy = s3_store.fs, s3_store.proxy
    path = _path(s3_store, "elsewhere")
    pieces = _pieces(2 * PART + 3)
    start = lambda method, target: method == "POST" and "uploads" in target  # noqa: E731
    with first_answered(proxy, start, 301) as moved:
        _upload(fs, path, pieces).commit()
    assert moved
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)
    assert isinstance(open_upload(fs, f"{path}-next", PART), BufferedUpload)
