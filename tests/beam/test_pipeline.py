"""The whole build through the real DirectRunner, on generated images with small shard bounds."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import shutil
import zlib
from collections import Counter
from pathlib import Path

import apache_beam as beam
import crc32c
import pytest
from apache_beam.testing.util import assert_that, equal_to
from imagegen import make_collection

from beam_tfrecord.batches import EntryBatch
from beam_tfrecord.beam.pipeline import ConvertImages, build
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.reader import read_records
from beam_tfrecord.config import BuildConfig, ConfigError
from beam_tfrecord.splits import assign_split
from beam_tfrecord.spool import Held

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "fruits"

pytestmark = pytest.mark.slow

CLASSES = {"cat": 30, "dog": 25, "fox": 20}
MIN, MAX = 40_000, 120_000  # leaves room for a whole record either side of the ~80 KB average
SHARD_RE = re.compile(r"^(?P<name>.+)-(?P<split>[a-z]+)\.tfrecord-(?P<i>\d{5})-of-(?P<n>\d{5})$")
MULTI_PROCESS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _config(src: Path, out: Path, **overrides) -> BuildConfig:
    settings = {
        "inputs": (f"{src}/**",),
        "output": str(out),
        "min_shard_size": MIN,
        "max_shard_size": MAX,
        "seed": 7,
    }
    settings.update(overrides)
    return BuildConfig.from_settings(dict(**settings))


def _read_output(out: Path) -> dict[str, list[dict]]:
    """Every record of every shard, per shard file name, decoded."""
    shards = {}
    for path in sorted(out.iterdir()):
        if SHARD_RE.match(path.name):
            shards[path.name] = [decode_example(r) for r in read_records(str(path))]
    return shards


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if SHARD_RE.match(p.name)}


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    images = make_collection(src, CLASSES, seed=1)
    # Inputs a build must account for without writing them.
    (src / "dog" / "broken.jpg").write_bytes(images["dog/dog_0000.jpg"][:300])
    (src / "loose.jpg").write_bytes(images["cat/cat_0000.jpg"])  # its label would be the src folder
    (src / "cat" / ".hidden.jpg").write_bytes(images["cat/cat_0001.jpg"])
    (src / ".thumbs").mkdir()
    (src / ".thumbs" / "t.jpg").write_bytes(images["cat/cat_0002.jpg"])
    (src / "cat" / "notes.txt").write_text("not an image")
    return src, images


@pytest.fixture(scope="module")
def built(collection, tmp_path_factory):
    src, images = collection
    out = tmp_path_factory.mktemp("out") / "pets"
    config = _config(src, out, labels="regex:^(cat|dog|fox)/")
    result = build(config, ["--runner=DirectRunner"])
    return config, out, result, images


def test_every_input_written_once_with_its_bytes_and_label_or_reported(built):
    config, out, result, images = built
    shards = _read_output(out)
    seen = Counter()
    for name, records in shards.items():
        split = SHARD_RE.match(name)["split"]
        for features in records:
            relpath = features["image/filename"][0].decode()
            seen[relpath] += 1
            assert features["image/encoded"][0] == images[relpath], relpath
            assert features["image/class/text"][0].decode() == relpath.split("/")[0]
            assert assign_split(relpath, config.splits, config.seed) == split
            assert (
                features["image/key/sha256"][0].decode()
                == hashlib.sha256(images[relpath]).hexdigest()
            )
            assert features["image/format"] == [b"jpeg"]
            assert features["image/channels"] == [3]
    assert set(seen) == set(images), "every good image is written"
    assert set(seen.values()) == {1}, "and written exactly once"

    report = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    skipped = {r["relpath"]: r["reason"] for r in report if r["action"] == "skipped"}
    assert skipped == {"dog/broken.jpg": "truncated", "loose.jpg": "no_label"}
    assert all(r["message"] for r in report)
    # Hidden files and folders and non-image suffixes are not inputs at all.
    manifest = result.manifest
    assert manifest["inputs"]["listed"] == len(images) + 2
    assert manifest["inputs"]["written"] == len(images)
    assert manifest["inputs"]["skipped"] == 2
    assert manifest["inputs"]["unaccounted"] == 0


def test_labels_file_and_class_ids(built):
    _, out, _, _ = built
    assert (out / "labels.txt").read_text() == "cat\ndog\nfox\n"
    for records in _read_output(out).values():
        for features in records:
            text = features["image/class/text"][0].decode()
            assert features["image/class/label"] == [["cat", "dog", "fox"].index(text)]


def test_shard_sizes_within_bounds_and_names_tfds_style(built):
    _, out, _, _ = built
    files = _shard_bytes(out)
    assert files, "shards were written"
    by_split: dict[str, list[str]] = {}
    for name in files:
        m = SHARD_RE.match(name)
        assert m["name"] == "pets"
        by_split.setdefault(m["split"], []).append(name)
    for names in by_split.values():
        n = int(SHARD_RE.match(names[0])["n"])
        assert sorted(int(SHARD_RE.match(x)["i"]) for x in names) == list(range(n))
        total = sum(len(files[x]) for x in names)
        for x in names:
            if total >= MIN:
                assert MIN <= len(files[x]) <= MAX, (x, len(files[x]))
            else:
                assert n == 1
    assert len(by_split["train"]) >= 3, "the train split spans several shards"


def test_records_shuffled_across_shards(built):
    _, out, _, _ = built
    shards = _read_output(out)
    train = [records for name, records in shards.items() if "-train." in name]
    for records in train:
        names = [f["image/filename"][0] for f in records]
        labels = [f["image/class/label"][0] for f in records]
        assert names != sorted(names), "a shard is not in file-name order"
        assert labels != sorted(labels), "nor grouped by class"
        assert len(set(labels)) > 1, "each shard mixes classes"


def test_manifest_matches_the_files(built):
    _, out, result, _ = built
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == result.manifest
    assert manifest["seed"] == 7 and manifest["config"]["seed"] == 7
    assert manifest["versions"]["apache-beam"] == beam.__version__
    files = _shard_bytes(out)
    assert sorted(s["file"] for s in manifest["shards"]) == sorted(files)
    for shard in manifest["shards"]:
        data = files[shard["file"]]
        assert shard["bytes"] == len(data)
        assert shard["crc32c"] == f"{crc32c.crc32c(data):08x}"
        assert shard["examples"] == sum(1 for _ in read_records(str(out / shard["file"])))
    records = _read_output(out)
    for split, info in manifest["splits"].items():
        split_records = [f for name, rs in records.items() if f"-{split}." in name for f in rs]
        assert info["examples"] == len(split_records)
        assert info["class_counts"] == dict(
            sorted(Counter(f["image/class/text"][0].decode() for f in split_records).items())
        )


def test_counters_in_one_namespace(built):
    _, _, result, images = built
    assert result.counters["images_listed"] == len(images) + 2
    assert result.counters["images_written"] == len(images)
    assert result.counters["images_skipped"] == 2
    assert result.counters["shards_written"] == len(result.manifest["shards"])
    assert result.counters["bytes_written"] == sum(s["bytes"] for s in result.manifest["shards"])


@pytest.mark.parametrize("beam_args", [[], ["--runner=DirectRunner"]])
def test_a_local_build_runs_on_the_fnapi_runner_and_never_offers_itself_to_prism(
    collection, tmp_path, monkeypatch, beam_args
):
    # Beam's DirectRunner tries Prism first: a runner it downloads from GitHub. Offline that fails
    # and it falls back; online, a build would run on a runner it is not made or tested for.
    from apache_beam.runners.portability import prism_runner
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    offered, ran = [], []

    def prism(self, pipeline, options):
        offered.append(pipeline)
        raise AssertionError("offered to Prism")

    real = fn_runner.FnApiRunner.run_pipeline

    def fnapi(self, pipeline, options):
        ran.append(pipeline)
        return real(self, pipeline, options)

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", prism)
    monkeypatch.setattr(fn_runner.FnApiRunner, "run_pipeline", fnapi)
    # The FnApiRunner runs from the runner-API form: Beam's check round trip through it (a third
    # of a second of a small build) is skipped, as Beam skips it for its own DirectRunner.
    rebuilt = []
    real_from = beam.Pipeline.from_runner_api
    monkeypatch.setattr(
        beam.Pipeline,
        "from_runner_api",
        staticmethod(lambda *args, **kwargs: rebuilt.append(1) or real_from(*args, **kwargs)),
    )
    src, _ = collection
    result = build(_config(src, tmp_path / "pets", labels="regex:^(cat|dog|fox)/"), beam_args)
    assert offered == [] and len(ran) == 1
    assert rebuilt == []
    assert result.manifest["inputs"]["written"] == sum(CLASSES.values())


def test_same_inputs_same_bytes_across_worker_counts(built, tmp_path):
    config, out, _, _ = built
    first = _shard_bytes(out)
    again = tmp_path / "pets"
    build(_config(Path(config.inputs[0][:-3]), again, labels=config.labels), MULTI_PROCESS)
    assert _shard_bytes(again) == first


def test_reading_ahead_changes_no_byte(built, tmp_path):
    config, out, result, _ = built
    assert config.read_ahead is None, "the fixture build reads ahead, as deep as its store wants"
    sequential = tmp_path / "pets"
    again = build(
        _config(Path(config.inputs[0][:-3]), sequential, labels=config.labels, read_ahead=0)
    )
    assert _shard_bytes(sequential) == _shard_bytes(out)
    assert again.manifest["inputs"] == result.manifest["inputs"]
    assert (sequential / "report.jsonl").read_text() == (out / "report.jsonl").read_text()


def test_adding_images_never_moves_old_ones(tmp_path):
    src = tmp_path / "src"
    make_collection(src, {"a": 20, "b": 20}, seed=3)
    out1, out2 = tmp_path / "one", tmp_path / "two"
    build(_config(src, out1), [])
    make_collection(src, {"a": 15, "b": 15, "c": 10}, seed=4, start=100)
    (src / "a" / "a_0003.jpg").unlink()
    build(_config(src, out2), [])

    def splits(out):
        return {
            f["image/filename"][0]: SHARD_RE.match(name)["split"]
            for name, records in _read_output(out).items()
            for f in records
        }

    before, after = splits(out1), splits(out2)
    assert len(after) == len(before) + 40 - 1
    assert all(after[k] == v for k, v in before.items() if k in after)


def test_output_refused_when_not_empty_and_stale_shards_removed_on_overwrite(built, tmp_path):
    config, out, _, _ = built
    src = Path(config.inputs[0][:-3])
    target = tmp_path / "pets"
    shutil.copytree(out, target)
    stale = target / "pets-train.tfrecord-00042-of-00099"
    stale.write_bytes(b"old")
    (target / ".pets-train.tfrecord-00001-of-00003.tmp-deadbeef").write_bytes(b"partial")
    (target / "mine.txt").write_text("a user's file")
    with pytest.raises(
        ConfigError, match=r"--output: .* already holds an earlier build; pass overwrite=True"
    ):
        build(_config(src, target, labels=config.labels), [])
    assert stale.exists()
    build(_config(src, target, labels=config.labels, overwrite=True), [])
    assert not stale.exists()
    assert not list(target.glob(".*tmp-*"))
    assert (target / "mine.txt").exists(), "files a build does not write are left alone"
    assert _shard_bytes(target) == _shard_bytes(out)


@pytest.mark.parametrize(
    ("beam_args", "says"),
    [
        # Beam would drop it with a log line, and build with seed 0.
        (["--seed=3"], r"--seed is a setting of the build, not a Beam option: give it "
         r"in the build's config \(BuildConfig.from_settings\(\{'seed': ...\}\)\)"),
        (["--no_such_option=1"], r"--no_such_option: no such flag, of this tool or of Beam"),
        # Beam's own parser would end the caller's process: SystemExit(2).
        (["--direct_num_workers=abc"], r"--direct_num_workers: invalid int value: 'abc'"),
        ("--runner=DirectRunner", r"not one string: '--runner=DirectRunner'"),
    ],
    ids=["a-setting", "unknown", "bad-value", "one-string"],
)  # fmt: skip
def test_the_library_refuses_beam_flags_before_anything_is_written(
    collection, tmp_path, beam_args, says
):
    src, _ = collection
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=says) as refused:
        build(_config(src, out), beam_args)
    assert not out.exists()
    # Refused with ConfigError's attributes, a FlagError (which names its flag itself) too.
    assert refused.value.setting and refused.value.message in str(refused.value)


@pytest.mark.parametrize("config", [{"input": "photos", "output": "out"}, None, "build.yaml"])
def test_the_library_refuses_a_config_that_is_no_build_config_naming_it(tmp_path, config):
    """`build({"input": ..., "output": ...})` raised AttributeError: 'dict' object has no
    attribute 'output', saying neither what build takes nor how to make it."""
    with pytest.raises(ConfigError) as refused:
        build(config)
    assert str(refused.value) == (
        "--config: build takes a BuildConfig, made by BuildConfig.from_settings({'input': "
        f"['photos/**'], 'output': 'out/photos'}}), not a {type(config).__name__}: {config!r}"
    )


def test_an_interrupt_reaches_the_caller_as_itself_and_the_output_stays_locked(
    collection, tmp_path, monkeypatch, caplog
):
    """A Ctrl-C while a shard is written: Beam wraps what a transform raised in a RuntimeError
    and logs it with a traceback. A notebook or a scheduler calling build() must get the
    KeyboardInterrupt it caused, and the output its lock, as the contract says."""
    import fcntl

    from beam_tfrecord.beam import writing
    from beam_tfrecord.output_lock import LOCK_FILE, release_output

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # The collection is small enough to be written in this process, where the patch reaches.
    monkeypatch.setattr(writing, "write_shard", interrupted)
    src, _ = collection
    out = tmp_path / "out"
    try:
        with pytest.raises(KeyboardInterrupt):
            build(_config(src, out), ["--runner=DirectRunner"])
        fd = os.open(out / LOCK_FILE, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        release_output(str(out))
    assert not [r for r in caplog.records if "KeyboardInterrupt" in r.getMessage()]
    assert not (out / "manifest.json").exists()


def test_a_build_that_ends_or_fails_leaves_its_output_unlocked(built, collection, tmp_path):
    """Only an interrupted build keeps its lock (above): one that finished, or failed, released
    it as build() returned or raised, as the guides say."""
    from beam_tfrecord.output_lock import LOCK_FILE, lock_output, release_output
    from beam_tfrecord.verdict import BuildFailed

    src, _ = collection
    _, out, _, _ = built
    failed = tmp_path / "failed"
    with pytest.raises(BuildFailed) as withheld:
        build(_config(src, failed, labels="regex:^(cat|dog|fox)/", classes="cat,dgo,fox"))
    # In a Python caller's words: it said "pass --allow-missing-classes".
    assert "or pass allow_missing_classes=True to publish it" in str(withheld.value)
    for folder in (out, failed):
        assert not (folder / LOCK_FILE).exists()
        lock_output(str(folder))  # not held by this process any more, nor by another
        release_output(str(folder))


def test_a_build_from_another_thread_into_a_folder_a_build_holds_is_refused(collection, tmp_path):
    """A scheduler or a notebook that runs builds on threads: a second build into a folder
    another thread's build is writing was let through (the lock is the process's), wrote beside
    it, and, refused or failed, released the first build's lock as it raised."""
    import threading

    from beam_tfrecord.output_lock import LOCK_FILE, lock_output, release_output

    src, _ = collection
    out = tmp_path / "out"
    holding, done = threading.Event(), threading.Event()

    def first_build():  # holds the lock as a running build does, on a thread of its own
        lock_output(str(out))
        holding.set()
        done.wait(60)
        release_output(str(out))

    holder = threading.Thread(target=first_build)
    holder.start()
    try:
        assert holding.wait(60)
        with pytest.raises(ConfigError, match=r"another build in this process .* is writing"):
            build(_config(src, out))
        assert (out / LOCK_FILE).exists(), "the refused build released the first one's lock"
        assert [p.name for p in out.iterdir()] == [LOCK_FILE]
    finally:
        done.set()
        holder.join()
    assert not (out / LOCK_FILE).exists()


