"""Micro-batches hand over exactly: each one starts where the one planned before it ended.

Spark's offset log hands a batch's end over as the next batch's start. The streaming readers of every store
(of logs' partitions and shards, of change streams) check it anyway, on the driver, each time a batch is planned:
a broken hand-over (an offset log edited or mixed up with another source's) fails the query with DSF-E709 instead
of skipping or reading records twice in silence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsflow.errors import DsflowError

Planned = tuple[dict, dict]


def check_continues(previous: Planned | None, start: Mapping[str, Any], end: Mapping[str, Any], what: str) -> Planned:
    """DSF-E709 unless `start` equals the previous batch's end at every key of that end (a partition, shard or
    LSN), or this is the same batch planned again; returns what to pass as `previous` for the next batch."""
    planned = (dict(start), dict(end))
    if previous is None or planned == previous:
        return planned
    moved = {key: (before, start.get(key)) for key, before in previous[1].items() if start.get(key) != before}
    if moved:
        detail = ", ".join(f"{key}: previous end {a}, this start {b}" for key, (a, b) in sorted(moved.items()))
        raise DsflowError("DSF-E709", f"micro-batch offsets of {what} do not continue: {detail}",
                          hint="the checkpoint's offset log was changed or belongs to another source; restart the "
                               "query from a known position ('start.position')")
    return planned
