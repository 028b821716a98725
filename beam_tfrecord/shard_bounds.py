"""Which shards of a finished build left the size bounds, and why: the summary names them.

Every shard is at most `--max-shard-size` and, but for a split's last, at least
`--min-shard-size`, when its records were planned on their exact sizes and written as planned.
A shard leaves the bounds only when one of those does not hold, and the reason is one of a few.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecord.config import format_size

__all__ = ["shards_out_of_bounds"]


def shards_out_of_bounds(
    shards: Sequence[Mapping[str, Any]],
    min_size: int,
    max_size: int,
    *,
    estimated: bool = False,
) -> list[str]:
    """One description per shard outside the bounds: its name, size, the bound and why.

    Args:
        shards: the manifest's `shards` (file, split, index, bytes, planned_bytes).
        min_size, max_size: the build's bounds.
        estimated: whether transformed images were planned on a size model
            (`transformed_sizes: estimate`) rather than measured.
    """
    last = {}
    for shard in shards:
        last[shard["split"]] = max(last.get(shard["split"], -1), shard["index"])
    found = []
    for shard in sorted(shards, key=lambda s: s["file"]):
        written, planned = shard["bytes"], shard.get("planned_bytes", shard["bytes"])
        if written > max_size:
            bound, out_planned = f"over {format_size(max_size)}", planned > max_size
        elif written < min_size and shard["index"] < last[shard["split"]]:
            bound, out_planned = f"under {format_size(min_size)}", planned < min_size
        else:
            continue
        found.append(
            f"{shard['file']} ({format_size(written)}, {bound}: "
            f"{_why(written, planned, out_planned, estimated)})"
        )
    return found


def _why(written: int, planned: int, out_planned: bool, estimated: bool) -> str:
    if out_planned:
        # num_shards keeps every cut inside the bounds when a record is small beside them.
        return "planned so, as its split's records are too large for bounds this close"
    if estimated:
        return (
            f"planned at {format_size(planned)} on estimated sizes; "
            "--transformed-sizes measure keeps the bounds"
        )
    if written < planned:
        return (
            f"planned at {format_size(planned)}; images were left out or re-encoded smaller "
            "when written (report.jsonl)"
        )
    return (
        f"planned at {format_size(planned)}; images grew when re-encoded so that TensorFlow "
        "decodes them (report.jsonl)"
    )
