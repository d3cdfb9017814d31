"""Secured Kafka end to end, on the run's Apache Kafka (its SASL, TLS and mutual-TLS listeners;
dsflow/adapters/kafka/kraft.py): the store's settings carry apply, `topic produce|print`, a running query and its
dead letters; a wrong password, an untrusted certificate or a missing client certificate is DSF-E255 naming the
store within seconds, never a hang or a traceback; and the principals are what the broker authenticated (a SASL user
without ACLs is refused by the broker's authorizer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

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
"""
STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "127.0.0.1:{port}"
    properties:
{properties}
"""
SQL = """\
CREATE STREAM events (id BIGINT, name VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM kept WITH ('dlq.topic' = 'kept_dead') AS SELECT id, name FROM events WHERE id >= 0;
"""


def _properties(settings: dict[str, str]) -> str:
    return "\n".join(f"      {key}: \"{value}\"" for key, value in settings.items())


def scram(user: str = "admin") -> dict[str, str]:
    """SASL/SCRAM-SHA-512 settings; the password comes from KAFKA_TEST_PASSWORD (`dsflow(..., password=)`)."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": "{{ env_var('KAFKA_TEST_PASSWORD') }}"}


def tls(kafka_broker, client_certificate: bool, trusted: bool = True) -> dict[str, str]:
    settings = {"security.protocol": "SSL"}
    if trusted:
        settings["ssl.ca.location"] = f"{kafka_broker.tls_dir}/ca.pem"
    if client_certificate:
        settings.update({"ssl.certificate.location": f"{kafka_broker.tls_dir}/client.pem",
                         "ssl.key.location": f"{kafka_broker.tls_dir}/client.key"})
    return settings


def project(tmp_path: Path, port: int, settings: dict[str, str]) -> Path:
    prefix = f"sec{uuid.uuid4().hex[:6]}_"
    return make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "sql/all.sql": SQL,
                                   "stores/kafka.yml": STORE.format(port=port, properties=_properties(settings))})


class Ran:
    """What the `dsflow` executable did: its exit code, its output (stdout and stderr) and how long it took."""

    def __init__(self, done: subprocess.CompletedProcess, seconds: float) -> None:
        self.exit_code, self.stdout, self.output, self.seconds = (done.returncode, done.stdout,
                                                                   done.stdout + done.stderr, seconds)


def dsflow(root: Path, *args: str, stdin: str = "", password: str = "admin-secret") -> Ran:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), *args], input=stdin,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "300", "KAFKA_TEST_PASSWORD": password})
    return Ran(done, time.monotonic() - started)


RECORDS = [{"id": i, "name": f"n{i}"} for i in range(20)]
MALFORMED = {"id": "seven", "name": "bad"}


def _round_trip(root: Path, password: str = "admin-secret") -> None:
    """apply (topics), produce, print: every record back, through the store's security settings."""
    applied = dsflow(root, "apply", "--auto-approve", "--target", "relation.analytics.public.events",
                     password=password)
    assert applied.exit_code == 0, applied.output
    lines = "".join(json.dumps(r) + "\n" for r in RECORDS)
    produced = dsflow(root, "topic", "produce", "events", stdin=lines, password=password)
    assert produced.exit_code == 0, produced.output
    printed = dsflow(root, "topic", "print", "events", "--limit", str(len(RECORDS)), "--timeout", "60",
                     password=password)
    assert printed.exit_code == 0, printed.output
    assert sorted((r["value"] for r in _printed(printed)), key=lambda v: v["id"]) == RECORDS


def _printed(ran: Ran) -> list[dict]:
    return [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]


