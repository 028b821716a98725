"""The plain-Python reader on a real build: every record once, per split, per worker and per URL."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import fsspec
import numpy as np
import pytest
from imagegen import make_collection
from PIL import Image

from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.reader import Dataset, decode_image, list_shards, parse_record

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """40 images in two classes, built by the real pipeline into shards of 20-60 KB."""
    from beam_tfrecord.beam.pipeline import build
    from beam_tfrecord.config import BuildConfig

    root = tmp_path_factory.mktemp("reader")
    src, out = root / "src", root / "out" / "pets"
    sources = make_collection(src, {"cat": 20, "dog": 20}, seed=3)
    build(
        BuildConfig(
            inputs=(f"{src}/**",), output=str(out), min_shard_size="20KB", max_shard_size="60KB"
        ),
        [],
    )
    manifest = json.loads((out / "manifest.json").read_text())
    return out, sources, manifest


def _names(dataset) -> list[str]:
    return [record["image/filename"] for record in dataset]


def test_every_record_of_every_split_once(built):
    out, sources, manifest = built
    seen: Counter[str] = Counter()
    for split, info in manifest["splits"].items():
        names = _names(Dataset(str(out), split))
        assert len(names) == len(set(names)) == info["examples"], split
        seen.update(names)
    assert seen == Counter(sources.keys()), "the splits together hold every image exactly once"
    assert manifest["splits"]["train"]["shards"] >= 3, "the test needs several shards"


def test_len_matches_the_manifest(built):
    out, _, manifest = built
    for split, info in manifest["splits"].items():
        assert len(Dataset(str(out), split)) == info["examples"]


def test_records_are_plain_values_and_labels_match_folders(built):
    out, sources, _ = built
    dataset = Dataset(str(out), "train")
    assert dataset.classes == ["cat", "dog"]
    for record in dataset:
        name = record["image/filename"]
        assert record["image/class/text"] == name.split("/")[0]
        assert dataset.classes[record["image/class/label"]] == record["image/class/text"]
        assert record["image/encoded"] == sources[name], "the original bytes, untouched"
        assert record["image/format"] == "jpeg"
        assert isinstance(record["image/height"], int)
        assert record["image/channels"] == 3


def test_decode_gives_the_stated_shapes_and_the_source_pixels(built):
    out, _, manifest = built
    stated = {r["image/filename"]: r for r in Dataset(str(out), "train")}
    items = list(Dataset(str(out), "train", decode=True))
    assert len(items) == manifest["splits"]["train"]["examples"]
    for item in items:
        record = stated[item["filename"]]
        shape = (record["image/height"], record["image/width"], record["image/channels"])
        assert item["image"].shape == shape and item["image"].dtype == np.uint8
        assert item["image"].flags.writeable, "torch.from_numpy wants a writable array"
        assert item["label"] == record["image/class/label"]
        assert item["class_name"] == item["filename"].split("/")[0]
        source = Image.open(out.parent.parent / "src" / item["filename"]).convert("RGB")
        np.testing.assert_array_equal(item["image"], np.asarray(source))


@pytest.mark.parametrize("workers", [1, 2, 3, 5, 7, 16])
def test_workers_partition_the_split_exactly(built, workers):
    """Two workers by hand, as a DataLoader runs them; also more workers than shards."""
    out, _, manifest = built
    expected = _names(Dataset(str(out), "train"))
    parts = [_names(Dataset(str(out), "train").shard(i, workers)) for i in range(workers)]
    together = [name for part in parts for name in part]
    assert together == expected, "every record in exactly one worker, in the split's order"
    lengths = [len(Dataset(str(out), "train").shard(i, workers)) for i in range(workers)]
    assert lengths == [len(part) for part in parts]
    assert max(lengths) - min(lengths) <= 1, "no worker waits for another with more to read"
    assert manifest["splits"]["train"]["shards"] >= 3, "the test needs several shards"


def _hand_built(
    folder: Path, counts: list[int], manifest: bool = True, indexes: str | None = "index"
) -> list[str]:
    """Shards of `counts` records (each an Example naming itself), with a manifest and record
    indexes (`index`: in index/ as a build writes them; `beside`: {shard}.index; None: none).
    Returns the records' names in the split's order."""
    from beam_tfrecord.codec.example import encode_example
    from beam_tfrecord.codec.framing import framed_size
    from beam_tfrecord.codec.writer import open_writer

    folder.mkdir(parents=True)
    (folder / "index").mkdir(exist_ok=indexes != "index")
    names, shards = [], []
    for number, examples in enumerate(counts):
        file = f"hand-train.tfrecord-{number:05d}-of-{len(counts):05d}"
        lines, offset = [], 0
        with open_writer(str(folder / file)) as writer:
            for record in range(examples):
                names.append(f"{number}/{record}")
                data = encode_example({"image/filename": names[-1]})
                writer.write(data)
                lines.append(f"{offset} {framed_size(len(data))}\n")
                offset += framed_size(len(data))
        index = {"index": folder / "index" / f"{file}.index", "beside": folder / f"{file}.index"}
        if indexes is not None:
            index[indexes].write_text("".join(lines))
        shards.append({"file": file, "split": "train", "index": number, "examples": examples})
    if indexes != "index":
        (folder / "index").rmdir()
    if manifest:
        splits = {"train": {"examples": sum(counts), "shards": len(counts)}}
        (folder / "manifest.json").write_text(json.dumps({"splits": splits, "shards": shards}))
    return names


@pytest.mark.parametrize(
    ("counts", "readers"),
    [
        ([10 + i % 2 for i in range(24)], 16),  # 8 readers read twice what the 8 others did
        ([11, 11, 11], 3),
        ([9, 15, 9], 2),
        ([40, 3, 1], 5),  # more readers than shards
        ([2, 1], 6),  # more readers than records
    ],
)
@pytest.mark.parametrize(
    "layout", ["manifest", "no manifest, indexes beside", "unfinished, read loosely"]
)
def test_parts_are_within_one_record_of_each_other(tmp_path, counts, readers, layout):
    """Each part's len() is what it yields, the parts differ by one record at most, and
    together they are the split, each record once, in its order."""
    folder = tmp_path / "hand"
    names = _hand_built(
        folder,
        counts,
        manifest=layout == "manifest",
        indexes="beside" if "beside" in layout else "index",
    )
    dataset = Dataset(folder, "train", loose=layout.endswith("loosely"))
    parts = [dataset.shard(index, readers) for index in range(readers)]
    read = [_names(part) for part in parts]
    assert [len(part) for part in parts] == [len(names) for names in read]
    assert max(map(len, read)) - min(map(len, read)) <= 1, list(map(len, read))
    assert [name for part in read for name in part] == names


def test_without_counts_parts_are_whole_shards_still_each_record_once(tmp_path):
    """No manifest.json and no record index: nothing says where a part would end within a
    shard, and the parts differ by up to a shard (docs/reading/pytorch.md says so)."""
    folder = tmp_path / "hand"
    names = _hand_built(folder, [5, 1, 5], manifest=False, indexes=None)
    parts = [Dataset(folder, "train").shard(index, 2) for index in range(2)]
    assert [len(part) for part in parts] == [10, 1]
    assert sorted(name for part in parts for name in _names(part)) == sorted(names)


def test_a_part_that_starts_within_a_shard_seeks_to_its_first_record(tmp_path):
    """By the shard's record index: a reader reads none of the records before its own (a
    damaged one among them goes unseen), and a wrong index only costs reading from the start."""
    from beam_tfrecord.codec.framing import CorruptRecordError

    folder = tmp_path / "hand"
    names = _hand_built(folder, [6])
    shard = folder / "hand-train.tfrecord-00000-of-00001"
    data = bytearray(shard.read_bytes())
    data[14] ^= 0xFF  # in record 0's payload: its data CRC no longer holds
    shard.write_bytes(bytes(data))
    second = Dataset(folder, "train").shard(1, 2)
    assert _names(second) == names[3:]
    with pytest.raises(CorruptRecordError, match="byte offset 0: bad data CRC"):
        _names(Dataset(folder, "train").shard(0, 2))
    index = folder / "index" / "hand-train.tfrecord-00000-of-00001.index"
    index.write_text("".join(f"{n} 1\n" for n in range(1, 7)))  # places no record right
    with pytest.raises(CorruptRecordError, match="byte offset 0: bad data CRC"):
        _names(Dataset(folder, "train").shard(1, 2))
    shard.write_bytes(bytes(data[:14]) + bytes([data[14] ^ 0xFF]) + bytes(data[15:]))
    assert _names(Dataset(folder, "train").shard(1, 2)) == names[3:]


def test_parts_compose_per_machine_then_per_worker(built):
    out, _, _ = built
    whole = Counter(_names(Dataset(str(out), "train")))
    for machines, workers in [(2, 2), (2, 3), (3, 4)]:
        together: Counter[str] = Counter()
        for machine in range(machines):
            machine_part = Dataset(str(out), "train").shard(machine, machines)
            own = Counter(_names(machine_part))
            split_again = Counter()
            for worker in range(workers):
                split_again.update(_names(machine_part.shard(worker, workers)))
            assert split_again == own, "a part split again is that part, exactly"
            together.update(own)
        assert together == whole


def test_torch_worker_info_is_used_when_torch_is_loaded(built, monkeypatch):
    """A stand-in for torch.utils.data: the reader asks sys.modules, never imports torch."""
    out, _, _ = built
    expected = [_names(Dataset(str(out), "train").shard(i, 2)) for i in range(2)]
    for worker in range(2):
        info = types.SimpleNamespace(id=worker, num_workers=2, seed=0, dataset=None)
        fake = types.ModuleType("torch.utils.data")
        fake.get_worker_info = lambda info=info: info
        monkeypatch.setitem(sys.modules, "torch.utils.data", fake)
        dataset = Dataset(str(out), "train")
        assert _names(dataset) == expected[worker]
        assert len(dataset) == len(expected[worker])
    monkeypatch.delitem(sys.modules, "torch.utils.data")
    whole = _names(Dataset(str(out), "train"))
    assert Counter(whole) == Counter(expected[0] + expected[1]), "outside a worker: everything"


class _Pets:
    """The wrapper of docs/reading/pytorch.md, with torch.utils.data.IterableDataset replaced by object."""

    def __init__(self, out, split):
        self.records = Dataset(str(out), split, decode=True, shuffle_shards=True, seed=1)

    def __iter__(self):
        for item in self.records:
            yield item["image"].mean(), item["label"]

    def __len__(self):
        return len(self.records)


def test_a_wrapper_class_sees_the_protocol_a_dataloader_uses(built, monkeypatch):
    """As a DataLoader uses it: pickled to each worker, which iterates its own part."""
    out, _, manifest = built
    pets = _Pets(out, "train")
    total = len(pets)  # in the main process, which has no worker info
    assert total == manifest["splits"]["train"]["examples"]
    per_worker = []
    for worker in range(2):
        info = types.SimpleNamespace(id=worker, num_workers=2)
        fake = types.ModuleType("torch.utils.data")
        fake.get_worker_info = lambda info=info: info
        monkeypatch.setitem(sys.modules, "torch.utils.data", fake)
        copy = pickle.loads(pickle.dumps(pets))  # as a DataLoader sends it to a worker
        per_worker.append(list(copy))
        assert len(copy) == len(per_worker[-1]), "in a worker, len() is that worker's share"
    assert sum(map(len, per_worker)) == total
    labels = Counter(label for part in per_worker for _, label in part)
    assert labels == Counter(
        {0: manifest["splits"]["train"]["class_counts"].get("cat", 0),
         1: manifest["splits"]["train"]["class_counts"].get("dog", 0)}
    )  # fmt: skip


def test_shuffled_shard_order_is_seeded_and_still_exact(built):
    out, _, _ = built

    def order(seed, epoch=0):
        dataset = Dataset(str(out), "train", shuffle_shards=True, seed=seed)
        dataset.set_epoch(epoch)
        return _names(dataset)

    plain = _names(Dataset(str(out), "train"))
    assert order(3) == order(3), "the same seed, the same order"
    orders = {tuple(order(seed, epoch)) for seed in range(4) for epoch in range(3)}
    assert len(orders) > 1, "seeds and epochs change the shard order"
    assert all(Counter(o) == Counter(plain) for o in orders)
    for workers in (2, 3):
        dataset = Dataset(str(out), "train", shuffle_shards=True, seed=5)
        parts = [_names(dataset.shard(i, workers)) for i in range(workers)]
        assert Counter(n for part in parts for n in part) == Counter(plain)


def _as_another_tool_writes_it(copy: Path) -> None:
    """A build's folder left as a folder of shards from elsewhere: no manifest, and none of what
    this tool writes on its way (index/, reports/, report.jsonl, build-settings.json)."""
    (copy / "manifest.json").unlink()
    shutil.rmtree(copy / "index")
    shutil.rmtree(copy / "reports")
    (copy / "report.jsonl").unlink()
    (copy / "build-settings.json").unlink()


def test_without_a_manifest_shards_are_found_by_name(built, tmp_path):
    out, _, manifest = built
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    _as_another_tool_writes_it(copy)
    (copy / ".pets-train.tfrecord-00000-of-00009.tmp-x").write_bytes(b"temporary: ignored")
    for split, info in manifest["splits"].items():
        dataset = Dataset(str(copy), split)
        assert dataset.manifest is None and dataset.classes == ["cat", "dog"]
        assert _names(dataset) == _names(Dataset(str(out), split))
        assert len(dataset) == info["examples"], "counted by reading"
    assert len(list_shards(str(copy))) == len(manifest["shards"])
    missing = sorted(copy.glob("pets-train.tfrecord-*"))[1]
    missing.unlink()
    with pytest.raises(FileNotFoundError, match=missing.name):
        Dataset(str(copy), "train")
    with pytest.raises(FileNotFoundError, match="no shards of split 'nope'"):
        Dataset(str(copy), "nope")


@pytest.fixture(scope="module")
def failed(built, tmp_path_factory):
    """A build that failed (a --classes typo): its finished shards are there, its manifest not."""
    from beam_tfrecord.beam.pipeline import build
    from beam_tfrecord.config import BuildConfig
    from beam_tfrecord.manifest import BuildFailed

    out = tmp_path_factory.mktemp("failed") / "pets"
    source = built[0].parent.parent / "src"
    config = BuildConfig(
        inputs=(f"{source}/**",), output=str(out), classes=("cat", "dgo"),
        min_shard_size="20KB", max_shard_size="60KB",
    )  # fmt: skip
    with pytest.raises(BuildFailed, match="nothing was published"):
        build(config, [])
    assert not (out / "manifest.json").exists() and list(out.glob("pets-train.tfrecord-*"))
    return out


def test_a_failed_builds_folder_is_refused_by_every_reader(failed):
    """Its shards hold one class of two: read by name, it passed for a dataset without a word."""
    from beam_tfrecord.feature_spec import feature_spec

    said = (
        rf"^{failed}: a build that did not finish \(no manifest\.json beside its index/, "
        r"reports/, report\.jsonl and build-settings\.json\): it failed, was stopped, or is "
        r"still running"
    )
    for read in (
        lambda: Dataset(failed, "train"),
        lambda: Dataset(str(failed), None, decode=True),
        lambda: list_shards(failed),
        lambda: list_shards(str(failed), "test"),
        lambda: feature_spec(str(failed)),
    ):
        with pytest.raises(FileNotFoundError, match=said) as refused:
            read()
        assert f"beam-tfrecord verify {failed}" in str(refused.value)
        assert "--resume" in str(refused.value) and "loose=True" in str(refused.value)


def test_a_failed_builds_folder_is_read_when_asked_to_loosely(failed):
    dataset = Dataset(failed, "train", loose=True)
    assert dataset.manifest is None
    names = _names(dataset)
    assert len(names) == len(dataset) > 0
    assert {name.split("/")[0] for name in names} == {"cat"}, "the build left 'dog' out"
    assert [s.url for s in list_shards(failed, loose=True)] == sorted(
        str(p) for p in failed.glob("pets-*.tfrecord-*")
    )
    from beam_tfrecord.feature_spec import feature_spec

    assert feature_spec(str(failed), loose=True)["scanned"] > 0


def test_a_failed_builds_copy_in_a_store_is_refused_too(failed):
    """On an object store its index/ and reports/ are prefixes, listed as folders."""
    memory = fsspec.filesystem("memory")
    for path in failed.rglob("*"):
        if path.is_file():
            memory.pipe(f"/failed-copy/{path.relative_to(failed).as_posix()}", path.read_bytes())
    try:
        with pytest.raises(FileNotFoundError, match="a build that did not finish"):
            Dataset("memory://failed-copy", "train")
        assert len(Dataset("memory://failed-copy", "train", loose=True)) > 0
    finally:
        memory.rm("/failed-copy", recursive=True)


@pytest.mark.parametrize(
    "trace", ["index", "reports", "report.jsonl", "build-settings.json", ".beam-tfrecord.lock"]
)
def test_any_one_trace_of_a_build_makes_a_folder_without_manifest_unfinished(
    built, tmp_path, trace
):
    """A build in progress publishes a shard's report lines before the shard, and a local one
    holds its lock: a reader polling its folder is refused from the first shard on."""
    out, _, manifest = built
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    _as_another_tool_writes_it(copy)
    assert len(Dataset(copy, "train")) == manifest["splits"]["train"]["examples"]
    if "." in trace:
        (copy / trace).write_text("")
    else:
        (copy / trace).mkdir()
        (copy / trace / "pets-train.tfrecord-00000-of-00001.x").write_text("")
    with pytest.raises(FileNotFoundError, match=f"no manifest.json beside its {trace}"):
        Dataset(copy, "train")
    assert len(Dataset(copy, "train", loose=True)) == manifest["splits"]["train"]["examples"]
    (copy / "manifest.json").write_text((out / "manifest.json").read_text())
    assert len(Dataset(copy, "train")) == manifest["splits"]["train"]["examples"], "finished"


def test_reads_any_fsspec_url(built):
    out, _, _ = built
    memory = fsspec.filesystem("memory")
    for path in out.rglob("*"):
        if path.is_file():
            memory.pipe(f"/pets-copy/{path.relative_to(out).as_posix()}", path.read_bytes())
    try:
        dataset = Dataset("memory://pets-copy", "validation", decode=True)
        assert [i["filename"] for i in dataset] == _names(Dataset(str(out), "validation"))
        assert all(s.url.startswith("memory://pets-copy/") for s in dataset.shards)
    finally:
        memory.rm("/pets-copy", recursive=True)


def test_an_unknown_split_is_named(built):
    out, _, _ = built
    with pytest.raises(ValueError, match=r"no split 'tran'.*train, validation, test"):
        Dataset(str(out), "tran")
    with pytest.raises(ValueError, match=r"range\(2\)"):
        Dataset(str(out)).shard(2, 2)


def test_parse_record_and_decode_image_alone(built):
    out, _, _ = built
    record = parse_record(next(read_records(list_shards(str(out), "test")[0].url)))
    gray = decode_image(record["image/encoded"], 1)
    assert gray.shape == (record["image/height"], record["image/width"], 1)
    with pytest.raises(ValueError, match="cannot decode the 10-byte image"):
        decode_image(b"\xff\xd8\xff" + b"\0" * 7)
    with pytest.raises(ValueError, match=r"not a tf\.train\.Example"):
        parse_record(b"\x0a\x05garbage")


def test_reading_imports_neither_beam_nor_tensorflow_nor_torch(built):
    out, _, _ = built
    code = (
        "import sys; from beam_tfrecord.reader import Dataset; "
        f"n = sum(1 for _ in Dataset({str(out)!r}, 'train', decode=True)); "
        "print(n, sorted({m.split('.')[0] for m in sys.modules} & "
        "{'apache_beam', 'tensorflow', 'torch'}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert proc.stdout.split(" ", 1)[1].strip() == "[]", proc.stdout


def test_an_empty_source_is_said_to_name_no_folder():
    """It read as `: no manifest.json and no shards of split 'train'`, naming nothing."""
    from beam_tfrecord.feature_spec import feature_spec

    for read in (lambda: Dataset(""), lambda: list_shards("", "train"), lambda: feature_spec("")):
        with pytest.raises(ValueError, match=r"^no dataset folder given \(the source is an empty"):
            read()


def test_a_file_given_for_a_build_folder_is_named_as_such(tmp_path):
    given = tmp_path / "notes.txt"
    given.write_text("not a build")
    with pytest.raises(NotADirectoryError, match=r"notes\.txt: a file, not a build folder$"):
        Dataset(str(given))


def test_raw_pixels_are_read_as_the_array_they_are():
    """`--store raw` records hold the pixels row by row (`image/format` raw): decode=True and
    preview handed them to Pillow, which cannot read them."""
    pixels = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    image = decode_image(pixels.tobytes(), 4, "raw", (2, 3))
    assert np.array_equal(image, pixels) and image.flags.writeable
    with pytest.raises(ValueError, match="holds 24 bytes, not 2x4x4"):
        decode_image(pixels.tobytes(), 4, "raw", (2, 4))
    with pytest.raises(ValueError, match="height and width"):
        decode_image(pixels.tobytes(), 4, "raw")


@pytest.mark.parametrize("text", ["{", "[]", '{"shards": {}}'])
def test_a_manifest_that_is_not_a_builds_is_refused_by_name(built, tmp_path, text):
    out = tmp_path / "copy"
    shutil.copytree(built[0], out)
    (out / "manifest.json").write_text(text)
    with pytest.raises(ValueError, match=rf"^{out / 'manifest.json'}: not a build's manifest: "):
        Dataset(str(out))
    with pytest.raises(ValueError, match="not a build's manifest"):
        list_shards(str(out))


@pytest.mark.parametrize("cut", ["emptied", "at a record's end"])
def test_a_shard_with_records_missing_is_an_error_not_a_short_pass(built, tmp_path, cut):
    """A shard cut at a record's end (or emptied) has whole framing: only the manifest's count
    shows the records it lost. The reader, `spec` and `preview` say so, naming the shard."""
    from beam_tfrecord.codec.record_index import index_file_name
    from beam_tfrecord.feature_spec import feature_spec
    from beam_tfrecord.reader import MissingRecordsError

    out, _, manifest = built
    copy = tmp_path / "pets"
    shutil.copytree(out, copy)
    entry = next(s for s in manifest["shards"] if s["split"] == "train" and s["examples"] > 1)
    shard = copy / entry["file"]
    if cut == "emptied":
        shard.write_bytes(b"")
        left = 0
    else:  # at the start of its last record, as its index gives it
        index = (copy / index_file_name(entry["file"])).read_text().split()
        with open(shard, "r+b") as f:
            f.truncate(int(index[-2]))
        left = entry["examples"] - 1
    dataset = Dataset(copy, "train")
    with pytest.raises(MissingRecordsError) as raised:
        sum(1 for _ in dataset)
    assert (raised.value.url, raised.value.found, raised.value.written) == (
        str(shard),
        left,
        entry["examples"],
    )
    with pytest.raises(MissingRecordsError):
        feature_spec(str(copy), None)
    preview = subprocess.run(
        [sys.executable, "-m", "beam_tfrecord.cli", "preview", str(copy), "-o",
         str(tmp_path / "sheet.png"), "--split", "train", "-n", "100"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert preview.returncode == 1, preview.stderr
    assert "could not be shown" in preview.stderr


def test_without_a_manifest_a_pass_is_held_to_the_record_index_as_a_split_one_is(built, tmp_path):
    """Without manifest.json a shard cut at a record's end was read short without a word by
    one reader, and refused when the folder was split among readers (a DataLoader with
    workers): only the split was held to the shards' record indexes (found by a trial)."""
    from beam_tfrecord.codec.record_index import index_file_name
    from beam_tfrecord.reader import MissingRecordsError

    out, _, manifest = built
    copy = tmp_path / "pets"
    shutil.copytree(out, copy)
    (copy / "manifest.json").unlink()
    entry = next(s for s in manifest["shards"] if s["split"] == "train" and s["examples"] > 1)
    index = (copy / index_file_name(entry["file"])).read_text().split()
    with open(copy / entry["file"], "r+b") as f:
        f.truncate(int(index[-2]))  # at the start of its last record
    for dataset in (
        Dataset(copy, "train", loose=True),
        Dataset(copy, "train", loose=True).shard(0, 1),
    ):
        with pytest.raises(MissingRecordsError) as raised:
            sum(1 for _ in dataset)
        assert (raised.value.found, raised.value.written) == (
            entry["examples"] - 1,
            entry["examples"],
        )


