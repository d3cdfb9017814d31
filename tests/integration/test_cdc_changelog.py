"""A PostgreSQL change stream made a changelog, mirrored and aggregated (real PostgreSQL, broker and Spark).

`CREATE CHANGELOG items_now (PRIMARY KEY (id)) AS SELECT `after`->... FROM items_cdc WHERE ...` turns each
change of the source table into an upsert or a delete of its key, in commit order; a PostgreSQL view, a
Delta table and a PostgreSQL table (CREATE TABLE ... AS SELECT into the postgresql store) mirror that changelog
(upserts and deletes, exactly once per batch), and a GROUP BY over it goes through the retraction path (into a
changelog, a Delta table and a PostgreSQL table, whose emptied groups are deleted). A Random drawn by hypothesis
(`st.randoms`: its first example is already a varied history) writes the source table's history (inserts, updates,
updates of the primary key, deletes, in transactions of several changes) in phases, one availableNow run of each
query per phase on one checkpoint. The oracle is PostgreSQL itself: after the inputs stop, the compacted changelog (the
last value of each key, tombstones dropped), the view, the Delta table and the PostgreSQL table each equal
`SELECT ... FROM items WHERE ...`, and the aggregates equal DuckDB's GROUP BY over that same result.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from support.changelogs import changelog_content
from dsflow.adapters import process
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.postgres import admin
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.spec import DRIVER_MODULE, driver_identity
from dsflow.adapters.spark.translate import query_spec
from dsflow.errors import ProjectError
from dsflow.load.project import load_project
from support.pgserver import SERVER, sql
from support.projects import make_project
from support.streaming import CONFIG, records, run
from support.waiting import wait_for
from support.pgserver import PORT as PG_PORT

pytestmark = pytest.mark.integration

ROW = "id INT, grp VARCHAR, qty INT, note VARCHAR"
STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: pg
    type: postgresql
    properties: {host: 127.0.0.1, port: """ + PG_PORT + """, user: postgres, database: %s}
  - name: lake
    type: filesystem
    properties:
      path: lake
"""
SQL = f"""\
CREATE STREAM items_cdc (op VARCHAR, ts_ms BIGINT, `before` STRUCT<{ROW}>, `after` STRUCT<{ROW}>)
  WITH ('store' = 'pg', 'postgresql.db.name' = '%s', 'postgresql.schema.name' = 'public',
        'postgresql.table.name' = 'items');

CREATE CHANGELOG items_now (PRIMARY KEY (id)) WITH ('topic.partitions' = 2) AS
  SELECT `after`->id AS id, `after`->grp AS grp, `after`->qty AS qty, `after`->note AS note, op
  FROM items_cdc WHERE `after`->qty >= 0;
CREATE MATERIALIZED VIEW items_pg WITH ('store' = 'pg', 'postgresql.table.name' = 'items_mirror') AS
  SELECT id, grp, qty, note FROM items_now;
CREATE TABLE items_delta WITH ('store' = 'lake') AS SELECT id, grp, qty, note FROM items_now;
CREATE CHANGELOG per_grp AS SELECT grp, COUNT(*) AS n, SUM(qty) AS total FROM items_now GROUP BY grp;
CREATE TABLE per_grp_delta WITH ('store' = 'lake') AS
  SELECT grp, COUNT(*) AS n, SUM(qty) AS total FROM items_now GROUP BY grp;
CREATE TABLE items_pgt WITH ('store' = 'pg', 'postgresql.table.name' = 'items_table') AS
  SELECT id, grp, qty, note FROM items_now;
CREATE TABLE per_grp_pgt WITH ('store' = 'pg', 'postgresql.schema.name' = 'public') AS
  SELECT grp, COUNT(*) AS n, SUM(qty) AS total FROM items_now GROUP BY grp;
"""
QUERIES = ("items_now", "items_pg", "items_delta", "per_grp", "per_grp_delta", "items_pgt", "per_grp_pgt")
ORACLE = "SELECT id, grp, qty, note FROM items WHERE qty >= 0"
IDS = 12


REKEYS = [[("upsert", 50, "b", 3, "x")], [("rekey", 50, 60)], [("upsert", 51, "c", 4, None)],
          [("rekey", 51, 61), ("qty", 61, -1)]]
