"""'trigger' = 'realtime' (Spark's real-time mode, load/realtime.py): what validate accepts and refuses (DSF-E872)
at the property's file:line, runtime.trigger as the default, the driver's spec, and what a plan says when a query
moves to or from real-time mode. Pure: no broker, no Spark (the data: tests/integration/test_realtime.py)."""

from __future__ import annotations

from pathlib import Path

from dsflow.adapters.spark.checkpoint import committed_offsets
from dsflow.adapters.spark.translate import query_spec
from dsflow.core.categories import REALTIME
from dsflow.core.plan import Plan, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import check_project, load_project
from support.projects import applied, make_project

CONFIG = "name: rt\ndefault:\n  database: analytics\n  schema: public\n  store: k\n{runtime}"
STORES = ("stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: 127.0.0.1:9092\n"
          "  - name: kin\n    type: kinesis\n    properties: {region: us-east-1}\n")
SOURCE = ("CREATE STREAM events (id BIGINT, a VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 2);\n"
          "CREATE STREAM raw_text (line VARCHAR) WITH ('value.format' = 'string', 'topic.partitions' = 1);\n")
REALTIME_PROP = "'trigger' = 'realtime'"
QUERY = "query.analytics.public.copied"


def _files(sql: str, runtime: str = "") -> dict[str, str]:
    return {"dsflow.yml": CONFIG.format(runtime=runtime), "stores/kafka.yml": STORES, "sql/q.sql": SOURCE + sql}


def _copy(props: str = REALTIME_PROP, select: str = "SELECT id, UPPER(a) AS a FROM events WHERE id > 3") -> str:
    return f"CREATE STREAM copied WITH ({props}) AS {select};\n"


def test_a_filter_of_a_json_kafka_stream_runs_in_real_time_mode(tmp_path):
    result = check_project(make_project(tmp_path, _files(_copy(f"{REALTIME_PROP}, 'trigger.interval' = '7 s'"))))
    assert result.diagnostics == []
    [copy] = [q for q in result.project.queries if q.fqn.endswith("copied")]
    assert copy.trigger == "realtime"
    spec = query_spec(result.project, copy, "v1", "/cp", "/status.json")
    assert spec.realtime and not spec.async_checkpoint and spec.trigger_interval == "7000 milliseconds"
    assert "spark-sql-kafka-0-10" in spec.spark_conf["spark.jars"]
    assert [s.dlq_topic for s in spec.sources] == [None]


def test_a_real_time_spec_made_a_micro_batch_one_is_the_spec_of_the_same_query_in_micro_batches(tmp_path):
    """What a blue/green deployment restarts a deployed real-time version as (its SQL no longer the project's):
    adapters/spark/realtime.py `in_micro_batches`, checked against translate.py for the query without the trigger."""
    from dsflow.adapters.spark.realtime import in_micro_batches

    conf = "runtime:\n  spark_conf: {spark.jars: /opt/own.jar, spark.sql.shuffle.partitions: '3'}\n"
    specs = []
    for props in (f"{REALTIME_PROP}, 'trigger.interval' = '7 s'", "'trigger.interval' = '7 s'"):
        project = load_project(make_project(tmp_path / str(len(specs)), _files(_copy(props), conf)))
        [copy] = [q for q in project.queries if q.fqn.endswith("copied")]
        specs.append(query_spec(project, copy, "v1", "/cp", "/status.json"))
    realtime, micro_batches = specs
    assert "__source_ts" in realtime.select_sql and realtime.spark_conf != micro_batches.spark_conf
    assert in_micro_batches(realtime, "copied-dlq") == micro_batches.model_copy(update={"async_checkpoint": False})


def test_runtime_trigger_is_the_default_and_a_query_may_opt_out(tmp_path):
    sql = _copy("'trigger' = 'micro-batch'") + "CREATE STREAM other AS SELECT id FROM events;\n"
    project = load_project(make_project(tmp_path, _files(sql, "runtime:\n  trigger: realtime\n")))
    triggers = {q.fqn.rsplit(".", 1)[1]: q.trigger for q in project.queries}
    assert triggers == {"copied": "micro-batch", "other": "realtime"}
    other = next(q for q in project.queries if q.fqn.endswith("other"))
    assert other.trigger_interval == "5 seconds", "runtime.trigger_interval (1 second) is below real-time's minimum"
    [copy] = load_project(make_project(tmp_path / "b", _files(_copy()))).queries
    assert copy.trigger_interval == "5 seconds"


def _refused(tmp_path: Path, sql: str, runtime: str = "") -> list[tuple[str, str, str]]:
    result = check_project(make_project(tmp_path, _files(sql, runtime)))
    return [(d.code, str(d.location), d.message) for d in result.diagnostics]


