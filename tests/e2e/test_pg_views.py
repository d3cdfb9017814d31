"""Materialized views kept in PostgreSQL (the session's server, tests/support/pgserver.py, a database per module run).

- the batch writer: COPY + INSERT ... ON CONFLICT upserts (last row of a key in a batch wins), appends,
  odd values survive, a replayed batch id is skipped, a null key is DSF-E792;
- apply / destroy / refresh of the view's table: created with the query's columns and primary key,
  dropped only if dsflow created it, a missing table is drift;
- CREATE TABLE ... AS SELECT into a postgresql store: apply creates the table (or uses one that exists), adds
  a column appended to the SELECT in place, destroy drops only the table dsflow created; a table dropped by hand
  is drift that apply creates again, and a rename with a `moved:` entry renames it in place (rows, ledger kept);
- end to end (apply, a real query on the test's Spark session, a real broker): the view equals a pandas
  reference, and a plain `psql` client reading while the query writes never sees half a batch;
  `dsflow query` reads it as a table, JSON and CSV; a dropped table is drift; destroy drops it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pandas as pd
import psycopg2
import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters.postgres import mv as pg
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.postgres import views
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from dsflow.cli import cli
from dsflow.core.plan import Action
from dsflow.core.state import DeployedResource
from dsflow.errors import DsflowError
from dsflow.engine.executors import Context
from support.projects import make_project
from support.streaming import CONFIG, produce
from support.waiting import wait_for
from support import pgserver
from support.pgserver import SERVER

pytestmark = pytest.mark.integration

N = 3_000

STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: pg
    type: postgresql
    properties: {host: 127.0.0.1, port: """ + pgserver.PORT + """, user: postgres, database: %s}
"""

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);

CREATE MATERIALIZED VIEW user_counts WITH ('store' = 'pg', 'trigger.interval' = '500 ms') AS
  SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum, MAX(id) AS max_id, AVG(viewtime) AS avg_time
  FROM pageviews GROUP BY userid;
