"""Hypothesis strategies for the metadata a build moves: listed files and planned images."""

from __future__ import annotations

from hypothesis import strategies as st

from beam_tfrecord.entries import ImageEntry
from beam_tfrecord.listing import SourceFile

__all__ = ["entries", "sources", "texts"]

# No lone surrogates: the compact encodings take them (file names whose bytes are not UTF-8),
# which their own tests cover, but str equality after a round trip needs them valid here.
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)

entries = st.builds(
    ImageEntry,
    url=texts,
    relpath=texts,
    source_size=st.integers(-1, 2**40),
    split=texts,
    shuffle_key=st.integers(0, 2**64 - 1),
    label=st.none() | texts,
    class_id=st.none() | st.integers(0, 2**31),
    record_size=st.integers(0, 2**40),
    source_sha256=st.sampled_from(["", "ab" * 32]),
    prepared=st.just("") | texts,
)

sources = st.builds(SourceFile, texts, texts, st.integers(-1, 2**40), st.none() | texts)
