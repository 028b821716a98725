"""A realistic benchmark collection: unique photo-like JPEGs of about 110 KB in class folders."""

from __future__ import annotations

import io
import json
import multiprocessing
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["ensure_collection"]

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
    marker = root / "collection.json"
    wanted = {"images": images, "seed": seed, "width": WIDTH, "height": HEIGHT, "quality": QUALITY}
    if marker.exists():
        meta = json.loads(marker.read_text())
        if {k: meta.get(k) for k in wanted} == wanted:
            return meta
    for c in range(CLASSES):
        (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
    step = 500
    jobs = [(str(root), s, min(s + step, images), seed * 1_000_003 + s) for s in range(0, images, step)]
    with multiprocessing.Pool(processes) as pool:
        total = sum(pool.imap_unordered(_make_range, jobs))
    meta = dict(wanted, bytes=total)
    marker.write_text(json.dumps(meta))
    return meta
