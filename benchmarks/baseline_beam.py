"""Baseline: what a user writes with stock Beam. Read each image in a Map, WriteToTFRecord.

    python benchmarks/baseline_beam.py SRC OUT --shards N [beam flags]

Every image's bytes travel through the sink's shuffle, which is what our pipeline avoids.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.codec.example import encode_example


def _example(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    return encode_example(
        {
            "image/encoded": [data],
            "image/filename": [os.path.basename(path).encode()],
            "image/class/text": [os.path.basename(os.path.dirname(path)).encode()],
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--shards", type=int, required=True)
    args, beam_args = parser.parse_known_args(argv)
    os.makedirs(args.output, exist_ok=True)
    paths = sorted(glob.glob(os.path.join(args.source, "**", "*.jpg"), recursive=True))
    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        _ = (
            p
            | beam.Create(paths)
            | beam.Map(_example)
            | beam.io.WriteToTFRecord(os.path.join(args.output, "data"), num_shards=args.shards)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
