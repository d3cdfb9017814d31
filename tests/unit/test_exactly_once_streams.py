"""'delivery.guarantee' = 'exactly-once' on a stream (adapters/kafka/transactions.py): accepted on Kafka, refused on
a log store without transactional writes (DSF-E047), the driver's spec it makes, and what a restart's plan says.
Pure: no broker, no Spark (the data: tests/integration/test_kafka_transactions.py,
tests/e2e/test_kafka_exactly_once_kill.py)."""

from __future__ import annotations

from pathlib import Path

from dsflow.adapters.spark.translate import query_spec
from dsflow.core.categories import REPEATS
from dsflow.core.plan import Plan, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import check_project, load_project
from support.projects import applied, make_project

CONFIG = ("name: eo\ndefault:\n  database: analytics\n  schema: public\n  store: k\n"
          "runtime:\n  async_checkpoint: true\n")
STORES = ("stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: 127.0.0.1:9092\n"
          "  - name: kin\n    type: kinesis\n    properties: {region: us-east-1}\n")
SOURCE = "CREATE STREAM events (id BIGINT, a VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 2);\n"
COPY = "CREATE STREAM copied WITH ({props}) AS SELECT {columns} FROM events;\n"
READER = "CREATE STREAM again AS SELECT id FROM copied;\n"
EXACTLY = "'delivery.guarantee' = 'exactly-once'"
QUERY = "query.analytics.public.copied"


def _files(props: str = EXACTLY, columns: str = "id", extra: str = "") -> dict[str, str]:
    return {"dsflow.yml": CONFIG, "stores/kafka.yml": STORES,
            "sql/q.sql": SOURCE + COPY.format(props=props, columns=columns) + READER + extra}


def test_exactly_once_is_accepted_on_a_kafka_stream_whose_readers_count_its_transaction_markers(tmp_path):
    result = check_project(make_project(tmp_path, _files()))
    assert result.diagnostics == []
    project = result.project
    assert project.relation("analytics.public.copied").read_gaps == "count"
    assert project.relation("analytics.public.events").read_gaps == "fail"
    [copy] = [q for q in project.queries if q.fqn == "analytics.public.copied"]
    assert copy.delivery_guarantee == "exactly-once"

    spec = query_spec(project, copy, "v1", "/cp", "/status.json")
    assert spec.sink.exactly_once and spec.sink.declared_at == "sql/q.sql:2:15"
    assert not spec.async_checkpoint, "a replayed batch must be re-planned from the offset log as it ran"
    [reader] = [q for q in project.queries if q.fqn == "analytics.public.again"]
    assert query_spec(project, reader, "v1", "/cp", "/status.json").sources[0].gaps == "count"


def test_a_declared_topic_gaps_is_kept_and_at_least_once_is_unchanged(tmp_path):
    project = load_project(make_project(tmp_path, _files(f"{EXACTLY}, 'topic.gaps' = 'fail'")))
    assert project.relation("analytics.public.copied").read_gaps == "fail"
    plain = load_project(make_project(tmp_path / "plain", _files("'trigger.interval' = '1 second'")))
    [copy] = [q for q in plain.queries if q.fqn == "analytics.public.copied"]
    spec = query_spec(plain, copy, "v1", "/cp", "/status.json")
    assert not spec.sink.exactly_once and spec.async_checkpoint
    assert plain.relation("analytics.public.copied").read_gaps == "fail"


def test_e047_exactly_once_on_a_stream_of_a_store_without_transactions(tmp_path):
    sql = ("CREATE STREAM shards WITH ('store' = 'kin', 'topic.shards' = 1, " + EXACTLY + ") AS "
           "SELECT id FROM events;\n")
    result = check_project(make_project(tmp_path, _files(extra=sql)))
    [d] = result.diagnostics
    assert (d.code, str(d.location)) == ("DSF-E047", "sql/q.sql:4:65")
    assert d.message == "'exactly-once' is not available for the stream 'analytics.public.shards'"
    for why in ("appends to Kinesis", "no transactions recording the batch id", "changelog with a PRIMARY KEY"):
        assert why in (d.hint or "")


def _plan(root: Path, state: State, **options) -> Plan:
    project = load_project(root)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions(**options))


def _effect(tmp_path: Path, before: dict[str, str], after: dict[str, str]) -> tuple[str, str]:
    root = make_project(tmp_path, before)
    state = applied(_plan(root, State()))
    make_project(tmp_path, after)
    change = next(c for c in _plan(root, state).actionable if c.address == QUERY)
    return change.category.value if change.category else "", change.effect or ""


def test_a_restart_on_its_checkpoint_of_an_exactly_once_stream_writes_no_batch_again(tmp_path):
    trigger = f"{EXACTLY}, 'trigger.interval' = '5 seconds'"
    assert _effect(tmp_path / "a", _files(), _files(trigger)) == (
        "in_place", "restarted on the same checkpoint; resumes from its committed offsets")
    category, effect = _effect(tmp_path / "b", _files(), _files(columns="id, a"))
    assert category == "keep_checkpoint" and REPEATS not in effect
    category, effect = _effect(tmp_path / "c", _files(), _files(f"{EXACTLY}, 'start.position' = 'carry'", "id, a"))
    assert category == "carry_offsets" and effect.endswith(REPEATS), "a new checkpoint has a new ledger"


def test_a_restart_of_an_at_least_once_stream_or_one_becoming_exactly_once_says_a_crash_may_repeat(tmp_path):
    plain = "'trigger.interval' = '1 second'"
    category, effect = _effect(tmp_path / "a", _files(plain), _files("'trigger.interval' = '5 seconds'"))
    assert category == "in_place" and effect.endswith(REPEATS)
    category, effect = _effect(tmp_path / "b", _files(plain), _files(columns="id, a"))
    assert category == "keep_checkpoint" and effect.endswith(REPEATS), "the old version's writes were not ledgered"
    assert "a crash, or a micro-batch still running 30 s after the stop, may write the last batch again" in REPEATS


def test_runtime_delivery_guarantee_is_the_default_of_every_query_an_insert_into_included(tmp_path):
    """runtime.delivery_guarantee: exactly-once for the queries that set nothing (an INSERT INTO has no WITH
    clause), where their sink can have it (a Kinesis stream stays at-least-once, without an error); a query's own
    'delivery.guarantee' wins."""
    sql = (SOURCE + "CREATE STREAM copied (id BIGINT) WITH ('value.format' = 'json');\n"
           "INSERT INTO copied SELECT id FROM events;\n"
           "CREATE STREAM shards WITH ('store' = 'kin', 'topic.shards' = 1) AS SELECT id FROM events;\n"
           "CREATE STREAM plain WITH ('delivery.guarantee' = 'at-least-once') AS SELECT id FROM events;\n")
    files = {"dsflow.yml": CONFIG + "  delivery_guarantee: exactly-once\n", "stores/kafka.yml": STORES,
             "sql/q.sql": sql}
    result = check_project(make_project(tmp_path, files))
    assert result.diagnostics == []
    found = {q.sink.rsplit(".", 1)[-1]: q.delivery_guarantee for q in result.project.queries}
    assert found == {"copied": "exactly-once", "shards": "at-least-once", "plain": "at-least-once"}
    [insert] = [q for q in result.project.queries if q.sink.endswith(".copied")]
    assert query_spec(result.project, insert, "v1", "/cp", "/status.json").sink.exactly_once
