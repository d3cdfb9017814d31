"""Range reads account for every offset (adapters/kafka/ranges.py), against the real broker: records delivered in
order exactly once, offsets without a record (transaction markers) confirmed and then failed or counted, a hole
in what the broker answered never skipped, and micro-batches that must continue where the previous one ended."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from dsflow.engine import operations
from dsflow.adapters.kafka import client
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.datasource import check_ranges
from dsflow.adapters.kafka.ranges import read_range, take_contiguous
from dsflow.errors import DsflowError
from test_data_loss import _project
from support.brokers import both_brokers

pytestmark = pytest.mark.integration


def _topic(broker: str, partitions: int = 1) -> str:
    name = f"ranges_{uuid.uuid4().hex[:8]}"
    ensure_topic(broker, TopicSpec(name, partitions, 1, {}))
    return name


def _produce(broker: str, topic: str, values: list[str], transactional: bool = False) -> None:
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": broker, "linger.ms": 20}
    if not transactional:
        producer = Producer(settings)
        for value in values:
            producer.produce(topic, value.encode(), partition=0)
        assert producer.flush(30) == 0
        return
    producer = Producer({**settings, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    for chunk in (values[:5], values[5:]):  # two transactions: a commit marker after each
        producer.begin_transaction()
        for value in chunk:
            producer.produce(topic, value.encode(), partition=0)
        producer.commit_transaction(30)


def _read(broker: str, topic: str, start: int, end: int, **kwargs) -> list[tuple[int, str]]:
    with client.consumer({"bootstrap.servers": broker}) as c:
        return [(m.offset(), m.value().decode()) for batch in read_range(c, topic, 0, start, end, **kwargs)
                for m in batch]


@both_brokers
def test_every_offset_of_a_range_is_delivered_once_in_order(broker: str) -> None:
    topic = _topic(broker)
    _produce(broker, topic, [str(i) for i in range(300)])
    for start, end, max_batch in ((0, 300, 10_000), (17, 233, 7), (299, 300, 1), (150, 151, 10)):
        got = []
        with client.consumer({"bootstrap.servers": broker}) as c:
            for batch in read_range(c, topic, 0, start, end, max_batch=max_batch):
                assert len(batch) <= max_batch
                got += [(m.offset(), m.value().decode()) for m in batch]
        assert got == [(i, str(i)) for i in range(start, end)]


@both_brokers
def test_transaction_markers_fail_a_read_unless_gaps_are_counted(broker: str) -> None:
    topic = _topic(broker)
    _produce(broker, topic, [f"v{i}" for i in range(8)], transactional=True)
    with client.consumer({"bootstrap.servers": broker}) as c:
        end = client.end_offsets(c, topic, [0])[0]
    assert end == 10, "8 records and 2 commit markers"
    with pytest.raises(DsflowError) as failed:
        _read(broker, topic, 0, end)
    assert failed.value.code == "DSF-E709" and "offsets 5-5" in str(failed.value)
    gaps: list[tuple] = []
    got = _read(broker, topic, 0, end, allow_gaps=True, on_gap=lambda *gap: gaps.append(gap))
    assert [v for _, v in got] == [f"v{i}" for i in range(8)]
    assert [o for o, _ in got] == [0, 1, 2, 3, 4, 6, 7, 8]
    assert gaps == [(topic, 0, 5, 6), (topic, 0, 9, 10)]


@both_brokers
def test_a_hole_in_what_the_broker_answered_is_reported_not_skipped(broker: str) -> None:
    topic = _topic(broker)
    _produce(broker, topic, [str(i) for i in range(20)])
    with client.consumer({"bootstrap.servers": broker}) as c:
        messages = [m for batch in read_range(c, topic, 0, 0, 20) for m in batch]
    taken, jump, _ = take_contiguous(messages[:7] + messages[9:], 0, 20, topic)
    assert [m.offset() for m in taken] == list(range(7)) and jump == 9
    taken, jump, _ = take_contiguous(messages[3:], 0, 20, topic)
    assert taken == [] and jump == 3
    taken, jump, _ = take_contiguous(messages[:5] + messages[:12], 3, 10, topic)  # re-delivered, and past the end
    assert [m.offset() for m in taken] == list(range(3, 10)) and jump is None


def test_micro_batches_must_continue_where_the_previous_one_ended() -> None:
    assert check_ranges(None, {"0": 0}, {"0": 5}, "t") == ({"0": 0}, {"0": 5})
    check_ranges(({"0": 0}, {"0": 5}), {"0": 5, "1": 0}, {"0": 9, "1": 3}, "t")  # a new partition from 0
    check_ranges(({"0": 0}, {"0": 5}), {"0": 0}, {"0": 5}, "t")  # the same batch planned again
    for start, end in (({"0": 6}, {"0": 9}), ({"0": 4}, {"0": 9}), ({"1": 0}, {"1": 2}), ({"0": 5}, {"0": 3})):
        with pytest.raises(DsflowError) as failed:
            check_ranges(({"0": 0}, {"0": 5}), start, end, "t")
        assert failed.value.code == "DSF-E709"


def test_a_query_on_a_transactional_stream_fails_loudly_or_counts_its_gaps(spark, broker: str, tmp_path) -> None:
    topic = _topic(broker)
    _produce(broker, topic, [json.dumps({"id": i}) for i in range(8)], transactional=True)

    def run(gaps: str):
        log = tmp_path / f"gaps-{gaps}.jsonl"
        frame = (spark.readStream.format("dsflow_kafka").option("bootstrap.servers", broker).option("topic", topic)
                 .option("gaps", gaps).option("gap.log", str(log)).load())
        name = f"ranges_{gaps}_{uuid.uuid4().hex[:6]}"
        query = (frame.writeStream.format("memory").queryName(name).trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / f"cp-{gaps}")).start())
        try:
            query.awaitTermination(120)
        except StreamingQueryException:
            pass  # checked below: query.exception()
        return query, name, log

    query, _, _ = run("fail")
    assert query.exception() is not None and "DSF-E709" in str(query.exception())
    query, name, log = run("count")
    assert query.exception() is None
    assert sorted(r.offset for r in spark.table(name).collect()) == [0, 1, 2, 3, 4, 6, 7, 8]
    assert [(e["start"], e["end"]) for e in map(json.loads, log.read_text().splitlines())] == [(5, 6), (9, 10)]


def test_a_read_that_cannot_account_for_its_offsets_is_an_error_in_dsflow_status(tmp_path: Path, broker: str) -> None:
    """A stream over a topic written in transactions (commit markers: offsets without records) and not declared
    'topic.gaps' = 'count': the query's first batch fails loudly, and `dsflow status` names DSF-E709."""
    from confluent_kafka import Producer

    from support.waiting import wait_for

    sql = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json');\n"
           "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT id FROM events;\n")
    _, options, prefix = _project(tmp_path, sql, broker)
    ensure_topic(broker, TopicSpec(f"{prefix}_events", 1, 1))
    producer = Producer({"bootstrap.servers": broker, "transactional.id": f"{prefix}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(f"{prefix}_events", json.dumps({"id": i}).encode())
    producer.commit_transaction(30)
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok

        def failed() -> dict | None:
            entry = next(e for e in operations.status(operations.load(options))
                     if e["address"] == "query.default.public.copied")
            return entry if entry.get("state") == "failed" else None

        entry = wait_for(failed, 240, "the query to fail on the unaccounted offset", interval=2)
        assert "DSF-E709" in entry["error"] and "offsets 5-5" in entry["error"]
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