"""


def psql(database: str, statement: str) -> str:
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database, "-tA", "-F", "|",
                          "-c", statement], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture(scope="module")
def pgdb() -> Iterator[str]:
    name = f"dsflow_mv_{uuid.uuid4().hex[:10]}"
    psql("postgres", f"CREATE DATABASE {name}")
    yield name
    psql("postgres", f"DROP DATABASE {name} WITH (FORCE)")


def rows(database: str, query: str) -> list[tuple]:
    with psycopg2.connect(dbname=database, **SERVER) as conn, conn.cursor() as cur:
        cur.execute(query)
        return cur.fetchall()


def test_batches_upsert_append_survive_odd_values_and_skip_replays(pgdb: str) -> None:
    columns = [("k", "VARCHAR"), ("n", "BIGINT"), ("note", "STRING"), ("amount", "DECIMAL(10,2)"),
               ("tags", "ARRAY<STRING>"), ("ok", "BOOLEAN"), ("x", "DOUBLE")]
    names = [c for c, _ in columns]
    assert pg.ensure_table(SERVER, pgdb, "public", "kv", columns, ["k"]) is True
    assert pg.ensure_table(SERVER, pgdb, "public", "kv", columns, ["k"]) is False
    odd = "tab\there\nnew line \\ back é ✓ 'q' \"dq\""
    first = [("a", 1, odd, Decimal("1.25"), ["x", "y"], True, 0.1),
             ("b", 2, None, None, None, None, float("nan")),
             ("a", 3, "last a wins", None, [], False, -1.5)]  # the same key twice in one batch
    assert pg.write_batch(SERVER, pgdb, "public", "kv", names, ["k"], first, "ck1", 0) is True
    got = {r[0]: r[1:] for r in rows(pgdb, "SELECT k, n, note, amount, tags, ok, x FROM kv")}
    assert got["a"] == (3, "last a wins", None, [], False, -1.5)
    assert got["b"][:5] == (2, None, None, None, None) and got["b"][5] != got["b"][5]  # NaN
    assert pg.write_batch(SERVER, pgdb, "public", "kv", names, ["k"], [("a", 9, odd, None, None, None, 0.0)],
                          "ck1", 1) is True
    assert rows(pgdb, "SELECT n, note FROM kv WHERE k = 'a'") == [(9, odd)]
    # a replay of batch 1 (Spark runs it again after a crash) changes nothing
    assert pg.write_batch(SERVER, pgdb, "public", "kv", names, ["k"], [("a", 100, "replayed", None, None, None, 0.0)],
                          "ck1", 1) is False
    assert rows(pgdb, "SELECT n, note FROM kv WHERE k = 'a'") == [(9, odd)]
    # a NULL key names one row (UNIQUE NULLS NOT DISTINCT, PostgreSQL 15 and later): replaced by its next row
    for batch_id, note in ((2, "null key"), (3, "null key again")):
        assert pg.write_batch(SERVER, pgdb, "public", "kv", names, ["k"], [(None, batch_id, note, None, None, None,
                                                                            0.0)], "ck1", batch_id)
    assert rows(pgdb, "SELECT n, note FROM kv WHERE k IS NULL") == [(3, "null key again")]
    # a table keyed by a PRIMARY KEY (made before PostgreSQL 15, or by an earlier dsflow) refuses it: DSF-E792
    psql(pgdb, "CREATE TABLE kv_pk (k TEXT PRIMARY KEY, n BIGINT)")
    with pytest.raises(DsflowError) as err:
        pg.write_batch(SERVER, pgdb, "public", "kv_pk", ["k", "n"], ["k"], [(None, 1)], "ck1", 0)
    assert err.value.code == "DSF-E792"
    assert rows(pgdb, "SELECT view, batch_id FROM dsflow_mv_batches ORDER BY view") == [("kv", 3)]
    # a changelog's tombstones delete their keys (a NULL one too), in the same transaction as the batch's upserts
    assert pg.write_batch(SERVER, pgdb, "public", "kv", names, ["k"], [("c", 5, None, None, None, None, 1.0)],
                          "ck1", 4, deletes=[("a",), ("missing",), (None,)])
    assert sorted(r[0] for r in rows(pgdb, "SELECT k FROM kv")) == ["b", "c"]

    nested = [("m", "MAP<STRING, BIGINT>"), ("st", "STRUCT<a: INT, b: ARRAY<STRING>>"), ("ts", "TIMESTAMP")]
    pg.ensure_table(SERVER, pgdb, "public", "nested", nested, [])
    when = datetime(2024, 5, 1, 10, 20, 30, 123456, tzinfo=timezone.utc)
    pg.write_batch(SERVER, pgdb, "public", "nested", ["m", "st", "ts"], [],
                   [([("x", 1), ("y", 2)], {"a": 1, "b": ["p\tq"]}, when)], "ck3", 0)  # Arrow's shapes
    assert rows(pgdb, "SELECT m, st, ts FROM nested") == [({"x": 1, "y": 2}, {"a": 1, "b": ["p\tq"]}, when)]

    pg.ensure_table(SERVER, pgdb, "public", "log", [("id", "BIGINT"), ("who", "STRING")], [])
    for batch_id, batch in enumerate([[(1, "x"), (1, "x")], [(2, "")]]):
        assert pg.write_batch(SERVER, pgdb, "public", "log", ["id", "who"], [], batch, "ck2", batch_id)
    assert not pg.write_batch(SERVER, pgdb, "public", "log", ["id", "who"], [], [(3, "z")], "ck2", 0)
    assert sorted(rows(pgdb, "SELECT id, who FROM log")) == [(1, "x"), (1, "x"), (2, "")]


def _project(tmp_path: Path, broker: str, pgdb: str, sql: str = SQL):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"pv{uuid.uuid4().hex[:6]}_"),
                                   "stores/kafka.yml": STORES % pgdb, "sql/all.sql": sql})
    return root, operations.Options(root, None, {"bootstrap": broker})


def test_table_is_created_with_columns_and_key_and_dropped_only_if_dsflow_created_it(tmp_path, pgdb) -> None:
    sql = SQL + ("CREATE MATERIALIZED VIEW kept WITH ('store' = 'pg', 'postgresql.table.name' = 'pre_existing')"
                 " AS SELECT id, userid FROM pageviews;\n")
    psql(pgdb, "CREATE TABLE pre_existing (id BIGINT, userid TEXT)")
    root, options = _project(tmp_path, "127.0.0.1:9", pgdb, sql)
    loaded = operations.load(options)
    ctx = Context(project=loaded.project, workspace=loaded.workspace)
    made = views.create_view_table(ctx, loaded.project.relation("analytics.public.user_counts"))
    kept = views.create_view_table(ctx, loaded.project.relation("analytics.public.kept"))
    assert (made["created_by_dsflow"], kept["created_by_dsflow"]) == (True, False)
    assert psql(pgdb, "SELECT column_name || ':' || data_type FROM information_schema.columns "
                      "WHERE table_name = 'user_counts' ORDER BY ordinal_position").splitlines() == [
        "userid:text", "views:bigint", "id_sum:bigint", "max_id:bigint", "avg_time:double precision"]
    assert psql(pgdb, "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
                      "a.attnum = ANY(i.indkey) WHERE i.indrelid = 'user_counts'::regclass AND i.indisunique") \
        == "userid"

    deployed = {name: DeployedResource(address=f"relation.analytics.public.{name}", data_hash="h", metadata_hash="m",
                                       data={"kind": "materialized_view", "store": "pg"}, outputs=out)
                for name, out in (("user_counts", made), ("kept", kept))}
    assert views.observe_view(loaded.project, deployed["user_counts"]).healthy
    psql(pgdb, "DROP TABLE user_counts")
    observed = views.observe_view(loaded.project, deployed["user_counts"])
    assert not observed.healthy and "user_counts is missing" in observed.detail
    views.create_view_table(ctx, loaded.project.relation("analytics.public.user_counts"))
    views.drop_view_table(loaded.project, deployed["user_counts"])
    views.drop_view_table(loaded.project, deployed["kept"])
    assert psql(pgdb, "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE relname IN "
                      "('user_counts', 'pre_existing')") == "pre_existing"


TABLES_SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE TABLE pv_counts WITH ('store' = 'pg', 'postgresql.table.name' = 'pv_counts') AS
  SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;
CREATE TABLE pv_kept WITH ('store' = 'pg', 'postgresql.table.name' = 'pv_pre_existing') AS
  SELECT id, userid FROM pageviews;
"""


