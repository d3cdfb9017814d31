"""CREATE TABLE ... AS SELECT into Delta Lake (a local folder and s3:// on moto) and Snowflake (fakesnow):
appends for streams, MERGE for aggregations and changelogs, each equal to a Python reference; apply
creates the table before any data, a batch replayed after kill -9 of the driver is not written twice,
and destroy deletes what dsflow created.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.tables import TableRef, table_format
from dsflow.adapters.tables.delta import storage_options
from dsflow.core.plan import Action
from dsflow.errors import ProjectError
from dsflow.engine.executors import query_identity
from dsflow.load.project import load_project
from support.lake import S3_KEYS, create_bucket, lake_project, snowflake_setup, start_fakesnow, stores_yaml
from support.projects import make_project
from support.streaming import CONFIG, produce, run, running
from support.waiting import wait_for
from support import pgserver

PAGEVIEWS = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 2);
"""
USERS = """\
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, level BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""


@pytest.fixture(scope="module")
def fakesnow_port():
    yield from start_fakesnow()


@pytest.fixture
def s3_keys(monkeypatch):
    for key, value in S3_KEYS.items():
        monkeypatch.setenv(key, value)


def _events(first: int, count: int, rng: random.Random) -> list[dict]:
    return [{"id": i, "viewtime": 1_700_000_000_000 + i, "userid": f"User_{rng.randrange(1, 30)}",
             "pageid": f"Page_{rng.randrange(0, 6)}"} for i in range(first, first + count)]


def _delta_rows(project, name: str) -> list[dict]:
    from deltalake import DeltaTable

    from dsflow.adapters.tables import table_ref

    relation = project.relation(f"analytics.public.{name}")
    ref = table_ref(project.root, project.store(relation.store), relation)
    return DeltaTable(ref.location, storage_options=storage_options(ref)).to_pyarrow_table().to_pylist()


def _by(rows: list[dict], key: str) -> dict:
    return {r[key]: r for r in rows}


# validation


def _load(tmp_path: Path, sql: str, stores: str | None = None):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "sql/all.sql": PAGEVIEWS + sql,
                                   "stores/lake.yml": stores or stores_yaml()})
    return load_project(root, variables={"bootstrap": "127.0.0.1:1"})


def _codes(tmp_path: Path, sql: str, stores: str | None = None) -> list[str]:
    with pytest.raises(ProjectError) as err:
        _load(tmp_path, sql, stores)
    return [d.code for d in err.value.diagnostics]


def test_ctas_table_resolves_to_a_table_relation_and_query(tmp_path):
    project = _load(tmp_path, """
        CREATE TABLE pv WITH ('store' = 'lake', 'delta.path' = 'events/pv') AS SELECT id, userid FROM pageviews;
        CREATE TABLE counts WITH ('store' = 'lake') AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
    """)
    pv, counts = project.relation("analytics.public.pv"), project.relation("analytics.public.counts")
    assert (pv.kind, pv.store, pv.table_options, pv.primary_key) == ("table", "lake", {"delta.path": "events/pv"}, ())
    assert (counts.table_options, counts.primary_key) == ({"delta.path": "counts"}, ("userid",))
    query = next(q for q in project.queries if q.sink == "analytics.public.counts")
    assert (query.statement, query.output_mode) == ("table", "update")


def test_table_validation_errors(tmp_path):
    assert _codes(tmp_path / "a", "CREATE TABLE t WITH ('store' = 'kafka_main') AS SELECT id FROM pageviews;") \
        == ["DSF-E096"]
    assert _codes(tmp_path / "b", "CREATE TABLE t WITH ('store' = 'lake', 'snowflake.db.name' = 'X') "
                                  "AS SELECT id FROM pageviews;") == ["DSF-E097"]
    assert _codes(tmp_path / "c", "CREATE TABLE t WITH ('store' = 'lake', 'topic' = 'x') "
                                  "AS SELECT id FROM pageviews;") == ["DSF-E031"]
    assert _codes(tmp_path / "d", "CREATE TABLE t WITH ('store' = 'snow') AS SELECT id FROM pageviews;\n"
                                  "CREATE STREAM s AS SELECT id FROM t;", stores_yaml(snowflake_port=1)) == ["DSF-E099"]
    bad_store = "stores:\n  - name: lake\n    type: s3\n    properties:\n      bucket_name: x\n"
    assert _codes(tmp_path / "e", "", bad_store) == ["DSF-E095", "DSF-E095"]
    no_db = "stores:\n  - name: snow\n    type: snowflake\n    properties:\n      account: a\n"
    assert _codes(tmp_path / "f", "CREATE TABLE t WITH ('store' = 'snow') AS SELECT id FROM pageviews;",
                  no_db) == ["DSF-E098"]


def test_postgresql_tables_resolve_and_refuse_what_postgresql_cannot_hold(tmp_path):
    pg = stores_yaml(pg_dsn="host=127.0.0.1 dbname=app")
    project = _load(tmp_path / "ok", USERS + f"""
        CREATE TABLE pv_pg WITH ('store' = 'pg') AS SELECT id, userid FROM pageviews;
        CREATE TABLE levels WITH ('store' = 'pg', 'postgresql.db.name' = 'serving', 'postgresql.schema.name' = 'web',
          'postgresql.table.name' = '{"é" * 31}x') AS SELECT level, COUNT(*) AS n FROM users GROUP BY level;
    """, pg)
    pv, levels = project.relation("analytics.public.pv_pg"), project.relation("analytics.public.levels")
    assert (pv.kind, pv.topic, pv.primary_key) == ("table", "public.pv_pg", ())
    assert (levels.topic, levels.primary_key) == (f"serving.web.{'é' * 31}x", ("level",))  # 63 bytes: accepted
    assert levels.table_options == {"postgresql.db.name": "serving", "postgresql.schema.name": "web",
                                    "postgresql.table.name": f"{'é' * 31}x"}
    query = next(q for q in project.queries if q.sink == "analytics.public.levels")
    assert query.output_mode == "update"  # GROUP BY over a changelog: no DSF-E157, its emptied groups are deleted
    assert _codes(tmp_path / "a", f"CREATE TABLE t WITH ('store' = 'pg', 'postgresql.table.name' = '{'é' * 32}') "
                                  "AS SELECT id FROM pageviews;", pg) == ["DSF-E208"]  # 64 bytes
    assert _codes(tmp_path / "b", "CREATE TABLE t WITH ('store' = 'pg', 'postgresql.schema.name' = 'a.b') "
                                  "AS SELECT id FROM pageviews;", pg) == ["DSF-E208"]
    assert _codes(tmp_path / "c", "CREATE TABLE t WITH ('store' = 'pg', 'delta.path' = 'x') "
                                  "AS SELECT id FROM pageviews;", pg) == ["DSF-E097"]
    assert _codes(tmp_path / "d", "CREATE TABLE t WITH ('store' = 'lake', 'postgresql.table.name' = 'x') "
                                  "AS SELECT id FROM pageviews;", pg) == ["DSF-E097"]
    assert _codes(tmp_path / "e", "CREATE TABLE t WITH ('store' = 'pg') AS SELECT id FROM pageviews;\n"
                                  "CREATE STREAM s AS SELECT id FROM t;", pg) == ["DSF-E099"]


def test_plan_shows_the_table_and_its_effect(tmp_path):
    from dsflow.cli.render import plan_text

    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "sql/all.sql": PAGEVIEWS + """
        CREATE TABLE counts WITH ('store' = 'lake') AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
    """, "stores/lake.yml": stores_yaml()})
    loaded = operations.load(operations.Options(root, None, {"bootstrap": "127.0.0.1:1"}))
    plan = operations.plan(loaded, do_refresh=False)
    change = next(c for c in plan.changes if c.address == "relation.analytics.public.counts")
    assert change.action is Action.CREATE and change.after["table_options"] == {"delta.path": "counts"}
    assert "table created (columns from the query's output)" in plan_text(plan.model_dump(mode="json"))


# availableNow runs on the shared session


@pytest.mark.integration
def test_stream_into_local_and_s3_delta_tables_equals_reference(tmp_path, broker, spark, s3_endpoint, s3_keys):
    create_bucket(s3_endpoint, "lake-append")
    project = lake_project(tmp_path, broker, PAGEVIEWS + """
        CREATE TABLE pv_local WITH ('store' = 'lake', 'delta.path' = 'web/pageviews') AS
          SELECT id, userid, pageid, viewtime FROM pageviews WHERE pageid <> 'Page_0';
        CREATE TABLE pv_s3 WITH ('store' = 's3lake') AS SELECT id, userid, viewtime FROM pageviews;
    """, stores_yaml(s3_endpoint, "lake-append"))
    rng = random.Random(5)
    events = []
    with running(spark, project, ("pv_local", "pv_s3"), tmp_path) as caught_up:  # two rounds, one start each
        for first in (0, 700):
            batch = _events(first, 700, rng)
            produce(broker, project, "pageviews", batch, "userid")
            events += batch
            caught_up()
    local = sorted(_delta_rows(project, "pv_local"), key=lambda r: r["id"])
    assert local == [{k: e[k] for k in ("id", "userid", "pageid", "viewtime")} for e in events
                     if e["pageid"] != "Page_0"]
    assert Path(project.root, "lake", "web", "pageviews", "_delta_log").is_dir()
    on_s3 = sorted(_delta_rows(project, "pv_s3"), key=lambda r: r["id"])
    assert on_s3 == [{k: e[k] for k in ("id", "userid", "viewtime")} for e in events]


@pytest.mark.integration
def test_aggregation_and_changelog_merge_into_delta_keep_the_latest_per_key(tmp_path, broker, spark):
    project = lake_project(tmp_path, broker, PAGEVIEWS + USERS + """
        CREATE TABLE user_counts WITH ('store' = 'lake') AS
          SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum, MAX(viewtime) AS last_view
          FROM pageviews GROUP BY userid;
        CREATE TABLE users_lake WITH ('store' = 'lake') AS SELECT userid, name, level FROM users;
    """, stores_yaml())
    rng = random.Random(8)
    events, users = [], {}
    with running(spark, project, ("user_counts", "users_lake"), tmp_path) as caught_up:  # three rounds
        for round_ in range(3):
            batch = _events(round_ * 500, 500, rng)
            produce(broker, project, "pageviews", batch, "userid")
            events += batch
            changes = [{"userid": f"User_{rng.randrange(1, 15)}", "name": f"n{round_}_{i}", "level": i}
                       for i in range(40)]
            produce(broker, project, "users", changes, "userid")
            users.update({c["userid"]: c for c in changes})
            caught_up()
    views = Counter(e["userid"] for e in events)
    expected = {u: {"userid": u, "views": n, "id_sum": sum(e["id"] for e in events if e["userid"] == u),
                    "last_view": max(e["viewtime"] for e in events if e["userid"] == u)} for u, n in views.items()}
    rows = _delta_rows(project, "user_counts")
    assert len(rows) == len(expected) and _by(rows, "userid") == expected
    users_rows = _delta_rows(project, "users_lake")
    assert len(users_rows) == len(users) and _by(users_rows, "userid") == users


USER_MIRROR = "SELECT userid, name, level FROM users WHERE level < 8"
LEVELS = "SELECT level, COUNT(*) AS n, MAX(name) AS top FROM users GROUP BY level"


@pytest.mark.integration
def test_snowflake_sink_appends_and_merges(tmp_path, broker, spark, fakesnow_port):
    """A stream appended, a stream's GROUP BY merged; a changelog mirrored (a tombstone or a row leaving WHERE
    deletes its key: MERGE ... DELETE) and a GROUP BY over the changelog with retractions (an emptied group
    deleted), both equal to DuckDB over the changelog's final snapshot."""
    from support.changelogs import duckdb_answer, keyed_rows, produce_changes

    snowflake_setup(fakesnow_port)
    project = lake_project(tmp_path, broker, PAGEVIEWS + USERS + f"""
        CREATE TABLE pv_sf WITH ('store' = 'snow', 'snowflake.table.name' = 'PAGEVIEWS_RAW') AS
          SELECT id, userid FROM pageviews;
        CREATE TABLE counts_sf WITH ('store' = 'snow', 'snowflake.schema.name' = 'PUBLIC') AS
          SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;
        CREATE TABLE users_sf WITH ('store' = 'snow') AS {USER_MIRROR};
        CREATE TABLE levels_sf WITH ('store' = 'snow') AS {LEVELS};
    """, stores_yaml(snowflake_port=fakesnow_port))
    rng = random.Random(3)
    events, snapshot, deleted, left = [], {}, False, False
    with running(spark, project, ("pv_sf", "counts_sf", "users_sf", "levels_sf"), tmp_path) as caught_up:
        for first in (0, 300):  # two rounds, each query started once
            batch = _events(first, 300, rng)
            produce(broker, project, "pageviews", batch, "userid")
            events += batch
            changes = [(f"u{rng.randrange(6)}", None if rng.random() < 0.25 else
                        {"name": rng.choice(["ann", "bob", "cy"]), "level": rng.randrange(10)}) for _ in range(25)]
            changes = [(k, None if v is None else {"userid": k, **v}) for k, v in changes]
            produce_changes(broker, project, "users", changes)
            deleted = deleted or any(v is None and k in snapshot for k, v in changes)
            for key, value in changes:
                left = left or (key in snapshot and snapshot[key]["level"] < 8
                                and value is not None and value["level"] >= 8)
                snapshot.pop(key, None) if value is None else snapshot.__setitem__(key, value)
            caught_up()
    fmt = table_format("snowflake")
    settings = dict(project.store("snow").properties)
    _, raw = fmt.rows(TableRef("snowflake", "DEMO_DB.PUBLIC.PAGEVIEWS_RAW", settings), 10_000)
    assert sorted(raw) == [(e["id"], e["userid"]) for e in events]
    _, counts = fmt.rows(TableRef("snowflake", "DEMO_DB.PUBLIC.COUNTS_SF", settings), 10_000)
    assert dict(counts) == dict(Counter(e["userid"] for e in events))
    tables = {"users": "userid VARCHAR, name VARCHAR, level BIGINT"}
    for table, select, key in (("USERS_SF", USER_MIRROR, ("userid",)), ("LEVELS_SF", LEVELS, ("level",))):
        columns, rows = fmt.rows(TableRef("snowflake", f"DEMO_DB.PUBLIC.{table}", settings), 10_000)
        got = keyed_rows([dict(zip([c.lower() for c in columns], r, strict=False)) for r in rows], key)
        assert got == duckdb_answer(tables, {"users": snapshot.values()}, select, key), table
    assert deleted and left, "the inputs must delete a row and move one out of WHERE"


