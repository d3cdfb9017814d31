"""Loading changelog queries and temporal joins: what they resolve to, and the diagnostics (DSF-E130..E132)
for shapes that are not supported, with their locations. Pure: no broker, no Spark.
"""

from __future__ import annotations

from dsflow.adapters.spark.translate import spark_select
from dsflow.core.model import TemporalJoin
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = """\
CREATE STREAM pageviews (id BIGINT, ts BIGINT, userid VARCHAR, region VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, region VARCHAR, PRIMARY KEY (userid))
  WITH ('value.format' = 'json');
CREATE CHANGELOG accounts (org VARCHAR, userid VARCHAR, plan VARCHAR, PRIMARY KEY (org, userid))
  WITH ('value.format' = 'json');
"""


def problems(tmp_path, sql: str) -> list[tuple[str, int, int]]:
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).diagnostics
    return [(d.code, d.location.line, d.location.col) for d in found]


def test_changelog_queries_resolve_to_their_delete_handling_and_join(tmp_path):
    sql = ("CREATE CHANGELOG eu_users AS SELECT userid, name FROM users WHERE region = 'eu';\n"
           "CREATE STREAM user_changes AS SELECT userid, name FROM users;\n"
           "CREATE STREAM enriched AS SELECT p.id, a.plan FROM pageviews p LEFT JOIN accounts a\n"
           "  ON a.userid = p.userid AND p.region = a.org;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    queries = {q.fqn.rsplit(".", 1)[-1]: q for q in project.queries}
    assert (queries["eu_users"].deletes, queries["user_changes"].deletes) == ("emit", "drop")
    assert "COALESCE((`users`.`region` = 'eu'), FALSE) AND NOT users.__deleted AS __keep" in \
        spark_select(queries["eu_users"])
    assert queries["enriched"].temporal_join == TemporalJoin(stream="p", changelog="a", side="left",
                                                             stream_keys=("region", "userid"),
                                                             changelog_keys=("org", "userid"))
    assert queries["enriched"].stateful and queries["enriched"].output_mode == "append"


def test_aggregating_a_changelog_validates_and_e130_a_window_over_it(tmp_path):
    assert problems(tmp_path, "\nCREATE CHANGELOG per_region AS\n  SELECT region, COUNT(*) AS n FROM users "
                              "GROUP BY region;") == []  # with retractions (tests/e2e/test_sql_retract.py)
    assert problems(tmp_path, "\nCREATE CHANGELOG per_minute AS\n  SELECT window_start, window_end, COUNT(*) AS n "
                              "FROM TUMBLE(users, SIZE 1 MINUTE) GROUP BY window_start, window_end;") == \
        [("DSF-E130", 3, 62)]


def test_e131_temporal_join_shapes(tmp_path):
    sql = ("CREATE STREAM a AS SELECT u.name, p.id FROM users u JOIN pageviews p ON u.userid = p.userid;\n"
           "CREATE STREAM b AS SELECT p.id FROM pageviews p FULL JOIN users u ON p.userid = u.userid;\n"
           "CREATE STREAM c AS SELECT p.id FROM pageviews p JOIN users u WITHIN 5 SECONDS ON p.userid = u.userid;\n")
    found = problems(tmp_path, sql)  # two changelogs joined: tests/unit/test_changelog_join_stages.py (DSF-E190..E192)
    assert [code for code, _, _ in found] == ["DSF-E131"] * 3
    assert [line for _, line, _ in found] == [1, 2, 3]


def test_e132_temporal_join_must_be_on_the_whole_primary_key(tmp_path):
    sql = ("CREATE STREAM a AS SELECT p.id FROM pageviews p JOIN accounts c ON p.userid = c.userid;\n"
           "CREATE STREAM b AS SELECT p.id FROM pageviews p JOIN users u ON p.userid = u.userid AND p.id > 3;\n"
           "CREATE STREAM c AS SELECT p.id FROM pageviews p JOIN users u ON p.region = u.region;\n")
    found = problems(tmp_path, sql)
    assert [(code, line) for code, line, _ in found] == [("DSF-E132", 1), ("DSF-E132", 2), ("DSF-E132", 3)]