def test_e872_what_real_time_mode_cannot_run_at_the_trigger_property(tmp_path):
    cases = {
        "an aggregation": ("CREATE CHANGELOG copied WITH (" + REALTIME_PROP + ") AS SELECT a, COUNT(*) AS n "
                           "FROM events GROUP BY a;\n", "it is stateful"),
        "a string source": (_copy(select="SELECT line FROM raw_text"), "value.format 'string'"),
        "a kinesis sink": ("CREATE STREAM copied WITH ('store' = 'kin', 'topic.shards' = 1, " + REALTIME_PROP +
                           ") AS SELECT id FROM events;\n", "real-time mode reads and writes kafka logs only"),
        "exactly-once": (_copy(f"{REALTIME_PROP}, 'delivery.guarantee' = 'exactly-once'"), "at-least-once"),
        "dead letters": (_copy(f"{REALTIME_PROP}, 'dlq.topic' = 'bad'"), "dead letters"),
        "a short interval": (_copy(f"{REALTIME_PROP}, 'trigger.interval' = '2 seconds'"), "minimum of 5 seconds"),
        "a shared application": (_copy(f"{REALTIME_PROP}, 'runtime.isolation' = 'shared'"), "shared Spark"),
        "an expectation": ("CREATE STREAM copied WITH (" + REALTIME_PROP + ") CONSTRAINT positive EXPECT (id > 0) "
                           "ON VIOLATION DROP ROW AS SELECT id FROM events;\n", "CONSTRAINT ... EXPECT"),
    }
    for index, (what, (sql, reason)) in enumerate(cases.items()):
        found = _refused(tmp_path / str(index), sql)
        e872 = [f for f in found if f[0] == "DSF-E872"]
        assert e872, (what, found)
        assert any(reason in message for _, _, message in e872), (what, e872)
        assert all(where.startswith("sql/q.sql:3:") for _, where, _ in e872), (what, e872)


def test_runtime_trigger_leaves_in_micro_batches_what_real_time_mode_cannot_run_and_a_bad_value_is_e032(tmp_path):
    sql = "CREATE CHANGELOG n AS SELECT a, COUNT(*) AS c FROM events GROUP BY a;\n" + _copy("'topic.partitions' = 1")
    result = check_project(make_project(tmp_path / "a", _files(sql, "runtime:\n  trigger: realtime\n")))
    assert result.diagnostics == []
    assert {q.fqn.rsplit(".", 1)[1]: q.trigger for q in result.project.queries} == {"n": "micro-batch",
                                                                                    "copied": "realtime"}
    found = _refused(tmp_path / "b", _copy("'trigger' = 'continuous'"))
    assert [(code, where) for code, where, _ in found] == [("DSF-E032", "sql/q.sql:3:28")]


def _plan(root: Path, state: State) -> Plan:
    project = load_project(root)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions())


def _change(tmp_path: Path, before: str, after: str):
    root = make_project(tmp_path, _files(before))
    state = applied(_plan(root, State()))
    make_project(tmp_path, _files(after))
    return next(c for c in _plan(root, state).actionable if c.address == QUERY)


def test_switching_to_or_from_real_time_mode_carries_offsets_to_a_new_checkpoint_at_least_once(tmp_path):
    to = _change(tmp_path / "to", _copy("'trigger.interval' = '1 second'"), _copy())
    assert (to.action.value, to.category.value) == ("replace", "carry_offsets")
    assert "trigger changed (micro-batch -> realtime: " in to.reason and to.effect.endswith(REALTIME)
    back = _change(tmp_path / "back", _copy(), _copy("'trigger.interval' = '1 second'"))
    assert (back.action.value, back.category.value) == ("replace", "carry_offsets")
    assert "trigger changed (realtime -> micro-batch: " in back.reason and back.effect.endswith(REALTIME)
    same = _change(tmp_path / "same", _copy(), _copy(f"{REALTIME_PROP}, 'trigger.interval' = '9 seconds'"))
    assert (same.action.value, same.category.value) == ("update", "in_place") and same.effect.endswith(REALTIME)
    plain = _change(tmp_path / "plain", _copy("'trigger.interval' = '1 second'"), _copy("'trigger.interval' = '2 s'"))
    assert REALTIME not in (plain.effect or "")


def test_new_real_time_query_says_its_sink_is_at_least_once(tmp_path):
    root = make_project(tmp_path, _files(_copy()))
    change = next(c for c in _plan(root, State()).actionable if c.address == QUERY)
    assert change.effect.endswith(REALTIME)
    assert "at-least-once" in REALTIME and "'trigger.interval'" in REALTIME


