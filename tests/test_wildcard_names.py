"""Output folders whose names hold `*`, `?` or `[`, on local disk and on real object-store servers.

fsspec's `rm` reads those characters as wildcards on an object store: `--overwrite` into
`s3://b/photos?v1` removed the earlier shards of `s3://b/photos_v1` too, and a build into
`s3://b/run[1]` was refused as not writable (its write probe, removed through a pattern that
matched nothing, stayed behind). `storage.remove` takes every path as it is.
"""

from __future__ import annotations

import fsspec
import pytest

# The fixtures are imported for pytest to find them; tests ask for them by name.
from cloud_servers import gcs_store, s3_store  # noqa: F401

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.cli import main
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.storage import remove

SMALL = {"min_shard_size": "10KB", "max_shard_size": "30KB"}


def _root(request, where: str, tmp_path) -> str:
    if where == "local":
        return str(tmp_path)
    store = request.getfixturevalue({"s3": "s3_store", "gs": "gcs_store"}[where])
    return store.new_bucket("names")


def _objects(fs, folder: str) -> set[str]:
    fs.invalidate_cache()
    return {p[len(folder) + 1 :] for p in fs.find(folder)}


@pytest.mark.parametrize("where", ["local", "s3", "gs"])
def test_remove_takes_each_path_as_it_is(request, tmp_path, where):
    fs, root = fsspec.core.url_to_fs(_root(request, where, tmp_path))
    names = ["photos_v1/a.bin", "photos?v1/a.bin", "photos?v1/sub/b.bin", "run[1]/c.bin",
             "run1/c.bin", "x*/d.bin", "xy/d.bin"]  # fmt: skip
    for name in names:
        fs.makedirs(f"{root}/{name.rsplit('/', 1)[0]}", exist_ok=True)  # local disks need it
        fs.pipe_file(f"{root}/{name}", b"kept")
    remove(fs, [f"{root}/photos?v1/a.bin", f"{root}/run[1]/c.bin"])
    remove(fs, f"{root}/x*", recursive=True)
    assert _objects(fs, root) == {
        "photos_v1/a.bin",
        "photos?v1/sub/b.bin",
        "run1/c.bin",
        "xy/d.bin",
    }
    remove(fs, f"{root}/photos?v1", recursive=True)
    assert _objects(fs, root) == {"photos_v1/a.bin", "run1/c.bin", "xy/d.bin"}


@pytest.mark.parametrize("where", ["local", "s3", "gs"])
def test_overwriting_a_folder_named_like_a_pattern_leaves_its_look_alike_whole(
    request, tmp_path, capsys, where
):
    root = _root(request, where, tmp_path)
    look_alike, pattern_named = f"{root}/photos_v1", f"{root}/photos?v1"
    for output in (look_alike, pattern_named):
        build(
            BuildConfig.from_settings({"input": ["samples/fruits"], "output": output, **SMALL}), []
        )
    fs, path = fsspec.core.url_to_fs(look_alike)
    before = _objects(fs, path)
    # Default shard sizes: fewer shards, so the earlier build's extra ones are removed.
    overwrite = {"input": ["samples/fruits"], "output": pattern_named, "overwrite": True}
    build(BuildConfig.from_settings(overwrite), [])
    assert _objects(fs, path) == before
    assert main(["verify", look_alike, pattern_named]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("where", ["local", "s3", "gs"])
def test_a_folder_named_with_brackets_is_built_into_and_verified(request, tmp_path, capsys, where):
    output = f"{_root(request, where, tmp_path)}/run[1]"
    build(BuildConfig.from_settings({"input": ["samples/fruits"], "output": output}), [])
    fs, path = fsspec.core.url_to_fs(output)
    assert not [name for name in _objects(fs, path) if ".write-probe" in name]
    assert main(["verify", output]) == 0, capsys.readouterr().out
    assert "3 OK, 0 DAMAGED" in capsys.readouterr().out
