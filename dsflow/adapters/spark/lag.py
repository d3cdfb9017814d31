"""How far a running query is behind its sources, in the unit each store has (its `spark` facet's `lag_reader`):

    records     a log whose offsets count records: the log's end offset minus the offset the last micro-batch read
                up to, per partition ("lag", and "lag_records" in all)
    millis      a log whose positions are not counts (sequence numbers): the age of the oldest record the
                query has not read yet, per shard, 0 when none waits ("lag_millis", and "lag_max_millis")
    wal_bytes   a change stream: the bytes of write-ahead log written since the last change the query read
                ("lag_wal_bytes"); it also counts the log of tables the stream does not read

The driver asks every few seconds and writes the answer into its status file, so `dsflow status`, the supervisor's
metrics and the server read it without asking anyone. A source whose store has no lag reader is not measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from dsflow.adapters.spark.facets import for_kind
from dsflow.adapters.spark.spec import QuerySpec, SourceSpec

LAG_EVERY_SECONDS = 5.0
SUMMARY: dict[str, tuple[str, str, Callable[[Iterable[int]], int]]] = {
    "records": ("lag", "lag_records", sum), "millis": ("lag_millis", "lag_max_millis", max),
    "wal_bytes": ("lag_wal_bytes", "lag_total_wal_bytes", sum)}
"""unit -> (the per-source field {topic: {partition: n}}, the query's total field, how partitions add up)."""


class LagProbe:
    """Measures lag for a driver; the clients its readers open live as long as the driver and are closed by
    `close`."""

    def __init__(self, spec: QuerySpec) -> None:
        self.spec = spec
        self._readers: dict[str, Any] = {}
        self.last: dict[str, Any] = {}
        self._at = 0.0

    def measure(self, progress_sources: list[dict[str, Any]]) -> dict[str, Any]:
        """{"lag": {topic: {partition: records}}, "lag_records": total} and the like for the other units (SUMMARY),
        at most every LAG_EVERY_SECONDS; {} for a query with no measured source or before its first micro-batch."""
        if time.monotonic() - self._at < LAG_EVERY_SECONDS:
            return self.last
        self._at = time.monotonic()
        read = _read_offsets(self.spec, progress_sources)
        if not read:
            return self.last
        by_unit: dict[str, dict[str, dict[str, int]]] = {}
        for source, offsets in read:
            reader = self._reader(source.kind)
            behind = reader.behind(source, offsets)
            if behind:
                by_unit.setdefault(reader.unit, {})[source.topic] = {str(p): max(0, int(n))
                                                                     for p, n in sorted(behind.items())}
        self.last = {}
        for unit, per_topic in by_unit.items():
            field, total, combine = SUMMARY[unit]
            self.last[field] = per_topic
            self.last[total] = combine(n for per in per_topic.values() for n in per.values())
        return self.last

    def _reader(self, kind: str) -> Any:
        if kind not in self._readers:
            facet = for_kind(kind)
            assert facet is not None  # a source's kind
            self._readers[kind] = facet.lag_reader()
        return self._readers[kind]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


def _read_offsets(spec: QuerySpec, progress_sources: list[dict[str, Any]]) -> list[tuple[SourceSpec, dict]]:
    """(source, the offset its last micro-batch read up to) for the sources whose lag is measured. Spark reports
    its sources in the order the spec lists them (the order the checkpoint's offset log keeps: see executors'
    stop offsets)."""
    streamed = [s for s in spec.sources if not s.lookup]  # a table read whole per micro-batch is no streaming source
    if len(progress_sources) != len(streamed):
        return []
    found = []
    for source, progress in zip(streamed, progress_sources, strict=False):
        end = progress.get("endOffset")
        if not end or not _measured(source.kind):
            continue
        offsets = json.loads(end) if isinstance(end, str) else end
        if isinstance(offsets, dict):
            found.append((source, offsets))
    return found


def _measured(kind: str) -> bool:
    facet = for_kind(kind)
    return facet is not None and facet.lag_reader() is not None