def _uncommit_last_batch(checkpoint: Path) -> int:
    """The checkpoint as a driver killed after its last batch's table commit, before Spark's commit, leaves it:
    that batch's offsets without its commit, and no later batch planned. Returns the batch id."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)
    for planned in (checkpoint / "offsets").iterdir():
        number = planned.name.strip(".").removesuffix(".crc")
        if number.isdigit() and int(number) > last:
            planned.unlink()
    return last


# a real driver process through apply


def _delta_ids(location: str) -> list[int]:
    from deltalake import DeltaTable

    try:
        return DeltaTable(location).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    except Exception:  # noqa: BLE001 - not written yet
        return []


@pytest.mark.integration
def test_apply_creates_the_table_kill_9_mid_stream_duplicates_nothing_and_destroy_drops_it(tmp_path, broker):
    sql = PAGEVIEWS + """
        CREATE TABLE pv_lake WITH ('store' = 'lake', 'delta.path' = 'pv', 'trigger.interval' = '500 ms') AS
          SELECT id, userid, viewtime FROM pageviews;
    """
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"r{os.getpid()}_"), "sql/all.sql": sql,
                                   "stores/lake.yml": stores_yaml()})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert (("relation.analytics.public.pv_lake", Action.CREATE) in
            [(c.address, c.action) for c in plan.actionable])
    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    location = str(root / "lake" / "pv")
    described = table_format("delta").describe(TableRef("delta", location))
    assert [c["name"] for c in described["columns"]] == ["id", "userid", "viewtime"]  # created before any data

    rng = random.Random(1)
    produce(broker, loaded.project, "pageviews", _events(0, 1_000, rng), "userid")
    wait_for(lambda: _delta_ids(location), 240, "the first rows in the table")
    for first in range(1_000, 4_000, 500):  # keep writing while the query runs, then kill it mid-stream
        time.sleep(0.3)
        produce(broker, loaded.project, "pageviews", _events(first, 500, rng), "userid")
    state = operations.load(options).workspace.state_backend().read()
    outputs = state.resources["query.analytics.public.pv_lake"].outputs
    pid = outputs["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process.is_running(pid, query_identity(outputs)), 10, "the driver to die")
    assert len(_delta_ids(location)) < 5_000

    produce(broker, loaded.project, "pageviews", _events(4_000, 1_000, rng), "userid")
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert [(c.address, c.action) for c in plan.actionable] == [("query.analytics.public.pv_lake", Action.UPDATE)]
    assert operations.apply(loaded, plan).ok
    wait_for(lambda: len(_delta_ids(location)) >= 5_000, 240, "all 5,000 rows in the table")
    ids = _delta_ids(location)
    assert sorted(ids) == list(range(5_000)), f"{len(ids) - len(set(ids))} duplicate rows"

    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert not Path(location).exists()


@pytest.mark.integration
def test_a_batch_replayed_without_its_checkpoint_commit_is_skipped(tmp_path, broker, spark, capfd):
    """A Delta table and a PostgreSQL table (a dsn store: the table is public.pv_replay_pg of the dsn's database)
    appended to from a stream: the last batch, written but not committed in the checkpoint, runs again and is
    skipped, so each table holds every event once."""
    from support.pgserver import sql as pg_sql

    database = f"dsflow_replay_{os.getpid()}_{random.randrange(10**6)}"
    pg_sql("postgres", f"CREATE DATABASE {database}")
    try:
        project = lake_project(tmp_path, broker, PAGEVIEWS + """
            CREATE TABLE pv_replay WITH ('store' = 'lake') AS SELECT id, userid FROM pageviews;
            CREATE TABLE pv_replay_pg WITH ('store' = 'pg') AS SELECT id, userid FROM pageviews;
        """, stores_yaml(pg_dsn=f"host=127.0.0.1 port={pgserver.PORT} user=postgres dbname={database}"))
        assert project.relation("analytics.public.pv_replay_pg").topic == "public.pv_replay_pg"
        rng = random.Random(2)
        events = _events(0, 300, rng)
        produce(broker, project, "pageviews", events, "userid")
        for name, where in (("pv_replay", "the Delta table"), ("pv_replay_pg", "public.pv_replay_pg")):
            run(spark, project, name, tmp_path)
            last = _uncommit_last_batch(tmp_path / "checkpoints" / name)
            capfd.readouterr()
            run(spark, project, name, tmp_path)
            assert f"batch {last} is already in" in capfd.readouterr().err, where
        assert sorted(r["id"] for r in _delta_rows(project, "pv_replay")) == list(range(300))
        pg_rows = pg_sql(database, "SELECT id, userid FROM pv_replay_pg")
        assert sorted(pg_rows) == sorted((e["id"], e["userid"]) for e in events)
    finally:
        pg_sql("postgres", f"DROP DATABASE {database} WITH (FORCE)")
