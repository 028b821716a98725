"""The summary after a build: what it says of images changed on writing, and why."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from beam_tfrecord.commands.build import _print_summary
from beam_tfrecord.config import BuildConfig


def _summary(modified: int, **settings) -> str:
    manifest = {
        "name": "pets",
        "inputs": {"listed": 45, "written": 45, "modified": modified, "skipped": 0},
        "splits": {"train": {"examples": 45, "shards": 1, "bytes": 10**6}},
        "classes": ["cat", "dog"],
    }
    config = BuildConfig.from_settings(dict(inputs=("src/**",), output="out", **settings))
    out = io.StringIO()
    _print_summary(SimpleNamespace(manifest=manifest, seconds=1.0), config, out)
    return out.getvalue()


def test_images_normalized_for_tensorflow_are_said_to_be():
    assert "  1 image was re-encoded so TensorFlow decodes it (report.jsonl)" in _summary(1)


@pytest.mark.parametrize(
    ("settings", "flags"),
    [
        ({"resize": "64"}, "--resize"),
        ({"resize": "64", "encode": "jpeg"}, "--resize/--encode"),
        ({"store": "raw"}, "--store raw"),
    ],
)
def test_images_transformed_as_asked_are_not_blamed_on_tensorflow(settings, flags):
    # Re-encoding every image because the user asked to resize them is not a TensorFlow fix.
    assert (
        f"  45 images were re-encoded as {flags} asked, or so that TensorFlow decodes them "
        "(report.jsonl)"
    ) in _summary(45, **settings)
