"""Reading a built dataset in plain Python: its shards, records and images, without TensorFlow or Beam."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import posixpath
import random
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec.core import url_to_fs

from beam_tfrecord.build_folder import build_traces
from beam_tfrecord.codec.example import decode_example
from beam_tfrecord.codec.framing import CorruptRecordError
from beam_tfrecord.codec.reader import TFRecordReader, read_records
from beam_tfrecord.codec.record_index import index_candidates
from beam_tfrecord.codec.records import sample_record
from beam_tfrecord.manifest import LABELS_FILE, MANIFEST_FILE, parse_manifest
from beam_tfrecord.parts import Part, split_parts
from beam_tfrecord.shard_names import ShardName, parse_shard_name
from beam_tfrecord.storage import sequential_read_options, to_url
from beam_tfrecord.wording import count as plural

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Dataset",
    "MissingRecordsError",
    "Shard",
    "decode_image",
    "list_shards",
    "parse_record",
]

# Our record layout, read from what the writer writes so that the two cannot drift apart. Its
# features hold one value each, and come out of parse_record as scalars; the text ones as str.
_LAYOUT = tuple(decode_example(sample_record()))
_TEXT_FEATURES = frozenset(
    {"image/format", "image/class/text", "image/filename", "image/key/sha256"}
)
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
# The features `Dataset(decode=True)` makes an image of.
_DECODED = ("image/encoded", "image/height", "image/width", "image/channels")
_PILLOW_FORMATS = {"jpeg": "JPEG", "png": "PNG"}


class MissingRecordsError(OSError):
    """A shard holds another number of records than its build wrote (manifest.json, or the
    shard's record index without one): cut short at a record's end, emptied, or replaced since.
    Its framing is whole, so nothing else says so: read on, a pass would quietly miss records."""

    def __init__(self, url: str, found: int, written: int, counted_by: str | None = None):
        listed = (
            f"its build wrote {written} ({MANIFEST_FILE})"
            if counted_by is None
            else f"its record index {counted_by} lists {written}"
        )
        super().__init__(
            f"{url}: holds {plural(found, 'record')} where {listed}: the file was cut short or "
            "changed since it was written; `beam-tfrecord verify` checks every shard"
        )
        self.url, self.found, self.written = url, found, written

    @classmethod
    def of(
        cls, url: str, found: int, written: int | None, counted_by: str | None = None
    ) -> MissingRecordsError | None:
        """The error for a shard read to its end that held `found` records where its build
        wrote `written` (None: no manifest says; `counted_by`: the record index that says, if
        not the manifest); None when the two agree."""
        if written is None or found == written:
            return None
        return cls(url, found, written, counted_by)


@dataclass(frozen=True)
class Shard:
    """One shard file of a dataset.

    Attributes:
        url: The file's path or fsspec URL.
        examples: How many records it holds, from the manifest; None when there is none.
    """

    url: str
    examples: int | None = None


def parse_record(data: bytes) -> dict[str, Any]:
    """Turns one record of a built dataset into plain Python values.

    The features of our layout hold one value each and come out as scalars: ``int`` for the
    int64 ones, ``bytes`` for ``image/encoded`` and ``str`` for the text ones (``image/format``,
    ``image/class/text``, ``image/filename``, ``image/key/sha256``). Any other feature keeps the
    list it was stored as.

    Args:
        data: A serialized tf.train.Example.

    Returns:
        Feature name to value, e.g. ``{"image/class/label": 1, "image/class/text": "dog", ...}``.

    Raises:
        ValueError: If ``data`` is not a tf.train.Example.
    """
    features: dict[str, Any] = decode_example(data)
    for name in _LAYOUT:
        values = features.get(name)
        if values is None or len(values) != 1:
            continue  # not written this way by us: leave the list as stored
        value = values[0]
        if name in _TEXT_FEATURES and isinstance(value, bytes):
            # The writer encodes file names with surrogateescape, so undecodable names round-trip.
            value = value.decode("utf-8", "surrogateescape")
        features[name] = value
    return features


def decode_image(
    encoded: bytes,
    channels: int = 3,
    image_format: str | None = None,
    size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Decodes image bytes with Pillow into a ``(height, width, channels)`` uint8 array.

    The pixels are those ``tf.io.decode_image(encoded, channels=channels)`` returns for a PNG
    of as many channels, or of fewer (gray to RGB). A colour PNG read as gray (a ``--color
    gray`` build keeps one, which TensorFlow converts) can differ by one here and there: libpng
    and Pillow round the conversion apart. For a JPEG, close to them but not always equal:
    TensorFlow's default DCT method is a faster, rougher one than Pillow's, and a pixel of a
    photograph can differ by ten or more (less with ``dct_method="INTEGER_ACCURATE"`` in
    ``tf.io.decode_jpeg``). Like TensorFlow, it ignores EXIF orientation (the build applied it
    to the pixels already). Raw pixels (``--store raw``, ``image/format`` ``raw``) are the
    array itself, row by row: ``size`` says its height and width.

    Args:
        encoded: The image file's bytes (``image/encoded``).
        channels: 1 (gray), 3 (RGB) or 4 (RGBA), as ``image/channels`` states.
        image_format: ``jpeg`` or ``png`` to try that decoder only, ``raw`` for raw pixels;
            None to let Pillow detect it.
        size: ``(height, width)``, as ``image/height`` and ``image/width`` state: needed for
            raw pixels only.

    Returns:
        The pixels, shape ``(height, width, channels)``, dtype uint8.

    Raises:
        ValueError: If ``channels`` is not 1, 3 or 4, or the bytes do not decode; the message
            says why.
    """
    if channels not in _MODES:
        raise ValueError(f"channels must be 1, 3 or 4, got {channels!r}")
    # Imported here: reading records and labels needs neither, only decoding pixels does.
    import numpy as np

    if image_format == "raw":
        if size is None:
            raise ValueError("raw pixels need the image's height and width to be read")
        height, width = size
        if len(encoded) != height * width * channels:
            raise ValueError(
                f"the raw image holds {len(encoded)} bytes, not {height}x{width}x{channels}"
            )
        # A copy: a view of the record's bytes would be read-only (see below).
        return np.frombuffer(encoded, dtype=np.uint8).reshape(height, width, channels).copy()
    from PIL import Image

    formats = [_PILLOW_FORMATS[image_format]] if image_format in _PILLOW_FORMATS else None
    try:
        with warnings.catch_warnings():
            # The build checked each image's size; Pillow's DecompressionBombWarning is noise here.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(encoded), formats=formats) as image:
                # np.array, not asarray: a view of Pillow's bytes is read-only, which
                # torch.from_numpy warns about and in-place transforms refuse.
                pixels = np.array(image.convert(_MODES[channels]), dtype=np.uint8)
    # Pillow reports damaged data as many types (OSError, SyntaxError, struct.error, ...).
    except Exception as error:
        if isinstance(error, Image.UnidentifiedImageError):  # its text names a BytesIO object
            why = f"it is no {image_format or 'image'} Pillow can open"
        else:
            why = f"{type(error).__name__}: {error}"
        raise ValueError(f"cannot decode the {len(encoded)}-byte image: {why}") from error
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def _join(source: str, name: str) -> str:
    return f"{source.rstrip('/')}/{name}"


def _folder(source: str | os.PathLike) -> str:
    """The dataset's folder as text (a pathlib.Path too); an empty one is refused, which fsspec
    would take for the working directory, and messages would name as nothing."""
    folder = os.fspath(source)
    if not folder:
        raise ValueError(
            "no dataset folder given (the source is an empty path): name a build's output "
            "folder, a path or any fsspec URL"
        )
    return folder


def _read_manifest(source: str, storage_options: Mapping[str, Any]) -> dict[str, Any] | None:
    url = _join(source, MANIFEST_FILE)
    try:
        with fsspec.open(url, "r", encoding="utf-8", **storage_options) as f:
            text = f.read()
    except NotADirectoryError:
        raise NotADirectoryError(f"{source}: a file, not a build folder") from None
    except FileNotFoundError:
        return None
    return parse_manifest(text, url)


def _manifest_shards(source: str, manifest: Mapping[str, Any], split: str | None) -> list[Shard]:
    splits = list(manifest.get("splits", {}))
    if split is not None and split not in splits:
        raise ValueError(
            f"no split {split!r} in {_join(source, MANIFEST_FILE)}; "
            + (f"it has {', '.join(splits)}" if splits else "it lists no splits")
        )
    return [
        Shard(_join(source, entry["file"]), int(entry["examples"]))
        for entry in manifest.get("shards", [])
        if split is None or entry["split"] == split
    ]


def _listed_shards(
    source: str, split: str | None, storage_options: Mapping[str, Any], loose: bool = False
) -> list[Shard]:
    """The shards found by name when there is no manifest, checked to be whole sets; in a folder
    a build of this tool left unfinished, only if `loose`."""
    fs, path = url_to_fs(source, **storage_options)
    try:
        listed = fs.ls(path, detail=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"{source}: no such folder") from None
    kinds = {posixpath.basename(entry["name"].rstrip("/")): entry["type"] for entry in listed}
    names = sorted(kinds)
    folders = [name for name, kind in kinds.items() if kind == "directory"]
    traces = [] if loose else build_traces(names, folders)
    if traces:
        raise _unfinished(source, traces)
    sets: dict[tuple[str, int], set[int]] = {}
    for name in names:
        shard = parse_shard_name(name)  # None for the temporary files of a build in progress
        if shard is None:
            continue
        if split is not None and shard.split != split:
            continue
        sets.setdefault((shard.prefix, shard.count), set()).add(shard.index)
    if split is not None and len(sets) > 1:
        found = ", ".join(f"{prefix} ({plural(n, 'shard')})" for prefix, n in sorted(sets))
        raise ValueError(
            f"{source}: no {MANIFEST_FILE}, and the shards of split {split!r} belong to "
            f"several builds: {found}"
        )
    shards = []
    for (prefix, count), indices in sorted(sets.items()):
        for index in range(count):
            name = str(ShardName(prefix, index, count))
            if index not in indices:
                raise FileNotFoundError(f"{_join(source, name)}: shard missing, and no manifest")
            url = _join(path, name)
            shards.append(Shard(to_url(fs, url)))
    return shards


def _unfinished(source: str, traces: Sequence[str]) -> FileNotFoundError:
    """The refusal of a folder without manifest.json that holds what a build leaves on its way:
    its shards are those of a build that failed, was stopped, or is still writing (whole
    classes missing, or shards still to come), which nothing else in the folder says."""
    *others, last = traces
    found = f"{', '.join(others)} and {last}" if others else last
    return FileNotFoundError(
        f"{source}: a build that did not finish (no {MANIFEST_FILE} beside its {found}): it "
        "failed, was stopped, or is still running, and its shards may lack records or whole "
        f"classes; `beam-tfrecord verify {source}` says what is there, `beam-tfrecord build "
        "... --resume` finishes it, and --loose (loose=True) reads its shards anyway"
    )


def list_shards(
    source: str | os.PathLike,
    split: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    loose: bool = False,
) -> list[Shard]:
    """Lists a built dataset's shards, from its manifest or, lacking one, by their names.

    A folder without a manifest that holds what a build of this tool writes before its manifest
    (its `index/` or `reports/` folder, `report.jsonl`, its lock file) is a build that did not
    finish, and is refused unless ``loose``. Shards another tool wrote are found by name.

    Args:
        source: The build's output folder, a path or any fsspec URL.
        split: Only this split's shards; None for every split's.
        storage_options: Passed to fsspec (credentials, project, ...).
        loose: List the shards of a build that did not finish, by their names.

    Returns:
        The shards in order: by split as the manifest lists them, then by index.

    Raises:
        ValueError: If ``source`` is empty, the manifest has no such split, or (without one)
            the shards found by name belong to different builds.
        FileNotFoundError: If there is no manifest and a shard of a set is missing, nothing
            is found, or the folder is that of a build that did not finish (and not ``loose``).
    """
    storage_options = dict(storage_options or {})
    source = _folder(source)
    manifest = _read_manifest(source, storage_options)
    if manifest is not None:
        return _manifest_shards(source, manifest, split)
    shards = _listed_shards(source, split, storage_options, loose)
    if not shards:
        raise _no_shards(source, split, storage_options)
    return shards


def _no_shards(
    source: str, split: str | None, storage_options: Mapping[str, Any]
) -> FileNotFoundError:
    """The refusal of a folder without manifest.json where no shard of `split` is found: the
    splits whose shards are there, or, with none named as they are looked for, that naming.
    Shards another tool named otherwise (`train-00000-of-01024`) read as no shards at all."""
    what = "shards" if split is None else f"shards of split {split!r}"
    fs, path = url_to_fs(source, **storage_options)
    names = [
        posixpath.basename(entry["name"].rstrip("/"))
        for entry in fs.ls(path, detail=True)
        if entry["type"] == "file"
    ]
    names = [name for name in names if not name.startswith(".")]
    splits = sorted({shard.split or "" for shard in map(parse_shard_name, names) if shard})
    if splits:
        found = f"its shards are of {', '.join(map(repr, splits))}"
    else:
        others = f" ({plural(len(names), 'other file')} here)" if names else ""
        found = (
            "shards are found by the names TensorFlow Datasets gives them, "
            f"{{name}}-{{split}}.tfrecord-00000-of-00004{others}"
        )
    return FileNotFoundError(f"{source}: no {MANIFEST_FILE} and no {what}: {found}")


def _index_lines(
    url: str, storage_options: Mapping[str, Any], skipped: tuple[type[Exception], ...]
) -> tuple[list[str], str] | None:
    """A shard's record index, a line a record, and its path: the first of the places a build
    writes it (`index/{shard}.index`, or beside it) that is there and not among `skipped`'s
    failures; None if none is."""
    for index in index_candidates(url):
        try:
            with fsspec.open(index, "r", encoding="ascii", **storage_options) as f:
                return [line for line in f if line.strip()], index
        except skipped:
            continue
    return None


def _index_count(url: str, storage_options: Mapping[str, Any]) -> tuple[int, str] | None:
    """The records a shard's record index lists, and the index's path; None if it has none
    (another tool's file of that name that is not text is none)."""
    found = _index_lines(url, storage_options, (FileNotFoundError, UnicodeDecodeError))
    return None if found is None else (len(found[0]), found[1])


def _record_offset(url: str, number: int, storage_options: Mapping[str, Any]) -> int | None:
    """Where record `number` of a shard begins, by its record index; None if no index says."""
    found = _index_lines(url, storage_options, (FileNotFoundError, UnicodeDecodeError))
    if found is None:
        return None
    try:
        return int(found[0][number].split()[0])
    except (IndexError, ValueError):
        return None


def _records_from(
    url: str, first: int, storage_options: Mapping[str, Any]
) -> Iterator[tuple[int, bytes]]:
    """A shard's records numbered, from record `first` on when its record index says where that
    one begins (a part that starts within a shard reads none before its own), else from 0.

    The index only points: the record there is checked as any other is. Where none begins, or
    the file ends there, the index is not the shard's, and the shard is read from its start.
    """
    offset = _record_offset(url, first, storage_options) if first else None
    if offset is not None:
        fs, path = url_to_fs(url, **storage_options)
        with fs.open(path, "rb", **sequential_read_options(fs)) as stream:
            stream.seek(offset)
            reader = TFRecordReader(stream, "NONE")
            try:
                yield from enumerate(reader, first)
            except CorruptRecordError as error:
                if not reader.records_read:  # no record where the index places one
                    offset = None
                else:  # damage further on: said where it is in the file
                    raise CorruptRecordError(
                        url, offset + error.offset, error.reason, offset + error.damage_offset
                    ) from None
            if reader.records_read:
                return
    yield from enumerate(read_records(url, **storage_options))


def _torch_worker() -> tuple[int, int] | None:
    """(id, num_workers) in a PyTorch DataLoader worker, None elsewhere.

    A worker process has torch imported, so sys.modules is asked instead of importing it:
    reading never requires, nor pays for, PyTorch.
    """
    torch_data = sys.modules.get("torch.utils.data")
    info = torch_data.get_worker_info() if torch_data is not None else None
    return None if info is None else (int(info.id), int(info.num_workers))


class Dataset:
    """One split of a built dataset, as an iterable of records; every record once per pass.

    Works with PyTorch as an ``IterableDataset`` (wrap it, see docs/reading/pytorch.md): in each
    DataLoader worker it reads only that worker's part, found with
    ``torch.utils.data.get_worker_info()`` when torch is loaded. For other setups (several
    machines, a process pool), ``shard(index, count)`` gives the parts by hand.

    Example:
        >>> train = Dataset("out/fruits", "train", decode=True)
        >>> len(train)
        33
        >>> example = next(iter(train))
        >>> example["image"].shape, example["label"], example["class_name"]
        ((96, 112, 3), 0, 'apple')

    Attributes:
        source: The build's output folder.
        split: The split read.
        shards: The split's shards, in the manifest's order.
        classes: Class names by id (the manifest's, or labels.txt), None when unknown.
        manifest: The build's manifest, None when there is none.
    """

    def __init__(
        self,
        source: str | os.PathLike,
        split: str | None = "train",
        *,
        decode: bool = False,
        shuffle_shards: bool = False,
        seed: int = 0,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        loose: bool = False,
    ):
        """Finds the split's shards; no record is read yet.

        Args:
            source: The build's output folder: a path or any fsspec URL (``gs://...``).
            split: The split to read; None reads every split's shards, in the manifest's
                order.
            decode: Yield ``{"image": array, "label": int, "class_name": str, "filename": str}``
                with the image decoded (HxWxC uint8, by Pillow) instead of the record's
                features (see ``parse_record``). A dataset built with ``--labels none`` has no
                ``label`` and ``class_name``.
            shuffle_shards: Read the shards in an order drawn from ``seed`` and the epoch (see
                ``set_epoch``); records within a shard keep their order (the build shuffled
                them across shards already).
            seed: Seeds the shard order.
            transform: Applied to each item before it is yielded (to make tensors, crop...).
            storage_options: Passed to fsspec (credentials, project, ...).
            loose: Read a folder that a build of this tool left without its manifest.json
                (it failed, was stopped, or is still running) by its shards' names; without
                it, such a folder is refused, as its shards may lack records or whole classes.
                Shards another tool wrote are read by their names either way.

        Raises:
            ValueError: If ``source`` is empty, or there is no such split.
            FileNotFoundError: If there is no dataset at ``source``, or only the shards of a
                build that did not finish (and not ``loose``).
        """
        source = _folder(source)
        self.source = source
        self.split = split
        self.decode = decode
        self.shuffle_shards = shuffle_shards
        self.seed = seed
        self.transform = transform
        self.storage_options = dict(storage_options or {})
        self.epoch = 0
        self._shard_of: tuple[tuple[int, int], ...] = ()
        self._counts: dict[str, int] = {}  # records per shard, counted when there is no manifest
        # Without one, each shard's record index (its count and path; None: it has none), read
        # once a split needs the counts. Shared with the parts `shard` makes, as _counts is.
        self._indexed: dict[str, tuple[int, str] | None] = {}
        self.manifest = _read_manifest(source, self.storage_options)
        if self.manifest is not None:
            self.shards = _manifest_shards(source, self.manifest, split)
            self.classes: list[str] | None = self.manifest.get("classes")
        else:
            self.shards = _listed_shards(source, split, self.storage_options, loose)
            if not self.shards:
                raise _no_shards(source, split, self.storage_options)
            self.classes = self._read_labels()
        self._parts = [Part(shard.url, shard.examples) for shard in self.shards]

    def _read_labels(self) -> list[str] | None:
        url = _join(self.source, LABELS_FILE)
        try:
            with fsspec.open(url, "r", encoding="utf-8", **self.storage_options) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return None

    def shard(self, index: int, count: int) -> Dataset:
        """Part ``index`` of ``count`` disjoint parts whose union is this dataset.

        The split's records, one shard after another (in the shuffled order, if
        ``shuffle_shards``), are cut into ``count`` runs whose lengths differ by one record at
        most; a run may start or end within a shard, and its reader seeks to its first record
        by the shard's record index (reads up to it without one). Every reader must split
        alike: with the same ``seed`` and epoch, they do. Parts compose: a part can be split
        again (per machine, then per DataLoader worker, which is done automatically).

        That takes each shard's record count: from manifest.json, or without one from the
        shards' record indexes (``index/{shard}.index`` or ``{shard}.index``). A folder of
        shards with neither is split by whole shards, readers sharing a shard record by
        record only when there are more readers than shards: its parts can then differ by up
        to a shard's records.

        Args:
            index: This reader's number, from 0.
            count: How many readers there are.

        Returns:
            A new Dataset reading that part.

        Raises:
            ValueError: If ``index`` is not in ``range(count)``.
        """
        if not _is_int(count) or count < 1:
            raise ValueError(f"count must be a positive int, got {count!r} (index {index!r})")
        if not _is_int(index):
            raise ValueError(f"index must be an int in range({count}), got {index!r}")
        if not 0 <= index < count:
            raise ValueError(f"index must be in range({count}), got {index!r}")
        part = object.__new__(Dataset)
        part.__dict__.update(self.__dict__)
        part._shard_of = (*self._shard_of, (index, count))
        return part

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch that, with the seed, draws the shard order when ``shuffle_shards``."""
        self.epoch = epoch

    def _my_parts(self) -> list[Part]:
        levels = list(self._shard_of)
        worker = _torch_worker()
        if worker is not None and worker[1] > 1:
            levels.append(worker)
        # Counted split or not: a pass is held to the same counts as a part of one, so that a
        # shard cut short fails both ways, not only where the readers split the folder.
        parts = self._counted_parts()
        if self.shuffle_shards:
            # Seeded by a string, which Random hashes the same way in every process: all
            # readers must agree on the order before each takes its part of it.
            random.Random(f"beam-tfrecord/{self.seed}/{self.epoch}").shuffle(parts)
        for index, count in levels:
            parts = split_parts(parts, index, count)
        return parts

    def _counted_parts(self) -> list[Part]:
        """The shards as parts with their record counts, which an exact split needs: the
        manifest's; without one, their record indexes' if every shard has one (else none).

        Never counted by reading: every reader must split alike, and a count one process has
        read and another has not would split them two ways.
        """
        if self.manifest is not None:
            return list(self._parts)
        for part in self._parts:
            if part.url not in self._indexed:
                self._indexed[part.url] = _index_count(part.url, self.storage_options)
            if self._indexed[part.url] is None:
                # No count from one shard: none is used, and the rest are not looked for (a
                # folder of another tool's shards costs a look or two a pass, not a shard).
                return list(self._parts)
        counts = [self._indexed[part.url] for part in self._parts]
        return [
            dataclasses.replace(part, examples=examples, counted_by=index)
            for part, (examples, index) in zip(self._parts, counts, strict=True)  # type: ignore[misc]
        ]

    def __len__(self) -> int:
        """The number of items a pass yields here (in a DataLoader worker: that worker's).

        Comes from the manifest; without one, from the shards' record indexes if they all
        have one, else each shard is read once to count its records.
        """
        total = 0
        for part in self._my_parts():
            if part.examples is None:
                examples = self._counts.get(part.url)
                if examples is None:
                    records = read_records(part.url, **self.storage_options)
                    examples = self._counts[part.url] = sum(1 for _ in records)
                part = dataclasses.replace(part, examples=examples)
            total += len(part.records())
        return total

    def __iter__(self) -> Iterator[Any]:
        for part in self._my_parts():
            for data in self._read(part):
                item = self._item(data, part.url)
                yield item if self.transform is None else self.transform(item)

    def _read(self, part: Part) -> Iterator[bytes]:
        """The records of a part; its shard, when read to its end, held to its count."""
        wanted = range(part.start, sys.maxsize if part.stop is None else part.stop, part.step)
        # A part that ends before its shard does stops there, unread records left unchecked.
        before = part.stop if part.examples is not None and wanted.stop < part.examples else None
        found = 0
        records = _records_from(part.url, part.start, self.storage_options)
        try:
            with contextlib.closing(records):
                for number, data in records:
                    if before is not None and number >= before:
                        return
                    found = number + 1
                    if number in wanted:
                        yield data
        except FileNotFoundError:
            if found or part.examples is None:
                raise
            raise FileNotFoundError(
                f"{part.url}: no such file, where {part.counted_by or MANIFEST_FILE} lists a "
                f"shard of {plural(part.examples, 'record')}: moved, renamed or deleted since "
                "the build (`beam-tfrecord verify` says more)"
            ) from None
        missing = MissingRecordsError.of(part.url, found, part.examples, part.counted_by)
        if missing is not None:
            raise missing

    def _item(self, data: bytes, url: str) -> dict[str, Any]:
        try:
            record = parse_record(data)
        except ValueError as error:
            raise ValueError(f"{url}: {error}") from None
        if not self.decode:
            return record
        filename = record.get("image/filename")
        lacking = next((name for name in _DECODED if name not in record), None)
        if lacking is not None:  # another tool's record: a KeyError's text said only the name
            which = "a record" if filename is None else f"record of {filename!r}"
            raise ValueError(
                f"{url}: {which} has no {lacking} feature: decode=True reads the "
                f"records this tool writes ({', '.join(_DECODED)}); decode=False gives any "
                "record's features"
            )
        try:
            shape = tuple(record[f"image/{name}"] for name in ("height", "width", "channels"))
            image = decode_image(
                record["image/encoded"], shape[2], record.get("image/format"), shape[:2]
            )
        except (KeyError, ValueError) as error:
            raise ValueError(f"{url}: record of {filename!r}: {error}") from error
        if image.shape != shape:
            raise ValueError(
                f"{url}: record of {filename!r} states shape {shape}, its image decodes to "
                f"{image.shape}"
            )
        item: dict[str, Any] = {"image": image}
        if "image/class/label" in record:
            item["label"] = record["image/class/label"]
            item["class_name"] = record.get("image/class/text")
        item["filename"] = filename
        return item

    def __repr__(self) -> str:
        parts = "".join(f".shard({i}, {n})" for i, n in self._shard_of)
        order = f", shuffle_shards=True, seed={self.seed}" if self.shuffle_shards else ""
        return f"Dataset({self.source!r}, {self.split!r}, decode={self.decode}{order}){parts}"


def _is_int(value: object) -> bool:
    """An int that is not a bool (`True` is an int to Python, and no reader's number)."""
    return isinstance(value, int) and not isinstance(value, bool)