"""Keys no random change touches: an update of the primary key must delete the old key (and the new row that
stops matching WHERE in the same transaction is deleted too)."""


def history(rng, transactions: int, size: int = 4) -> list[list[tuple]]:
    """Transactions of 1..size changes: upserts (insert or update), qty updates, key changes, deletes."""
    return [[_random_change(rng) for _ in range(rng.randint(1, size))] for _ in range(transactions)]


def apply_changes(database: str, phase: list[list[tuple]]) -> None:
    """Each inner list in one transaction: upserts (insert or update), qty updates, key changes, deletes."""
    conn = admin.connect(SERVER, database)
    try:
        for txn in phase:
            with conn, conn.cursor() as cursor:
                for kind, *args in txn:
                    if kind == "upsert":
                        cursor.execute("INSERT INTO items VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE "
                                       "SET grp = EXCLUDED.grp, qty = EXCLUDED.qty, note = EXCLUDED.note", args)
                    elif kind == "qty":
                        cursor.execute("UPDATE items SET qty = %s WHERE id = %s", (args[1], args[0]))
                    elif kind == "rekey":
                        cursor.execute("UPDATE items SET id = %s WHERE id = %s AND NOT EXISTS "
                                       "(SELECT 1 FROM items WHERE id = %s)", (args[1], args[0], args[1]))
                    else:
                        cursor.execute("DELETE FROM items WHERE id = %s", args)
    finally:
        conn.close()


def load(tmp_path: Path, broker: str, database: str):
    unique = uuid.uuid4().hex[:8]  # the project's name is in the slot's name, which is the server's, not the database's
    config = CONFIG.format(prefix=f"c{unique}_").replace("name: streamtest", f"name: cdccl{unique}")
    root = make_project(tmp_path, {"dsflow.yml": config, "stores/kafka.yml": STORES % database,
                                   "sql/all.sql": SQL % database})
    project = load_project(root, variables={"bootstrap": broker})
    for relation in project.relations:
        if relation.kind in ("stream", "changelog") and relation.store == "kafka_main":
            ensure_topic(broker, TopicSpec(relation.topic, relation.partitions, 1, {"cleanup.policy": "compact"}))
    return project


def run_together(spark, project, names: tuple[str, ...], work: Path, timeout: float = 300) -> None:
    """One availableNow run of each query, all at once on the shared session (each on its own checkpoint)."""
    running = []
    for name in names:
        query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
        spec = query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))
        running.append(start_query(spark, spec, available_now=True))
    for name, query in zip(names, running, strict=True):
        assert query.awaitTermination(timeout), f"{name} did not finish in {timeout} s"
        assert query.exception() is None, query.exception()


def mirrors(broker: str, project, database: str) -> dict[str, dict[int, tuple]]:
    """The changelog's content, the PostgreSQL view, the Delta table and the PostgreSQL table, each as
    {id: (grp, qty, note)}."""
    from deltalake import DeltaTable

    content, _ = changelog_content(broker, project, "items_now")
    assert {int(k) for k in content} == {v["id"] for v in content.values()}  # keyed by the primary key
    assert {v["op"] for v in content.values()} <= {"r", "c", "u"}  # CDC metadata selected as it is
    delta = DeltaTable(str(Path(project.root) / "lake" / project.relation("analytics.public.items_delta").topic))
    table = delta.to_pyarrow_table().to_pylist()
    return {"changelog": {v["id"]: (v.get("grp"), v["qty"], v.get("note")) for v in content.values()},
            "postgres view": {r[0]: r[1:] for r in sql(database, "SELECT id, grp, qty, note FROM items_mirror")},
            "delta table": {r["id"]: (r["grp"], r["qty"], r["note"]) for r in table},
            "postgres table": {r[0]: r[1:] for r in sql(database, "SELECT id, grp, qty, note FROM items_table")}}


