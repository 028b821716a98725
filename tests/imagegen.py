"""Generated image collections for tests: unique, seeded, in class folders."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def jpeg_bytes(rng: np.random.Generator, width: int, height: int, quality: int = 90) -> bytes:
    """A unique JPEG: smooth colour gradients plus noise, so its size varies like a photo's."""
    base = rng.integers(0, 256, size=(1, 1, 3))
    ramp = np.linspace(0, rng.integers(20, 120), width)[None, :, None]
    noise = rng.normal(0, rng.uniform(10, 60), size=(height, width, 3))
    pixels = np.clip(base + ramp + noise, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, "JPEG", quality=quality)
    return out.getvalue()


def png_bytes(rng: np.random.Generator, width: int, height: int) -> bytes:
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, "PNG")
    return out.getvalue()


def make_collection(
    root: Path,
    classes: dict[str, int],
    *,
    seed: int = 0,
    size: tuple[int, int] = (48, 96),
    start: int = 0,
) -> dict[str, bytes]:
    """Writes `root/<class>/<class>_<i>.jpg` files; returns {relpath: bytes}.

    Args:
        classes: class name -> number of images.
        size: the range of each side in pixels.
        start: first image number, so a collection can grow without renaming old files.
    """
    rng = np.random.default_rng(seed)
    written = {}
    for name, count in classes.items():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(start, start + count):
            w, h = (int(v) for v in rng.integers(size[0], size[1] + 1, size=2))
            data = jpeg_bytes(rng, w, h)
            relpath = f"{name}/{name}_{i:04d}.jpg"
            (root / relpath).write_bytes(data)
            written[relpath] = data
    return written
