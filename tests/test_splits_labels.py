"""Split assignment and labels: stable, reproducible, and derived only from the relative path."""

import hashlib
import math
import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.labels import ClassMap, LabelRule
from beam_tfrecord.listing import is_hidden
from beam_tfrecord.locations import without_protocol
from beam_tfrecord.planning import _suffix
from beam_tfrecord.splits import assign_split, shuffle_key, unit_interval

SPLITS = (("train", 0.8), ("validation", 0.1), ("test", 0.1))


def test_split_depends_only_on_seed_and_path():
    paths = [f"class{i % 7}/img{i:05d}.jpg" for i in range(5000)]
    first = {p: assign_split(p, SPLITS, 42) for p in paths}
    # Adding and removing other images changes nothing for the rest: each call sees one path.
    more = paths[::2] + [f"new/img{i}.jpg" for i in range(3000)]
    assert all(assign_split(p, SPLITS, 42) == first[p] for p in more if p in first)
    # Another seed gives another assignment.
    other = {p: assign_split(p, SPLITS, 43) for p in paths}
    assert sum(first[p] != other[p] for p in paths) > 1000


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_split_ratios_hold_within_random_spread(seed):
    n = 20_000
    counts = {"train": 0, "validation": 0, "test": 0}
    for i in range(n):
        counts[assign_split(f"d/{i}.png", SPLITS, seed)] += 1
    for name, ratio in SPLITS:
        sigma = math.sqrt(n * ratio * (1 - ratio))
        assert abs(counts[name] - n * ratio) < 5 * sigma, (name, counts)


def test_zero_ratio_split_gets_nothing_and_single_split_gets_all():
    splits = (("train", 0.5), ("unused", 0.0), ("test", 0.5))
    assert {assign_split(str(i), splits, 0) for i in range(2000)} == {"train", "test"}
    assert {assign_split(str(i), (("all", 1.0),), 0) for i in range(100)} == {"all"}


def test_shuffle_key_is_independent_of_split_hash():
    keys = [shuffle_key(f"{i}.jpg", 0) for i in range(1000)]
    assert len(set(keys)) == 1000
    assert all(0 <= k < 2**64 for k in keys)
    assert shuffle_key("a.jpg", 0) != shuffle_key("a.jpg", 1)


@pytest.mark.parametrize(
    ("spec", "url", "relpath", "expected"),
    [
        ("dir", "/data/fruits/apple/01.jpg", "apple/01.jpg", "apple"),
        ("dir", "gs://bucket/fruits/banana/x.png", "banana/x.png", "banana"),
        ("dir", "/data/flat/x.png", "x.png", "flat"),
        ("regex:([a-z]+)\\d+\\.jpg$", "/d/apple01.jpg", "apple01.jpg", "apple"),
        ("regex:(?P<id>\\d+)_(?P<label>[a-z]+)", "/d/7_cat.png", "7_cat.png", "cat"),
        ("regex:^([a-z]+)/", "/d/x/dog/1.png", "dog/1.png", "dog"),
        ("regex:([a-z]+)\\d+\\.jpg$", "/d/IMG_0001.JPG", "IMG_0001.JPG", None),
        ("regex:(cat)?dog", "/d/dog.png", "dog.png", None),  # optional group that did not take part
        ("none", "/d/a/b.jpg", "a/b.jpg", None),
    ],
)
def test_label_rules(spec, url, relpath, expected):
    assert LabelRule(spec).label(url, relpath) == expected


def test_label_rule_refuses_bad_specs():
    with pytest.raises(ValueError, match="no capture group"):
        LabelRule("regex:[a-z]+")
    with pytest.raises(ValueError, match="folder"):
        LabelRule("folder")  # not a rule


def test_class_map_sorted_and_stable():
    classes = ClassMap.from_labels(["pear", "apple", "pear", "fig"])
    assert classes.names == ("apple", "fig", "pear")
    assert [classes.id_of(n) for n in ("apple", "fig", "pear", "kiwi")] == [0, 1, 2, None]
    assert classes.to_text() == "apple\nfig\npear\n"
    with pytest.raises(ValueError, match="repeat"):
        ClassMap(["a", "a"])


# The planner's per-image fast paths, held to the general rules they stand for on any path.
_paths = st.text(alphabet="ab./:\\é", max_size=24)


@settings(max_examples=2000, deadline=None)
@given(_paths)
def test_a_folder_label_is_posixpaths_parent_of_the_path_without_its_protocol(url):
    expected = posixpath.basename(posixpath.dirname(without_protocol(url))) or None
    assert LabelRule("dir").label(url, "x") == expected


@settings(max_examples=2000, deadline=None)
@given(_paths)
def test_hidden_means_some_part_of_the_path_starts_with_a_dot(relpath):
    expected = any(part.startswith(".") for part in relpath.split("/") if part)
    assert is_hidden(relpath) == expected


@settings(max_examples=2000, deadline=None)
@given(_paths)
def test_a_planned_suffix_is_posixpaths_extension_without_its_dot(relpath):
    assert _suffix(relpath) == posixpath.splitext(relpath)[1].lstrip(".").lower()


@given(st.integers(min_value=0, max_value=2**32), st.text(max_size=40))
def test_split_and_shuffle_hashes_are_salted_blake2b_of_seed_and_path(seed, key):
    # The digests every dataset ever built depends on: a faster hasher must give these.
    message = f"{seed}\x00{key}".encode("utf-8", "surrogatepass")
    shuffle_hash = hashlib.blake2b(message, digest_size=8, person=b"bt-shufl").digest()
    assert shuffle_key(key, seed) == int.from_bytes(shuffle_hash, "big")
    split_hash = hashlib.blake2b(message, digest_size=8, person=b"bt-split").digest()
    assert unit_interval(seed, key) == int.from_bytes(split_hash, "big") / 2.0**64
