"""A test double for a disk on which reading one image stalls until the test lets it go.

A build refuses to read a named pipe (`beam_tfrecord.storage._read_local`: opened the plain way,
one waits for a writer for ever). Tests that need a build stopped in the middle of a shard,
for as long as they like, and then finished with every image written, stand a named pipe in
for that image and run the build with this folder first on PYTHONPATH (`STALLING_DISK`): each
of its processes (the launcher, the fork server, the workers it forks or spawns) then reads a
named pipe as the plain `open` would, waiting for the test to write the image into it. Every
other path is read by the build's own code.
"""

import os
import stat

from beam_tfrecord import storage

_read_local = storage._read_local


def _read_stalling(path: str) -> bytes:
    try:
        is_pipe = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_pipe = False
    if not is_pipe:
        return _read_local(path)
    with open(path, "rb") as f:
        return f.read()


storage._read_local = _read_stalling
