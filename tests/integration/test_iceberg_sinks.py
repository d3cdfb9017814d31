"""CREATE TABLE ... AS SELECT into Apache Iceberg (pyiceberg, a SQLite catalog file and a local warehouse in
tmp_path; a PostgreSQL catalog database for teams): appends for streams, upserts for aggregations and changelogs,
each equal to a Python reference read back through pyiceberg; a batch replayed without its checkpoint commit is
not written twice (the batch id in the snapshot summary); apply creates the table before any data, kill -9
mid-stream duplicates nothing, `dsflow entity` lists and describes it, destroy counts its rows and drops it.
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
from dsflow.adapters.tables import TableRef, table_format, table_ref
from dsflow.core.plan import Action
from dsflow.core.safety import Allowance
from dsflow.errors import DsflowError, ProjectError
from dsflow.engine.executors import query_identity
from dsflow.load.project import load_project
from support.lake import lake_project
from support.projects import make_project
from support.streaming import CONFIG, produce, run
from test_lake_sinks import PAGEVIEWS, USERS, _events, _uncommit_last_batch
from support.waiting import wait_for
from support import pgserver


def iceberg_yaml(warehouse: Path | str, catalog_uri: str | None = None, extra: str = "") -> str:
    text = f"stores:\n  - name: ice\n    type: iceberg\n    properties:\n      warehouse: {warehouse}\n"
    if catalog_uri:
        text += f"      catalog_uri: {catalog_uri}\n"
    return text + extra


def _rows(project, name: str) -> list[dict]:
    """The table's rows, read with pyiceberg itself (not through dsflow's format)."""
    from pyiceberg.catalog.sql import SqlCatalog

    relation = project.relation(f"analytics.public.{name}")
    ref = table_ref(project.root, project.store(relation.store), relation)
    settings = ref.settings
    properties = {"uri": settings.get("catalog_uri") or f"sqlite:///{settings['warehouse']}/catalog.db",
                  "warehouse": settings["warehouse"] if "://" in settings["warehouse"]
                  else "file://" + settings["warehouse"]}
    for key, option in (("endpoint_url", "s3.endpoint"), ("region", "s3.region")):
        if settings.get(key):
            properties[option] = settings[key]
    for key, option in (("access_key_id", "s3.access-key-id"), ("secret_access_key", "s3.secret-access-key")):
        if settings.get(key):
            properties[option] = settings[key]
    return SqlCatalog("dsflow", **properties).load_table(ref.location).scan().to_arrow().to_pylist()


# validation (no broker)


def _load(tmp_path: Path, sql: str, stores: str):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "sql/all.sql": PAGEVIEWS + sql,
                                   "stores/ice.yml": stores})
    return load_project(root, variables={"bootstrap": "127.0.0.1:1"})


def _codes(tmp_path: Path, sql: str, stores: str) -> list[str]:
    with pytest.raises(ProjectError) as err:
        _load(tmp_path, sql, stores)
    return [d.code for d in err.value.diagnostics]


def test_an_iceberg_table_resolves_to_namespace_and_table(tmp_path):
    project = _load(tmp_path, """
        CREATE TABLE pv WITH ('store' = 'ice') AS SELECT id, userid FROM pageviews;
        CREATE TABLE counts WITH ('store' = 'ice', 'iceberg.namespace.name' = 'web', 'iceberg.table.name' = 'c')
          AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
    """, iceberg_yaml(tmp_path / "wh"))
    pv, counts = project.relation("analytics.public.pv"), project.relation("analytics.public.counts")
    assert (pv.kind, pv.store, pv.topic) == ("table", "ice", "public.pv")
    assert pv.table_options == {"iceberg.namespace.name": "public", "iceberg.table.name": "pv"}
    assert (counts.topic, counts.primary_key) == ("web.c", ("userid",))
    ref = table_ref(project.root, project.store("ice"), counts)
    assert (ref.format, ref.location, ref.settings["warehouse"]) == ("iceberg", "web.c", str(tmp_path / "wh"))


def test_iceberg_store_and_table_validation(tmp_path):
    table = "CREATE TABLE t WITH ('store' = 'ice') AS SELECT id FROM pageviews;"
    assert _codes(tmp_path / "a", table, iceberg_yaml("relative/wh")) == ["DSF-E230"]
    assert _codes(tmp_path / "b", table, iceberg_yaml("s3://bucket/wh")) == ["DSF-E231"]
    assert _codes(tmp_path / "c", table, "stores:\n  - name: ice\n    type: iceberg\n    properties:\n"
                                         "      catalog_url: x\n") == ["DSF-E095", "DSF-E095"]
    assert _codes(tmp_path / "d", "CREATE TABLE t WITH ('store' = 'ice', 'delta.path' = 'x') "
                                  "AS SELECT id FROM pageviews;", iceberg_yaml(tmp_path)) == ["DSF-E097"]
    assert _codes(tmp_path / "e", "CREATE TABLE t WITH ('store' = 'ice', 'iceberg.table.name' = 'a.b') "
                                  "AS SELECT id FROM pageviews;", iceberg_yaml(tmp_path)) == ["DSF-E208"]
    _load(tmp_path / "f", table, iceberg_yaml("s3://bucket/wh", "sqlite:////tmp/c.db"))  # loads


def test_a_missing_table_is_a_clear_error(tmp_path):
    ref = TableRef("iceberg", "public.nothing", {"warehouse": str(tmp_path / "wh")})
    fmt = table_format("iceberg")
    assert not fmt.exists(ref)
    with pytest.raises(DsflowError) as err:
        fmt.count_rows(ref)
    assert err.value.code == "DSF-E234"
    unreachable = TableRef("iceberg", "x.y", {"warehouse": str(tmp_path), "catalog_uri": "nodb://x"})
    with pytest.raises(DsflowError) as err:
        fmt.create(unreachable, [("a", "INT")], [])
    assert err.value.code == "DSF-E232"


def test_columns_added_in_place_and_a_repeated_batch_written_once(tmp_path):
    """The format alone on a real catalog: ADD COLUMN keeps the rows (NULL in the new column); the same batch id
    of the same app id is skipped, another app id (a new checkpoint) writes."""
    import pyarrow as pa

    ref = TableRef("iceberg", "web.t", {"warehouse": str(tmp_path / "wh")})
    fmt = table_format("iceberg")
    fmt.create(ref, [("id", "BIGINT"), ("small", "SMALLINT")], [])
    assert fmt.exists(ref) and fmt.count_rows(ref) == 0
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "small": pa.array([1, 2], pa.int16())})
    assert fmt.write_batch(ref, first, [], "app-a", 0)
    assert not fmt.write_batch(ref, first, [], "app-a", 0)
    fmt.add_columns(ref, [("id", "BIGINT"), ("name", "VARCHAR")])
    second = pa.table({"id": pa.array([3], pa.int64()), "small": pa.array([3], pa.int16()), "name": ["c"]})
    assert fmt.write_batch(ref, second, [], "app-a", 1)
    assert fmt.write_batch(ref, second, [], "app-b", 0)
    columns, rows = fmt.rows(ref, 10)
    assert columns == ["id", "small", "name"]
    assert sorted(rows) == [(1, 1, None), (2, 2, None), (3, 3, "c"), (3, 3, "c")]
    described = fmt.describe(ref)
    assert [(c["name"], c["type"]) for c in described["columns"]] == [("id", "long"), ("small", "int"),
                                                                      ("name", "string")]
    assert described["records"] == 4 and described["configuration"]["dsflow.created"] == "true"
    fmt.drop(ref)
    assert not fmt.exists(ref)


@pytest.fixture
def pg_catalog_db():
    """A fresh PostgreSQL database on the test server (trust auth) for a team catalog; dropped afterwards."""
    import uuid

    import psycopg2

    name = f"iceberg_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(pgserver.dsn("postgres"))
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{pgserver.PORT}/{name}"
    finally:
        admin.cursor().execute(f"DROP DATABASE {name} WITH (FORCE)")
        admin.close()


def test_a_postgresql_catalog_holds_the_table_files_stay_in_the_warehouse(tmp_path, pg_catalog_db):
    import psycopg2
    import pyarrow as pa

    settings = {"warehouse": str(tmp_path / "wh"), "catalog_uri": pg_catalog_db, "catalog_name": "team"}
    ref = TableRef("iceberg", "shared.events", settings)
    fmt = table_format("iceberg")
    fmt.create(ref, [("id", "BIGINT")], ["id"])
    assert fmt.write_batch(ref, pa.table({"id": pa.array([1, 2, 2], pa.int64())}), ["id"], "app", 0)
    assert fmt.count_rows(ref) == 2 and fmt.list_entities(settings, "shared") == ["shared.events"]
    with psycopg2.connect(pg_catalog_db.replace("+psycopg2", "")) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT catalog_name, table_namespace, table_name FROM iceberg_tables")
        assert cursor.fetchall() == [("team", "shared", "events")]
    assert not (tmp_path / "wh" / "catalog.db").exists() and (tmp_path / "wh" / "shared" / "events").is_dir()
    fmt.drop(ref)
    assert not fmt.exists(ref)


# availableNow runs on the shared session


@pytest.mark.integration
def test_stream_appends_and_aggregation_upserts_equal_the_reference(tmp_path, broker, spark):
    project = lake_project(tmp_path, broker, PAGEVIEWS + USERS + """
        CREATE TABLE pv_ice WITH ('store' = 'ice') AS
          SELECT id, userid, pageid, viewtime FROM pageviews WHERE pageid <> 'Page_0';
        CREATE TABLE counts_ice WITH ('store' = 'ice', 'iceberg.namespace.name' = 'agg') AS
          SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum, MAX(viewtime) AS last_view
          FROM pageviews GROUP BY userid;
        CREATE TABLE users_ice WITH ('store' = 'ice') AS SELECT userid, name, level FROM users;
    """, iceberg_yaml(tmp_path / "warehouse"))
    rng = random.Random(11)
    events, users = [], {}
    for round_ in range(3):
        batch = _events(round_ * 400, 400, rng)
        produce(broker, project, "pageviews", batch, "userid")
        events += batch
        changes = [{"userid": f"User_{rng.randrange(1, 15)}", "name": f"n{round_}_{i}", "level": i}
                   for i in range(40)]
        produce(broker, project, "users", changes, "userid")
        users.update({c["userid"]: c for c in changes})
        for name in ("pv_ice", "counts_ice", "users_ice"):
            run(spark, project, name, tmp_path)
    appended = sorted(_rows(project, "pv_ice"), key=lambda r: r["id"])
    assert appended == [{k: e[k] for k in ("id", "userid", "pageid", "viewtime")} for e in events
                        if e["pageid"] != "Page_0"]
    views = Counter(e["userid"] for e in events)
    expected = {u: {"userid": u, "views": n, "id_sum": sum(e["id"] for e in events if e["userid"] == u),
                    "last_view": max(e["viewtime"] for e in events if e["userid"] == u)} for u, n in views.items()}
    counts = _rows(project, "counts_ice")
    assert len(counts) == len(expected) and {r["userid"]: r for r in counts} == expected
    users_rows = _rows(project, "users_ice")
    assert len(users_rows) == len(users) and {r["userid"]: r for r in users_rows} == users
    assert (tmp_path / "warehouse" / "catalog.db").is_file()


@pytest.mark.integration
def test_a_replayed_batch_is_skipped_by_the_snapshot_summary(tmp_path, broker, spark, capfd):
    from dsflow.adapters.iceberg.catalog import catalog

    project = lake_project(tmp_path, broker, PAGEVIEWS + """
        CREATE TABLE pv_replay WITH ('store' = 'ice') AS SELECT id, userid FROM pageviews;
    """, iceberg_yaml(tmp_path / "warehouse"))
    produce(broker, project, "pageviews", _events(0, 300, random.Random(2)), "userid")
    run(spark, project, "pv_replay", tmp_path)
    table = catalog({"warehouse": str(tmp_path / "warehouse")}).load_table("public.pv_replay")
    summary = table.current_snapshot().summary
    assert summary["dsflow.app_id"].startswith("dsflow-") and summary["dsflow.batch_id"].isdigit()
    last = _uncommit_last_batch(tmp_path / "checkpoints" / "pv_replay")
    assert int(summary["dsflow.batch_id"]) == last
    run(spark, project, "pv_replay", tmp_path)
    assert f"batch {last} is already in public.pv_replay" in capfd.readouterr().err
    assert sorted(r["id"] for r in _rows(project, "pv_replay")) == list(range(300))


# a real driver process through apply


def _ids(warehouse: Path, name: str) -> list[int]:
    from dsflow.adapters.iceberg.catalog import catalog

    try:
        table = catalog({"warehouse": str(warehouse)}).load_table(name)
    except Exception:  # noqa: BLE001 - not created yet
        return []
    return table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()


@pytest.mark.integration
def test_apply_kill_9_mid_stream_entity_and_destroy(tmp_path, broker):
    from dsflow.engine.entities import Target, describe_entity, list_entities

    sql = PAGEVIEWS + """
        CREATE TABLE pv_lake WITH ('store' = 'ice', 'trigger.interval' = '500 ms') AS
          SELECT id, userid, viewtime FROM pageviews;
    """
    warehouse = tmp_path / "warehouse"
    root = make_project(tmp_path / "p", {"dsflow.yml": CONFIG.format(prefix=f"i{os.getpid()}_"), "sql/all.sql": sql,
                                         "stores/ice.yml": iceberg_yaml(warehouse)})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert ("relation.analytics.public.pv_lake", Action.CREATE) in [(c.address, c.action) for c in plan.actionable]
    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    target = Target(loaded.project.store("ice"), "public.pv_lake")
    described = describe_entity(loaded.project, target)  # created before any data
    assert [c["name"] for c in described["columns"]] == ["id", "userid", "viewtime"] and described["records"] == 0
    assert list_entities(loaded.project, Target(loaded.project.store("ice"), "")) == ["public"]
    assert list_entities(loaded.project, Target(loaded.project.store("ice"), "public")) == ["public.pv_lake"]

    rng = random.Random(1)
    produce(broker, loaded.project, "pageviews", _events(0, 1_000, rng), "userid")
    wait_for(lambda: _ids(warehouse, "public.pv_lake"), 240, "the first rows in the table")
    for first in range(1_000, 4_000, 500):  # keep writing while the query runs, then kill it mid-stream
        time.sleep(0.3)
        produce(broker, loaded.project, "pageviews", _events(first, 500, rng), "userid")
    state = operations.load(options).workspace.state_backend().read()
    outputs = state.resources["query.analytics.public.pv_lake"].outputs
    pid = outputs["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process.is_running(pid, query_identity(outputs)), 10, "the driver to die")
    assert len(_ids(warehouse, "public.pv_lake")) < 5_000

    produce(broker, loaded.project, "pageviews", _events(4_000, 1_000, rng), "userid")
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert [(c.address, c.action) for c in plan.actionable] == [("query.analytics.public.pv_lake", Action.UPDATE)]
    assert operations.apply(loaded, plan).ok
    wait_for(lambda: len(_ids(warehouse, "public.pv_lake")) >= 5_000, 240, "all 5,000 rows in the table")
    ids = _ids(warehouse, "public.pv_lake")
    assert sorted(ids) == list(range(5_000)), f"{len(ids) - len(set(ids))} duplicate rows"

    loaded = operations.load(options)
    destroy = operations.plan(loaded, destroy=True)
    table = next(c for c in destroy.changes if c.address == "relation.analytics.public.pv_lake")
    assert table.action is Action.DELETE and table.destroys is not None
    assert table.destroys.records == 5_000 and "iceberg table public.pv_lake" in table.destroys.object, table.destroys
    assert operations.apply(loaded, destroy, allowance=Allowance(everything=True)).ok
    assert _ids(warehouse, "public.pv_lake") == []
    from dsflow.adapters.iceberg.catalog import catalog

    assert not catalog({"warehouse": str(warehouse)}).table_exists("public.pv_lake")