@pytest.mark.parametrize(
    ("withdrawal", "settings", "passing"),
    [
        ("too_many_skipped", {"max_skipped_fraction": 0.0}, {"max_skipped_fraction": None}),
        # Said "--resume keeps the finished shards" with resumable False.
        ("missing_classes", {"classes": "cat,dgo,fox"}, {"allow_missing_classes": True}),
        ("unaccounted", {}, {}),
    ],
)
def test_a_build_withdrawn_with_its_shards_kept_is_resumable_and_resume_keeps_them(
    collection, tmp_path, monkeypatch, withdrawal, settings, passing
):
    from dataclasses import replace

    from beam_tfrecord.beam import pipeline
    from beam_tfrecord.verdict import BuildFailed

    if withdrawal == "unaccounted":  # the runner lost an input between listing and writing
        real = pipeline.build_manifest
        monkeypatch.setattr(
            pipeline,
            "build_manifest",
            lambda **fields: real(**{**fields, "listed": fields["listed"] + 1}),
        )
    src, _ = collection
    out = tmp_path / "out"
    config = _config(src, out, labels="regex:^(cat|dog|fox)/", **settings)
    with pytest.raises(BuildFailed) as failed:
        build(config)
    assert failed.value.withdrawal == withdrawal
    assert failed.value.resumable and failed.value.retry is (withdrawal == "unaccounted")
    kept = _shard_bytes(out)
    assert kept and not (out / "manifest.json").exists()
    monkeypatch.undo()
    resumed = build(replace(config, resume=True, **passing))
    assert resumed.counters["shards_kept"] == len(kept)
    assert {name: _shard_bytes(out)[name] for name in kept} == kept


