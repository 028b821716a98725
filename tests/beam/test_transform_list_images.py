"""ListImages alone: every matching file once, whatever the patterns, on the workers or here."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord.beam.transforms import ListImages
from beam_tfrecord.listing import SourceFile

pytestmark = pytest.mark.slow

EXTENSIONS = (".jpg", ".jpeg", ".png")


@pytest.fixture
def tree(memfs, put_images):
    """Images in class folders two levels deep, plus files no listing may return."""
    images = put_images("/src", {"cat": 4, "dog": 3})
    images |= {f"deep/{k}": v for k, v in put_images("/src/deep", {"owl": 3}, seed=1).items()}
    memfs.pipe_file("/src/fox/Fox.PNG", b"png-bytes")  # suffixes match whatever their case
    images["fox/Fox.PNG"] = b"png-bytes"
    memfs.pipe_file("/src/cat/notes.txt", b"not an image")
    memfs.pipe_file("/src/cat/.hidden.jpg", b"hidden")
    memfs.pipe_file("/src/.thumbs/t.jpg", b"hidden folder")
    memfs.pipe_file("/elsewhere/x.jpg", b"outside every pattern")
    return images


def _sources(images: dict[str, bytes], base: str = "/src", relative_to: str = "/src"):
    """The SourceFiles of the images under `base`, relative to `relative_to`."""
    prefix = relative_to.rstrip("/") + "/"
    found = []
    for relpath, data in images.items():
        path = f"/src/{relpath}"
        if path.startswith(base.rstrip("/") + "/"):
            found.append(SourceFile(f"memory://{path}", path[len(prefix) :], len(data)))
    return found


@pytest.mark.parametrize("listing", ["pipeline", "launcher"])
@pytest.mark.parametrize("pattern", ["memory://src/**", "memory://src", "memory://src/"])
def test_one_pattern_lists_every_image_once_with_its_size(pipeline, tree, pattern, listing):
    with pipeline as p:
        listed = (p | ListImages([pattern], EXTENSIONS, listing=listing))[
            "sources"
        ] | "Files" >> beam.FlatMap(iter)
        assert_that(listed, equal_to(_sources(tree)))


@pytest.mark.parametrize("listing", ["pipeline", "launcher"])
def test_overlapping_patterns_list_a_file_once_under_its_smallest_relative_path(
    pipeline, tree, listing
):
    patterns = [
        "memory://src/cat/*.jpg",  # cat images again, relative to src/cat: "cat_0000.jpg"
        "memory://src/**",
        "memory://src/*/*.jpg",  # everything but deep/ again
        "memory://src/deep/**",  # deep/ again, relative to src/deep: "owl/owl_0000.jpg"
    ]
    # Every file once; of its relative paths the smallest ("cat/cat_0000.jpg" < "cat_0000.jpg",
    # "deep/owl/..." < "owl/..."), so the same file never gets two labels or two splits.
    with pipeline as p:
        listed = (p | ListImages(patterns, EXTENSIONS, listing=listing))[
            "sources"
        ] | "Files" >> beam.FlatMap(iter)
        assert_that(listed, equal_to(_sources(tree)))


def test_disjoint_patterns_list_the_union(pipeline, tree):
    patterns = ["memory://src/cat/*.jpg", "memory://src/deep/**"]
    expected = _sources(tree, "/src/cat", "/src/cat") + _sources(tree, "/src/deep", "/src/deep")
    assert len(expected) == 7
    with pipeline as p:
        assert_that(
            (p | ListImages(patterns, EXTENSIONS))["sources"] | "Files" >> beam.FlatMap(iter),
            equal_to(expected),
        )


def test_a_pattern_that_matches_nothing_adds_nothing_on_the_workers(pipeline, tree):
    # On the workers a pattern that matches nothing lists nothing, and the others still list:
    # a build refuses such a pattern before its pipeline starts (preflight), naming it.
    patterns = ["memory://src/cat/*.jpg", "memory://nowhere/**", "memory://src/cat/missing.jpg"]
    with pipeline as p:
        listed = (p | ListImages(patterns, EXTENSIONS))["sources"] | "Files" >> beam.FlatMap(iter)
        assert_that(listed, equal_to(_sources(tree, "/src/cat", "/src/cat")))


def test_a_pattern_that_matches_nothing_fails_a_listing_here_naming_it(tree):
    pipeline = beam.Pipeline()
    with pytest.raises(FileNotFoundError, match=r"memory://src/cat/missing\.jpg"):
        _ = pipeline | ListImages(["memory://src/cat/missing.jpg"], EXTENSIONS, listing="launcher")


def test_no_extension_matches_lists_nothing(pipeline, tree):
    with pipeline as p:
        assert_that(
            (p | ListImages(["memory://src/**"], (".webp",)))["sources"]
            | "Files" >> beam.FlatMap(iter),
            equal_to([]),
        )


def test_an_input_list_gives_each_file_once_with_its_label_and_an_unknown_size(
    pipeline, memfs, tree
):
    # Relative paths are from the list's folder; a file listed twice is one input.
    lines = ["path,label", "cat/cat_0000.jpg,cat", "dog/dog_0001.jpg,", "# a comment", ""]
    lines += ["cat/cat_0000.jpg,cat", "deep/owl/owl_0002.jpg,bird", "gone/missing.jpg,ghost"]
    memfs.pipe_file("/src/list.csv", "\n".join(lines).encode())
    expected = [
        SourceFile("memory://src/cat/cat_0000.jpg", "cat/cat_0000.jpg", -1, "cat"),
        SourceFile("memory://src/dog/dog_0001.jpg", "dog/dog_0001.jpg", -1, None),
        SourceFile("memory://src/deep/owl/owl_0002.jpg", "deep/owl/owl_0002.jpg", -1, "bird"),
        # Listing reads no image: a missing one is planning's to find (PlanImages).
        SourceFile("memory://src/gone/missing.jpg", "gone/missing.jpg", -1, "ghost"),
    ]
    with pipeline as p:
        listed = (p | ListImages([], EXTENSIONS, input_list="memory://src/list.csv"))[
            "sources"
        ] | "Files" >> beam.FlatMap(iter)
        assert_that(listed, equal_to(expected))


def test_a_file_an_input_list_labels_two_ways_is_reported_not_guessed(pipeline, memfs, tree):
    """Lines that agree are one input; a line without a label defers to one with it; lines that
    disagree leave the file out, reported with both labels (choosing one would train on a guess)."""
    lines = ["cat/cat_0000.jpg,zebra", "cat/cat_0000.jpg,aardvark", "cat/cat_0001.jpg"]
    lines += ["cat/cat_0001.jpg,cat", "dog/dog_0001.jpg,dog", "./dog/dog_0001.jpg,dog"]
    memfs.pipe_file("/src/list.csv", "\n".join(lines).encode())
    with pipeline as p:
        listed = p | ListImages([], EXTENSIONS, input_list="memory://src/list.csv")
        assert_that(
            listed["sources"] | "Files" >> beam.FlatMap(iter),
            equal_to(
                [
                    SourceFile("memory://src/cat/cat_0001.jpg", "cat/cat_0001.jpg", -1, "cat"),
                    SourceFile("memory://src/dog/dog_0001.jpg", "dog/dog_0001.jpg", -1, "dog"),
                ]
            ),
            label="sources",
        )
        assert_that(
            listed["report"]
            | beam.Map(lambda e: (e.url, e.relpath, str(e.reason), e.message, e.action)),
            equal_to(
                [
                    (
                        "memory://src/cat/cat_0000.jpg",
                        "cat/cat_0000.jpg",
                        "conflicting_labels",
                        "the input list gives it 2 labels ('aardvark', 'zebra'); give it one",
                        "skipped",
                    )
                ]
            ),
            label="report",
        )
