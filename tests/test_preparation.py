"""The check step's reads: a small prefix when the header will do, the whole file when it will not."""

from __future__ import annotations

import numpy as np
import pytest
from imagegen import jpeg_bytes

from beam_tfrecord.catalog import ImageEntry, ReportEntry
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.listing import SourceFile
from beam_tfrecord.pipeline import preparer
from beam_tfrecord.preparation import HEADER_BYTES, read_source


def _with_app_segment(jpeg: bytes, size: int) -> bytes:
    """The JPEG with an APP15 segment of `size` bytes right after SOI, pushing its frame header back."""
    payload = b"\x00" * (size - 2)
    return jpeg[:2] + b"\xff\xef" + size.to_bytes(2, "big") + payload + jpeg[2:]


def _prepare(path, validate: str) -> ImageEntry | ReportEntry:
    config = BuildConfig(inputs=(str(path),), output="unused", validate=validate, labels="none")
    source = SourceFile(url=str(path), relpath=path.name, size=path.stat().st_size)
    return preparer(config).prepare(source, None, None)


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(3)
    plain = jpeg_bytes(rng, 320, 240)
    far = _with_app_segment(plain, 60_000)  # the frame header is past the prefix
    assert len(plain) > HEADER_BYTES and far.index(b"\xff\xc0") > HEADER_BYTES
    (tmp_path / "plain.jpg").write_bytes(plain)
    (tmp_path / "far.jpg").write_bytes(far)
    return tmp_path


@pytest.mark.parametrize("name", ["plain.jpg", "far.jpg"])
@pytest.mark.parametrize("validate", ["header", "decode"])
def test_header_found_wherever_it_is(images, name, validate):
    entry = _prepare(images / name, validate)
    assert isinstance(entry, ImageEntry), entry
    assert (entry.width, entry.height, entry.channels) == (320, 240, 3)
    assert entry.encoded_size == (images / name).stat().st_size


def test_prefix_read_is_exactly_the_prefix(images):
    whole = (images / "far.jpg").read_bytes()
    assert read_source(str(images / "far.jpg"), HEADER_BYTES) == whole[:HEADER_BYTES]
    assert read_source(str(images / "far.jpg"), len(whole) + 10) == whole
    assert read_source(str(images / "far.jpg")) == whole


def test_header_mode_reads_only_the_prefix_of_an_ordinary_image(images, monkeypatch):
    reads = []
    real = read_source

    def counting(url, length=None):
        data = real(url, length)
        reads.append(len(data))
        return data

    monkeypatch.setattr("beam_tfrecord.preparation.read_source", counting)
    assert isinstance(_prepare(images / "plain.jpg", "header"), ImageEntry)
    assert reads == [HEADER_BYTES]
    reads.clear()
    assert isinstance(_prepare(images / "far.jpg", "header"), ImageEntry)
    assert reads == [HEADER_BYTES, (images / "far.jpg").stat().st_size]


def test_a_vanished_file_is_reported_not_raised(images):
    path = images / "plain.jpg"
    config = BuildConfig(inputs=(str(path),), output="unused", validate="header", labels="none")
    source = SourceFile(url=str(path), relpath="plain.jpg", size=path.stat().st_size)
    path.unlink()
    result = preparer(config).prepare(source, None, None)
    assert isinstance(result, ReportEntry) and result.reason == "vanished"


def test_a_read_done_ahead_is_used_and_its_error_reported(images, monkeypatch):
    path = images / "plain.jpg"
    config = BuildConfig(inputs=(str(path),), output="unused", validate="header", labels="none")
    prep = preparer(config)
    source = SourceFile(url=str(path), relpath="plain.jpg", size=path.stat().st_size)
    fetched = prep.fetch(source)
    monkeypatch.setattr(
        "beam_tfrecord.preparation.read_source",
        lambda *_: pytest.fail("a read done ahead must not be done again"),
    )
    assert isinstance(prep.prepare(source, None, None, fetched), ImageEntry)
    gone = prep.prepare(source, None, None, FileNotFoundError(str(path)))
    assert isinstance(gone, ReportEntry) and gone.reason == "vanished"
    unreadable = prep.prepare(source, None, None, PermissionError(str(path)))
    assert isinstance(unreadable, ReportEntry) and unreadable.reason == "read_error"
