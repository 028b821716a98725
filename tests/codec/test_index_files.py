"""Record index files: written beside each shard, in DALI's `offset length` format, and verified."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from imagegen import make_collection

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.cli import main
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.framing import framed_size
from beam_tfrecord.codec.reader import TFRecordReader, read_records
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.verification import verify_file

pytestmark = pytest.mark.slow


def _config(src: Path, out: Path, **overrides) -> BuildConfig:
    settings = {"min_shard_size": "20KB", "max_shard_size": "60KB", **overrides}
    return BuildConfig.from_settings(dict(inputs=(f"{src}/**",), output=str(out), **settings))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    make_collection(src, {"cat": 15, "dog": 15}, seed=3)
    out = tmp_path_factory.mktemp("build") / "pets"
    result = build(_config(src, out), [])
    return src, out, result.manifest


@pytest.fixture
def copy(built, tmp_path) -> Path:
    """A copy of the build, free to damage."""
    _, out, _ = built
    target = tmp_path / "pets"
    shutil.copytree(out, target)
    return target


def _index(path: Path) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in line.split(" ")) for line in path.read_text().splitlines()]


def test_each_shard_has_its_index_named_in_the_manifest(built):
    _, out, manifest = built
    assert len(manifest["shards"]) >= 4
    for shard in manifest["shards"]:
        assert shard["index_file"] == f"index/{shard['file']}.index"
    listed = sorted(p.relative_to(out).as_posix() for p in (out / "index").iterdir())
    assert listed == sorted(s["index_file"] for s in manifest["shards"]), "and nothing else"


def test_line_n_gives_the_offset_and_framed_length_of_record_n(built):
    _, out, manifest = built
    for shard in manifest["shards"]:
        path = out / shard["file"]
        lines = _index(out / shard["index_file"])
        records = list(read_records(str(path), with_offsets=True))
        assert len(lines) == len(records) == shard["examples"]
        assert lines[0][0] == 0 and sum(length for _, length in lines) == path.stat().st_size
        with open(path, "rb") as f:
            for (offset, length), (_, record) in zip(lines, records, strict=True):
                # Read from the line's offset alone, as DALI does: the header there must frame
                # a whole record (both CRCs checked) of the line's length, and be the n-th.
                f.seek(offset)
                framed = f.read(length)
                (found,) = list(TFRecordReader(_Stream(framed), "NONE"))
                assert framed_size(len(found)) == length
                assert found == record


class _Stream:
    """A read-only stream over bytes, without `seekable`, as a network stream would be."""

    def __init__(self, data: bytes):
        self._data, self._pos = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._pos + size
        chunk, self._pos = self._data[self._pos : end], min(end, len(self._data))
        return chunk


def test_verify_checks_every_index(built, capsys):
    _, out, manifest = built
    assert main(["verify", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    checked = [
        line
        for line in lines
        if line.startswith("OK") and line.endswith(", index checked, manifest checked")
    ]
    assert len(checked) == len(manifest["shards"])
    assert lines[-1].startswith(f"total: {len(manifest['shards'])} files,"), "indexes are no shards"


def test_verify_names_a_wrong_index_line(copy, built, capsys):
    _, _, manifest = built
    shard = manifest["shards"][0]
    index = copy / shard["index_file"]
    lines = index.read_text().splitlines()
    offset, length = lines[2].split(" ")
    lines[2] = f"{int(offset) + 1} {length}"
    index.write_text("\n".join(lines) + "\n")
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED  {copy / shard['file']}: {shard['examples']} records" in out
    payload = int(length) - framed_size(0)
    assert (
        f"{index}: line 3: lists {length} bytes framed at byte offset {int(offset) + 1}, but "
        f"record 2 is at byte offset {offset}, {length} bytes framed ({payload} bytes of payload)"
    ) in out
    assert out.count("DAMAGED  ") == 1 and "1 DAMAGED" in out
    # The record verify names is the one inspect shows under the same number, offset and size.
    assert main(["inspect", str(copy / shard["file"]), "-n", "3"]) == 0
    assert f"record 2, byte offset {offset}, {payload} bytes" in capsys.readouterr().out


def test_verify_reports_missing_extra_and_malformed_lines(copy, built):
    _, _, manifest = built
    shard = manifest["shards"][0]
    index = copy / shard["index_file"]
    lines = index.read_text().splitlines()
    n = len(lines)

    index.write_text("\n".join(lines[:-1]) + "\n")
    report = verify_file(str(copy / shard["file"]))
    assert report.index == str(index)
    assert report.errors == [f"{index}: has {n - 1} entries, but the file has {n} records"]

    index.write_text("\n".join([*lines, f"{10**9} 20"]) + "\n")
    report = verify_file(str(copy / shard["file"]))
    assert report.errors == [f"{index}: has {n + 1} entries, but the file has {n} records"]

    index.write_text("\n".join(["0,4283", *lines[1:]]) + "\n")
    report = verify_file(str(copy / shard["file"]))
    assert report.errors == [f"{index}: line 1: expected 'offset length', got '0,4283'"]


def test_a_bad_data_crc_is_not_blamed_on_the_index(copy, built):
    _, _, manifest = built
    shard = manifest["shards"][0]
    path = copy / shard["file"]
    (offset, length), (next_offset, _) = _index(copy / shard["index_file"])[1:3]
    data = bytearray(path.read_bytes())
    data[offset + length // 2] ^= 0x01  # inside record 1's payload: its frame stays whole
    path.write_bytes(bytes(data))
    report = verify_file(str(path))
    assert next_offset == offset + length
    assert report.errors == [
        f"{path}: corrupt record at byte offset {offset}: bad data CRC (payload at byte offset "
        f"{offset + 12}); it is record 1"
    ]


def test_resume_restores_the_index_of_a_kept_shard(built, copy):
    src, out, manifest = built
    first, second = manifest["shards"][:2]
    (copy / first["index_file"]).unlink()
    (copy / second["index_file"]).write_text("0 1\n")
    shard_mtime = (copy / first["file"]).stat().st_mtime_ns
    build(_config(src, copy, resume=True), [])
    assert (copy / first["file"]).stat().st_mtime_ns == shard_mtime, "the shard was kept"
    for shard in manifest["shards"]:
        assert (copy / shard["index_file"]).read_bytes() == (out / shard["index_file"]).read_bytes()
    assert not [p for p in (copy / "index").iterdir() if p.name.startswith(".")]


def test_overwrite_removes_the_indexes_of_stale_shards_only(built, copy):
    src, _, manifest = built
    index_dir = copy / "index"
    (index_dir / "notes.md").write_text("a user's file")
    (index_dir / f".{manifest['shards'][0]['file']}.index.tmp-0123abcd").write_text("0 1\n")
    rebuilt = build(_config(src, copy, max_shard_size="200KB", overwrite=True), []).manifest
    assert len(rebuilt["shards"]) < len(manifest["shards"])
    assert sorted(p.name for p in index_dir.iterdir()) == sorted(
        [*(Path(s["index_file"]).name for s in rebuilt["shards"]), "notes.md"]
    )
    assert main(["verify", str(copy)]) == 0


# The tfrecord package registers its own copy of tf.train.Example's messages in protobuf's default
# pool, which refuses them once TensorFlow (imported by other tests) has registered its own: its
# reader runs in a fresh interpreter.
_TFRECORD_READ = """
import json, sys
from tfrecord.reader import tfrecord_loader

