"""A query's lag (dsflow/adapters/spark/lag.py): per source partition, the topic's end offset minus the offset the
last micro-batch read up to, measured against a real broker whose partitions hold known record counts."""

from __future__ import annotations

import json
import os

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from dsflow.adapters.spark import lag
from dsflow.adapters.spark.spec import QuerySpec, SinkSpec, SourceSpec


def _topic(broker: str, name: str, counts: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(name, num_partitions=len(counts), replication_factor=1)])[name].result(30)
    producer = Producer({"bootstrap.servers": broker})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(name, value=json.dumps({"i": i}).encode(), partition=partition)
            if i % 3 == 0:
                producer.flush(10)  # several batches per partition: tansu's watermark is the last batch's base + 1
    assert producer.flush(30) == 0


def _spec(sources: list[SourceSpec]) -> QuerySpec:
    sink = SinkSpec.model_construct(kind="kafka", topic="out", client_config={})
    return QuerySpec.model_construct(name="q", sources=sources, sink=sink)


def _source(broker: str, topic: str, kind: str = "kafka") -> SourceSpec:
    return SourceSpec(view=topic, topic=topic, client_config={"bootstrap.servers": broker}, schema_ddl="i BIGINT",
                      kind=kind)


@pytest.mark.integration
def test_lag_is_what_each_partition_holds_past_the_last_batch(broker, monkeypatch):
    a, b = f"lag_a_{os.getpid()}", f"lag_b_{os.getpid()}"
    _topic(broker, a, {0: 7, 1: 4})
    _topic(broker, b, {0: 5})
    probe = lag.LagProbe(_spec([_source(broker, a), _source(broker, b)]))
    try:
        progress = [{"endOffset": json.dumps({"0": 5, "1": 4})}, {"endOffset": {"0": 0}}]
        measured = probe.measure(progress)
        assert measured == {"lag": {a: {"0": 2, "1": 0}, b: {"0": 5}}, "lag_records": 7}
        assert probe.measure([{"endOffset": None}, {}]) == measured  # asked again too soon: the last answer
        monkeypatch.setattr(lag, "LAG_EVERY_SECONDS", 0.0)
        caught_up = probe.measure([{"endOffset": json.dumps({"0": 7, "1": 4})}, {"endOffset": {"0": 5}}])
        assert caught_up["lag_records"] == 0
    finally:
        probe.close()


def test_only_kafka_sources_in_spark_order_are_measured():
    spec = _spec([_source("x:1", "t1"), _source("x:1", "cdc", kind="postgres_cdc")])
    found = lag._read_offsets(spec, [{"endOffset": '{"0": 3}'}, {"endOffset": '{"lsn": 9}'}])
    assert found == {"t1": ({"bootstrap.servers": "x:1"}, {"0": 3})}
    assert lag._read_offsets(spec, [{"endOffset": '{"0": 3}'}]) == {}  # Spark reports another number of sources
