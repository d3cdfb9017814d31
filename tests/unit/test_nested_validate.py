"""Joins and aggregations in one query (issue 46, item 2's first bullet) in validate and plan: a windowed GROUP BY
over an interval join (sql/windowed_join.py), and windowed aggregations read as subqueries or CTEs (sql/nested.py;
Nexmark q8 in dsflow's window spelling), accepted with append mode and the real relations as sources, or refused
at their file:line with the reason. Pure: no broker, no Spark (tests/integration/test_sql_nested.py runs them)."""

from __future__ import annotations

import json

import pytest

from dsflow.adapters.spark.translate import query_spec
from dsflow.cli.render import plan_text
from dsflow.core.plan import Action, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = """\
CREATE STREAM views (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE STREAM clicks (cid BIGINT, cts BIGINT, userid VARCHAR, target VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'cts');
CREATE STREAM person (id BIGINT, name VARCHAR, dt BIGINT) WITH ('value.format' = 'json', 'timestamp' = 'dt');
CREATE STREAM auction (id BIGINT, seller BIGINT, dt BIGINT) WITH ('value.format' = 'json', 'timestamp' = 'dt');
CREATE CHANGELOG users (userid VARCHAR, region VARCHAR, PRIMARY KEY (userid)) WITH ('value.format' = 'json');
CREATE STREAM bid (auction BIGINT, price BIGINT, dt TIMESTAMP(3)) WITH ('value.format' = 'json', 'timestamp' = 'dt');
"""
JOIN = "views v JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid"
Q7 = """\
CREATE STREAM q7 AS
  SELECT B.auction, B.price, B.dt
  FROM bid B
  JOIN (SELECT MAX(price) AS top, window_end AS ends
        FROM TUMBLE(bid, SIZE 10 SECONDS) GROUP BY window_start, window_end) B1
  ON B.price = B1.top
  WHERE {bound};
"""
Q5 = """\
CREATE STREAM q5 AS
  SELECT A.seller, A.num
  FROM (SELECT seller, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
        FROM HOP(auction, SIZE 10 SECONDS, ADVANCE BY 2 SECONDS) GROUP BY seller, window_start, window_end) A
  JOIN (SELECT MAX(C.num) AS maxn, C.starttime, C.endtime
        FROM (SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
              FROM HOP(auction, SIZE 10 SECONDS, ADVANCE BY 2 SECONDS) GROUP BY seller, window_start, window_end) C
        GROUP BY C.starttime, C.endtime) M
  ON A.starttime = M.starttime AND A.endtime = M.endtime AND A.num >= M.maxn;
"""
Q8 = """\
CREATE STREAM q8 AS
  SELECT P.id, P.name, P.starttime
  FROM (SELECT id, name, window_start AS starttime, window_end AS endtime
        FROM TUMBLE(person, SIZE 10 SECONDS) GROUP BY id, name, window_start, window_end) P
  JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
        FROM TUMBLE(auction, SIZE 10 SECONDS) GROUP BY seller, window_start, window_end) A
  ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
"""
COUNTS = ("(SELECT seller, COUNT(*) AS n, window_start AS ws, window_end AS we "
          "FROM TUMBLE(auction, SIZE 10 SECONDS) GROUP BY seller, window_start, window_end)")


def problems(tmp_path, sql: str) -> list[tuple[str, int, str]]:
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    return [(d.code, d.location.line, d.message) for d in check_project(root).diagnostics]


def loaded(tmp_path, sql: str):
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    return project, project.queries[-1]


@pytest.mark.parametrize("sql", [
    "CREATE CHANGELOG w AS SELECT window_start, window_end, v.userid, COUNT(*) AS n, MAX(c.target) AS t\n"
    "  FROM TUMBLE(views, SIZE 10 SECONDS) AS v JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid\n"
    "  GROUP BY window_start, window_end, v.userid;",
    "CREATE MATERIALIZED VIEW w AS WITH j AS (SELECT v.userid, c.target FROM "
    "views v LEFT JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid WHERE v.pageid <> 'x')\n"
    "  SELECT window_start, window_end, userid, COUNT(target) AS n FROM HOP(j, SIZE 10 SECONDS, ADVANCE BY 5 SECONDS)"
    "\n  GROUP BY window_start, window_end, userid HAVING COUNT(*) > 1;",
])
def test_a_windowed_group_by_over_an_interval_join_is_appended(tmp_path, sql):
    project, query = loaded(tmp_path, sql)
    assert (query.output_mode, query.key_columns, query.join_within) == \
        ("append", ("window_start", "window_end", "userid"), "5 seconds")
    assert [s.relation for s in query.sources] == ["analytics.public.views", "analytics.public.clicks"]
    spec = query_spec(project, query, "v1", "/tmp/cp", "/tmp/status")
    assert spec.sink.output_mode == "append" and "GROUP BY WINDOW(v.__ts, '10000 milliseconds', " in spec.select_sql
    assert "c.__ts BETWEEN v.__ts - INTERVAL '5000' MILLISECONDS" in spec.select_sql
    assert spec.sources[0].window is None and spec.sources[1].window is None  # computed over the joined rows
    assert spec.sources[1].watermark_delay == "5000 milliseconds"


