"""A listing cut into key ranges gives every name once, in order, whatever the names look like.

The ranges are listed here against a store held in a sorted list, paged as GCS pages (a range's
first name inclusive, the name it stops before exclusive, 1,000 names a page at most, the folders
by delimiter); tests/test_cloud_storage.py lists fake-gcs-server and moto the same way.
"""

from __future__ import annotations

import asyncio
import bisect
import random

import pytest

from beam_tfrecord import store_listing
from beam_tfrecord.store_listing import _Page, _Range, _RangedListing


def _lister(names: list[str], prefix: str, delimiter: bool, page_size: int, seen: list):
    async def page(span: _Range) -> _Page:
        seen.append(span)
        await asyncio.sleep(random.uniform(0, 0.002))  # answers come back in any order
        i = bisect.bisect_left(names, max(prefix, span.after or ""))
        end = bisect.bisect_left(names, span.before) if span.before else len(names)
        files, folders = [], []
        while i < end and names[i].startswith(prefix) and len(files) + len(folders) < page_size:
            name = names[i]
            cut = name.find("/", len(prefix)) if delimiter else -1
            if cut >= 0:
                folders.append(name[: cut + 1])
                i = bisect.bisect_left(names, name[:cut] + "0")
                continue
            if span.holds(name):
                files.append((name, 1))
            i += 1
        more = i < end and names[i].startswith(prefix)
        return _Page(files, folders, more)

    return page


def _listed(names, prefix="p/", delimiter=False, page_size=1000):
    seen: list[_Range] = []
    listing = _RangedListing(
        _lister(sorted(names), prefix, delimiter, page_size, seen), len(prefix)
    )

    async def everything():
        return [page async for page in listing.walk()]

    pages = asyncio.run(everything())
    files = [name for page in pages for name, _ in page.files]
    folders = {name for page in pages for name in page.folders}
    return files, folders, seen


@pytest.mark.parametrize(
    "names",
    [
        [f"p/img{i:07d}.jpg" for i in range(25_000)],  # a flat folder of numbered images
        [f"p/{random.Random(i).getrandbits(64):016x}.png" for i in range(12_000)],  # hashed
        [f"p/{w}" for w in ("a", "a0", "a00", "a1", "b", "b/", "ba", "z", "~", "é", "日本")],
        [f"p/{'x' * n}" for n in range(1, 3000)],  # each name the one before and one character
        [f"p/{c}{i:04d}" for c in "0aAz-_." for i in range(700)],
    ],
    ids=["numbered", "hashed", "odd", "prefixes-of-each-other", "mixed-first-character"],
)
def test_every_name_once_in_order(names):
    files, _, seen = _listed(set(names), page_size=100)
    assert files == sorted(set(names))
    assert len(seen) <= 20 + 3 * len(set(names)) // 100, len(seen)  # not a request a name


def test_a_large_flat_folder_is_cut_into_ranges():
    names = [f"p/img{i:07d}.jpg" for i in range(100_000)]
    files, _, seen = _listed(names)
    assert files == names
    assert any(span.before is not None for span in seen), "cut into bounded ranges"
    assert len(seen) < 400, len(seen)


def _s3_lister(names: list[str], seen: list):
    """Pages as S3 pages: from after a name, 1,000 names whatever the range's end."""

    async def page(span: _Range) -> _Page:
        seen.append(span)
        await asyncio.sleep(random.uniform(0, 0.002))
        start = span.after
        if start is not None and span.inclusive:
            i = bisect.bisect_left(names, start)
        else:
            i = 0 if start is None else bisect.bisect_right(names, start)
        got = names[i : i + 1000]
        past = span.before is not None and any(name >= span.before for name in got)
        files = [(name, 1) for name in got if span.holds(name)]
        return _Page(files, [], i + 1000 < len(names) and not past)

    return page


@pytest.mark.parametrize(
    "names, paging, most",
    [
        # Numbered in order: pieces of a cut hold 1,000 names exactly; cut again at once, each
        # took 33 more requests, each a page of the names after it: 749 requests, now 295.
        ([f"p/img{i:06d}.jpg" for i in range(100_000)], "s3", 350),
        # Random UUIDs, on either store: 945 requests, now 503.
        (sorted(f"p/{random.Random(i).getrandbits(128):032x}" for i in range(300_000)), "gcs", 600),
    ],
    ids=["numbered-on-s3", "uuids-on-gcs"],
)
def test_a_piece_of_a_cut_is_listed_on_once_before_it_is_cut_in_turn(names, paging, most):
    seen: list[_Range] = []
    lister = _s3_lister(names, seen) if paging == "s3" else _lister(names, "p/", False, 1000, seen)
    listing = _RangedListing(lister, 2)

    async def everything():
        return [page async for page in listing.walk()]

    assert [name for page in asyncio.run(everything()) for name, _ in page.files] == names
    assert len(seen) <= most, len(seen)


def test_folders_by_delimiter_come_once_and_their_names_are_not_listed():
    names = [f"p/f{i:05d}.jpg" for i in range(3000)]
    names += [f"p/f01000.jpg.d/{i}.jpg" for i in range(50)]  # a folder among the files
    names += [f"p/sub/{i:04d}.jpg" for i in range(2000)]
    files, folders, _ = _listed(names, delimiter=True, page_size=100)
    assert files == sorted(n for n in names if "/" not in n[2:])
    assert folders == {"p/f01000.jpg.d/", "p/sub/"}


def test_a_listing_ends_its_requests_when_its_reader_stops(monkeypatch):
    monkeypatch.setattr(store_listing, "CONCURRENT_REQUESTS", 4)
    names = [f"p/img{i:07d}.jpg" for i in range(20_000)]
    seen: list[_Range] = []
    listing = _RangedListing(_lister(names, "p/", False, 100, seen), 2)

    async def first_page_then_stop():
        walk = listing.walk()
        page = await walk.__anext__()
        await walk.aclose()
        listing.cancel()
        await asyncio.sleep(0.05)
        return page, len(seen)

    page, asked = asyncio.run(first_page_then_stop())
    assert [name for name, _ in page.files] == names[:100]
    assert asked < 200  # the rest was never asked for
