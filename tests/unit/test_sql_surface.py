"""SQL that parses but would mean nothing (or something else) in dsflow is refused at validate with its own code
and place (DSF-E150..E155), or honoured: an inline PRIMARY KEY and FOR SYSTEM_TIME AS OF a stream column.
Array subscripts are rewritten for Spark to count from 1. Pure: no broker, no Spark.
"""

from __future__ import annotations

from dsflow.adapters.spark.translate import source_specs, spark_select
from dsflow.load.project import check_project, load_project
from dsflow.sql.plan import lower
from support.projects import make_project

SOURCES = """\
CREATE STREAM pageviews (id BIGINT, ts BIGINT, seen TIMESTAMP, userid VARCHAR, tags ARRAY<VARCHAR>,
  attrs MAP<VARCHAR, VARCHAR>) WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, PRIMARY KEY (userid)) WITH ('value.format' = 'json');
"""


def problems(tmp_path, sql: str) -> list[tuple[str, int, int]]:
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).diagnostics
    return [(d.code, d.location.line, d.location.col) for d in found]


def codes(tmp_path, sql: str) -> list[str]:
    return [code for code, _, _ in problems(tmp_path, sql)]


def test_create_or_replace_and_if_not_exists_are_refused_with_their_place(tmp_path):
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": (
        "CREATE OR REPLACE STREAM a AS SELECT id FROM pageviews;\n"
        "CREATE STREAM IF NOT EXISTS b (id BIGINT) WITH ('value.format' = 'json');\n"
        "CREATE CHANGELOG IF NOT EXISTS c AS SELECT userid, name FROM users;\n")})).diagnostics
    assert [(d.code, d.location.file, d.location.line, d.location.col) for d in found] == [
        ("DSF-E150", "sql/q.sql", 1, 1), ("DSF-E151", "sql/q.sql", 2, 1), ("DSF-E151", "sql/q.sql", 3, 1)]
    assert "plan" in found[0].hint and "replace" in found[0].hint


def test_not_null_and_other_column_constraints_are_refused_at_the_column(tmp_path):
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": (
        "CREATE STREAM s (\n  id BIGINT NOT NULL,\n  name VARCHAR DEFAULT 'x',\n  note VARCHAR COMMENT 'kept'\n)"
        " WITH ('value.format' = 'json');\n")})).diagnostics
    assert [(d.code, d.location.line, d.location.col) for d in found] == [("DSF-E152", 2, 3), ("DSF-E152", 3, 3)]
    assert "NOT NULL" in found[0].message and "WHERE id IS NOT NULL" in found[0].hint


def test_an_inline_primary_key_keys_the_changelog(tmp_path):
    sql = "CREATE CHANGELOG plans (plan VARCHAR PRIMARY KEY, price BIGINT) WITH ('value.format' = 'json');\n"
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    assert project.relation("analytics.public.plans").primary_key == ("plan",)


def test_select_distinct_is_refused(tmp_path):
    assert problems(tmp_path, "CREATE STREAM d AS\n  SELECT DISTINCT userid FROM pageviews;\n") == \
        [("DSF-E153", 2, 19)]
    assert codes(tmp_path, "CREATE CHANGELOG d AS SELECT DISTINCT userid FROM pageviews;\n") == ["DSF-E153"]


def test_the_hint_for_distinct_works_a_group_by_without_aggregates_into_a_changelog(tmp_path):
    assert codes(tmp_path, "CREATE CHANGELOG d AS SELECT userid FROM pageviews GROUP BY userid;\n") == []


def test_a_cte_is_refused_as_a_cte_not_as_an_unknown_relation(tmp_path):
    # a CTE that projects and filters one relation is inlined (tests/integration/test_sql_breadth_from.py); one that
    # aggregates is not, and is reported as a CTE
    sql = ("CREATE CHANGELOG c AS\n  WITH recent AS (SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid)\n"
           "  SELECT userid FROM recent;\n")
    assert problems(tmp_path, sql) == [("DSF-E173", 2, 8)]
    insert = ("CREATE STREAM sink (id BIGINT) WITH ('value.format' = 'json');\n"
              "INSERT INTO sink WITH r AS (SELECT id FROM pageviews) SELECT id FROM r;\n")
    assert codes(tmp_path, insert) == []
    nested = "CREATE STREAM c AS SELECT id FROM (WITH r AS (SELECT id FROM pageviews) SELECT id FROM r) s;\n"
    assert codes(tmp_path, nested) == ["DSF-E154"]
    # a relation the CTE reads that does not exist is reported as such; the CTE's own name never is
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": (
        "CREATE STREAM c AS WITH r AS (SELECT id FROM nowhere) SELECT id FROM r;\n")})).diagnostics
    assert [(d.code, d.message) for d in found] == [("DSF-E040", "unknown relation 'nowhere'")]


