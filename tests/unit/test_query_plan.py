"""The typed query plan (sql/plan.py): one project with a query of each recognised shape, lowered by `lower`; its
shape, columns, sources, typed tree and the parts lowered as queries of their own; and the Spark translator reading
the plan without parsing a query's SQL again (lowering is the one place it is parsed after loading). Pure: no
broker, no Spark."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dsflow.adapters.spark import translate
from dsflow.core.model import Project
from dsflow.load.project import load_project
from dsflow.sql.plan import QueryPlan, lower
from support.projects import make_project

SOURCES = """\
CREATE STREAM views (id BIGINT, ts TIMESTAMP(3), userid VARCHAR, pageid VARCHAR, tags ARRAY<VARCHAR>,
  attrs MAP<VARCHAR, VARCHAR>) WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE STREAM clicks (cid BIGINT, cts TIMESTAMP(3), userid VARCHAR) WITH ('value.format' = 'json', 'timestamp' = 'cts');
CREATE CHANGELOG users (userid VARCHAR, region VARCHAR, PRIMARY KEY (userid)) WITH ('value.format' = 'json');
CREATE CHANGELOG pages (pageid VARCHAR, title VARCHAR, PRIMARY KEY (pageid)) WITH ('value.format' = 'json');
CREATE CHANGELOG orders (oid BIGINT, userid VARCHAR, amount BIGINT, PRIMARY KEY (oid)) WITH ('value.format' = 'json');
"""
QUERIES = """\
CREATE STREAM proj AS SELECT v.userid, v.tags[1] AS first_tag, v.attrs['k'] AS k FROM views v WHERE v.id > 0;
CREATE CHANGELOG agg AS SELECT userid, COUNT(*) AS n FROM views GROUP BY userid;
CREATE CHANGELOG win AS SELECT userid, window_start, window_end, COUNT(*) AS n
  FROM TUMBLE(views, SIZE 10 SECONDS) GROUP BY userid, window_start, window_end;
CREATE STREAM ij AS SELECT v.id, c.cid FROM views v JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid;
CREATE STREAM fj AS SELECT v.id, c.cid FROM views v FULL JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid;
CREATE STREAM tj AS SELECT v.id, u.region FROM views v JOIN users u ON v.userid = u.userid;
CREATE STREAM chain AS SELECT v.id, u.region, g.title FROM views v JOIN users u ON v.userid = u.userid
  JOIN pages g ON v.pageid = g.pageid;
CREATE STREAM un AS SELECT userid FROM views UNION ALL SELECT userid FROM clicks;
CREATE CHANGELOG latest AS SELECT userid, id FROM
  (SELECT *, ROW_NUMBER() OVER (PARTITION BY userid ORDER BY ts DESC) AS r FROM views) WHERE r = 1;
