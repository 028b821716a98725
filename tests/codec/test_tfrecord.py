"""Tests for the TFRecord framing: writer, reader, compression and damage reports."""

from __future__ import annotations

import gzip
import io
import logging
import os
import pickle
import random
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import crc32c
import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecord.codec import writer as tfrecord_writer
from beam_tfrecord.codec.framing import (
    ChecksummedReader,
    CorruptRecordError,
    file_crc32c,
    framed_size,
    masked_crc32c,
)
from beam_tfrecord.codec.reader import TFRecordReader, read_records
from beam_tfrecord.codec.writer import TFRecordWriter, open_writer

# Three records whose frames start at 0, 26 and 62; the file is 108 bytes.
RECORDS = [b"a" * 10, b"b" * 20, b"c" * 30]
OFFSETS = [0, 26, 62]


def _framed(records: list[bytes]) -> bytes:
    buffer = io.BytesIO()
    writer = TFRecordWriter(buffer)
    for record in records:
        writer.write(record)
    return buffer.getvalue()


def _file(tmp_path: Path, data: bytes, name: str = "data.tfrecord") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_masked_crc32c_matches_tensorflow_constants():
    # CRC32C("") is 0, so its masked form is the mask delta itself.
    assert masked_crc32c(b"") == 0xA282EAD8
    # The header CRC of a zero-length record, as TensorFlow writes it (29 03 98 07).
    assert masked_crc32c(bytes(8)) == 0x07980329
    assert masked_crc32c(bytearray(b"foo")) == masked_crc32c(memoryview(b"xfoo")[1:])


def test_frame_layout():
    frame = _framed([b"foo"])
    length, length_crc = struct.unpack_from("<QI", frame)
    assert (length, length_crc) == (3, masked_crc32c(struct.pack("<Q", 3)))
    assert frame[12:15] == b"foo"
    assert struct.unpack_from("<I", frame, 15)[0] == masked_crc32c(b"foo")
    assert len(frame) == framed_size(3) == TFRecordWriter.framed_size(3) == 19


def test_writer_counts_and_accepts_any_bytes_like():
    buffer = io.BytesIO()
    writer = TFRecordWriter(buffer)
    sizes = [
        writer.write(b"ab"),
        writer.write(bytearray(b"cd")),
        # A memoryview of 2-byte items: its length counts items, the frame must count bytes.
        writer.write(memoryview(b"efgh").cast("H")),
    ]
    assert sizes == [18, 18, 20]
    assert writer.records_written == 3
    assert writer.bytes_written == 56 == len(buffer.getvalue())
    assert list(read_records(io.BytesIO(buffer.getvalue()))) == [b"ab", b"cd", b"efgh"]
    # The writer does not own the stream.
    assert not buffer.closed


def test_writer_rejects_str():
    with pytest.raises(TypeError, match="bytes-like, got str"):
        TFRecordWriter(io.BytesIO()).write("text")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "compression", "check"),
    [
        ("a.tfrecord", "auto", lambda data: data == _framed(RECORDS)),
        ("a.tfrecord.gz", "auto", lambda data: data[:2] == b"\x1f\x8b"),
        ("a.tfrecord.gzip", "auto", lambda data: data[:2] == b"\x1f\x8b"),
        ("a.tfrecord.zz", "auto", lambda data: zlib.decompress(data) == _framed(RECORDS)),
        ("a.zlib", "auto", lambda data: zlib.decompress(data) == _framed(RECORDS)),
        ("a.tfrecord", "gzip", lambda data: gzip.decompress(data) == _framed(RECORDS)),
        ("a.tfrecord", "ZLIB", lambda data: zlib.decompress(data) == _framed(RECORDS)),
        ("a.gz", "NONE", lambda data: data == _framed(RECORDS)),
        ("a.gz", None, lambda data: data == _framed(RECORDS)),
    ],
)
def test_open_writer_compression(tmp_path, name, compression, check):
    url = str(tmp_path / name)
    with open_writer(url, compression) as writer:
        for record in RECORDS:
            writer.write(record)
    assert writer.records_written == 3
    assert check((tmp_path / name).read_bytes())
    assert list(read_records(url, compression)) == RECORDS


