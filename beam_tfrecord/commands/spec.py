"""The `beam-tfrecord spec` command: the tf.io.parse_example feature spec of a built dataset."""

from __future__ import annotations

import argparse
import json

from beam_tfrecord.commands.arguments import (
    add_loose_argument,
    given_path,
    non_negative_int,
    print_error,
)
from beam_tfrecord.feature_spec import feature_spec, spec_to_python
from beam_tfrecord.locations import protocol_problem

__all__ = ["add_arguments", "run"]


# What the exit status says, in --help and the commands reference: the reading commands' rule.
_EXIT_STATUSES = (
    "Exit status: 0 when the spec is printed; 1 when the dataset cannot be read (no such "
    "folder, a build that did not finish, a record damaged or not a tf.train.Example); 2 "
    "for a bad flag or value (a URL no filesystem opens)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declares the command's arguments."""
    parser.epilog = _EXIT_STATUSES
    parser.add_argument(
        "output",
        metavar="OUTPUT",
        type=given_path,
        help="a build's output folder, a path or any fsspec URL",
    )
    parser.add_argument(
        "--scan",
        type=non_negative_int,
        default=1000,
        metavar="N",
        help="records to read, the first shard of every split first; 0 reads all "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the spec as JSON, for scripts, not as Python"
    )
    add_loose_argument(parser)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Prints the feature spec; returns 1 if the dataset cannot be read."""
    del extra  # the dispatcher refuses unknown flags for this command
    problem = protocol_problem(args.output)
    if problem is not None:  # a URL the user gave, refused as every command refuses it
        print_error("spec", f"{args.output}: {problem}")
        return 2
    try:
        description = feature_spec(args.output, scan=args.scan, loose=args.loose)
    # CorruptRecordError and FileNotFoundError are OSErrors; their messages name the file.
    except (OSError, ValueError) as error:
        print_error("spec", str(error))
        return 1
    if args.json:
        print(json.dumps(description, indent=1))
    else:
        print(spec_to_python(description), end="")
    return 0
