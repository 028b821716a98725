"""Baseline: the same image check as `--validate decode`, in a plain Python loop, no Beam.

    python benchmarks/baseline_validate.py SRC --processes 2

Reads every file and runs beam_tfrecord.images.check_image on it, in a multiprocessing pool.
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing
import os
import sys

from beam_tfrecord.images import ImageError, ImagePolicy, check_image

_POLICY = ImagePolicy(validate="decode")


def _check(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    try:
        check_image(data, _POLICY)
    except ImageError:
        return 0
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("source")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.source, "**", "*.jpg"), recursive=True))
    with multiprocessing.Pool(args.processes) as pool:
        good = sum(pool.imap_unordered(_check, paths, chunksize=64))
    print(f"{good} of {len(paths)} images pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
