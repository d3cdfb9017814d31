"""PostgreSQL CDC streams against the session's server (tests/support/pgserver.py, wal_level=logical).

Each test module run creates its own database and drops it (and every slot in it) at the end. Queries run
through dsflow's own translation and driver functions, availableNow, on the shared Spark session; a
restart is a new run on the same checkpoint.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.client import read_to_end
from dsflow.adapters.postgres import admin
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from dsflow.core.plan import Action
from dsflow.errors import ProjectError
from dsflow.load.project import load_project
from support.pgserver import SERVER, sql
from support.projects import make_project
from support.pgserver import PORT as PG_PORT

pytestmark = pytest.mark.integration


CONFIG = """\
name: cdctest
default:
  database: analytics
  schema: public
  store: kafka_main
runtime:
  trigger_interval: 1 second
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
    vars:
      bootstrap: 127.0.0.1:9092
"""

STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: pg
    type: postgresql
    properties:
      host: 127.0.0.1
      port: %s
      user: postgres
""" % PG_PORT

ROW = "id BIGINT, amount DECIMAL(10, 2), created TIMESTAMP, doc VARCHAR, tags ARRAY<VARCHAR>, qty INT, " \
      "active BOOLEAN, note VARCHAR"

CDC_SQL = f"""\
CREATE STREAM orders_cdc (
  op VARCHAR,
  ts_ms BIGINT,
  `before` STRUCT<{ROW}>,
  `after` STRUCT<{ROW}>,
  source STRUCT<db VARCHAR, `schema` VARCHAR, `table` VARCHAR, lsn BIGINT, ts_ms BIGINT, snapshot BOOLEAN>
) WITH ('store' = 'pg', 'postgresql.db.name' = '{{db}}', 'postgresql.schema.name' = 'public',
        'postgresql.table.name' = 'orders');
"""

CSAS = """
CREATE STREAM orders_changes AS
  SELECT op, `before`, `after`, source FROM orders_cdc;
"""

TABLE = """
CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric(10, 2), created timestamptz, doc jsonb,
                     tags text[], qty int, active boolean, note text);
ALTER TABLE orders REPLICA IDENTITY FULL;
"""


@pytest.fixture(scope="module")
def pgdb() -> Iterator[str]:
    """A fresh database with the orders table; dropped at the end with its slots and publications."""
    assert sql("postgres", "SHOW wal_level") == [("logical",)], \
        "CDC needs wal_level=logical (tests/environment.py sets it at session start)"
    name = f"dsflow_cdc_{uuid.uuid4().hex[:8]}"
    sql("postgres", f"CREATE DATABASE {name}")
    sql(name, TABLE)
    yield name
    for (slot,) in sql("postgres", "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)):
        sql("postgres", "SELECT pg_drop_replication_slot(%s)", (slot,))
    sql("postgres", f"DROP DATABASE {name} WITH (FORCE)")


def project_files(tmp_path: Path, pgdb: str, extra_sql: str = "") -> Path:
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    return make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "stores/kafka.yml": STORES,
                                   "sql/cdc.sql": CDC_SQL.replace("{db}", pgdb) + extra_sql})


def run(spark, project, name: str, work: Path, timeout: float = 180) -> None:
    query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
    spec = query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))
    running = start_query(spark, spec, available_now=True)
    assert running.awaitTermination(timeout), f"{name} did not finish in {timeout} s"
    assert running.exception() is None, running.exception()


def changes(broker: str, project) -> list[dict]:
    topic = project.relation("analytics.public.orders_changes").topic
    return [{**json.loads(r["value"]), "key": r["key"]}
            for r in read_to_end(broker, topic)]


def slot_of(project) -> str:
    return project.relation("analytics.public.orders_cdc").table_options["postgresql.slot.name"]


# --- validation -----------------------------------------------------------------------------------


def test_validation_reports_cdc_mistakes_with_their_lines(tmp_path: Path) -> None:
    bad = """\
CREATE STREAM a_cdc (op VARCHAR, `after` STRUCT<id BIGINT>, extra INT)
  WITH ('store' = 'pg', 'postgresql.db.name' = 'shop', 'postgresql.schema.name' = 'public',
        'postgresql.table.name' = 'a');
CREATE STREAM b_cdc (op VARCHAR, `before` STRUCT<id BIGINT>, `after` STRUCT<id BIGINT, x INT>)
  WITH ('store' = 'pg', 'postgresql.table.name' = 'b', 'topic' = 'nope');
CREATE STREAM c_cdc (op VARCHAR, `after` BIGINT) WITH ('store' = 'nostore', 'value.format' = 'json');
CREATE STREAM d_cdc (op VARCHAR, `after` STRUCT<id BIGINT>)
  WITH ('store' = 'pg', 'postgresql.db.name' = 'shop', 'postgresql.schema.name' = 'public',
        'postgresql.table.name' = 'd');
CREATE STREAM d_copy WITH ('store' = 'pg') AS SELECT op FROM d_cdc;
"""
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "stores/kafka.yml": STORES,
                                   "sql/bad.sql": bad})
    with pytest.raises(ProjectError) as caught:
        load_project(root)
    found = {(d.code, d.location.line if d.location else None) for d in caught.value.diagnostics}
    messages = "\n".join(str(d) for d in caught.value.diagnostics)
    assert ("DSF-E086", 1) in found, messages  # extra is not a field of a change event
    assert ("DSF-E085", 4) in found, messages  # missing db and schema names
    assert ("DSF-E085", 5) in found, messages  # 'topic' is not a CDC property
    assert ("DSF-E086", 4) in found, messages  # before and after differ
    assert ("DSF-E021", 6) in found, messages  # unknown store
    assert ("DSF-E087", 10) in found, messages  # a CSAS cannot write into a postgresql store
    assert all(d.location and d.location.file.endswith("bad.sql") for d in caught.value.diagnostics
               if d.code in ("DSF-E085", "DSF-E086", "DSF-E087"))


