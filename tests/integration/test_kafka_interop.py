"""Topics written by dsflow, read by independent Kafka clients (kafka-python, pure Python: its own protocol code,
not librdkafka; and Debian's kcat, on Apache Kafka): keys, values, headers and timestamps are what dsflow wrote;
and records kcat writes are what dsflow's `topic print` reads.

`dsflow topic produce` writes a source topic (keys from a field), a real query (dsflow's Spark data source) writes
its sink and its dead-letter topic (headers naming the error and the source offset). Each topic is then read by
kafka-python and by dsflow's own reader (confluent-kafka), and the two must agree record by record.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from click.testing import CliRunner

from dsflow.adapters.kafka.client import read_to_end
from dsflow.adapters.kafka.deadletters import HEADER_ERROR, HEADER_OFFSET, HEADER_PARTITION, HEADER_QUERY, HEADER_TOPIC
from dsflow.cli import cli
from support.brokers import both_brokers, kafka_only
from support.streaming import run, streaming_project, topic

pytestmark = [pytest.mark.integration,  # kafka-python 3.0 loads its protocol schemas with importlib's legacy API
              pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning",
                                         "ignore:open_text is deprecated:DeprecationWarning")]

SQL = """
CREATE STREAM events (id BIGINT, name VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM kept WITH ('dlq.topic' = 'kept_dead') AS SELECT id, name FROM events WHERE id >= 0;
"""
MALFORMED = {4: {"id": "four", "name": "n4"}, 17: {"id": 17.5, "name": "n17"}}
"""Lines that are JSON (so `topic produce` takes them) but not an events row: they become dead letters."""
CREATE_TIME = 0
"""kafka-python's timestamp_type of a producer's CreateTime (confluent-kafka: TIMESTAMP_CREATE_TIME, 1)."""


def kafka_python_records(broker: str, name: str, expected: int) -> dict[tuple[int, int], object]:
    """Every record of topic `name` read with kafka-python (assign, no group), by (partition, offset).

    Reads until `expected` records came (the embedded broker's high watermark is a batch's base offset + 1, so
    kafka-python's end_offsets cannot say where a partition ends); 60 s guard against a read that never
    completes."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker, group_id=None, enable_auto_commit=False,
                             client_id="dsflow-interop-test")
    try:
        parts = [TopicPartition(name, p) for p in sorted(consumer.partitions_for_topic(name) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        found: dict[tuple[int, int], object] = {}
        deadline = time.monotonic() + 60
        while len(found) < expected and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                found.update({(m.partition, m.offset): m for m in messages})
        return found
    finally:
        consumer.close()


def as_seen(message) -> dict:
    """A kafka-python record in the terms of a confluent-kafka one."""
    return {"key": message.key, "value": message.value, "headers": [(k, v) for k, v in message.headers or []],
            "timestamp": message.timestamp}


def kcat_records(broker: str, name: str) -> dict[tuple[int, int], dict]:
    """Every record of topic `name` as Debian's kcat reads it (`-J`: key, payload, headers, timestamp), by
    (partition, offset), in the terms of a confluent-kafka record."""
    done = subprocess.run(["kcat", "-C", "-b", broker, "-t", name, "-o", "beginning", "-e", "-J", "-q"],
                          capture_output=True, text=True, timeout=60, check=True)
    found = {}
    for line in done.stdout.splitlines():
        m = json.loads(line)
        pairs = m.get("headers") or []
        found[(m["partition"], m["offset"])] = {
            "key": None if m["key"] is None else m["key"].encode(),
            "value": None if m["payload"] is None else m["payload"].encode(),
            "headers": [(pairs[i], pairs[i + 1].encode()) for i in range(0, len(pairs), 2)], "timestamp": m["ts"]}
    return found


def on_apache_kafka(broker: str, kafka_bootstrap: str) -> bool:
    """kcat (librdkafka 2.0.2) cannot read tansu's ApiVersions answer (docs/dependencies.md), so it reads only
    from Apache Kafka; tests/setup.sh installs it."""
    return broker == kafka_bootstrap and shutil.which("kcat") is not None


def both_clients(broker: str, name: str, since_ms: int, until_ms: int, with_kcat: bool) -> list[dict]:
    """The topic's records as dsflow's reader sees them, after checking kafka-python (and, on Apache Kafka, kcat)
    sees the very same."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    ours = read_to_end(broker, name, convert=lambda m: m)
    theirs = kafka_python_records(broker, name, len(ours))
    kcat = kcat_records(broker, name) if with_kcat else None
    assert sorted(theirs) == [(m.partition(), m.offset()) for m in ours]
    out = []
    for m in ours:
        kind, stamp = m.timestamp()
        record = {"key": m.key(), "value": m.value(), "headers": list(m.headers() or []), "timestamp": stamp}
        other = theirs[(m.partition(), m.offset())]
        assert as_seen(other) == record, (name, m.partition(), m.offset())
        if kcat is not None:
            assert kcat[(m.partition(), m.offset())] == record, (name, m.partition(), m.offset())
        assert (kind, other.timestamp_type) == (TIMESTAMP_CREATE_TIME, CREATE_TIME)
        assert since_ms <= stamp <= until_ms, (stamp, since_ms, until_ms)
        out.append(record)
    return out


@both_brokers
def test_kafka_python_reads_what_dsflow_wrote(tmp_path, broker, kafka_broker, spark) -> None:
    with_kcat = on_apache_kafka(broker, kafka_broker.bootstrap)
    project = streaming_project(tmp_path, broker, SQL)
    rows = [MALFORMED.get(i, {"id": i, "name": f"n{i}"}) for i in range(30)]
    lines = tmp_path / "events.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    since = int(time.time() * 1000) - 1
    produced = CliRunner().invoke(cli, ["topic", "produce", topic(project, "events"), "--bootstrap", broker,
                                        "--key-field", "name", "--file", str(lines)])
    assert produced.exit_code == 0, produced.output
    run(spark, project, "kept", tmp_path)
    until = int(time.time() * 1000) + 1

    source = both_clients(broker, topic(project, "events"), since, until, with_kcat)
    assert sorted(json.loads(r["value"])["name"] for r in source) == sorted(r["name"] for r in rows)
    assert all(r["key"] == json.loads(r["value"])["name"].encode() and r["headers"] == [] for r in source)

    sink = both_clients(broker, topic(project, "kept"), since, until, with_kcat)
    good = {f"n{i}": {"id": i, "name": f"n{i}"} for i in range(30) if i not in MALFORMED}
    assert {r["key"].decode(): json.loads(r["value"]) for r in sink} == good and len(sink) == len(good)

    query = next(q for q in project.queries if q.fqn == "analytics.public.kept")
    dead = both_clients(broker, project.dlq_topic(query), since, until, with_kcat)
    assert sorted(r["key"].decode() for r in dead) == sorted(r["name"] for r in MALFORMED.values())
    offsets = {(m["partition"], m["offset"]): m["value"] for m in read_to_end(broker, topic(project, "events"))}
    for record in dead:
        headers = {k: v.decode() for k, v in record["headers"]}
        assert json.loads(record["value"]) in MALFORMED.values()
        assert (headers[HEADER_TOPIC], headers[HEADER_QUERY]) == (topic(project, "events"), "analytics.public.kept")
        assert "column 'id' is BIGINT" in headers[HEADER_ERROR]
        assert offsets[(int(headers[HEADER_PARTITION]), int(headers[HEADER_OFFSET]))] == record["value"].decode()


@kafka_only
def test_dsflow_reads_what_kcat_wrote(tmp_path, broker, kafka_broker) -> None:
    """kcat produces keyed records with headers; `dsflow topic print` gives back each key, value and header."""
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

    if not on_apache_kafka(broker, kafka_broker.bootstrap):
        pytest.fail("kcat needs the Apache Kafka broker and Debian's kcat (tests/setup.sh installs it)")
    name = f"kcat_{time.time_ns()}"
    ensure_topic(broker, TopicSpec(name, 2))
    records = [(f"k{i}", json.dumps({"id": i, "name": f"n{i}"})) for i in range(12)]
    for key, value in records:
        subprocess.run(["kcat", "-P", "-b", broker, "-t", name, "-k", key, "-H", f"source=kcat-{key}"],
                       input=value, text=True, check=True, timeout=30)
    printed = CliRunner().invoke(cli, ["topic", "print", name, "--bootstrap", broker, "--limit", "12",
                                       "--timeout", "30", "--raw"])
    assert printed.exit_code == 0, printed.output
    got = sorted((r["key"], r["value"]) for r in map(json.loads, printed.output.splitlines()))
    assert got == sorted(records)
    seen = read_to_end(broker, name, convert=lambda m: m)
    assert sorted((m.key().decode(), list(m.headers())) for m in seen) == \
        sorted((key, [("source", f"kcat-{key}".encode())]) for key, _ in records)
