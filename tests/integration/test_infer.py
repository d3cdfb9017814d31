"""`dsflow infer` on the real broker: the statement it prints for a topic that holds JSON records (keys, a nested
object, a keyword as a field name, an epoch-ms event time) is pasted into a project, which validates, and a query
reading the stream through it on Spark returns every record's values as they were produced."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.cli import cli
from dsflow.load.project import check_project, load_project
from support.projects import make_project
from support.streaming import CONFIG, records, run

pytestmark = pytest.mark.integration

EVENTS = [{"id": i, "from": f"page_{i % 3}", "geo": {"lat": i + 0.5, "city": f"c{i}"}, "tags": [f"t{i}"],
           "viewtime": 1_700_000_000_000 + i} for i in range(12)]


def test_the_inferred_statement_reads_the_topic_back_on_spark(tmp_path: Path, broker: str, spark) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    topic = f"{prefix}raw_events"
    ensure_topic(broker, TopicSpec(topic, 2, 1, {}))
    produce_json_lines(broker, topic, [json.dumps(e) for e in EVENTS], key_field="id")
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "sql/all.sql": ""})

    shown = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "infer", topic, "--timeout", "3"])
    assert shown.exit_code == 0, shown.output
    assert "from 12 record(s)" in shown.output
    assert "'topic' = 'raw_events'" in shown.output and "'key.format' = 'string'" in shown.output
    assert "'timestamp' = 'viewtime'" in shown.output and '"from" VARCHAR' in shown.output

    (root / "sql" / "all.sql").write_text(shown.output + "CREATE STREAM copied AS SELECT * FROM raw_events;\n")
    assert [d for d in check_project(root, variables={"bootstrap": broker}).diagnostics if d.severity == "error"] == []
    project = load_project(root, variables={"bootstrap": broker})
    ensure_topic(broker, TopicSpec(project.relation("analytics.public.copied").topic, 1, 1, {}))
    run(spark, project, "copied", tmp_path)
    out = sorted((json.loads(r["value"]) for r in records(broker, project, "copied")), key=lambda v: v["id"])
    assert out == EVENTS, "every record read back through the inferred columns, values as produced"


def test_a_missing_topic_is_an_error_naming_it(tmp_path: Path, broker: str) -> None:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix="x_"), "sql/all.sql": ""})
    shown = subprocess.run(["dsflow", "-C", str(root), "--var", f"bootstrap={broker}", "infer", "no_such_topic"],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert shown.returncode == 1 and "DSF-E767" in shown.stderr and "no topic 'no_such_topic'" in shown.stderr, \
        shown.stderr


ORDER_SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "amount", "type": "double"}, {"name": "item", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})


def test_a_topic_with_a_registry_subject_is_inferred_from_its_schema(tmp_path: Path, broker: str, spark,
                                                                     schema_registry) -> None:
    """The statement's columns are the subject's (Avro, with its TIMESTAMP as event time), and a query reading the
    topic through it on Spark returns every record as produced."""
    from datetime import datetime, timezone

    from support.registry_projects import (ENVIRON, avro_values, new_prefix, produce_raw, registry_project,
                                           write_project)

    prefix = new_prefix()
    orders = [{"id": i, "amount": i * 1.5, "item": f"item-{i % 3}",
               "ts": datetime(2026, 1, 1, 0, 0, i, tzinfo=timezone.utc)} for i in range(15)]
    ensure_topic(broker, TopicSpec(f"{prefix}orders", 1, 1, {}))
    produce_raw(broker, f"{prefix}orders", avro_values(schema_registry, f"{prefix}orders", ORDER_SCHEMA, orders))
    root = write_project(tmp_path, "", prefix)
    shown = CliRunner(env=ENVIRON).invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "--var",
                                                f"registry={schema_registry}", "infer", f"{prefix}orders"])
    assert shown.exit_code == 0, shown.output
    assert f"subject '{prefix}orders-value', version 1 (avro)" in shown.output
    assert "id BIGINT,\n  amount DOUBLE,\n  item VARCHAR,\n  ts TIMESTAMP" in shown.output
    assert "'value.format' = 'avro'" in shown.output and "'timestamp' = 'ts'" in shown.output
    assert "'key.format' = 'string'" in shown.output  # keys without a -key subject

    sql = shown.output + "CREATE STREAM copied WITH ('value.format' = 'json') AS SELECT id, item, amount FROM orders;\n"
    project = registry_project(tmp_path / "again", broker, schema_registry, sql, prefix=prefix)
    run(spark, project, "copied", tmp_path)
    out = sorted((json.loads(r["value"]) for r in records(broker, project, "copied")), key=lambda v: v["id"])
    assert out == [{"id": o["id"], "item": o["item"], "amount": o["amount"]} for o in orders]

    named = CliRunner(env=ENVIRON).invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "--var",
                                                f"registry={schema_registry}", "infer", f"{prefix}orders",
                                                "--subject", "nowhere-value"])
    assert getattr(named.exception, "code", None) == "DSF-E123"  # a named subject that is missing is an error
