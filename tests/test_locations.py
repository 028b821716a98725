"""Where a path points: one answer for every module, by URL or by filesystem."""

from __future__ import annotations

import fsspec
import pytest

from beam_tfrecord.locations import (
    has_protocol,
    is_gcsfs,
    is_local,
    is_local_url,
    is_memory_url,
    is_object_store,
    is_remote,
    is_store_url,
    protocol_problem,
    reached_alike,
    without_protocol,
)


@pytest.mark.parametrize(
    ("url", "local", "store", "alike"),
    [
        ("data/cats", True, False, True),
        ("/data/cats", True, False, True),
        ("file:///data/cats", True, False, True),
        ("memory://x", False, False, False),  # each process has its own memory
        ("gs://bucket/x", False, True, True),
        ("s3://bucket/x", False, True, True),
        ("az://container/x", False, True, False),  # its settings may not travel
    ],
)
def test_one_answer_by_url(url, local, store, alike):
    assert is_local_url(url) is local
    assert is_store_url(url) is store
    assert reached_alike(url) is alike


@pytest.mark.parametrize(
    ("url", "memory"),
    [
        ("memory://x", True),
        ("memory://", True),
        ("simplecache::memory://x", True),
        ("memory", False),  # a folder of that name
        ("out/memory:x", False),
        ("gs://memory/x", False),
    ],
)
def test_memory_is_told_by_url(url, memory):
    assert is_memory_url(url) is memory


def test_the_filesystem_and_the_url_agree():
    for url in ("data/cats", "memory://x"):
        fs, _ = fsspec.core.url_to_fs(url)
        assert is_local(fs) is is_local_url(url)
        assert is_object_store(fs) is is_store_url(url)


def test_protocols_are_named_and_taken_off():
    assert has_protocol("gs://b/x") and not has_protocol("/b/x") and not has_protocol("b:x")
    assert without_protocol("gs://b/x") == "b/x"
    assert without_protocol("b/x") == "b/x"


def test_only_an_async_store_is_remote():
    assert not is_remote("/data/x.jpg")
    assert not is_remote("memory://x.jpg")


def test_gcsfs_is_told_from_other_gs_filesystems():
    """Reads, uploads and listings use gcsfs's request parts only on gcsfs's own class."""
    import gcsfs

    gcs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
    assert is_gcsfs(gcs)

    class ElsewhereGCS(fsspec.AbstractFileSystem):  # a gs:// filesystem that is not gcsfs
        protocol = ("gs", "gcs")

        async def _call(self, *args, **kwargs):
            raise AssertionError("not gcsfs's")

    assert not is_gcsfs(ElsewhereGCS())
    assert not is_gcsfs(fsspec.filesystem("memory"))
    assert not is_gcsfs(fsspec.filesystem("file"))


def test_a_protocol_no_filesystem_here_opens_is_told_without_importing_it():
    assert protocol_problem("photos/cat.jpg") is None
    assert protocol_problem("gs://b/x") is None and protocol_problem("memory://x") is None
    assert protocol_problem("foo://bar") == (
        "no filesystem is known for foo:// (such as gs://, s3://, or a path)"
    )
    # adlfs is not installed here: fsspec knows the protocol, and what to install for it.
    assert protocol_problem("az://container/ds") == (
        "Install adlfs to access Azure Datalake Gen2 and Azure Blob Storage"
    )


@pytest.mark.parametrize(
    ("path", "meant"),
    [
        ("s3:/bucket/x", "s3://bucket/x"),
        ("s3//bucket/x", "s3://bucket/x"),
        ("gcs//bucket", "gcs://bucket"),
        ("http:/host/x", "http://host/x"),
        ("file:/tmp/x", None),  # a file URI
        ("C:/photos", None),  # a Windows path
        ("data//photos", None),  # a doubled slash in a folder's path
        ("photos/s3//x", None),
        ("gs:///bucket/x", None),  # a URL; fsspec judges the rest
    ],
)
def test_a_store_url_with_a_slash_or_colon_left_out_is_a_problem(path, meant):
    problem = protocol_problem(path)
    if meant is None:
        assert problem is None
    else:
        assert problem == (
            f"a mistyped URL, taken for a path on this disk; did you mean {meant!r}?"
        )