def test_a_python_caller_is_warned_as_the_command_is_and_the_command_once(tmp_path, caplog, capsys):
    """build() said nothing of an input it skipped or a split left empty, which the command's
    summary warns of: a Python caller gets them logged, at WARNING, by the package's logger."""
    import logging

    from beam_tfrecord.cli import main

    settings = {"splits": "train=0.98,test=0.02", "seed": 1}
    out = tmp_path / "w"
    with caplog.at_level(logging.WARNING, logger="beam_tfrecord"):
        build(BuildConfig.from_settings({"input": [str(SAMPLES)], "output": str(out), **settings}))
    assert [(r.name.split(".")[0], r.levelno, r.getMessage()) for r in caplog.records] == [
        ("beam_tfrecord", logging.WARNING,
         "split 'test' received no images; it is left out of TFDS's dataset_info.json"),
        ("beam_tfrecord", logging.WARNING,
         f"1 of 46 inputs was NOT written (truncated: 1); see {out}/report.jsonl"),
    ]  # fmt: skip
    caplog.clear()
    cli = tmp_path / "cli"
    flags = ["--splits", settings["splits"], "--seed", "1"]
    assert main(["build", "--input", str(SAMPLES), "--output", str(cli), *flags]) == 0
    printed = capsys.readouterr()
    assert [line for line in printed.out.splitlines() if line.startswith("WARNING")] == [
        "WARNING: split 'test' received no images; it is left out of TFDS's dataset_info.json",
        f"WARNING: 1 of 46 inputs was NOT written (truncated: 1); see {cli}/report.jsonl",
    ]
    assert "NOT written" not in printed.err and not caplog.records


