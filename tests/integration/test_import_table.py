"""Importing an existing PostgreSQL table (issue 42 item 4, core/imports.py, adapters/postgres/adopting.py), against
the session's PostgreSQL (tests/support/pgserver.py) and broker: a table made by hand, with rows, that a declared
CREATE TABLE ... AS SELECT names, taken into the state as it is by an `import:` entry or `dsflow import`.

- the same columns: recorded only; the rows kept, then upserted into by the query's writer (a plain-Python
  reference of the rows); the next plan has nothing to do; destroy keeps it (dsflow did not create it);
- the declaration's last column missing: added in place (ALTER TABLE ADD COLUMN), the rows kept;
- a table that cannot take the rows (a column's type, no unique index on the key, a NOT NULL column the query does
  not write, a view) or that does not exist: refused at plan time (DSF-E869, DSF-E868), nothing applied; one
  altered between the plan and apply: refused by apply before anything is applied (DSF-E827).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import psycopg2
import pytest

from dsflow.core.plan import Action
from dsflow.engine import operations
from dsflow.errors import DsflowError
from support import pgserver
from support.projects import make_project
from support.streaming import CONFIG

pytestmark = pytest.mark.integration

COUNTS = "relation.analytics.public.pv_counts"
STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: pg
    type: postgresql
    properties: {host: 127.0.0.1, port: """ + pgserver.PORT + """, user: postgres, database: %s}
"""
SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE TABLE pv_counts WITH ('store' = 'pg') AS
  SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;