def test_sasl_scram_carries_apply_produce_print_a_query_and_its_dead_letters(tmp_path, kafka_broker, spark) -> None:
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
    from dsflow.adapters.spark.driver import start_query
    from dsflow.adapters.spark.translate import query_spec

    root = project(tmp_path, kafka_broker.listeners["sasl"], scram())
    _round_trip(root)
    bad = dsflow(root, "topic", "produce", "events", stdin=json.dumps(MALFORMED) + "\n")
    assert bad.exit_code == 0, bad.output
    loaded = load_project(root, environ={"KAFKA_TEST_PASSWORD": "admin-secret"})
    query = loaded.queries[0]
    store = loaded.store("kafka_main")
    dead_letters = loaded.dlq_topic(query)
    for topic in (loaded.relation("analytics.public.kept").topic, dead_letters):
        ensure_topic(store.bootstrap_servers, TopicSpec(topic, 1), dict(store.properties))
    spec = query_spec(loaded, query, "v1", str(tmp_path / "ckpt"), str(tmp_path / "status"))
    assert spec.sources[0].client_config["security.protocol"] == "SASL_PLAINTEXT"
    start_query(spark, spec, available_now=True).awaitTermination(240)
    printed = dsflow(root, "topic", "print", "kept", "--limit", str(len(RECORDS)), "--timeout", "60")
    assert printed.exit_code == 0, printed.output
    assert sorted(r["value"]["id"] for r in _printed(printed)) == [r["id"] for r in RECORDS]
    dead = dsflow(root, "topic", "print", dead_letters, "--limit", "1", "--timeout", "60", "--raw")
    assert dead.exit_code == 0, dead.output
    assert [json.loads(r["value"]) for r in _printed(dead)] == [MALFORMED]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_other_sasl_mechanisms_round_trip(tmp_path, kafka_broker, mechanism) -> None:
    root = project(tmp_path, kafka_broker.listeners["sasl"], scram() | {"sasl.mechanism": mechanism})
    _round_trip(root)


def test_tls_and_mutual_tls_round_trip(tmp_path, kafka_broker) -> None:
    _round_trip(project(tmp_path / "tls", kafka_broker.listeners["ssl"], tls(kafka_broker, client_certificate=False)))
    _round_trip(project(tmp_path / "mtls", kafka_broker.listeners["mtls"],
                        tls(kafka_broker, client_certificate=True)))


def assert_e255(ran: Ran, summary: str) -> None:
    text = " ".join(ran.output.split())
    assert ran.exit_code == 1, text
    assert f"DSF-E255: Kafka store 'kafka_main' ({summary})" in text, text
    assert "Traceback" not in text
    assert "admin-secret" not in text and "wrong-password" not in text


@pytest.mark.parametrize("case", ["wrong password", "untrusted certificate", "no client certificate"])
def test_a_refused_client_is_a_clear_error_naming_the_store_never_a_hang(tmp_path, kafka_broker, case) -> None:
    password = "wrong-password" if case == "wrong password" else "admin-secret"
    if case == "wrong password":
        root, summary = (project(tmp_path, kafka_broker.listeners["sasl"], scram()),
                         "security.protocol=SASL_PLAINTEXT, sasl.mechanism=SCRAM-SHA-512")
    elif case == "untrusted certificate":  # no ssl.ca.location: the system's CAs do not know the broker's
        root, summary = (project(tmp_path, kafka_broker.listeners["ssl"],
                                 tls(kafka_broker, client_certificate=False, trusted=False)), "security.protocol=SSL")
    else:
        root, summary = (project(tmp_path, kafka_broker.listeners["mtls"],
                                 tls(kafka_broker, client_certificate=False)), "security.protocol=SSL")
    for args in (["topic", "list"], ["topic", "print", "events", "--limit", "1", "--timeout", "5"]):
        ran = dsflow(root, *args, password=password)
        assert_e255(ran, summary)
        assert ran.seconds < 60, f"{args} took {ran.seconds:.0f} s"
    applied = dsflow(root, "apply", "--auto-approve", password=password)
    assert_e255(applied, summary)


def test_a_sasl_user_without_acls_is_refused_by_the_brokers_authorizer(tmp_path, kafka_broker) -> None:
    """alice authenticates (the password is right) but holds no ACL: the broker's StandardAuthorizer refuses her
    topic creation, and dsflow says the broker refused it (not a transport failure)."""
    root = project(tmp_path, kafka_broker.listeners["sasl"], scram(user="alice"))
    applied = dsflow(root, "apply", "--auto-approve", "--target", "relation.analytics.public.events",
                     password="alice-secret")
    text = " ".join(applied.output.split())
    assert applied.exit_code == 1, text
    assert "TOPIC_AUTHORIZATION_FAILED" in text or "Authorization failed" in text or "authoriz" in text.lower(), text
    assert "Traceback" not in text