def test_gzip_output_is_deterministic(tmp_path):
    outputs = []
    for name in ("one.tfrecord.gz", "two.tfrecord.gz"):
        with open_writer(str(tmp_path / name)) as writer:
            writer.write(b"same")
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    header = outputs[0][:10]
    assert header[3] & 0x08 == 0, "FNAME flag set: the file name is in the header"
    assert header[4:8] == bytes(4), "mtime is not zero"


def test_open_writer_on_an_fsspec_url():
    url = "memory://beam-tfrecord-tests/records.tfrecord.gz"
    with open_writer(url) as writer:
        writer.write(b"in memory")
    assert list(read_records(url)) == [b"in memory"]


def test_unknown_compression_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'BROTLI'"), open_writer(str(tmp_path / "x"), "BROTLI"):
        pass
    with pytest.raises(ValueError, match="'lz4'"):
        TFRecordReader(str(tmp_path / "x"), "lz4")


def test_with_offsets(tmp_path):
    url = _file(tmp_path, _framed(RECORDS))
    assert list(read_records(url, with_offsets=True)) == list(zip(OFFSETS, RECORDS, strict=True))


def test_offsets_count_the_uncompressed_stream(tmp_path):
    url = str(tmp_path / "x.tfrecord.gz")
    with open_writer(url) as writer:
        for record in RECORDS:
            writer.write(record)
    assert [offset for offset, _ in read_records(url, with_offsets=True)] == OFFSETS


def test_empty_file_has_no_records(tmp_path):
    assert list(read_records(_file(tmp_path, b""))) == []
    assert list(read_records(io.BytesIO())) == []


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(read_records(str(tmp_path / "nope.tfrecord")))


@pytest.mark.parametrize("compression", ["NONE", "GZIP", "ZLIB"])
def test_sniffs_compression_of_a_non_seekable_stream(tmp_path, compression):
    suffix = {"NONE": "", "GZIP": ".gz", "ZLIB": ".zz"}[compression]
    with open_writer(str(tmp_path / f"x.tfrecord{suffix}")) as writer:
        for record in RECORDS:
            writer.write(record)
    # A pipe cannot seek back after sniffing; the sniffed bytes must be replayed.
    with subprocess.Popen(
        ["cat", str(tmp_path / f"x.tfrecord{suffix}")], stdout=subprocess.PIPE
    ) as cat:
        assert cat.stdout is not None
        assert list(read_records(cat.stdout)) == RECORDS


def test_stream_is_read_from_its_current_position_and_left_open():
    stream = io.BytesIO(b"junk" + _framed(RECORDS))
    stream.seek(4)
    assert list(read_records(stream, with_offsets=True)) == list(zip(OFFSETS, RECORDS, strict=True))
    assert not stream.closed


# --- damage -------------------------------------------------------------------------------


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


