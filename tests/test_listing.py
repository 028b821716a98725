"""Listing: patterns split by folder list exactly what they list whole, and input lists read once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.listing import (
    InputListError,
    ListingTask,
    SourceFile,
    expand_pattern,
    expand_task,
    first_match,
    input_list_chunks,
    local_bytes_reach,
    parse_input_line,
    pattern_base,
    read_input_list_chunk,
    split_task,
)

EXTS = (".jpg", ".png")
FILES = [
    "r.jpg", "R2.JPG", "notes.txt", "a/1.jpg", "a/x/2.jpg", "a/y/z/3.jpg", "a/y/4.png", "a/x/.7.jpg",
    "ab/5.jpg", "b/6.png", "b/deep/er/still/7.jpg", ".hidden/8.jpg", "a/.git/9.jpg", "c/d/x/10.png",
]  # fmt: skip


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * len(name))
    return root


def _split_fully(task: ListingTask, levels: int) -> list[ListingTask]:
    tasks = [task]
    for _ in range(levels):
        tasks = [part for t in tasks for part in split_task(t)]
    return tasks


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**", ["R2.JPG", "a/1.jpg", "a/x/2.jpg", "a/y/4.png", "a/y/z/3.jpg", "ab/5.jpg", "b/6.png",
                "b/deep/er/still/7.jpg", "c/d/x/10.png", "r.jpg"]),
        ("**/*.jpg", ["a/1.jpg", "a/x/2.jpg", "a/y/z/3.jpg", "ab/5.jpg", "b/deep/er/still/7.jpg", "r.jpg"]),
        ("a*/**/*.jpg", ["a/1.jpg", "a/x/2.jpg", "a/y/z/3.jpg", "ab/5.jpg"]),
        ("*/*.jpg", ["a/1.jpg", "ab/5.jpg"]),
        ("a/**/z/*.jpg", ["y/z/3.jpg"]),
        ("[ab]/*", ["a/1.jpg", "b/6.png"]),
        ("*/*/x/*", ["c/d/x/10.png"]),
        ("", ["R2.JPG", "a/1.jpg", "a/x/2.jpg", "a/y/4.png", "a/y/z/3.jpg", "ab/5.jpg", "b/6.png",
              "b/deep/er/still/7.jpg", "c/d/x/10.png", "r.jpg"]),  # the folder itself: everything below
        ("a/x/2.jpg", ["2.jpg"]),  # one file
    ],
)  # fmt: skip
def test_split_listing_equals_whole_listing(tree, pattern, expected):
    url = f"{tree}/{pattern}" if pattern else str(tree)
    whole = list(expand_pattern(url, EXTS))
    assert sorted(s.relpath for s in whole) == sorted(expected)
    for levels in (1, 2, 3):
        parts = _split_fully(ListingTask.for_pattern(url), levels)
        split = sorted(s for t in parts for s in expand_task(t, EXTS))
        assert split == sorted(whole), (pattern, levels)
        assert len(split) == len(set(split)), "no file is listed by two parts"


GLOB_NAMED = ["f[1]/1.jpg", "f1/2.jpg", "what?/3.jpg", "whats/4.jpg", "a*b/5.jpg", "axb/6.jpg",
              "top.jpg", "deep/[x]/7.jpg"]  # fmt: skip


@pytest.mark.parametrize("pattern", ["**", "*/*.jpg", "**/*.jpg", "*/**"])
def test_folders_named_with_wildcard_characters_are_listed_once_each(tmp_path, pattern):
    """A folder found by listing becomes part of a pattern when the listing is split; its name's
    `[`, `*` and `?` must match only itself, not `f1` for `f[1]` (the images of `f[1]` were
    lost, silently) nor `whats` for `what?` (listed twice)."""
    for name in GLOB_NAMED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    url = f"{tmp_path}/{pattern}"
    whole = sorted(s.relpath for s in expand_pattern(url, EXTS))
    wanted = {"**": GLOB_NAMED, "**/*.jpg": GLOB_NAMED, "*/**": [n for n in GLOB_NAMED if "/" in n]}
    expected = wanted.get(pattern, [n for n in GLOB_NAMED if n.count("/") == 1])
    assert whole == sorted(expected)
    for levels in (1, 2, 3):
        parts = _split_fully(ListingTask.for_pattern(url), levels)
        split = [s.relpath for t in parts for s in expand_task(t, EXTS)]
        assert sorted(split) == whole, (pattern, levels)


@pytest.mark.parametrize(
    "pattern",
    ["**", "*", "*/*.jpg", "**/*.jpg", "a*/**/*.jpg", "a/**/z/*.jpg", "[ab]/*", "*/*/x/*", "?/*",
     "a/**", "links/**", "links/*", "nope/*", "r.jpg/*", "**/.*", "*/[!x]/*"],
)  # fmt: skip
def test_the_local_listing_matches_what_fsspec_globs_with_links_as_copies(
    linked_tree, tmp_path, pattern
):
    """The scandir walk behind local listings: the files fsspec's glob gives in a copy of the
    tree whose links are replaced by what they point to; a link to nothing is a file of size -1
    (the build reports it, where fsspec's glob would drop every link without a word)."""
    import re

    import fsspec
    from fsspec.utils import glob_translate

    from beam_tfrecord.listing import _local_glob_files

    copy = tmp_path / "copy"
    shutil.copytree(linked_tree, copy, symlinks=False, ignore_dangling_symlinks=True)
    globbed = fsspec.filesystem("file").glob(f"{copy}/{pattern}", detail=True)
    expected = {
        name[len(str(copy)) :]: info["size"]
        for name, info in globbed.items()
        if info["type"] == "file"
    }
    broken = str(linked_tree / "links" / "broken.jpg")
    if re.match(glob_translate(f"{linked_tree}/{pattern}"), broken):
        expected["/links/broken.jpg"] = -1
    found = _local_glob_files(f"{linked_tree}/{pattern}")
    assert {name[len(str(linked_tree)) :]: size for name, size in found.items()} == expected
    if pattern == "links/**":  # the file behind each link, under the link's name
        assert found[str(linked_tree / "links/to-folder/x/2.jpg")] == len("a/x/2.jpg")
        assert found[str(linked_tree / "links/to-file.jpg")] == len("r.jpg")


@pytest.fixture
def looped_tree(tmp_path) -> Path:
    """Links that lead back: to the tree's top, to the folder they are in, and two folders that
    link to each other."""
    root = tmp_path / "looped"
    for name in ("top.jpg", "a/1.jpg", "b/2.jpg", "c/3.jpg"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    (root / "a" / "up").symlink_to(root)
    (root / "a" / "self").symlink_to(root / "a")
    (root / "b" / "to-c").symlink_to(root / "c")
    (root / "c" / "to-b").symlink_to(root / "b")
    return root


def test_links_that_lead_back_are_not_followed_and_the_listing_ends(looped_tree):
    expected = ["a/1.jpg", "b/2.jpg", "b/to-c/3.jpg", "c/3.jpg", "c/to-b/2.jpg", "top.jpg"]
    whole = list(expand_pattern(f"{looped_tree}/**", EXTS))
    assert sorted(s.relpath for s in whole) == expected
    for levels in (1, 2, 3):
        parts = _split_fully(ListingTask.for_pattern(f"{looped_tree}/**"), levels)
        assert sorted(s for t in parts for s in expand_task(t, EXTS)) == sorted(whole), levels


@pytest.mark.parametrize("pattern", ["**", "links/**", "**/*.jpg", "*/*"])
def test_a_linked_tree_splits_into_the_same_listing(linked_tree, pattern):
    whole = sorted(expand_pattern(f"{linked_tree}/{pattern}", EXTS))
    assert any("/links/to-folder/" in s.url for s in whole) or pattern == "*/*"
    for levels in (1, 2, 3):
        parts = _split_fully(ListingTask.for_pattern(f"{linked_tree}/{pattern}"), levels)
        assert sorted(s for t in parts for s in expand_task(t, EXTS)) == whole, levels


@pytest.mark.parametrize("folder", ["", "a", "links", "a/x/2.jpg", ".hidden", "a/x"])
def test_the_local_split_finds_the_folders_fsspec_lists_and_linked_ones(linked_tree, folder):
    import fsspec

    from beam_tfrecord.listing import _subfolders

    fs = fsspec.filesystem("file")
    path = str(linked_tree / folder) if folder else str(linked_tree)
    listed = fs.ls(path, detail=True)
    expected = sorted(
        e["name"]
        for e in listed
        if (e["type"] == "directory" or (e.get("islink") and os.path.isdir(e["name"])))
        and "/." not in e["name"][len(path) :]
    )
    assert _subfolders(fs, path) == expected
    assert (str(linked_tree / "links/to-folder") in expected) == (folder == "links")
    with pytest.raises(FileNotFoundError):
        _subfolders(fs, str(linked_tree / "missing"))


@pytest.fixture(scope="module")
def linked_tree(tmp_path_factory) -> Path:
    """The tree of FILES, and a folder of links: to a file, to a folder, to nothing."""
    tree = tmp_path_factory.mktemp("linked")
    for name in FILES:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(b"x" * len(name))
    links = tree / "links"
    links.mkdir()
    (links / "real.jpg").write_bytes(b"1234")
    (links / "to-file.jpg").symlink_to(tree / "r.jpg")
    (links / "to-folder").symlink_to(tree / "a")
    (links / "broken.jpg").symlink_to(tree / "missing.jpg")
    (links / "sub").mkdir()
    return tree


def test_splitting_spreads_the_work(tree):
    parts = _split_fully(ListingTask.for_pattern(f"{tree}/**"), 2)
    assert len(parts) >= 8
    assert not any("/.hidden" in t.pattern or "/.git" in t.pattern for t in parts)


def test_sizes_and_urls(tree):
    found = {s.relpath: s for s in expand_pattern(f"{tree}/**/*.png", EXTS)}
    assert found["a/y/4.png"] == SourceFile(str(tree / "a/y/4.png"), "a/y/4.png", len("a/y/4.png"))


def test_first_match_without_listing_everything(tree):
    assert first_match(f"{tree}/**", EXTS) is not None
    assert first_match(f"{tree}/**/*.webp", EXTS) is None
    assert first_match(f"{tree}/nope/**", EXTS) is None
    assert first_match(str(tree / "missing.jpg"), EXTS) is None
    assert first_match(f"{tree}/c/**", EXTS).relpath == "d/x/10.png"


def test_memory_filesystem_urls_round_trip():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/bucket/imgs/cat/1.jpg", b"abc")
    fs.pipe("/bucket/imgs/dog/2.jpg", b"abcd")
    found = list(expand_pattern("memory://bucket/imgs/**", EXTS))
    assert [(s.url, s.relpath, s.size) for s in found] == [
        ("memory:///bucket/imgs/cat/1.jpg", "cat/1.jpg", 3),
        ("memory:///bucket/imgs/dog/2.jpg", "dog/2.jpg", 4),
    ]
    parts = _split_fully(ListingTask.for_pattern("memory://bucket/imgs/**"), 2)
    assert sorted(s for t in parts for s in expand_task(t, EXTS)) == found


def test_pattern_base():
    assert pattern_base("data/**/*.jpg") == "data"
    assert pattern_base("/abs/data/a*/x.png") == "/abs/data"
    assert pattern_base("*.jpg") == ""
    assert pattern_base("bucket/exact.jpg") == "bucket/exact.jpg"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("cat/1.jpg", SourceFile("/lists/cat/1.jpg", "cat/1.jpg", -1)),
        ("./cat/1.jpg,Cat", SourceFile("/lists/cat/1.jpg", "cat/1.jpg", -1, "Cat")),
        ('"odd, name.jpg",dog', SourceFile("/lists/odd, name.jpg", "odd, name.jpg", -1, "dog")),
        ("gs://b/imgs/x.jpg,fox", SourceFile("gs://b/imgs/x.jpg", "b/imgs/x.jpg", -1, "fox")),
        ("/abs/y.png", SourceFile("/abs/y.png", "abs/y.png", -1)),
        ("/abs/./x/../y.png", SourceFile("/abs/y.png", "abs/y.png", -1)),
        ("../other/z.png", SourceFile("/other/z.png", "../other/z.png", -1)),
        ("path,label", None),
        ("# a comment", None),
        ("   ", None),
    ],
)
def test_parse_input_line(line, expected):
    assert parse_input_line(line, "/lists/images.csv") == expected


