"""Aggregates with FILTER (WHERE ...) in validate: accepted on COUNT/SUM/MIN/MAX/AVG/COUNT(DISTINCT)/MAX_BY/MIN_BY
(rewritten into a CASE around the aggregate's input, so Spark and the retracting stages see plain aggregates), and
refused at its file:line:col with DSF-E166 on anything else. Pure: tests/integration/test_sql_filter.py runs them."""

from __future__ import annotations

import pytest

from dsflow.adapters.spark.translate import query_spec
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = ("CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, dt BIGINT, channel VARCHAR)\n"
           "  WITH ('value.format' = 'json', 'timestamp' = 'dt');\n")


def spark_sql(tmp_path, select: str) -> str:
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": select}))
    return query_spec(project, project.queries[0], "v1", "/tmp/checkpoint", "/tmp/status").select_sql


@pytest.mark.parametrize(("call", "spark"), [
    ("COUNT(*) FILTER (WHERE price < 10)", "COUNT(CASE WHEN `bids`.`price` < 10 THEN 1 END)"),
    ("COUNT(bidder) FILTER (WHERE price < 10)", "COUNT(CASE WHEN `bids`.`price` < 10 THEN `bids`.`bidder` END)"),
    ("COUNT(DISTINCT bidder) FILTER (WHERE channel = 'app')",
     "SIZE(COLLECT_SET(CASE WHEN `bids`.`channel` = 'app' THEN `bids`.`bidder` END))"),
    ("SUM(price) FILTER (WHERE bidder > 1 AND price < 9)",
     "SUM(CASE WHEN `bids`.`bidder` > 1 AND `bids`.`price` < 9 THEN `bids`.`price` END)"),
    ("MAX_BY(bidder, price) FILTER (WHERE channel <> 'web')",
     "MAX_BY(`bids`.`bidder`, CASE WHEN `bids`.`channel` <> 'web' THEN `bids`.`price` END)"),
])
def test_a_filtered_aggregate_is_a_case_around_its_input(tmp_path, call, spark):
    sql = spark_sql(tmp_path, f"CREATE CHANGELOG a AS SELECT auction, {call} AS v FROM bids GROUP BY auction;")
    assert f"{spark} AS `v`" in sql


def test_filters_in_a_window_keep_the_column_type(tmp_path):
    sql = ("CREATE CHANGELOG w AS SELECT window_start, window_end, COUNT(*) FILTER (WHERE price < 10) AS cheap,\n"
           "  AVG(price) FILTER (WHERE price < 10) AS a FROM TUMBLE(bids, SIZE 10 SECONDS)\n"
           "  GROUP BY window_start, window_end;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    types = {c.name: c.type for c in project.relation("analytics.public.w").columns}
    assert (types["cheap"], types["a"]) == ("BIGINT", "DOUBLE")


@pytest.mark.parametrize(("call", "col"), [
    ("UPPER(channel) FILTER (WHERE price < 10)", 6),
    ("COUNT(*) FILTER (WHERE MAX(price) > 10)", 6),
])
def test_a_filter_on_anything_else_is_refused_at_its_place(tmp_path, call, col):
    sql = f"CREATE CHANGELOG a AS\n  SELECT auction, MAX(price) AS top,\n     {call} AS v FROM bids GROUP BY auction;\n"
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    found = [(d.code, d.location.line, d.location.col) for d in check_project(root).diagnostics]
    assert found == [("DSF-E166", 3, col)]
