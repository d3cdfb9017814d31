"""What a move promises, checked against the data: a stream moved across schemas keeps its topic's records and its
readers' offsets; a query moved to a new name keeps its checkpoint; a materialized view's and a table's PostgreSQL
tables renamed by a move keep their rows; a move that changes a topic's name destroys nothing unless allowed. Real
broker, Spark and PostgreSQL; the queries run in a shared application (`runtime.isolation: shared`: a moved query
restarts inside the warm host), tests/e2e/test_data_loss.py moves queries with drivers of their own; the plans
themselves are tested in tests/unit/test_moved.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from dsflow.engine import operations
from dsflow.adapters.kafka.client import produce_json_lines, read_to_end
from dsflow.core.categories import Category
from dsflow.core.plan import Action
from dsflow.core.safety import Allowance
from dsflow.errors import DsflowError
from support.waiting import wait_for
from support import pgserver

pytestmark = pytest.mark.integration

CONFIG = ("name: {name}\ndefault:\n  store: k\nruntime:\n  isolation: shared\n"
          "environments:\n  dev:\n    vars: {{bootstrap: 'unset:1'}}\n")
STORES = "stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: \"{{ var('bootstrap') }}\"\n"
PG_STORE = ("  - name: pg\n    type: postgresql\n    properties: {{host: 127.0.0.1, port: " + pgserver.PORT
            + ", user: postgres, database: {db}}}\n")
DATABASES = "databases:\n  - name: default\n    schemas: [public, archive]\n"
SQL = ("CREATE STREAM {events} (id BIGINT, userid VARCHAR) WITH ('topic' = '{p}_raw', 'value.format' = 'json', "
       "'topic.partitions' = 2);\n"
       "CREATE STREAM {copied} WITH ('topic' = '{p}_copied') AS SELECT id FROM {events};\n")
SERVER = pgserver.SERVER


def _project(tmp_path: Path, broker: str, stores: str = STORES) -> tuple[Path, operations.Options, str]:
    prefix = f"mv{uuid.uuid4().hex[:6]}"
    root = tmp_path / prefix
    root.mkdir()
    (root / "dsflow.yml").write_text(CONFIG.format(name=prefix))
    (root / "stores.yml").write_text(stores)
    (root / "databases.yml").write_text(DATABASES)
    return root, operations.Options(root, None, {"bootstrap": broker}), prefix


def _write(root: Path, prefix: str, sql: str, moved: str = "") -> None:
    (root / "rel.sql").write_text(sql.replace("{p}", prefix))
    (root / "moves.yml").write_text(f"moved:\n{moved}" if moved else "")


def _apply(options: operations.Options):
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    return plan, loaded


def _destroy(options: operations.Options) -> None:
    loaded = operations.load(options)
    operations.apply(loaded, operations.plan(loaded, destroy=True))


def _produce(broker: str, topic: str, ids: range) -> None:
    produce_json_lines(broker, topic, [json.dumps({"id": i, "userid": f"u{i % 3}"}) for i in ids])


def _ids(broker: str, topic: str) -> list[int]:
    return [json.loads(r["value"])["id"] for r in read_to_end(broker, topic)]


def _wait_ids(broker: str, topic: str, expected: set[int]) -> list[int]:
    def complete() -> list[int] | None:
        ids = _ids(broker, topic)
        return ids if expected <= set(ids) else None

    return wait_for(complete, 240, f"ids {min(expected)}-{max(expected)} in {topic}", interval=2)


def test_a_stream_moved_across_schemas_keeps_its_records_and_its_reader_continues(tmp_path, broker) -> None:
    root, options, prefix = _project(tmp_path, broker)
    _write(root, prefix, SQL.format(events="events", copied="copied", p="{p}"))
    try:
        _apply(options)
        _produce(broker, f"{prefix}_raw", range(100))
        _wait_ids(broker, f"{prefix}_copied", set(range(100)))
        held = read_to_end(broker, f"{prefix}_raw")

        _write(root, prefix, SQL.format(events="archive.events", copied="copied", p="{p}"),
               "  - from: relation.default.public.events\n    to: relation.default.archive.events\n")
        plan, loaded = _apply(options)
        changes = {c.address: c for c in plan.actionable}
        assert set(changes) == {"relation.default.archive.events", "query.default.public.copied"}
        assert changes["relation.default.archive.events"].moved_from == "relation.default.public.events"
        assert changes["query.default.public.copied"].category is Category.KEEP_CHECKPOINT and not plan.destroying

        assert read_to_end(broker, f"{prefix}_raw") == held, "the moved stream's topic lost or changed records"
        _produce(broker, f"{prefix}_raw", range(100, 150))
        copied = _wait_ids(broker, f"{prefix}_copied", set(range(150)))
        assert sorted(copied) == list(range(150)), "the plan promised nothing reprocessed or skipped"
        state = loaded.workspace.state_backend().read()
        assert "relation.default.public.events" not in state.resources
        assert state.resources["relation.default.archive.events"].outputs["created_by_dsflow"] is True
    finally:
        _destroy(options)


def test_a_query_moved_to_a_new_name_keeps_its_checkpoint(tmp_path, broker) -> None:
    root, options, prefix = _project(tmp_path, broker)
    _write(root, prefix, SQL.format(events="events", copied="copied", p="{p}"))
    try:
        _, loaded = _apply(options)
        checkpoint = loaded.workspace.state_backend().read().resources["query.default.public.copied"].outputs[
            "checkpoint"]
        _produce(broker, f"{prefix}_raw", range(100))
        _wait_ids(broker, f"{prefix}_copied", set(range(100)))

        _write(root, prefix, SQL.format(events="events", copied="copied_v2", p="{p}"),
               "  - {from: copied, to: copied_v2}\n")
        plan, loaded = _apply(options)
        assert {c.address: (c.action, c.moved_from) for c in plan.actionable} == {
            "relation.default.public.copied_v2": (Action.UPDATE, "relation.default.public.copied"),
            "query.default.public.copied_v2": (Action.UPDATE, "query.default.public.copied")}
        state = loaded.workspace.state_backend().read()
        assert state.resources["query.default.public.copied_v2"].outputs["checkpoint"] == checkpoint
        assert [e.checkpoint for e in state.history("query.default.public.copied_v2")] == [checkpoint] * 2
        assert not state.history("query.default.public.copied")

        _produce(broker, f"{prefix}_raw", range(100, 150))
        copied = _wait_ids(broker, f"{prefix}_copied", set(range(150)))
        assert sorted(copied) == list(range(150)), "a new checkpoint would have read the first 100 again"
    finally:
        _destroy(options)


def test_a_move_that_changes_the_topic_destroys_the_old_one_only_when_allowed(tmp_path, broker) -> None:
    root, options, prefix = _project(tmp_path, broker)
    sql = "CREATE STREAM {events} (id BIGINT) WITH ('topic' = '{topic}', 'value.format' = 'json');\n"
    _write(root, prefix, sql.format(events="events", topic="{p}_raw"))
    try:
        _apply(options)
        _produce(broker, f"{prefix}_raw", range(20))
        _write(root, prefix, sql.format(events="archive.events", topic="{p}_raw_v2"),
               "  - {from: events, to: archive.events}\n")
        loaded = operations.load(options)
        plan = operations.plan(loaded)
        [change] = plan.actionable
        assert (change.action, change.moved_from) == (Action.REPLACE, "relation.default.public.events")
        assert change.destroys.records == 20 and change.destroys.object == f"kafka topic k/{prefix}_raw"
        with pytest.raises(DsflowError) as refused:
            operations.apply(loaded, plan)
        assert refused.value.code == "DSF-E822"
        assert sorted(_ids(broker, f"{prefix}_raw")) == list(range(20)), "a refused move deleted records"

        allowed = Allowance(addresses=frozenset({"relation.default.archive.events"}))
        assert operations.apply(loaded, plan, allowance=allowed).ok
        from dsflow.adapters.kafka.admin import list_topics

        topics = list_topics(broker)
        assert f"{prefix}_raw" not in topics and f"{prefix}_raw_v2" in topics, "the plan said: replaced"
    finally:
        _destroy(options)


def _admin(statement: str) -> None:
    conn = psycopg2.connect(dbname="postgres", **SERVER)
    conn.autocommit = True  # CREATE and DROP DATABASE run outside a transaction
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


@pytest.fixture
def pgdb() -> Iterator[str]:
    name = f"dsflow_moved_{uuid.uuid4().hex[:10]}"
    _admin(f"CREATE DATABASE {name}")
    yield name
    _admin(f"DROP DATABASE {name} WITH (FORCE)")


def _rows(database: str, query: str) -> list[tuple]:
    with psycopg2.connect(dbname=database, **SERVER) as conn, conn.cursor() as cur:
        cur.execute(query)
        return cur.fetchall()


def _counts(database: str, table: str, expected: int) -> list[tuple]:
    def complete() -> list[tuple] | None:
        rows = _rows(database, f"SELECT userid, views FROM {table} ORDER BY userid")
        return rows if sum(r[1] for r in rows) >= expected else None

    return wait_for(complete, 240, f"{expected} views in {table}", interval=2)


def test_a_view_table_renamed_by_a_move_keeps_its_rows(tmp_path, broker, pgdb) -> None:
    """A materialized view and a table (CREATE TABLE ... AS SELECT) kept in PostgreSQL, both renamed by a move:
    their tables renamed in place, rows kept, and their queries continue on their checkpoints."""
    root, options, prefix = _project(tmp_path, broker, STORES + PG_STORE.format(db=pgdb))
    sql = ("CREATE STREAM events (id BIGINT, userid VARCHAR) WITH ('topic' = '{p}_raw', 'value.format' = 'json');\n"
           "CREATE MATERIALIZED VIEW {view} WITH ('store' = 'pg', 'trigger.interval' = '500 ms') AS "
           "SELECT userid, COUNT(*) AS views FROM events GROUP BY userid;\n"
           "CREATE TABLE {table} WITH ('store' = 'pg', 'trigger.interval' = '500 ms') AS "
           "SELECT userid, COUNT(*) AS views FROM events GROUP BY userid;\n")
    _write(root, prefix, sql.replace("{view}", "user_counts").replace("{table}", "user_table"))
    try:
        _apply(options)
        _produce(broker, f"{prefix}_raw", range(90))
        before = _counts(pgdb, "user_counts", 90)
        assert before == [("u0", 30), ("u1", 30), ("u2", 30)]
        assert _counts(pgdb, "user_table", 90) == before

        _write(root, prefix, sql.replace("{view}", "user_totals").replace("{table}", "user_table_v2"),
               "  - {from: user_counts, to: user_totals}\n  - {from: user_table, to: user_table_v2}\n")
        plan, _ = _apply(options)
        changes = {c.address: c for c in plan.actionable}
        for old, new in (("user_counts", "user_totals"), ("user_table", "user_table_v2")):
            relation = changes[f"relation.default.public.{new}"]
            assert (relation.action, relation.moved_from) == (Action.UPDATE, f"relation.default.public.{old}")
            assert f"renamed to {new}" in relation.effect
            assert changes[f"query.default.public.{new}"].category is Category.IN_PLACE
            assert _rows(pgdb, f"SELECT to_regclass('{old}')") == [(None,)]
            assert _rows(pgdb, f"SELECT userid, views FROM {new} ORDER BY userid") == before, "rows were lost"
        assert not plan.destroying
        _produce(broker, f"{prefix}_raw", range(90, 120))
        after = _counts(pgdb, "user_totals", 120)
        assert after == [("u0", 40), ("u1", 40), ("u2", 40)], "the aggregate continued from its checkpoint"
        assert _counts(pgdb, "user_table_v2", 120) == after
        # the table's ledger followed it; its writer, named after the moved query, goes on from the checkpoint's
        # next batch id (a fresh checkpoint would start again at 0)
        ledger = _rows(pgdb, "SELECT batch_id FROM dsflow_mv_batches WHERE view = 'user_table_v2' ORDER BY applied_at")
        assert len(ledger) == 2 and ledger[1][0] > ledger[0][0], ledger
    finally:
        _destroy(options)