def test_a_python_caller_is_warned_in_its_own_words(tmp_path, caplog):
    """A warning that names flags names the settings, as a Python caller gives them."""
    import logging

    with caplog.at_level(logging.WARNING, logger="beam_tfrecord"):
        build(BuildConfig.from_settings({"input": [str(SAMPLES / "apple")],
                                         "output": str(tmp_path / "apple")}))  # fmt: skip
    assert (
        "the images are right in the input folder 'apple', so labels dir (the default) gave "
        "them all one class, 'apple'; if the class is in the file names (apple01.jpg), build "
        "with labels='regex:^([a-z]+)'"
    ) in caplog.messages


def test_importing_the_library_leaves_the_callers_logging_alone(tmp_path):
    """Without Beam's Google Cloud extras (the package's own install), `import apache_beam`
    logs "apitools not found..." through `logging.warning`, which also gives a root logger
    without handlers one of its own: a notebook importing `build` printed that line, then
    every later warning of every library as `WARNING:root:...`. Simulated here by hiding
    apitools, which the test install has. A build did the same through Beam's
    PipelineOptions, which calls `logging.basicConfig()`."""
    import subprocess
    import sys

    program = tmp_path / "program.py"
    program.write_text(
        "import logging, sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'apitools':\n"
        "            raise ImportError('apitools is not installed here')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from beam_tfrecord.beam.pipeline import build\n"
        "import apache_beam.io.gcp.internal.clients.bigquery  # the module that warns\n"
        "print(logging.getLogger().handlers)\n"
        "from beam_tfrecord.config import BuildConfig\n"
        f"config = BuildConfig.from_settings({{'inputs': [{str(SAMPLES)!r}], "
        f"'output': {str(tmp_path / 'out')!r}}})\n"
        "build(config)  # Beam's PipelineOptions calls logging.basicConfig()\n"
        "print(logging.getLogger().handlers)\n"
    )
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n[]\n"
    # Nothing of Beam's: the build's own warning alone, as Python prints one with no handler set.
    assert done.stderr == (
        f"1 of 46 inputs was NOT written (truncated: 1); see {tmp_path / 'out'}/report.jsonl\n"
    )


