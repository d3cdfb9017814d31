"""How far a running query is behind its log sources: per partition, the log's end offset minus the offset the
query's last micro-batch read up to. The driver asks the store every few seconds and writes the answer into its
status file, so `dsflow status`, the supervisor's metrics and the server read it without asking anyone. A store
whose offsets are counts of records measures its end offsets (its `spark` facet's `lag_reader`); other sources
are not measured.
"""

from __future__ import annotations

import json
import time
from typing import Any

from dsflow.adapters.spark.facets import for_kind
from dsflow.adapters.spark.spec import QuerySpec

LAG_EVERY_SECONDS = 5.0


class LagProbe:
    """Measures lag for a driver; the clients its readers open live as long as the driver and are closed by
    `close`."""

    def __init__(self, spec: QuerySpec) -> None:
        self.spec = spec
        self._readers: dict[str, Any] = {}
        self.last: dict[str, Any] = {}
        self._at = 0.0

    def measure(self, progress_sources: list[dict[str, Any]]) -> dict[str, Any]:
        """{"lag": {topic: {partition: records}}, "lag_records": total}, at most every LAG_EVERY_SECONDS; {} for a
        query with no measured source or before its first micro-batch."""
        if time.monotonic() - self._at < LAG_EVERY_SECONDS:
            return self.last
        self._at = time.monotonic()
        read = _read_offsets(self.spec, progress_sources)
        if not read:
            return self.last
        lag: dict[str, dict[str, int]] = {}
        kinds = {source.topic: source.kind for source in self.spec.sources}
        for topic, (config, offsets) in read.items():
            ends = self._reader(kinds[topic]).ends(config, topic)
            lag[topic] = {str(p): max(0, end - int(offsets.get(str(p), 0))) for p, end in sorted(ends.items())}
        self.last = {"lag": lag, "lag_records": sum(v for per in lag.values() for v in per.values())}
        return self.last

    def _reader(self, kind: str) -> Any:
        if kind not in self._readers:
            self._readers[kind] = for_kind(kind).lag_reader()
        return self._readers[kind]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


def _read_offsets(spec: QuerySpec, progress_sources: list[dict[str, Any]]) -> dict[str, tuple[dict, dict]]:
    """topic -> (client config, {partition: offset read up to}) for the sources whose lag is measured. Spark
    reports its sources in the order the spec lists them (the order the checkpoint's offset log keeps: see
    executors' stop offsets)."""
    if len(progress_sources) != len(spec.sources):
        return {}
    found = {}
    for source, progress in zip(spec.sources, progress_sources):
        end = progress.get("endOffset")
        if not end or not _measured(source.kind):
            continue
        offsets = json.loads(end) if isinstance(end, str) else end
        if isinstance(offsets, dict):
            found[source.topic] = (source.client_config, offsets)
    return found


def _measured(kind: str) -> bool:
    facet = for_kind(kind)
    return facet is not None and facet.lag_reader() is not None
