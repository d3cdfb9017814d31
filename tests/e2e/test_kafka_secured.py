"""Secured Kafka end to end, on the run's Apache Kafka (its SASL, TLS and mutual-TLS listeners;
dsflow/adapters/kafka/kraft.py): the store's settings carry apply, `topic produce|print`, a query in its own
driver and its dead letters, the runtime supervisor's restart of that driver after a SIGKILL (its password from the
environment, never from disk) and `dsflow serve`'s tail of the store's topic; a wrong password, an untrusted
certificate or a missing client certificate is DSF-E255 naming the store (`topic list|print`, apply, the server's
records and tail), at the first TLS or SASL failure, never a hang or a traceback; and the principals are what the
broker authenticated (a SASL user without ACLs is refused by the broker's authorizer).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dsflow.engine import operations
from support.projects import make_project
from support.serving import sse_events
from support.waiting import wait_for

pytestmark = pytest.mark.integration

CONFIG = """\
name: secured
default:
  database: analytics
  schema: public
  store: kafka_main
default_environment: dev
runtime:
  standby: false
environments:
  dev:
    topic_prefix: "{prefix}"
"""
USERS = """\
users:
  - name: root
    roles: [orgadmin]
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
                                   "stores/kafka.yml": STORE.format(port=port, properties=_properties(settings)),
                                   "security/roles.yml": USERS})


class Ran:
    """What the `dsflow` executable did: its exit code, its output (stdout and stderr) and how long it took."""

    def __init__(self, done: subprocess.CompletedProcess, seconds: float) -> None:
        self.exit_code, self.stdout, self.output, self.seconds = (done.returncode, done.stdout,
                                                                   done.stdout + done.stderr, seconds)


def dsflow(root: Path, *args: str, stdin: str = "", password: str = "admin-secret", runtime: bool = False) -> Ran:
    """`dsflow -C root ARGS`; with `runtime`, an apply starts the runtime supervisor (in this environment: the
    password's variable with it)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), *args], input=stdin,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "300", "KAFKA_TEST_PASSWORD": password,
                               "DSFLOW_RUNTIME": "on" if runtime else "off"})
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


def test_sasl_scram_carries_apply_produce_print_a_restarted_query_its_dead_letters_and_the_servers_tail(
        tmp_path, kafka_broker, monkeypatch) -> None:
    """apply creates the topics and starts the query in its own driver and the runtime supervisor; `topic produce`
    feeds it, `topic print` shows its dead letter; after a SIGKILL the supervisor restarts the driver from its
    checkpoint, the password again from the environment (never from disk), and every id produced after the kill
    reaches the sink; then the server tails the store's topic."""
    root = project(tmp_path, kafka_broker.listeners["sasl"], scram())
    try:
        applied = dsflow(root, "apply", "--auto-approve", runtime=True)
        assert applied.exit_code == 0, applied.output
        lines = "".join(json.dumps(r) + "\n" for r in [*RECORDS, MALFORMED])
        produced = dsflow(root, "topic", "produce", "events", stdin=lines)
        assert produced.exit_code == 0, produced.output
        monkeypatch.setenv("KAFKA_TEST_PASSWORD", "admin-secret")
        options = operations.Options(root)
        _restarted_by_the_supervisor(operations.load(options), options)
        _dead_letters(root, operations.load(options))
        _tail_through_the_server(root, options)
    finally:
        destroyed = dsflow(root, "destroy", "--auto-approve")
        assert destroyed.exit_code == 0, destroyed.output


def _sink_ids(loaded) -> list[int]:
    from dsflow.engine import topics

    return [r["value"]["id"] for r in topics.records(topics.resolve(loaded.project, "kept"), True, None, 1.5)]