@pytest.mark.parametrize("folder", ["s3://b/lists", "gs://b/lists", "memory://b/lists"])
def test_a_relative_line_of_a_list_on_a_store_is_taken_from_the_lists_folder(folder):
    """`..` and `.` leave a store's URL as they leave a local path: an object store's listing
    has no `lists/../` folder, and every such image was reported vanished."""
    for line in ("../imgs/cat/1.jpg", "./../imgs/./cat/1.jpg"):
        found = parse_input_line(line, f"{folder}/images.csv")
        assert found == SourceFile(f"{folder[:-6]}/imgs/cat/1.jpg", "../imgs/cat/1.jpg", -1)


@pytest.mark.parametrize("folder", ["s3://b/data//lists", "gs://b/data//lists"])
def test_a_line_of_a_list_on_a_store_keeps_the_double_slash_of_the_lists_folder(folder):
    """A store's key may hold `//` (`data//lists/l.csv`): a line without `.` or `..` names the
    key beside the list, as it did before `..` lines were taken from the folder. normpath
    folded the folder's `//`, and every image of such a list was reported vanished."""
    found = parse_input_line("cat/1.jpg", f"{folder}/images.csv")
    assert found == SourceFile(f"{folder}/cat/1.jpg", "cat/1.jpg", -1)


