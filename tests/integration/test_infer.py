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
