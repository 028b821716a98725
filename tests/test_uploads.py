"""Shard uploads to GCS from our own buffer, against fake-gcs-server behind the latency proxy."""

from __future__ import annotations

import fsspec
import pytest

# The fixture is imported for pytest to find it; tests ask for it by name.
from cloud_servers import gcs_store  # noqa: F401
from upload_pieces import first_answered, pieces_of, written

from beam_tfrecord import uploads
from beam_tfrecord.uploads import BufferedUpload, GcsUpload, open_upload

BLOCK = 256 * 1024  # GCS's smallest part


def _pieces(total: int) -> list[bytes]:
    return pieces_of(total, seed=5, largest=90_000)


def _path(store, name: str) -> str:
    return f"{store.new_bucket('uploads')[len('gs://') :]}/{name}"


def _upload(fs, path: str, pieces: list[bytes]):
    return written(fs, path, BLOCK, pieces, GcsUpload)


def _parts(counts) -> int:
    return counts["upload"]


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 12_345])
def test_what_was_written_is_the_object_byte_for_byte(gcs_store, size):  # noqa: F811
    fs = gcs_store.fs
    path = _path(gcs_store, "shard")
    pieces = _pieces(size)
    upload = _upload(fs, path, pieces)
    assert not fs.exists(path)  # nothing is seen before the commit, blocks sent or not
    upload.commit()
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)
    assert fs.info(path)["size"] == size


@pytest.mark.parametrize("name", ["a b+c%20d&e=f?g#h", "photos/ünï/ço.tfrecord"])
@pytest.mark.parametrize("size", [BLOCK - 1, 2 * BLOCK + 7])
def test_a_name_that_needs_quoting_is_the_object_name(gcs_store, name, size):  # noqa: F811
    # One request carries the name in its URL's query; a resumable upload, in its JSON.
    fs = gcs_store.fs
    path = f"{_path(gcs_store, 'odd-names')}/{name}"
    pieces = _pieces(size)
    _upload(fs, path, pieces).commit()
    fs.invalidate_cache()
    folder = path.rsplit("/", 1)[0] if "/" not in name else path[: -len(name) - 1]
    assert fs.find(folder) == [path]
    assert fs.cat_file(path) == b"".join(pieces)


def test_a_shard_within_one_block_is_one_request_and_a_larger_one_a_request_a_block(gcs_store):  # noqa: F811
    fs, proxy = gcs_store.fs, gcs_store.proxy
    small, large = _path(gcs_store, "small"), _path(gcs_store, "large")
    proxy.reset_counts()
    _upload(fs, small, _pieces(BLOCK - 10)).commit()
    assert _parts(proxy.reset_counts()) == 1
    _upload(fs, large, _pieces(3 * BLOCK + 5)).commit()
    # start, three full blocks, the last part with the rest
    assert _parts(proxy.reset_counts()) == 5


@pytest.mark.parametrize("sent", ["nothing", "two blocks"])
def test_an_abandoned_upload_leaves_nothing_and_its_session_is_deleted(gcs_store, sent):  # noqa: F811
    fs, proxy = gcs_store.fs, gcs_store.proxy
    path = _path(gcs_store, "abandoned")
    proxy.reset_counts()
    upload = _upload(fs, path, _pieces(10 if sent == "nothing" else 2 * BLOCK + 7))
    upload.abandon()
    counts = proxy.reset_counts()
    if sent == "nothing":
        assert sum(counts.values()) == 0
    else:
        assert counts["delete"] == 1
    fs.invalidate_cache()
    assert not fs.exists(path)
    assert fs.find(path.split("/")[0]) == []


def test_a_part_the_store_fails_with_a_503_is_sent_again(gcs_store):  # noqa: F811
    fs, proxy = gcs_store.fs, gcs_store.proxy
    path = _path(gcs_store, "retried")
    pieces = _pieces(2 * BLOCK + 99)
    part = lambda method, target: method in ("POST", "PUT") and "upload_id=" in target  # noqa: E731
    with first_answered(proxy, part, 503) as failed:
        _upload(fs, path, pieces).commit()
    assert failed
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)


