"""CDC streams: `->` field access end to end, several tables in one stream, and schema changes mid-stream.

Against the session's PostgreSQL (tests/support/pgserver.py) (wal_level=logical), the broker and Spark; queries run
availableNow through dsflow's translation and driver, a restart is a new run on the same checkpoint.
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
from dsflow.errors import ProjectError
from dsflow.sql.cdc import cdc_tables, image_types
from dsflow.load.project import load_project
from support.projects import make_project
from test_postgres_cdc import CONFIG, SERVER, STORES, run, sql

pytestmark = pytest.mark.integration

ITEMS = """\
CREATE STREAM items_cdc (
  op VARCHAR,
  `after` STRUCT<id BIGINT, amount DECIMAL(10, 2), note VARCHAR>,
  source STRUCT<`table` VARCHAR, lsn BIGINT>
) WITH ('store' = 'pg', 'postgresql.db.name' = '{db}', 'postgresql.schema.name' = 'public',
        'postgresql.table.name' = 'items');
CREATE STREAM items_flat AS
  SELECT after->id AS id, after->amount AS amount, after->note, source->lsn AS lsn
  FROM items_cdc WHERE op <> 'd' AND after->amount > 1;
"""

MULTI = """\
CREATE STREAM people_cdc (
  op VARCHAR,
  `before` STRUCT<id BIGINT, name VARCHAR, email VARCHAR>,
  `after` STRUCT<id BIGINT, name VARCHAR, email VARCHAR>,
  source STRUCT<`schema` VARCHAR, `table` VARCHAR>
) WITH ('store' = 'pg', 'postgresql.db.name' = '{db}',
        'postgresql.cdc.table.list' = 'public.customers,crm.users');
"""

MULTI_CSAS = """
CREATE STREAM people AS
  SELECT op, source->`schema` AS sch, source->`table` AS tbl, after->id AS id, after->name AS name,
         after->email AS email, `before`->id AS old_id
  FROM people_cdc;
