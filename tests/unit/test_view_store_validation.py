"""Where a materialized view lives ('store' on the view), which delivery guarantee a query may ask for, and
`dsflow query` usage mistakes: validation only (no Spark, no broker, no PostgreSQL)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dsflow.engine import adhoc
from dsflow.cli import cli
from dsflow.core.plan import make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.errors import DsflowError
from dsflow.load.project import check_project, load_project
from support.projects import PAGEVIEWS, make_project

STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: pg
    type: postgresql
    properties: {host: db.internal, user: serving, database: analytics_db}
  - name: lake
    type: filesystem
    properties: {path: lake}
"""


def _check(tmp_path, sql: str):
    return check_project(make_project(tmp_path, {"stores/kafka.yml": STORES, "sql/src.sql": PAGEVIEWS,
                                                 "sql/q.sql": sql}))


def test_view_in_a_postgresql_store_names_its_table(tmp_path) -> None:
    sql = ("CREATE MATERIALIZED VIEW counts WITH ('store' = 'pg') AS\n"
           "  SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;\n"
           "CREATE MATERIALIZED VIEW rows_pg WITH ('store' = 'pg', 'postgresql.db.name' = 'other',\n"
           "  'postgresql.schema.name' = 'serving', 'postgresql.table.name' = 'page_rows') AS\n"
           "  SELECT id, pageid FROM pageviews;\n"
           "CREATE MATERIALIZED VIEW local AS SELECT id FROM pageviews;\n")
    result = _check(tmp_path, sql)
    assert result.diagnostics == []
    counts, rows, local = (result.project.relation(f"analytics.public.{n}") for n in ("counts", "rows_pg", "local"))
    assert (counts.store, counts.topic, counts.primary_key, counts.table_options) == (
        "pg", "counts", ("userid",), {"postgresql.db.name": "analytics_db", "postgresql.schema.name": "public",
                                      "postgresql.table.name": "counts"})
    assert (rows.topic, rows.primary_key, rows.table_options) == ("page_rows", (), {
        "postgresql.db.name": "other", "postgresql.schema.name": "serving", "postgresql.table.name": "page_rows"})
    assert (local.store, local.table_options) == ("", {})
    plan = make_plan("p", "dev", project_resources(result.project), State())
    change = next(c for c in plan.changes if c.address == "relation.analytics.public.counts")
    assert change.effect.startswith("table created")
    assert "relation.analytics.public.counts" in {c.address for c in plan.changes} and \
        any(c.address == "store.pg" for c in plan.changes)


def test_view_store_mistakes_are_reported_at_their_property(tmp_path) -> None:
    sql = ("CREATE MATERIALIZED VIEW a WITH ('store' = 'kafka_main') AS SELECT id FROM pageviews;\n"
           "CREATE MATERIALIZED VIEW b WITH ('store' = 'lake') AS SELECT id FROM pageviews;\n"
           "CREATE MATERIALIZED VIEW c WITH ('postgresql.table.name' = 't') AS SELECT id FROM pageviews;\n"
           "CREATE MATERIALIZED VIEW d WITH ('store' = 'pgg') AS SELECT id FROM pageviews;\n"
           f"CREATE MATERIALIZED VIEW e WITH ('store' = 'pg', 'postgresql.table.name' = '{'t' * 64}') AS "
           "SELECT id FROM pageviews;\n"
           "CREATE MATERIALIZED VIEW f WITH ('store' = 'pg', 'topic' = 'x') AS SELECT id FROM pageviews;\n")
    found = {(d.code, d.location.line, d.location.col): d for d in _check(tmp_path, sql).diagnostics}
    assert sorted(found) == [("DSF-E021", 4, 34), ("DSF-E031", 6, 50), ("DSF-E140", 1, 34), ("DSF-E140", 2, 34),
                             ("DSF-E141", 3, 34), ("DSF-E142", 5, 50)]
    assert found[("DSF-E140", 1, 34)].message == \
        "the materialized view 'analytics.public.a' cannot be kept in the kafka store 'kafka_main'"
    assert "did you mean 'pg'" in found[("DSF-E021", 4, 34)].hint
    assert "postgresql 'store'" in found[("DSF-E141", 3, 34)].message