def test_a_list_on_a_store_names_the_images_beside_its_folder():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/sibling/lists/l.csv", b"../imgs/cat/1.jpg,cat\n")
    fs.pipe("/sibling/imgs/cat/1.jpg", b"x")
    chunks = input_list_chunks("memory://sibling/lists/l.csv")
    try:
        (entry,) = [e for c in chunks for e in read_input_list_chunk(c)]
        assert fs.cat(entry.url) == b"x"
    finally:
        fs.rm("/sibling", recursive=True)


@pytest.mark.parametrize(
    "pattern",
    ["memory://dots/lists/../imgs", "memory://dots/./imgs/", "memory://dots/x/../imgs/*/*.jpg"],
)
def test_an_input_on_a_store_with_dot_dots_lists_what_the_plain_one_does(pattern):
    """`s3://b/lists/../imgs` names `s3://b/imgs`, as `data/../imgs` names `imgs` on disk: a
    store has no `lists/..` folder, and the build found nothing there."""
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({"/dots/imgs/cat/1.jpg": b"x", "/dots/imgs/dog/2.jpg": b"y", "/dots/x/k.jpg": b"z"})
    try:
        task = ListingTask.for_pattern(pattern)
        found = sorted(f.relpath for f in expand_task(task, [".jpg"]))
        plain = ListingTask.for_pattern("memory://dots/imgs")
        assert found == sorted(f.relpath for f in expand_task(plain, [".jpg"]))
        assert found == ["cat/1.jpg", "dog/2.jpg"]
    finally:
        fs.rm("/dots", recursive=True)


