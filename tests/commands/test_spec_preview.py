"""The spec and preview commands on a real build, and on hand-made shards that break the rules."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from imagegen import make_collection
from PIL import Image

from beam_tfrecord.cli import main
from beam_tfrecord.codec.example import BytesList, Int64List, decode_example, encode_example
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.codec.writer import open_writer
from beam_tfrecord.reader import Dataset

pytestmark = pytest.mark.slow


def _tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ.get("CI"):
        import tensorflow as tf  # in CI the test must run, never skip

        return tf
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """40 images in two classes, built by the real pipeline into shards of 20-60 KB."""
    from beam_tfrecord.beam.pipeline import build
    from beam_tfrecord.config import BuildConfig

    root = tmp_path_factory.mktemp("spec")
    src, out = root / "src", root / "out" / "pets"
    make_collection(src, {"cat": 20, "dog": 20}, seed=3)
    build(
        BuildConfig(
            inputs=(f"{src}/**",), output=str(out), min_shard_size="20KB", max_shard_size="60KB"
        ),
        [],
    )
    return out


def _all_records(out: Path) -> list[bytes]:
    manifest = json.loads((out / "manifest.json").read_text())
    return [data for shard in manifest["shards"] for data in read_records(str(out / shard["file"]))]


def _spec(capsys, *args: str) -> str:
    capsys.readouterr()
    assert main(["spec", *args]) == 0
    return capsys.readouterr().out


def _write_dataset(
    folder: Path, records: list[bytes], labels: str = "none", classes: tuple[str, ...] = ()
) -> Path:
    """A hand-made build: one train shard and a manifest saying how it was labelled."""
    folder.mkdir(parents=True)
    name = "odd-train.tfrecord-00000-of-00001"
    with open_writer(str(folder / name)) as writer:
        for record in records:
            writer.write(record)
    manifest = {
        "config": {"labels": labels},
        "classes": list(classes),
        "splits": {"train": {"examples": len(records), "shards": 1}},
        "shards": [{"file": name, "split": "train", "index": 0, "examples": len(records)}],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_the_printed_spec_parses_every_record_with_tensorflow(built, capsys):
    tf = _tensorflow()
    code = _spec(capsys, str(built))
    assert code.startswith("# The tf.io.parse_example feature spec of")
    assert "from manifest.json and all 40 records" in code
    namespace: dict = {}
    exec(code, namespace)
    spec = namespace["feature_spec"]
    assert set(spec) == {
        "image/encoded", "image/format", "image/height", "image/width", "image/channels",
        "image/class/label", "image/class/text", "image/filename", "image/key/sha256",
    }  # fmt: skip
    assert all(isinstance(f, tf.io.FixedLenFeature) and f.shape == [] for f in spec.values())
    records = _all_records(built)
    parsed = tf.io.parse_example(tf.constant(records), spec)
    for i, record in enumerate(records):
        expected = decode_example(record)
        for name, tensor in parsed.items():
            assert tensor[i].numpy() == expected[name][0], name
    classes = (built / "labels.txt").read_text().splitlines()
    labels, texts = parsed["image/class/label"].numpy(), parsed["image/class/text"].numpy()
    for label, text in zip(labels, texts, strict=True):
        assert classes[label] == text.decode()


def test_json_spec_for_scripts(built, capsys):
    description = json.loads(_spec(capsys, str(built), "--json", "--scan", "3"))
    assert description["manifest"] is True
    assert description["records"] == 40 and description["scanned"] == 3
    assert description["features"]["image/class/label"] == {
        "kind": "int64", "dtype": "int64", "parser": "FixedLenFeature", "shape": [],
    }  # fmt: skip
    assert description["features"]["image/encoded"]["dtype"] == "string"
    assert "first 3 of 40 records" in _spec(capsys, str(built), "--scan", "3")


def test_labels_none_and_lists_that_vary_give_var_len_features(tmp_path, capsys):
    base = {
        "image/encoded": b"\x89PNG", "image/format": "png", "image/height": 1,
        "image/width": 1, "image/channels": 3, "image/filename": "a.png",
        "image/key/sha256": "0" * 64,
    }  # fmt: skip
    records = [
        encode_example({**base, "boxes": [0.1, 0.2, 0.3, 0.4], "tags": ["a"], "pair": [1, 2]}),
        encode_example({**base, "boxes": [0.5, 0.6, 0.7, 0.8], "tags": ["b", "c"], "pair": [3, 4]}),
        encode_example({**base, "boxes": [0.1, 0.2, 0.3, 0.4], "pair": [5, 6], "empty": BytesList()}),
    ]  # fmt: skip
    out = _write_dataset(tmp_path / "odd", records, labels="none")
    description = json.loads(_spec(capsys, str(out), "--json"))
    features = description["features"]
    assert "image/class/label" not in features and "image/class/text" not in features
    assert features["boxes"] == {
        "kind": "float", "dtype": "float32", "parser": "FixedLenFeature", "shape": [4],
    }  # fmt: skip
    assert features["pair"]["shape"] == [2]
    assert features["tags"]["parser"] == "VarLenFeature", "absent from one record, 1 or 2 long"
    assert features["empty"]["parser"] == "VarLenFeature", "empty lists are not fixed"
    assert features["image/height"]["parser"] == "FixedLenFeature"
    code = _spec(capsys, str(out))
    assert '"tags": tf.io.VarLenFeature(tf.string),' in code
    assert '"boxes": tf.io.FixedLenFeature([4], tf.float32),' in code
    if os.environ.get("CI") or _has_tensorflow():
        tf = _tensorflow()
        namespace: dict = {}
        exec(code, namespace)
        parsed = tf.io.parse_example(tf.constant(records), namespace["feature_spec"])
        assert parsed["boxes"].shape == (3, 4)
        assert tf.sparse.to_dense(parsed["tags"]).numpy().tolist() == [
            [b"a", b""], [b"b", b"c"], [b"", b""]
        ]  # fmt: skip


def _has_tensorflow() -> bool:
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


def test_an_empty_build_takes_its_spec_from_the_manifest(tmp_path, capsys):
    out = _write_dataset(tmp_path / "empty", [], labels="dir")
    description = json.loads(_spec(capsys, str(out), "--json"))
    assert description["records"] == 0
    assert description["features"]["image/class/label"]["parser"] == "FixedLenFeature"
    assert len(description["features"]) == 9


def test_a_feature_of_two_kinds_is_refused_by_name(tmp_path, capsys):
    records = [encode_example({"x": [1]}), encode_example({"x": ["one"]})]
    out = _write_dataset(tmp_path / "mixed", records)
    assert main(["spec", str(out)]) == 1
    assert "feature 'x' holds bytes values, other records int64" in capsys.readouterr().err
    assert main(["spec", str(tmp_path / "nothing")]) == 1
    assert f"{tmp_path / 'nothing'}: no such folder" in capsys.readouterr().err


def _png(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


def test_preview_draws_a_captioned_contact_sheet(built, tmp_path, capsys):
    png = tmp_path / "grid.png"
    status = main(["preview", str(built), "-n", "10", "--columns", "4", "--size", "64",
                   "-o", str(png)])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    assert f"wrote {png}: 10 images of split 'train' (3 rows of 4" in capsys.readouterr().out
    pixels = _png(png)
    height, width, _ = pixels.shape
    assert width == 4 * 64, "columns x thumbnail size"
    assert height % 3 == 0 and 64 + 8 <= height // 3 <= 64 + 40, "3 rows of thumbnail + caption"
    cell = height // 3
    assert pixels.std() > 20, "not blank"
    # Each of the 10 thumbnails holds an image (the generated ones are noisy), the 2 cells
    # after them are empty, and every caption band holds dark text.
    for number in range(12):
        row, column = divmod(number, 4)
        thumb = pixels[row * cell : row * cell + 64, column * 64 : (column + 1) * 64]
        caption = pixels[row * cell + 64 : (row + 1) * cell, column * 64 : (column + 1) * 64]
        if number < 10:
            assert thumb.std() > 10, number
            assert caption.min() < 100, f"caption {number} has text"
        else:
            assert thumb.std() == 0 and caption.std() == 0, number


def test_preview_sample_is_seeded(built, tmp_path, capsys):
    pngs = [tmp_path / f"{name}.png" for name in ("a", "b", "c")]
    for png, seed in zip(pngs, ("1", "1", "2"), strict=True):
        assert main(["preview", str(built), "--seed", seed, "-n", "3",
                     "-o", str(png)]) == 0  # fmt: skip
    assert pngs[0].read_bytes() == pngs[1].read_bytes()
    assert _png(pngs[0]).shape == (_png(pngs[0]).shape[0], 3 * 128, 3)
    first = tmp_path / "first.png"
    assert main(["preview", str(built), "-n", "3", "-o", str(first)]) == 0
    assert len({p.read_bytes() for p in (*pngs, first)}) >= 2, "a sample is not always the head"


def test_preview_draws_a_placeholder_for_what_does_not_decode(built, tmp_path, capsys):
    good = next(read_records(str(next(built.glob("pets-test.tfrecord-*")))))
    fields = decode_example(good)
    truncated = encode_example({**fields, "image/encoded": [fields["image/encoded"][0][:200]]})
    wrong_shape = encode_example({**fields, "image/height": [5]})
    no_image = encode_example({"image/class/label": Int64List(value=[0])})
    records = [good, truncated, b"\x01\x02not an example", wrong_shape, no_image, good]
    out = _write_dataset(tmp_path / "bad", records, labels="dir", classes=("cat", "dog"))
    # Damage one record's payload: its CRC no longer matches, and reading goes on after it.
    shard = out / "odd-train.tfrecord-00000-of-00001"
    data = bytearray(shard.read_bytes())
    data[-30] ^= 0xFF
    shard.write_bytes(bytes(data))
    png = tmp_path / "bad.png"
    capsys.readouterr()
    assert main(["preview", str(out), "--columns", "3", "--size", "96", "-o", str(png)]) == 1
    captured = capsys.readouterr()
    assert "6 images" in captured.out
    assert "5 of 6 records could not be shown" in captured.err
    pixels = _png(png)
    assert pixels.shape[1] == 3 * 96 and pixels.shape[0] % 2 == 0
    assert len(Dataset(str(out), "train")) == 6


def test_preview_draws_raw_pixels(tmp_path, capsys):
    """A `--store raw` build's records hold pixels, not image files: every tile said "cannot
    decode", exit 1."""
    from beam_tfrecord.beam.pipeline import build
    from beam_tfrecord.config import BuildConfig

    src = tmp_path / "src"
    make_collection(src, {"cat": 6, "dog": 6}, seed=4)
    out = tmp_path / "raw"
    config = BuildConfig.from_settings(
        {"inputs": [f"{src}/**"], "output": str(out), "store": "raw", "resize": "24"}
    )
    build(config, [])
    sheet = tmp_path / "sheet.png"
    assert main(["preview", str(out), "-o", str(sheet)]) == 0, capsys.readouterr().err
    assert "could not be shown" not in capsys.readouterr().err
    assert Image.open(sheet).size[0] > 0
    # And inspect shows their shape as the record states it, not a hex dump of the pixels.
    shard = sorted(out.glob("*.tfrecord-*"))[0]
    assert main(["inspect", str(shard), "-n", "1"]) == 0
    shown = capsys.readouterr().out
    # Width by height, as an encoded image's size shows, then the array's shape.
    found = re.search(
        r"image/encoded +bytes +raw (\d+)x(\d+), 3 channels \((\d+)x(\d+)x3 array\), [\d.]+ KB",
        shown,
    )
    assert found and found.group(1, 2) == found.group(4, 3), shown
    assert "0x" not in shown
    # As JSON too: the shape beside the bytes, as a JPEG's header gives it.
    assert main(["inspect", str(shard), "-n", "1", "--json"]) == 0
    features = json.loads(capsys.readouterr().out)["features"]
    (encoded,) = features["image/encoded"]["values"]
    stated = {name: features[f"image/{name}"]["values"][0] for name in ("height", "width")}
    assert encoded["image"] == {"format": "raw", **stated, "channels": 3}


