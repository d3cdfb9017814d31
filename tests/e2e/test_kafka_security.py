"""A Kafka store's TLS/SASL settings reach every client dsflow makes for it, against the real embedded broker.

The embedded broker (tansu 0.6 as shipped) has neither a TLS listener nor SASL users that can be used (its
`--authentication` needs users in a persistent storage engine, which the shipped build lacks), so what is tested
for real is that the settings reach each client: a store with `security.protocol: SSL` against the plaintext
broker fails the TLS handshake in every client, and each command says so with DSF-E255 naming the store; never a
hang or a traceback. A query whose sink store asks for TLS fails in its write task (on a Spark executor) the
same way, and the driver spec carries the settings to the data source's consumers and producers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dsflow.adapters.kafka.options import KafkaOptions
from dsflow.adapters.spark.translate import query_spec
from dsflow.load.project import load_project
from support.projects import make_project

pytestmark = pytest.mark.integration

CONFIG = """\
name: secured
default:
  database: analytics
  schema: public
  store: kafka_main
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
    vars:
      bootstrap: 127.0.0.1:9092
"""
STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{{{ var('bootstrap') }}}}"
    properties:
      client.id: dsflow-security-test
{security}
"""
TLS = "      security.protocol: SSL\n      ssl.endpoint.identification.algorithm: https"
SQL = """\
CREATE STREAM events (id BIGINT, name VARCHAR) WITH ('value.format' = 'json');
CREATE STREAM copied AS SELECT id, name FROM events;
"""


def project(tmp_path: Path, security: str) -> Path:
    prefix = f"s{uuid.uuid4().hex[:8]}_"
    return make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "sql/all.sql": SQL,
                                   "stores/kafka.yml": STORE.format(security=security)})


class Ran:
    """What the `dsflow` executable did: its exit code and its output (stdout and stderr)."""

    def __init__(self, done: subprocess.CompletedProcess) -> None:
        self.exit_code, self.output = done.returncode, done.stdout + done.stderr


def dsflow(root: Path, broker: str, *args: str, stdin: str | None = None) -> Ran:
    """The real executable (error rendering and exit codes are `dsflow.cli.main`'s)."""
    return Ran(subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}",
                               *args], input=stdin or "", capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "300"}))


def assert_e255(result: Ran) -> None:
    """A clean DSF-E255 naming the store and its security settings: exit code 1, no traceback."""
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "DSF-E255: Kafka store 'kafka_main' (security.protocol=SSL, ssl.endpoint.identification.algorithm=" \
           "https)" in text, text
    assert "Traceback" not in text and "TLS or SASL failed" in text


def test_a_tls_store_against_a_plaintext_broker_fails_clearly_in_every_command(tmp_path, broker) -> None:
    root = project(tmp_path, TLS)
    for args in (["topic", "list"], ["topic", "print", "events", "--limit", "1"], ["topic", "describe", "events"],
                 ["datagen", "events", "--count", "1"]):
        assert_e255(dsflow(root, broker, *args))
    assert_e255(dsflow(root, broker, "topic", "produce", "events", stdin='{"id": 1, "name": "a"}\n'))
    applied = dsflow(root, broker, "apply", "--auto-approve")
    assert applied.exit_code == 1 and "Error while applying relation.analytics.public." in applied.output
    assert_e255(applied)


def test_plan_refresh_names_the_store_whose_tls_fails(tmp_path, broker) -> None:
    root = project(tmp_path, "")
    assert dsflow(root, broker, "apply", "--auto-approve", "--target", "relation.analytics.public.events"
                  ).exit_code == 0
    (root / "stores" / "kafka.yml").write_text(STORE.format(security=TLS))
    planned = dsflow(root, broker, "plan", "--json")
    assert planned.exit_code == 0, planned.output
    change = next(c for c in json.loads(planned.output)["changes"] if c["address"] ==
                  "relation.analytics.public.events")
    assert change["drift"] and change["reason"].startswith(
        "drift: DSF-E255: Kafka store 'kafka_main' (security.protocol=SSL"), change


def test_the_same_settings_reach_the_spark_data_sources_clients(tmp_path, broker) -> None:
    """The driver spec's source and sink settings, and what the data source makes of them (the foreground generator
    and the topic commands ran for real above; the background generator gets the same `store.properties`)."""
    security = TLS + "\n      sasl.mechanism: SCRAM-SHA-512\n      sasl.username: app\n" \
                     "      sasl.password: \"{{ env_var('KAFKA_MAIN_SASL_PASSWORD') }}\""
    root = project(tmp_path, security.replace("protocol: SSL", "protocol: SASL_SSL"))
    loaded = load_project(root, variables={"bootstrap": broker}, environ={"KAFKA_MAIN_SASL_PASSWORD": "pw-1234"})
    query = loaded.queries[0]
    spec = query_spec(loaded, query, "v1", str(tmp_path / "ckpt"), str(tmp_path / "status"))
    wanted = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "app",
              "sasl.password": "pw-1234", "ssl.endpoint.identification.algorithm": "https"}
    for config in (spec.sources[0].client_config, spec.sink.client_config):
        assert {k: config.get(k) for k in wanted} == wanted
        options = {"bootstrap.servers": broker, "topic": "t", **{f"kafka.{k}": v for k, v in config.items()}}
        parsed = KafkaOptions.parse(options).config  # what the data source's consumers and producers get
        assert {k: parsed.get(k) for k in wanted} == wanted


TWO_STORES = STORE + """\
  - name: kafka_tls
    type: kafka
    bootstrap_servers: "{{{{ var('bootstrap') }}}}"
    properties:
""" + TLS + "\n"


def test_a_query_writing_to_a_tls_store_fails_in_its_write_task(tmp_path, broker, spark) -> None:
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
    from dsflow.adapters.kafka.client import produce_json_lines
    from dsflow.adapters.spark.driver import start_query

    sql = SQL.replace("CREATE STREAM copied AS", "CREATE STREAM copied WITH ('store' = 'kafka_tls') AS")
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"s{uuid.uuid4().hex[:8]}_"),
                                   "sql/all.sql": sql, "stores/kafka.yml": TWO_STORES.format(security="")})
    loaded = load_project(root, variables={"bootstrap": broker})
    relation = loaded.relation("analytics.public.events")
    assert relation is not None
    events = relation.topic
    ensure_topic(broker, TopicSpec(events, 1))
    produce_json_lines(broker, events, ['{"id": 1, "name": "a"}'])
    spec = query_spec(loaded, loaded.queries[0], "v1", str(tmp_path / "ckpt"), str(tmp_path / "status"))
    assert spec.sink.client_config["security.protocol"] == "SSL"
    running = start_query(spark, spec, available_now=True)
    with pytest.raises(Exception) as failed:  # a plaintext producer would have written the record
        running.awaitTermination(240)
    assert "DSF-E702: cannot reach Kafka broker" in str(failed.value)
    assert re.search(r"connecting: [^\n]*SSL", str(failed.value)), str(failed.value)  # the TLS failure it ended at
