"""`python -m beam_tfrecord.cli`: the `beam-tfrecord` command (beam_tfrecord.commands.cli)."""

import sys

from beam_tfrecord.commands.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
