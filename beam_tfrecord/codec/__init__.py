"""The TFRecord codec, free of Beam and Pillow: framing, compression, Examples, record layout, indexes."""
