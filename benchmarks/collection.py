"""A realistic benchmark collection: unique photo-like JPEGs of about 110 KB in class folders."""

from __future__ import annotations

import io
import json
import multiprocessing
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["ensure_collection", "ensure_small_pngs"]

WIDTH, HEIGHT, QUALITY = 640, 480, 90
CLASSES = 10
_FIELD = 1024


def _make_range(args: tuple[str, int, int, int]) -> int:
    root, start, stop, seed = args
    rng = np.random.default_rng(seed)
    # One noise field per worker; each image crops it at a random place and adds its own smooth
    # colour field, so every file is unique and compresses like a noisy photograph.
    field = rng.normal(0, 10, size=(_FIELD, _FIELD, 3)).astype(np.float32)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    total = 0
    for i in range(start, stop):
        oy, ox = rng.integers(0, _FIELD - HEIGHT), rng.integers(0, _FIELD - WIDTH)
        image = field[oy : oy + HEIGHT, ox : ox + WIDTH].copy()
        for c in range(3):
            fx, fy, phase = rng.uniform(0.5, 3.0, 3)
            image[..., c] += 128 + 60 * np.sin(x / WIDTH * fx * 6.28 + phase) * np.cos(y / HEIGHT * fy * 6.28)
        out = io.BytesIO()
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=QUALITY)
        path = Path(root) / f"class{i % CLASSES:02d}" / f"img{i:07d}.jpg"
        path.write_bytes(out.getvalue())
        total += len(out.getvalue())
    return total


def ensure_collection(root: Path, images: int, seed: int = 0, processes: int = 2) -> dict:
    """Makes (or reuses) `images` JPEGs under `root`; returns {'images': n, 'bytes': total}."""
    wanted = {"images": images, "seed": seed, "width": WIDTH, "height": HEIGHT, "quality": QUALITY}
    return _ensure(root, wanted, _make_range, 500, processes)


def _ensure(root: Path, wanted: dict, make_range, step: int, processes: int) -> dict:
    """The collection `wanted` describes under `root`: reused when its marker says it is that
    one, else made by `make_range` over ranges of `step` images, on `processes` processes."""
    marker = root / "collection.json"
    if marker.exists():
        meta = json.loads(marker.read_text())
        if {k: meta.get(k) for k in wanted} == wanted:
            return meta
    for c in range(CLASSES):
        (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
    images, seed = wanted["images"], wanted["seed"]
    jobs = [(str(root), s, min(s + step, images), seed * 1_000_003 + s) for s in range(0, images, step)]
    with multiprocessing.Pool(processes) as pool:
        total = sum(pool.imap_unordered(make_range, jobs))
    meta = dict(wanted, bytes=total)
    marker.write_text(json.dumps(meta))
    return meta


SMALL = 32


def _make_small_range(args: tuple[str, int, int, int]) -> int:
    root, start, stop, seed = args
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SMALL, 0:SMALL].astype(np.float32)
    total = 0
    for i in range(start, stop):
        # A drawn-object look: smooth colour fields and a little noise, a few hundred bytes as PNG.
        image = np.empty((SMALL, SMALL, 3), np.float32)
        for c in range(3):
            fx, fy, phase = rng.uniform(0.2, 1.5, 3)
            image[..., c] = 128 + 90 * np.sin(x / SMALL * fx * 6.28 + phase) * np.cos(y / SMALL * fy * 6.28)
        image += rng.normal(0, 2, size=image.shape)
        out = io.BytesIO()
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(out, "PNG")
        path = Path(root) / f"class{i % CLASSES:02d}" / f"img{i:07d}.png"
        path.write_bytes(out.getvalue())
        total += len(out.getvalue())
    return total


def ensure_small_pngs(root: Path, images: int, seed: int = 0, processes: int = 2) -> dict:
    """Makes (or reuses) `images` 32x32 PNGs (the CIFAR shape) in 10 class folders under `root`."""
    wanted = {"images": images, "seed": seed, "width": SMALL, "height": SMALL, "format": "png"}
    return _ensure(root, wanted, _make_small_range, 5000, processes)
