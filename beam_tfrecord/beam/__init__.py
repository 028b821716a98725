"""The Beam shell: composite transforms that wire the pure modules together, and the build pipeline."""
