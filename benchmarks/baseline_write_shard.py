"""Our shard writer without the pipeline: `write_shard` in N processes, no Beam.

    python benchmarks/baseline_write_shard.py SRC OUT --mode decode|resize|png --processes 2

The per-image work of a build (read, check or transform, SHA-256, Example, framing, write; the
build's own code, `beam_tfrecord.shard_writer.write_shard`) with none of what surrounds it in a
build: no Beam, no listing or planning, no manifest. Each process takes every N-th file (sorted),
as `baseline_plain.py` does, and writes them as shards of about 150 MB of source bytes, each
published under its final name with its index file, as a build's shard is. `--mode` picks the
build's settings: `decode` and `png` the defaults, `resize` `--resize 256 --encode jpeg`.

Beside the plain loop and a whole build in one run (`bench_read_once.py`), it splits a build's
time between the work per image and the pipeline around it.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

from baseline_plain import arguments  # the same command line

_SHARD_BYTES = 150_000_000


def _work(args: tuple[list[tuple[str, int]], str, str, int]) -> int:
    from beam_tfrecord.config import BuildConfig
    from beam_tfrecord.entries import ImageEntry, ShardSpec
    from beam_tfrecord.images.decode import quiet_pillow_for_good
    from beam_tfrecord.shard_writer import write_shard

    files, out, mode, part = args
    quiet_pillow_for_good()  # as a shard process does
    settings = {"resize": "256", "encode": "jpeg"} if mode == "resize" else {}
    policy = BuildConfig.from_settings({"inputs": ["-"], "output": out, **settings}).image
    entries = [
        ImageEntry(
            url=path,
            relpath=os.path.relpath(path, os.path.dirname(os.path.dirname(path))),
            source_size=size,
            split="train",
            shuffle_key=index,
            label=os.path.basename(os.path.dirname(path)),
            class_id=0,
            record_size=size,
        )
        for index, (path, size) in enumerate(files)
    ]
    shards: list[list[ImageEntry]] = [[]]
    held = 0
    for entry in entries:
        if held >= _SHARD_BYTES:
            shards.append([])
            held = 0
        shards[-1].append(entry)
        held += entry.source_size
    written = 0
    for index, shard in enumerate(shards):
        name = f"part{part}.tfrecord-{index:05d}-of-{len(shards):05d}"
        spec = ShardSpec(out, name, "train", index, len(shards))
        result, _ = write_shard(spec, shard, policy, max_record_size=None, read_ahead=16)
        written += result.examples
    return written


def main(argv: list[str] | None = None) -> int:
    args, paths = arguments(__doc__, argv)
    files = [(path, os.path.getsize(path)) for path in paths]
    n = args.processes
    jobs = [(files[i::n], str(args.output), args.mode, i) for i in range(n)]
    with multiprocessing.get_context("spawn").Pool(n) as pool:
        written = sum(pool.map(_work, jobs))
    print(f"{written} of {len(paths)} images written ({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