CREATE STREAM ov AS SELECT userid,
  SUM(id) OVER (PARTITION BY userid ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s FROM views;
CREATE STREAM nest AS SELECT c.cid, w.n FROM clicks c
  JOIN (SELECT COUNT(*) AS n, window_end AS ends FROM TUMBLE(views, SIZE 10 SECONDS)
        GROUP BY window_start, window_end) w
  ON c.cid = w.n WHERE c.cts BETWEEN w.ends AND w.ends + INTERVAL '10' SECOND;
CREATE CHANGELOG stack AS SELECT q.region, MAX(q.n) AS top FROM
  (SELECT u.region, u.userid, COUNT(*) AS n FROM users u GROUP BY u.region, u.userid) q GROUP BY q.region;
CREATE CHANGELOG cj AS SELECT o.oid, u.region, o.amount FROM orders o JOIN users u ON o.userid = u.userid;
CREATE STREAM checked
  CONSTRAINT positive EXPECT (id > 0) ON VIOLATION DROP ROW
  AS SELECT id, userid FROM views;
"""
SHAPES = {"proj": "projection", "agg": "aggregation", "win": "aggregation", "ij": "interval_join",
          "fj": "interval_join", "tj": "temporal_join", "chain": "join_chain", "un": "union", "latest": "top_n",
          "ov": "over", "nest": "nested", "stack": "stacked", "cj": "changelog_join", "checked": "projection"}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    return load_project(make_project(tmp_path_factory.mktemp("plan"), {"sql/sources.sql": SOURCES,
                                                                       "sql/q.sql": QUERIES}))


@pytest.fixture(scope="module")
def plans(project) -> dict[str, QueryPlan]:
    return {q.fqn.rsplit(".", 1)[1]: lower(q, project) for q in project.queries}


def test_each_query_is_lowered_to_its_recognised_shape(plans):
    assert {name: plan.shape for name, plan in plans.items()} == SHAPES


def test_a_plan_carries_its_columns_sources_and_typed_tree(plans, project):
    proj = plans["proj"]
    assert [(c.name, c.type) for c in proj.columns] == [("userid", "VARCHAR"), ("first_tag", "VARCHAR"),
                                                         ("k", "VARCHAR")]
    assert [(s.relation, s.alias) for s in proj.sources] == [("analytics.public.views", "v")]
    assert proj.typed and proj.tree.sql(dialect="spark") == lower(proj.query).tree.sql(dialect="spark")
    bases = [b.this.type.this for b in proj.tree.find_all(exp.Bracket)]
    assert bases == [exp.DType.ARRAY, exp.DType.MAP]
    assert lower(proj.query).typed is False and all(
        b.this.type is None for b in lower(proj.query).tree.find_all(exp.Bracket))  # no project: untyped
    assert not plans["agg"].typed and plans["agg"].tree.find(exp.Column).type is None  # no subscript: untyped
    assert (plans["ij"].join_sides, plans["fj"].join_sides, plans["chain"].join_sides) == (("",), ("FULL",), ("", ""))


def test_select_is_a_copy_so_a_translator_cannot_change_the_plan(plans):
    plan = plans["agg"]
    before = plan.tree.sql()
    plan.select().set("where", exp.Where(this=exp.false()))
    assert plan.tree.sql() == before


def test_the_window_each_source_is_read_with(plans):
    def kinds(name: str) -> list[str | None]:
        return [w.kind if w is not None else None for w in plans[name].source_windows]

    assert kinds("win") == ["tumble"] and kinds("agg") == [None]
    assert kinds("ij") == [None, None]  # a window over an interval join is over its rows (sql/windowed_join.py)
    assert kinds("nest") == [None, "tumble"]  # the stream, then the windowed subquery's source


def test_unions_subqueries_and_stacked_aggregations_are_lowered_as_queries_of_their_own(plans):
    union = plans["un"]
    assert [b.shape for b in union.branches] == ["projection", "projection"]
    assert [[s.alias for s in b.sources] for b in union.branches] == [["views"], ["clicks"]]
    assert all(isinstance(b.tree, exp.Select) for b in union.branches)
    nest = plans["nest"]
    (inner,) = nest.nested
    assert inner.shape == "aggregation" and inner.query.output_mode == "append"
    assert inner.window is not None and inner.window.kind == "tumble" and nest.nested_plan(
        nest.query.nested[0].name.upper()) == (nest.query.nested[0], inner)
    stacked = plans["stack"].stacked
    assert stacked is not None and stacked.shape == "aggregation" and stacked.query.output_mode == "update"
    assert stacked.query.key_columns == ("region", "userid") and stacked.query.stacked is None


def test_expectation_conditions_are_parsed_once_with_the_query(plans):
    (condition,) = plans["checked"].conditions
    assert condition.selects[0].sql() == "id > 0"


def test_the_translator_reads_the_plan_and_never_parses_a_query(plans, project, monkeypatch):
    """After lowering, translating every shape parses no SELECT (only the translator's own Spark fragments:
    the bounds of interval joins, type names); and query_spec lowers each query once."""
    parsed: list[str] = []

    def recording(real):
        return lambda sql, *args, **kwargs: parsed.append(sql) or real(sql, *args, **kwargs)

    monkeypatch.setattr(sqlglot, "parse_one", recording(sqlglot.parse_one))
    monkeypatch.setattr(sqlglot, "parse", recording(sqlglot.parse))
    for plan in plans.values():
        translate.spark_tree(plan, project)
        translate.source_specs(project, plan)
        translate.retract_spec(project, plan)
        translate.top_n_spec(project, plan)
        translate.over_spec(project, plan)
        translate.chain_spec(project, plan)
        translate.expectation_specs(plan)
        translate.stacked_spec(project, plan, translate._over_views, translate.changelog_join_spec)
    assert parsed and not [text for text in parsed if "SELECT" in text.upper() or "FROM" in text.upper()]

    lowered: list[str] = []
    monkeypatch.setattr(translate, "lower", lambda query, p=None: lowered.append(query.fqn) or lower(query, p))
    for query in project.queries:
        translate.query_spec(project, query, "v1", "/tmp/cp", "/tmp/status")
    assert lowered == [q.fqn for q in project.queries]
