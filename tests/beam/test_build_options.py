"""BuildOptions: Beam's options for a build, each view made once, the values what Beam's are."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
)

from beam_tfrecord.beam.pipeline import BuildOptions, build
from beam_tfrecord.config import BuildConfig

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "fruits"

FLAGS = ["--runner=DirectRunner", "--direct_num_workers=3", "--no_pipeline_type_check"]


def test_each_view_is_made_once_and_reads_what_beams_own_views_read():
    options = BuildOptions(FLAGS)
    standard = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is standard
    plain = PipelineOptions(FLAGS)
    for cls in (StandardOptions, DirectOptions, TypeOptions):
        assert vars(options.view_as(cls)._visible_options) == vars(
            plain.view_as(cls)._visible_options
        )
    assert options.view_as(DirectOptions).direct_num_workers == 3
    assert options.view_as(TypeOptions).pipeline_type_check is False
    assert options.get_all_options() == plain.get_all_options()


def test_a_value_set_through_one_view_is_seen_through_every_other():
    options = BuildOptions(FLAGS)
    options.view_as(StandardOptions).runner = "DataflowRunner"  # as DataflowRunner sets job names
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    assert options.get_all_options()["runner"] == "DataflowRunner"
    # A view made from a view is Beam's own, over the same values.
    assert options.view_as(TypeOptions).view_as(StandardOptions).runner == "DataflowRunner"


def test_options_pickle_without_their_views_and_make_them_again():
    options = BuildOptions(FLAGS)
    options.view_as(StandardOptions).runner = "SomeRunner"
    restored = pickle.loads(pickle.dumps(options))
    assert "_views" not in restored.__dict__
    assert restored.view_as(StandardOptions).runner == "SomeRunner"
    assert restored.view_as(StandardOptions) is restored.view_as(StandardOptions)
    assert restored.view_as(DirectOptions).direct_num_workers == 3


@pytest.mark.slow
def test_a_build_makes_a_view_of_its_options_once_per_class_not_once_per_use(tmp_path, monkeypatch):
    """Beam asked a build's options for some 450 views, each a new argparse parser over the flags
    (a fifth of a second before any image was listed); now one per class."""
    made: list[type] = []
    original = PipelineOptions.__init__

    def counting(self, *args, **kwargs):
        made.append(type(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(PipelineOptions, "__init__", counting)
    source = tmp_path / "fruits"
    shutil.copytree(SAMPLES, source)
    config = BuildConfig.from_settings(
        {"inputs": [f"{source}/**"], "output": str(tmp_path / "out"), "min_shard_size": "20KB"}
    )
    result = build(config)
    assert result.manifest["inputs"]["written"] > 0
    views = [cls for cls in made if cls is not BuildOptions]
    # Each view class once; Beam's runner also makes a few options objects of its own.
    assert len(views) < 40, f"{len(views)} options objects made"
    assert made.count(TypeOptions) <= 2