def aggregate(broker: str, project, rows: list[tuple]) -> tuple[dict, dict]:
    """(the per_grp changelog's content, DuckDB's GROUP BY over the oracle's rows)."""
    content, _ = changelog_content(broker, project, "per_grp")
    got = {v.get("grp"): (v["n"], v["total"]) for v in content.values()}
    con = duckdb.connect()
    con.execute("CREATE TABLE items (id INT, grp VARCHAR, qty INT, note VARCHAR)")
    if rows:
        con.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", rows)
    expected = {g: (n, t) for g, n, t in con.execute("SELECT grp, count(*), sum(qty) FROM items GROUP BY grp")
                .fetchall()}
    return got, expected


@settings(max_examples=1, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=True))
def test_change_stream_as_changelog_mirrors_and_aggregates(tmp_path_factory, spark, broker, rng) -> None:
    phases = [history(rng, 8), history(rng, 8) + REKEYS]
    assert {c[0] for p in phases for t in p for c in t} == {"upsert", "qty", "rekey", "delete"}
    database = f"dsflow_cdccl_{uuid.uuid4().hex[:8]}"
    sql("postgres", f"CREATE DATABASE {database}")
    try:
        sql(database, "CREATE TABLE items (id int PRIMARY KEY, grp text, qty int, note text)")
        _scenario(tmp_path_factory.mktemp("cdccl"), spark, broker, database, phases)
    finally:
        for (slot,) in sql("postgres", "SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                           (database,)):
            sql("postgres", "SELECT pg_drop_replication_slot(%s)", (slot,))
        sql("postgres", f"DROP DATABASE {database} WITH (FORCE)")


def _scenario(work: Path, spark, broker: str, database: str, phases) -> None:
    project = load(work, broker, database)
    cdc = project.relation("analytics.public.items_cdc")
    slot = cdc.table_options["postgresql.slot.name"]
    admin.ensure(SERVER, database, [("public", "items")], slot, ["id", "grp", "qty", "note"])
    apply_changes(database, [[("upsert", i, "a", i - 2, None) for i in range(0, IDS, 2)]])  # read by the snapshot
    for phase in phases:
        apply_changes(database, phase)
        run(spark, project, "items_now", work)
        run_together(spark, project, QUERIES[1:], work)
    expected = {r[0]: r[1:] for r in sql(database, ORACLE)}
    assert expected
    for where, found in mirrors(broker, project, database).items():
        assert found == expected, where
    got, wanted = aggregate(broker, project, [(k, *v) for k, v in expected.items()])
    assert got == wanted
    from deltalake import DeltaTable

    table = DeltaTable(str(Path(project.root) / "lake" / project.relation("analytics.public.per_grp_delta").topic))
    assert {r["grp"]: (r["n"], r["total"]) for r in table.to_pyarrow_table().to_pylist()} == wanted
    assert {g: (n, t) for g, n, t in sql(database, "SELECT grp, n, total FROM per_grp_pgt")} == wanted
    _, tombstones = changelog_content(broker, project, "items_now")
    assert tombstones > 0


# --- the table sinks' deletes, batch by batch --------------------------------------------------------------


def _batch(rows: list[tuple]):
    import pyarrow as pa

    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "qty": pa.array([r[1] for r in rows], pa.int64()),
                     "__keep": pa.array([r[2] for r in rows], pa.bool_())})


def _check_deleting_batches(fmt, ref, read) -> None:
    """Upserts and deletes of one batch (the last row of a key wins), a replayed batch skipped, a re-insert."""
    fmt.create(ref, [("id", "BIGINT"), ("qty", "BIGINT")], ["id"])
    assert fmt.write_batch(ref, _batch([(1, 10, True), (2, 20, True), (3, 30, True), (3, 31, False)]), ["id"], "app", 0)
    assert read() == {1: 10, 2: 20}
    assert fmt.write_batch(ref, _batch([(1, 0, False), (2, 21, True), (4, 40, False), (3, 32, True)]), ["id"], "app", 1)
    assert read() == {2: 21, 3: 32}
    assert not fmt.write_batch(ref, _batch([(2, 0, False)]), ["id"], "app", 1)  # a replay of batch 1
    assert fmt.write_batch(ref, _batch([(1, 11, True), (3, 0, False)]), ["id"], "app", 2)
    assert read() == {1: 11, 2: 21}