def _largest_record(kv) -> int:
    """A GroupByKey input's size: of the whole element, or of its largest entry with the key
    when it holds a chunk of entries (a list of them, or a batch's compressed bytes, as planning
    moves them, as `hold` keeps them; inside a combine, the chunk keyed again). Bytes that are not a batch's are
    measured whole: an image's would be."""
    key, value = kv
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], list):
        key, value = (key, value[0]), value[1]
    if isinstance(value, Held):  # as a chunk crosses a shuffle: `hold`'s, here in memory
        value = value.data
    if isinstance(value, bytes):
        with contextlib.suppress(zlib.error):
            value = EntryBatch.from_bytes(value)
    if isinstance(value, list):
        return max((len(pickle.dumps((key, entry))) for entry in value), default=0)
    return len(pickle.dumps(kv))


def test_no_image_bytes_through_any_group_by_key(collection, tmp_path):
    """Every GroupByKey's input elements are small metadata, while every image is larger."""
    src, images = collection
    smallest_image = min(len(b) for b in images.values())
    config = _config(src, tmp_path / "o", labels="regex:^(cat|dog|fox)/")
    gbk_inputs = []

    class FindGroupByKeys(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            if isinstance(applied.transform, beam.GroupByKey):
                gbk_inputs.append((applied.full_label, applied.inputs[0]))

    with beam.Pipeline() as p:
        _ = p | ConvertImages(config)
        p.visit(FindGroupByKeys())
        assert len(gbk_inputs) >= 4
        for i, (_, pcoll) in enumerate(gbk_inputs):
            largest = (
                pcoll
                | f"Size{i}" >> beam.Map(_largest_record)
                | f"Max{i}" >> beam.CombineGlobally(lambda sizes: max(sizes, default=0))
            )
            assert_that(
                largest | f"Small{i}" >> beam.Map(lambda n: n < 1500),
                equal_to([True]),
                label=f"Check{i}",
            )
    assert smallest_image > 1500, "the test would not notice image bytes otherwise"


def test_a_runner_that_fails_before_any_step_wrote_nothing_to_go_on_from(tmp_path):
    """A Flink or Spark runner offline fails fetching its job server, before any step: the
    build said "the shards it finished are kept" and offered --resume, with no shard there."""
    from urllib.error import URLError

    from beam_tfrecord.beam.pipeline import _io_failure

    out = tmp_path / "out"
    out.mkdir()
    failure = _io_failure(URLError("[Errno -2] Name or service not known"), str(out))
    assert str(failure) == (
        "the build failed: <urlopen error [Errno -2] Name or service not known>; "
        "nothing was written"
    )
    assert not failure.retry and not failure.resumable
    (out / "out-train.tfrecord-00000-of-00002").write_bytes(b"")
    failure = _io_failure(URLError("[Errno -2] Name or service not known"), str(out))
    assert str(failure).endswith(f"; the shards it finished are kept in {out}")
    assert failure.retry and failure.resumable and failure.withdrawal is None


def test_a_full_disk_says_to_free_space_and_names_its_step(tmp_path):
    """A full disk said "[Errno 28] No space left on device" and nothing more, and in the step
    that writes the report and manifest, "the build failed" (found by a new-user trial)."""
    import errno

    from beam_tfrecord.beam.pipeline import _io_failure

    full = OSError(errno.ENOSPC, "No space left on device")
    wrapped = RuntimeError("[while running 'ConvertImages/WriteManifest']")
    wrapped.__cause__ = full
    failure = _io_failure(wrapped, str(tmp_path))
    assert str(failure) == (
        "writing the manifest failed: [Errno 28] No space left on device; free space on the "
        f"disk it writes to, then go on; the shards it finished are kept in {tmp_path}"
    )
    assert failure.resumable