def test_an_input_on_a_store_with_dot_dots_is_found_as_the_plain_one():
    """The listing took `.` and `..` out of a store's pattern, and the calls that first ask
    whether a path named outright exists, or which folders a pattern matches, did not:
    `s3://b/lists/../imgs` was still said not to exist, and `s3://b/x/../imgs/*` matched no
    folder, so the check that refuses a pattern leaving class folders out let it by."""
    import fsspec

    from beam_tfrecord.listing import matching_folders

    fs = fsspec.filesystem("memory")
    fs.pipe({"/dots2/imgs/stray.jpg": b"s", "/dots2/imgs/cat/1.jpg": b"x"})
    try:
        for plain, dotted in [("imgs", "x/../imgs"), ("imgs/cat", "./imgs/cat")]:
            found = [f.relpath for f in expand_pattern(f"memory://dots2/{dotted}", EXTS)]
            assert found == [f.relpath for f in expand_pattern(f"memory://dots2/{plain}", EXTS)]
            assert first_match(f"memory://dots2/{dotted}", EXTS) is not None
        folders = matching_folders("memory://dots2/imgs/*")
        assert matching_folders("memory://dots2/x/../imgs/*") == folders
        assert len(folders) == 1
    finally:
        fs.rm("/dots2", recursive=True)


