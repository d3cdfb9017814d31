"""Dead-letter topics against a real broker, real Spark and the test schema registry: malformed records do not
stop a query; they land in the dead-letter topic with their source offset and error, and are counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsflow.adapters.kafka.deadletters import HEADER_ERROR, HEADER_OFFSET, HEADER_PARTITION, HEADER_QUERY, HEADER_TOPIC
from dsflow.engine.operations import dead_letters
from support.registry_projects import (
    ENVIRON, avro_decode, avro_values, new_prefix, produce_raw, raw_records, registry_conf, registry_project,
    write_project,
)
from support.streaming import run
from support.waiting import wait_for

pytestmark = pytest.mark.integration

EVENTS = """
CREATE STREAM events (id BIGINT, name VARCHAR, score DOUBLE) WITH ('value.format' = 'json');
CREATE STREAM kept_events WITH ('dlq.topic' = 'bad_events') AS SELECT id, name, score FROM events WHERE id >= 0;
"""


def _query(project, fqn: str):
    return next(q for q in project.queries if q.fqn == fqn)


def _headers(message) -> dict[str, str]:
    return {k: v.decode() for k, v in message.headers() or []}


def _good(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "score": i / 4}).encode()


def test_malformed_json_goes_to_the_dead_letter_topic(tmp_path, broker, spark, schema_registry) -> None:
    project = registry_project(tmp_path, broker, schema_registry, EVENTS)
    source = project.relation("analytics.public.events").topic
    malformed = {3: b"not json at all", 7: b'{"id": "seven", "name": "x", "score": 1.0}', 11: b"[1, 2, 3]",
                 12: b'{"id": 12, "name": "y", "score": "high"}', 15: b'{"id": 15, "name": '}
    values = [malformed.get(i, _good(i)) for i in range(20)]
    produce_raw(broker, source, values)

    run(spark, project, "kept_events", tmp_path)  # finishes without an error: the query was not stopped

    sink = [json.loads(m.value()) for m in raw_records(broker, project.relation("analytics.public.kept_events").topic)]
    assert sorted(r["id"] for r in sink) == [i for i in range(20) if i not in malformed]
    assert all(r == json.loads(_good(r["id"])) for r in sink)
    dead = raw_records(broker, project.dlq_topic(_query(project, "analytics.public.kept_events")))
    assert project.dlq_topic(_query(project, "analytics.public.kept_events")).endswith("bad_events")
    by_offset = {int(_headers(m)[HEADER_OFFSET]): m for m in dead}
    assert sorted(by_offset) == sorted(malformed)
    for offset, message in by_offset.items():
        headers = _headers(message)
        assert message.value() == malformed[offset] and message.key() == str(offset).encode()
        assert (headers[HEADER_TOPIC], headers[HEADER_PARTITION]) == (source, "0")
        assert headers[HEADER_QUERY] == "analytics.public.kept_events"
    assert _headers(by_offset[3])[HEADER_ERROR].startswith("bad JSON")
    assert _headers(by_offset[11])[HEADER_ERROR] == "bad JSON: expected an object, got list"
    assert "column 'id' is BIGINT" in _headers(by_offset[7])[HEADER_ERROR]
    assert "column 'score' is DOUBLE" in _headers(by_offset[12])[HEADER_ERROR]
    status = dead_letters(project, "analytics.public.kept_events")
    assert status == {"dlq_topic": project.dlq_topic(_query(project, "analytics.public.kept_events")),
                      "dead_letters": len(malformed)}

    produce_raw(broker, source, [_good(i) for i in range(20, 25)], keys=[str(i) for i in range(20, 25)])
    run(spark, project, "kept_events", tmp_path)  # the same checkpoint: it goes on after the dead letters

    sink = [json.loads(m.value()) for m in raw_records(broker, project.relation("analytics.public.kept_events").topic)]
    assert sorted(r["id"] for r in sink) == [i for i in range(25) if i not in malformed]
    assert dead_letters(project, "analytics.public.kept_events")["dead_letters"] == len(malformed)


ORDER = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}]})
OTHER = json.dumps({"type": "record", "name": "Other", "fields": [
    {"name": "id", "type": "string"}, {"name": "item", "type": "string"}]})


def test_malformed_avro_goes_to_the_default_dead_letter_topic(tmp_path, broker, spark, schema_registry) -> None:
    project = registry_project(tmp_path, broker, schema_registry, """
        CREATE STREAM orders (id BIGINT, item VARCHAR) WITH ('value.format' = 'avro');
        CREATE STREAM order_copy AS SELECT id, item FROM orders;
    """)
    source = project.relation("analytics.public.orders").topic
    good = avro_values(schema_registry, source, ORDER, [{"id": i, "item": f"i{i}"} for i in range(10)])
    mismatch = avro_values(schema_registry, f"{source}-other", OTHER, [{"id": "x", "item": "y"}])[0]
    malformed = {2: b"plain text", 4: b"\x00\x00\x00\x27\x0f" + good[4][5:], 6: good[6][:6], 8: mismatch}
    produce_raw(broker, source, [malformed.get(i, v) for i, v in enumerate(good)])

    run(spark, project, "order_copy", tmp_path)

    sink_topic = project.relation("analytics.public.order_copy").topic
    got = avro_decode(schema_registry, sink_topic, raw_records(broker, sink_topic))
    assert sorted(r["id"] for r in got) == [i for i in range(10) if i not in malformed]
    query = _query(project, "analytics.public.order_copy")
    assert project.dlq_topic(query) == f"{project.topic_prefix}order_copy-dlq"
    errors = {int(_headers(m)[HEADER_OFFSET]): _headers(m)[HEADER_ERROR]
              for m in raw_records(broker, project.dlq_topic(query))}
    assert sorted(errors) == sorted(malformed)
    assert "Confluent wire format" in errors[2]
    assert errors[4] == f"unknown schema id {0x270f}"
    assert errors[6].startswith("cannot decode Avro")
    assert errors[8].startswith("schema mismatch")
    assert dead_letters(project, "analytics.public.order_copy")["dead_letters"] == len(malformed)


def test_apply_registers_the_sink_schema_and_status_counts_dead_letters(tmp_path, broker, schema_registry,
                                                                        monkeypatch) -> None:
    """The whole path through `dsflow apply`: a query driver process with the registry password from its
    environment, the sink's schema registered by apply, and `dsflow status` counting dead letters."""
    from click.testing import CliRunner

    from dsflow.engine import operations
    from dsflow.cli import cli

    monkeypatch.setenv("SR_PASSWORD", ENVIRON["SR_PASSWORD"])
    prefix = new_prefix()
    root = write_project(tmp_path, """
        CREATE STREAM orders (id BIGINT, item VARCHAR) WITH ('value.format' = 'avro');
        CREATE STREAM order_copy WITH ('trigger.interval' = '1 second') AS SELECT id, item FROM orders;
    """, prefix)
    options = operations.Options(root, None, {"bootstrap": broker, "registry": schema_registry})
    loaded = operations.load(options)
    result = operations.apply(loaded, operations.plan(loaded))
    assert result.ok, result.failed
    try:
        state = operations.load(options).workspace.state_backend().read()
        outputs = state.resources["relation.analytics.public.order_copy"].outputs
        from confluent_kafka.schema_registry import SchemaRegistryClient

        latest = SchemaRegistryClient(registry_conf(schema_registry)).get_latest_version(f"{prefix}order_copy-value")
        assert (outputs["subject"], outputs["schema_id"]) == (f"{prefix}order_copy-value", latest.schema_id)
        spec = (Path(state.resources["query.analytics.public.order_copy"].outputs["run_dir"]) / "spec.json")
        assert ENVIRON["SR_PASSWORD"] not in spec.read_text()

        good = avro_values(schema_registry, f"{prefix}orders", ORDER, [{"id": i, "item": f"i{i}"} for i in range(8)])
        produce_raw(broker, f"{prefix}orders", [b"garbage" if i in (1, 5) else v for i, v in enumerate(good)])

        sink = f"{prefix}order_copy"
        wait_for(lambda: len(raw_records(broker, sink)) >= 6, 240, "6 records in the sink", interval=2)
        got = avro_decode(schema_registry, sink, raw_records(broker, sink))
        assert sorted(r["id"] for r in got) == [0, 2, 3, 4, 6, 7]
        assert {int.from_bytes(m.value()[1:5], "big") for m in raw_records(broker, sink)} == {latest.schema_id}

        def status_entry():
            shown = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "--var",
                                             f"registry={schema_registry}", "status", "--json"])
            assert shown.exit_code == 0, shown.output
            entry = next(e for e in json.loads(shown.output) if e["address"] == "query.analytics.public.order_copy")
            return entry if entry.get("dead_letters") == 2 else None

        entry = wait_for(status_entry, 240, "2 dead letters in dsflow status", interval=2)
        assert entry["state"] == "running" and entry["dlq_topic"] == f"{prefix}order_copy-dlq"
        import dsflow.cli
        from dsflow.cli.terminal import LazyConsole

        # a console of its own (not an attribute patched through the shared lazy proxy): any TERM, no TTY
        monkeypatch.setattr(dsflow.cli, "console", LazyConsole(width=250))
        table = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "--var",
                                         f"registry={schema_registry}", "status"])
        # no TTY: a plain table (cli/render.py plain_table), each column starting where its title does
        header = next(line for line in table.output.splitlines() if "resource" in line)
        row = next(line for line in table.output.splitlines() if "order_copy" in line)
        assert "dead letters" in header
        assert row[header.index("dead letters"):].split("  ")[0].strip() == "2"
    finally:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