def test_slot_and_publication_names_are_derived_and_shown_in_the_plan(tmp_path: Path) -> None:
    root = project_files(tmp_path, "shop", CSAS)
    loaded = operations.load(operations.Options(root))
    plan = operations.plan(loaded, do_refresh=False)
    change = next(c for c in plan.changes if c.address == "relation.analytics.public.orders_cdc")
    assert change.after["table_options"]["postgresql.slot.name"] == "dsflow_cdctest_dev_analytics_public_orders_cdc"
    assert change.after["table_options"]["postgresql.publication.name"] == slot_of(loaded.project)
    assert change.after["topic"] == "shop.public.orders"
    sink = loaded.project.relation("analytics.public.orders_changes")
    assert sink.store == "kafka_main"  # a stream made from a CDC stream goes to the default store


# --- the data path --------------------------------------------------------------------------------


def _insert(db: str, rows: list[tuple]) -> None:
    conn = admin.connect(SERVER, db)
    try:
        with conn.cursor() as cursor:
            for row in rows:
                cursor.execute("INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", row)
    finally:
        conn.close()


def test_snapshot_then_changes_into_kafka_with_restarts(tmp_path: Path, spark, broker: str, pgdb: str) -> None:
    sql(pgdb, "TRUNCATE orders")
    _insert(pgdb, [(1, "10.50", "2024-05-01 10:00:00.123456+00", '{"a": 1}', ["x", "y"], 3, True, "first"),
                   (2, "99999999.99", "2024-05-02 00:00:00+02", '{"b": [1, 2]}', [], 0, False, None)])
    project = load_project(project_files(tmp_path, pgdb, CSAS), variables={"bootstrap": broker})
    relation = project.relation("analytics.public.orders_cdc")
    ensure_topic(broker, TopicSpec(project.relation("analytics.public.orders_changes").topic, 1, 1, {}))
    opts = relation.table_options
    admin.ensure(SERVER, pgdb, [("public", "orders")], slot_of(project), ["id", "amount"])
    # committed after the slot was made, before the snapshot: exactly once, in the snapshot (op r)
    _insert(pgdb, [(3, "0.01", None, None, None, None, None, "between")])
    run(spark, project, "orders_changes", tmp_path)
    first = changes(broker, project)
    assert sorted((e["op"], e["after"]["id"]) for e in first) == [("r", 1), ("r", 2), ("r", 3)]
    one = next(e for e in first if e["after"]["id"] == 1)
    assert one["after"] == {"id": 1, "amount": 10.5, "created": "2024-05-01T10:00:00.123Z", "doc": '{"a":1}',
                            "tags": ["x", "y"], "qty": 3, "active": True, "note": "first"}
    assert one.get("before") is None and one["source"]["snapshot"] is True and one["key"] == "1"
    two = next(e for e in first if e["after"]["id"] == 2)
    assert two["after"]["amount"] == 99999999.99 and two["after"]["created"] == "2024-05-01T22:00:00.000Z"
    assert two["after"]["tags"] == [] and "note" not in two["after"]  # NULL fields are left out by to_json
    assert next(e for e in first if e["after"]["id"] == 3)["after"] == {"id": 3, "amount": 0.01, "note": "between"}

    # stop between batches, change things, restart from the checkpoint
    sql(pgdb, "UPDATE orders SET amount = 11.25, tags = ARRAY['z'], doc = '{\"a\": 2}' WHERE id = 1")
    sql(pgdb, "DELETE FROM orders WHERE id = 2")
    _insert(pgdb, [(4, None, None, None, ["p,q", None, 'r"s'], None, None, None)])
    run(spark, project, "orders_changes", tmp_path)
    events = changes(broker, project)[3:]
    assert [(e["op"], e["key"]) for e in events] == [("u", "1"), ("d", "2"), ("c", "4")]
    update, delete, insert = events
    assert update["before"]["amount"] == 10.5 and update["after"]["amount"] == 11.25
    assert update["before"]["tags"] == ["x", "y"] and update["after"]["tags"] == ["z"]
    assert update["after"]["doc"] == '{"a":2}' and update["source"]["snapshot"] is False
    assert delete.get("after") is None and "note" not in delete["before"]  # a NULL in the old row
    assert delete["before"]["id"] == 2 and delete["before"]["amount"] == 99999999.99
    assert insert.get("before") is None and insert["after"] == {"id": 4, "tags": ["p,q", None, 'r"s']}

    # nothing new: a restart adds nothing; the slot is acknowledged up to the last batch
    run(spark, project, "orders_changes", tmp_path)
    assert len(changes(broker, project)) == 6
    confirmed = sql(pgdb, "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
                    (opts["postgresql.slot.name"],))[0][0]
    assert int(confirmed) > 0


