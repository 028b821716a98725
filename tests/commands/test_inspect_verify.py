"""Tests for `beam-tfrecord inspect` and `beam-tfrecord verify`, through the real command line."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest
from PIL import Image

from beam_tfrecord.cli import main
from beam_tfrecord.codec.example import BytesList, encode_example
from beam_tfrecord.codec.framing import ChecksummedReader
from beam_tfrecord.codec.writer import open_writer
from beam_tfrecord.verification import FileReport, expand_paths, verify_file

_REPO = Path(__file__).resolve().parents[2]


def _jpeg(width: int = 32, height: int = 24) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (255, 128, 0)).save(buffer, "JPEG")
    return buffer.getvalue()


def _write(path: Path, records: list[bytes], compression: str = "auto") -> str:
    with open_writer(str(path), compression) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def _flip(path: Path, index: int) -> None:
    data = bytearray(path.read_bytes())
    data[index] ^= 0x01
    path.write_bytes(bytes(data))


JPEG = _jpeg()
RECORDS = [
    encode_example(
        {
            "image/encoded": JPEG,
            "label": 3,
            "name": "苹果",
            "score": [0.9876, math.nan],
            "long_list": list(range(25)),
            "blob": bytes(range(40)),
            "prose": "word " * 30,
            "none": BytesList(),
        }
    ),
    encode_example({"only": 1}),
    b"not an example \x00\xff",
]


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    """A directory as a build leaves it: shards plus files that are not shards."""
    directory = tmp_path / "out"
    (directory / "train").mkdir(parents=True)
    _write(directory / "train" / "train-00000-of-00002.tfrecord", RECORDS[:2])
    _write(directory / "train" / "train-00001-of-00002.tfrecord.gz", RECORDS[:1])
    (directory / "manifest.json").write_text("{}")
    (directory / "labels.txt").write_text("orange\n")
    (directory / "report.jsonl").write_text("")
    (directory / "train" / ".train-00002-of-00002.tfrecord.tmp-abc").write_bytes(b"partial")
    (directory / "_SUCCESS").write_bytes(b"")
    (directory / ".cache").mkdir()
    (directory / ".cache" / "x.tfrecord").write_bytes(b"garbage")
    return directory


# --- inspect ------------------------------------------------------------------------------


def test_inspect_shows_records_as_people_read_them(tmp_path, capsys):
    url = _write(tmp_path / "mixed.tfrecord", RECORDS)
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == url
    assert lines[1] == f"  record 0, byte offset 0, {len(RECORDS[0])} bytes"
    names = [line.split()[0] for line in lines[2:10]]
    assert (
        names
        == sorted(names)
        == [
            "blob",
            "image/encoded",
            "label",
            "long_list",
            "name",
            "none",
            "prose",
            "score",
        ]
    )
    assert f"image/encoded  bytes  jpeg 32x24, {len(JPEG)} bytes\n" in out
    assert "label          int64  3\n" in out
    assert 'name           bytes  "苹果"\n' in out
    assert "score          float  [0.9876, nan]\n" in out
    assert "long_list      int64  [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (25 values)]\n" in out
    assert "blob           bytes  0x000102030405060708090a0b0c0d0e0f... (40 bytes)\n" in out
    assert '"word word word' in out and "... (150 bytes)" in out
    assert "none           bytes  []\n" in out
    assert "  record 1, byte offset" in out and "    only  int64  1\n" in out
    assert 'not a tf.train.Example: "not an example \\u0000' not in out  # binary shown as hex
    assert "not a tf.train.Example: 0x6e6f7420616e206578616d706c6520" in out


def test_inspect_shows_an_images_sha256_whole(tmp_path, capsys):
    """A build's image/key/sha256 is 64 hex characters: it was cut at 60, with "(64 bytes)"."""
    digest = hashlib.sha256(b"an image").hexdigest()
    path = _write(tmp_path / "a.tfrecord", [encode_example({"image/key/sha256": digest})])
    assert main(["inspect", path]) == 0
    assert f'image/key/sha256  bytes  "{digest}"\n' in capsys.readouterr().out


def test_inspect_limits_records_per_file(tmp_path, capsys):
    url = _write(tmp_path / "mixed.tfrecord", RECORDS)
    assert main(["inspect", "-n", "1", url]) == 0
    out = capsys.readouterr().out
    assert "record 0," in out and "record 1," not in out
    assert "more records" in out
    assert main(["inspect", "-n", "0", url]) == 0
    out = capsys.readouterr().out
    assert "record 2," in out and "more records" not in out


