"""--resume goes on only with the settings its build started with: a build records them in its
folder (build-settings.json) before its first shard, and a --resume with others is refused
before anything is written or removed, each differing setting named with both its values.

A record shows its format, channels and size, and little else of the settings that made it:
before the record, another --jpeg-quality, a larger --resize box, an exact: mode swapped or
--encode left out kept every shard of the old settings."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import re
from dataclasses import replace
from pathlib import Path

import fsspec
import numpy as np
import pytest

# The fixtures are imported for pytest to find them; tests ask for them by name.
from cloud_servers import gcs_store, s3_store  # noqa: F401
from imagegen import make_collection
from PIL import Image

from beam_tfrecord.cli import main
from beam_tfrecord.config import IMAGE_SETTINGS, BuildConfig, ConfigError
from beam_tfrecord.images.policy import ImagePolicy
from beam_tfrecord.manifest import SETTINGS_FILE
from beam_tfrecord.settings import SETTINGS
from beam_tfrecord.settings_record import RECORDED, check_resumed, settings_text, start_output
from beam_tfrecord.verdict import EXIT_CONFIG

# Small shards of one split, so a build of a few images has several.
BOUNDS = ["--min-shard-size", "4KB", "--max-shard-size", "12KB", "--splits", "train=1"]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src")
    make_collection(root, {"cat": 10, "dog": 10}, seed=5, size=(36, 56))
    return root


@pytest.fixture(scope="module")
def alpha_src(tmp_path_factory) -> Path:
    """PNGs with an alpha channel, which a build flattens onto --background: another background
    changes the images' pixels and not what a record shows of them, nor the shards' plan (an
    image so normalized is planned at its file's size)."""
    root = tmp_path_factory.mktemp("alpha")
    rng = np.random.default_rng(8)
    for i in range(20):
        side = int(rng.integers(30, 50))
        pixels = rng.integers(0, 256, size=(side, side + 3, 4), dtype=np.uint8)
        (root / "ab"[i % 2]).mkdir(exist_ok=True)
        Image.fromarray(pixels, "RGBA").save(root / "ab"[i % 2] / f"{i:02d}.png")
    return root


def _build(src: Path, out: Path, *flags: str) -> int:
    return main(["build", "--input", str(src), "--output", str(out), "--name", "ds", *BOUNDS,
                 *flags])  # fmt: skip


def _files(folder: Path) -> dict[str, bytes]:
    """Every file below the folder, hidden ones too, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("ds-*.tfrecord-*"))}


def _interrupted(src: Path, out: Path, *flags: str) -> dict[str, bytes]:
    """A build of `flags` into `out`, left as a stopped one leaves it (no manifest.json); its
    files."""
    assert _build(src, out, *flags) == 0
    (out / "manifest.json").unlink()
    assert len(_shards(out)) >= 2 and (out / SETTINGS_FILE).exists()
    return _files(out)


# (the first run's flags, the --resume run's, the change the refusal names)
CHANGES = [
    pytest.param(["--resize", "32x32"], ["--resize", "32x32", "--jpeg-quality", "80"],
                 "--jpeg-quality 95 -> 80", id="jpeg_quality"),
    pytest.param(["--resize", "32x32"], ["--resize", "40x40"], "--resize 32x32 -> 40x40",
                 id="a_larger_resize_box"),
    pytest.param(["--resize", "exact:32x32"], ["--resize", "exact:32x32:pad"],
                 "--resize exact:32x32 -> exact:32x32:pad", id="an_exact_mode_swapped"),
    pytest.param(["--encode", "png"], [], "--encode png -> not given", id="encode_left_out"),
    pytest.param(["--color", "keep"], [], "--color keep -> rgb", id="color_keep_left_out"),
    pytest.param(["--encode", "png"], ["--encode", "png", "--background", "#000000"],
                 "--background 255,255,255 -> 0,0,0", id="background"),
    pytest.param([], ["--no-exif-orientation"], "without --no-exif-orientation -> with",
                 id="exif_orientation"),
    pytest.param(["--dedup"], [], "with --dedup -> without", id="dedup_left_out"),
    pytest.param([], ["--seed", "3"], "--seed 0 -> 3", id="seed"),
    pytest.param([], ["--max-shard-size", "13KB"], "--max-shard-size 12KB -> 13KB",
                 id="shard_size"),
]  # fmt: skip


@pytest.mark.parametrize(("first", "then", "named"), CHANGES)
def test_a_resume_with_other_settings_is_refused_and_changes_nothing(
    src, tmp_path, capsys, first, then, named
):
    out = tmp_path / "out"
    before = _interrupted(src, out, *first)
    capsys.readouterr()
    assert _build(src, out, *then, "--resume") == EXIT_CONFIG
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"beam-tfrecord build: error: --resume: '{out}' was built with other "
                           f"settings ({SETTINGS_FILE}): "), line  # fmt: skip
    assert named in line
    assert "--overwrite instead of --resume" in line
    assert "Traceback" not in captured.err and captured.out == ""
    assert _files(out) == before, "nothing written or removed: not the lock, not a shard"


def test_the_refusal_reads_so(src, tmp_path, capsys):
    out = tmp_path / "out"
    _interrupted(src, out, "--resize", "32x32")
    capsys.readouterr()
    assert _build(src, out, "--resize", "32x32", "--jpeg-quality", "80", "--resume") == 2
    assert capsys.readouterr().err == (
        f"beam-tfrecord build: error: --resume: '{out}' was built with other settings "
        "(build-settings.json): --jpeg-quality 95 -> 80. To go on with it, run again with the "
        "settings it was built with (before each ->); to build it anew with these, run with "
        "--overwrite instead of --resume\n"
    )


def test_each_setting_that_differs_is_named_with_both_values(src, tmp_path, capsys):
    out = tmp_path / "out"
    _interrupted(src, out, "--resize", "exact:32x32", "--encode", "png")
    capsys.readouterr()
    assert _build(src, out, "--resize", "48x48", "--seed", "2", "--resume") == 2
    (line,) = capsys.readouterr().err.splitlines()
    changes = line.split(f"({SETTINGS_FILE}): ", 1)[1].split(". To go on", 1)[0]
    assert changes.split("; ") == [
        "--seed 0 -> 2",
        "--resize exact:32x32 -> 48x48",
        "--encode png -> not given",
    ]


def test_a_finished_build_is_refused_too_and_overwrite_then_rebuilds_it(src, tmp_path, capsys):
    out = tmp_path / "out"
    assert _build(src, out, "--resize", "32x32") == 0
    finished = _files(out)
    changed = ["--resize", "40x40"]
    assert _build(src, out, *changed, "--resume") == EXIT_CONFIG
    assert _files(out) == finished
    assert _build(src, out, *changed, "--overwrite") == 0
    record = json.loads((out / SETTINGS_FILE).read_text())
    assert record["settings"]["resize"] == "40x40"
    assert _build(src, tmp_path / "fresh", *changed) == 0
    assert _shards(out) == _shards(tmp_path / "fresh")
    capsys.readouterr()
    # And a --resume with the new settings goes on with it.
    assert _build(src, out, *changed, "--resume") == 0
    assert f"resumed: kept {len(_shards(out))} of {len(_shards(out))}" in capsys.readouterr().out


def test_the_same_settings_resume_keeps_every_shard(src, tmp_path, capsys, caplog):
    out = tmp_path / "out"
    flags = ["--resize", "exact:32x32:pad", "--jpeg-quality", "70", "--background", "#102030"]
    before = _interrupted(src, out, *flags)
    shards = _shards(out)
    written = {name: (out / name).stat().st_mtime_ns for name in shards}
    capsys.readouterr()
    # What a --resume may change: where the inputs are read, how fast, when to publish.
    assert _build(src, out, *flags, "--read-ahead", "2", "--max-skipped-fraction", "0.5",
                  "--listing", "launcher", "--resume") == 0  # fmt: skip
    assert (
        f"resumed: kept {len(shards)} of {len(shards)} finished shards" in capsys.readouterr().out
    )
    assert "--resume replaces" not in caplog.text
    assert _shards(out) == shards
    kept = {name: (out / name).stat().st_mtime_ns for name in shards}
    assert kept == written, "kept as they were, not written again"
    assert (out / SETTINGS_FILE).read_bytes() == before[SETTINGS_FILE], "the record stays"
    assert main(["verify", str(out)]) == 0, "nor does verify take the record for a stray"


def test_a_folder_without_the_record_resumes_as_before(alpha_src, tmp_path, capsys, caplog):
    """An earlier version's folder: its records are checked, as they were, and a warning says
    what is not. No record is written for it: its shards would then pass for the record's."""
    out = tmp_path / "out"
    _interrupted(alpha_src, out)
    (out / SETTINGS_FILE).unlink()
    shards = _shards(out)
    capsys.readouterr()
    assert _build(alpha_src, out, "--background", "#000000", "--resume") == 0
    said = capsys.readouterr()
    # What a record does not show is not seen, as before: every shard is kept.
    assert f"resumed: kept {len(shards)} of {len(shards)} finished shards" in said.out
    assert _shards(out) == shards
    assert f"holds finished shards and no {SETTINGS_FILE}" in caplog.text
    assert not (out / SETTINGS_FILE).exists()
    # What a record shows is seen: with --color gray, each shard is written again.
    (out / "manifest.json").unlink()
    caplog.clear()
    assert _build(alpha_src, out, "--color", "gray", "--resume") == 0
    assert "--resume replaces the finished shard" in caplog.text


def test_the_shards_of_a_replaced_build_are_not_kept_by_the_resume_of_its_replacement(
    alpha_src, tmp_path, caplog
):
    """An --overwrite stopped before its first shard leaves the old build's shards beside its
    own record: a --resume of it with its settings kept every one whose records show nothing
    of what changed (another --background). They were written before the record was."""
    out = tmp_path / "out"
    _interrupted(alpha_src, out)
    old = _shards(out)
    config = BuildConfig.from_settings(
        {"input": str(alpha_src), "output": str(out), "name": "ds", "background": "#000000",
         "min_shard_size": "4KB", "max_shard_size": "12KB", "splits": "train=1",
         "overwrite": True}
    )  # fmt: skip
    start_output(config)  # what the --overwrite did, and no more
    assert _build(alpha_src, out, "--background", "#000000", "--resume") == 0
    assert caplog.text.count("was written before this build began") == len(old), caplog.text
    assert _build(alpha_src, tmp_path / "fresh", "--background", "#000000") == 0
    assert sorted(_shards(out)) == sorted(old)
    assert _shards(out) == _shards(tmp_path / "fresh") != old


def test_a_python_caller_reads_the_refusal_in_its_words(src, tmp_path):
    from beam_tfrecord import build

    config = BuildConfig.from_settings(
        {"input": str(src), "output": str(tmp_path / "out"), "resize": "32x32",
         "min_shard_size": "4KB", "max_shard_size": "12KB"}
    )  # fmt: skip
    build(config)
    again = replace(config, resume=True, image=replace(config.image, jpeg_quality=80))
    with pytest.raises(ConfigError) as refused:
        build(again)
    assert "jpeg_quality 95 -> 80" in str(refused.value)
    assert "overwrite=True instead of resume=True" in str(refused.value)
    # A switch by the value that turns it on, as the caller passes it.
    with pytest.raises(ConfigError) as refused:
        build(replace(config, resume=True, dedup=True))
    assert ": without dedup=True -> with. " in str(refused.value)


def test_a_record_that_is_not_one_is_refused_naming_it(src, tmp_path, capsys):
    out = tmp_path / "out"
    _interrupted(src, out)
    (out / SETTINGS_FILE).write_text('{"format": "beam-tfrecord-settings/9"}\n')
    before = _files(out)
    capsys.readouterr()
    assert _build(src, out, "--resume") == EXIT_CONFIG
    (line,) = capsys.readouterr().err.splitlines()
    assert f"its {SETTINGS_FILE} is not a record of a build's settings" in line
    assert "'beam-tfrecord-settings/9'" in line
    assert _files(out) == before


def test_a_folder_holding_only_a_record_is_built_into_without_overwrite(src, tmp_path):
    """A build stopped right after it started leaves its record alone: no earlier build."""
    out = tmp_path / "out"
    out.mkdir()
    (out / SETTINGS_FILE).write_text("{}\n")
    assert _build(src, out, "--seed", "4") == 0
    assert json.loads((out / SETTINGS_FILE).read_text())["settings"]["seed"] == 4


def test_a_resume_with_other_settings_goes_on_where_no_shard_was_finished(src, tmp_path):
    """A build stopped before its first shard (or whose job was refused) leaves its record with
    nothing made by it: a --resume, which a scheduler may give every time, has nothing to keep,
    and builds with its own settings, recording them."""
    out = tmp_path / "out"
    first = BuildConfig.from_settings(
        {"input": str(src), "output": str(out), "name": "ds", "resize": "32x32"}
    )
    start_output(first)  # and stopped there
    (out / "report.jsonl").write_text("")  # an unfinished shard's traces are no shard either
    assert _build(src, out, "--resize", "40x40", "--resume") == 0
    assert json.loads((out / SETTINGS_FILE).read_text())["settings"]["resize"] == "40x40"
    assert _build(src, tmp_path / "fresh", "--resize", "40x40") == 0
    assert _shards(out) == _shards(tmp_path / "fresh")


def test_a_resume_into_a_folder_with_no_shard_records_its_settings(src, tmp_path):
    """`build ... --resume` run every time, as a scheduler may: the first run records too."""
    out = tmp_path / "out"
    assert _build(src, out, "--resume") == 0
    assert (out / SETTINGS_FILE).exists()
    assert _build(src, out, "--seed", "1", "--resume") == EXIT_CONFIG


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_on_a_store_too(request, protocol, src, capsys):
    """On a store the record is an object written whole (no rename), checked as on a disk."""
    store = request.getfixturevalue({"s3": "s3_store", "gs": "gcs_store"}[protocol])
    out = f"{store.new_bucket('datasets')}/resume/ds"
    assert _build(src, out, "--resize", "32x32") == 0
    before = _objects(out)
    assert json.loads(before[SETTINGS_FILE])["settings"]["resize"] == "32x32"
    capsys.readouterr()
    assert _build(src, out, "--resize", "40x40", "--resume") == EXIT_CONFIG
    (line,) = capsys.readouterr().err.splitlines()
    assert f"'{out}' was built with other settings ({SETTINGS_FILE}): --resize 32x32 -> 40x40" in (
        line
    )
    assert _objects(out) == before
    assert _build(src, out, "--resize", "32x32", "--resume") == 0
    shards = [name for name in before if ".tfrecord-" in name and "/" not in name]
    assert f"resumed: kept {len(shards)} of {len(shards)}" in capsys.readouterr().out


def _objects(url: str) -> dict[str, bytes]:
    """Every object below a URL, by path relative to it, read fresh."""
    fs, root = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    root = root.rstrip("/")
    return {name[len(root) + 1 :]: fs.cat_file(name) for name in sorted(fs.find(root))}


# --- which settings are recorded: all of them, but those a --resume may change ---------------

# A value other than the default for each recorded setting. A new setting is recorded unless
# the settings table says a --resume may change it: then it needs a value here too.
ALTERED = {
    "name": "other",
    "labels": r"regex:^(\w+)/",
    "classes": "cat,dog",
    "splits": "train=0.5,test=0.5",
    "seed": 7,
    "min_shard_size": "5KB",
    "max_shard_size": "300MB",
    "validate": "header",
    "color": "gray",
    "max_pixels": 1_000_000,
    "jpeg_quality": 80,
    "background": "#000000",
    "exif_orientation": False,
    "resize": "32x32",
    "encode": "png",
    "store": "raw",
    "dedup": True,
    "transformed_sizes": "estimate",
    "split_by": r"^(\w+)/",
}

# The settings a --resume may change, and a value other than the default for each.
NEUTRAL = {
    "inputs": ["elsewhere/**"],
    "input_list": None,  # instead of inputs: below
    "extensions": ".jpg",
    "listing": "launcher",
    "output": "moved/out",
    "overwrite": False,  # not with resume; the record is the same with it
    "resume": True,
    "max_skipped_fraction": 0.5,
    "allow_missing_classes": True,
    "read_ahead": 3,
    "planning_bucket_records": 10,
}

_BASE = {"input": "photos/**", "output": "out/photos", "name": "photos"}


def test_every_setting_is_recorded_or_one_a_resume_may_change():
    every = set(BuildConfig.setting_names())
    assert set(ALTERED) == set(RECORDED)
    assert set(NEUTRAL) == {s.name for s in SETTINGS if s.resume_may_change}
    assert set(RECORDED) | set(NEUTRAL) == every and not set(RECORDED) & set(NEUTRAL)
    # And the settings are every field of the config and of its image policy.
    fields = {f.name for f in dataclasses.fields(BuildConfig)} - {"image"}
    assert set(IMAGE_SETTINGS.values()) == {f.name for f in dataclasses.fields(ImagePolicy)}
    assert fields | set(IMAGE_SETTINGS) == every


@pytest.mark.parametrize("name", sorted(ALTERED))
def test_each_recorded_setting_changed_is_refused_by_name(name):
    record = settings_text(BuildConfig.from_settings(_BASE)).encode()
    changed = BuildConfig.from_settings({**_BASE, name: ALTERED[name], "resume": True})
    with pytest.raises(ConfigError) as refused:
        check_resumed(changed, record)
    flag = next(s.flags[0] for s in SETTINGS if s.name == name)
    assert re.search(rf"\): (with |without )?{re.escape(flag)} ", str(refused.value))


def test_the_settings_a_resume_may_change_leave_the_record_as_it_was():
    record = settings_text(BuildConfig.from_settings(_BASE))
    for name, value in NEUTRAL.items():
        settings = {**_BASE, name: value}
        if name == "input_list":  # given instead of the inputs
            settings = {"input_list": "list.csv", "output": "out/photos", "name": "photos"}
        assert settings_text(BuildConfig.from_settings(settings)) == record, name
    everything = {**_BASE, **NEUTRAL, "input_list": None}
    everything["input"] = everything.pop("inputs")
    check_resumed(BuildConfig.from_settings(everything), record.encode())


def test_a_setting_the_record_does_not_hold_is_taken_at_its_default():
    """A record written before a setting was: the setting was then as its default is."""
    record = json.loads(settings_text(BuildConfig.from_settings(_BASE)))
    del record["settings"]["jpeg_quality"]
    text = json.dumps(record).encode()
    check_resumed(BuildConfig.from_settings({**_BASE, "resume": True}), text)
    with pytest.raises(ConfigError, match="--jpeg-quality 95 -> 80"):
        check_resumed(BuildConfig.from_settings({**_BASE, "jpeg_quality": 80}), text)


def test_the_order_of_the_splits_is_a_change():
    """Images are assigned to splits by their ratios in order: the same ratios in another order
    are another plan."""
    record = settings_text(BuildConfig.from_settings({**_BASE, "splits": "a=0.5,b=0.5"}))
    with pytest.raises(ConfigError, match=re.escape("--splits a=0.5,b=0.5 -> b=0.5,a=0.5")):
        check_resumed(BuildConfig.from_settings({**_BASE, "splits": "b=0.5,a=0.5"}),
                      record.encode())  # fmt: skip


# --- the record is there before the first shard -----------------------------------------------


def test_a_head_start_publishes_no_shard_before_the_record(tmp_path, monkeypatch):
    """A local build's worker processes write shards before Beam is imported
    (`early_start`): the record is published before they start."""
    from beam_tfrecord import early_start
    from beam_tfrecord.beam import pipeline, writing
    from beam_tfrecord.readahead import usable_cores

    if usable_cores() < 2:
        pytest.skip("a head start needs two cores")
    for module in (early_start, pipeline, writing):
        monkeypatch.setattr(module, "PROCESSES_MIN_BYTES", 1)
    monkeypatch.setattr(early_start, "MIN_MEAN_BYTES", 0)
    src, out = tmp_path / "src", tmp_path / "out"
    make_collection(src, {"cat": 14, "dog": 12}, seed=11, size=(64, 160))
    config = BuildConfig.from_settings(
        {"input": str(src), "output": str(out), "min_shard_size": "10KB",
         "max_shard_size": "40KB"}
    )  # fmt: skip
    assert early_start.start_before_beam(config)
    record = out / SETTINGS_FILE
    assert record.exists(), "published before the processes started"
    result = pipeline.build(config)
    shards = [out / s["file"] for s in result.manifest["shards"]]
    assert len(shards) > 2
    assert all(p.stat().st_mtime_ns >= record.stat().st_mtime_ns for p in shards)
    assert multiprocessing.active_children() == []


def test_a_long_value_is_shown_around_where_it_changed():
    """A --classes list of a thousand names was printed whole, twice, on the refusal's line."""
    names = [f"class{i:04d}" for i in range(1000)]
    record = settings_text(BuildConfig.from_settings({**_BASE, "classes": ",".join(names)}))
    names[500] = "klass0500"
    changed = BuildConfig.from_settings({**_BASE, "classes": ",".join(names), "resume": True})
    with pytest.raises(ConfigError) as refused:
        check_resumed(changed, record.encode())
    message = str(refused.value)
    assert len(message) < 400
    assert (
        ": --classes ...class0498,class0499,class0500,class0501,... -> "
        "...class0498,class0499,klass0500,class0501,.... To go on"
    ) in message
