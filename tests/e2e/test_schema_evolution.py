"""Schema evolution without replacement, checked against the data on the real systems: a registry-backed stream
gains and loses columns in place under BACKWARD (topic, records and checkpoint kept; the subject gets a new
version; nothing reprocessed or skipped), a retype BACKWARD refuses is a replacement apply refuses without an
allowance, a live subject that would reject the new schema fails the plan (DSF-E841), and a PostgreSQL view and
a Delta table gain a column with ALTER TABLE ADD COLUMN (rows kept, NULL in the new column, new rows filled)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from dsflow.engine import operations
from dsflow.core.formats import avro_schema, columns_from_avro
from dsflow.core.plan import Action
from dsflow.errors import DsflowError
from support.lake import stores_yaml
from support.projects import make_project
from support.registry_projects import (ENVIRON, avro_decode, avro_values, new_prefix, produce_raw, raw_records,
                               registry_conf, write_project)
from support.streaming import CONFIG, produce
from support.waiting import wait_for
from support import pgserver

pytestmark = pytest.mark.integration

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "note", "type": "string"}]})
SOURCE = "CREATE STREAM orders (id BIGINT, item VARCHAR, note VARCHAR) WITH ('value.format' = 'avro');\n"
COPY = "CREATE STREAM order_copy WITH ('trigger.interval' = '1 second') AS SELECT {columns} FROM orders;\n"
COPIED = "relation.analytics.public.order_copy"


def _orders(first: int, count: int) -> list[dict]:
    return [{"id": i, "item": f"item{i}", "note": f"note{i}"} for i in range(first, first + count)]


def _subject_versions(registry: str, subject: str) -> list[list[tuple[str, str]]]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient(registry_conf(registry))
    return [columns_from_avro(client.get_version(subject, v).schema.schema_str) for v in client.get_versions(subject)]


def _plan(options: operations.Options):
    loaded = operations.load(options)
    return loaded, operations.plan(loaded)


def test_a_registry_stream_evolves_in_place_and_an_incompatible_retype_is_refused(
        tmp_path: Path, broker: str, schema_registry: str, monkeypatch) -> None:
    monkeypatch.setenv("SR_PASSWORD", ENVIRON["SR_PASSWORD"])
    prefix = new_prefix()
    root = write_project(tmp_path, SOURCE + COPY.format(columns="id, item"), prefix)
    sql, topic, subject = root / "sql" / "all.sql", f"{prefix}order_copy", f"{prefix}order_copy-value"
    options = operations.Options(root, None, {"bootstrap": broker, "registry": schema_registry})
    loaded, plan = _plan(options)
    assert operations.apply(loaded, plan).ok
    try:
        produce_raw(broker, f"{prefix}orders", avro_values(schema_registry, f"{prefix}orders", ORDER, _orders(0, 20)))
        wait_for(lambda: len(raw_records(broker, topic)) >= 20, 240, "20 records in the sink", interval=2)
        before = [m.value() for m in raw_records(broker, topic)]

        sql.write_text(SOURCE + COPY.format(columns="id, note"))  # BACKWARD: note added, item dropped
        loaded, plan = _plan(options)
        changes = {c.address: c for c in plan.actionable}
        assert (changes[COPIED].action, changes[COPIED].reason) == (
            Action.UPDATE, "column(s) note added, item dropped (in place, compatible under BACKWARD)")
        assert changes["query.analytics.public.order_copy"].category.value == "keep_checkpoint"
        assert not plan.destroying and operations.apply(loaded, plan).ok, "nothing is destroyed: no allowance"

        produce_raw(broker, f"{prefix}orders", avro_values(schema_registry, f"{prefix}orders", ORDER, _orders(20, 10)))
        wait_for(lambda: len(raw_records(broker, topic)) >= 30, 240, "30 records in the sink", interval=2)
        messages = raw_records(broker, topic)
        assert [m.value() for m in messages[:20]] == before, "the records written before the change were kept"
        got = avro_decode(schema_registry, topic, messages)
        assert sorted(r["id"] for r in got) == list(range(30)), "the plan promised nothing reprocessed or skipped"
        assert all(r == {"id": r["id"], "note": f"note{r['id']}"} for r in got if r["id"] >= 20)
        assert _subject_versions(schema_registry, subject) == [
            [("id", "BIGINT"), ("item", "VARCHAR")], [("id", "BIGINT"), ("note", "VARCHAR")]]

        sql.write_text(SOURCE + COPY.format(columns="CAST(id AS VARCHAR) AS id, note"))  # a retype BACKWARD refuses
        loaded, plan = _plan(options)
        change = next(c for c in plan.actionable if c.address == COPIED)
        assert (change.action, change.reason) == (
            Action.REPLACE, "column id retyped BIGINT -> VARCHAR: incompatible under BACKWARD (forces replacement)")
        assert change.destroys is not None and change.destroys.records == 30
        with pytest.raises(DsflowError) as refused:
            operations.apply(loaded, plan)
        assert refused.value.code == "DSF-E822"
        assert [m.value() for m in raw_records(broker, topic)] == [m.value() for m in messages], "records lost"
    finally:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok


def test_a_subject_the_live_registry_would_not_evolve_fails_the_plan(
        tmp_path: Path, broker: str, schema_registry: str, monkeypatch) -> None:
    """A version registered outside dsflow (note as a number) makes the next in-place change one the registry
    refuses under the subject's BACKWARD level: the plan says so, naming the rule and the subject."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    monkeypatch.setenv("SR_PASSWORD", ENVIRON["SR_PASSWORD"])
    prefix = new_prefix()
    root = write_project(tmp_path, SOURCE + COPY.format(columns="id, note"), prefix)
    options = operations.Options(root, None, {"bootstrap": broker, "registry": schema_registry})
    subject = f"{prefix}order_copy-value"
    loaded, plan = _plan(options)
    assert operations.apply(loaded, plan).ok
    try:
        client = SchemaRegistryClient(registry_conf(schema_registry))
        client.set_compatibility(subject, "NONE")
        outside = avro_schema("order_copy", "analytics.public", [("id", "BIGINT"), ("note", "BIGINT")])
        client.register_schema(subject, Schema(outside, "AVRO"))
        client.set_compatibility(subject, "BACKWARD")

        (root / "sql" / "all.sql").write_text(SOURCE + COPY.format(columns="id, note, item"))
        loaded = operations.load(options)
        assert operations.plan(loaded, do_refresh=False).actionable, "the change itself is compatible in state"
        with pytest.raises(DsflowError) as failed:
            operations.plan(loaded)
        assert failed.value.code == "DSF-E841"
        assert f"registry subject '{subject}' would reject the new schema under BACKWARD" in failed.value.message
        assert failed.value.location is not None and failed.value.location.file == "sql/all.sql"
        assert len(client.get_versions(subject)) == 2, "a failed plan registered nothing"
    finally:
        (root / "sql" / "all.sql").write_text(SOURCE + COPY.format(columns="id, note"))
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok


USERS = "CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, level BIGINT, PRIMARY KEY (userid)) " \
        "WITH ('value.format' = 'json');\n"
TABLES = """\
CREATE MATERIALIZED VIEW user_names WITH ('store' = 'pg', 'trigger.interval' = '500 ms') AS
  SELECT {columns} FROM users;
CREATE TABLE users_lake WITH ('store' = 'lake', 'delta.path' = 'users', 'trigger.interval' = '500 ms') AS
  SELECT {columns} FROM users;
"""


def _psql(database: str, statement: str) -> None:
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database, "-tA", "-c", statement],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


@pytest.fixture()
def pgdb() -> Iterator[str]:
    name = f"dsflow_evo_{uuid.uuid4().hex[:10]}"
    _psql("postgres", f"CREATE DATABASE {name}")
    yield name
    _psql("postgres", f"DROP DATABASE {name} WITH (FORCE)")


def _pg_rows(database: str) -> dict[str, tuple]:
    with psycopg2.connect(pgserver.dsn(database)) as conn, \
            conn.cursor() as cur:
        cur.execute("SELECT * FROM public.user_names")
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=False)) for r in cur.fetchall()}


def _delta_rows(root: Path) -> dict[str, dict]:
    from deltalake import DeltaTable

    return {r["userid"]: r for r in DeltaTable(str(root / "lake" / "users")).to_pyarrow_table().to_pylist()}