def test_parse_input_line_refuses_bad_lines():
    with pytest.raises(ValueError, match=r"expected `path` or `path,label` .*, got 'a,b,c'"):
        parse_input_line("a,b,c", "/lists/l.csv")


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(
        st.from_regex(r"[a-z]{1,12}/[a-z0-9_]{1,20}\.jpg", fullmatch=True), min_size=0, max_size=60
    ),
    chunk=st.integers(1, 200),
    crlf=st.booleans(),
)
def test_input_list_chunks_read_every_line_once(tmp_path_factory, names, chunk, crlf):
    path = tmp_path_factory.mktemp("list") / "list.csv"
    newline = "\r\n" if crlf else "\n"
    path.write_bytes(("path,label" + newline + newline.join(f"{n},{n[0]}" for n in names)).encode())
    entries = [e for c in input_list_chunks(str(path), chunk) for e in read_input_list_chunk(c)]
    assert [e.relpath for e in entries] == names
    assert [e.label for e in entries] == [n[0] for n in names]


def test_a_byte_order_mark_is_not_part_of_the_first_path(tmp_path):
    """A spreadsheet's "CSV UTF-8" starts with one: its header row was read as an image named
    '\ufeffpath' of the class 'label'."""
    path = tmp_path / "list.csv"
    path.write_bytes(b"\xef\xbb\xbfpath,label\r\ncat/1.jpg,cat\r\n")
    entries = [e for c in input_list_chunks(str(path)) for e in read_input_list_chunk(c)]
    assert [(e.relpath, e.label) for e in entries] == [("cat/1.jpg", "cat")]
    path.write_bytes(b"\xef\xbb\xbfcat/1.jpg,cat\n")
    entries = [e for c in input_list_chunks(str(path)) for e in read_input_list_chunk(c)]
    assert [(e.relpath, e.label) for e in entries] == [("cat/1.jpg", "cat")]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (
            b"cat/1.jpg,cat\ncat/2.jpg,caf\xe9\n",
            "line 2 is not UTF-8 text (byte 0xe9); save the list as UTF-8",
        ),
        (b"# list\n\ndir/my,photo.jpg,cat\n", "line 3: expected `path` or `path,label`"),
        (b"cat/1.jpg,cat\n,apple\n", "line 2: expected `path` or `path,label`"),
    ],
)
def test_a_bad_line_of_an_input_list_is_named_by_its_number(tmp_path, content, says):
    path = tmp_path / "list.csv"
    path.write_bytes(content)
    with pytest.raises(InputListError) as err:
        list(read_input_list_chunk(input_list_chunks(str(path))[0]))
    assert str(err.value) == f"{path}: {says}" or str(err.value).startswith(f"{path}: {says}")


def test_a_bad_line_in_a_later_chunk_is_named_by_the_byte_it_starts_at(tmp_path):
    path = tmp_path / "list.csv"
    path.write_bytes(b"cat/1.jpg\ncat/2.jpg\na,b,c\n")
    chunks = input_list_chunks(str(path), 10)
    assert len(chunks) == 3
    with pytest.raises(InputListError, match=r": the line at byte 20: expected"):
        list(read_input_list_chunk(chunks[2]))


