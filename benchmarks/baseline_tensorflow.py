"""Baseline: the tutorials' approach. A tf.io.TFRecordWriter loop, shapes from image headers.

    python benchmarks/baseline_tensorflow.py SRC OUT
"""

from __future__ import annotations

import glob
import os
import sys

import tensorflow as tf
from PIL import Image


def main(argv: list[str]) -> int:
    source, output = argv
    os.makedirs(output, exist_ok=True)
    paths = sorted(glob.glob(os.path.join(source, "**", "*.jpg"), recursive=True))
    classes = sorted({os.path.basename(os.path.dirname(p)) for p in paths})
    shard_bytes, shard, written = 150e6, 0, 0
    writer = tf.io.TFRecordWriter(os.path.join(output, f"data-{shard:05d}.tfrecord"))
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        with Image.open(path) as image:
            width, height = image.size
        label = os.path.basename(os.path.dirname(path))

        def b(v):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

        def i(v):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

        example = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "image/encoded": b(data),
                    "image/format": b(b"jpeg"),
                    "image/height": i(height),
                    "image/width": i(width),
                    "image/class/label": i(classes.index(label)),
                    "image/filename": b(os.path.basename(path).encode()),
                }
            )
        )
        record = example.SerializeToString()
        writer.write(record)
        written += len(record)
        if written >= shard_bytes:
            writer.close()
            shard, written = shard + 1, 0
            writer = tf.io.TFRecordWriter(os.path.join(output, f"data-{shard:05d}.tfrecord"))
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
