"""Every setting is classified once (dsflow/core/settings.py), and a change to it does what its class says.

The loader's own lists of accepted properties are walked, so a new property without a class fails here; then each
setting is edited in a small project (stores of every type, relations, queries, tables, a view, a CDC stream,
a generator, roles) and the plan is checked against the class: pure plans against a State built in memory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsflow.core.address import Address, Kind
from dsflow.core.plan import Action, Plan, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.settings import QUERY_SETTINGS_OF, SETTINGS, Setting, SettingClass, markdown_table, setting
from dsflow.core.state import State
from dsflow.load.project import load_project
from support.projects import REPO, applied

FILES = {
    "dsflow.yml": """\
name: settings
default:
  database: db
  schema: s
  store: k
runtime:
  spark_master: local[2]
  spark_conf:
    spark.sql.shuffle.partitions: "2"
  trigger_interval: 1 second
environments:
  dev: {}
""",
    "stores.yml": """\
schema_registries:
  - name: reg
    url: http://127.0.0.1:1
    username: u
    description: the registry
  - name: reg2
    url: http://127.0.0.1:2
stores:
  - name: k
    type: kafka
    bootstrap_servers: 127.0.0.1:1
    schema_registry: reg
    description: the broker
    properties:
      client.id: one
  - name: k2
    type: kafka
    bootstrap_servers: 127.0.0.1:2
  - name: kin
    type: kinesis
    properties:
      region: us-east-1
  - name: lake
    type: filesystem
    properties:
      path: lake
  - name: dbx
    type: databricks
    properties:
      path: dbx
  - name: snow
    type: snowflake
    properties:
      account: acme
      database: DEMO
  - name: ice
    type: iceberg
    properties:
      warehouse: /nonexistent/warehouse
  - name: pg
    type: postgresql
    properties:
      host: 127.0.0.1
      dbname: app
  - name: pg2
    type: postgresql
    properties:
      host: 127.0.0.2
      dbname: app
databases:
  - name: db
    schemas: [s]
    description: the database
  - name: other
    schemas: [x]
roles:
  - name: solo
  - name: base
  - name: reader
    inherits: [base]
    grants:
      - privilege: SELECT
        on: events
users:
  - name: ann
    roles: [reader]
datagen:
  - name: feed
    relation: events
    generator: columns
    rate: 1
    seed: 0
""",
    "sources.sql": """\
CREATE STREAM events (id BIGINT, ts BIGINT, name VARCHAR) WITH ('topic' = 'events', 'value.format' = 'json',
  'timestamp' = 'ts', 'topic.partitions' = 1, 'topic.replicas' = 1);
CREATE CHANGELOG users (uid BIGINT, name VARCHAR, PRIMARY KEY (uid)) WITH ('topic' = 'users', 'value.format' = 'json');
CREATE STREAM shards (id BIGINT) WITH ('store' = 'kin', 'topic' = 'shards', 'value.format' = 'json',
  'topic.shards' = 1);
CREATE STREAM avro_events (id BIGINT) WITH ('topic' = 'avro_events', 'value.format' = 'avro');
CREATE STREAM orders_cdc (op VARCHAR, ts_ms BIGINT, `after` STRUCT<id BIGINT, amount BIGINT>)
  WITH ('store' = 'pg', 'postgresql.db.name' = 'app', 'postgresql.schema.name' = 'public',
        'postgresql.table.name' = 'orders');
""",
    "queries.sql": """\
CREATE STREAM copied WITH ('topic' = 'copied') AS SELECT id, ts, name FROM events WHERE id > 0;
CREATE STREAM shard_copy AS SELECT id FROM shards;
CREATE STREAM avro_copy AS SELECT id FROM avro_events;
CREATE STREAM orders AS SELECT op, ts_ms, `after`->id AS id FROM orders_cdc;
CREATE CHANGELOG counts AS SELECT window_start, window_end, COUNT(*) AS n FROM TUMBLE(events, SIZE 10 SECONDS)
  GROUP BY window_start, window_end;
CREATE TABLE lake_t WITH ('store' = 'lake', 'delta.path' = 't1') AS SELECT id, name FROM events;
CREATE TABLE dbx_t WITH ('store' = 'dbx', 'databricks.catalog.name' = 'c', 'databricks.schema.name' = 's',
  'databricks.table.name' = 't') AS SELECT id, name FROM events;
CREATE TABLE snow_t WITH ('store' = 'snow', 'snowflake.db.name' = 'D', 'snowflake.schema.name' = 'S',
  'snowflake.table.name' = 'T') AS SELECT id, name FROM events;