"""


def psql(database: str, statement: str) -> str:
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database, "-tA", "-F", "|",
                          "-c", statement], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def rows(database: str, query: str) -> list[tuple]:
    with psycopg2.connect(dbname=database, **pgserver.SERVER) as conn, conn.cursor() as cur:
        cur.execute(query)
        return cur.fetchall()


@pytest.fixture()
def pgdb() -> Iterator[str]:
    name = f"dsflow_imp_{uuid.uuid4().hex[:10]}"
    psql("postgres", f"CREATE DATABASE {name}")
    yield name
    psql("postgres", f"DROP DATABASE {name} WITH (FORCE)")


def _project(tmp_path, broker: str, pgdb: str, sql: str = SQL, entries: str | None = None):
    files = {"dsflow.yml": CONFIG.format(prefix=f"imp{uuid.uuid4().hex[:6]}_"), "stores/kafka.yml": STORES % pgdb,
             "sql/all.sql": sql, "import.yml": entries}
    root = make_project(tmp_path, files)
    return root, operations.Options(root, None, {"bootstrap": broker})


def _plan(options: operations.Options, destroy: bool = False):
    loaded = operations.load(options)
    return loaded, operations.plan(loaded, destroy=destroy, targets=frozenset() if destroy else frozenset({COUNTS}))


def test_an_imported_table_is_recorded_as_it_is_written_into_and_kept_by_destroy(tmp_path, broker, pgdb):
    from dsflow.adapters.postgres.tables import PostgresTables
    from dsflow.adapters.tables import TableRef
    from dsflow.cli.render import plan_text

    psql(pgdb, "CREATE TABLE pv_counts (userid TEXT PRIMARY KEY, views BIGINT, note TEXT)")
    psql(pgdb, "INSERT INTO pv_counts VALUES ('a', 3, 'by hand'), ('b', 5, NULL)")
    root, options = _project(tmp_path, broker, pgdb, entries="import:\n  - to: pv_counts\n    id: public.pv_counts\n")
    loaded, plan = _plan(options)
    [change] = [c for c in plan.actionable if c.address == COUNTS]
    assert (change.action, change.imported) == (Action.NOOP, f"{pgdb}.public.pv_counts")
    assert "exists with columns userid text, views bigint, note text); matches the declaration" in change.reason
    text = plan_text(plan.model_dump(mode="json"))
    assert f"<= {COUNTS}  (import {pgdb}.public.pv_counts)" in text and "1 to import" in text
    assert operations.apply(loaded, plan).ok
    entry = operations.load(options).workspace.state_backend().read().resources[COUNTS]
    assert entry.outputs["created_by_dsflow"] is False and entry.outputs["imported"] == f"{pgdb}.public.pv_counts"
    assert rows(pgdb, "SELECT userid, views, note FROM pv_counts ORDER BY userid") == [("a", 3, "by hand"),
                                                                                       ("b", 5, None)]

    import pyarrow as pa

    expected = {"a": (3, "by hand"), "b": (5, None)}
    batch = [("a", 4), ("c", 1)]  # as the query's writer upserts one micro-batch on its key
    ref = TableRef("postgresql", entry.outputs["table"], dict(loaded.project.store("pg").properties))
    data = pa.table({"userid": [r[0] for r in batch], "views": pa.array([r[1] for r in batch], pa.int64())})
    assert PostgresTables().write_batch(ref, data, ["userid"], "dsflow-writer", 0)
    expected |= {userid: (views, expected.get(userid, (None, None))[1]) for userid, views in batch}
    assert {r[0]: r[1:] for r in rows(pgdb, "SELECT userid, views, note FROM pv_counts")} == expected

    _, again = _plan(options)
    assert not [c for c in again.actionable if c.address == COUNTS], "imported: nothing left to do"

    loaded, destroy = _plan(options, destroy=True)
    [gone] = [c for c in destroy.actionable if c.address == COUNTS]
    assert gone.action is Action.DELETE and gone.destroys is None
    assert "kept: dsflow did not create it" in (gone.effect or "")
    assert operations.apply(loaded, destroy).ok
    assert {r[0]: r[1:] for r in rows(pgdb, "SELECT userid, views, note FROM pv_counts")} == expected


def test_dsflow_import_adds_the_declarations_last_column_in_place(tmp_path, broker, pgdb):
    from click.testing import CliRunner

    from dsflow.cli import cli

    psql(pgdb, "CREATE TABLE pv_counts (userid TEXT, views BIGINT, UNIQUE (userid))")
    psql(pgdb, "INSERT INTO pv_counts VALUES ('a', 3)")
    sql = SQL.replace("COUNT(*) AS views", "COUNT(*) AS views, MAX(viewtime) AS last_seen")
    root, options = _project(tmp_path, broker, pgdb, sql)
    args = ["-C", str(root), "--var", f"bootstrap={broker}"]
    refused = CliRunner().invoke(cli, [*args, "import", "pv_counts", "public.other", "--auto-approve"])
    assert refused.exit_code == 1 and "DSF-E867" in str(getattr(refused.exception, "code", refused.output))
    result = CliRunner().invoke(cli, [*args, "import", "pv_counts", "public.pv_counts", "--auto-approve"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert f"(import {pgdb}.public.pv_counts, then update)" in result.output
    assert "column(s) last_seen added (in place: ALTER TABLE ADD COLUMN)" in result.output
    assert rows(pgdb, "SELECT userid, views, last_seen FROM pv_counts") == [("a", 3, None)]
    assert psql(pgdb, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                      "'pv_counts'::regclass AND attname = 'last_seen'") == "bigint"
    entry = operations.load(options).workspace.state_backend().read().resources[COUNTS]
    assert entry.outputs["created_by_dsflow"] is False
    assert [c[0] for c in entry.data["columns"]] == ["userid", "views", "last_seen"]
    _, again = _plan(options)
    assert not [c for c in again.actionable if c.address == COUNTS]


def test_a_table_altered_between_the_plan_and_apply_is_refused_before_anything_is_applied(tmp_path, broker, pgdb):
    psql(pgdb, "CREATE TABLE pv_counts (userid TEXT PRIMARY KEY, views BIGINT)")
    root, options = _project(tmp_path, broker, pgdb, entries="import:\n  - to: pv_counts\n")
    loaded, plan = _plan(options)
    assert [(c.address, c.action) for c in plan.actionable if c.imported] == [(COUNTS, Action.NOOP)]
    psql(pgdb, "ALTER TABLE pv_counts ALTER COLUMN views TYPE TEXT")
    with pytest.raises(DsflowError) as raised:
        operations.apply(loaded, plan)
    assert raised.value.code == "DSF-E827" and "views bigint when the plan was made" in raised.value.message
    assert "views text now" in raised.value.message
    assert COUNTS not in operations.load(options).workspace.state_backend().read().resources
    assert psql(pgdb, "SELECT count(*) FROM pg_class WHERE relname = 'dsflow_mv_batches'") == "0"


@pytest.mark.parametrize(("table", "code", "why"), [
    ("CREATE TABLE pv_counts (userid TEXT PRIMARY KEY, views TEXT)", "DSF-E869",
     "column views is text, and the declared BIGINT is written as bigint"),
    ("CREATE TABLE pv_counts (userid TEXT, views BIGINT)", "DSF-E869",
     "no primary key or unique index on exactly (userid)"),
    ("CREATE TABLE pv_counts (userid TEXT PRIMARY KEY, views BIGINT, owner TEXT NOT NULL)", "DSF-E869",
     "column owner is NOT NULL without a default"),
    ("CREATE VIEW pv_counts AS SELECT 'a'::text AS userid, 1::bigint AS views", "DSF-E869", "is not a table"),
    (None, "DSF-E868", "does not exist"),
])
def test_a_table_that_cannot_be_imported_as_it_is_is_refused_at_plan_time(tmp_path, broker, pgdb, table, code, why):
    if table is not None:
        psql(pgdb, table)
    root, options = _project(tmp_path, broker, pgdb, entries="import:\n  - to: pv_counts\n")
    loaded = operations.load(options)
    with pytest.raises(DsflowError) as raised:
        operations.plan(loaded, targets=frozenset({COUNTS}))
    [problem] = raised.value.diagnostics
    assert problem.code == code and why in problem.message, problem.message
    assert problem.location is not None and problem.location.file.endswith("all.sql")
    assert COUNTS not in operations.load(options).workspace.state_backend().read().resources
    assert psql(pgdb, "SELECT count(*) FROM pg_class WHERE relname = 'dsflow_mv_batches'") == "0"
