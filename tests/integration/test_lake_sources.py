"""Lake tables as sources: a Delta table (declared with CREATE TABLE name (cols) WITH ('store' = ...)) read as the
stream of its appended rows by the dsflow_delta data source (adapters/tables/reading.py), the table version as the
offset. Rows appended with deltalake's write_deltalake in several commits reach the output exactly once, equal to a
Python reference; a DELETE commit stops the query with DSF-E380 after the appends before it; kill -9 of the driver
mid-stream and apply again resume exactly (the sink a databricks store's Delta table, created by apply and dropped
by destroy). An Iceberg table is read the same way, the snapshot id as the offset (adapters/iceberg/reading.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from dsflow.adapters.tables.delta import storage_options
from dsflow.core.plan import Action
from dsflow.errors import ProjectError
from dsflow.engine.executors import query_identity
from dsflow.load.project import load_project
from support.lake import S3_KEYS, create_bucket, lake_project, stores_yaml
from support.projects import make_project
from support.streaming import CONFIG, records, run
from support.waiting import wait_for

ORDERS = """\
CREATE TABLE orders (id BIGINT, item VARCHAR, qty BIGINT, price DOUBLE)
  WITH ('store' = 'lake', 'delta.path' = 'shop/orders');
"""


def _iceberg_store(warehouse: Path) -> str:
    return f"  - name: ice\n    type: iceberg\n    properties:\n      warehouse: {warehouse}\n"


def _orders(first: int, count: int, rng: random.Random) -> list[dict]:
    return [{"id": i, "item": f"item_{rng.randrange(0, 5)}", "qty": rng.randrange(0, 10),
             "price": round(rng.uniform(1, 100), 2)} for i in range(first, first + count)]


def _append(location: str, rows: list[dict], options: dict | None = None, partition_by=None) -> None:
    """One commit of rows appended to the table, as any other writer of the lake would."""
    import pyarrow as pa
    from deltalake import write_deltalake

    schema = pa.schema([("id", pa.int64()), ("item", pa.string()), ("qty", pa.int64()), ("price", pa.float64())])
    write_deltalake(location, pa.Table.from_pylist(rows, schema), mode="append", partition_by=partition_by,
                    storage_options=options)


def _location(project, name: str) -> tuple[str, dict | None]:
    from dsflow.adapters.tables import table_ref

    relation = project.relation(f"analytics.public.{name}")
    ref = table_ref(project.root, project.store(relation.store), relation)
    return ref.location, storage_options(ref)


def _values(broker: str, project, name: str) -> list[dict]:
    return [json.loads(r["value"]) for r in records(broker, project, name)]


# validation


def _load(tmp_path: Path, sql: str):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "sql/all.sql": sql,
                                   "stores/lake.yml": stores_yaml() + _iceberg_store(tmp_path / "ice")})
    return load_project(root, variables={"bootstrap": "127.0.0.1:1"})


def _codes(tmp_path: Path, sql: str) -> list[str]:
    with pytest.raises(ProjectError) as err:
        _load(tmp_path, sql)
    return [d.code for d in err.value.diagnostics]


def test_a_declared_delta_table_is_read_into_a_stream_of_the_default_store(tmp_path):
    project = _load(tmp_path, ORDERS + """
        CREATE STREAM big_orders AS SELECT id, item, qty * price AS total FROM orders WHERE qty >= 3;
    """)
    orders, big = project.relation("analytics.public.orders"), project.relation("analytics.public.big_orders")
    assert (orders.kind, orders.store, orders.table_options) == ("table", "lake", {"delta.path": "shop/orders"})
    assert [c.name for c in orders.columns] == ["id", "item", "qty", "price"] and orders.defined_by_query is None
    assert (big.kind, big.store) == ("stream", "kafka_main")
    query = next(q for q in project.queries if q.sink == big.fqn)
    assert [s.relation for s in query.sources] == [orders.fqn]
    iceberg = _load(tmp_path / "ice", "CREATE TABLE ice_t (id BIGINT) WITH ('store' = 'ice');\n"
                                      "CREATE STREAM s AS SELECT id FROM ice_t;")
    assert iceberg.relation("analytics.public.s").store == "kafka_main"


def test_tables_that_are_not_appended_delta_tables_are_refused_as_sources(tmp_path):
    pageviews = "CREATE STREAM pv (id BIGINT, userid VARCHAR) WITH ('value.format' = 'json');\n"
    assert _codes(tmp_path / "b", pageviews + "CREATE TABLE counts WITH ('store' = 'lake') AS "
                                  "SELECT userid, COUNT(*) AS n FROM pv GROUP BY userid;\n"
                                  "CREATE STREAM s AS SELECT userid FROM counts;") == ["DSF-E382"]
    assert _codes(tmp_path / "c", "CREATE TABLE t (id BIGINT) WITH ('store' = 'kafka_main');") == ["DSF-E096"]


# availableNow runs on the shared session


@pytest.mark.integration
def test_appended_commits_flow_into_the_stream_exactly_once(tmp_path, broker, spark, s3_endpoint, monkeypatch):
    for key, value in S3_KEYS.items():
        monkeypatch.setenv(key, value)
    create_bucket(s3_endpoint, "lake-sources")
    project = lake_project(tmp_path, broker, ORDERS + """
        CREATE TABLE orders_s3 (id BIGINT, item VARCHAR, qty BIGINT, price DOUBLE) WITH ('store' = 's3lake');
        CREATE STREAM big_orders AS SELECT id, item, qty * price AS total FROM orders WHERE qty >= 3;
        CREATE STREAM late_orders AS SELECT id FROM orders WITH ('starting.position' = 'latest');
        CREATE STREAM s3_orders AS SELECT id, qty FROM orders_s3;
    """, stores_yaml(s3_endpoint, "lake-sources"))
    location, _ = _location(project, "orders")
    rng = random.Random(11)
    written: list[dict] = []
    for round_, commits in enumerate((3, 2)):  # several commits between runs, partitioned by item
        for _ in range(commits):
            batch = _orders(len(written), 150, rng)
            _append(location, batch, partition_by=["item"])
            written += batch
        run(spark, project, "big_orders", tmp_path)
        if round_ == 0:
            run(spark, project, "late_orders", tmp_path)  # first run: positioned at the newest version
            late_from = len(written)
    expected = [(o["id"], o["item"], round(o["qty"] * o["price"], 6)) for o in written if o["qty"] >= 3]
    assert _big(broker, project) == expected  # each row exactly once, equal to the reference
    run(spark, project, "late_orders", tmp_path)
    assert sorted(r["id"] for r in _values(broker, project, "late_orders")) == [o["id"] for o in written[late_from:]]

    s3_location, options = _location(project, "orders_s3")
    s3_rows = _orders(0, 200, rng)
    _append(s3_location, s3_rows[:120], options)
    _append(s3_location, s3_rows[120:], options)
    run(spark, project, "s3_orders", tmp_path)
    assert sorted(_values(broker, project, "s3_orders"), key=lambda r: r["id"]) == \
        [{"id": o["id"], "qty": o["qty"]} for o in s3_rows]

    from deltalake import DeltaTable

    last = _orders(len(written), 50, rng)
    _append(location, last)
    DeltaTable(location).delete("qty = 0")  # not an append
    delete_version = DeltaTable(location).version()
    query = next(q for q in project.queries if q.fqn == "analytics.public.big_orders")
    spec = query_spec(project, query, "test", str(tmp_path / "checkpoints" / "big_orders"), str(tmp_path / "s"))
    running = start_query(spark, spec, available_now=True)
    with pytest.raises(Exception) as failed:  # noqa: B017 - Spark's StreamingQueryException
        running.awaitTermination(120)
    error = str(failed.value)
    assert "DSF-E380" in error and f"version {delete_version} " in error and location in error, error
    assert _big(broker, project) == expected + [(o["id"], o["item"], round(o["qty"] * o["price"], 6))
                                                for o in last if o["qty"] >= 3]  # the append before it was read


def _big(broker: str, project) -> list[tuple]:
    return sorted((r["id"], r["item"], round(r["total"], 6)) for r in _values(broker, project, "big_orders"))


@pytest.mark.integration
def test_appended_iceberg_snapshots_flow_into_the_stream_exactly_once(tmp_path, broker, spark):
    from dsflow.adapters.tables import table_format, table_ref

    project = lake_project(tmp_path, broker, """
        CREATE TABLE ice_orders (id BIGINT, item VARCHAR, qty BIGINT, price DOUBLE) WITH ('store' = 'ice');
        CREATE STREAM ice_big AS SELECT id, item, qty FROM ice_orders WHERE qty >= 3;
    """, stores_yaml() + _iceberg_store(tmp_path / "ice"))
    relation = project.relation("analytics.public.ice_orders")
    ref = table_ref(project.root, project.store("ice"), relation)
    table_format("iceberg").create(ref, [(c.name, c.type) for c in relation.columns], [])  # as apply does
    from dsflow.adapters.iceberg.catalog import catalog, identifier

    table = catalog(ref.settings).load_table(identifier(ref.location))
    rng = random.Random(21)
    written: list[dict] = []
    for commits in (3, 2):
        for _ in range(commits):
            batch = _orders(len(written), 120, rng)
            table.append(_arrow(batch))
            written += batch
        run(spark, project, "ice_big", tmp_path)
    expected = [{"id": o["id"], "item": o["item"], "qty": o["qty"]} for o in written if o["qty"] >= 3]
    assert sorted(_values(broker, project, "ice_big"), key=lambda r: r["id"]) == expected

    table.delete("qty = 0")  # an overwrite/delete snapshot: not an append
    query = next(q for q in project.queries if q.fqn == "analytics.public.ice_big")
    spec = query_spec(project, query, "test", str(tmp_path / "checkpoints" / "ice_big"), str(tmp_path / "s"))
    with pytest.raises(Exception) as failed:  # noqa: B017 - Spark's StreamingQueryException
        start_query(spark, spec, available_now=True).awaitTermination(120)
    assert "DSF-E385" in str(failed.value) and "ice_orders" in str(failed.value)
    assert len(_values(broker, project, "ice_big")) == len(expected)


def _arrow(rows: list[dict]):
    import pyarrow as pa

    return pa.Table.from_pylist(rows, pa.schema([("id", pa.int64()), ("item", pa.string()), ("qty", pa.int64()),
                                                 ("price", pa.float64())]))


# a real driver process through apply, into a databricks store's Delta table


def _delta_ids(location: str) -> list[int]:
    from deltalake import DeltaTable

    try:
        return DeltaTable(location).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    except Exception:  # noqa: BLE001 - not written yet
        return []


DATABRICKS = "  - name: dbx\n    type: databricks\n    properties:\n      path: dbx_lake\n"


@pytest.mark.integration
def test_kill_9_mid_stream_resumes_exactly_into_a_databricks_delta_table(tmp_path, broker):
    sql = ORDERS + """
        CREATE TABLE orders_copy WITH ('store' = 'dbx', 'trigger.interval' = '500 ms') AS
          SELECT id, item, qty FROM orders WHERE qty > 0;
    """
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"ls{os.getpid()}_"), "sql/all.sql": sql,
                                   "stores/lake.yml": stores_yaml() + DATABRICKS})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert {(c.address, c.action) for c in plan.actionable} >= {
        ("relation.analytics.public.orders", Action.CREATE), ("relation.analytics.public.orders_copy", Action.CREATE)}
    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    source, sink = str(root / "lake" / "shop" / "orders"), str(root / "dbx_lake" / "orders_copy")
    outputs = operations.load(options).workspace.state_backend().read().resources[
        "relation.analytics.public.orders_copy"].outputs
    assert (outputs["format"], outputs["table"], outputs["catalog"].split(":")[0]) == ("delta", sink, "skipped")

    rng = random.Random(4)
    written = _orders(0, 400, rng)
    _append(source, written)
    wait_for(lambda: _delta_ids(sink), 240, "the first rows in the databricks table")
    for _ in range(8):  # keep committing while the query runs, then kill it mid-stream
        time.sleep(0.3)
        batch = _orders(len(written), 200, rng)
        _append(source, batch)
        written += batch
    state = operations.load(options).workspace.state_backend().read()
    outputs = state.resources["query.analytics.public.orders_copy"].outputs
    pid = outputs["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process.is_running(pid, query_identity(outputs)), 10, "the driver to die")
    for _ in range(3):
        batch = _orders(len(written), 200, rng)
        _append(source, batch)
        written += batch

    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert [(c.address, c.action) for c in plan.actionable] == [("query.analytics.public.orders_copy",
                                                                 Action.UPDATE)]
    assert operations.apply(loaded, plan).ok
    expected = sorted(o["id"] for o in written if o["qty"] > 0)
    wait_for(lambda: len(_delta_ids(sink)) >= len(expected), 240, "every row in the databricks table")
    ids = _delta_ids(sink)
    assert sorted(ids) == expected, f"{len(ids) - len(set(ids))} duplicated, {len(set(expected) - set(ids))} lost"
    from deltalake import DeltaTable

    rows = sorted(DeltaTable(sink).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": o["id"], "item": o["item"], "qty": o["qty"]} for o in written if o["qty"] > 0]

    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert not Path(sink).exists()
    assert not Path(source).exists()  # apply created the declared table, so destroy drops it