@pytest.mark.parametrize("text", ["{", "[]"])
@pytest.mark.parametrize("command", ["spec", "preview"])
def test_a_manifest_that_is_not_a_builds_is_named_in_one_line(
    built, tmp_path, capsys, command, text
):
    """Not a traceback, nor JSON's words alone: which file is wrong, and how."""
    import shutil

    out = tmp_path / "pets"
    shutil.copytree(built, out)
    (out / "manifest.json").write_text(text)
    args = [command, str(out)] + (
        ["-o", str(tmp_path / "grid.png")] if command == "preview" else []
    )
    assert main(args) != 0
    err = capsys.readouterr().err
    assert err.startswith(f"beam-tfrecord {command}: error: {out / 'manifest.json'}: not a build's")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "grid.png").exists()


def test_spec_and_preview_refuse_a_failed_builds_folder_unless_loose(tmp_path, capsys):
    """A build that failed keeps its finished shards and publishes no manifest: read by their
    names, they passed for a dataset (whole classes missing), exit status 0."""
    out = tmp_path / "out"
    classes = ["--classes", "apple,banan,cherry"]  # a typo: the build fails
    assert main(["build", "--input", "samples/fruits", "--output", str(out), *classes]) == 1
    assert not (out / "manifest.json").exists()
    sheet = str(tmp_path / "sheet.png")
    for args in (["spec", str(out)], ["preview", str(out), "-o", sheet]):
        capsys.readouterr()
        assert main(args) == 1
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(
            f"beam-tfrecord {args[0]}: error: {out}: a build that did not finish (no "
            "manifest.json beside its index/, reports/, report.jsonl and build-settings.json)"
        ), line
        assert "--loose" in line and "--resume" in line
        assert main([*args, "--loose"]) == 0
    assert "of split 'train'" in capsys.readouterr().out