def test_a_failed_batch_is_read_again_after_a_restart(tmp_path: Path, spark, pgdb: str) -> None:
    """The sink fails inside a batch: nothing is acknowledged, and the restarted query delivers every event."""
    sql(pgdb, "TRUNCATE orders")
    name = f"dsflow_restart_{uuid.uuid4().hex[:6]}"
    admin.ensure(SERVER, pgdb, [("public", "orders")], name, [])
    seen: list[tuple] = []

    def reader():
        r = (spark.readStream.format("dsflow_postgres_cdc").option("database", pgdb).option("schema", "public")
             .option("table", "orders").option("slot", name).option("publication", name)
             .option("spool.dir", str(tmp_path / "spool")).option("starting.position", "latest"))
        for key, value in SERVER.items():
            r = r.option(f"pg.{key}", value)
        return r.load()

    def start(fail_on: int | None):
        def write(batch, batch_id):
            rows = [(json.loads(r.value)["op"], r.key) for r in batch.collect()]
            if fail_on is not None and any(key == str(fail_on) for _, key in rows):
                raise RuntimeError("sink failed mid-stream")
            seen.extend(rows)

        return (reader().writeStream.foreachBatch(write).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(availableNow=True).start())

    _insert(pgdb, [(i, str(i), None, None, None, i, True, None) for i in range(1, 4)])
    query = start(fail_on=None)
    query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(seen) == [("c", "1"), ("c", "2"), ("c", "3")]
    # Spark commits a batch to the source when it plans the next one, or when the query restarts
    before_failure = int(sql(pgdb, "SELECT pg_current_wal_lsn() - '0/0'")[0][0])
    _insert(pgdb, [(i, str(i), None, None, None, i, True, None) for i in range(4, 7)])
    sql(pgdb, "UPDATE orders SET qty = 0 WHERE id = 5")
    failing = start(fail_on=5)
    with pytest.raises(Exception):  # noqa: B017 - any failure: Spark wraps the source's error in its own
        failing.awaitTermination(180)
    assert _confirmed(pgdb, name) <= before_failure  # the failed batch was not acknowledged
    sql(pgdb, "DELETE FROM orders WHERE id = 1")  # more changes while the query is down
    query = start(fail_on=None)
    query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(seen) == sorted([("c", "1"), ("c", "2"), ("c", "3"), ("c", "4"), ("c", "5"), ("c", "6"),
                                   ("u", "5"), ("d", "1")])
    assert _confirmed(pgdb, name) > before_failure
    admin.drop(SERVER, pgdb, name)


def _confirmed(db: str, slot: str) -> int:
    return int(sql(db, "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
                   (slot,))[0][0])


# --- apply, refresh, destroy ------------------------------------------------------------------------


def test_apply_creates_the_slot_refresh_sees_it_missing_destroy_drops_it(tmp_path: Path, pgdb: str) -> None:
    root = project_files(tmp_path, pgdb)
    options = operations.Options(root)
    loaded = operations.load(options)
    slot = slot_of(loaded.project)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    assert sql(pgdb, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)) == [(1,)]
    assert sql(pgdb, "SELECT count(*) FROM pg_publication WHERE pubname = %s", (slot,)) == [(1,)]
    assert not operations.plan(loaded).actionable

    sql(pgdb, "SELECT pg_drop_replication_slot(%s)", (slot,))
    drift = operations.plan(loaded)
    change = next(c for c in drift.actionable if c.address == "relation.analytics.public.orders_cdc")
    assert change.action is Action.UPDATE and "replication slot" in change.reason and "missing" in change.reason
    assert operations.apply(loaded, drift).ok
    assert sql(pgdb, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)) == [(1,)]

    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert sql(pgdb, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)) == [(0,)]
    assert sql(pgdb, "SELECT count(*) FROM pg_publication WHERE pubname = %s", (slot,)) == [(0,)]


def test_apply_names_a_missing_table(tmp_path: Path, pgdb: str) -> None:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "stores/kafka.yml": STORES,
                                   "sql/cdc.sql": CDC_SQL.replace("{db}", pgdb).replace("'orders'", "'nosuch'")})
    loaded = operations.load(operations.Options(root))
    result = operations.apply(loaded, operations.plan(loaded))
    assert not result.ok
    change, error = result.failed
    assert change.address == "relation.analytics.public.orders_cdc"
    assert error.code == "DSF-E741" and "nosuch" in error.message
