"""The latency a query's status reports: of a micro-batch query, from Spark's streaming progress (a
StreamingQueryProgress as a dict, e.g. `query.lastProgress`), what it really carries, nothing estimated; of a
real-time query, from its records (below).

- `batch_latency_ms`: the micro-batch's `durationMs.triggerExecution`, the time Spark took from the batch's
  start to its commit. Unknown in real-time mode, where that figure is the length of the long-running real-time
  batch (about its `trigger.interval`), not a latency; the installed Spark's progress has no other latency figure
  for that mode.
- `event_time_lag_ms`: the batch's end (`timestamp` + triggerExecution) minus the newest event time it read
  (`eventTime.max`), and `oldest_event_lag_ms` the same with the oldest one (`eventTime.min`). Spark reports event
  times only for queries with a watermark (dsflow: windows and interval joins); otherwise unknown.
- `latency_batch_id`: the batch the figures are of: the newest one that read records (a batch that read none,
  such as a watermark-advancing one, has no event time and no latency of records).

A query in real-time mode reports the latency of its records instead (`record_latency_fields`): each record it
writes carries its source record's timestamp in the header SOURCE_TIMESTAMP_HEADER (adapters/spark/frames.py), and
the driver reads the records its sink received in the last RECORD_WINDOW_SECONDS (its sink facet's
`latency_probe`): the latency of a record is its timestamp in the sink (when Spark's producer made it) minus that
header, from the source record's timestamp to the sink's write. `record_latency_p50_ms`, `record_latency_p99_ms`
and `record_latency_max_ms` are over those records (nearest rank), `record_latency_samples` their count.

Unknown is None (null in JSON, left out of the metrics), never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

FIELDS = ("latency_batch_id", "batch_latency_ms", "event_time_lag_ms", "oldest_event_lag_ms")
UNKNOWN: dict[str, int | None] = dict.fromkeys(FIELDS)
SOURCE_TIMESTAMP_HEADER = "dsflow.source.timestamp"
"""The header of a real-time query's records: the source record's timestamp, epoch milliseconds as decimal text."""
RECORD_FIELDS = ("record_latency_p50_ms", "record_latency_p99_ms", "record_latency_max_ms", "record_latency_samples")
RECORD_WINDOW_SECONDS = 60.0
"""The records a real-time query's latency is of: those its sink received this long before the status."""


def _millis(stamp: Any) -> int | None:
    """Milliseconds since the epoch of Spark's progress timestamps ('2026-11-30T15:20:00.123Z', UTC)."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return round(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _trigger_ms(progress: Mapping[str, Any]) -> int | None:
    value = (progress.get("durationMs") or {}).get("triggerExecution")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_records(progress: Mapping[str, Any]) -> bool:
    return int(progress.get("numInputRows") or 0) > 0


def latency_fields(progress: Mapping[str, Any] | None, realtime: bool = False) -> dict[str, int | None]:
    """The latency of one batch's progress (module docstring); every field None when it is not known."""
    if progress is None or not read_records(progress):
        return dict(UNKNOWN)
    took, start = _trigger_ms(progress), _millis(progress.get("timestamp"))
    end = start + took if start is not None and took is not None else None
    times = progress.get("eventTime") or {}
    newest, oldest = _millis(times.get("max")), _millis(times.get("min"))
    return {"latency_batch_id": progress.get("batchId"),
            "batch_latency_ms": None if realtime else took,
            "event_time_lag_ms": end - newest if end is not None and newest is not None else None,
            "oldest_event_lag_ms": end - oldest if end is not None and oldest is not None else None}


def newest_with_records(progresses: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest progress (the list is oldest first) of a batch that read records."""
    return next((p for p in reversed(progresses) if read_records(p)), None)


class NewestBatch:
    """What a status writer keeps between its writes: the newest progress with records it has seen. The query's
    recent progress (costly: a conversion per batch) is read only when the last progress read nothing and batches
    were missed since the last look (the first look included)."""

    def __init__(self, realtime: bool = False) -> None:
        self.realtime = realtime
        self.progress: Mapping[str, Any] | None = None
        self.looked_at: int | None = None

    def fields(self, last: Mapping[str, Any] | None,
               recent: Callable[[], Sequence[Mapping[str, Any]]]) -> dict[str, int | None]:
        if last:
            batch = int(last.get("batchId", -1))
            if read_records(last):
                self.progress = last
            elif self.looked_at is None or batch > self.looked_at + 1:
                self.progress = newest_with_records(recent()) or self.progress
            self.looked_at = batch
        return latency_fields(self.progress, self.realtime)


def nearest_rank(ordered: Sequence[int], fraction: float) -> int:
    """The value at `fraction` (0 < fraction <= 1) of an ascending, non-empty list, by nearest rank."""
    rank = max(1, -(-len(ordered) * round(fraction * 1000) // 1000))
    return ordered[min(rank, len(ordered)) - 1]


def record_latency_fields(latencies_ms: Sequence[int]) -> dict[str, int | None]:
    """p50, p99 and max of records' latencies (module docstring), and their count; None for each with no record."""
    if not latencies_ms:
        return {**dict.fromkeys(RECORD_FIELDS[:-1]), "record_latency_samples": 0}
    ordered = sorted(latencies_ms)
    return {"record_latency_p50_ms": nearest_rank(ordered, 0.5), "record_latency_p99_ms": nearest_rank(ordered, 0.99),
            "record_latency_max_ms": ordered[-1], "record_latency_samples": len(ordered)}