def test_for_system_time_as_of_a_stream_column_sets_the_stream_event_time(tmp_path):
    sql = ("CREATE STREAM enriched AS SELECT p.id, u.name FROM pageviews p\n"
           "  JOIN users FOR SYSTEM_TIME AS OF p.seen AS u ON p.userid = u.userid;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    query = project.queries[0]
    assert [(s.alias, s.timestamp) for s in query.sources] == [("p", "seen"), ("u", None)]
    assert "SYSTEM_TIME" not in query.select_sql and "AS OF" not in query.select_sql
    assert query.temporal_join is not None
    # what the Spark driver is given: the stream's event time is `seen`, not the relation's 'timestamp' (ts)
    assert [s.event_time for s in source_specs(project, lower(query, project))] == ["`seen`", "__kafka_ts"]


def test_for_system_time_as_of_the_declared_event_time_changes_nothing(tmp_path):
    plain = "CREATE STREAM e AS SELECT p.id, u.name FROM pageviews p JOIN users u ON p.userid = u.userid;\n"
    timed = ("CREATE STREAM e AS SELECT p.id, u.name FROM pageviews p\n"
             "  JOIN users FOR SYSTEM_TIME AS OF p.ts AS u ON p.userid = u.userid;\n")
    loaded = [load_project(make_project(tmp_path / name, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).queries[0]
              for name, sql in (("plain", plain), ("timed", timed))]
    assert loaded[0].select_sql == loaded[1].select_sql
    assert [s.timestamp for s in loaded[1].sources] == ["ts", None]


def test_for_system_time_as_of_anything_else_is_refused(tmp_path):
    join = "CREATE STREAM e AS SELECT p.id, u.name FROM pageviews p\n  JOIN users FOR {} AS u ON p.userid = u.userid;\n"
    assert problems(tmp_path, join.format("SYSTEM_TIME AS OF u.name")) == [("DSF-E155", 2, 36)]
    assert codes(tmp_path, join.format("SYSTEM_TIME AS OF p.nope")) == ["DSF-E155"]
    assert codes(tmp_path, join.format("SYSTEM_TIME AS OF NOW()")) == ["DSF-E155"]  # PROCTIME(): test_views.py
    assert codes(tmp_path, join.format("VERSION AS OF 3")) == ["DSF-E155"]
    conflicting = ("CREATE STREAM e AS SELECT p.id, u.name FROM pageviews WITH ('timestamp' = 'ts') AS p\n"
                   "  JOIN users FOR SYSTEM_TIME AS OF p.seen AS u ON p.userid = u.userid;\n")
    assert codes(tmp_path, conflicting) == ["DSF-E155"]
    alone = "CREATE STREAM e AS SELECT p.id FROM pageviews FOR SYSTEM_TIME AS OF p.seen AS p;\n"
    assert codes(tmp_path, alone) == ["DSF-E155"]


def test_array_subscripts_count_from_one_in_spark_and_map_subscripts_stay(tmp_path):
    sql = ("CREATE STREAM firsts AS SELECT p.tags[1] AS first_tag, p.tags[p.id] AS nth,\n"
           "  ELEMENT_AT(p.tags, 2) AS second_tag, p.attrs['k'] AS k, ELEMENT_AT(p.attrs, 'j') AS j "
           "FROM pageviews p;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    query = project.queries[0]
    assert [(c.name, c.type) for c in query.output_columns][:3] == [
        ("first_tag", "VARCHAR"), ("nth", "VARCHAR"), ("second_tag", "VARCHAR")]
    assert "`p`.`tags`[1]" in query.select_sql  # the plan shows the SQL as written
    spark = spark_select(query, project)
    assert "GET(`p`.`tags`, 0) AS `first_tag`" in spark
    assert "GET(`p`.`tags`, (`p`.`id`) - 1) AS `nth`" in spark
    assert "GET(`p`.`tags`, 1) AS `second_tag`" in spark
    assert "`p`.`attrs`['k'] AS `k`" in spark and "ELEMENT_AT(`p`.`attrs`, 'j') AS `j`" in spark