def test_ctas_table_apply_adds_columns_in_place_and_destroy_drops_only_what_dsflow_created(tmp_path, pgdb) -> None:
    """CREATE TABLE ... AS SELECT into a postgresql store, through plan and apply targeted at the tables (no
    driver process): created with the query's columns and key; a table that existed is used and kept by destroy;
    a column appended to the SELECT is ALTER TABLE ADD COLUMN (rows kept, NULL in them)."""
    psql(pgdb, "CREATE TABLE pv_pre_existing (id BIGINT, userid TEXT)")
    psql(pgdb, "INSERT INTO pv_pre_existing VALUES (1, 'u')")
    root, options = _project(tmp_path, "127.0.0.1:9", pgdb, TABLES_SQL)
    tables = frozenset({"relation.analytics.public.pv_counts", "relation.analytics.public.pv_kept"})
    loaded = operations.load(options)
    plan = operations.plan(loaded, targets=tables)
    assert sorted((c.address, c.action) for c in plan.actionable if c.address.startswith("relation.")) == \
        [(t, Action.CREATE) for t in sorted(tables)]  # and the database, schema and stores they are in
    assert operations.apply(loaded, plan).ok
    state = operations.load(options).workspace.state_backend().read().resources
    assert state["relation.analytics.public.pv_counts"].outputs["table"] == f"{pgdb}.public.pv_counts"
    assert [state[t].outputs["created_by_dsflow"] for t in sorted(tables)] == [True, False]
    assert psql(pgdb, "SELECT column_name || ':' || data_type FROM information_schema.columns "
                      "WHERE table_name = 'pv_counts' ORDER BY ordinal_position").splitlines() == [
        "userid:text", "views:bigint"]
    assert psql(pgdb, "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
                      "a.attnum = ANY(i.indkey) WHERE i.indrelid = 'pv_counts'::regclass AND i.indisunique") \
        == "userid"
    psql(pgdb, "INSERT INTO pv_counts VALUES ('a', 3)")

    (root / "sql" / "all.sql").write_text(TABLES_SQL.replace("COUNT(*) AS views", "COUNT(*) AS views, MAX(id) AS top"))
    loaded = operations.load(options)
    plan = operations.plan(loaded, targets=tables)
    assert [(c.address, c.action) for c in plan.actionable] == [("relation.analytics.public.pv_counts",
                                                                 Action.UPDATE)]
    assert operations.apply(loaded, plan).ok
    assert rows(pgdb, "SELECT userid, views, top FROM pv_counts") == [("a", 3, None)]

    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert psql(pgdb, "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE relname IN "
                      "('pv_counts', 'pv_pre_existing')") == "pv_pre_existing"
    assert rows(pgdb, "SELECT id, userid FROM pv_pre_existing") == [(1, "u")]


MOVED_SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE TABLE pt_counts WITH ('store' = 'pg') AS SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;
"""


def _table_plan(options: operations.Options, address: str, destroy: bool = False):
    loaded = operations.load(options)
    return loaded, operations.plan(loaded, destroy=destroy, targets=frozenset() if destroy else frozenset({address}))


def _batch(ref, rows_: list[tuple[str, int]], batch_id: int) -> bool:
    """One micro-batch written as the query's writer would (the format, its ledger), under one writer id."""
    import pyarrow as pa

    from dsflow.adapters.postgres.tables import PostgresTables

    data = pa.table({"userid": [r[0] for r in rows_], "views": pa.array([r[1] for r in rows_], pa.int64())})
    return PostgresTables().write_batch(ref, data, ["userid"], "dsflow-writer", batch_id)


