"""Aggregations and ROW_NUMBER over a regular join of two streams (sql/keyed_join.py) and a GROUP BY over an
aggregating subquery (sql/stacked.py): what validates, how it translates, what is refused at its place. Pure: no
broker, no Spark (tests/integration/test_sql_changelog_aggregates.py runs them against DuckDB, and
tests/integration/test_nexmark_published.py runs Nexmark q4 and q9)."""

from __future__ import annotations

from pathlib import Path

from dsflow.adapters.spark.translate import query_spec
from dsflow.core.resources import project_resources
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = """\
CREATE STREAM auction (id BIGINT, category BIGINT, t BIGINT, expires BIGINT) WITH ('value.format' = 'json');
CREATE STREAM bid (auction BIGINT, bidder BIGINT, price BIGINT, t BIGINT) WITH ('value.format' = 'json');
CREATE STREAM person (id BIGINT, name VARCHAR) WITH ('value.format' = 'json');
"""
BEST = ("CREATE CHANGELOG best AS SELECT A.id, MAX(B.price) AS top FROM auction A JOIN bid B\n"
        "  ON A.id = B.auction AND B.t BETWEEN A.t AND A.expires GROUP BY A.id;\n")
AVERAGE = ("CREATE CHANGELOG average AS SELECT Q.category, AVG(Q.final) AS final FROM (SELECT MAX(B.price) AS\n"
           "  final, A.category FROM auction A, bid B WHERE A.id = B.auction GROUP BY A.id, A.category) Q\n"
           "  GROUP BY Q.category;\n")
WINNER = ("CREATE CHANGELOG winner AS SELECT id, category, price FROM (SELECT A.*, B.price, ROW_NUMBER() OVER\n"
          "  (PARTITION BY A.id ORDER BY B.price DESC) AS rn FROM auction A, bid B WHERE A.id = B.auction)\n"
          "  WHERE rn = 1;\n")


def _found(tmp_path: Path, sql: str) -> list[tuple[str, int, int]]:
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    return [(d.code, d.location.line, d.location.col) for d in check_project(root).diagnostics]


def test_aggregated_ranked_and_stacked_joins_of_streams_validate_and_translate(tmp_path):
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": BEST + AVERAGE + WINNER})
    assert [d.code for d in check_project(root).diagnostics] == ["DSF-W001"] * 3  # each join's state grows
    project = load_project(root)
    queries = {q.fqn.rsplit(".", 1)[1]: q for q in project.queries}
    for name in ("best", "winner"):
        query = queries[name]
        join = query.changelog_join
        assert (join.streams, join.left_keys, join.right_keys, join.keyed_by_left) == (True, ("id",), ("auction",),
                                                                                      False)
        spec = query_spec(project, query, "v", "/tmp/c", "/tmp/s")
        assert spec.changelog_join.streams and spec.changelog_join.left_pk == ["__partition", "__offset"]
        assert all(s.keep_position and s.watermark_delay is None for s in spec.sources)
        assert (spec.retract is not None) == (name == "best") and (spec.top_n is not None) == (name == "winner")
        assert query.key_columns == ("id",) and query.regular_joins
    best = query_spec(project, queries["best"], "v", "/tmp/c", "/tmp/s")
    assert "COALESCE((`b`.`t` BETWEEN `a`.`t` AND `a`.`expires`), FALSE) AND __cj.__alive AS __keep" \
        in best.select_sql  # ON's bound is a filter of the joined rows
    average = queries["average"]
    assert (average.key_columns, average.output_mode, average.changelog_join) == (("category",), "update", None)
    assert average.stacked.key_columns == ("__group0", "category") and average.stacked.changelog_join.streams
    spec = query_spec(project, average, "v", "/tmp/c", "/tmp/s")
    assert spec.stacked.view == "__stacked_analytics_public_average" and spec.stacked.changelog_join is not None
    assert spec.select_sql.startswith("SELECT TO_JSON(ARRAY(CAST(q.__group0 AS STRING), CAST(q.category AS "
                                      "STRING))) AS __pk, q.__offset AS __offset, NOT q.__deleted AS __keep")
    assert "FROM __stacked_analytics_public_average AS q" in spec.select_sql
    resources = {str(r.address): r for r in project_resources(project)}
    assert "MAX(`b`.`price`)" in resources["query.analytics.public.average"].data["stacked"]["select_sql"]


def test_a_ranking_or_an_aggregation_of_three_streams_is_refused_at_the_third(tmp_path):
    sql = ("CREATE CHANGELOG c AS SELECT A.id, COUNT(*) AS n FROM auction A JOIN bid B ON A.id = B.auction\n"
           "  JOIN person P ON P.id = A.id GROUP BY A.id;\n")
    assert _found(tmp_path, sql) == [("DSF-E045", 2, 8)]


def test_an_aggregating_subquery_must_be_aggregated_by_the_query_around_it(tmp_path):
    sql = ("CREATE CHANGELOG c AS SELECT Q.category FROM (SELECT A.category, COUNT(*) AS n FROM auction A\n"
           "  GROUP BY A.category) Q;\n")
    assert _found(tmp_path, sql) == [("DSF-E045", 1, 54)]
    nested = ("CREATE CHANGELOG c AS SELECT Q.category, SUM(Q.n) AS s FROM (SELECT category, COUNT(*) AS n FROM\n"
              "  (SELECT * FROM auction) X GROUP BY category) Q GROUP BY Q.category;\n")
    assert _found(tmp_path, nested) == [("DSF-E045", 1, 69)]


def test_an_aggregated_join_of_streams_is_a_changelog_not_a_stream(tmp_path):
    sql = "CREATE STREAM s AS SELECT A.id, COUNT(*) AS n FROM auction A JOIN bid B ON A.id = B.auction GROUP BY A.id;\n"
    assert [code for code, *_ in _found(tmp_path, sql)] == ["DSF-E046"]


def test_a_ranking_of_another_join_is_refused_at_the_join(tmp_path):
    """ROW_NUMBER ranks a regular join of two streams only: over an interval join, DSF-E045 at its JOIN."""
    sql = ("CREATE CHANGELOG c AS SELECT id, price FROM (SELECT A.id, B.price, ROW_NUMBER() OVER (PARTITION BY A.id\n"
           "  ORDER BY B.price DESC) AS rn FROM auction A JOIN bid B WITHIN 1 HOUR ON A.id = B.auction) WHERE rn = 1;")
    assert _found(tmp_path, sql) == [("DSF-E045", 2, 52)]


def test_a_ranked_join_of_streams_into_a_stream_is_refused_with_the_changelog_it_makes(tmp_path):
    sql = WINNER.replace("CREATE CHANGELOG winner", "CREATE STREAM winner")
    assert [code for code, *_ in _found(tmp_path, sql)] == ["DSF-E187"]