@pytest.mark.parametrize(("sql", "keys"), [
    (f"CREATE CHANGELOG w AS SELECT v.userid, COUNT(*) AS n FROM {JOIN} GROUP BY v.userid;", ("userid",)),
    (f"CREATE CHANGELOG w AS SELECT COUNT(*) AS n FROM {JOIN};", ()),
    (f"CREATE CHANGELOG w AS SELECT userid, COUNT(target) AS n FROM (SELECT v.userid, c.target FROM {JOIN}\n"
     "  WHERE v.pageid <> 'x') j GROUP BY userid HAVING COUNT(*) > 1;", ("userid",)),
])
def test_an_aggregation_of_an_interval_join_without_a_window_is_updated(tmp_path, sql, keys):
    project, query = loaded(tmp_path, sql)
    assert (query.output_mode, query.key_columns, query.join_within, query.nested) == ("update", keys, "5 seconds", ())
    assert [s.relation for s in query.sources] == ["analytics.public.views", "analytics.public.clicks"]
    spec = query_spec(project, query, "v1", "/tmp/cp", "/tmp/status")
    assert spec.sink.output_mode == "update" and "c.__ts BETWEEN v.__ts" in spec.select_sql


@pytest.mark.parametrize(("sql", "line", "words"), [
    ("CREATE CHANGELOG w AS SELECT v.userid, COUNT(*) AS n\n  FROM views v LEFT JOIN clicks c WITHIN 5 SECONDS "
     "ON v.userid = c.userid GROUP BY v.userid;", 1, "an aggregation without a window over a LEFT join of two streams "
     "cannot run: Spark runs an outer stream-stream join only in append mode"),
    ("CREATE CHANGELOG w AS SELECT window_start, window_end, COUNT(*) AS n\n"
     "  FROM SESSION(views, GAP 10 SECONDS) v JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid\n"
     "  GROUP BY window_start, window_end;", 2, "a SESSION window over a join is not supported yet"),
    ("CREATE CHANGELOG w AS SELECT window_start, window_end, COUNT(*) AS n\n"
     "  FROM TUMBLE(views, SIZE 10 SECONDS) v FULL JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid\n"
     "  GROUP BY window_start, window_end;", 2, "a window over a FULL join is not supported"),
    ("CREATE CHANGELOG w AS SELECT window_start, window_end, COUNT(*) AS n\n"
     "  FROM TUMBLE(views, SIZE 10 SECONDS) v JOIN users u ON v.userid = u.userid\n"
     "  GROUP BY window_start, window_end;", 2, "a window over a join needs an interval join of two streams"),
    ("CREATE CHANGELOG w AS SELECT window_start, window_end, COUNT(*) AS n\n  FROM TUMBLE(views, SIZE 10 SECONDS) v "
     "JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid\n  JOIN clicks d WITHIN 5 SECONDS ON v.userid = d.userid\n"
     "  GROUP BY window_start, window_end;", 2, "a window over a join of more than two relations"),
    ("CREATE CHANGELOG w AS\n  SELECT v.userid, COUNT(*) AS n FROM views v JOIN users u ON v.userid = u.userid "
     "GROUP BY v.userid;", 1, "aggregating the result of a temporal join is not supported yet"),
])
def test_other_aggregations_of_a_join_are_refused_with_the_reason(tmp_path, sql, line, words):
    found = problems(tmp_path, sql)
    assert [(code, at) for code, at, _ in found] == [("DSF-E045", line)], found
    assert words in found[0][2]


def test_a_join_of_two_windowed_subqueries_is_one_query_over_the_real_relations(tmp_path):
    project, query = loaded(tmp_path, Q8)
    assert [s.relation for s in query.sources] == ["analytics.public.person", "analytics.public.auction"]
    assert (query.output_mode, query.key_columns, query.stateful) == ("append", (), True)
    assert [(n.alias, n.window_columns, n.window.source) for n in query.nested] == \
        [("P", ("starttime", "endtime"), "person"), ("A", ("starttime", "endtime"), "auction")]
    resources = {str(r.address): r for r in project_resources(project)}
    assert {str(a) for a in resources["query.analytics.public.q8"].depends_on} >= \
        {"relation.analytics.public.person", "relation.analytics.public.auction"}
    assert not [a for a in resources if "__nested" in a]
    plan = make_plan(project.name, project.environment, list(resources.values()), State(), PlanOptions())
    creates = [c for c in plan.changes if c.action is Action.CREATE and c.address.startswith("query.")]
    assert [c.address for c in creates] == ["query.analytics.public.q8"]
    assert "query.analytics.public.q8" in plan_text(json.loads(plan.model_dump_json()))
    spec = query_spec(project, query, "v1", "/tmp/cp", "/tmp/status")
    assert [s.window for s in spec.sources] == [["10000 milliseconds"] * 2] * 2
    assert "AND p.__window = a.__window" in spec.select_sql and "CAST(NULL AS STRING) AS __key" in spec.select_sql