def _restarted_by_the_supervisor(loaded, options) -> None:
    """SIGKILL the query's driver; records produced after the kill reach the sink through the restarted driver
    (the Kafka sink is at least once: every id is there, some may be twice)."""
    from dsflow.adapters import process
    from dsflow.engine import topics
    from dsflow.engine.executors import query_identity

    wait_for(lambda: set(_sink_ids(loaded)) == {r["id"] for r in RECORDS}, 240, "the applied query's output")
    address = f"query.{loaded.project.queries[0].fqn}"
    outputs = loaded.workspace.state_backend().read().resources[address].outputs
    spec = (Path(outputs["run_dir"]) / "spec.json").read_text()
    assert "admin-secret" not in spec and "@env:DSFLOW_SECRET_" in spec  # the secret stays off disk
    old_pid, identity = outputs["pid"], query_identity(outputs)
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: not process.is_running(old_pid, identity), 30, "the driver to die")
    later = [{"id": i, "name": f"n{i}"} for i in range(len(RECORDS), 2 * len(RECORDS))]
    topics.produce(topics.resolve(loaded.project, "events"), [json.dumps(r) for r in later], None)
    new_pid = wait_for(lambda: (p := loaded.workspace.state_backend().read().resources[address].outputs["pid"])
                       != old_pid and p, 120, "the supervisor to restart the query")
    assert process.is_running(new_pid, identity)
    wait_for(lambda: set(_sink_ids(loaded)) == set(range(2 * len(RECORDS))), 240,
             "every id produced after the kill in the sink, through the restarted driver")


def _dead_letters(root: Path, loaded) -> None:
    dead_letters = loaded.project.dlq_topic(loaded.project.queries[0])
    dead = dsflow(root, "topic", "print", dead_letters, "--limit", "1", "--timeout", "60", "--raw")
    assert dead.exit_code == 0, dead.output
    assert [json.loads(r["value"]) for r in _printed(dead)] == [MALFORMED]


def _tail_through_the_server(root: Path, options) -> None:
    """A tail of the SASL store's topic through `dsflow serve` reads what is produced after it is ready."""
    import requests

    from dsflow.engine import topics
    from support.serving import LiveServer

    with LiveServer(root) as server:
        headers = _root_token(server)
        with requests.get(f"{server.url}/api/v1/topics/events/tail", headers=headers, stream=True,
                          timeout=60) as stream:
            events = sse_events(stream.iter_lines(decode_unicode=True))
            assert next(events) == ("ready", {"topic": server.app.state.server.loaded().project.relation(
                "analytics.public.events").topic, "store": "kafka_main"})
            topics.produce(topics.resolve(operations.load(options).project, "events"),
                           [json.dumps({"id": 99, "name": "tailed"})], None)
            event, data = next(e for e in events if e[0] != "ping")
            assert (event, data["value"]) == ("record", {"id": 99, "name": "tailed"})


def _root_token(server) -> dict[str, str]:
    """The headers of a request by the project's orgadmin `root`."""
    server.identity.add_user("root", "root-password")
    return {"Authorization": f"Bearer {server.identity.create_token('root', 'tests')[0]}"}


def test_the_servers_records_and_tail_of_a_store_with_a_wrong_password_are_dsf_e255(
        tmp_path, kafka_broker, monkeypatch) -> None:
    """`dsflow serve` over a SASL store whose password is wrong: the records endpoint answers HTTP 502 with
    DSF-E255 naming the store and its security settings (server/app.py), the tail an `error` event with the same;
    never a 500, a traceback or the password."""
    import requests

    from support.serving import LiveServer

    root = project(tmp_path, kafka_broker.listeners["sasl"], scram())
    applied = dsflow(root, "apply", "--auto-approve", "--target", "relation.analytics.public.events",
                     "--target", "binding.root")
    assert applied.exit_code == 0, applied.output
    monkeypatch.setenv("KAFKA_TEST_PASSWORD", "wrong-password")
    store = "Kafka store 'kafka_main' (security.protocol=SASL_PLAINTEXT, sasl.mechanism=SCRAM-SHA-512)"
    try:
        with LiveServer(root) as server:
            headers = _root_token(server)
            answer = requests.get(f"{server.url}/api/v1/topics/events/records", headers=headers, timeout=60)
            assert answer.status_code == 502, answer.text
            error = answer.json()["error"]
            assert error["code"] == "DSF-E255" and error["message"].startswith(store), error
            with requests.get(f"{server.url}/api/v1/topics/events/tail", headers=headers, stream=True,
                              timeout=60) as stream:
                event, data = next(e for e in sse_events(stream.iter_lines(decode_unicode=True)) if e[0] != "ping")
            assert event == "error" and data["code"] == "DSF-E255" and data["message"].startswith(store), data
            assert "wrong-password" not in answer.text + json.dumps(data)
    finally:
        destroyed = dsflow(root, "destroy", "--auto-approve")
        assert destroyed.exit_code == 0, destroyed.output


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
    for args in [["topic", "list"], ["topic", "print", "events", "--limit", "1", "--timeout", "5"]]:
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