def test_spec_and_preview_read_a_folder_of_shards_another_tool_wrote(built, tmp_path, capsys):
    """Shards without manifest.json, and without anything this tool writes on its way: found
    by their names, as docs/reading promises."""
    import shutil

    out = tmp_path / "pets"
    shutil.copytree(built, out)
    for name in ("manifest.json", "report.jsonl", "build-settings.json"):
        (out / name).unlink()
    for name in ("index", "reports"):
        shutil.rmtree(out / name)
    assert main(["spec", str(out)]) == 0
    assert main(["preview", str(out), "-o", str(tmp_path / "sheet.png")]) == 0
    assert "of split 'train'" in capsys.readouterr().out
    # A split its shards' names do not give is a bad value, as one its manifest lacks is.
    assert main(["preview", str(out), "--split", "tran", "-o", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord preview: error: --split: no split 'tran' in {out}; its shards' names "
        "give test, train, validation\n"
    )


def test_preview_without_a_split_shows_the_first_that_holds_records(tmp_path, capsys):
    """A build whose first split is empty (train=0) was refused for its empty split, with no
    word of the split that holds the images."""
    out = tmp_path / "out"
    flags = ["--splits", "train=0,validation=1"]
    assert main(["build", "--input", "samples/fruits", "--output", str(out), *flags]) == 0
    capsys.readouterr()
    assert main(["preview", str(out), "-o", str(tmp_path / "sheet.png")]) == 0
    assert "of split 'validation'" in capsys.readouterr().out
    # Asked for, the empty split is nothing to show: a failure, as a missing dataset is.
    assert main(["preview", str(out), "--split", "train", "-o", str(tmp_path / "x.png")]) == 1
    assert capsys.readouterr().err == (
        f"beam-tfrecord preview: error: split 'train' of {out} has no records\n"
    )


def test_a_url_no_filesystem_opens_is_a_usage_error_for_spec_and_preview(tmp_path, capsys):
    """As for every other command: exit 2, the URL named, nothing written."""
    assert main(["spec", "nosuch://x/y"]) == 2
    assert "nosuch://x/y: no filesystem is known for nosuch://" in capsys.readouterr().err
    out = tmp_path / "sheet.png"
    assert main(["preview", "nosuch://x/y", "-o", str(out)]) == 2
    assert "nosuch://x/y: no filesystem" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("name", ["sheet.gif", "sheet.txt", "my.sheet.bmp"])
def test_preview_refuses_a_file_name_whose_suffix_names_no_format_it_writes(
    built, tmp_path, capsys, name
):
    """PNG bytes under .gif would mislead every viewer: the name is refused before any work
    (a name with no suffix is a PNG: tests/commands/test_command_line.py)."""
    out = tmp_path / name
    assert main(["preview", str(built), "-o", str(out)]) == 2
    assert "name it .png, .jpg or .webp" in capsys.readouterr().err
    assert not out.exists()


def test_preview_refuses_to_write_its_sheet_into_memory(built, capsys):
    """`-o memory://sheet.png` said "wrote memory://sheet.png", exit status 0: a sheet in the
    command's own memory, gone as it ended."""
    import fsspec

    assert main(["preview", str(built), "-o", "memory://sheet.png"]) == 2
    assert capsys.readouterr().err == (
        "beam-tfrecord preview: error: -o memory://sheet.png: is in memory (fsspec's memory "
        "filesystem), gone when the command ends; name a file on disk or in a bucket\n"
    )
    assert not fsspec.filesystem("memory").exists("/sheet.png")


def test_feature_spec_scan_0_reads_every_record_as_the_command_does(built):
    from beam_tfrecord.feature_spec import feature_spec

    every = len(_all_records(built))
    assert feature_spec(str(built), 0)["scanned"] == every
    assert feature_spec(str(built), None)["scanned"] == every
    assert feature_spec(str(built), 3)["scanned"] == 3
    with pytest.raises(ValueError, match="got -1"):
        feature_spec(str(built), -1)


def test_an_image_pillow_cannot_open_is_named_without_a_stream_s_address():
    from beam_tfrecord.reader import decode_image

    with pytest.raises(ValueError) as raised:
        decode_image(b"not an image", 3, "jpeg")
    assert str(raised.value) == "cannot decode the 12-byte image: it is no jpeg Pillow can open"


@pytest.mark.parametrize(
    "command", [["verify", "{url}"], ["inspect", "{url}/a.tfrecord"], ["spec", "{url}"]]
)
def test_every_command_names_a_url_no_filesystem_opens_in_the_same_words(command, capsys):
    """`verify` and `inspect` let fsspec refuse the URL, where `spec` checks it first: the
    same line either way, naming the URL, not fsspec's bare 'Protocol not known: nosuch'."""
    argv = [part.format(url="nosuch://x/y") for part in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {argv[1]}: no filesystem is known for nosuch:// (such as gs://" in err, err
    assert "Protocol not known" not in err


def test_preview_help_says_which_split_it_shows_by_default(capsys):
    """It said "the manifest's first", and showed the first that holds records."""
    with pytest.raises(SystemExit):
        main(["preview", "--help"])
    assert "(default: the first that holds records;" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", ["inspect", "verify", "spec", "preview"])
def test_every_reading_command_states_its_exit_statuses(command, capsys):
    """One rule for all: 1 for data that is not there or not sound (a missing folder among
    them, tests/commands/test_command_line.py's test_22), 2 for a bad flag or value."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 when" in said
    assert "; 1 when" in said or "; 1 on" in said
    assert said.endswith("2 for a bad flag or value.") or "; 2 for a bad flag or value (" in said
    if command in ("spec", "preview"):
        assert "no such folder, a build that did not finish" in said


def test_the_preview_draws_a_class_name_beyond_ascii_where_the_system_has_a_font_for_it():
    """Pillow's own scalable font drew "élan" as "□lan" (found by a trial of the reading
    side): a system font with more than ASCII is taken first, where there is one."""
    from PIL import Image, ImageDraw, ImageFont

    from beam_tfrecord.commands import preview

    for name in ("DejaVuSans.ttf", "NotoSans-Regular.ttf", "LiberationSans-Regular.ttf"):
        try:
            ImageFont.truetype(name, 20)
            break
        except OSError:
            continue
    else:
        pytest.skip("no system font with more than ASCII here")
    font = preview._font(20)

    def drawn(text: str) -> bytes:
        image = Image.new("L", (40, 30))
        ImageDraw.Draw(image).text((2, 2), text, font=font, fill=255)
        return image.tobytes()

    assert drawn("é") != drawn("\uffff"), "é is drawn as the font's box for a missing glyph"
