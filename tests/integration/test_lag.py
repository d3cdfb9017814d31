"""A query's lag (dsflow/adapters/spark/lag.py): per source partition, the topic's end offset minus the offset the
last micro-batch read up to, measured against a real broker whose partitions hold known record counts."""

from __future__ import annotations

import json
import os
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from dsflow.adapters.spark import lag
from dsflow.adapters.spark.spec import QuerySpec, SinkSpec, SourceSpec
from support import pgserver


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


def test_sources_with_a_lag_reader_are_measured_in_spark_order():
    sources = [_source("x:1", "t1"), _source("x:1", "cdc", kind="postgres_cdc"), _source("x:1", "lake", kind="delta")]
    found = lag._read_offsets(_spec(sources), [{"endOffset": '{"0": 3}'}, {"endOffset": '{"lsn": 9}'},
                                               {"endOffset": '{"version": 4}'}])
    assert [(source.topic, offsets) for source, offsets in found] == [("t1", {"0": 3}), ("cdc", {"lsn": 9})]
    assert lag._read_offsets(_spec(sources), [{"endOffset": '{"0": 3}'}]) == []  # another number of sources


def _kinesis_stream(settings: dict[str, str]) -> tuple[str, list[dict]]:
    """A one-shard stream holding four records put apart in time; its records as boto3 reads them back."""
    from dsflow.adapters.kinesis import admin
    from dsflow.adapters.kinesis.client import list_shards, new_client
    from dsflow.adapters.kinesis.offsets import shard_iterator

    name = f"lag{os.getpid()}{int(time.time() * 1000) % 100000}"
    assert admin.ensure_stream(settings, name, 1) is True
    client = new_client(settings)
    for i in range(4):
        client.put_record(StreamName=name, Data=json.dumps({"i": i}).encode(), PartitionKey="k")
        time.sleep(1.1)  # kinesalite's arrival times have whole seconds: each record its own
    shard = list_shards(client, name)[0]["ShardId"]
    records = client.get_records(ShardIterator=shard_iterator(client, name, shard, "trim"), Limit=100)["Records"]
    assert len(records) == 4
    return name, [{"shard": shard, **r} for r in records]


@pytest.mark.integration
def test_kinesis_lag_is_the_age_of_the_oldest_unread_record(kinesis_endpoint, monkeypatch):
    settings = {"endpoint": kinesis_endpoint, "region": "us-east-1"}
    name, records = _kinesis_stream(settings)
    shard = records[0]["shard"]
    source = _source("x:1", name, kind="kinesis").model_copy(update={"client_config": settings})
    probe = lag.LagProbe(_spec([source]))
    monkeypatch.setattr(lag, "LAG_EVERY_SECONDS", 0.0)
    try:
        for read_up_to, oldest_unread in (("trim", 0), (f"after:{records[0]['SequenceNumber']}", 1),
                                          (f"after:{records[2]['SequenceNumber']}", 3)):
            arrival_ms = records[oldest_unread]["ApproximateArrivalTimestamp"].timestamp() * 1000
            before = time.time() * 1000 - arrival_ms
            measured = probe.measure([{"endOffset": json.dumps({shard: read_up_to})}])
            after = time.time() * 1000 - arrival_ms
            age = measured["lag_millis"][name][shard]
            assert before - 1 <= age <= after + 1, (read_up_to, before, age, after)
            assert measured["lag_max_millis"] == age and "lag_records" not in measured
        caught_up = probe.measure([{"endOffset": {shard: f"after:{records[-1]['SequenceNumber']}"}}])
        assert caught_up == {"lag_millis": {name: {shard: 0}}, "lag_max_millis": 0}
    finally:
        probe.close()


@pytest.mark.integration
def test_change_stream_lag_is_the_write_ahead_log_past_its_offset(monkeypatch):
    import psycopg2

    settings = dict(pgserver.SERVER)
    source = _source("x:1", "orders_cdc", kind="postgres_cdc").model_copy(
        update={"client_config": settings, "options": {"database": "postgres"}})
    probe = lag.LagProbe(_spec([source]))
    monkeypatch.setattr(lag, "LAG_EVERY_SECONDS", 0.0)
    connection = psycopg2.connect(pgserver.dsn("postgres"))
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            def wal() -> int:
                cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
                return int(cursor.fetchone()[0])
            table = f"lag_wal_{os.getpid()}"
            cursor.execute(f"CREATE TABLE {table} (id int, pad text)")  # logged: a temporary table is not
            read_up_to = wal()
            cursor.execute(f"INSERT INTO {table} SELECT g, repeat('x', 200) FROM generate_series(1, 2000) g")
            before = wal() - read_up_to
            assert before > 2000 * 200  # the insert's log
            measured = probe.measure([{"endOffset": json.dumps({"lsn": read_up_to, "snapshot": 1})}])
            after = wal() - read_up_to
            written = measured["lag_wal_bytes"]["orders_cdc"]["wal"]
            assert before <= written <= after and measured["lag_total_wal_bytes"] == written
            assert probe.measure([{"endOffset": {"lsn": 0, "snapshot": 0}}]) == {}  # nothing read yet
            cursor.execute(f"DROP TABLE {table}")
    finally:
        connection.close()
        probe.close()


def test_every_lag_unit_reaches_the_metrics_and_the_status_table():
    from prometheus_client import CollectorRegistry, generate_latest

    from dsflow.cli.render import lag_cell
    from dsflow.runtime.metrics import StatusCollector

    entry = {"address": "query.q", "state": "running", "lag": {"t": {"0": 2, "1": 3}}, "lag_records": 5,
             "lag_millis": {"s": {"shardId-000000000000": 1500}}, "lag_max_millis": 1500,
             "lag_wal_bytes": {"cdc": {"wal": 4096}}, "lag_total_wal_bytes": 4096}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(lambda: [entry]))
    text = generate_latest(registry).decode()
    for line in ('dsflow_query_lag_records{query="q"} 5.0',
                 'dsflow_query_partition_lag_records{partition="1",query="q",topic="t"} 3.0',
                 'dsflow_query_lag_max_millis{query="q"} 1500.0',
                 'dsflow_query_partition_lag_millis{partition="shardId-000000000000",query="q",topic="s"} 1500.0',
                 'dsflow_query_lag_wal_bytes{partition="wal",query="q",topic="cdc"} 4096.0'):
        assert line in text, line
    assert lag_cell(entry) == "5, 1500 ms, 4096 B WAL"
    assert lag_cell({"lag_max_millis": 0}) == "0 ms" and lag_cell({}) == "-"
