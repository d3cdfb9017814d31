"""`dsflow entity list|describe|print` through the real CLI (a subprocess) on a local Delta store, Delta on
s3:// (moto), a Snowflake account (fakesnow) and a PostgreSQL database."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pyarrow as pa
import pytest

from dsflow.adapters.tables import TableRef, table_format
from support.lake import S3_KEYS, create_bucket, snowflake_setup, start_fakesnow, stores_yaml
from support.projects import make_project
from support.streaming import CONFIG
from support.pgserver import DSN as PG_DSN

pytestmark = pytest.mark.integration
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})


@pytest.fixture(scope="module")
def fakesnow_port():
    yield from start_fakesnow()


def _project(tmp_path, s3_endpoint, bucket, port):
    return make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "sql/all.sql": "",
                                   "stores/lake.yml": stores_yaml(s3_endpoint, bucket, port, PG_DSN)})


def _dsflow(root, *args: str) -> str:
    done = subprocess.run(["dsflow", "-C", str(root), "--var", "bootstrap=127.0.0.1:1", "entity", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **S3_KEYS})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _delta_table(location: str, settings: dict[str, str] | None = None) -> None:
    ref = TableRef("delta", location, settings or {})
    fmt = table_format("delta")
    fmt.create(ref, [("id", "BIGINT"), ("name", "VARCHAR")], ["id"])
    fmt.write_batch(ref, ROWS, [], "test", 0)


def test_entities_of_delta_snowflake_and_postgresql_stores(tmp_path, s3_endpoint, fakesnow_port):
    bucket = f"entities-{uuid.uuid4().hex[:8]}"
    create_bucket(s3_endpoint, bucket)
    root = _project(tmp_path, s3_endpoint, bucket, fakesnow_port)
    _delta_table(str(root / "lake" / "sales" / "orders"))
    s3_settings = {"endpoint_url": s3_endpoint, "region": "us-east-1", "access_key_id": "testing",
                   "secret_access_key": "testing"}
    _delta_table(f"s3://{bucket}/tables/clicks", s3_settings)

    assert json.loads(_dsflow(root, "list", "--store", "lake", "--json")) == ["sales/orders"]
    assert json.loads(_dsflow(root, "list", "--store", "s3lake", "--json")) == ["clicks"]
    described = json.loads(_dsflow(root, "describe", "sales/orders", "--store", "lake", "--json"))
    assert [(c["name"], c["type"]) for c in described["columns"]] == [("id", "int64"), ("name", "string")]
    assert "id" in _dsflow(root, "describe", "clicks", "--store", "s3lake")
    printed = [json.loads(line) for line in _dsflow(root, "print", "clicks", "--store", "s3lake").splitlines()]
    assert sorted(printed, key=lambda r: r["id"]) == ROWS.to_pylist()

    snowflake_setup(fakesnow_port)
    snow = TableRef("snowflake", "DEMO_DB.PUBLIC.ORDERS", dict(stores_settings(fakesnow_port)))
    table_format("snowflake").create(snow, [("id", "BIGINT"), ("name", "VARCHAR")], ["id"])
    table_format("snowflake").write_batch(snow, ROWS, ["id"], "test", 0)
    assert "DEMO_DB" in json.loads(_dsflow(root, "list", "--store", "snow", "--json"))
    assert json.loads(_dsflow(root, "list", "demo_db.public", "--store", "snow", "--json")) == ["ORDERS"]
    described = json.loads(_dsflow(root, "describe", "DEMO_DB.PUBLIC.ORDERS", "--store", "snow", "--json"))
    assert [c["name"] for c in described["columns"]] == ["ID", "NAME"]
    printed = [json.loads(line) for line in _dsflow(root, "print", "DEMO_DB.PUBLIC.ORDERS", "--store", "snow",
                                                    "--limit", "2").splitlines()]
    assert len(printed) == 2 and set(printed[0]) == {"ID", "NAME"}

    import psycopg2

    table = f"entities_{uuid.uuid4().hex[:8]}"
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE public.{table} (id BIGINT PRIMARY KEY, name TEXT, at TIMESTAMPTZ)")
        cursor.execute(f"INSERT INTO public.{table} VALUES (1, 'a', now()), (2, NULL, NULL)")
    try:
        assert "test" in json.loads(_dsflow(root, "list", "--store", "pg", "--json"))
        assert "public" in json.loads(_dsflow(root, "list", "test", "--store", "pg", "--json"))
        assert table in json.loads(_dsflow(root, "list", "test.public", "--store", "pg", "--json"))
        described = json.loads(_dsflow(root, "describe", f"test.public.{table}", "--store", "pg", "--json"))
        assert described["primary_key"] == ["id"]
        assert [(c["name"], c["type"]) for c in described["columns"]] == [
            ("id", "bigint"), ("name", "text"), ("at", "timestamp with time zone")]
        printed = [json.loads(line) for line in _dsflow(root, "print", f"test.public.{table}", "--store",
                                                        "pg").splitlines()]
        assert sorted((r["id"], r["name"]) for r in printed) == [(1, "a"), (2, None)]
    finally:
        with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS public.{table}")


def stores_settings(port: int) -> dict[str, str]:
    return {"account": "fakesnow", "user": "fake", "password": "snow", "host": "127.0.0.1", "port": str(port),
            "protocol": "http"}


def test_entity_errors_are_stable_codes(tmp_path, s3_endpoint, fakesnow_port):
    root = _project(tmp_path, s3_endpoint, "unused", fakesnow_port)
    done = subprocess.run(["dsflow", "-C", str(root), "--var", "bootstrap=127.0.0.1:1", "entity", "describe",
                           "nothing/here", "--store", "lake"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **S3_KEYS})
    assert done.returncode == 1 and "DSF-E754" in done.stderr
    done = subprocess.run(["dsflow", "-C", str(root), "--var", "bootstrap=127.0.0.1:1", "entity", "list",
                           "--store", "kafka_main"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **S3_KEYS})
    assert done.returncode == 1 and "DSF-E759" in done.stderr
