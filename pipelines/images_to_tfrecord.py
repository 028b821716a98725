"""Converts a folder of images into sharded TFRecord files: the same job as `beam-tfrecord build`.

    python -m pipelines.images_to_tfrecord --config configs/sample.yaml --overwrite
    pip wheel --no-deps -w dist .
    python -m pipelines.images_to_tfrecord --input 'gs://bucket/images/**' --output gs://bucket/ds \
        --runner DataflowRunner --project P --region R --temp_location gs://bucket/tmp \
        --extra_package dist/beam_tfrecord-0.1.0-py3-none-any.whl

The workers get this package as the wheel given with --extra_package (docs/clusters/index.md,
"How workers get the code"); the project has no setup.py.

Other flags must be Beam's pipeline options; anything else is refused (exit status 2), as
`beam-tfrecord build` refuses it: this is the same command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from beam_tfrecord.commands.cli import main


def run(argv: Sequence[str] | None = None) -> int:
    """Runs the build with command-line style arguments; returns the exit status."""
    return main(["build", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(run())
