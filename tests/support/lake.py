"""Helpers for lake and warehouse sink tests: projects with table stores on the test broker, a fakesnow
server (a Snowflake endpoint backed by DuckDB, started by PID and stopped by PID), and a bucket on moto."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.core.model import Project
from dsflow.load.project import load_project
from support.projects import make_project
from support.servers import local_server
from support.streaming import CONFIG

S3_KEYS = {"LAKE_TEST_KEY_ID": "testing", "LAKE_TEST_SECRET": "testing"}


def stores_yaml(s3_endpoint: str | None = None, bucket: str | None = None, snowflake_port: int | None = None,
                pg_dsn: str | None = None) -> str:
    text = "stores:\n  - name: lake\n    type: filesystem\n    properties:\n      path: lake\n"
    if s3_endpoint:
        text += (f"  - name: s3lake\n    type: s3\n    properties:\n      bucket: {bucket}\n      prefix: tables\n"
                 f"      endpoint_url: {s3_endpoint}\n      region: us-east-1\n"
                 "      access_key_id: \"{{ env_var('LAKE_TEST_KEY_ID') }}\"\n"
                 "      secret_access_key: \"{{ env_var('LAKE_TEST_SECRET') }}\"\n")
    if snowflake_port:
        text += ("  - name: snow\n    type: snowflake\n    properties:\n      account: fakesnow\n      user: fake\n"
                 "      password: \"{{ env_var('LAKE_TEST_SF_PASSWORD', 'snow') }}\"\n      host: 127.0.0.1\n"
                 f"      port: {snowflake_port}\n      protocol: http\n      database: DEMO_DB\n")
    if pg_dsn:
        text += f"  - name: pg\n    type: postgresql\n    properties:\n      dsn: \"{pg_dsn}\"\n"
    return text


def lake_project(tmp_path: Path, broker: str, sql: str, stores: str, prefix: str | None = None) -> Project:
    """A project with the Kafka store and table stores; its topics are created (names prefixed per test)."""
    prefix = prefix or f"l{uuid.uuid4().hex[:8]}_"
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "sql/all.sql": sql,
                                   "stores/lake.yml": stores})
    project = load_project(root, variables={"bootstrap": broker})
    for relation in project.relations:
        if relation.kind in ("stream", "changelog"):
            ensure_topic(broker, TopicSpec(relation.topic, relation.partitions, 1, {}))
    return project


def create_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)


def start_fakesnow() -> Iterator[int]:
    """A fakesnow server on a free loopback port (its own process); yields the port."""
    with local_server("fakesnow", lambda port: [sys.executable, "-m", "fakesnow", "-s", "-p", str(port)],
                      timeout=60) as port:
        yield port


def snowflake_setup(port: int, database: str = "DEMO_DB", schema: str = "PUBLIC") -> None:
    """The warehouse as a user would have it: a database and schema (dsflow creates only tables)."""
    from dsflow.adapters.tables.snowflake import connect

    settings = {"account": "fakesnow", "user": "fake", "password": "snow", "host": "127.0.0.1", "port": str(port),
                "protocol": "http"}
    with connect(settings) as conn:
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {database}")
        conn.cursor().execute(f"CREATE SCHEMA IF NOT EXISTS {database}.{schema}")