def test_ctas_table_dropped_by_hand_is_drift_and_a_rename_moves_it_with_its_rows(tmp_path, pgdb) -> None:
    """A PostgreSQL table (CREATE TABLE ... AS SELECT) as a view's table, through plan and apply targeted at it (no
    driver process): dropped behind dsflow's back it is drift that apply creates again; renamed in the project with
    a `moved:` entry it is moved (ALTER TABLE ... RENAME TO), its rows and its batch ledger kept."""
    from dsflow.adapters.tables import TableRef

    root, options = _project(tmp_path, "127.0.0.1:9", pgdb, MOVED_SQL)
    old, new = "relation.analytics.public.pt_counts", "relation.analytics.public.pt_totals"
    loaded, plan = _table_plan(options, old)
    assert operations.apply(loaded, plan).ok
    settings = dict(loaded.project.store("pg").properties)
    assert _batch(TableRef("postgresql", f"{pgdb}.public.pt_counts", settings), [("a", 1), ("b", 2)], 0)

    psql(pgdb, "DROP TABLE pt_counts")
    loaded, plan = _table_plan(options, old)
    assert [(c.address, c.action, c.drift) for c in plan.actionable] == [(old, Action.UPDATE, True)]
    assert plan.actionable[0].reason == f"drift: table {pgdb}.public.pt_counts is missing"
    assert operations.apply(loaded, plan).ok
    assert psql(pgdb, "SELECT column_name FROM information_schema.columns WHERE table_name = 'pt_counts' "
                      "ORDER BY ordinal_position").splitlines() == ["userid", "views"]  # created again, empty
    assert not _table_plan(options, old)[1].has_changes

    ref = TableRef("postgresql", f"{pgdb}.public.pt_counts", settings)
    assert _batch(ref, [("a", 3), ("c", 5)], 1)
    before = rows(pgdb, "SELECT userid, views FROM pt_counts ORDER BY userid")
    assert before == [("a", 3), ("c", 5)]
    (root / "sql" / "all.sql").write_text(MOVED_SQL.replace("pt_counts", "pt_totals"))
    (root / "moves.yml").write_text("moved:\n  - {from: pt_counts, to: pt_totals}\n")
    loaded, plan = _table_plan(options, new)
    moved = [c for c in plan.actionable if c.address.startswith("relation.")]
    assert [(c.address, c.action, c.moved_from) for c in moved] == [(new, Action.UPDATE, old)]
    assert "renamed to pt_totals (ALTER TABLE ... RENAME TO); its rows kept" in moved[0].effect, moved[0].effect
    assert not plan.destroying
    assert operations.apply(loaded, plan).ok
    assert rows(pgdb, "SELECT to_regclass('pt_counts')") == [(None,)]
    assert rows(pgdb, "SELECT userid, views FROM pt_totals ORDER BY userid") == before, "rows were lost"
    assert rows(pgdb, "SELECT view, batch_id FROM dsflow_mv_batches WHERE view LIKE 'pt\\_%'") == [("pt_totals", 1)]
    renamed = TableRef("postgresql", f"{pgdb}.public.pt_totals", settings)
    assert not _batch(renamed, [("a", 100)], 1), "a batch replayed after the rename is still skipped"
    recorded = operations.load(options).workspace.state_backend().read().resources
    assert old not in recorded and recorded[new].outputs["table"] == f"{pgdb}.public.pt_totals"
    assert recorded[new].outputs["created_by_dsflow"], "destroy still drops the table dsflow created"
    assert not _table_plan(options, new)[1].has_changes

    loaded, plan = _table_plan(options, new, destroy=True)
    assert operations.apply(loaded, plan).ok
    assert rows(pgdb, "SELECT to_regclass('pt_totals'), to_regclass('pt_counts')") == [(None, None)]
    assert rows(pgdb, "SELECT COUNT(*) FROM dsflow_mv_batches WHERE view LIKE 'pt\\_%'") == [(0,)]


def _invariant_reader(pgdb: str, stop: threading.Event, seen: list[tuple[int, int, int]]) -> None:
    """A plain psql client reading while the query writes: every read must be the aggregate of a prefix
    of the input (ids 0..k-1 on one partition): SUM(views) = k, SUM(id_sum) = k(k-1)/2, MAX(max_id) = k-1."""
    while not stop.is_set():
        text = psql(pgdb, "SELECT COALESCE(SUM(views), 0), COALESCE(SUM(id_sum), 0), COALESCE(MAX(max_id), -1) "
                          "FROM user_counts")
        seen.append(tuple(int(v) for v in text.split("|")))
        time.sleep(0.05)


