"""Times check_image on ~100 KB camera-like JPEGs: a 64 KiB header check against a decode.

The header check is timed twice: as it runs (its fast path answers without Pillow) and with
every image sent through Pillow, as before the fast path.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image

from beam_tfrecord.images import ImagePolicy, check_image
from beam_tfrecord.images.headers import fast_header_info

__all__ = ["main"]

# What the pipeline hands check_image at planning time when validate="header".
_HEADER_BYTES = 64 * 1024


def _pin_to_one_core() -> str:
    """Pins the process to one CPU, so that both modes get the same, single core."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity on this platform)"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"


def _camera_exif(index: int) -> bytes:
    exif = Image.Exif()
    exif[0x010F] = "BenchCam"  # Make
    exif[0x0110] = f"Model {index % 7}"
    exif[0x0112] = 1  # orientation present but upright, as most camera files have it
    exif[0x0132] = "2024:05:01 12:00:00"
    return exif.tobytes()


def _jpegs(count: int, width: int, height: int, quality: int, seed: int) -> list[bytes]:
    """Distinct JPEGs that compress like photographs: smooth scenes, edges and sensor noise.

    One in five is progressive, as web-sourced collections often are.
    """
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    u, v = x[0] / width * 6.28, y[:, 0] / height * 6.28  # separable waves: cheap to generate
    files = []
    for index in range(count):
        channels = []
        for _ in range(3):
            fx, fy, phase = rng.uniform(0.5, 4.0, 3)
            wave = np.outer(np.cos(v * fy), np.sin(u * fx + phase * 2))
            channels.append(0.5 + 0.35 * wave)
        image = np.stack(channels, axis=-1) * 255
        for _ in range(6):
            cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(10, width / 4)
            image[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
        image += rng.normal(0, 6, image.shape)
        buffer = io.BytesIO()
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(
            buffer,
            "JPEG",
            quality=quality,
            progressive=index % 5 == 0,
            exif=_camera_exif(index),
        )
        files.append(buffer.getvalue())
    return files


def _per_image_ms(
    files: list[bytes], check: Callable[[bytes], object], repeats: int
) -> list[float]:
    """Best-of-`repeats` milliseconds per image."""
    best = [float("inf")] * len(files)
    for _ in range(repeats):
        for i, data in enumerate(files):
            start = time.perf_counter()
            check(data)
            best[i] = min(best[i], (time.perf_counter() - start) * 1000)
    return best


def _pillow_full_decode(data: bytes) -> None:
    with Image.open(io.BytesIO(data)) as image:
        image.load()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=300, help="number of JPEGs (300)")
    parser.add_argument("--width", type=int, default=1024, help="image width (1024)")
    parser.add_argument("--height", type=int, default=768, help="image height (768)")
    parser.add_argument("--quality", type=int, default=82, help="JPEG quality (82)")
    parser.add_argument("--repeats", type=int, default=3, help="best of N passes (3)")
    args = parser.parse_args(argv)

    pinned = _pin_to_one_core()
    files = _jpegs(args.images, args.width, args.height, args.quality, seed=2024)
    sizes = [len(f) for f in files]
    header = ImagePolicy(validate="header")
    decode = ImagePolicy(validate="decode")

    def check_header(data: bytes, fast_headers: bool = True) -> object:
        return check_image(data[:_HEADER_BYTES], header, size=len(data), fast_headers=fast_headers)

    def check_header_pillow(data: bytes) -> object:
        return check_header(data, fast_headers=False)

    for data in files:  # every check must accept every file untouched, or the timing is moot
        info = check_image(data, decode)
        assert not info.reencode and info == check_header(data)
        assert fast_header_info(data[:_HEADER_BYTES], "jpeg", len(data), header) == info
        assert check_header_pillow(data) == info

    contenders: list[tuple[str, Callable[[bytes], object]]] = [
        ("header (64 KiB prefix)", check_header),
        ("header, Pillow forced", check_header_pillow),
        ("decode (draft JPEG decode)", lambda d: check_image(d, decode)),
        ("reference: Pillow full decode", _pillow_full_decode),
    ]
    results = {}
    for name, check in contenders:
        results[name] = _per_image_ms(files, check, args.repeats)

    print(
        f"bench_images: {len(files)} JPEGs {args.width}x{args.height} q{args.quality}, "
        f"{statistics.mean(sizes) / 1000:.0f} KB mean ({min(sizes) / 1000:.0f}-{max(sizes) / 1000:.0f} KB), "
        f"1 in 5 progressive; best of {args.repeats}; {pinned}; Python {sys.version.split()[0]}"
    )
    print(f"{'mode':32} {'mean ms':>9} {'median ms':>10} {'p95 ms':>8} {'images/s':>9}")
    for name, times in results.items():
        mean = statistics.mean(times)
        p95 = sorted(times)[int(len(times) * 0.95) - 1]
        print(
            f"{name:32} {mean:9.3f} {statistics.median(times):10.3f} {p95:8.3f} {1000 / mean:9.0f}"
        )
    header_ms = statistics.mean(results["header (64 KiB prefix)"])
    pillow_ms = statistics.mean(results["header, Pillow forced"])
    decode_ms = statistics.mean(results["decode (draft JPEG decode)"])
    full_ms = statistics.mean(results["reference: Pillow full decode"])
    print(
        f"header through Pillow / fast path: {pillow_ms / header_ms:.1f}x; "
        f"decode / header: {decode_ms / header_ms:.1f}x "
        f"({decode_ms / pillow_ms:.1f}x through Pillow); "
        f"draft decode check / Pillow full decode: {decode_ms / full_ms:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