CREATE TABLE ice_t WITH ('store' = 'ice', 'iceberg.namespace.name' = 'n', 'iceberg.table.name' = 'tbl')
  AS SELECT id, name FROM events;
CREATE TABLE pg_t WITH ('store' = 'pg', 'postgresql.db.name' = 'wh', 'postgresql.schema.name' = 'web',
  'postgresql.table.name' = 'pgt') AS SELECT id, name FROM events;
CREATE MATERIALIZED VIEW user_names WITH ('store' = 'pg', 'postgresql.table.name' = 'user_names') AS
  SELECT uid, name FROM users;
CREATE FUNCTION later(t BIGINT) RETURNS BIGINT LANGUAGE PYTHON AS 'udfs:later';
CREATE STREAM loud WITH ('topic' = 'loud') AS SELECT id, later(ts) AS ts FROM events;
CREATE VIEW named AS SELECT id, name FROM events AS e WHERE id > 1;
CREATE STREAM from_view WITH ('topic' = 'from_view') AS SELECT id, name FROM named;
""",
    "udfs.py": "def later(t):\n    return t + 1\n",
}

EVENTS, USERS, CDC = "relation.db.s.events", "relation.db.s.users", "relation.db.s.orders_cdc"
LAKE_T, VIEW, COPIED = "relation.db.s.lake_t", "relation.db.s.user_names", "query.db.s.copied"
S, Q, Y = "sources.sql", "queries.sql", "stores.yml"
EVENTS_WITH = "'topic' = 'events', 'value.format' = 'json',"
LAKE_WITH = "WITH ('store' = 'lake', 'delta.path' = 't1')"
VIEW_WITH = "WITH ('store' = 'pg', 'postgresql.table.name' = 'user_names')"
COPIED_WITH = "WITH ('topic' = 'copied')"

EDITS: dict[tuple[str, str], tuple[str | None, list[tuple[str, str, str]]]] = {
    # (kind, setting): (the resource it belongs to, [(file, old text, new text), ...])
    ("store", "name"): ("store.k2", [(Y, "  - name: k2\n", "  - name: k3\n")]),
    ("store", "type"): ("store.lake", [(Y, "  - name: lake\n    type: filesystem",
                                        "  - name: lake\n    type: databricks")]),
    ("store", "bootstrap_servers"): ("store.k", [(Y, "servers: 127.0.0.1:1\n", "servers: 127.0.0.1:9\n")]),
    ("store", "properties.*"): ("store.k", [(Y, "client.id: one", "client.id: two")]),
    ("store", "schema_registry"): ("store.k", [(Y, "schema_registry: reg\n", "schema_registry: reg2\n")]),
    ("store", "description"): ("store.k", [(Y, "description: the broker", "description: the cluster")]),
    ("schema_registry", "name"): ("store.k", [(Y, "  - name: reg\n", "  - name: reg9\n"),
                                              (Y, "schema_registry: reg\n", "schema_registry: reg9\n")]),
    ("schema_registry", "url"): (None, [(Y, "url: http://127.0.0.1:1", "url: http://127.0.0.1:5")]),
    ("schema_registry", "username"): (None, [(Y, "username: u\n", "username: v\n")]),
    ("schema_registry", "password"): (None, [(Y, "username: u\n",
                                              "username: u\n    password: \"{{ env_var('REG_PASSWORD') }}\"\n")]),
    ("schema_registry", "description"): (None, [(Y, "description: the registry", "description: ours")]),
    ("database", "name"): ("database.other", [(Y, "  - name: other\n", "  - name: other2\n")]),
    ("database", "schemas"): ("schema.other.x", [(Y, "schemas: [x]", "schemas: [y]")]),
    ("database", "description"): ("database.db", [(Y, "description: the database", "description: ours")]),
    ("store", "owner"): ("store.k", [(Y, "    description: the broker\n",
                                       "    description: the broker\n    owner: base\n")]),
    ("database", "owner"): ("database.db", [(Y, "    description: the database\n",
                                             "    description: the database\n    owner: base\n")]),
    ("schema", "name"): ("schema.other.x", [(Y, "schemas: [x]", "schemas: [{name: y}]")]),
    ("schema", "owner"): ("schema.other.x", [(Y, "schemas: [x]", "schemas: [{name: x, owner: base}]")]),
    ("user", "name"): ("binding.ann", [(Y, "  - name: ann\n", "  - name: bea\n")]),
    ("user", "roles"): ("binding.ann", [(Y, "roles: [reader]", "roles: [reader, base]")]),
    ("user", "login_password"): ("binding.ann", [(Y, "roles: [reader]\n", "roles: [reader]\n    login_password: "
                                                                     "\"{{ env_var('REG_PASSWORD') }}\"\n")]),
    ("relation", "owner"): (EVENTS, [(S, EVENTS_WITH, EVENTS_WITH + " 'owner' = 'base',")]),
    ("cdc", "owner"): (CDC, [(S, "'postgresql.table.name' = 'orders')",
                              "'postgresql.table.name' = 'orders', 'owner' = 'base')")]),
    ("table", "owner"): (LAKE_T, [(Q, LAKE_WITH, LAKE_WITH[:-1] + ", 'owner' = 'base')")]),
    ("materialized_view", "owner"): (VIEW, [(Q, VIEW_WITH, VIEW_WITH[:-1] + ", 'owner' = 'base')")]),
    ("query", "owner"): (COPIED, [(Q, COPIED_WITH, COPIED_WITH[:-1] + ", 'owner' = 'base')")]),
    ("role", "name"): ("role.solo", [(Y, "  - name: solo\n", "  - name: solo2\n")]),
    ("role", "inherits"): ("role.reader", [(Y, "inherits: [base]", "inherits: []")]),
    ("role", "grants"): ("grant.reader.select.relation.db.s.events",
                         [(Y, "    grants:\n      - privilege: SELECT\n        on: events\n", "")]),
    ("grant", "privilege"): ("grant.reader.select.relation.db.s.events",
                             [(Y, "privilege: SELECT", "privilege: INSERT")]),
    ("grant", "on"): ("grant.reader.select.relation.db.s.events", [(Y, "  on: events", "  on: users")]),
    ("datagen", "name"): ("datagen.feed", [(Y, "name: feed", "name: feed2")]),
    ("datagen", "relation"): ("datagen.feed", [(Y, "relation: events", "relation: users")]),
    ("datagen", "generator"): ("datagen.feed", [(Y, "generator: columns", "generator: pageviews")]),
    ("datagen", "count"): ("datagen.feed", [(Y, "    seed: 0\n", "    seed: 0\n    count: 10\n")]),
    ("datagen", "seed"): ("datagen.feed", [(Y, "seed: 0", "seed: 1")]),
    ("datagen", "rate"): ("datagen.feed", [(Y, "rate: 1", "rate: 2")]),
    ("relation", "CREATE STREAM or CHANGELOG"): (USERS, [(S, "CREATE CHANGELOG users (uid BIGINT, name VARCHAR, "
                                                          "PRIMARY KEY (uid))", "CREATE STREAM users (uid BIGINT, "
                                                          "name VARCHAR)")]),
    ("relation", "columns"): (EVENTS, [(S, "name VARCHAR) WITH ('topic' = 'events'",
                                        "name BOOLEAN) WITH ('topic' = 'events'")]),
    ("relation", "PRIMARY KEY"): (USERS, [(S, "PRIMARY KEY (uid)", "PRIMARY KEY (uid, name)")]),
    ("relation", "store"): (EVENTS, [(S, EVENTS_WITH, f"'store' = 'k2', {EVENTS_WITH}")]),
    ("relation", "topic"): (EVENTS, [(S, "'topic' = 'events'", "'topic' = 'events2'")]),
    ("relation", "value.format"): (EVENTS, [(S, EVENTS_WITH, "'topic' = 'events', 'value.format' = 'avro',")]),
    ("relation", "value.subject"): ("relation.db.s.avro_events", [(S, "'value.format' = 'avro'",
                                                                   "'value.format' = 'avro', 'value.subject' = 'x'")]),
    # the changelog `counts` inherits its key format from `events`: it is replaced (_check_restarts)
    ("relation", "key.format"): (EVENTS, [(S, EVENTS_WITH, f"{EVENTS_WITH} 'key.format' = 'string',")]),
    ("relation", "timestamp"): (EVENTS, [(S, "'timestamp' = 'ts'", "'timestamp' = 'id'")]),
    ("relation", "topic.gaps"): (EVENTS, [(S, EVENTS_WITH, f"{EVENTS_WITH} 'topic.gaps' = 'count',")]),
    ("relation", "topic.partitions"): (EVENTS, [(S, "'topic.partitions' = 1", "'topic.partitions' = 2")]),
    ("relation", "topic.shards"): ("relation.db.s.shards", [(S, "'topic.shards' = 1", "'topic.shards' = 2")]),
    ("relation", "topic.replicas"): (EVENTS, [(S, "'topic.replicas' = 1", "'topic.replicas' = 2")]),
    ("relation", "kafka.topic.*"): (EVENTS, [(S, EVENTS_WITH, f"{EVENTS_WITH} 'kafka.topic.retention.ms' = '1000',")]),
    ("relation", "lifecycle.prevent_destroy"): (EVENTS, [(S, EVENTS_WITH,
                                                          f"{EVENTS_WITH} 'lifecycle.prevent_destroy' = 'true',")]),
    ("relation", "value.schema.compatibility"): (EVENTS, [(S, EVENTS_WITH,
                                                           f"{EVENTS_WITH} 'value.schema.compatibility' = 'FULL',")]),
    ("relation", "deploy"): (EVENTS, [(S, EVENTS_WITH, f"{EVENTS_WITH} 'deploy' = 'blue_green',")]),
    ("relation", "deploy.retention"): (EVENTS, [(S, EVENTS_WITH, f"{EVENTS_WITH} 'deploy.retention' = '2 hours',")]),
    ("cdc", "store"): (CDC, [(S, "WITH ('store' = 'pg', 'postgresql.db.name'", "WITH ('store' = 'pg2', "
                                                                             "'postgresql.db.name'")]),
    ("cdc", "value.format"): (CDC, []),  # json only: there is no other value to change it to
    ("cdc", "timestamp"): (CDC, [(S, "'postgresql.db.name' = 'app',", "'postgresql.db.name' = 'app', "
                                                                     "'timestamp' = 'ts_ms',")]),
    ("cdc", "postgresql.db.name"): (CDC, [(S, "'postgresql.db.name' = 'app'", "'postgresql.db.name' = 'app2'")]),
    ("cdc", "postgresql.schema.name"): (CDC, [(S, "'postgresql.schema.name' = 'public'",
                                               "'postgresql.schema.name' = 'sales'")]),
    ("cdc", "postgresql.table.name"): (CDC, [(S, "'postgresql.table.name' = 'orders'",
                                              "'postgresql.table.name' = 'orders2'")]),
    ("cdc", "postgresql.cdc.table.list"): (CDC, [(S, "'postgresql.schema.name' = 'public',\n"
                                                     "        'postgresql.table.name' = 'orders'",
                                                  "'postgresql.cdc.table.list' = 'public.orders'")]),
    ("table", "store"): (LAKE_T, [(Q, LAKE_WITH, "WITH ('store' = 'dbx', 'delta.path' = 't1')")]),
    ("table", "delta.path"): (LAKE_T, [(Q, "'delta.path' = 't1'", "'delta.path' = 't2'")]),
    ("table", "table.data.file.location"): (LAKE_T, [(Q, "'delta.path' = 't1'", "'table.data.file.location' = 't9'")]),
    ("table", "databricks.catalog.name"): ("relation.db.s.dbx_t", [(Q, "catalog.name' = 'c'", "catalog.name' = 'c2'")]),
    ("table", "databricks.schema.name"): ("relation.db.s.dbx_t", [(Q, "schema.name' = 's'", "schema.name' = 's2'")]),
    ("table", "databricks.table.name"): ("relation.db.s.dbx_t", [(Q, "table.name' = 't'", "table.name' = 't2'")]),
    ("table", "snowflake.db.name"): ("relation.db.s.snow_t", [(Q, "db.name' = 'D'", "db.name' = 'D2'")]),
    ("table", "snowflake.schema.name"): ("relation.db.s.snow_t", [(Q, "schema.name' = 'S'", "schema.name' = 'S2'")]),
    ("table", "snowflake.table.name"): ("relation.db.s.snow_t", [(Q, "table.name' = 'T'", "table.name' = 'T2'")]),
    ("table", "iceberg.namespace.name"): ("relation.db.s.ice_t", [(Q, "namespace.name' = 'n'",
                                                                   "namespace.name' = 'n2'")]),
    ("table", "iceberg.table.name"): ("relation.db.s.ice_t", [(Q, "table.name' = 'tbl'", "table.name' = 'tbl2'")]),
    ("table", "postgresql.db.name"): ("relation.db.s.pg_t", [(Q, "db.name' = 'wh'", "db.name' = 'wh2'")]),
    ("table", "postgresql.schema.name"): ("relation.db.s.pg_t", [(Q, "schema.name' = 'web'", "schema.name' = 'w2'")]),
    ("table", "postgresql.table.name"): ("relation.db.s.pg_t", [(Q, "table.name' = 'pgt'", "table.name' = 'pgt2'")]),
    ("table", "lifecycle.prevent_destroy"): (LAKE_T, [(Q, LAKE_WITH, LAKE_WITH[:-1] + ", "
                                                       "'lifecycle.prevent_destroy' = 'true')")]),
    ("table", "value.schema.compatibility"): (LAKE_T, [(Q, LAKE_WITH, LAKE_WITH[:-1] + ", "
                                                        "'value.schema.compatibility' = 'NONE')")]),
    ("table", "kafka.topic.*"): (LAKE_T, [(Q, LAKE_WITH, LAKE_WITH[:-1] + ", 'kafka.topic.retention.ms' = '1')")]),
    ("materialized_view", "store"): (VIEW, [(Q, VIEW_WITH, VIEW_WITH.replace("'pg'", "'pg2'"))]),
    ("materialized_view", "postgresql.db.name"): (VIEW, [(Q, VIEW_WITH, VIEW_WITH[:-1] +
                                                          ", 'postgresql.db.name' = 'other')")]),
    ("materialized_view", "postgresql.schema.name"): (VIEW, [(Q, VIEW_WITH, VIEW_WITH[:-1] +
                                                              ", 'postgresql.schema.name' = 'views')")]),
    ("materialized_view", "postgresql.table.name"): (VIEW, [(Q, "= 'user_names')", "= 'names2')")]),
    ("materialized_view", "lifecycle.prevent_destroy"): (VIEW, [(Q, VIEW_WITH, VIEW_WITH[:-1] +
                                                                 ", 'lifecycle.prevent_destroy' = 'true')")]),
    ("materialized_view", "value.schema.compatibility"): (VIEW, [(Q, VIEW_WITH, VIEW_WITH[:-1] +
                                                                  ", 'value.schema.compatibility' = 'NONE')")]),
    ("materialized_view", "kafka.topic.*"): (VIEW, [(Q, VIEW_WITH, VIEW_WITH[:-1] + ", 'kafka.topic.x' = '1')")]),
    ("query", "AS SELECT ..."): (COPIED, [(Q, "WHERE id > 0", "WHERE id > 1")]),
    ("query", "starting.position"): (COPIED, [(Q, COPIED_WITH, "WITH ('topic' = 'copied', "
                                                               "'starting.position' = 'latest')")]),
    ("query", "watermark.delay"): ("query.db.s.counts", [(Q, "CREATE CHANGELOG counts AS", "CREATE CHANGELOG counts "
                                                             "WITH ('watermark.delay' = '30 seconds') AS")]),
    ("query", "delivery.guarantee"): ("query.db.s.counts", [(Q, "CREATE CHANGELOG counts AS",
                                                            "CREATE CHANGELOG counts "
                                                            "WITH ('delivery.guarantee' = 'exactly-once') AS")]),
    ("query", "trigger"): (COPIED, [(Q, COPIED_WITH, "WITH ('topic' = 'copied', 'trigger' = 'realtime')")]),
    ("query", "trigger.interval"): (COPIED, [(Q, COPIED_WITH, "WITH ('topic' = 'copied', "
                                                              "'trigger.interval' = '5 seconds')")]),
    ("query", "dlq.topic"): (COPIED, [(Q, COPIED_WITH, "WITH ('topic' = 'copied', 'dlq.topic' = 'bad')")]),
    ("query", "CONSTRAINT ... EXPECT"): (COPIED, [(Q, COPIED_WITH, COPIED_WITH + " CONSTRAINT named EXPECT "
                                                   "(name IS NOT NULL) ON VIOLATION DROP ROW")]),
    ("query", "source.deserialization.error.handling"): (COPIED, [(Q, COPIED_WITH, "WITH ('topic' = 'copied', "
                                                                   "'source.deserialization.error.handling' = "
                                                                   "'IGNORE')")]),
    ("query", "runtime.isolation"): (COPIED, [(Q, COPIED_WITH, "WITH ('topic' = 'copied', "
                                                               "'runtime.isolation' = 'shared')")]),
    ("query", "start.position"): (COPIED, [(Q, COPIED_WITH, "WITH ('topic' = 'copied', "
                                                            "'start.position' = 'earliest')")]),
    ("source", "starting.position"): (COPIED, [(Q, "FROM events WHERE", "FROM events WITH ('starting.position' = "
                                                                        "'latest') WHERE")]),
    ("source", "timestamp"): (COPIED, [(Q, "FROM events WHERE", "FROM events WITH ('timestamp' = 'id') WHERE")]),
    ("function", "AS 'module:function'"): ("function.later", [("udfs.py", "t + 1", "t + 2")]),
    ("function", "parameters"): ("function.later", [(Q, "later(t BIGINT)", "later(at BIGINT)")]),
    ("function", "RETURNS"): ("relation.db.s.loud", [(Q, "RETURNS BIGINT", "RETURNS VARCHAR")]),
    ("function", "LANGUAGE"): ("function.later", []),
    ("view", "CREATE VIEW"): ("view.db.s.named", []),
    ("view", "AS SELECT ..."): ("query.db.s.from_view", [(Q, "WHERE id > 1", "WHERE id > 2")]),
    ("runtime", "spark_master"): (None, [("dsflow.yml", "local[2]", "local[3]")]),
    ("runtime", "spark_conf"): (None, [("dsflow.yml", "partitions: \"2\"", "partitions: \"3\"")]),
    ("runtime", "trigger"): (COPIED, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                      "  trigger_interval: 1 second\n  trigger: realtime\n")]),
    ("runtime", "trigger_interval"): (None, [("dsflow.yml", "trigger_interval: 1 second",
                                              "trigger_interval: 2 seconds")]),
    ("runtime", "delivery_guarantee"): (COPIED, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                                  "  trigger_interval: 1 second\n"
                                                  "  delivery_guarantee: exactly-once\n")]),
    ("runtime", "checkpoint_root"): (None, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                             "  trigger_interval: 1 second\n  checkpoint_root: elsewhere\n")]),
    ("runtime", "isolation"): (None, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                       "  trigger_interval: 1 second\n  isolation: shared\n")]),
    ("runtime", "queries_per_app"): (None, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                             "  trigger_interval: 1 second\n  queries_per_app: 3\n")]),
    ("runtime", "standby"): (None, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                     "  trigger_interval: 1 second\n  standby: true\n")]),
    ("runtime", "async_checkpoint"): (None, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                              "  trigger_interval: 1 second\n  async_checkpoint: true\n")]),
    ("runtime", "batches_at_once"): (None, [("dsflow.yml", "  trigger_interval: 1 second\n",
                                             "  trigger_interval: 1 second\n  batches_at_once: 3\n")]),
}
"""An edit of each setting of SETTINGS in the project of FILES."""
ALSO_UPDATED = {("table", "owner"): ("query.db.s.lake_t",), ("materialized_view", "owner"): ("query.db.s.user_names",),
                ("query", "owner"): ("relation.db.s.copied",)}
"""In-place settings of a CREATE ... AS SELECT that also update the other object the statement makes (an owner
owns the relation and its query)."""

OBJECT_LISTS = {"stores", "schema_registries", "databases", "roles", "users", "datagen"}
INSTRUCTIONS = {"moved", "removed", "imports"}
"""YAML entries that declare no object, only tell the planner something (`moved:`, `removed:`, `import:`)."""
UNSET_FIELDS = {"spark_conf"}
"""Resource fields no setting fills yet (a query's own Spark conf: the loader accepts none)."""
KINDS = {Kind.STORE: ("store",), Kind.DATABASE: ("database",), Kind.SCHEMA: ("database", "schema"),
         Kind.BINDING: ("user",),
         Kind.RELATION: ("relation", "cdc", "table", "materialized_view"), Kind.QUERY: ("query", "source", "runtime"),
         Kind.DATAGEN: ("datagen",), Kind.ROLE: ("role",), Kind.GRANT: ("role", "grant"), Kind.FUNCTION: ("function",),
         Kind.VIEW: ("view",)}


def _accepted() -> set[tuple[str, str]]:
    """Every setting the loader accepts, from its own lists."""
    from dsflow.load import raw
    from dsflow.sql.cdc import CDC_PROPS
    from dsflow.load.queries import (
        DEPLOY, OWNER, PREVENT_DESTROY, QUERY_PROPS, RELATION_PROPS, RETENTION, SCHEMA_COMPATIBILITY,
        TOPIC_CONFIG_PREFIX,
    )
    from dsflow.sql.select import SOURCE_PROPS
    from dsflow.load.tables import TABLE_PROPS
    from dsflow.load.views import VIEW_PROPS

    assert set(raw.RawObjectsFile.model_fields) == OBJECT_LISTS | INSTRUCTIONS, "a new kind of object: classify it"
    # any relation statement takes them
    every = {PREVENT_DESTROY, SCHEMA_COMPATIBILITY, OWNER, TOPIC_CONFIG_PREFIX + "*"}
    found = {("relation", p) for p in RELATION_PROPS | every | {"CREATE STREAM or CHANGELOG", "columns", "PRIMARY KEY"}}
    found |= {("relation", DEPLOY), ("relation", RETENTION)}  # a stream's or changelog's (blue/green replays)
    found |= {("query", p) for p in QUERY_PROPS | {"AS SELECT ...", "CONSTRAINT ... EXPECT"}}
    found |= {("cdc", p) for p in CDC_PROPS} | {("source", p) for p in SOURCE_PROPS}
    found |= {("function", p) for p in ("AS 'module:function'", "parameters", "RETURNS", "LANGUAGE")}
    found |= {("view", p) for p in ("CREATE VIEW", "AS SELECT ...")}
    found |= {("table", p) for p in TABLE_PROPS | every} | {("materialized_view", p) for p in VIEW_PROPS | every}
    for kind, model in [("store", raw.RawStore), ("schema_registry", raw.RawSchemaRegistry),
                        ("runtime", raw.RawRuntime), ("database", raw.RawDatabase), ("role", raw.RawRole),
                        ("grant", raw.RawGrant), ("datagen", raw.RawDatagen), ("schema", raw.RawSchema),
                        ("user", raw.RawUser)]:
        found |= {(kind, "properties.*" if name == "properties" else name) for name in model.model_fields}
    return found


def test_every_setting_the_loader_accepts_is_classified_once() -> None:
    from dsflow.load.store_settings import keys
    from dsflow.load.tables import STORE_SETTINGS

    classified = [(s.kind, s.name) for s in SETTINGS]
    assert len(classified) == len(set(classified)), "a setting is classified twice"
    accepted = _accepted()
    assert sorted(accepted - set(classified)) == [], "accepted by the loader, not classified in core/settings.py"
    assert sorted(set(classified) - accepted) == [], "classified, but the loader accepts no such setting"
    for type_, model in STORE_SETTINGS.items():
        for key in keys(model)[1]:
            assert setting("store", f"properties.{key}").cls is SettingClass.RESTARTS, (type_, key)
    with pytest.raises(KeyError):
        setting("relation", "no.such.setting")


def _write(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def _plan(root: Path, state: State) -> Plan:
    project = load_project(root)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions())


@pytest.fixture()
def deployed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> State:
    monkeypatch.setenv("REG_PASSWORD", "hunter2")
    plan = _plan(_write(tmp_path / "base", FILES), State())
    assert {c.action for c in plan.changes} == {Action.CREATE}
    return applied(plan)


def test_every_resource_field_comes_from_a_classified_setting(deployed: State) -> None:
    for key, resource in deployed.resources.items():
        kinds = KINDS[Address.parse(key).kind]
        known = {f for s in SETTINGS if s.kind in kinds for f in s.fields} | set(QUERY_SETTINGS_OF) | UNSET_FIELDS
        assert sorted((set(resource.data) | set(resource.metadata)) - known) == [], key


def _users(entry: Setting, owner: str | None, state: State) -> set[str]:
    """The deployed queries that run with `entry` of `owner` (a store, relation, registry or the runtime)."""
    queries = {k: v for k, v in state.resources.items() if k.startswith("query.")}
    if entry.kind == "runtime":
        return set(queries)
    if entry.kind == "query":
        return {owner}
    if entry.kind == "schema_registry":
        return {k for k, v in queries.items() if "schema_registry" in v.metadata}
    if entry.kind == "store":
        name = Address.parse(owner).name
        relations = {k for k, v in state.resources.items() if k.startswith("relation.") and v.data["store"] == name}
        return {k for k, v in queries.items() if relations & set(v.depends_on)}
    return {k for k, v in queries.items() if owner in v.depends_on} \
        if owner.startswith(("relation.", "function.")) else set()


def _check_restarts(entry: Setting, owner: str | None, plan: Plan, state: State) -> None:
    changes = {c.address: c for c in plan.actionable}
    rekeyed = {a for a, c in changes.items() if "'key.format' of a changelog changed" in c.reason}
    rekeyed |= {a for a, c in changes.items() if any(f"upstream {r} is replaced" in c.reason for r in rekeyed)}
    if entry.name == "key.format":  # a changelog inheriting another key encoding is replaced (its keys are its rows)
        assert rekeyed == {"relation.db.s.counts", "query.db.s.counts"}, rekeyed
    replaced = [(a, c.reason) for a, c in changes.items() if c.action is not Action.UPDATE and a not in rekeyed]
    assert not replaced, ("a setting that restarts replaced something", replaced)
    if owner is not None:
        assert owner in changes
    users = _users(entry, owner, state)
    assert users or entry.kind == "datagen"
    for address in sorted(set(users) - rekeyed):
        change = changes.get(address)
        assert change is not None, f"{address} runs with {entry.name} but does not restart"
        assert change.category.value == "in_place" and "same checkpoint" in change.effect
        assert _named(entry) in change.reason, change.reason


def _named(entry: Setting) -> str:
    """How a restarted query's reason names the setting."""
    if "registry" in entry.kind + entry.name:
        return "schema registry"
    if entry.kind == "function":
        return "function later's code or signature"
    if entry.kind in ("store", "relation", "cdc"):
        noun = "store" if entry.kind == "store" else "relation"
        return f"'{entry.name[:-1]}" if entry.name.endswith("*") else f"'{entry.name}' of {noun} "
    return "".join(f for f in entry.fields if f != "sources")


@pytest.mark.parametrize("entry", SETTINGS, ids=lambda s: f"{s.kind}:{s.name}")
def test_a_change_to_each_setting_does_what_its_class_says(entry: Setting, deployed: State, tmp_path: Path) -> None:
    assert (entry.kind, entry.name) in EDITS, f"no edit of {entry.kind} setting '{entry.name}' in EDITS"
    owner, edits = EDITS[(entry.kind, entry.name)]
    if not edits:
        pytest.skip("a setting with one possible value")
    files = dict(FILES)
    for name, old, new in edits:
        assert files[name].count(old) == 1, (name, old)
        files[name] = files[name].replace(old, new)
    plan = _plan(_write(tmp_path / "edited", files), deployed)
    changes = {c.address: c for c in plan.actionable}
    cls = entry.cls
    if cls in (SettingClass.IDENTITY, SettingClass.SCHEMA, SettingClass.SIZING):
        expected = {Action.REPLACE} if cls is not SettingClass.IDENTITY else {Action.REPLACE, Action.DELETE}
        assert changes[owner].action in expected, changes[owner].reason
    elif cls is SettingClass.RESTARTS:
        _check_restarts(entry, owner, plan, deployed)
    elif cls is SettingClass.QUERY:
        assert changes[owner].category.value in ("keep_checkpoint", "carry_offsets", "replay"), changes[owner].reason
        assert not any(c.action is Action.REPLACE for a, c in changes.items() if a.startswith("relation."))
    elif cls is SettingClass.OVERRIDE:
        assert changes[owner].override == "earliest" and changes[owner].category.value == "replay"
    elif cls is SettingClass.IN_PLACE:
        also = ALSO_UPDATED.get((entry.kind, entry.name), ())
        assert sorted((c.address, c.action) for c in plan.actionable) == sorted((a, Action.UPDATE)
                                                                                  for a in (owner, *also))
    else:
        assert plan.actionable == [], "a setting kept in no resource changed the plan"


def test_docs_show_the_table_the_code_has() -> None:
    doc = (REPO / "docs" / "plan.md").read_text()
    found = re.search(r"<!-- settings table: .*? -->\n(.*?)<!-- end of settings table -->", doc, re.S)
    assert found is not None and found.group(1) == markdown_table(), \
        "docs/plan.md: paste python -c 'from dsflow.core.settings import markdown_table; print(markdown_table())'"


@pytest.mark.parametrize("old, new, refused", [
    ("      path: lake\n", "      path: lake2\n", True),  # where the lake's tables live
    ("      account: acme\n", "      account: acme\n      role: ANALYST\n", False),  # a credential: restarts only
])
def test_a_store_holding_tables_cannot_be_pointed_elsewhere(deployed: State, tmp_path: Path, old: str, new: str,
                                                            refused: bool) -> None:
    """Restarting the queries would write new tables elsewhere while the state and a later destroy still point at
    the old ones: DSF-E830 names the store, the setting and the tables; other store settings restart only."""
    from dsflow.core.safety import check_table_places
    from dsflow.errors import DsflowError

    files = dict(FILES)
    assert files[Y].count(old) == 1
    files[Y] = files[Y].replace(old, new)
    plan = _plan(_write(tmp_path / "edited", files), deployed)
    if not refused:
        check_table_places(plan, deployed)
        return
    with pytest.raises(DsflowError) as error:
        check_table_places(plan, deployed)
    assert error.value.code == "DSF-E830"
    assert "store 'lake' (properties.path) holding relation.db.s.lake_t" in str(error.value)
