"""Reading a Structured Streaming checkpoint: the source offsets of the last committed batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def last_committed_batch(checkpoint: Path) -> int | None:
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids) if ids else None


def last_planned_batch(checkpoint: Path) -> int | None:
    """The last batch whose offsets are written (Spark writes them before the batch runs)."""
    offsets = checkpoint / "offsets"
    ids = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()] if offsets.is_dir() else []
    return max(ids) if ids else None


def committed_offsets(checkpoint: Path) -> list[dict[str, int | str]] | None:
    """Per source, in query order, the end offsets of the last committed batch; None if nothing committed.

    An offsets file is `v1`, a metadata line, then one JSON offset per source.
    """
    batch = last_committed_batch(checkpoint)
    if batch is None:
        return initial_offsets(checkpoint)
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return [_partitions(json.loads(line)) for line in lines[2:] if line.strip()]


def initial_offsets(checkpoint: Path) -> list[dict[str, int | str]] | None:
    """Per source, the offsets a query that committed nothing started from, when each source recorded them
    (`sources/<n>/0`: Spark's own log source does, in real-time mode too, whose first checkpoint comes a trigger
    interval after its start); None otherwise (dsflow's sources record none: such a query carries nothing)."""
    folder = checkpoint / "sources"
    found = sorted((int(p.name), p / "0") for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []
    if not found or [n for n, _ in found] != list(range(len(found))) or not all(f.is_file() for _, f in found):
        return None
    lines = [f.read_text(errors="replace").splitlines() for _, f in found]
    return [_partitions(json.loads(text[-1])) for text in lines]


def _partitions(offset: dict[str, Any]) -> dict[str, int | str]:
    """{partition: offset} of one source's offset: dsflow's sources write it so; Spark's own log source (real-time
    mode, adapters/spark/realtime.py) writes {topic: {partition: offset}}, one topic a source."""
    if len(offset) == 1 and isinstance(next(iter(offset.values())), dict):
        offset = next(iter(offset.values()))
    return {str(k): _offset(v) for k, v in offset.items()}


def _offset(value: Any) -> int | str:
    """An offset (a number), or a source's position kept as text (a shard's 'after:<sequence>')."""
    return int(value) if isinstance(value, int) or str(value).isdigit() else str(value)
