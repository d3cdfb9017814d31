"""Kafka clients reused across tasks (dsflow/adapters/kafka/pool.py) read and write exactly what new clients
would: the reference is the list of records produced, and a plain consumer reading the topic back."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from dsflow.adapters.kafka import client, pool
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.datasource import KafkaOptions, KafkaRange, read_range_arrow
from dsflow.adapters.kafka.writing import produce_batches
from support.brokers import both_brokers

pytestmark = [pytest.mark.integration, both_brokers]


def _topic(broker: str, partitions: int = 2) -> str:
    name = f"pool-{uuid.uuid4().hex[:8]}"
    assert ensure_topic(broker, TopicSpec(name, partitions=partitions)) is True
    return name


def _fill(broker: str, topic: str, per_partition: int) -> dict[int, list[tuple[str, str]]]:
    producer = Producer({"bootstrap.servers": broker})
    sent: dict[int, list[tuple[str, str]]] = {0: [], 1: []}
    for p in (0, 1):
        for i in range(per_partition):
            key, value = f"p{p}-k{i}", f'{{"p": {p}, "i": {i}}}'
            producer.produce(topic, value, key, partition=p)
            sent[p].append((key, value))
    assert producer.flush(30) == 0
    return sent


def _read(task: KafkaRange) -> list[tuple[str, str]]:
    rows = []
    for batch in read_range_arrow(task):
        table = pa.Table.from_batches([batch])
        rows += list(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))
    return rows


def test_a_reused_consumer_reads_each_range_exactly(broker, monkeypatch):
    monkeypatch.setattr(pool, "_consumers", {})
    monkeypatch.setattr(pool, "_runs", {})
    topic = _topic(broker)
    sent = _fill(broker, topic, 300)
    config = client.client_config(broker)
    first = _read(KafkaRange(topic, 0, 0, 300, config))
    kept = pool._consumers[pool._key(config, "")]
    assert len(kept) == 1
    reused = kept[0]
    # the next tasks (another partition, then the first one from the middle) get the same consumer back
    second = _read(KafkaRange(topic, 1, 0, 300, config))
    assert pool._consumers[pool._key(config, "")] == [reused]
    third = _read(KafkaRange(topic, 0, 120, 250, config))
    assert first == sent[0] and second == sent[1] and third == sent[0][120:250]


def test_reuse_off_closes_every_consumer(broker, monkeypatch):
    monkeypatch.setattr(pool, "_consumers", {})
    monkeypatch.setattr(pool, "_runs", {})
    monkeypatch.setenv(pool.REUSE_ENV, "0")
    topic = _topic(broker)
    sent = _fill(broker, topic, 50)
    config = client.client_config(broker)
    assert _read(KafkaRange(topic, 1, 10, 50, config)) == sent[1][10:]
    assert pool._consumers[pool._key(config, "")] == []


def test_a_reused_producer_delivers_every_batch(broker, monkeypatch):
    monkeypatch.setattr(pool, "_producers", {})
    monkeypatch.setattr(pool, "_runs", {})
    topic = _topic(broker, partitions=1)
    options = KafkaOptions.parse({"bootstrap.servers": broker, "topic": topic})
    expected = []
    for n in range(3):  # three micro-batches' tasks in one worker
        rows = [(f"b{n}-k{i}", f'{{"n": {n}, "i": {i}}}') for i in range(200)]
        batch = pa.RecordBatch.from_arrays([pa.array([k for k, _ in rows]), pa.array([v for _, v in rows])],
                                           names=["key", "value"])
        assert produce_batches(options, iter([batch])) == 200
        expected += rows
        assert len(pool._producers[pool._key(options.config, "")]) == 1
    with client.consumer(client.client_config(broker)) as c:
        end = client.end_offsets(c, topic, [0])[0]
        got = [(m.key().decode(), m.value().decode()) for b in client.read_range(c, topic, 0, 0, end) for m in b]
    assert got == expected


def test_another_run_never_gets_the_clients_of_the_one_before(broker, monkeypatch):
    """A streaming run's pooled clients stay with that run; the idle ones of a run that took none for `STALE_S`
    are closed when another run of the configuration takes one."""
    monkeypatch.setattr(pool, "_consumers", {})
    monkeypatch.setattr(pool, "_runs", {})
    topic = _topic(broker)
    sent = _fill(broker, topic, 40)
    config = client.client_config(broker)
    assert _read(KafkaRange(topic, 0, 0, 40, config, run="run-1")) == sent[0]
    first = pool._consumers[pool._key(config, "run-1")][0]
    assert _read(KafkaRange(topic, 1, 0, 40, config, run="run-2")) == sent[1]
    assert pool._consumers[pool._key(config, "run-1")] == [first]  # kept for its own run, not handed over
    assert pool._consumers[pool._key(config, "run-2")] not in ([], [first])
    monkeypatch.setattr(pool, "STALE_S", 0.0)
    assert _read(KafkaRange(topic, 0, 10, 40, config, run="run-2")) == sent[0][10:]
    assert pool._key(config, "run-1") not in pool._consumers  # stale: closed


def test_a_source_and_a_sink_in_one_worker_keep_their_clients(broker, monkeypatch):
    """A worker runs a query's read tasks and its write tasks in turn, under two runs of one configuration: neither
    closes the other's clients (they did, so every micro-batch made a new consumer and a new producer)."""
    monkeypatch.setattr(pool, "_consumers", {})
    monkeypatch.setattr(pool, "_producers", {})
    monkeypatch.setattr(pool, "_runs", {})
    source, sink = _topic(broker), _topic(broker, partitions=1)
    sent = _fill(broker, source, 30)
    config = client.client_config(broker)
    options = replace(KafkaOptions.parse({"bootstrap.servers": broker, "topic": sink}), run="writer")
    consumers, producers = set(), set()
    for n in range(3):  # three micro-batches: read a range, write it
        rows = _read(KafkaRange(source, n % 2, 0, 30, config, run="reader"))
        assert rows == sent[n % 2]
        consumers.add(id(pool._consumers[pool._key(config, "reader")][0]))
        batch = pa.RecordBatch.from_arrays([pa.array([k for k, _ in rows]), pa.array([v for _, v in rows])],
                                           names=["key", "value"])
        assert produce_batches(options, iter([batch])) == 30
        producers.add(id(pool._producers[pool._key(options.config, "writer")][0][0]))
    assert len(consumers) == 1 and len(producers) == 1