def test_offsets_of_a_real_time_checkpoint_are_carried_as_a_micro_batch_query_reads_them(tmp_path):
    for name, line in (("spark", '{"t_events":{"0":7,"1":12}}'), ("dsflow", '{"0":7,"1":12}')):
        checkpoint = tmp_path / name
        (checkpoint / "offsets").mkdir(parents=True)
        (checkpoint / "commits").mkdir()
        (checkpoint / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n' + line + "\n")
        (checkpoint / "commits" / "3").write_text("v1\n{}\n")
        assert committed_offsets(checkpoint) == [{"0": 7, "1": 12}]


def test_dsflow_test_runs_a_real_time_query_on_its_test_batches_in_micro_batches(tmp_path):
    """`dsflow test` runs the query's SQL on files (adapters/spark/unittest_run.py): not through Spark's connector."""
    from dsflow.adapters.spark.unittest_run import _test_spec
    from dsflow.core.unittests import Batch, Expected, UnitTest
    from dsflow.errors import Location

    project = load_project(make_project(tmp_path, _files(_copy())))
    [copy] = [q for q in project.queries if q.fqn.endswith("copied")]
    test = UnitTest(name="t", query=copy.fqn, batches=(Batch(records={}),), expected=Expected(),
                    location=Location("tests/t.yml", 1))
    (tmp_path / "run").mkdir()
    spec = _test_spec(project, copy, test, tmp_path / "run")
    from dsflow.adapters.spark import testsource

    assert not spec.realtime and [s.kind for s in spec.sources] == [testsource.KIND]


def test_a_real_time_version_stopped_before_its_first_checkpoint_carries_the_offsets_it_started_from(tmp_path):
    """Spark's Kafka source records its start offsets (sources/0/0) before the first batch; a real-time query stopped
    within its first trigger interval committed nothing, and carries those (what it wrote is written again)."""
    checkpoint = tmp_path / "cp"
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"t_events":{"0":27,"1":23}}')
    assert committed_offsets(checkpoint) == [{"0": 27, "1": 23}]
    (checkpoint / "commits").mkdir()
    assert committed_offsets(tmp_path / "none") is None


def test_a_stores_security_settings_the_connector_cannot_use_are_refused_at_the_property(tmp_path, monkeypatch):
    def store(properties: str) -> str:
        return STORES.replace("bootstrap_servers: 127.0.0.1:9092\n",
                              f"bootstrap_servers: 127.0.0.1:9092\n    properties: {{{properties}}}\n")

    secured = store("security.protocol: SASL_SSL, sasl.mechanism: AWS_MSK_IAM, aws.region: eu-west-1")
    result = check_project(make_project(tmp_path, {**_files(_copy()), "stores/kafka.yml": secured}))
    found = [(d.code, str(d.location), d.message) for d in result.diagnostics]
    assert [(code, location) for code, location, _ in found] == [("DSF-E872", "sql/q.sql:3:28")] * 2, found
    for what, (_, _, message) in zip(("source 'analytics.public.events'", "sink 'analytics.public.copied'"), found,
                                     strict=True):
        assert f"{what} is in store 'k', whose settings real-time mode's connector cannot use: sasl.mechanism " \
               "AWS_MSK_IAM (dsflow gives Spark's Kafka connector PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 logins only)" \
               in message, message
    monkeypatch.setenv("RT_PASSWORD", "p")
    scram = store("security.protocol: SASL_SSL, sasl.mechanism: SCRAM-SHA-512, sasl.username: u, "
                  "sasl.password: \"{{ env_var('RT_PASSWORD') }}\"")
    assert check_project(make_project(tmp_path / "b", {**_files(_copy()), "stores/kafka.yml": scram})).diagnostics \
        == [], "SCRAM runs in real-time mode"


def test_librdkafka_security_settings_become_the_java_clients(tmp_path):
    from dsflow.adapters.kafka.javaclient import java_settings, refusals

    (tmp_path / "ca.pem").write_text("CA\n")
    (tmp_path / "c.pem").write_text("CERT\n")
    (tmp_path / "c.key").write_text("KEY\n")
    config = {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanisms": "scram-sha-256",
              "sasl.username": 'u"1', "sasl.password": "p\\w", "ssl.ca.location": str(tmp_path / "ca.pem"),
              "ssl.certificate.location": str(tmp_path / "c.pem"), "ssl.key.location": str(tmp_path / "c.key"),
              "ssl.endpoint.identification.algorithm": "none", "client.id": "x"}
    out = java_settings(config, tmp_path / "scratch")
    assert out["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                       'username="u\\"1" password="p\\\\w";')
    assert {k: out[k] for k in ("bootstrap.servers", "security.protocol", "sasl.mechanism", "client.id",
                                "ssl.truststore.type", "ssl.keystore.type", "ssl.endpoint.identification.algorithm")} \
        == {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
            "client.id": "x", "ssl.truststore.type": "PEM", "ssl.keystore.type": "PEM",
            "ssl.endpoint.identification.algorithm": ""}
    assert Path(out["ssl.truststore.location"]).read_text() == "CA\n"
    assert Path(out["ssl.keystore.location"]).read_text() == "KEY\nCERT\n"
    assert not {"sasl.username", "sasl.password", "sasl.mechanisms", "ssl.ca.location", "ssl.key.location"} & set(out)
    assert refusals(config) == []
    assert len(refusals({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                         "enable.ssl.certificate.verification": "false"})) == 2