def test_a_changed_subquery_changes_the_query(tmp_path):
    first = {str(r.address): r for r in project_resources(loaded(tmp_path / "a", Q8)[0])}
    second = {str(r.address): r for r in project_resources(loaded(tmp_path / "b", Q8.replace(
        "FROM TUMBLE(auction, SIZE 10 SECONDS)", "FROM TUMBLE(auction, SIZE 10 SECONDS) WHERE auction.id > 0"))[0])}
    key = "query.analytics.public.q8"
    assert first[key].data_hash != second[key].data_hash


@pytest.mark.parametrize("sql", [
    f"CREATE CHANGELOG m AS SELECT ws, we, MAX(n) AS top, COUNT(*) AS sellers FROM {COUNTS} c GROUP BY ws, we;",
    f"CREATE CHANGELOG m AS WITH c AS {COUNTS}\n  SELECT c.ws, c.we, MAX(c.n) AS top, COUNT(*) AS sellers FROM c "
    "GROUP BY c.ws, c.we;",
])
def test_an_aggregate_of_a_windowed_aggregate_is_keyed_by_its_window(tmp_path, sql):
    project, query = loaded(tmp_path, sql)
    assert (query.output_mode, query.key_columns) == ("append", ("ws", "we"))
    assert [s.relation for s in query.sources] == ["analytics.public.auction"]
    assert project.relation("analytics.public.m").primary_key == ("ws", "we")
    spec = query_spec(project, query, "v1", "/tmp/cp", "/tmp/status")
    assert spec.select_sql.endswith("GROUP BY `c`.`ws`, `c`.`we`, c.__window")


@pytest.mark.parametrize(("sql", "line", "words"), [
    (f"CREATE CHANGELOG m AS\n  SELECT seller, MAX(n) AS top FROM {COUNTS} c GROUP BY seller;", 2,
     "must hold its window columns (ws, we)"),
    ("CREATE STREAM m AS SELECT v.id FROM\n  (SELECT id FROM views) v;", 2,
     "subqueries in continuous queries are not supported yet"),  # neither a window nor a join
    (f"CREATE STREAM m AS SELECT c.seller FROM {COUNTS} c\n  JOIN TUMBLE(person, SIZE 10 SECONDS) p "
     "ON c.seller = p.id;", 2, "supported only as a stream joined with a subquery that aggregates a window"),
    (f"CREATE STREAM m AS SELECT c.seller FROM {COUNTS} c\n  LEFT JOIN person p ON c.seller = p.id "
     "AND p.dt BETWEEN c.ws AND c.we;", 2, "must be an INNER JOIN"),
    ("CREATE STREAM m AS SELECT c.userid FROM (SELECT userid, window_end AS we FROM TUMBLE(views, SIZE 10 SECONDS)"
     " GROUP BY userid, window_start, window_end) c\n  JOIN users u ON c.userid = u.userid;", 2,
     "a changelog joined with a windowed subquery is not supported"),
    (f"CREATE STREAM m AS SELECT c.seller FROM {COUNTS} c\n  LEFT JOIN {COUNTS} d ON c.seller = d.seller;", 2,
     "a join of two subqueries must be an INNER JOIN"),
    (f"CREATE STREAM m AS SELECT c.seller FROM {COUNTS} c\n  JOIN {COUNTS} d ON c.seller = d.seller "
     "AND c.ws = d.ws;", 2, "must equate their window_start and window_end"),
    (f"CREATE STREAM m AS SELECT c.seller FROM {COUNTS} c\n  JOIN {COUNTS.replace('10 SECONDS', '20 SECONDS')} d "
     "ON c.seller = d.seller AND c.ws = d.ws AND c.we = d.we;", 2, "windows of the same kind and size"),
    (f"CREATE CHANGELOG m AS SELECT c.ws, c.we, COUNT(*) AS n FROM {COUNTS} c\n  JOIN {COUNTS} d "
     "ON c.seller = d.seller AND c.ws = d.ws AND c.we = d.we GROUP BY c.ws, c.we;", 2,
     "aggregating a join of subqueries is not supported yet"),
    (f"CREATE STREAM m AS SELECT j.userid FROM (SELECT v.userid FROM {JOIN}) j\n  JOIN {COUNTS} c ON j.userid = "
     "c.seller;", 1, "the subquery 'j' joins two streams"),
    (f"CREATE STREAM m AS SELECT c.seller FROM {COUNTS} c\n  JOIN (SELECT v.userid FROM {JOIN}) j ON j.userid = "
     "c.seller;", 2, "the subquery 'j' joins two streams"),
    (f"CREATE STREAM m AS WITH j AS (SELECT v.userid FROM {JOIN})\n  SELECT j.userid FROM j JOIN person p "
     "ON j.userid = p.name;", 2, "the CTE 'j' joins: it is inlined only where it is the one relation"),
])
def test_other_subqueries_are_refused_with_the_reason(tmp_path, sql, line, words):
    found = problems(tmp_path, sql)
    assert [(code, at) for code, at, _ in found][:1] == [("DSF-E045" if "CTE" not in words else "DSF-E173", line)], \
        found
    assert words in found[0][2]