GOOD = _framed(RECORDS)
DAMAGE = {
    # name: (damaged bytes, record offset, damage offset, reason, records before, salvaged)
    "truncated header": (GOOD[: 62 + 5], 62, 62, "truncated header (5 of 12 bytes)", 2, 2),
    "truncated payload": (GOOD[: 62 + 12 + 10], 62, 62, "truncated payload (10 of 30 bytes)", 2, 2),
    "truncated footer": (GOOD[: 62 + 12 + 30 + 2], 62, 62, "truncated footer (2 of 4 bytes)", 2, 2),
    "bad length CRC": (_flip(GOOD, 26 + 9), 26, 26, "bad length CRC", 1, 1),
    "corrupt length": (_flip(GOOD, 26 + 0), 26, 26, "bad length CRC", 1, 1),
    "not a TFRecord file": (
        b"\xff\xd8\xff\xe0" + bytes(60),
        0,
        0,
        "bad length CRC: not a TFRecord file?",
        0,
        0,
    ),
    "bad data CRC": (
        _flip(GOOD, 26 + 12 + 3),
        26,
        38,
        "bad data CRC (payload at byte offset 38)",
        1,
        2,  # the third record is still intact and readable
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damage_raises_with_path_and_offset(tmp_path, case):
    data, offset, damage_offset, reason, before, _ = DAMAGE[case]
    url = _file(tmp_path, data)
    records = []
    with pytest.raises(CorruptRecordError) as caught:
        records.extend(read_records(url))
    error = caught.value
    assert (error.path, error.offset, error.damage_offset, error.reason) == (
        url,
        offset,
        damage_offset,
        reason,
    )
    assert str(error) == f"{url}: corrupt record at byte offset {offset}: {reason}"
    assert records == RECORDS[:before]
    assert isinstance(error, OSError)


@pytest.mark.parametrize("case", list(DAMAGE))
def test_skip_damaged_salvages_and_reports(tmp_path, case, caplog):
    data, offset, _, reason, _, salvaged = DAMAGE[case]
    url = _file(tmp_path, data)
    reader = TFRecordReader(url, skip_damaged=True)
    with caplog.at_level(logging.WARNING, logger="beam_tfrecord.codec.reader"):
        records = list(reader)
    assert len(records) == reader.records_read == salvaged
    assert [(d.offset, d.reason) for d in reader.damage] == [(offset, reason)]
    assert f"{url}: corrupt record at byte offset {offset}" in caplog.text
    # read_records is the same reader without the report.
    assert list(read_records(url, skip_damaged=True)) == records


def test_skip_damaged_keeps_going_past_several_bad_data_crcs(tmp_path):
    data = _flip(_flip(GOOD, 12), 62 + 12)
    reader = TFRecordReader(_file(tmp_path, data), skip_damaged=True, with_offsets=True)
    assert list(reader) == [(26, RECORDS[1])]
    assert [d.offset for d in reader.damage] == [0, 62]


def test_damage_in_a_stream_names_the_stream():
    stream = io.BytesIO(GOOD[:-1])
    with pytest.raises(CorruptRecordError, match=r"<BytesIO>: corrupt record at byte offset 62"):
        list(read_records(stream))


@pytest.mark.parametrize(
    ("name", "cut"),
    [("cut.tfrecord.gz", 10), ("cut.tfrecord.zz", 10), ("garbage.tfrecord.gz", None)],
)
def test_broken_compressed_stream_is_a_corrupt_record_error(tmp_path, name, cut):
    url = str(tmp_path / name)
    with open_writer(url) as writer:
        for record in RECORDS * 50:
            writer.write(record)
    data = (tmp_path / name).read_bytes()
    data = data[:-cut] if cut else data[:10] + b"\xff" * 40
    (tmp_path / name).write_bytes(data)
    with pytest.raises(
        CorruptRecordError, match=f"^{url}: corrupt record at byte offset"
    ) as caught:
        list(read_records(url))
    assert "stream" in caught.value.reason
    reader = TFRecordReader(url, skip_damaged=True)
    list(reader)
    assert len(reader.damage) == 1


def test_corrupt_record_error_pickles():
    error = CorruptRecordError("gs://b/x.tfrecord", 26, "bad data CRC", damage_offset=38)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.offset, copy.reason, copy.damage_offset, str(copy)) == (
        error.path,
        error.offset,
        error.reason,
        error.damage_offset,
        str(error),
    )


# --- batching on local files ------------------------------------------------------------------


def _buffered(path: Path) -> Any:
    return open(path, "wb")


def _unbuffered(path: Path) -> Any:
    return open(path, "wb", buffering=0)


def _fsspec_local(path: Path) -> Any:
    return fsspec.open(str(path), "wb").open()


@pytest.mark.parametrize("opener", [_buffered, _unbuffered, _fsspec_local])
def test_local_file_gets_the_same_bytes_by_flush(tmp_path, opener):
    records = [b"x" * 100_000, b"", bytearray(b"mutable"), memoryview(b"efgh").cast("H")] * 50
    path = tmp_path / "batched.tfrecord"
    with opener(path) as f:
        with TFRecordWriter(f) as writer:
            sizes = [writer.write(record) for record in records]
            writer.flush()
            assert path.read_bytes() == _framed(records)
            assert sizes == [framed_size(memoryview(r).nbytes) for r in records]
            assert writer.bytes_written == sum(sizes) == f.tell()
            writer.write(b"after the flush")
        assert not f.closed
        with pytest.raises(ValueError, match="closed TFRecordWriter"):
            writer.write(b"late")
    assert path.read_bytes() == _framed([*records, b"after the flush"])


def test_more_records_than_one_writev_takes(tmp_path):
    records = [bytes([i % 256]) * (i % 7) for i in range(5000)]
    path = tmp_path / "many.tfrecord"
    with open(path, "wb") as f, TFRecordWriter(f) as writer:
        for record in records:
            writer.write(record)
    assert path.read_bytes() == _framed(records)


def test_bytes_written_to_the_file_before_the_writer_come_first(tmp_path):
    path = tmp_path / "prefix.tfrecord"
    with open(path, "wb") as f:
        f.write(_framed([b"by hand"]))
        with TFRecordWriter(f) as writer:
            writer.write(b"by the writer")
    assert list(read_records(str(path))) == [b"by hand", b"by the writer"]


def test_a_reused_buffer_goes_out_before_write_returns(tmp_path):
    path = tmp_path / "reused.tfrecord"
    buffer = bytearray(b"first")
    with open(path, "wb") as f, TFRecordWriter(f) as writer:
        writer.write(buffer)
        buffer[:] = b"again"
        writer.write(buffer)
    assert list(read_records(str(path))) == [b"first", b"again"]


def test_outside_a_with_block_records_go_straight_to_the_stream(tmp_path):
    path = tmp_path / "unbatched.tfrecord"
    with open(path, "wb") as f:
        writer = TFRecordWriter(f)
        writer.write(b"at once")
    # The file was closed before the writer was: nothing may be waiting in the writer.
    assert list(read_records(str(path))) == [b"at once"]
    writer.close()


def test_closing_the_file_under_pending_records_raises(tmp_path):
    with open(tmp_path / "closed.tfrecord", "wb") as f, TFRecordWriter(f) as writer:
        writer.write(b"pending")
        f.close()
        with pytest.raises(ValueError, match="closed with 1 record still waiting"):
            writer.close()


def test_writing_to_the_file_under_pending_records_raises(tmp_path):
    with open(tmp_path / "interleaved.tfrecord", "wb") as f, TFRecordWriter(f) as writer:
        writer.write(b"pending")
        f.write(_framed([b"sneaked in"]))
        with pytest.raises(OSError, match="to start at byte 0, the file is at byte 26"):
            writer.flush()


def test_short_writes_are_resumed(tmp_path, monkeypatch):
    def stingy_writev(fd, parts):  # a kernel that takes at most 1000 bytes per call
        return os.write(fd, b"".join(parts)[:1000])

    monkeypatch.setattr(tfrecord_writer.os, "writev", stingy_writev)
    records = [b"a" * 2500, b"b" * 10, memoryview(b"cdef").cast("H"), b"g" * 999]
    path = tmp_path / "short.tfrecord"
    with open(path, "wb") as f, TFRecordWriter(f) as writer:
        for record in records:
            writer.write(record)
    assert path.read_bytes() == _framed(records)


def test_a_pipe_gets_the_same_bytes():
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as reader:
        with open(write_end, "wb") as f, TFRecordWriter(f) as writer:
            for record in RECORDS:
                writer.write(record)
        assert reader.read() == _framed(RECORDS)


def test_a_device_that_keeps_no_position_is_written_to():
    with open(os.devnull, "wb") as f, TFRecordWriter(f) as writer:
        for _ in range(100):
            writer.write(bytes(100_000))
    assert writer.bytes_written == 100 * framed_size(100_000)


# --- round trips --------------------------------------------------------------------------

_records = st.lists(st.binary(max_size=300), max_size=20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records)
def test_round_trip_through_a_stream(records):
    assert list(read_records(io.BytesIO(_framed(records)))) == records


@pytest.mark.parametrize("compression", ["NONE", "GZIP", "ZLIB"])
def test_round_trip_through_files(tmp_path_factory, compression):
    directory = tmp_path_factory.mktemp(compression)

    @settings(max_examples=40, deadline=None)
    @given(records=_records)
    def round_trip(records):
        url = str(directory / "records.tfrecord")
        with open_writer(url, compression) as writer:
            for record in records:
                writer.write(record)
        assert writer.bytes_written == sum(framed_size(len(r)) for r in records)
        assert list(read_records(url, compression)) == records
        # and with the compression sniffed from the content, the suffix saying nothing
        assert list(read_records(url)) == records

    round_trip()


@pytest.mark.parametrize("batched", [True, False])
def test_writer_checksum_is_the_crc32c_of_the_whole_file(tmp_path, batched):
    path = tmp_path / "checked.tfrecord"
    records = [b"", b"x", bytes(range(256)) * 400, bytearray(b"mutable")]
    with open(path, "wb") as f:
        writer = TFRecordWriter(f, checksum=True)
        if batched:  # the with block batches into writev; the checksum must not care
            with writer:
                for record in records:
                    writer.write(record)
        else:
            for record in records:
                writer.write(record)
        checksum = writer.crc32c
    assert checksum == crc32c.crc32c(path.read_bytes())
    with open(path, "rb") as f:
        assert file_crc32c(f) == f"{checksum:08x}"


@pytest.mark.parametrize("compression", ["NONE", "GZIP"])
def test_one_pass_reads_the_records_and_checksums_the_whole_file(tmp_path, compression):
    path = tmp_path / "one-pass.tfrecord"
    noise = random.Random(7).randbytes  # incompressible: a gzip file is large too
    records = [noise(70_000), b"", noise(300_000)]
    with open_writer(str(path), compression) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as f:
        stream = ChecksummedReader(f, str(path))
        # Reading stops after the 2nd record: the checksum still covers the file's every byte.
        read = read_records(stream, compression=compression)
        assert [next(read), next(read)] == records[:2]
        assert stream.size < path.stat().st_size
        assert stream.crc32c() == f"{crc32c.crc32c(path.read_bytes()):08x}"
        assert stream.size == path.stat().st_size


def test_writer_without_checksum_refuses_to_make_one_up():
    writer = TFRecordWriter(io.BytesIO())
    writer.write(b"abc")
    with pytest.raises(ValueError, match="checksum=True"):
        _ = writer.crc32c


@settings(max_examples=50, deadline=None)
@given(records=st.lists(st.lists(st.binary(max_size=3000), max_size=5), max_size=12))
def test_write_parts_writes_what_writing_the_joined_record_writes(tmp_path_factory, records):
    folder = tmp_path_factory.mktemp("parts")
    for batched in (True, False):
        joined, parted = folder / f"joined-{batched}", folder / f"parted-{batched}"
        with open(joined, "wb") as a, open(parted, "wb") as b:
            one, other = TFRecordWriter(a, checksum=True), TFRecordWriter(b, checksum=True)
            if batched:
                one.__enter__(), other.__enter__()
            for parts in records:
                assert other.write_parts(parts) == one.write(b"".join(parts))
            one.close(), other.close()
        assert parted.read_bytes() == joined.read_bytes()
        assert other.crc32c == one.crc32c == crc32c.crc32c(joined.read_bytes())
        assert other.records_written == len(records)


def test_write_parts_takes_only_bytes():
    with pytest.raises(TypeError, match="bytes"):
        TFRecordWriter(io.BytesIO()).write_parts([b"a", bytearray(b"b")])


@pytest.mark.parametrize(
    ("data", "begins"),
    [
        (b"", True),  # an empty file: a TFRecord file of no records
        (GOOD, True),
        (GOOD[:40], True),  # cut short in its second record
        (_flip(GOOD, 12), True),  # the first record's payload damaged, its header whole
        (gzip.compress(GOOD, mtime=0), True),
        (b"\xff\xd8\xff\xe0" + bytes(60), False),  # a JPEG's first bytes
        (_flip(GOOD, 0), False),  # no record's header at the start
    ],
    ids=["empty", "whole", "cut", "bad data CRC", "gzip", "jpeg", "bad header"],
)
def test_begins_as_tfrecord_asks_the_first_header_only(tmp_path, data, begins):
    from beam_tfrecord.codec.reader import begins_as_tfrecord

    path = tmp_path / "file"
    path.write_bytes(data)
    assert begins_as_tfrecord(str(path)) is begins
