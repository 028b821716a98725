"""`python -m beam_tfrecord.cli`: the `beam-tfrecord` command (beam_tfrecord.commands.cli)."""

from beam_tfrecord.commands.cli import entry, main

__all__ = ["main"]

if __name__ == "__main__":
    entry()