def _users(first: int, count: int) -> list[dict]:
    return [{"userid": f"u{i}", "name": f"name{i}", "level": i} for i in range(first, first + count)]


def test_a_postgresql_view_and_a_delta_table_gain_a_column_in_place(tmp_path: Path, broker: str, pgdb: str) -> None:
    stores = stores_yaml() + (f"  - name: pg\n    type: postgresql\n    properties: "
                              f"{{host: 127.0.0.1, port: {pgserver.PORT}, user: postgres, database: {pgdb}}}\n")
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=new_prefix()), "stores/lake.yml": stores,
                                   "sql/all.sql": USERS + TABLES.format(columns="userid, name")})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded, plan = _plan(options)
    assert operations.apply(loaded, plan).ok
    try:
        produce(broker, loaded.project, "users", _users(0, 20), "userid")
        wait_for(lambda: len(_pg_rows(pgdb)) == 20 and len(_delta_rows(root)) == 20, 240, "20 rows in both tables")

        (root / "sql" / "all.sql").write_text(USERS + TABLES.format(columns="userid, name, level"))
        loaded, plan = _plan(options)
        changes = {c.address: c for c in plan.actionable}
        for name in ("user_names", "users_lake"):
            relation = changes[f"relation.analytics.public.{name}"]
            assert (relation.action, relation.reason) == (
                Action.UPDATE, "column(s) level added (in place: ALTER TABLE ADD COLUMN)")
            assert changes[f"query.analytics.public.{name}"].category.value == "keep_checkpoint"
        assert not plan.destroying and operations.apply(loaded, plan).ok
        for rows in (_pg_rows(pgdb), _delta_rows(root)):
            assert sorted(rows) == sorted(f"u{i}" for i in range(20)), "the rows written before were kept"
            assert all(r["level"] is None and r["name"] == f"name{k[1:]}" for k, r in rows.items())

        produce(broker, loaded.project, "users", _users(20, 10), "userid")
        wait_for(lambda: len(_pg_rows(pgdb)) == 30 and len(_delta_rows(root)) == 30, 240, "30 rows in both tables")
        for rows in (_pg_rows(pgdb), _delta_rows(root)):
            assert sorted(rows) == sorted(f"u{i}" for i in range(30))
            assert [rows[f"u{i}"]["level"] for i in range(30)] == [None] * 20 + list(range(20, 30)), \
                "old rows read the new column as NULL (not replayed), new rows carry it"
    finally:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok


def test_a_snowflake_table_gains_a_column_in_place(fakesnow_port: int) -> None:
    """The Snowflake format's ALTER TABLE ADD COLUMN, on fakesnow: rows kept, NULL in the new column, and the
    next batch (the query's new output) fills it."""
    import pyarrow as pa

    from dsflow.adapters.tables import TableRef, table_format
    from support.lake import snowflake_setup

    snowflake_setup(fakesnow_port)
    settings = {"account": "fakesnow", "user": "fake", "password": "snow", "host": "127.0.0.1",
                "port": str(fakesnow_port), "protocol": "http", "database": "DEMO_DB"}
    ref = TableRef("snowflake", f"DEMO_DB.PUBLIC.EVO_{uuid.uuid4().hex[:8].upper()}", settings)
    fmt = table_format("snowflake")
    fmt.create(ref, [("id", "BIGINT"), ("name", "VARCHAR")], [])
    assert fmt.write_batch(ref, pa.table({"id": [0, 1], "name": ["a", "b"]}), [], "app", 0)
    fmt.add_columns(ref, [("level", "BIGINT")])
    fmt.add_columns(ref, [("level", "BIGINT")])  # an interrupted apply runs it again
    names, rows = fmt.rows(ref, 100)
    assert [n.lower() for n in names] == ["id", "name", "level"] and sorted(rows) == [(0, "a", None), (1, "b", None)]
    assert fmt.write_batch(ref, pa.table({"id": [2], "name": ["c"], "level": [7]}), [], "app", 1)
    assert sorted(fmt.rows(ref, 100)[1]) == [(0, "a", None), (1, "b", None), (2, "c", 7)]


@pytest.fixture(scope="module")
def fakesnow_port() -> Iterator[int]:
    from support.lake import start_fakesnow

    yield from start_fakesnow()