def test_a_path_object_is_the_path_it_names(built):
    out, _, manifest = built
    as_text = Dataset(str(out), "train")
    as_path = Dataset(out, "train")
    assert as_path.source == str(out)
    assert _names(as_path) == _names(as_text)
    assert list_shards(out) == list_shards(str(out))
    first = manifest["shards"][0]["file"]
    assert list(read_records(out / first)) == list(read_records(str(out / first)))


def test_a_shard_the_manifest_lists_and_the_folder_lacks_is_named_as_such(built, tmp_path):
    out, _, manifest = built
    copy = tmp_path / "pets"
    shutil.copytree(out, copy)
    entry = next(s for s in manifest["shards"] if s["split"] == "train")
    (copy / entry["file"]).unlink()
    with pytest.raises(FileNotFoundError) as raised:
        sum(1 for _ in Dataset(copy, "train"))
    assert str(raised.value).startswith(
        f"{copy / entry['file']}: no such file, where manifest.json lists a shard of "
    )


def test_a_bool_is_no_reader_number_and_repr_shows_the_shard_order(built):
    out, _, _ = built
    dataset = Dataset(str(out), "train", shuffle_shards=True, seed=4)
    with pytest.raises(ValueError, match=r"index must be an int in range\(2\), got True"):
        dataset.shard(True, 2)
    with pytest.raises(ValueError, match=r"index must be an int in range\(2\), got '0'"):
        dataset.shard("0", 2)
    with pytest.raises(ValueError, match="got False"):
        dataset.shard(0, False)
    assert repr(dataset.shard(1, 2)) == (
        f"Dataset({str(out)!r}, 'train', decode=False, shuffle_shards=True, seed=4).shard(1, 2)"
    )


