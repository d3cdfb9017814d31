"""Every diagnostic the loader can emit: its code, where (file:line:col) and its hint.

Pure: projects are small {filename: content} folders; nothing talks to a broker or Spark.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.cli import cli, main
from dsflow.adapters.spark.translate import query_spec
from dsflow.core.plan import make_plan
from dsflow.core.resources import project_resources
from dsflow.core.secrets import Redactor
from dsflow.core.state import State
from dsflow.errors import Diagnostic, Location, ProjectError
from dsflow.load.project import check_project, load_project
from support.projects import PAGEVIEWS, make_project

SOURCES = {"sql/sources.sql": PAGEVIEWS}


def diagnostics(tmp_path: Path, files: dict[str, str | None], **kwargs) -> list[Diagnostic]:
    return check_project(make_project(tmp_path, files), **kwargs).diagnostics


def only(found: list[Diagnostic], code: str) -> Diagnostic:
    """The one diagnostic with `code`; fails with every diagnostic shown otherwise."""
    matching = [d for d in found if d.code == code]
    assert len(matching) == 1, "\n".join(str(d) for d in found)
    return matching[0]


def at(diagnostic: Diagnostic, file: str, line: int, col: int = 0) -> bool:
    return diagnostic.location == Location(file, line, col)


def test_valid_project_has_no_diagnostics(tmp_path):
    result = check_project(make_project(tmp_path, SOURCES))
    assert result.diagnostics == []
    assert result.project is not None
    assert [r.fqn for r in result.project.relations] == ["analytics.public.pageviews"]


# --- files, templates and syntax -----------------------------------------------------------------


def test_e001_yaml_syntax_error(tmp_path):
    found = diagnostics(tmp_path, {**SOURCES, "security/roles.yml": "roles:\n  - name: a\n   grants: []\n"})
    d = only(found, "DSF-E001")
    assert at(d, "security/roles.yml", 3, 4)
    assert "YAML syntax error" in d.message
    assert d.hint == "check indentation and quoting"


def test_e002_sql_syntax_error_does_not_hide_other_statements(tmp_path):
    sql = PAGEVIEWS + "\nCREATE STREAM broken (id BIGINT WITH ('value.format' = 'json');\n"
    found = diagnostics(tmp_path, {"sql/sources.sql": sql, "sql/q.sql": "CREATE STREAM f AS SELECT id FROM pageviews;"})
    d = only(found, "DSF-E002")
    assert d.location.file == "sql/sources.sql" and d.location.line == 12 and d.location.col > 0
    assert "SQL syntax error" in d.message
    assert "docs/project.md" in d.hint
    assert [x.code for x in found] == ["DSF-E002"]  # pageviews (same file) still resolved for sql/q.sql


def test_e002_unclosed_quote_is_a_token_error(tmp_path):
    found = diagnostics(tmp_path, {"sql/sources.sql": "CREATE STREAM s (id BIGINT)\nWITH ('value.format' = 'json);\n"})
    d = only(found, "DSF-E002")
    assert d.location.file == "sql/sources.sql" and d.location.line == 2
    assert d.hint == "check for an unclosed quote or comment"


def test_e003_template_syntax_error(tmp_path):
    found = diagnostics(tmp_path, {"sql/sources.sql": PAGEVIEWS + "-- {{ var('x' }}\n"})
    d = only(found, "DSF-E003")
    assert at(d, "sql/sources.sql", 11)
    assert "template syntax error" in d.message
    assert d.hint == "check the {{ }} and {% %} blocks"


def test_e004_undefined_var_and_env_var(tmp_path):
    found = diagnostics(tmp_path, {
        "sql/sources.sql": PAGEVIEWS + "\n-- {{ var('region') }}\n",
        "stores/secret.yml": "\n\n{{ env_var('DSFLOW_TEST_UNSET') }}\n",
    }, environ={})
    var_error, env_error = sorted((d for d in found if d.code == "DSF-E004"), key=lambda d: d.location.file)
    assert at(var_error, "sql/sources.sql", 12)
    assert "variable 'region' is not set" in var_error.message
    assert "environments.<env>.vars" in var_error.hint
    assert at(env_error, "stores/secret.yml", 3)
    assert "environment variable 'DSFLOW_TEST_UNSET' is not set" in env_error.message
    assert "export it" in env_error.hint


def test_e005_unsupported_statement(tmp_path):
    found = diagnostics(tmp_path, {"sql/sources.sql": PAGEVIEWS + "\nDROP STREAM pageviews;\n"})
    d = only(found, "DSF-E005")
    assert at(d, "sql/sources.sql", 12, 1)
    assert d.message == "unsupported statement: DROP STREAM ..."
    assert "CREATE STREAM" in d.hint


def test_e006_unreadable_file(tmp_path):
    root = make_project(tmp_path, SOURCES)
    (root / "sql" / "binary.sql").write_bytes(b"\xff\xfe\x00garbage")
    d = only(check_project(root).diagnostics, "DSF-E006")
    assert d.location == Location("sql/binary.sql")
    assert "cannot read file" in d.message


# --- YAML shapes -----------------------------------------------------------------------------------


def test_e010_unknown_yaml_key_points_at_the_key(tmp_path):
    config = "name: p\nruntime:\n  spark_master: local[1]\n  sparkconf:\n    a: b\n"
    d = only(diagnostics(tmp_path, {"dsflow.yml": config}), "DSF-E010")
    assert at(d, "dsflow.yml", 4, 3)  # the key, not its (mapping) value on line 5
    assert d.message == "unknown key 'sparkconf' at runtime.sparkconf"
    assert "check its spelling" in d.hint


def test_e011_missing_yaml_key(tmp_path):
    store = "stores:\n  - name: kafka_main\n    bootstrap_servers: localhost:9092\n"
    d = only(diagnostics(tmp_path, {"stores/kafka.yml": store}), "DSF-E011")
    assert at(d, "stores/kafka.yml", 2, 5)
    assert d.message == "missing required key 'type' at stores.0.type"
    assert d.hint.startswith("add it; see docs/project.md\n")  # the store it refused is unknown: folded under it
    assert "1 error(s) that follow from this one are not shown (unknown store 'kafka_main')" in d.hint


def test_e012_invalid_yaml_value(tmp_path):
    files = {"gen.yml": "datagen:\n  - name: g\n    relation: pageviews\n    rate: fast\n", "list.yml": "- a\n- b\n"}
    found = [d for d in diagnostics(tmp_path, {**SOURCES, **files}) if d.code == "DSF-E012"]
    rate, not_a_mapping = found
    assert at(rate, "gen.yml", 4, 11)
    assert "datagen.0.rate" in rate.message
    assert "allowed values" in rate.hint
    assert at(not_a_mapping, "list.yml", 1, 1)
    assert not_a_mapping.message == "a project YAML file must be a mapping"
    assert "stores, databases, roles, datagen" in not_a_mapping.hint


def test_e013_no_project_file(tmp_path):
    result = check_project(make_project(tmp_path, {"dsflow.yml": None}))
    assert result.project is None
    [d] = result.diagnostics
    assert d.code == "DSF-E013"
    assert d.location.file.endswith("dsflow.yml") and d.location.line == 0
    assert "dsflow init" in d.hint


def test_e014_unknown_environment(tmp_path):
    config = "name: p\nenvironments:\n  dev: {}\n  prod: {}\n"
    result = check_project(make_project(tmp_path, {"dsflow.yml": config}), environment="prd")
    [d] = result.diagnostics
    assert d.code == "DSF-E014"
    assert d.location == Location("dsflow.yml")
    assert d.message == "unknown environment 'prd'"
    assert d.hint == "did you mean 'prod'?"


# --- names ------------------------------------------------------------------------------------------


def test_e020_duplicate_definitions(tmp_path):
    found = diagnostics(tmp_path, {
        "sql/a.sql": PAGEVIEWS, "sql/b.sql": "\n" + PAGEVIEWS,
        "stores/other.yml": "stores:\n  - name: kafka_main\n    type: kafka\n    bootstrap_servers: x:9092\n",
    })
    relation, store = sorted((d for d in found if d.code == "DSF-E020"), key=lambda d: d.location)
    assert at(relation, "sql/b.sql", 2, 15)
    assert relation.message == "relation 'analytics.public.pageviews' is defined twice"
    assert relation.hint == "first defined at sql/a.sql:1:15"
    assert at(store, "stores/other.yml", 2, 5)
    assert store.hint == "first defined at stores/kafka.yml:2:5"


def test_e021_unknown_store(tmp_path):
    sql = PAGEVIEWS.replace("'topic' = 'pageviews',", "'store' = 'kafka_mian',")
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E021")
    assert at(d, "sql/sources.sql", 7, 3)
    assert d.message == "unknown store 'kafka_mian' for 'analytics.public.pageviews'"
    assert d.hint == "did you mean 'kafka_main'?"


def test_e021_unknown_default_store(tmp_path):
    config = "name: p\ndefault:\n  store: kafak_main\nenvironments:\n  dev:\n    vars: {bootstrap: x:9092}\n"
    found = diagnostics(tmp_path, {"dsflow.yml": config, **SOURCES})
    default, relation = sorted((d for d in found if d.code == "DSF-E021"), key=lambda d: d.location)
    assert default.location == Location("dsflow.yml")
    assert default.message == "unknown default store 'kafak_main'"
    assert default.hint == "did you mean 'kafka_main'?"
    assert at(relation, "sql/sources.sql", 1, 15)  # pageviews names no store of its own


def test_e022_unknown_schema(tmp_path):
    sql = PAGEVIEWS.replace("CREATE STREAM pageviews (", "CREATE STREAM curatd.pageviews (")
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E022")
    assert at(d, "sql/sources.sql", 1, 15)  # where the qualified name starts
    assert d.message == "unknown database or schema 'analytics.curatd' for 'analytics.curatd.pageviews'"
    assert d.hint == "did you mean 'analytics.public'?"


# --- relation properties ---------------------------------------------------------------------------


def test_e030_missing_value_format(tmp_path):
    sql = PAGEVIEWS.replace("  'value.format' = 'json',\n", "")
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E030")
    assert at(d, "sql/sources.sql", 1, 15)
    assert "missing the required property 'value.format'" in d.message
    assert d.hint == "add 'value.format' = 'json' to its WITH clause"


def test_e031_unknown_property(tmp_path):
    sql = PAGEVIEWS.replace("'topic' =", "'topik' =")
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E031")
    assert at(d, "sql/sources.sql", 7, 3)
    assert d.message == "unknown property 'topik'"
    assert d.hint == "did you mean 'topic'?"


@pytest.mark.parametrize("sql, line, col, message, hint", [
    (PAGEVIEWS.replace("'json'", "'xml'"), 8, 3, "unsupported value.format 'xml'",
     "supported: json, avro, protobuf, string, long, int, double, bytes"),
    (PAGEVIEWS.replace("'topic' = 'pageviews'", "'topic.partitions' = 0"), 7, 3,
     "'topic.partitions' must be a positive integer, got '0'", "e.g. 'topic.partitions' = 1"),
    ("CREATE STREAM s WITH ('value.format' = 'json');", 1, 15, "stream 'analytics.public.s' declares no columns",
     "list the columns: CREATE STREAM name (col TYPE, ...) WITH (...)"),
    (PAGEVIEWS + "CREATE STREAM f WITH ('starting.position' = 'middle') AS SELECT id FROM pageviews;", 11, 23,
     "'starting.position' must be 'earliest' or 'latest', got 'middle'", "'starting.position' = 'earliest'"),
], ids=["value-format", "partitions", "no-columns", "starting-position"])
def test_e032_bad_property_value(tmp_path, sql, line, col, message, hint):
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E032")
    assert at(d, "sql/sources.sql", line, col)
    assert d.message == message
    assert d.hint == hint


USERS = "CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, PRIMARY KEY (userid)) WITH ('value.format' = 'json');\n"


@pytest.mark.parametrize("sql, line, col, message, hint", [
    ("CREATE CHANGELOG users (userid VARCHAR) WITH ('value.format' = 'json');", 1, 18,
     "changelog 'analytics.public.users' has no PRIMARY KEY", "add PRIMARY KEY (col, ...) to its column list"),
    (USERS.replace("CHANGELOG", "STREAM"), 1, 15,
     "stream 'analytics.public.users' cannot have a PRIMARY KEY", "declare it as CREATE CHANGELOG"),
    (USERS + "CREATE CHANGELOG names AS SELECT name FROM users;", 2, 18,
     "changelog 'analytics.public.names' needs its source's primary key columns in the SELECT",
     "select the key columns, or create a stream instead"),
], ids=["changelog-without-key", "stream-with-key", "ctas-drops-key"])
def test_e033_primary_key_problems(tmp_path, sql, line, col, message, hint):
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E033")
    assert at(d, "sql/sources.sql", line, col)
    assert d.message == message
    assert d.hint == hint


# --- queries ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("files, where, message", [
    ({"sql/q.sql": "CREATE STREAM f AS\nSELECT id\nFROM pageview;\n"}, ("sql/q.sql", 3, 6),
     "unknown relation 'pageview'"),
    ({"sql/q.sql": "INSERT INTO pagevews\nSELECT * FROM pageviews;\n"}, ("sql/q.sql", 1, 13),
     "INSERT INTO unknown relation 'pagevews'"),
    ({"gen.yml": "datagen:\n  - name: g\n    relation: pagevews\n"}, ("gen.yml", 2, 5),
     "datagen 'g' feeds unknown relation 'pagevews'"),
    ({"sql/q.sql": "CREATE STREAM f AS SELECT id FROM pageviews;\n"
                   "INSERT INTO f\nSELECT id FROM pagevews;\n"}, ("sql/q.sql", 3, 16),
     "unknown relation 'pagevews'"),
], ids=["from", "insert-into", "datagen", "insert-from"])
def test_e040_unknown_relation(tmp_path, files, where, message):
    d = only(diagnostics(tmp_path, {**SOURCES, **files}), "DSF-E040")
    assert at(d, *where)
    assert d.message == message
    assert d.hint == "did you mean 'pageviews'?"


def test_e040_a_name_of_another_schema_is_suggested_qualified(tmp_path):
    sql = ("CREATE STREAM curated.f AS SELECT id FROM pageviews;\n"
           "INSERT INTO f SELECT id FROM pageviews;\nINSERT INTO curated.f SELECT id FROM other;\n")
    databases = "databases:\n  - name: analytics\n    schemas: [public, curated]\n"
    found = [d for d in diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql, "databases.yml": databases})
             if d.code == "DSF-E040"]
    assert [(d.message, d.hint, d.location.line if d.location else None) for d in found] == [
        ("INSERT INTO unknown relation 'f'", "did you mean 'curated.f'? (the name exists in another schema)", 2),
        ("unknown relation 'other'", "known: f, pageviews", 3)]


def test_e040_unknown_alias(tmp_path):
    sql = "CREATE STREAM f AS\nSELECT p.id, x.userid\nFROM pageviews p;\n"
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}), "DSF-E040")
    assert at(d, "sql/q.sql", 2, 14)
    assert d.message == "unknown relation or alias 'x'"
    assert d.hint == "known: p, pageviews"


def test_e041_unknown_column(tmp_path):
    sql = "CREATE STREAM f AS\nSELECT id, pagid\nFROM pageviews;\n"
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}), "DSF-E041")
    assert at(d, "sql/q.sql", 2, 12)
    assert d.message == "unknown column 'pagid' in 'analytics.public.pageviews'"
    assert d.hint == "did you mean 'pageid'?"


def test_e041_unknown_primary_key_column(tmp_path):
    sql = USERS.replace("PRIMARY KEY (userid)", "PRIMARY KEY (user_id)")
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E041")
    assert at(d, "sql/sources.sql", 1, 18)
    assert d.message == "primary key column 'user_id' is not a column of 'analytics.public.users'"
    assert d.hint == "did you mean 'userid'?"


def test_e042_unknown_timestamp_column(tmp_path):
    sql = PAGEVIEWS.replace("'timestamp' = 'viewtime'", "'timestamp' = 'view_time'")
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E042")
    assert at(d, "sql/sources.sql", 9, 3)
    assert d.message == "timestamp column 'view_time' is not a column of 'analytics.public.pageviews'"
    assert d.hint == "did you mean 'viewtime'?"


def test_e043_insert_column_mismatch(tmp_path):
    sql = "CREATE STREAM f AS SELECT id, userid FROM pageviews;\n\nINSERT INTO f\nSELECT userid, id FROM pageviews;\n"
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}), "DSF-E043")
    assert at(d, "sql/q.sql", 3, 13)
    assert d.message == ("INSERT INTO 'analytics.public.f' selects (userid, id) but the relation has (id, userid)")
    assert "in order, with the same names" in d.hint


def test_insert_names_an_unnamed_column_by_its_place(tmp_path):
    """SQL's INSERT maps by position: a computed column without AS (Nexmark q10), or one with a name the target has
    not (Nexmark q20's `B.dateTime` into `bid_dateTime`, twice `dateTime` in its SELECT), takes the target's name; a
    column named as another column of the target (a swap) is still DSF-E043, and more columns than the target has
    too."""
    sql = ("CREATE STREAM f (id BIGINT, shout VARCHAR, n BIGINT, at1 BIGINT, at2 BIGINT) WITH ('value.format' = "
           "'json');\nINSERT INTO f SELECT id, UPPER(userid), id + 1, viewtime, p.viewtime FROM pageviews p;\n")
    project = load_project(make_project(tmp_path, {**SOURCES, "sql/q.sql": sql}))
    spec = query_spec(project, project.queries[0], "v1", "/tmp/checkpoint", "/tmp/status")
    assert "UPPER(`p`.`userid`) AS `shout`, `p`.`id` + 1 AS `n`, `p`.`viewtime` AS `at1`, `p`.`viewtime` AS `at2`" \
        in spec.select_sql
    assert [c.name for c in project.queries[0].output_columns] == ["id", "shout", "n", "at1", "at2"]
    listed = "id, UPPER(userid), id + 1, viewtime, p.viewtime"
    for index, select in enumerate(("id, UPPER(userid), id + 1, viewtime, viewtime AS n",  # `n` is the third's
                                    "id, UPPER(userid), viewtime AS at1, id + 1, viewtime",  # a swap
                                    listed + ", id")):  # one column more
        wrong = sql.replace(listed, select)
        assert only(diagnostics(tmp_path / str(index), {**SOURCES, "sql/q.sql": wrong}), "DSF-E043")


def test_insert_stores_a_number_in_the_declared_type_of_its_column(tmp_path):
    """An INSERT's numeric column of another numeric type is cast to the declared one (SQL's store assignment, Nexmark
    q17's AVG into a BIGINT): the query's column is the declared type, Spark casts; other columns are left as they
    are."""
    sql = ("CREATE STREAM f (id BIGINT, half BIGINT, shout VARCHAR) WITH ('value.format' = 'json');\n"
           "INSERT INTO f SELECT id, id / 2 AS half, UPPER(userid) AS shout FROM pageviews;\n")
    project = load_project(make_project(tmp_path, {**SOURCES, "sql/q.sql": sql}))
    query = project.queries[0]
    assert [(c.name, c.type) for c in query.output_columns] == [("id", "BIGINT"), ("half", "BIGINT"),
                                                                ("shout", "VARCHAR")]
    spec = query_spec(project, query, "v1", "/tmp/checkpoint", "/tmp/status")
    assert "CAST(`pageviews`.`id` / 2 AS BIGINT) AS `half`" in spec.select_sql
    assert "UPPER(`pageviews`.`userid`) AS `shout`" in spec.select_sql and spec.select_sql.count("CAST(") == 1


def test_e145_insert_into_a_view(tmp_path):
    sql = ("CREATE MATERIALIZED VIEW v AS SELECT id, userid FROM pageviews;\n\n"
           "INSERT INTO v\nSELECT id, userid FROM pageviews;\n")
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}), "DSF-E145")
    assert at(d, "sql/q.sql", 3, 13)
    assert d.message == ("INSERT INTO 'analytics.public.v': it is a materialized view, "
                         "which only its own query writes")


@pytest.mark.parametrize("sql, message, hint", [
    ("CREATE STREAM f AS\nSELECT id, UPPER(userid)\nFROM pageviews;\n", "every computed column needs a name",
     "add AS name to each expression in the SELECT"),
    ("CREATE STREAM f AS\nSELECT id, userid AS id\nFROM pageviews;\n", "column 'id' appears twice",
     "rename one of them"),
], ids=["unnamed", "duplicate"])
def test_e044_unnamed_or_duplicate_column(tmp_path, sql, message, hint):
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}), "DSF-E044")
    assert at(d, "sql/q.sql", 1, 15)
    assert d.message == message
    assert d.hint == hint


CLICKS = ("CREATE STREAM clicks (cid BIGINT, cts BIGINT, userid VARCHAR) "
          "WITH ('value.format' = 'json', 'timestamp' = 'cts');\n")


@pytest.mark.parametrize("sql, where, message, hint", [
    ("CREATE STREAM f AS\nSELECT a.id\nFROM pageviews a\nRIGHT JOIN clicks b WITHIN 1 MINUTE ON a.userid = b.userid;\n",
     (4, 7), "RIGHT JOIN is not supported", "swap the two relations and use LEFT JOIN"),
    ("CREATE STREAM f AS\nSELECT a.id\nFROM pageviews a\nJOIN clicks b ON a.userid = b.userid\n"
     "JOIN clicks c WITHIN 1 MINUTE ON c.cid = a.id;\n", (5, 1),
     "joins of streams with and without WITHIN in one query are not supported yet",
     "put WITHIN on every join of streams (interval joins, their state bounded by the watermark) or on none "
     "(regular joins, their state kept for ever); or write the first joins into a stream (CREATE STREAM ... AS "
     "SELECT), then join that stream in another query"),
    ("CREATE STREAM f AS\nSELECT a.id\nFROM pageviews a\nJOIN clicks b WITHIN 1 MINUTE ON a.id > b.cid;\n", (4, 1),
     "a join needs an equality between the two relations in ON", "e.g. ON a.userid = b.userid"),
    ("CREATE CHANGELOG f AS\nSELECT userid, STDDEV(id) AS s\nFROM pageviews\nGROUP BY userid;\n", (2, 16),
     "aggregate STDDEV(`pageviews`.`id`) is not supported yet",
     "supported: COUNT(*), COUNT(x), COUNT(DISTINCT x), SUM, MIN, MAX, AVG, MAX_BY(value, ordering), "
     "MIN_BY(value, ordering)"),
    ("CREATE STREAM f AS\nSELECT id FROM pageviews\nORDER BY id;\n", (3, 10),
     "ORDER BY in continuous queries are not supported yet", None),
], ids=["right-join", "join-with-and-without-within", "join-without-equality", "aggregate", "order-by"])
def test_e045_unsupported_construct(tmp_path, sql, where, message, hint):
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/clicks.sql": CLICKS, "sql/q.sql": sql}), "DSF-E045")
    assert (d.location.file, d.location.line) == ("sql/q.sql", where[0])
    assert d.message == message
    assert hint is None or d.hint == hint


@pytest.mark.parametrize("sql, message", [
    ("CREATE STREAM f AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;",
     "'analytics.public.f' aggregates, so its result is a changelog keyed by the GROUP BY columns, not a stream"),
    ("CREATE CHANGELOG f AS SELECT COUNT(*) AS n FROM pageviews GROUP BY userid;",
     "GROUP BY column 'userid' must be selected: it keys the result"),
    ("CREATE CHANGELOG f AS SELECT userid, pageid, COUNT(*) AS n FROM pageviews GROUP BY userid;",
     "column 'pageid' must be in GROUP BY or inside an aggregate"),
    ("CREATE CHANGELOG f AS SELECT window_start, window_end, COUNT(*) AS n\n"
     "FROM TUMBLE(pageviews, SIZE 10 SECONDS) GROUP BY window_start;",
     "a window needs GROUP BY window_start, window_end"),
    ("CREATE CHANGELOG f AS SELECT userid, COUNT(*) AS n FROM pageviews;",
     "column 'userid' must be inside an aggregate: without GROUP BY the query has one row over all records"),
], ids=["stream-aggregates", "key-not-selected", "loose-column", "window-not-grouped", "no-group-by-loose-column"])
def test_e046_query_shape_does_not_fit(tmp_path, sql, message):
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}), "DSF-E046")
    assert d.location.file == "sql/q.sql"
    assert d.message == message


def test_exactly_once_on_a_kafka_stream_is_accepted(tmp_path):
    """Kafka transactions record each batch id (adapters/kafka/transactions.py); DSF-E047 on a store without them:
    tests/unit/test_exactly_once_streams.py."""
    sql = "CREATE STREAM f WITH ('delivery.guarantee' = 'exactly-once') AS SELECT id FROM pageviews;\n"
    result = check_project(make_project(tmp_path, {**SOURCES, "sql/q.sql": sql}))
    assert result.diagnostics == []
    assert [q.delivery_guarantee for q in result.project.queries] == ["exactly-once"]


def test_exactly_once_is_accepted_for_changelogs_and_views(tmp_path):
    sql = ("CREATE CHANGELOG c WITH ('delivery.guarantee' = 'exactly-once') AS\n"
           "  SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;\n"
           "CREATE MATERIALIZED VIEW v WITH ('delivery.guarantee' = 'exactly-once') AS SELECT id FROM pageviews;\n")
    result = check_project(make_project(tmp_path, {**SOURCES, "sql/q.sql": sql}))
    assert result.diagnostics == []
    assert {q.fqn: q.delivery_guarantee for q in result.project.queries} == {
        "analytics.public.c": "exactly-once", "analytics.public.v": "exactly-once"}


def test_stateful_queries_resolve_to_keys_modes_and_windows(tmp_path):
    sql = ("CREATE CHANGELOG per_user AS SELECT userid, COUNT(*) AS n, COUNT(DISTINCT pageid) AS pages\n"
           "  FROM pageviews GROUP BY userid;\n"
           "CREATE CHANGELOG per_window WITH ('watermark.delay' = '30 seconds') AS\n"
           "  SELECT window_start, window_end, pageid, COUNT(*) AS n\n"
           "  FROM HOP(pageviews, SIZE 1 MINUTE, ADVANCE BY 10 SECONDS) GROUP BY window_start, window_end, pageid;\n"
           "CREATE STREAM joined AS SELECT p.id, c.cid FROM pageviews p LEFT JOIN clicks c WITHIN 5 MINUTES\n"
           "  ON p.userid = c.userid;\n"
           "CREATE MATERIALIZED VIEW by_page AS SELECT pageid, MAX(viewtime) AS last FROM pageviews GROUP BY pageid;\n")
    project = load_project(make_project(tmp_path, {**SOURCES, "sql/clicks.sql": CLICKS, "sql/q.sql": sql}))
    queries = {q.fqn.rsplit(".", 1)[-1]: q for q in project.queries}
    per_user, per_window, joined, by_page = (queries[n] for n in ("per_user", "per_window", "joined", "by_page"))
    assert (per_user.stateful, per_user.output_mode, per_user.key_columns) == (True, "update", ("userid",))
    assert project.relation("analytics.public.per_user").primary_key == ("userid",)
    assert [(c.name, c.type) for c in per_user.output_columns] == [("userid", "VARCHAR"), ("n", "BIGINT"),
                                                                   ("pages", "BIGINT")]
    assert per_window.window.model_dump() == {"kind": "hop", "source": "pageviews", "size": "1 minutes",
                                              "advance": "10 seconds", "processing_time": False}
    assert per_window.watermark_delay == "30 seconds"
    assert project.relation("analytics.public.per_window").primary_key == ("window_start", "window_end", "pageid")
    assert [c.type for c in per_window.output_columns][:2] == ["TIMESTAMP", "TIMESTAMP"]
    assert (joined.stateful, joined.output_mode, joined.join_within) == (True, "append", "5 minutes")
    assert [s.relation for s in joined.sources] == ["analytics.public.pageviews", "analytics.public.clicks"]
    view = project.relation("analytics.public.by_page")
    assert (view.kind, view.primary_key, by_page.statement) == ("materialized_view", ("pageid",), "mv")


def test_e050_cycle_between_queries(tmp_path):
    sql = "CREATE STREAM a AS SELECT id FROM b;\nCREATE STREAM b AS SELECT id FROM a;\n"
    found = [d for d in diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}) if d.code == "DSF-E050"]
    assert [(d.location.line, d.location.col) for d in found] == [(1, 35), (2, 35)]
    assert found[0].message == ("dependency cycle: 'analytics.public.a' reads 'analytics.public.b', "
                                "which depends on it")
    assert found[0].hint == "a query cannot read its own output, even indirectly"


def test_e050_cycle_through_insert(tmp_path):
    sql = ("CREATE STREAM a AS SELECT id, viewtime, userid, pageid FROM pageviews;\n"
           "INSERT INTO pageviews SELECT id, viewtime, userid, pageid FROM a;\n")
    d = only(diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}), "DSF-E050")
    assert at(d, "sql/q.sql", 1, 15)
    assert "analytics.public.a -> analytics.public.pageviews" in d.message
    assert d.hint == "a query cannot write, even indirectly, into a relation it reads"


# --- joins of streams without WITHIN (regular joins) ----------------------------------------------

BUYS = "CREATE STREAM buys (bid BIGINT, userid VARCHAR, pageid VARCHAR) WITH ('value.format' = 'json');\n"
REGULAR = ("CREATE STREAM pairs AS\nSELECT p.id, c.cid, c.userid\nFROM pageviews p\n"
           "JOIN clicks c ON p.userid = c.userid\nWHERE c.cid > 0;\n"
           "CREATE STREAM triples AS SELECT p.id, c.cid, b.bid FROM pageviews p\n"
           "  JOIN clicks c ON p.userid = c.userid\n"
           "  JOIN buys AS b ON b.pageid = p.pageid AND b.userid = c.userid;\n"
           "CREATE STREAM bounded AS SELECT p.id, c.cid FROM pageviews p, clicks c\n"
           "  WHERE p.userid = c.userid AND c.cts BETWEEN p.viewtime AND p.viewtime + 60000;\n")


def test_w001_a_regular_join_of_streams_runs_and_warns_that_its_state_grows(tmp_path):
    """An INNER join of streams ON an equality without WITHIN (two-way, and chained: Nexmark q3, q20, q23; and
    `FROM a, b WHERE a.k = b.k AND <a bound by columns>`, Nexmark q4's and q9's join, whose WHERE becomes its ON) is
    Spark's stream-stream inner join without a time bound: valid, with the warning DSF-W001 at its first join."""
    root = make_project(tmp_path, {**SOURCES, "sql/clicks.sql": CLICKS, "sql/buys.sql": BUYS, "sql/q.sql": REGULAR})
    found = check_project(root).diagnostics
    assert [(d.code, d.severity.value, d.location) for d in found] == [
        ("DSF-W001", "warning", Location("sql/q.sql", 4, 6)), ("DSF-W001", "warning", Location("sql/q.sql", 7, 8)),
        ("DSF-W001", "warning", Location("sql/q.sql", 9, 63))]
    assert found[0].message.startswith("a join of streams without WITHIN keeps every record of "
                                       "'analytics.public.pageviews' and 'analytics.public.clicks' in the query's "
                                       "state, for ever: the state grows without bound")
    assert "'analytics.public.buys'" in found[1].message
    assert "JOIN clicks AS c WITHIN 1 HOUR ON ..." in found[0].hint and "no state TTL" in found[0].hint
    project = load_project(root)
    bounded, pairs, triples = sorted(project.queries, key=lambda q: q.fqn)
    assert (pairs.stateful, pairs.output_mode, pairs.join_within, pairs.join_chain) == (True, "append", None, ())
    assert [j.stream for j in pairs.regular_joins] == ["c"] and [j.stream for j in triples.regular_joins] == ["c", "b"]
    for query in (pairs, triples, bounded):  # no event time, no watermark: no record is ever late
        spec = query_spec(project, query, "v1", "/tmp/checkpoint", "/tmp/status")
        assert [(s.event_time, s.watermark_delay) for s in spec.sources] == [(None, None)] * len(query.sources)
        assert ("BETWEEN" in spec.select_sql) == (query is bounded) and spec.chain is None and spec.temporal is None
    assert "JOIN __src2_analytics_public_triples AS b ON `b`.`pageid` = `p`.`pageid` AND `b`.`userid` = " \
           "`c`.`userid`" in query_spec(project, triples, "v1", "/tmp/c", "/tmp/s").select_sql
    assert "JOIN __src1_analytics_public_bounded AS c ON `p`.`userid` = `c`.`userid` AND `c`.`cts` BETWEEN " \
           "`p`.`viewtime` AND `p`.`viewtime` + 60000" in query_spec(project, bounded, "v1", "/c", "/s").select_sql
    resources = {str(r.address): r for r in project_resources(project)}
    assert resources["query.analytics.public.triples"].data["regular_joins"] == ["c", "b"]


def test_w001_is_printed_by_validate_and_plan_which_still_succeed(tmp_path):
    root = make_project(tmp_path, {**SOURCES, "sql/clicks.sql": CLICKS, "sql/buys.sql": BUYS, "sql/q.sql": REGULAR})
    validated = CliRunner().invoke(cli, ["-C", str(root), "validate"])
    assert validated.exit_code == 0, validated.output
    assert "sql/q.sql:4:6: warning DSF-W001: a join of streams without WITHIN" in validated.output
    assert validated.output.rstrip().endswith("No errors found; 3 warning(s).")
    planned = CliRunner().invoke(cli, ["-C", str(root), "plan", "--no-refresh"])
    assert planned.exit_code == 0, planned.output
    assert planned.stderr.count("warning DSF-W001") == 3 and "sql/q.sql:7:8: warning DSF-W001" in planned.stderr
    assert "query.analytics.public.triples" in planned.stdout


@pytest.mark.parametrize("join, where", [
    ("LEFT JOIN clicks c ON p.userid = c.userid", (4, 11)),
    ("FULL OUTER JOIN clicks c ON p.userid = c.userid", (4, 17)),
    ("JOIN clicks c ON p.userid = c.userid\nLEFT JOIN buys b ON b.userid = p.userid", (5, 11)),
], ids=["left", "full", "left-after-regular"])
def test_e199_an_outer_join_of_streams_without_within_is_refused(tmp_path, join, where):
    """Spark runs a LEFT or FULL stream-stream join only with a watermark and a time bound (it writes an unmatched
    row once the watermark passes the bound): without WITHIN it stays refused, with the two ways out."""
    sql = f"CREATE STREAM f AS\nSELECT p.id, c.cid\nFROM pageviews p\n{join};\n"
    found = diagnostics(tmp_path, {**SOURCES, "sql/clicks.sql": CLICKS, "sql/buys.sql": BUYS, "sql/q.sql": sql})
    d = only(found, "DSF-E199")
    assert len(found) == 1 and at(d, "sql/q.sql", *where)
    side = join.split("\n")[-1].split()[0]
    assert d.message.startswith(f"a {side} JOIN of two streams needs WITHIN: Spark writes a row that found no match")
    assert f"{side} JOIN b WITHIN 1 HOUR ON" in d.hint and "or join INNER without WITHIN" in d.hint


def test_a_changelog_after_a_regular_join_and_a_regular_join_into_a_changelog_are_refused(tmp_path):
    users = ("CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, PRIMARY KEY (userid)) "
             "WITH ('value.format' = 'json');\n")
    sql = ("CREATE STREAM f AS SELECT p.id FROM pageviews p JOIN clicks c ON p.userid = c.userid\n"
           "  JOIN users u ON u.userid = p.userid;\n"
           "CREATE CHANGELOG g AS SELECT p.id, c.cid FROM pageviews p JOIN clicks c ON p.userid = c.userid;\n")
    found = diagnostics(tmp_path, {**SOURCES, "sql/clicks.sql": CLICKS, "sql/users.sql": users, "sql/q.sql": sql})
    assert [(d.code, d.location.line) for d in found] == [("DSF-E045", 2), ("DSF-E046", 3)]
    assert "a changelog joined after a join of streams without WITHIN is not supported yet" in found[0].message
    assert "joins two streams, so its result is a stream" in found[1].message


# --- secrets, roles, generators ---------------------------------------------------------------------


def test_e060_clear_text_secret_in_store_yaml(tmp_path):
    store = ("stores:\n  - name: kafka_main\n    type: kafka\n    bootstrap_servers: x:9092\n"
             "    properties:\n      sasl.password: hunter2\n")
    d = only(diagnostics(tmp_path, {"stores/kafka.yml": store}), "DSF-E060")
    assert at(d, "stores/kafka.yml", 6, 22)
    assert d.message == ("secret 'sasl.password' of store 'kafka_main' is written in clear text: its name says it "
                         "is a secret")
    assert d.hint == \
        "use {{ env_var('KAFKA_MAIN_SASL_PASSWORD') }} for the secret (or the part of the value that is one)"
    assert "hunter2" not in str(d)


def test_e060_secret_property_in_sql(tmp_path):
    sql = PAGEVIEWS.replace("'topic' = 'pageviews',", "'kafka.topic.sasl.password' = 'hunter2',")
    d = only(diagnostics(tmp_path, {"sql/sources.sql": sql}), "DSF-E060")
    assert at(d, "sql/sources.sql", 7, 3)
    assert "looks like a secret written in SQL" in d.message
    assert "env_var" in d.hint


def test_e070_unknown_inherited_role(tmp_path):
    roles = "roles:\n  - name: analyst\n  - name: admin\n    inherits: [analyts]\n"
    d = only(diagnostics(tmp_path, {"security/roles.yml": roles}), "DSF-E070")
    assert at(d, "security/roles.yml", 3, 5)
    assert d.message == "role 'admin' inherits unknown role 'analyts'"
    assert d.hint == "did you mean 'analyst'?"


def test_e071_grant_on_unknown_object(tmp_path):
    roles = "roles:\n  - name: analyst\n    grants:\n      - privilege: SELECT\n        on: pagevews\n"
    d = only(diagnostics(tmp_path, {**SOURCES, "security/roles.yml": roles}), "DSF-E071")
    assert at(d, "security/roles.yml", 4, 9)
    assert d.message == "grant on unknown object 'pagevews'"
    assert "relation.analytics.public.pageviews" in d.hint


def test_e073_unknown_generator(tmp_path):
    gen = "datagen:\n  - name: g\n    relation: pageviews\n    generator: pagevews\n"
    d = only(diagnostics(tmp_path, {**SOURCES, "gen.yml": gen}), "DSF-E073")
    assert at(d, "gen.yml", 2, 5)
    assert d.message == "unknown generator 'pagevews'"
    assert d.hint == "did you mean 'pageviews'?"


# --- collect-then-raise, CLI ----------------------------------------------------------------------


BROKEN = {
    "sql/sources.sql": PAGEVIEWS.replace("'topic' =", "'topik' =").replace("'viewtime'", "'view_time'"),
    "sql/q.sql": ("CREATE STREAM f AS\nSELECT id, pagid\nFROM pageviews;\n\n"
                  "CREATE STREAM g AS SELECT id FROM pageview;\n"),
    "security/roles.yml": "roles:\n  - name: admin\n    inherits: [analyts]\n",
    "gen.yml": "datagen:\n  - name: g\n    relation: pageviews\n    generator: nope\n",
}
BROKEN_CODES = [("gen.yml", "DSF-E073"), ("security/roles.yml", "DSF-E070"), ("sql/q.sql", "DSF-E041"),
                ("sql/q.sql", "DSF-E040"), ("sql/sources.sql", "DSF-E031"), ("sql/sources.sql", "DSF-E042")]


def test_every_error_in_every_file_is_reported_at_once(tmp_path):
    result = check_project(make_project(tmp_path, BROKEN))
    assert [(d.location.file, d.code) for d in result.errors] == BROKEN_CODES
    assert result.diagnostics == sorted(result.diagnostics, key=lambda d: (d.location.file, d.location.line,
                                                                             d.location.col, d.code))


def test_load_project_raises_once_with_every_diagnostic(tmp_path):
    with pytest.raises(ProjectError) as caught:
        load_project(make_project(tmp_path, BROKEN))
    err = caught.value
    assert [(d.location.file, d.code) for d in err.diagnostics] == BROKEN_CODES
    assert err.code == "DSF-E073"
    assert err.message == "6 error(s) in project"
    assert "sql/q.sql:5:35: error DSF-E040: unknown relation 'pageview'" in str(err)


def test_cli_validate_prints_file_line_col_and_exits_1(tmp_path):
    root = make_project(tmp_path, BROKEN)
    result = CliRunner().invoke(cli, ["-C", str(root), "validate"])
    assert result.exit_code == 1
    assert "sql/q.sql:2:12: error DSF-E041: unknown column 'pagid' in 'analytics.public.pageviews'" in result.output
    assert "  hint: did you mean 'pageid'?" in result.output
    assert "gen.yml:2:5: error DSF-E073" in result.output
    assert result.output.rstrip().endswith("6 error(s) found.")
    assert "Traceback" not in result.output


def test_cli_validate_valid_project_exits_0(tmp_path):
    result = CliRunner().invoke(cli, ["-C", str(make_project(tmp_path, SOURCES)), "validate"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "No problems found."


def test_cli_validate_json(tmp_path):
    root = make_project(tmp_path, BROKEN)
    result = CliRunner().invoke(cli, ["-C", str(root), "validate", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["valid"] is False
    assert len(report["diagnostics"]) == 6
    assert report["diagnostics"][2] == {
        "code": "DSF-E041", "severity": "error", "message": "unknown column 'pagid' in 'analytics.public.pageviews'",
        "file": "sql/q.sql", "line": 2, "col": 12, "hint": "did you mean 'pageid'?",
    }


def test_cli_command_on_broken_project_shows_diagnostics_without_traceback(tmp_path, monkeypatch, capsys):
    root = make_project(tmp_path, BROKEN)
    monkeypatch.setattr(sys, "argv", ["dsflow", "-C", str(root), "graph"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert "sql/sources.sql:7:3: error DSF-E031: unknown property 'topik'" in err
    assert "Traceback" not in out + err


# --- env_var values are secrets --------------------------------------------------------------------

SECRET_STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ env_var('DSF_TEST_BOOTSTRAP') }}"
    properties:
      security.protocol: SASL_SSL  # sasl.* settings without it are DSF-E253 (they would not be used)
      sasl.mechanism: PLAIN
      sasl.username: u
      sasl.password: "{{ env_var('DSF_TEST_PASSWORD') }}"
      sasl.oauthbearer.config: "principal=u extension_secret={{ env_var('DSF_TEST_JAAS') }}"
      client.id: dsflow-tests
"""
SECRETS = {"DSF_TEST_BOOTSTRAP": "secret-broker.internal:9093", "DSF_TEST_PASSWORD": "hunter2-s3cret",
           "DSF_TEST_JAAS": "jaas-pw-0xBEEF"}


def test_env_var_values_never_reach_resources_or_plan(tmp_path):
    root = make_project(tmp_path, {"stores/kafka.yml": SECRET_STORE, **SOURCES})
    result = check_project(root, environ=SECRETS)
    assert result.diagnostics == []  # a secret inside a longer value (an OAUTHBEARER config) is not "clear text"
    assert set(SECRETS.values()) <= result.secrets
    store = result.project.store("kafka_main")
    assert store.properties["sasl.password"] == SECRETS["DSF_TEST_PASSWORD"]  # the runtime still needs it

    resources = project_resources(result.project)
    store_data = next(r for r in resources if str(r.address) == "store.kafka_main").metadata
    assert store_data["properties"]["sasl.password"].startswith("sensitive:")
    assert store_data["properties"]["client.id"] == "dsflow-tests"
    plan_json = make_plan("p", "dev", resources, State()).model_dump_json()
    dumped = json.dumps([r.data for r in resources] + [r.metadata for r in resources]) + plan_json
    for name, value in SECRETS.items():
        assert value not in dumped, name


def test_rotated_secret_changes_the_metadata_fingerprint_only(tmp_path):
    root = make_project(tmp_path, {"stores/kafka.yml": SECRET_STORE, **SOURCES})
    keyed = Redactor(b"k" * 32)  # the state's redaction key (core/secrets.py): without one, no marker differs
    first = project_resources(load_project(root, environ=SECRETS), keyed)[0]
    second = project_resources(load_project(root, environ={**SECRETS, "DSF_TEST_PASSWORD": "rotated"}), keyed)[0]
    assert str(first.address) == "store.kafka_main"
    assert first.data_hash == second.data_hash, "rotating a secret must not replace the store and its topics"
    assert first.metadata_hash != second.metadata_hash


def test_e023_two_relations_sharing_a_topic(tmp_path):
    found = diagnostics(tmp_path, {**SOURCES, "sql/copy.sql": """\
        CREATE STREAM curated_copy WITH ('topic' = 'pageviews') AS SELECT * FROM pageviews;
        """})
    d = only(found, "DSF-E023")
    assert d.location.file == "sql/copy.sql" and d.location.line == 1
    assert "share topic 'pageviews'" in d.message and "'topic'" in d.hint


def test_e032_trigger_interval_must_be_a_duration(tmp_path):
    found = diagnostics(tmp_path, {**SOURCES, "sql/q.sql": """\
        CREATE STREAM fast WITH ('trigger.interval' = 'often') AS SELECT * FROM pageviews;
        """})
    d = only(found, "DSF-E032")
    assert d.location.file == "sql/q.sql" and "'trigger.interval'" in d.message


def test_a_changed_stateful_query_is_replayed_not_carried():
    from dsflow.core.categories import Category, query_category

    before = {"stateful": True, "sources": [["analytics.public.pageviews", "p", "earliest"]], "sink": "s",
              "select": "SELECT userid, COUNT(*) AS n ... GROUP BY userid"}
    after = {**before, "select": "SELECT userid, COUNT(*) AS n ... WHERE id > 0 GROUP BY userid"}
    assert query_category(before, after, None, False) == (Category.REPLAY, None)
    assert query_category(before, after, "carry", False) == (Category.CARRY_OFFSETS, "carry")


def test_e164_a_nested_primary_key_is_refused_where_it_is_declared_or_grouped(tmp_path):
    sql = ("CREATE CHANGELOG c (id STRUCT<a BIGINT, b VARCHAR>, v BIGINT, PRIMARY KEY (id));\n"
           "CREATE CHANGELOG d (ids ARRAY<BIGINT>, m MAP<VARCHAR, BIGINT>, PRIMARY KEY (m));\n"
           "CREATE CHANGELOG e AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;\n"
           "CREATE STREAM s (p STRUCT<k VARCHAR>, v BIGINT);\n"
           "CREATE CHANGELOG f AS SELECT p, SUM(v) AS t FROM s GROUP BY p;\n")
    found = [d for d in diagnostics(tmp_path, {**SOURCES, "sql/q.sql": sql}) if d.code == "DSF-E164"]
    assert [(d.location.line, d.message.split(" of ")[0]) for d in found] == [
        (1, "primary key column 'id'"), (2, "primary key column 'm'"), (5, "primary key column 'p'")], found
    assert "STRUCT<a BIGINT, b VARCHAR>" in found[0].message and "`id->field AS id_field`" in found[0].hint
    assert all(d.location.file == "sql/q.sql" for d in found)


def test_runtime_async_checkpoint_is_read_from_dsflow_yml(tmp_path):
    """docs/project.md documents it; the loader refused it with DSF-E010 (issue 40)."""
    from support.projects import DEFAULT_CONFIG

    from dsflow.adapters.spark.translate import query_spec

    config = DEFAULT_CONFIG.replace("runtime:\n", "runtime:\n  async_checkpoint: true\n")
    sql = PAGEVIEWS + "CREATE STREAM upper_views AS SELECT id, UPPER(userid) AS userid FROM pageviews;\n"
    on = load_project(make_project(tmp_path / "on", {"dsflow.yml": config, "sql/q.sql": sql}))
    off = load_project(make_project(tmp_path / "off", {"sql/q.sql": sql}))
    assert (on.runtime.async_checkpoint, off.runtime.async_checkpoint) == (True, False)
    spec = query_spec(on, on.queries[0], "test", str(tmp_path / "cp"), str(tmp_path / "status"))
    assert spec.async_checkpoint is True