def test_delta_and_snowflake_batches_delete_keys(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from dsflow.adapters.tables import TableRef, table_format
    from dsflow.adapters.tables.snowflake import connect
    from support.lake import snowflake_setup, start_fakesnow

    delta = TableRef("delta", str(tmp_path / "t"))
    _check_deleting_batches(table_format("delta"), delta, lambda: {
        r["id"]: r["qty"] for r in DeltaTable(delta.location).to_pyarrow_table().to_pylist()})
    for port in start_fakesnow():
        snowflake_setup(port)
        settings = {"account": "fakesnow", "user": "fake", "password": "snow", "host": "127.0.0.1",
                    "port": str(port), "protocol": "http"}
        snow = TableRef("snowflake", "DEMO_DB.PUBLIC.KEPT", settings)

        def rows(settings: dict = settings) -> dict:
            with connect(settings) as conn:
                return dict(conn.cursor().execute('SELECT "ID", "QTY" FROM DEMO_DB.PUBLIC.KEPT').fetchall())

        _check_deleting_batches(table_format("snowflake"), snow, rows)


def test_postgresql_table_batches_delete_keys_and_append() -> None:
    """The postgresql table format (a table named SCHEMA.TABLE in the store's database, as a dsn-only store's
    tables are): keyed batches upsert and delete, a replay is skipped, a keyless table appends, drop forgets it."""
    from dsflow.adapters.tables import TableRef, table_format

    database = f"dsflow_pgt_{uuid.uuid4().hex[:8]}"
    sql("postgres", f"CREATE DATABASE {database}")
    try:
        fmt, settings = table_format("postgresql"), {**SERVER, "dbname": database}
        kept = TableRef("postgresql", "public.kept", settings)
        assert not fmt.exists(kept)
        _check_deleting_batches(fmt, kept, lambda: dict(sql(database, "SELECT id, qty FROM kept")))
        assert fmt.exists(kept) and fmt.count_rows(kept) == 2
        assert fmt.describe(kept)["primary_key"] == ["id"]
        log = TableRef("postgresql", f"{database}.public.log", settings,
                       {"postgresql.db.name": database, "postgresql.schema.name": "public",
                        "postgresql.table.name": "log"})
        fmt.create(log, [("id", "BIGINT"), ("qty", "BIGINT")], [])
        for batch_id, rows in enumerate([[(1, 5, True), (1, 5, True)], [(2, 6, True), (3, 7, False)]]):
            assert fmt.write_batch(log, _batch(rows), [], "app", batch_id)
        assert not fmt.write_batch(log, _batch([(9, 9, True)]), [], "app", 1)
        assert sorted(fmt.rows(log, 10)[1]) == [(1, 5), (1, 5), (2, 6)]  # appended; a row not kept is not written
        fmt.add_columns(log, [("note", "VARCHAR")])
        assert [c["name"] for c in fmt.describe(log)["columns"]] == ["id", "qty", "note"]
        fmt.drop(kept)
        assert not fmt.exists(kept)
        assert sql(database, "SELECT view FROM dsflow_mv_batches") == [("log",)]
    finally:
        sql("postgres", f"DROP DATABASE {database} WITH (FORCE)")


# --- kill -9 of the driver mid-stream ------------------------------------------------------------------------


def test_a_killed_changelog_driver_resumes_to_the_same_content(tmp_path: Path, spark, broker) -> None:
    """The change-stream-to-changelog query runs in its own driver process while the table changes; it is killed
    with SIGKILL once it has written some of them, more changes follow, and a run on its checkpoint catches up:
    the changelog's content equals the table (a replayed batch rewrites the same upserts in the same order)."""
    database = f"dsflow_cdccl_{uuid.uuid4().hex[:8]}"
    sql("postgres", f"CREATE DATABASE {database}")
    pid = None
    try:
        sql(database, "CREATE TABLE items (id int PRIMARY KEY, grp text, qty int, note text)")
        project = load(tmp_path, broker, database)
        slot = project.relation("analytics.public.items_cdc").table_options["postgresql.slot.name"]
        admin.ensure(SERVER, database, [("public", "items")], slot, ["id", "grp", "qty", "note"])
        rng = random.Random(7)
        changes = history(rng, 400)
        apply_changes(database, changes[:100])
        pid = _launch(project, "items_now", tmp_path)
        snapshot = len(wait_for(lambda: records(broker, project, "items_now"), 240, "the driver's first batch"))
        for done in range(100, 200, 10):  # changes while it runs
            apply_changes(database, changes[done:done + 10])
            time.sleep(0.2)
        wait_for(lambda: len(records(broker, project, "items_now")) > snapshot + 20, 240, "batches of changes")
        os.killpg(pid, signal.SIGKILL)  # driver, JVM and reader, with changes of the slot not yet read or acked
        wait_for(lambda: not process.is_running(pid, _identity(tmp_path, "items_now")), 20, "the driver to die")
        pid = None
        apply_changes(database, changes[200:])
        run(spark, project, "items_now", tmp_path)
        content, _ = changelog_content(broker, project, "items_now")
        assert {v["id"]: (v.get("grp"), v["qty"], v.get("note")) for v in content.values()} == \
            {r[0]: r[1:] for r in sql(database, ORACLE)}
    finally:
        if pid is not None and process.is_running(pid, _identity(tmp_path, "items_now")):
            os.killpg(pid, signal.SIGKILL)  # its own session (process.launch): the driver and what it started
        for (slot,) in sql("postgres", "SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                           (database,)):
            wait_for(lambda slot=slot: not sql(
                "postgres", "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))[0][0],
                30, "the slot to be released")
            sql("postgres", "SELECT pg_drop_replication_slot(%s)", (slot,))
        sql("postgres", f"DROP DATABASE {database} WITH (FORCE)")


def _random_change(rng) -> tuple:
    kind = rng.choice(["upsert", "upsert", "qty", "rekey", "delete"])
    i = rng.randrange(IDS)
    if kind == "upsert":
        return kind, i, rng.choice(["a", "b", "c", None]), rng.randrange(-2, 10), rng.choice(["x", "y'z", None])
    return {"qty": (kind, i, rng.randrange(-2, 10)), "rekey": (kind, i, rng.randrange(IDS)),
            "delete": (kind, i)}[kind]


def _launch(project, name: str, work: Path) -> int:
    """The query's driver as `dsflow run` starts it: its own process, its own Spark session, the test's checkpoint."""
    query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
    spec = query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))
    spec_path = work / f"{name}.spec.json"
    spec_path.write_text(spec.model_dump_json())
    return process.launch(DRIVER_MODULE, [str(spec_path)], work / f"{name}.driver.log", _identity(work, name))


def _identity(work: Path, name: str):
    """The identity `_launch` starts the driver as (adapters/process.py)."""
    return driver_identity(work / f"{name}.run")


# --- refusals -----------------------------------------------------------------------------------------------


def _refused(tmp_path: Path, statement: str) -> set[tuple[str, int]]:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix="r_"), "stores/kafka.yml": STORES % "shop",
                                   "sql/all.sql": (SQL % "shop").split("CREATE CHANGELOG")[0] + statement})
    with pytest.raises(ProjectError) as caught:
        load_project(root)
    hints = " ".join(d.hint or "" for d in caught.value.diagnostics if d.code == "DSF-E156")
    assert not hints or "PRIMARY KEY (id)) AS SELECT `after`->id" in hints  # DSF-E156 points at the changelog
    return {(d.code, d.location.line) for d in caught.value.diagnostics if d.location}


def test_a_changelog_of_a_change_stream_names_its_key_as_after_fields(tmp_path: Path) -> None:
    assert ("DSF-E180", 6) in _refused(tmp_path / "a",
                                       "\nCREATE CHANGELOG c AS SELECT `after`->id AS id FROM items_cdc;")
    assert ("DSF-E181", 6) in _refused(tmp_path / "b", "\nCREATE CHANGELOG c (PRIMARY KEY (id)) AS "
                                       "SELECT `after`->id + 1 AS id FROM items_cdc;")
    assert ("DSF-E181", 6) in _refused(tmp_path / "c", "\nCREATE CHANGELOG c (PRIMARY KEY (k)) AS "
                                       "SELECT `after`->id AS id FROM items_cdc;")
    assert ("DSF-E156", 6) in _refused(tmp_path / "d", "\nCREATE CHANGELOG c AS "
                                       "SELECT `after`->grp AS grp, COUNT(*) AS n FROM items_cdc "
                                       "GROUP BY `after`->grp;")