def test_inspect_json_is_one_object_per_line(tmp_path, capsys):
    url = _write(tmp_path / "mixed.tfrecord.gz", RECORDS)
    assert main(["inspect", "--json", url]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["file"], line["index"]) for line in lines] == [(url, 0), (url, 1), (url, 2)]
    second = len(RECORDS[0]) + 16
    assert [line["offset"] for line in lines] == [0, second, second + len(RECORDS[1]) + 16]
    features = lines[0]["features"]
    assert features["label"] == {"kind": "int64", "values": [3]}
    assert features["name"] == {"kind": "bytes", "values": ["苹果"]}
    assert features["score"]["values"][1] == "NaN"
    assert features["score"]["values"][0] == pytest.approx(0.9876, rel=1e-7)
    assert features["long_list"]["values"] == list(range(25))  # in full, for scripts
    assert features["none"] == {"kind": "bytes", "values": []}
    (image,) = features["image/encoded"]["values"]
    assert image["image"] == {"format": "jpeg", "width": 32, "height": 24}
    assert image["base64"].startswith("/9j/")
    assert features["blob"]["values"] == [
        {"base64": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJw=="}
    ]
    assert lines[2]["features"] is None
    assert lines[2]["raw"] == {"base64": "bm90IGFuIGV4YW1wbGUgAP8="}


def test_inspect_missing_file_is_an_error_naming_it(tmp_path, capsys):
    missing = str(tmp_path / "nope.tfrecord")
    assert main(["inspect", missing]) == 1
    assert f"error: {missing}: no such file or directory" in capsys.readouterr().err


def test_inspect_of_an_empty_file_says_it_holds_no_records(tmp_path, capsys):
    """It printed the file's name alone, which reads as if something went unsaid."""
    empty = tmp_path / "ds-train.tfrecord-00000-of-00001"
    empty.write_bytes(b"")
    assert main(["inspect", str(empty)]) == 0
    assert capsys.readouterr().out == f"{empty}\n  no records (an empty file)\n"


def test_inspect_names_damage_with_its_offset(tmp_path, capsys):
    path = tmp_path / "bad.tfrecord"
    _write(path, [b"a" * 10, b"b" * 20])
    _flip(path, 26 + 12)
    assert main(["inspect", str(path)]) == 1
    captured = capsys.readouterr()
    assert "record 0, byte offset 0" in captured.out
    assert f"{path}: corrupt record at byte offset 26: bad data CRC" in captured.err


def test_inspect_takes_globs(shards, capsys):
    assert main(["inspect", "-n", "1", str(shards / "train" / "*.tfrecord*")]) == 0
    captured = capsys.readouterr()
    files = [line for line in captured.out.splitlines() if not line.startswith(" ")]
    # As in a shell, * skips the hidden temporary shard next to them.
    assert files == [
        str(shards / "train" / "train-00000-of-00002.tfrecord"),
        str(shards / "train" / "train-00001-of-00002.tfrecord.gz"),
    ]
    assert captured.err == ""


def test_image_summary_survives_bad_bytes(tmp_path, capsys):
    # A JPEG whose header is cut, PNG magic alone, and text that merely starts like a BMP.
    records = [encode_example({"a": JPEG[:20], "b": b"\x89PNG\r\n\x1a\n", "c": "BMW"})]
    url = _write(tmp_path / "odd.tfrecord", records)
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert "a  bytes  jpeg (unreadable header), 20 bytes" in out
    assert "b  bytes  png (unreadable header), 8 bytes" in out
    assert 'c  bytes  "BMW"' in out


# --- verify -------------------------------------------------------------------------------


def test_verify_file_reports(tmp_path):
    url = _write(tmp_path / "good.tfrecord.zz", RECORDS[:2])
    assert verify_file(url) == FileReport(
        path=url, records=2, bytes=(tmp_path / "good.tfrecord.zz").stat().st_size, errors=[]
    )
    raw = _write(tmp_path / "raw.tfrecord", [b"\x00raw"] * 3)
    report = verify_file(raw)
    assert not report.ok and report.records == 3
    assert report.errors[0] == f"{raw}: record at byte offset 0 is not a tf.train.Example"
    assert verify_file(raw, examples=False).ok


def test_verify_file_checksums_the_file_in_its_one_pass(tmp_path, monkeypatch):
    """The whole file's CRC32C comes from the pass that reads the records; a file that framing
    damage ends early (not a TFRecord file at all) is not read to its end for it."""
    good = _write(tmp_path / "good.tfrecord", RECORDS[:2])
    bad_crc = tmp_path / "bad-crc.tfrecord"
    shutil.copy(good, bad_crc)
    _flip(bad_crc, 20)  # the first record's payload: the frame stays whole, reading goes on
    video = tmp_path / "clip.mp4"
    video.write_bytes(os.urandom(4 << 20))
    reads: list[int] = []
    real_read = ChecksummedReader.read

    def counted(self, size=-1):
        data = real_read(self, size)
        reads.append(len(data))
        return data

    monkeypatch.setattr(ChecksummedReader, "read", counted)
    for path in (Path(good), bad_crc):
        assert verify_file(str(path)).crc32c == f"{crc32c.crc32c(path.read_bytes()):08x}"
    reads.clear()
    report = verify_file(str(video))
    assert not report.ok and report.crc32c is None
    assert sum(reads) < 1 << 20, "read the rest of a file that is not a TFRecord file"


def test_verify_file_keeps_going_past_a_bad_data_crc(tmp_path):
    path = tmp_path / "bad.tfrecord"
    _write(path, [encode_example({"i": i}) for i in range(4)])
    _flip(path, 12)
    _flip(path, path.stat().st_size - 1)
    report = verify_file(str(path))
    assert report.records == 2
    assert [error.split(": ", 2)[1] for error in report.errors] == [
        "corrupt record at byte offset 0",
        f"corrupt record at byte offset {3 * (path.stat().st_size // 4)}",
    ]


def test_verify_ok_and_damaged(tmp_path, capsys):
    good = _write(tmp_path / "good.tfrecord", RECORDS[:2])
    assert main(["verify", good]) == 0
    out = capsys.readouterr().out
    assert f"OK       {good}: 2 records, " in out
    assert out.splitlines()[-1].startswith("total: 1 file, 2 records,")

    bad = tmp_path / "bad.tfrecord"
    _write(bad, RECORDS[:2])
    (bad).write_bytes(bad.read_bytes()[:-3])
    assert main(["verify", good, str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED  {bad}: 1 record, " in out
    assert f"{bad}: corrupt record at byte offset {len(RECORDS[0]) + 16}: truncated" in out
    assert "1 OK, 1 DAMAGED" in out


def test_verify_a_directory_skips_hidden_and_sidecar_files(shards, capsys):
    assert main(["verify", str(shards)]) == 0
    out = capsys.readouterr().out
    checked = [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("OK")]
    assert checked == [
        str(shards / "train" / "train-00000-of-00002.tfrecord"),
        str(shards / "train" / "train-00001-of-00002.tfrecord.gz"),
    ]
    assert "total: 2 files, 3 records" in out


def test_expand_paths(shards):
    files, unmatched = expand_paths(
        [str(shards / "manifest.json"), str(shards / "train" / "*-00001-*"), str(shards / "nope*")]
    )
    # A file named outright is checked whatever its name; only directory walks filter.
    assert files == [
        str(shards / "manifest.json"),
        str(shards / "train" / "train-00001-of-00002.tfrecord.gz"),
    ]
    assert unmatched == [str(shards / "nope*")]
    hidden, _ = expand_paths([str(shards / "train" / ".train-*")])
    assert hidden == [str(shards / "train" / ".train-00002-of-00002.tfrecord.tmp-abc")]
    # A file named twice, outright or through its folder, is one file to read.
    shard = str(shards / "train" / "train-00000-of-00002.tfrecord")
    twice, _ = expand_paths([shard, str(shards / "train"), shard])
    assert twice == [shard, str(shards / "train" / "train-00001-of-00002.tfrecord.gz")]


def test_verify_fails_when_a_path_matches_nothing(tmp_path, capsys):
    good = _write(tmp_path / "good.tfrecord", RECORDS[:1])
    assert main(["verify", good, str(tmp_path / "missing")]) == 1
    captured = capsys.readouterr()
    assert f"error: {tmp_path / 'missing'}: no such file or directory" in captured.err
    assert "1 matched nothing" in captured.out


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_folder_of_images_is_said_in_one_line_not_damaged_file_by_file(command, capsys):
    """`verify samples/fruits` called each of its 46 images DAMAGED ("not a TFRecord file?"),
    where spec and preview said in one line that the folder holds no shards."""
    fruits = _REPO / "samples" / "fruits"
    assert main([command, str(fruits)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"beam-tfrecord {command}: error: {fruits}: a folder of images (46 files), not of "
        f"TFRecord files; `beam-tfrecord build --input {fruits} --output OUT` makes shards of them"
    ]
    assert "DAMAGED  " not in captured.out and "not a TFRecord file?" not in captured.out


def test_a_folder_of_other_files_is_one_line_and_a_record_file_among_them_is_checked(
    tmp_path, capsys
):
    folder = tmp_path / "mixed"
    (folder / "cat").mkdir(parents=True)
    (folder / "cat" / "a.jpg").write_bytes(JPEG)
    (folder / "weights.bin").write_bytes(bytes(range(40)))
    assert main(["verify", str(folder)]) == 1
    assert capsys.readouterr().err == (
        f"beam-tfrecord verify: error: {folder}: a folder with no TFRecord files below it "
        "(2 files, none one; 1 of them images)\n"
    )
    shard = _write(folder / "data.tfrecord", RECORDS[:2])
    assert main(["verify", str(folder)]) == 1, "the other files are checked, and damaged"
    captured = capsys.readouterr()
    assert captured.err == ""
    assert f"OK       {shard}: 2 records" in captured.out
    assert f"DAMAGED  {folder / 'weights.bin'}: 0 records" in captured.out


def test_verify_raw_and_explicit_compression(tmp_path, capsys):
    url = _write(tmp_path / "raw.bin", [b"\x00raw", b""], "GZIP")
    assert main(["verify", "--compression", "gzip", url]) == 1
    assert "--raw" in capsys.readouterr().out
    assert main(["verify", "--raw", "--compression", "GZIP", url]) == 0


def test_verify_an_fsspec_url(capsys):
    url = "memory://beam-tfrecord-verify/shard.tfrecord"
    with open_writer(url) as writer:
        writer.write(RECORDS[1])
    assert main(["verify", "memory://beam-tfrecord-verify/"]) == 0
    # fsspec spells the memory filesystem's root with a third slash.
    assert "OK       memory:///beam-tfrecord-verify/shard.tfrecord: 1 record, " in (
        capsys.readouterr().out
    )


# --- real processes -----------------------------------------------------------------------


def _cli() -> list[str]:
    """The installed console script when there is one, else the module."""
    script = Path(sys.executable).with_name("beam-tfrecord")
    if script.exists():
        return [str(script)]
    if os.environ.get("CI"):
        pytest.fail(f"no beam-tfrecord console script next to {sys.executable}")
    return [sys.executable, "-m", "beam_tfrecord.cli"]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=_REPO)


def test_subprocess_module_inspect_json(tmp_path):
    url = _write(tmp_path / "x.tfrecord", RECORDS)
    result = _run([sys.executable, "-m", "beam_tfrecord.cli", "inspect", "--json", url])
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2]


def test_subprocess_console_script_verify(shards):
    damaged = shards / "train" / "train-00000-of-00002.tfrecord"
    assert _run([*_cli(), "verify", str(shards)]).returncode == 0
    _flip(damaged, 12)
    result = _run([*_cli(), "verify", str(shards)])
    assert result.returncode == 1
    assert f"{damaged}: corrupt record at byte offset 0: bad data CRC" in result.stdout
    missing = _run([*_cli(), "inspect", str(shards / "missing.tfrecord")])
    assert missing.returncode == 1
    assert "missing.tfrecord: no such file or directory" in missing.stderr


# --- a build's folder, held to its manifest -----------------------------------------------


@pytest.fixture(scope="module")
def build_folder(tmp_path_factory) -> tuple[Path, dict]:
    """A real build's output folder (several train shards, each with its index) and manifest."""
    from imagegen import make_collection

    from beam_tfrecord.beam.pipeline import build
    from beam_tfrecord.config import BuildConfig

    src = tmp_path_factory.mktemp("src")
    make_collection(src, {"cat": 12, "dog": 12}, seed=5)
    out = tmp_path_factory.mktemp("build") / "pets"
    settings = {"min_shard_size": "20KB", "max_shard_size": "60KB"}
    config = BuildConfig.from_settings(dict(inputs=(f"{src}/**",), output=str(out), **settings))
    return out, build(config, []).manifest


@pytest.fixture
def build_copy(build_folder, tmp_path) -> tuple[Path, dict]:
    """A copy of the build folder, free to change."""
    out, manifest = build_folder
    shutil.copytree(out, tmp_path / "pets")
    return tmp_path / "pets", manifest


def _train_shards(manifest: dict) -> list[dict]:
    shards = [s for s in manifest["shards"] if s["split"] == "train"]
    assert len(shards) >= 2, "the build must cut train into several shards"
    return shards


@pytest.mark.slow
def test_verify_a_build_folder_skips_files_that_are_not_the_builds(build_copy):
    out, manifest = build_copy
    preview = _run([*_cli(), "preview", str(out), "-o", str(out / "preview.png")])
    assert preview.returncode == 0, preview.stderr
    (out / "extra.bin").write_bytes(b"not a record")
    (out / "notes").mkdir()
    (out / "notes" / "old.tfrecord").write_bytes(b"garbage")
    # Named like a sidecar, but not the build's: counted too (it was skipped unsaid).
    (out / "notes.txt").write_text("the user's own")

    result = _run([*_cli(), "verify", str(out)])
    assert result.returncode == 0, result.stdout
    assert "preview.png" not in result.stdout and "extra.bin" not in result.stdout
    checked = [line.split()[1].rstrip(":") for line in result.stdout.splitlines()[:-1]]
    assert checked == sorted(str(out / s["file"]) for s in manifest["shards"])
    assert result.stdout.splitlines()[-1].startswith(f"total: {len(manifest['shards'])} files, ")
    assert result.stdout.splitlines()[-1].endswith(
        " 0 DAMAGED; 4 other files not checked (not the build's)"
    )

    # Without a manifest the folder is no finished build: every file is checked, as before.
    (out / "manifest.json").unlink()
    loose = _run([*_cli(), "verify", "--loose", str(out)])
    assert loose.returncode == 1
    assert f"DAMAGED  {out / 'extra.bin'}: 0 records" in loose.stdout
    assert f"DAMAGED  {out / 'preview.png'}: 0 records" in loose.stdout
    assert "not checked" not in loose.stdout


def test_inspect_a_build_folder_shows_the_builds_files_only(build_copy):
    out, manifest = build_copy
    (out / "extra.bin").write_bytes(b"not a record")
    result = _run([*_cli(), "inspect", "-n", "1", str(out)])
    assert result.returncode == 0, result.stderr
    shown = [line for line in result.stdout.splitlines() if line.startswith(str(out))]
    assert shown == sorted(str(out / s["file"]) for s in manifest["shards"])
    assert "extra.bin" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_build_folder_named_file_by_file_as_a_shell_expands_out_star(build_copy):
    """`verify out/*` hands verify the build's manifest, labels, report, TFDS files and its
    index and reports folders as well as the shards: none of them is a TFRecord file, and none
    may be called DAMAGED, or a matched-nothing error, for what the build wrote itself."""
    out, manifest = build_copy
    (out / "notes.txt").write_text("a user's own file, named on purpose")
    star = sorted(str(p) for p in out.iterdir() if p.name != "notes.txt")
    own = [p for p in star if not any(p.endswith(s["file"]) for s in manifest["shards"])]
    assert {Path(p).name for p in own} >= {"manifest.json", "labels.txt", "index", "reports"}

    result = _run([*_cli(), "verify", *star])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    checked = [line.split()[1].rstrip(":") for line in result.stdout.splitlines()[:-1]]
    assert checked == sorted(str(out / s["file"]) for s in manifest["shards"])
    assert result.stdout.splitlines()[-1].endswith(
        f" 0 DAMAGED; not checked: {len(own)} of the build's own files, not TFRecord files "
        f"({', '.join(Path(p).name for p in own[:4])} and {len(own) - 4} more)"
    )
    # The files in its index and reports folders, named one by one, are the build's too: none
    # is called damaged, but with nothing else named nothing was checked, which is no pass.
    inner = sorted(str(p) for p in (out / "index").iterdir())
    alone = _run([*_cli(), "verify", str(out / "manifest.json"), *inner])
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert alone.stdout.splitlines()[-1].startswith("total: 0 files, 0 records, 0 bytes")
    assert "DAMAGED  " not in alone.stdout
    assert alone.stderr.startswith("beam-tfrecord verify: error: nothing to check: ")

    shown = _run([*_cli(), "inspect", "-n", "1", *star])
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.startswith(f"beam-tfrecord inspect: skipped {len(own)} of the build's own")
    assert "error" not in shown.stderr

    # A file the build did not write is taken as given, whatever its name.
    user = _run([*_cli(), "verify", *star, str(out / "notes.txt")])
    assert user.returncode == 1
    assert f"DAMAGED  {out / 'notes.txt'}: 0 records" in user.stdout


@pytest.mark.slow
def test_verify_fails_a_shard_named_file_the_manifest_does_not_list(build_copy, capsys):
    out, manifest = build_copy
    first = _train_shards(manifest)[0]["file"]
    count = len(_train_shards(manifest))
    # A copy under the name of a shard of a one-shard-larger build: a glob over the split's
    # shards (`*-train.tfrecord-*`, as the README reads them) takes its records twice.
    stray = out / first.replace(f"-of-{count:05d}", f"-of-{count + 1:05d}")
    shutil.copyfile(out / first, stray)
    message = (
        f"{stray}: not in manifest.json, but named like a shard: a reader globbing the build's "
        "shards would read it too"
    )

    result = _run([*_cli(), "verify", str(out)])
    assert result.returncode == 1
    # Its records are sound: not damage, but not the build's either.
    assert f"STRAY    {stray}: {_train_shards(manifest)[0]['examples']} records" in result.stdout
    assert f"{message}; remove it" in result.stdout
    assert "DAMAGED  " not in result.stdout
    assert result.stdout.splitlines()[-1].endswith(" OK, 0 DAMAGED, 1 STRAY")

    # A stray whose records are damaged too is DAMAGED, with both findings.
    data = bytearray(stray.read_bytes())
    data[-1] ^= 0xFF
    stray.write_bytes(bytes(data))
    damaged = _run([*_cli(), "verify", str(out)])
    assert damaged.returncode == 1
    assert f"DAMAGED  {stray}" in damaged.stdout and message in damaged.stdout
    assert damaged.stdout.splitlines()[-1].endswith(" OK, 1 DAMAGED")

    # Named by a glob, or outright, it fails the same; the listed shards stay sound.
    assert main(["verify", str(out / "*-train.tfrecord-*")]) == 1
    assert message in capsys.readouterr().out
    assert main(["verify", str(stray)]) == 1
    assert message in capsys.readouterr().out
    assert main(["verify", str(out / first)]) == 0
    capsys.readouterr()

    # A listed shard renamed is no stray to remove: removing it would lose the shard.
    stray.unlink()
    (out / first).rename(stray)
    assert main(["verify", str(out)]) == 1
    shown = capsys.readouterr().out
    assert (
        f"{message}; it holds what manifest.json lists for {first}, which is missing: rename "
        "it back"
    ) in shown
    assert f"MISSING  {out / first}" in shown


@pytest.mark.slow
def test_a_build_folder_whose_every_shard_is_damaged_at_its_start_names_each(build_copy, capsys):
    """Its manifest says they are shards: not a folder of something else."""
    out, manifest = build_copy
    for shard in manifest["shards"]:
        path = out / shard["file"]
        path.write_bytes(bytes(12) + path.read_bytes()[12:])
    assert main(["verify", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.count("DAMAGED  ") == len(manifest["shards"])


@pytest.mark.slow
def test_verify_reports_a_missing_index_the_manifest_names(build_copy, capsys):
    out, manifest = build_copy
    shard = _train_shards(manifest)[1]
    (out / shard["index_file"]).unlink()

    result = _run([*_cli(), "verify", str(out)])
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    damaged = lines.index(
        f"DAMAGED  {out / shard['file']}: {shard['examples']} records, "
        f"{shard['bytes']} bytes, manifest compared"  # not "checked": it did not hold
    )
    assert lines[damaged + 1] == (
        f"         {out / shard['index_file']}: missing: manifest.json names it as this "
        "shard's record index (DALI needs it)"
    )
    assert result.stdout.count("DAMAGED  ") == 1 and " 1 DAMAGED" in result.stdout

    # Alone, the shard is still held to its manifest, index included.
    assert main(["verify", str(out / shard["file"])]) == 1
    assert f"{out / shard['index_file']}: missing" in capsys.readouterr().out


@pytest.mark.slow
def test_verify_a_folder_of_builds_holds_each_to_its_own_manifest(build_copy, capsys):
    out, manifest = build_copy
    datasets = out.parent
    (out / "preview.png").write_bytes(b"\x89PNG not the build's")
    (datasets / "README.txt").write_text("sidecars stay skipped\n")
    loose = _write(datasets / "loose.tfrecord", RECORDS[:2])  # no build's: checked as before

    assert main(["verify", str(datasets)]) == 0
    out_text = capsys.readouterr().out
    assert "preview.png" not in out_text
    assert f"OK       {loose}: 2 records, " in out_text
    assert f"total: {len(manifest['shards']) + 1} files, " in out_text
    assert out_text.rstrip().endswith("; 1 other file not checked (not the build's)")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "not valid JSON (Expecting property name enclosed in double quotes"),
        ("", "not valid JSON (Expecting value"),
        ("[]", "a JSON list, not an object"),
        ("{}", 'no list of "shards"'),
        ('{"shards": [1]}', 'a shard of its "shards" names no file'),
    ],
)
def test_verify_fails_a_build_folder_whose_manifest_is_not_a_builds(build_copy, capsys, text, why):
    """A manifest.json that cannot be read as a build's holds its shards to nothing: verify
    checks them on their own and says so, and fails, as it fails a folder without one; with
    --loose the files alone count."""
    out, manifest = build_copy
    (out / "manifest.json").write_text(text)
    assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    path = out / "manifest.json"
    assert f"DAMAGED  {path}: not a build's manifest: {why}" in printed
    assert "the shards beside it were checked on their own" in printed
    shards = len(manifest["shards"])
    assert printed.splitlines()[-1].startswith(f"total: {shards} files, ")
    assert f"{shards} OK, 0 DAMAGED, 1 manifest DAMAGED" in printed.splitlines()[-1]

    assert main(["verify", "--loose", str(out)]) == 0
    assert "manifest DAMAGED" not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["verify", "inspect"])
