"""A running query switched to Spark's real-time mode and back by `dsflow apply` (issue 45): each switch is a
replacement in a new checkpoint with the old version's offsets carried, on Apache Kafka and real drivers. Into
real-time mode nothing is read twice or skipped; out of it, what the real-time version wrote after its last
checkpoint may be written again (at-least-once), but nothing is skipped.

In real-time mode each record written carries its source record's timestamp as a header (checked by id against
the source topic), and `dsflow status` reports the latency of the records its sink received: its p50, p99 and max
are latencies of records the test reads from the sink itself (nearest rank of the same records)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dsflow.adapters.kafka.client import consumer, produce_json_lines, topic_partitions
from dsflow.core.categories import REALTIME, Category
from dsflow.core.latency import SOURCE_TIMESTAMP_HEADER
from dsflow.engine import operations
from support.waiting import wait_for
from test_data_loss import _project, _wait_ids

pytestmark = pytest.mark.integration

QUERY = "query.default.public.copied"
SQL = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json', "
       "'topic.partitions' = 2);\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied'{trigger}) AS SELECT id FROM events WHERE id >= 0;\n")
REALTIME_PROPS = ", 'trigger' = 'realtime', 'trigger.interval' = '5 seconds'"


def _switch(root: Path, options: operations.Options, prefix: str, trigger: str) -> None:
    (root / "rel.sql").write_text(SQL.format(p=prefix, trigger=trigger))
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = plan.actionable
    assert (change.address, change.category) == (QUERY, Category.CARRY_OFFSETS), change.reason
    assert "trigger changed" in change.reason and change.effect.endswith(REALTIME)
    assert operations.apply(loaded, plan).ok


def _produce(broker: str, prefix: str, ids: range) -> None:
    produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i}) for i in ids])


def _records(broker: str, topic: str) -> list[tuple[int, int, dict[str, bytes]]]:
    """(id, timestamp ms, headers) of every record of the topic, read to its end."""
    from confluent_kafka import TopicPartition

    with consumer({"bootstrap.servers": broker}) as c:
        parts = topic_partitions(c, topic)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p))[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts if ends[p] > 0])
        out, left = [], {p for p in parts if ends[p] > 0}
        while left:
            for m in c.consume(500, timeout=1.0):
                if m.error() is None:
                    out.append((json.loads(m.value())["id"], m.timestamp()[1], dict(m.headers() or [])))
                    if m.offset() + 1 >= ends[m.partition()]:
                        left.discard(m.partition())
        return out


def _status_latency(options: operations.Options, latencies: list[int]) -> dict:
    """The query's status once it reports the latency of records; each figure one of `latencies`."""
    def reported() -> dict | None:
        [entry] = [e for e in operations.status(operations.load(options), with_dead_letters=False)
                   if e.get("address") == QUERY]
        return entry if entry.get("record_latency_samples") else None

    return wait_for(reported, 60, "the real-time query's record latency in its status", interval=2)


def test_switching_a_running_query_to_real_time_mode_and_back_carries_its_offsets(tmp_path: Path, broker: str) -> None:
    root, options, prefix = _project(tmp_path, SQL.format(p="{p}", trigger=""), broker)
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _produce(broker, prefix, range(50))
        _wait_ids(broker, f"{prefix}_copied", set(range(50)))

        _switch(root, options, prefix, REALTIME_PROPS)
        _produce(broker, prefix, range(50, 100))
        ids = Counter(_wait_ids(broker, f"{prefix}_copied", set(range(100))))
        assert all(n == 1 for n in ids.values()), "into real-time mode: nothing read twice"

        source_ts = {i: ts for i, ts, _ in _records(broker, f"{prefix}_events")}
        written = {i: (ts, headers) for i, ts, headers in _records(broker, f"{prefix}_copied")}
        assert all(SOURCE_TIMESTAMP_HEADER not in written[i][1] for i in range(50)), "micro-batches add no header"
        assert {i: int(written[i][1][SOURCE_TIMESTAMP_HEADER]) for i in range(50, 100)} == \
            {i: source_ts[i] for i in range(50, 100)}, "each real-time record carries its source record's timestamp"
        latencies = [written[i][0] - source_ts[i] for i in range(50, 100)]
        entry = _status_latency(options, latencies)
        assert entry["record_latency_samples"] <= 50
        for field in ("record_latency_p50_ms", "record_latency_p99_ms", "record_latency_max_ms"):
            assert entry[field] in latencies, (field, entry[field], sorted(latencies))
        assert entry["record_latency_p50_ms"] <= entry["record_latency_p99_ms"] <= entry["record_latency_max_ms"]

        _switch(root, options, prefix, "")
        _produce(broker, prefix, range(100, 130))
        ids = Counter(_wait_ids(broker, f"{prefix}_copied", set(range(130))))
        assert set(ids) == set(range(130)), "out of real-time mode: nothing skipped, nothing else written"
        assert all(ids[i] == 1 for i in range(50)) and all(ids[i] == 1 for i in range(100, 130))
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