def test_decoding_records_of_another_layout_names_the_feature_they_lack(tmp_path):
    """decode=True over another tool's records (no image/height...) said only
    `record of None: 'image/height'`: a KeyError's text, not what is missing nor why."""
    _hand_built(tmp_path / "hand", [2], manifest=False, indexes=None)
    records = Dataset(str(tmp_path / "hand"), "train", decode=True)
    with pytest.raises(ValueError) as refused:
        next(iter(records))
    assert str(refused.value) == (
        f"{records.shards[0].url}: record of '0/0' has no image/encoded feature: decode=True "
        "reads the records this tool writes (image/encoded, image/height, image/width, "
        "image/channels); decode=False gives any record's features"
    )


def test_a_folder_of_shards_named_otherwise_is_said_to_hold_none_by_that_naming(tmp_path):
    """Shards another tool named `train-00000-of-00002` (tensorflow/models' ImageNet) were
    refused as `no manifest.json and no shards of split 'train'`, as if the folder held none,
    and every split's read as `... of split None`."""
    from beam_tfrecord.codec.example import encode_example
    from beam_tfrecord.codec.writer import open_writer

    for name in ("train-00000-of-00002", "train-00001-of-00002.tfrecord"):
        with open_writer(str(tmp_path / name)) as writer:
            writer.write(encode_example({"image/filename": name}))
    naming = (
        "shards are found by the names TensorFlow Datasets gives them, "
        "{name}-{split}.tfrecord-00000-of-00004 (2 other files here)"
    )
    for read, what in [
        (lambda: Dataset(tmp_path, "train"), "shards of split 'train'"),
        (lambda: Dataset(tmp_path, None), "shards"),
        (lambda: list_shards(tmp_path, "train"), "shards of split 'train'"),
    ]:
        with pytest.raises(FileNotFoundError) as refused:
            read()
        assert str(refused.value) == f"{tmp_path}: no manifest.json and no {what}: {naming}"


def test_a_folder_of_shards_without_indexes_is_read_with_a_look_or_two_for_them(
    built, tmp_path, monkeypatch
):
    """Every pass is held to the shards' record indexes where they all have one: a folder of
    another tool's shards, with none, is looked at for one once or twice a pass, not for each
    of its shards, and a binary file named as an index is none (found in review)."""
    import beam_tfrecord.reader as reader

    out, _, manifest = built
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    _as_another_tool_writes_it(copy)
    shards = sorted(copy.glob("pets-train.tfrecord-*"))
    (copy / f"{shards[0].name}.index").write_bytes(b"\xff\xfe binary")
    looked: list[str] = []
    real = reader._index_lines

    def counted(url, *args):
        looked.append(url)
        return real(url, *args)

    monkeypatch.setattr(reader, "_index_lines", counted)
    dataset = Dataset(str(copy), "train")
    assert sum(1 for _ in dataset) == manifest["splits"]["train"]["examples"]
    assert len(set(looked)) == 1 < len(shards)
