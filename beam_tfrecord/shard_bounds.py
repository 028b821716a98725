"""Which shards of a finished build left the size bounds, and why: the summary names them.

Every shard is at most `--max-shard-size` and, but for a split's last, at least
`--min-shard-size`, when its records were planned on their exact sizes and written as planned.
A shard leaves the bounds only when one of those does not hold, and the reason is one of a few.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from beam_tfrecord.config import format_size

__all__ = ["OutOfBounds", "shards_out_of_bounds"]

# Why a shard is outside the bounds: the first that applies.
# Shards are cut at equal byte offsets of a split's shuffled records (`sharding.num_shards`),
# which can keep every shard inside bounds at least a record or two apart: with records this
# large beside the bounds' gap, some shards take one record more or fewer than others.
PLANNED_SO = (
    "planned so: their split's records are too large beside the bounds' gap (shards are cut at "
    "equal byte offsets, each within about one record of the same size: bounds two of the "
    "largest records apart keep every shard inside)"
)
ESTIMATED = "planned on estimated sizes; --transformed-sizes measure keeps the bounds"
SHRANK = "images were left out or re-encoded smaller when written (report.jsonl)"
GREW = "images grew when re-encoded so that TensorFlow decodes them (report.jsonl)"


@dataclass(frozen=True)
class OutOfBounds:
    """A shard outside the bounds: its file, its size and planned size, the bound it passes."""

    file: str
    bytes: int
    planned_bytes: int
    over: bool  # over the maximum; else under the minimum
    why: str

    def describe(self, min_size: int, max_size: int) -> str:
        bound = f"over {format_size(max_size)}" if self.over else f"under {format_size(min_size)}"
        planned = "" if self.why == PLANNED_SO else f", planned {format_size(self.planned_bytes)}"
        return f"{self.file} ({format_size(self.bytes)}, {bound}{planned})"


def shards_out_of_bounds(
    shards: Sequence[Mapping[str, Any]],
    min_size: int,
    max_size: int,
    *,
    estimated: bool = False,
) -> list[OutOfBounds]:
    """The shards outside the bounds, by file name, each with why.

    Args:
        shards: the manifest's `shards` (file, split, index, bytes, planned_bytes).
        min_size, max_size: the build's bounds.
        estimated: whether transformed images were planned on a size model
            (`transformed_sizes: estimate`) rather than measured.
    """
    last: dict[str, int] = {}
    for shard in shards:
        last[shard["split"]] = max(last.get(shard["split"], -1), shard["index"])
    found = []
    for shard in sorted(shards, key=lambda s: s["file"]):
        written, planned = shard["bytes"], shard.get("planned_bytes", shard["bytes"])
        if written > max_size:
            over, out_planned = True, planned > max_size
        elif written < min_size and shard["index"] < last[shard["split"]]:
            over, out_planned = False, planned < min_size
        else:
            continue
        if out_planned:
            # num_shards keeps every cut inside the bounds when a record is small beside them.
            why = PLANNED_SO
        elif estimated:
            why = ESTIMATED
        else:
            why = SHRANK if written < planned else GREW
        found.append(OutOfBounds(shard["file"], written, planned, over, why))
    return found