"""

TABLES = """
CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(10, 2), note text);
CREATE TABLE customers (id bigint PRIMARY KEY, name text, email text);
CREATE SCHEMA crm;
CREATE TABLE crm.users (id bigint PRIMARY KEY, name text, created timestamptz);
ALTER TABLE crm.users REPLICA IDENTITY FULL;
"""


@pytest.fixture(scope="module")
def pgdb() -> Iterator[str]:
    name = f"dsflow_cdcx_{uuid.uuid4().hex[:8]}"
    sql("postgres", f"CREATE DATABASE {name}")
    sql(name, TABLES)
    yield name
    for (slot,) in sql("postgres", "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)):
        sql("postgres", "SELECT pg_drop_replication_slot(%s)", (slot,))
    sql("postgres", f"DROP DATABASE {name} WITH (FORCE)")


def project_root(tmp_path: Path, files: dict[str, str]) -> Path:
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    return make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "stores/kafka.yml": STORES, **files})


def records(broker: str, project, name: str) -> list[dict]:
    topic = project.relation(f"analytics.public.{name}").topic
    return [json.loads(r["value"]) for r in read_to_end(broker, topic)]


def prepare(project, broker: str, sink: str) -> None:
    """The sink's topic, and the CDC stream's slot and publication (what apply makes)."""
    ensure_topic(broker, TopicSpec(project.relation(f"analytics.public.{sink}").topic, 1, 1, {}))
    relation = next(r for r in project.relations if r.table_options.get("postgresql.slot.name"))
    opts = relation.table_options
    admin.ensure(SERVER, opts["postgresql.db.name"], cdc_tables(opts), opts["postgresql.slot.name"],
                 image_types(relation))


# --- -> field access, and a schema change while the stream runs ---------------------------------------------


def test_arrow_fields_to_kafka_through_add_and_drop_column(tmp_path: Path, spark, broker: str, pgdb: str) -> None:
    sql(pgdb, "INSERT INTO items VALUES (1, 5.00, 'a'), (2, 0.50, 'b')")
    project = load_project(project_root(tmp_path, {"sql/items.sql": ITEMS.replace("{db}", pgdb)}),
                           variables={"bootstrap": broker})
    assert [(c.name, c.type) for c in project.relation("analytics.public.items_flat").columns] == [
        ("id", "BIGINT"), ("amount", "DECIMAL(10, 2)"), ("note", "VARCHAR"), ("lsn", "BIGINT")]
    prepare(project, broker, "items_flat")
    run(spark, project, "items_flat", tmp_path)
    first = records(broker, project, "items_flat")
    assert [(r["id"], r["amount"], r["note"]) for r in first] == [(1, 5.0, "a")]  # 2 fails amount > 1

    sql(pgdb, "INSERT INTO items VALUES (3, 7, 'c')")
    # one transaction: a row, the new column, a row with it (decoded with the Relation of its own time)
    sql(pgdb, "INSERT INTO items VALUES (4, 8, 'd'); ALTER TABLE items ADD COLUMN extra text; "
              "INSERT INTO items VALUES (5, 9, 'e', 'x')")
    sql(pgdb, "ALTER TABLE items DROP COLUMN note")
    sql(pgdb, "INSERT INTO items VALUES (6, 10, 'y')")
    sql(pgdb, "UPDATE items SET amount = 6 WHERE id = 1")
    sql(pgdb, "DELETE FROM items WHERE id = 3")
    run(spark, project, "items_flat", tmp_path)
    later = records(broker, project, "items_flat")[1:]
    assert [(r["id"], r["amount"], r.get("note")) for r in later] == [
        (3, 7.0, "c"), (4, 8.0, "d"), (5, 9.0, "e"), (6, 10.0, None), (1, 6.0, None)]
    assert all(r["lsn"] > 0 for r in later) and "extra" not in later[2]

    # a type change that no longer fits DECIMAL stops the query, naming table, column and LSN
    sql(pgdb, "ALTER TABLE items ALTER COLUMN amount TYPE text")
    sql(pgdb, "INSERT INTO items VALUES (7, 'lots', 'z')")
    query = next(q for q in project.queries if q.fqn == "analytics.public.items_flat")
    spec = query_spec(project, query, "test", str(tmp_path / "checkpoints" / "items_flat"), str(tmp_path / "st"))
    running = start_query(spark, spec, available_now=True)
    with pytest.raises(Exception) as failed:
        running.awaitTermination(180)
    text = str(failed.value)
    assert "DSF-E747" in text and "column amount of public.items is text at LSN" in text, text
    assert len(records(broker, project, "items_flat")) == 6  # nothing of the failed transaction


def test_an_unknown_field_of_a_cdc_struct_is_e048_at_its_line(tmp_path: Path) -> None:
    bad = (ITEMS.replace("{db}", "shop")
           + "CREATE STREAM bad AS SELECT after->id AS id,\n  after->amout AS a FROM items_cdc;\n")
    with pytest.raises(ProjectError) as caught:
        load_project(project_root(tmp_path, {"sql/items.sql": bad}))
    [problem] = caught.value.diagnostics
    assert (problem.code, problem.location.file.endswith("items.sql"), problem.location.line) == ("DSF-E048", True, 11)
    assert "no field 'amout'" in problem.message and "id, amount, note" in problem.hint


# --- several tables in one stream -----------------------------------------------------------------------------


def test_table_list_validation(tmp_path: Path) -> None:
    bad = MULTI.replace("{db}", "shop").replace("public.customers,crm.users", "customers,crm.users") + \
        MULTI.replace("people_cdc", "p2").replace("{db}", "shop").replace(
            "'postgresql.cdc.table.list'", "'postgresql.table.name' = 'x', 'postgresql.cdc.table.list'")
    with pytest.raises(ProjectError) as caught:
        load_project(project_root(tmp_path, {"sql/m.sql": bad}))
    found = sorted((d.code, d.location.line) for d in caught.value.diagnostics)
    assert found == [("DSF-E085", 7), ("DSF-E085", 14)], [str(d) for d in caught.value.diagnostics]


def test_two_tables_in_one_stream(tmp_path: Path, spark, broker: str, pgdb: str) -> None:
    sql(pgdb, "INSERT INTO customers VALUES (1, 'ann', 'ann@x')")
    sql(pgdb, "INSERT INTO crm.users VALUES (1, 'bob', now())")
    root = project_root(tmp_path, {"sql/m.sql": MULTI.replace("{db}", pgdb)})
    loaded = operations.load(operations.Options(root))
    plan = operations.plan(loaded)
    change = next(c for c in plan.changes if c.address == "relation.analytics.public.people_cdc")
    assert change.after["table_options"]["postgresql.cdc.table.list"] == "public.customers,crm.users"
    assert operations.apply(loaded, plan).ok
    slot = loaded.project.relation("analytics.public.people_cdc").table_options["postgresql.slot.name"]
    assert sql(pgdb, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1",
               (slot,)) == [("crm", "users"), ("public", "customers")]
    assert sql(pgdb, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)) == [(1,)]

    (root / "sql" / "q.sql").write_text(MULTI_CSAS)
    project = load_project(root, variables={"bootstrap": broker})
    ensure_topic(broker, TopicSpec(project.relation("analytics.public.people").topic, 1, 1, {}))
    run(spark, project, "people", tmp_path)
    snap = records(broker, project, "people")
    assert sorted((r["op"], r["sch"], r["tbl"], r["id"], r["name"], r.get("email")) for r in snap) == [
        ("r", "crm", "users", 1, "bob", None), ("r", "public", "customers", 1, "ann", "ann@x")]

    sql(pgdb, "INSERT INTO crm.users VALUES (2, 'cy', now()); INSERT INTO customers VALUES (2, 'dee', 'd@x')")
    sql(pgdb, "UPDATE crm.users SET name = 'bo' WHERE id = 1")
    sql(pgdb, "DELETE FROM customers WHERE id = 1")
    run(spark, project, "people", tmp_path)
    events = [(r["op"], r["tbl"], r.get("id"), r.get("name"), r.get("old_id")) for r in records(broker, project,
                                                                                                   "people")[2:]]
    assert events == [("c", "users", 2, "cy", None), ("c", "customers", 2, "dee", None),
                      ("u", "users", 1, "bo", 1), ("d", "customers", None, None, 1)]

    # the publication follows the list; refresh reports a difference
    admin.ensure(SERVER, pgdb, [("public", "customers")], slot, {"id": "BIGINT"})
    assert admin.observe(SERVER, pgdb, slot, [("public", "customers"), ("crm", "users")]) is not None
    assert operations.apply(loaded, operations.plan(loaded)).ok
    assert admin.observe(SERVER, pgdb, slot, [("public", "customers"), ("crm", "users")]) is None
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert sql(pgdb, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)) == [(0,)]
    assert sql(pgdb, "SELECT count(*) FROM pg_publication WHERE pubname = %s", (slot,)) == [(0,)]
