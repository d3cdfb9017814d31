"""The latency of a real-time query's records, read from its sink topic by the query's driver (core/latency.py).

Each record a real-time query writes carries its source record's timestamp in a header (core/latency.py
SOURCE_TIMESTAMP_HEADER); the record's own timestamp is when Spark's producer made it. The driver's status asks
`SinkLatency.fields` every few seconds: it reads what the sink topic received since its last look (from the topic's
end when the driver started), keeps the latencies of the last RECORD_WINDOW_SECONDS and reports their
percentiles. A look reads at most the newest MAX_RECORDS_PER_PARTITION
records of each partition and for at most LOOK_SECONDS, so that it never falls behind a fast sink: at a higher rate
the figures are of a sample, the newest records. It reads with assign() only: no consumer group, nothing
committed. Records without the header (written by another version or another writer) are not counted.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from dsflow.adapters.kafka import client
from dsflow.core.latency import RECORD_WINDOW_SECONDS, SOURCE_TIMESTAMP_HEADER, record_latency_fields

LOOK_EVERY_SECONDS = 5.0
LOOK_SECONDS = 2.0
"""How long one look may read: what it read by then is counted."""
MAX_RECORDS_PER_PARTITION = 5_000
POLL_BATCH = 2_000


def record_latency_ms(message: Any) -> int | None:
    """A sink record's timestamp minus its source timestamp header; None without the header or a timestamp."""
    kind, written = message.timestamp()
    source = next((v for k, v in (message.headers() or []) if k == SOURCE_TIMESTAMP_HEADER), None)
    if kind == 0 or written < 0 or source is None:  # 0: TIMESTAMP_NOT_AVAILABLE
        return None
    try:
        return written - int(source.decode() if isinstance(source, bytes) else source)
    except ValueError:
        return None


class SinkLatency:
    """The recent records' latencies of one sink topic; its consumer lives until `close`."""

    def __init__(self, config: dict[str, str], topic: str) -> None:
        self.config, self.topic = config, topic
        self._consumer: Any = None
        self._partitions = client.RecentPartitions()
        self._read_to: dict[int, int] = {}  # partition -> the end offset the last look read up to
        self._recent: deque[tuple[float, int]] = deque()  # (seen at, latency ms)
        self._at = 0.0
        self.last: dict[str, int | None] = {}

    def fields(self) -> dict[str, int | None]:
        """record_latency_* (core/latency.py), read again at most every LOOK_EVERY_SECONDS."""
        if time.monotonic() - self._at < LOOK_EVERY_SECONDS:
            return self.last
        self._at = time.monotonic()
        now = time.monotonic()
        for message in self._new_records():
            latency = record_latency_ms(message)
            if latency is not None:
                self._recent.append((now, latency))
        while self._recent and self._recent[0][0] < now - RECORD_WINDOW_SECONDS:
            self._recent.popleft()
        self.last = record_latency_fields([latency for _, latency in self._recent])
        return self.last

    def _new_records(self) -> list[Any]:
        """The records that arrived since the last look, at most the newest MAX_RECORDS_PER_PARTITION of each
        partition (a look never falls behind a fast sink); none at the first look, which notes the ends."""
        from confluent_kafka import TopicPartition

        if self._consumer is None:
            self._consumer = client.new_consumer(self.config)
        ends = client.high_watermarks(self._consumer, self.topic, self._partitions.get(self._consumer, self.topic))
        starts = {p: max(self._read_to.get(p, end), end - MAX_RECORDS_PER_PARTITION) for p, end in ends.items()}
        self._read_to = dict(ends)
        waiting = {p for p in ends if starts[p] < ends[p]}
        if not waiting:
            return []
        self._consumer.assign([TopicPartition(self.topic, p, starts[p]) for p in waiting])
        records: list[Any] = []
        deadline = time.monotonic() + LOOK_SECONDS
        while waiting and time.monotonic() < deadline:
            for message in self._consumer.consume(POLL_BATCH, timeout=0.2):
                if message.error() is None and message.offset() < ends[message.partition()]:
                    records.append(message)
                    if message.offset() + 1 >= ends[message.partition()]:
                        waiting.discard(message.partition())
        return records

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
