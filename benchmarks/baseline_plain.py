"""Baseline: the work a build does per image, as a plain Python loop in N processes, no Beam.

    python benchmarks/baseline_plain.py SRC OUT --mode decode|resize|png --processes 2

Each process takes every N-th file (sorted), and for each: reads it, decodes it with Pillow
(`decode`: a JPEG at reduced size, as a decode check does; `png`: in full), or decodes,
resizes and re-encodes it (`resize`: draft decode, shorter side to 256 with Lanczos and the
same reducing gap as the build, JPEG at quality 95), then hashes the bytes it keeps (SHA-256),
frames them as a TFRecord record and appends it to a file of its own. It writes no
tf.train.Example around the image: a few dozen bytes that cost little next to the rest.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import multiprocessing
import os
import struct
import sys
from pathlib import Path

import crc32c
from PIL import Image

_MASK = 0xA282EAD8


def _masked(data: bytes) -> bytes:
    crc = crc32c.crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + _MASK) & 0xFFFFFFFF)


def _work(args: tuple[list[str], str, str]) -> int:
    paths, out, mode = args
    written = 0
    with open(out, "wb") as sink:
        for path in paths:
            with open(path, "rb") as f:
                data = f.read()
            im = Image.open(io.BytesIO(data))
            if mode == "decode":
                im.draft("RGB", (im.width // 8, im.height // 8))
                im.load()
                kept = data
            elif mode == "png":
                im.load()
                kept = data
            else:
                w, h = im.size
                scale = 256 / min(w, h)
                size = (round(w * scale), round(h * scale))
                im.draft("RGB", size)
                im = im.convert("RGB").resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
                buffer = io.BytesIO()
                im.save(buffer, "JPEG", quality=95)
                kept = buffer.getvalue()
            digest = hashlib.sha256(kept).hexdigest().encode()
            payload = kept + digest
            length = struct.pack("<Q", len(payload))
            sink.write(length + _masked(length) + payload + _masked(payload))
            written += 1
    return written


def arguments(description: str, argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The command line the baselines share, and the images below SOURCE, sorted."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("source", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--mode", choices=["decode", "resize", "png"], default="decode")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    paths = sorted(str(p) for p in args.source.rglob("*") if p.suffix.lower() in (".jpg", ".png"))
    args.output.mkdir(parents=True, exist_ok=True)
    return args, paths


def main(argv: list[str] | None = None) -> int:
    args, paths = arguments(__doc__, argv)
    n = args.processes
    jobs = [(paths[i::n], str(args.output / f"part-{i}.tfrecord"), args.mode) for i in range(n)]
    with multiprocessing.Pool(n) as pool:
        written = sum(pool.map(_work, jobs))
    print(f"{written} of {len(paths)} images written ({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
