"""Runnable pipeline entry points; the logic lives in the beam_tfrecord package."""