def test_delivery_guarantee_where_it_is_real(tmp_path) -> None:
    sql = ("CREATE STREAM s WITH ('delivery.guarantee' = 'exactly-once') AS SELECT id FROM pageviews;\n"
           "CREATE STREAM s2 AS SELECT id FROM pageviews;\n"
           "CREATE CHANGELOG c WITH ('delivery.guarantee' = 'exactly-once') AS\n"
           "  SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;\n"
           "CREATE MATERIALIZED VIEW v WITH ('store' = 'pg', 'delivery.guarantee' = 'exactly-once') AS\n"
           "  SELECT id FROM pageviews;\n"
           "CREATE TABLE t WITH ('store' = 'lake', 'delivery.guarantee' = 'exactly-once') AS\n"
           "  SELECT id FROM pageviews;\n"
           "CREATE STREAM s3 WITH ('delivery.guarantee' = 'at-most-once') AS SELECT id FROM pageviews;\n")
    result = _check(tmp_path, sql)
    by_code = {(d.code, d.location.line): d for d in result.diagnostics}
    assert sorted(by_code) == [("DSF-E032", 9)]  # a Kafka stream takes exactly-once (kafka/transactions.py)
    result = _check(tmp_path, "\n".join(sql.splitlines()[:8]) + "\n")
    assert result.diagnostics == []
    assert {q.fqn.rsplit(".", 1)[-1]: q.delivery_guarantee for q in result.project.queries} == {
        "s": "exactly-once", "s2": "at-least-once", "c": "exactly-once", "v": "exactly-once", "t": "exactly-once"}


def test_query_takes_one_output_format(tmp_path) -> None:
    root = make_project(tmp_path, {"stores/kafka.yml": STORES, "sql/src.sql": PAGEVIEWS})
    shown = CliRunner().invoke(cli, ["-C", str(root), "query", "SELECT 1", "--json", "--csv"])
    assert shown.exit_code == 2 and "--json and --csv exclude each other" in shown.output


def test_query_reads_views_of_one_place(tmp_path) -> None:
    sql = ("CREATE MATERIALIZED VIEW in_pg WITH ('store' = 'pg') AS SELECT id FROM pageviews;\n"
           "CREATE MATERIALIZED VIEW in_sqlite AS SELECT id FROM pageviews;\n")
    project = load_project(make_project(tmp_path, {"stores/kafka.yml": STORES, "sql/src.sql": PAGEVIEWS,
                                                   "sql/q.sql": sql}))
    with pytest.raises(DsflowError) as err:
        adhoc.view_query(project, "SELECT a.id FROM in_pg a JOIN in_sqlite b ON a.id = b.id")
    assert err.value.code == "DSF-E793" and "pg/analytics_db" in err.value.message and "sqlite" in err.value.message


def test_views_are_not_read_by_continuous_queries(tmp_path) -> None:
    sql = ("CREATE MATERIALIZED VIEW v WITH ('store' = 'pg') AS SELECT id, userid FROM pageviews;\n"
           "CREATE STREAM from_view AS SELECT userid FROM v;\n")
    found = [(d.code, d.location.line, d.message) for d in _check(tmp_path, sql).diagnostics]
    assert found == [("DSF-E144", 2, "'analytics.public.v' is a materialized view; continuous queries cannot "
                                     "read views")]
    project = load_project(make_project(tmp_path, {"stores/kafka.yml": STORES, "sql/src.sql": PAGEVIEWS,
                                                   "sql/q.sql": sql.splitlines()[0] + "\n"}))
    with pytest.raises(DsflowError) as err:
        adhoc.follow_query(project, "SELECT userid FROM v")
    assert err.value.code == "DSF-E720" and "query it without --follow" in err.value.hint


CONFIG_WITH_VIEW_STORE = """\
name: viewstore
default:
  database: analytics
  schema: public
  store: kafka_main
  view_store: {view_store}
default_environment: dev
environments:
  dev:
    vars: {{bootstrap: 127.0.0.1:9092}}
"""


def test_default_view_store_from_dsflow_yml(tmp_path) -> None:
    sql = ("CREATE MATERIALIZED VIEW by_default AS SELECT id FROM pageviews;\n"
           "CREATE MATERIALIZED VIEW kept_local WITH ('store' = 'sqlite') AS SELECT id FROM pageviews;\n")
    files = {"stores/kafka.yml": STORES, "sql/src.sql": PAGEVIEWS, "sql/q.sql": sql}
    project = load_project(make_project(tmp_path / "a", {**files,
                                                         "dsflow.yml": CONFIG_WITH_VIEW_STORE.format(view_store="pg")}))
    assert [(r.name, r.store) for r in project.relations if r.kind == "materialized_view"] == [
        ("by_default", "pg"), ("kept_local", "")]
    result = check_project(make_project(tmp_path / "b",
                                        {**files, "dsflow.yml": CONFIG_WITH_VIEW_STORE.format(view_store="lake")}))
    assert [(d.code, d.location.line, d.message) for d in result.diagnostics] == [
        ("DSF-E140", 1, "the materialized view 'analytics.public.by_default' cannot be kept in the filesystem store "
                        "'lake' (default.view_store in dsflow.yml)")]