def test_local_bytes_reach_counts_the_files_of_the_suffixes_below_each_pattern(tmp_path):
    for relpath, size in {
        "a/1.jpg": 600,
        "a/x/2.JPG": 600,
        "a/notes.txt": 5000,
        "b/3.png": 300,
    }.items():
        (tmp_path / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relpath).write_bytes(b"x" * size)
    jpg = (".jpg",)
    assert local_bytes_reach([f"{tmp_path}/a/**"], jpg, 1200)  # suffixes of any case
    assert not local_bytes_reach([f"{tmp_path}/a/**"], jpg, 1201)  # notes.txt is not counted
    # A folder named without wildcards, and a file:// URL, as patterns take them.
    assert local_bytes_reach(
        [f"file://{tmp_path}/a/*.jpg", str(tmp_path / "b")], (*jpg, ".png"), 1500
    )
    assert not local_bytes_reach([f"{tmp_path}/a/**"], jpg, 1200, most_files=1)  # it stops counting
    # Or enough files, whatever their bytes: many small images are work enough.
    assert local_bytes_reach([f"{tmp_path}/a/**"], jpg, 10**9, min_files=2)
    assert not local_bytes_reach([f"{tmp_path}/a/**"], jpg, 10**9, min_files=3)
    # A walk that counts files goes on until it has seen that many.
    assert local_bytes_reach([f"{tmp_path}/a/**"], jpg, 10**9, most_files=1, min_files=2)
    assert local_bytes_reach([f"{tmp_path}/missing/**", str(tmp_path / "a/1.jpg")], jpg, 600)
    assert not local_bytes_reach([f"{tmp_path}/missing/**", str(tmp_path / "a/1.jpg")], jpg, 601)


def test_dot_dots_before_a_wildcard_name_the_same_files(tree):
    """`a/../a` is `a`, as `os.path.abspath` has it: a file listed both ways is one input, under
    one name, and the fast local walk lists it."""
    plain = list(expand_pattern(f"{tree}/a/**", EXTS))
    assert plain
    for roundabout in (f"{tree}/a/../a/**", f"{tree}/b/./../a/**", f"{tree}/a/x/..//**"):
        assert list(expand_pattern(roundabout, EXTS)) == plain
    assert list(expand_pattern(f"{tree}/b/../a", EXTS)) == plain  # a folder, no wildcard
    task = ListingTask.for_pattern(f"{tree}/b/../a/*/*.jpg")
    assert (task.pattern, task.base) == (f"{tree}/a/*/*.jpg", f"{tree}/a")


def test_a_file_named_relative_and_absolute_in_an_input_list_has_one_url(tmp_path, monkeypatch):
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    (tmp_path / "imgs" / "cat" / "1.jpg").write_bytes(b"x")
    listing = tmp_path / "imgs" / "list.csv"
    absolute = tmp_path / "imgs" / "cat" / "1.jpg"
    listing.write_text(f"cat/1.jpg\n{absolute}\n./cat/../cat/1.jpg\n{tmp_path}/imgs/./cat/1.jpg\n")
    monkeypatch.chdir(tmp_path)  # the list named by a relative path, as on a command line
    entries = [e for c in input_list_chunks("imgs/list.csv") for e in read_input_list_chunk(c)]
    assert {e.url for e in entries} == {str(absolute)}
    assert [e.relpath for e in entries] == [
        "cat/1.jpg",
        str(absolute).lstrip("/"),
        "cat/1.jpg",
        str(absolute).lstrip("/"),
    ]


def test_a_loop_of_links_is_listed_for_the_build_to_report_and_fails_nothing(tmp_path):
    """Links that lead to each other cannot be followed (ELOOP): one among the images neither
    stops the listing nor is lost. Named as an image, it is listed unsized, as a link to
    nothing is, for the build to report; else it is left out as any other file."""
    import fsspec

    from beam_tfrecord.listing import _subfolders

    root = tmp_path / "loop"
    (root / "c").mkdir(parents=True)
    (root / "c" / "1.jpg").write_bytes(b"x")
    for one, other in (("a", "b"), ("x.jpg", "y.jpg")):
        (root / "c" / one).symlink_to(root / "c" / other)
        (root / "c" / other).symlink_to(root / "c" / one)
    for pattern in ("**", "**/*.jpg", "c/**"):
        whole = sorted(expand_pattern(f"{root}/{pattern}", EXTS))
        assert sorted((s.url.rsplit("/", 1)[1], s.size) for s in whole) == [
            ("1.jpg", 1), ("x.jpg", -1), ("y.jpg", -1)
        ], pattern  # fmt: skip
        parts = _split_fully(ListingTask.for_pattern(f"{root}/{pattern}"), 2)
        assert sorted(s for t in parts for s in expand_task(t, EXTS)) == whole, pattern
    assert _subfolders(fsspec.filesystem("file"), str(root / "c")) == []