@pytest.mark.parametrize("name", ["labels.txt", "report.jsonl", "index"])
def test_a_path_that_names_only_the_builds_own_files_checks_nothing_and_fails(
    build_copy, capsys, command, name
):
    """`verify out/labels.txt && publish` must not pass: nothing was checked."""
    out, _ = build_copy
    assert main([command, str(out / name)]) == 1
    err = capsys.readouterr().err
    what = "nothing to check" if command == "verify" else "nothing to show"
    assert f"beam-tfrecord {command}: error: {what}: the build's own {name}" in err


def _record_offsets(path: Path) -> list[int]:
    data, offsets, at = path.read_bytes(), [], 0
    while at < len(data):
        offsets.append(at)
        at += 16 + int.from_bytes(data[at : at + 8], "little")
    return offsets


@pytest.mark.parametrize(
    ("damage", "record", "index_says"),
    [
        # a payload byte flipped: its record is skipped, the records after it still read
        ("payload", 2, None),
        # a length's CRC wrong, or the file cut mid-record: nothing past it can be read
        ("length", 2, "has {n} entries; the file's framing is damaged at record 2"),
        ("cut", 3, "has {n} entries; the file's framing is damaged at record 3"),
    ],
)
def test_verify_names_the_damaged_record_and_the_index_entries_past_it(
    build_copy, capsys, damage, record, index_says
):
    out, manifest = build_copy
    shard = _train_shards(manifest)[0]
    path = out / shard["file"]
    at = _record_offsets(path)[record]
    if damage == "payload":
        _flip(path, at + 12 + 5)
    elif damage == "length":
        _flip(path, at + 9)
    else:
        path.write_bytes(path.read_bytes()[: at + 100])
    assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"{path}: corrupt record at byte offset {at}: " in printed
    assert f"; it is record {record}\n" in printed
    index = f"{out}/{shard['index_file']}: "
    if index_says is None:
        assert index not in printed
    else:
        assert index + index_says.format(n=shard["examples"]) in printed