@pytest.mark.parametrize(("bound", "found"), [
    ("B.dt BETWEEN B1.ends - INTERVAL '10' SECOND AND B1.ends", (-10_000, 0)),  # Nexmark q7
    ("B.dt > B1.ends - INTERVAL '12' SECOND AND B.auction > 0 AND B1.ends + INTERVAL '1' MINUTE >= B.dt",
     (-12_000, 60_000)),
])
def test_a_stream_joined_with_a_windowed_subquery_is_bounded_by_its_window(tmp_path, bound, found):
    """Nexmark q7's shape: the stream's event time between the subquery's window columns (plus or minus intervals),
    taken as milliseconds from the window's end; Spark's bound (on the view's __ts and the window_time, which keep
    the watermarks) is added beside the query's own conditions."""
    project, query = loaded(tmp_path, Q7.replace("{bound}", bound))
    assert [(s.relation, s.alias) for s in query.sources] == [("analytics.public.bid", "b"),
                                                              ("analytics.public.bid", "bid")]
    assert (query.output_mode, query.key_columns) == ("append", ())
    (nested,) = query.nested
    assert (nested.window_columns, nested.stream_bound) == (("__group0", "ends"), found)
    spec = query_spec(project, query, "v1", "/tmp/cp", "/tmp/status")
    assert [s.window for s in spec.sources] == [None, ["10000 milliseconds"] * 2]
    assert "SELECT *, WINDOW_TIME(__window) AS __wt FROM" in spec.select_sql
    assert (f"b.__ts BETWEEN b1.__wt + INTERVAL '1' MICROSECOND + INTERVAL '{found[0]}' MILLISECONDS AND b1.__wt + "
            f"INTERVAL '1' MICROSECOND + INTERVAL '{found[1]}' MILLISECONDS") in spec.select_sql


@pytest.mark.parametrize(("bound", "words"), [
    ("B.auction > 0", "needs the event time of 'b' (dt) bounded below and above"),
    ("B.dt >= B1.ends - INTERVAL '10' SECOND", "bounded below and above"),  # no upper bound
    ("B.dt BETWEEN B1.ends - INTERVAL '10' SECOND AND B1.ends OR B.auction = 1", "bounded below"),  # not ANDed
])
def test_a_stream_joined_with_a_windowed_subquery_without_a_bound_is_refused(tmp_path, bound, words):
    found = problems(tmp_path, Q7.replace("{bound}", bound))
    assert [(code, line) for code, line, _ in found] == [("DSF-E295", 4)], found
    assert words in found[0][2]


def test_a_subquery_in_a_subquery_is_grouped_by_its_window(tmp_path):
    """Nexmark q5's shape: the MAX of a windowed count in a subquery (whose GROUP BY seller is not selected: it is
    selected under a hidden name), joined on the window with a windowed count."""
    project, query = loaded(tmp_path, Q5)
    assert [s.relation for s in query.sources] == ["analytics.public.auction"] * 2
    first, second = query.nested
    assert (second.alias, second.window_columns, second.window, second.key_columns) == \
        ("M", ("starttime", "endtime"), first.window, ("starttime", "endtime"))
    (inner,) = second.nested
    assert inner.alias == "C" and inner.key_columns == ("__group0", "starttime", "endtime")
    spec = query_spec(project, query, "v1", "/tmp/cp", "/tmp/status")
    assert [s.window for s in spec.sources] == [["10000 milliseconds", "2000 milliseconds"]] * 2
    assert "GROUP BY `c`.`starttime`, `c`.`endtime`, c.__window" in spec.select_sql
    assert "c.__window AS __window" in spec.select_sql and spec.select_sql.endswith("AND a.__window = m.__window")
