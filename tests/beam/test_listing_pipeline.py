"""Listing at scale through the real pipeline: on the launcher, on the workers, or from a list."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig

pytestmark = pytest.mark.slow
SHARD_RE = re.compile(r"^ds-[a-z]+\.tfrecord-\d{5}-of-\d{5}$")


def _shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if SHARD_RE.match(p.name)}


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> tuple[Path, list[str]]:
    """10,200 small JPEGs in 3 x 17 x 4 nested folders (the class is the top folder)."""
    root = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(0)
    variants = []
    for _ in range(64):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
            out, "JPEG", quality=50
        )
        variants.append(out.getvalue())
    relpaths = []
    i = 0
    for cls in ("ant", "bee", "cow"):
        for group in range(17):
            for sub in range(4):
                folder = root / cls / f"g{group:02d}" / f"s{sub}"
                folder.mkdir(parents=True)
                for _ in range(50):
                    name = f"{cls}/g{group:02d}/s{sub}/img{i:05d}.jpg"
                    (root / name).write_bytes(variants[i % len(variants)])
                    relpaths.append(name)
                    i += 1
    return root, relpaths


def _config(out: Path, **settings) -> BuildConfig:
    return BuildConfig.from_settings(
        dict(output=str(out), name="ds", labels="regex:^([a-z]+)/", validate="header",
             min_shard_size="200KB", max_shard_size="600KB", **settings)
    )  # fmt: skip


def test_same_shards_whether_listed_on_the_launcher_or_in_the_pipeline(many_files, tmp_path):
    root, relpaths = many_files
    assert len(relpaths) >= 10_000
    on_workers = build(_config(tmp_path / "pipeline", inputs=(f"{root}/**",)), [])
    on_launcher = build(
        _config(tmp_path / "launcher", inputs=(f"{root}/**",), listing="launcher"), []
    )
    assert on_workers.manifest["inputs"]["written"] == len(relpaths)
    assert on_workers.manifest["shards"] == on_launcher.manifest["shards"]
    shards = _shards(tmp_path / "pipeline")
    assert len(shards) > 10
    assert shards == _shards(tmp_path / "launcher")


def test_input_list_builds_the_same_dataset_as_the_glob(many_files, tmp_path):
    root, relpaths = many_files
    subset = relpaths[::7]
    listing = root / "subset.csv"  # beside the images: paths in it are relative to its folder
    listing.write_text("path,label\n" + "".join(f"{p},{p.split('/')[0]}\n" for p in subset))
    from_list = build(_config(tmp_path / "list", input_list=str(listing)), [])
    assert from_list.manifest["inputs"]["written"] == len(subset)
    # The same files by glob: the shards are byte-identical, labels from the list or the folders.
    globbed = tmp_path / "globbed"
    for p in subset:
        (globbed / p).parent.mkdir(parents=True, exist_ok=True)
        (globbed / p).write_bytes((root / p).read_bytes())
    from_glob = build(_config(tmp_path / "glob", inputs=(f"{globbed}/**",)), [])
    assert from_glob.manifest["shards"] == from_list.manifest["shards"]
