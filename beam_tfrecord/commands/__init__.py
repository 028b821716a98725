"""The `beam-tfrecord` command line: one thin module per subcommand over the library."""

# First of the command's modules: a Ctrl-C while it starts is one line (see `starting`).
from beam_tfrecord.commands.starting import quiet_while_starting

quiet_while_starting()
