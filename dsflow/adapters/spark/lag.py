"""How far a running query is behind its Kafka sources: per partition, the topic's end offset minus the offset the
query's last micro-batch read up to. The driver asks the broker every few seconds and writes the answer into its
status file, so `dsflow status`, the supervisor's metrics and the server read it without asking anyone.
"""

from __future__ import annotations

import json
import time
from typing import Any

from dsflow.adapters.spark.spec import QuerySpec

LAG_EVERY_SECONDS = 5.0


class LagProbe:
    """Measures lag for a driver; the consumers it opens live as long as the driver and are closed by `close`."""

    def __init__(self, spec: QuerySpec) -> None:
        self.spec = spec
        self._consumers: dict[str, Any] = {}
        self.last: dict[str, Any] = {}
        self._at = 0.0

    def measure(self, progress_sources: list[dict[str, Any]]) -> dict[str, Any]:
        """{"lag": {topic: {partition: records}}, "lag_records": total}, at most every LAG_EVERY_SECONDS; {} for a
        query with no Kafka source or before its first micro-batch."""
        if time.monotonic() - self._at < LAG_EVERY_SECONDS:
            return self.last
        self._at = time.monotonic()
        read = _read_offsets(self.spec, progress_sources)
        if not read:
            return self.last
        lag: dict[str, dict[str, int]] = {}
        for topic, (config, offsets) in read.items():
            ends = self._ends(config, topic)
            lag[topic] = {str(p): max(0, end - int(offsets.get(str(p), 0))) for p, end in sorted(ends.items())}
        self.last = {"lag": lag, "lag_records": sum(v for per in lag.values() for v in per.values())}
        return self.last

    def _ends(self, config: dict[str, str], topic: str) -> dict[int, int]:
        from dsflow.adapters.kafka import client

        key = json.dumps(config, sort_keys=True)
        if key not in self._consumers:
            self._consumers[key] = client.new_consumer(config)
        consumer = self._consumers[key]
        return client.end_offsets(consumer, topic, client.topic_partitions(consumer, topic), first_wait=0.2)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()


def _read_offsets(spec: QuerySpec, progress_sources: list[dict[str, Any]]) -> dict[str, tuple[dict, dict]]:
    """topic -> (client config, {partition: offset read up to}) for the Kafka sources. Spark reports its sources
    in the order the spec lists them (the order the checkpoint's offset log keeps: see executors' stop offsets)."""
    if len(progress_sources) != len(spec.sources):
        return {}
    found = {}
    for source, progress in zip(spec.sources, progress_sources):
        end = progress.get("endOffset")
        if source.kind != "kafka" or not end:
            continue
        offsets = json.loads(end) if isinstance(end, str) else end
        if isinstance(offsets, dict):
            found[source.topic] = (source.client_config, offsets)
    return found