def test_a_part_the_store_kept_only_some_of_goes_on_from_where_it_stopped(
    gcs_store,  # noqa: F811
    monkeypatch,
):
    """GCS may keep fewer bytes of a part than were sent, and says which (308, Range); the rest
    goes again. Here the first part really sends only its first half, as a store that kept half."""
    fs = gcs_store.fs
    path = _path(gcs_store, "shortfall")
    real_call = type(fs)._call
    cut = []

    async def call(self, method, url, *args, headers=None, data=None, **kwargs):
        span = (headers or {}).get("Content-Range", "")
        if not cut and span.endswith("/*"):
            (part,) = data.parts
            half = len(part) // 2 // BLOCK * BLOCK or BLOCK // 2
            start = int(span.split()[1].split("-")[0])
            cut.append(half)
            headers = {**headers, "Content-Range": f"bytes {start}-{start + half - 1}/*"}
            data = uploads.body_of([part[:half]])
        return await real_call(self, method, url, *args, headers=headers, data=data, **kwargs)

    monkeypatch.setattr(type(fs), "_call", call)
    pieces = _pieces(4 * BLOCK + 3)
    upload = open_upload(fs, path, 2 * BLOCK)
    for piece in pieces:
        upload.write(piece)
    upload.commit()
    assert cut == [BLOCK]
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)


def test_an_md5_check_asked_of_gcsfs_holds_across_blocks(gcs_store):  # noqa: F811
    fs = fsspec.filesystem("gs", consistency="md5", skip_instance_cache=True)
    path = _path(gcs_store, "checked")
    pieces = _pieces(2 * BLOCK + 1)
    _upload(fs, path, pieces).commit()
    assert fs.cat_file(path) == b"".join(pieces)


@pytest.mark.parametrize("block", [BLOCK + 1, 100_000_000, 1])
def test_a_block_size_gcs_would_refuse_is_rounded_to_256_kib(gcs_store, block):  # noqa: F811
    """gcsfs's own default block size need not be a multiple of 256 KiB; the parts are."""
    fs, proxy = gcs_store.fs, gcs_store.proxy
    path = _path(gcs_store, "odd")
    pieces = _pieces(3 * BLOCK + 7)
    proxy.reset_counts()
    upload = open_upload(fs, path, block)
    for piece in pieces:
        upload.write(piece)
    upload.commit()
    parts = 1 if block > len(b"".join(pieces)) else 5  # one request, or start + 3 + the rest
    assert _parts(proxy.reset_counts()) == parts
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"".join(pieces)


def test_other_stores_upload_through_their_own_file(tmp_path):
    fs = fsspec.filesystem("memory")
    upload = open_upload(fs, "/uploads/shard", BLOCK)
    assert isinstance(upload, BufferedUpload)
    upload.write(b"abc")
    upload.commit()
    assert fs.cat_file("/uploads/shard") == b"abc"


def test_blocks_are_kept_for_the_next_upload_but_not_after_an_abandoned_one():
    """A block is a buffer of its full size, made once and kept between a process's uploads:
    growing one into fresh memory cost 65 ms of CPU a 150 MB shard, kept ones 10-20 ms. A
    block an abandoned upload may still be sending from is not kept."""
    size = 1000 + 7  # a size no other test uses: its spare buffers are this test's own
    first = uploads.Blocks(size)
    assert first.fill(b"a" * 600) == 600 and not first.full
    assert first.fill(memoryview(b"b" * 600)) == size - 600 and first.full
    sent = first.filled()
    assert bytes(sent) == b"a" * 600 + b"b" * (size - 600)
    first.turn()
    assert first.fill(b"c" * 5) == 5 and bytes(first.filled()) == b"ccccc"
    assert bytes(sent)[:1] == b"a", "the block on its way is not written over"
    made = list(first._buffers)  # held here: their addresses are not reused
    first.release(keep=True)
    again = uploads.Blocks(size)
    again.fill(b"d" * 3)
    again.turn()
    assert sorted(map(id, again._buffers)) == sorted(map(id, made))
    assert again.used == 0 and bytes(again.filled()) == b""
    again.release(keep=False)
    fresh = uploads.Blocks(size)
    assert not any(fresh._buffers[0] is buffer for buffer in made)
    fresh.release(keep=True)


def test_uploads_one_after_another_in_kept_blocks_are_each_their_own_bytes(gcs_store):  # noqa: F811
    """The second shard goes into the blocks the first filled: none of the first's bytes
    (its longer tail) may show in the second."""
    fs = gcs_store.fs
    for name, size in [("long", 3 * BLOCK + 12_345), ("short", BLOCK + 5), ("tiny", 17)]:
        path = _path(gcs_store, name)
        pieces = pieces_of(size, seed=len(name), largest=90_000)
        _upload(fs, path, pieces).commit()
        fs.invalidate_cache()
        assert fs.cat_file(path) == b"".join(pieces), name