shard, index = sys.argv[1:3]
names = []
for part in range(2):
    loader = tfrecord_loader(shard, index, {"image/filename": "byte"}, shard=(part, 2))
    names += [bytes(example["image/filename"]).decode() for example in loader]
print(json.dumps(names))
"""


def test_the_tfrecord_package_splits_shards_by_their_indexes(built):
    if importlib.util.find_spec("tfrecord") is None:
        if os.environ.get("CI"):
            pytest.fail("the tfrecord package is not installed")  # in CI it must run
        pytest.skip("the tfrecord package is not installed")
    _, out, manifest = built
    for shard in manifest["shards"]:
        path = out / shard["file"]
        ours = [decode_example(r)["image/filename"][0].decode() for r in read_records(str(path))]
        # Its reader takes a worker's share of a shard by index lines. (It cannot read an index
        # of a single line: np.loadtxt then returns one dimension. Every shard here has more.)
        assert shard["examples"] >= 2
        proc = subprocess.run(
            [sys.executable, "-c", _TFRECORD_READ, str(path), str(out / shard["index_file"])],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout) == ours


def test_verify_holds_shards_to_the_manifest(copy, built, capsys):
    _, _, manifest = built
    first, second = manifest["shards"][0], manifest["shards"][1]
    assert first["crc32c"] != second["crc32c"]
    # Each file stays a sound TFRecord file with its own sound index: only the manifest can tell.
    a, b = copy / first["file"], copy / second["file"]
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b), b.write_bytes(data_a)
    ia, ib = copy / first["index_file"], copy / second["index_file"]
    index_a, index_b = ia.read_text(), ib.read_text()
    ia.write_text(index_b), ib.write_text(index_a)
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert (
        f"{a}: CRC32C {second['crc32c']}, but manifest.json lists {first['crc32c']}: the bytes "
        "differ from what the build wrote"
    ) in out
    if first["examples"] != second["examples"]:
        assert f"{a}: {second['examples']} records, but manifest.json lists" in out
    assert "2 DAMAGED" in out


def test_verify_names_a_shard_the_manifest_lists_but_the_folder_lacks(copy, built, capsys):
    _, _, manifest = built
    gone = manifest["shards"][-1]
    (copy / gone["file"]).unlink()
    (copy / gone["index_file"]).unlink()
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert (
        f"MISSING  {copy / gone['file']}: manifest.json lists this shard, but it is not there"
        in out
    )
    assert out.splitlines()[-1].endswith("0 DAMAGED, 1 MISSING")