def _reference(events: list[dict]) -> dict[str, tuple]:
    frame = pd.DataFrame(events).groupby("userid").agg(views=("id", "size"), id_sum=("id", "sum"),
                                                        max_id=("id", "max"), avg_time=("viewtime", "mean"))
    return {u: (int(r.views), int(r.id_sum), int(r.max_id), round(float(r.avg_time), 6)) for u, r in frame.iterrows()}


def _snapshot(pgdb: str) -> dict[str, tuple]:
    return {r[0]: (r[1], r[2], r[3], round(r[4], 6)) for r in
            rows(pgdb, "SELECT userid, views, id_sum, max_id, avg_time FROM user_counts")}


def test_view_in_postgres_end_to_end(tmp_path, spark, broker, pgdb) -> None:
    """apply (targeted at the view: its table, no driver process) creates the table; the query runs on the
    test's Spark session through the driver's own start_query, as a driver process would run it."""
    root, options = _project(tmp_path, broker, pgdb)
    loaded = operations.load(options)
    view = "relation.analytics.public.user_counts"
    plan = operations.plan(loaded, targets=frozenset({view}))
    assert view in {c.address for c in plan.actionable} and not any(c.address.startswith("query.")
                                                                    for c in plan.actionable)
    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    assert psql(pgdb, "SELECT COUNT(*) FROM user_counts") == "0"
    project = loaded.project
    ensure_topic(broker, TopicSpec(project.relation("analytics.public.pageviews").topic, 1, 1, {}))
    spec = query_spec(project, project.queries[0], "test", str(tmp_path / "ck"), str(tmp_path / "status.json"))
    events = [{"id": i, "viewtime": 1_700_000_000_000 + 7 * i, "userid": f"User_{(i * 7919) % 23}",
               "pageid": f"Page_{i % 5}"} for i in range(N)]
    stop, seen = threading.Event(), []
    reader = threading.Thread(target=_invariant_reader, args=(pgdb, stop, seen), daemon=True)
    running = start_query(spark, spec)
    reader.start()
    try:
        for first in range(0, N, N // 4):  # one partition: the topic holds ids in order
            produce(broker, project, "pageviews", events[first:first + N // 4], "userid")
            wait_for(lambda first=first: seen and seen[-1][0] > first, 180, f"the view to pass id {first}")
        expected = _reference(events)
        wait_for(lambda: _snapshot(pgdb) == expected, 120, "the view to equal the reference")
    finally:
        stop.set()
        reader.join(timeout=30)
        running.stop()
    bad = [(k, s, m) for k, s, m in seen if s != k * (k - 1) // 2 or m != k - 1]
    assert not bad, f"a reader saw half a batch: {bad[:5]}"
    assert len({k for k, _, _ in seen if 0 < k < N}) >= 2, "no read happened while the query wrote"

    base = ["-C", str(root), "--var", f"bootstrap={broker}", "query"]
    sql = "SELECT userid, views, id_sum FROM user_counts WHERE views >= 130 ORDER BY userid"
    want = [(u, v[0], v[1]) for u, v in sorted(expected.items()) if v[0] >= 130]
    shown = CliRunner().invoke(cli, [*base, sql, "--json"])
    assert shown.exit_code == 0, shown.output
    assert [tuple(r.values()) for r in json.loads(shown.output)] == want
    shown = CliRunner().invoke(cli, [*base, sql, "--csv"])
    assert list(csv.reader(io.StringIO(shown.output))) == [["userid", "views", "id_sum"]] + \
        [[u, str(v), str(s)] for u, v, s in want]
    shown = CliRunner().invoke(cli, [*base, sql])
    assert shown.exit_code == 0 and f"{len(want)} row(s)" in shown.output and want[0][0] in shown.output

    psql(pgdb, "DROP TABLE user_counts")  # drift: the next plan creates it again
    loaded = operations.load(options)
    plan = operations.plan(loaded, targets=frozenset({view}))
    drift = [c for c in plan.actionable if c.address == view]
    assert [(c.action, c.drift) for c in drift] == [(Action.UPDATE, True)], plan.actionable
    assert operations.apply(loaded, plan).ok
    assert psql(pgdb, "SELECT to_regclass('user_counts') IS NOT NULL") == "t"

    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert psql(pgdb, "SELECT to_regclass('user_counts') IS NULL") == "t"
    assert os.path.isdir(root)
