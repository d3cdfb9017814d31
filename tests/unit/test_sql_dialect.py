"""The DeltaStream dialect: parse_sql_file for each statement form, and the Spark SQL it becomes.

Pure: sqlglot only; the Spark translation is string-to-string and needs no Spark session.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from dsflow.adapters.spark.translate import KEY_COLUMN, query_spec, schema_ddl, spark_select, spark_type, view_name
from dsflow.errors import Location
from dsflow.load.project import load_project
from dsflow.sql.parse import DIALECT, RawStatement, parse_one_select, parse_sql_file
from support.projects import PAGEVIEWS, make_project


def parse_one(text: str) -> RawStatement:
    statements, problems = parse_sql_file(text, "f.sql")
    assert problems == []
    [statement] = statements
    return statement


def test_create_stream_with_columns_and_properties():
    st = parse_one(PAGEVIEWS)
    assert (st.kind, st.name, st.is_query, st.select) == ("stream", ("pageviews",), False, None)
    assert st.location == Location("f.sql", 1, 15)
    assert [(c.name, c.type, c.location.line, c.location.col) for c in st.columns] == [
        ("id", "BIGINT", 2, 3), ("viewtime", "BIGINT", 3, 3), ("userid", "VARCHAR", 4, 3), ("pageid", "VARCHAR", 5, 3)]
    assert [(p.key, p.value, p.location.line) for p in st.properties] == [
        ("topic", "pageviews", 7), ("value.format", "json", 8), ("timestamp", "viewtime", 9)]
    assert st.prop("value.format").location == Location("f.sql", 8, 3)
    assert st.prop("store") is None
    assert st.primary_key == ()
    assert st.text == PAGEVIEWS.rstrip().rstrip(";")


def test_column_types_and_property_values_as_written():
    st = parse_one("CREATE STREAM s (a BIGINT, b DOUBLE, c TIMESTAMP, d DECIMAL(10, 2), e BOOLEAN, f INT, "
                   "g ARRAY<VARCHAR>)\n"
                   "WITH ('value.format' = 'json', 'topic.partitions' = 3, \"kafka.topic.retention.ms\" = '1000');")
    assert [c.type for c in st.columns] == ["BIGINT", "DOUBLE", "TIMESTAMP", "DECIMAL(10, 2)", "BOOLEAN", "INT",
                                            "ARRAY<VARCHAR>"]
    assert {p.key: p.value for p in st.properties} == {
        "value.format": "json", "topic.partitions": "3", "kafka.topic.retention.ms": "1000"}


def test_create_changelog_with_primary_key():
    st = parse_one("CREATE CHANGELOG users (\n  userid VARCHAR,\n  region VARCHAR,\n  PRIMARY KEY (userid)\n)"
                   " WITH ('value.format' = 'json');")
    assert (st.kind, st.name, st.primary_key) == ("changelog", ("users",), ("userid",))
    assert [c.name for c in st.columns] == ["userid", "region"]
    assert st.location == Location("f.sql", 1, 18)


def test_create_stream_as_select_with_qualified_name():
    st = parse_one("CREATE STREAM analytics.curated.big_views\n  WITH ('topic.partitions' = 1) AS\n"
                   "SELECT id, pageid FROM pageviews WHERE id > 10;")
    assert (st.kind, st.name, st.is_query, st.columns) == ("stream", ("analytics", "curated", "big_views"), True, ())
    assert st.location == Location("f.sql", 1, 15)  # where the qualified name starts
    assert isinstance(st.select, exp.Select)
    assert st.select.sql() == "SELECT id, pageid FROM pageviews WHERE id > 10"
    assert [(p.key, p.value, p.location) for p in st.properties] == [
        ("topic.partitions", "1", Location("f.sql", 2, 9))]


def test_create_changelog_as_select():
    st = parse_one("CREATE CHANGELOG users_eu AS SELECT userid, region FROM users WHERE region = 'eu';")
    assert (st.kind, st.name, st.is_query) == ("changelog", ("users_eu",), True)


def test_insert_into_select():
    st = parse_one("INSERT INTO curated.all_views\nSELECT id, pageid FROM pageviews;")
    assert (st.kind, st.name, st.is_query) == ("insert", ("curated", "all_views"), True)
    assert st.location == Location("f.sql", 1, 13)
    assert st.select.sql() == "SELECT id, pageid FROM pageviews"


def test_materialized_view_is_parsed_for_a_later_diagnostic():
    st = parse_one("CREATE MATERIALIZED VIEW mv AS SELECT id FROM pageviews;")
    assert (st.kind, st.name, st.is_query) == ("materialized view", ("mv",), True)


def test_several_statements_with_comments_and_semicolons_in_strings():
    text = ("/* sources\n   and queries */\n"
            "CREATE STREAM s (a BIGINT, b VARCHAR) WITH ('value.format' = 'json');\n"
            "-- a comment; with a semicolon\n"
            "\n"
            "INSERT INTO s SELECT a, 'x;y' AS b FROM s WHERE b = 'a;b'\n"
            ";CREATE STREAM t AS SELECT a FROM s -- trailing comment, no semicolon at the end\n")
    statements, problems = parse_sql_file(text, "f.sql")
    assert problems == []
    assert [(st.kind, st.name, st.location.line, st.location.col) for st in statements] == [
        ("stream", ("s",), 3, 15), ("insert", ("s",), 6, 13), ("stream", ("t",), 7, 16)]
    assert statements[1].select.sql() == "SELECT a, 'x;y' AS b FROM s WHERE b = 'a;b'"
    assert statements[1].text == "INSERT INTO s SELECT a, 'x;y' AS b FROM s WHERE b = 'a;b'"


def test_empty_and_comment_only_files_have_no_statements():
    assert parse_sql_file("", "f.sql") == ([], [])
    assert parse_sql_file("-- nothing here\n/* nor here */\n", "f.sql") == ([], [])


def test_a_syntax_error_keeps_the_other_statements():
    text = ("CREATE STREAM a (id BIGINT) WITH ('value.format' = 'json');\n"
            "CREATE STREAM (;\nINSERT INTO a SELECT id FROM a;")
    statements, problems = parse_sql_file(text, "f.sql")
    assert [st.kind for st in statements] == ["stream", "insert"]
    assert [(p.code, p.location.line) for p in problems] == [("DSF-E002", 2)]


def test_unsupported_statement_is_e005_at_its_first_token():
    statements, problems = parse_sql_file("\n  SELECT 1;", "f.sql")
    assert statements == []
    assert [(p.code, p.location, p.message) for p in problems] == [
        ("DSF-E005", Location("f.sql", 2, 3), "unsupported statement: SELECT 1 ...")]


def test_parse_one_select():
    select = parse_one_select("SELECT `p`.`id` AS `id` FROM `analytics`.`public`.`pageviews` AS `p`")
    assert [t.name for t in select.find_all(exp.Table)] == ["pageviews"]


# --- Spark translation --------------------------------------------------------------------------------

QUERIES = """\
CREATE STREAM curated_views AS
SELECT id, UPPER(userid) AS user_upper, CAST(viewtime / 1000 AS BIGINT) AS view_second
FROM pageviews
WHERE pageid <> 'Page_2';

CREATE STREAM aliased AS SELECT p.id, p.pageid FROM pageviews AS p;
"""


def load(tmp_path):
    return load_project(make_project(tmp_path, {"sql/sources.sql": PAGEVIEWS, "sql/queries.sql": QUERIES}))


def test_spark_select_reads_the_view_and_carries_the_key(tmp_path):
    project = load(tmp_path)
    query = next(q for q in project.queries if q.fqn == "analytics.public.curated_views")
    assert view_name(0, query) == "__src0_analytics_public_curated_views"
    sql = spark_select(query)
    assert sql == (
        "SELECT `pageviews`.`id` AS `id`, UPPER(`pageviews`.`userid`) AS `user_upper`, "
        "CAST(`pageviews`.`viewtime` / 1000 AS BIGINT) AS `view_second`, pageviews.__key AS __key "
        "FROM __src0_analytics_public_curated_views AS pageviews WHERE `pageviews`.`pageid` <> 'Page_2'")
    parsed = sqlglot.parse_one(sql, read="spark")
    assert parsed.selects[-1].alias == KEY_COLUMN
    assert "`analytics`" not in sql  # the source table is replaced by its temp view


def test_spark_select_keeps_a_user_alias(tmp_path):
    query = next(q for q in load(tmp_path).queries if q.fqn == "analytics.public.aliased")
    sql = spark_select(query)
    assert "FROM __src0_analytics_public_aliased AS p" in sql
    assert sql.startswith("SELECT `p`.`id` AS `id`, `p`.`pageid` AS `pageid`, p.__key AS __key")


def test_spark_types_and_schema_ddl(tmp_path):
    assert [spark_type(t) for t in ("VARCHAR", "BIGINT", "TIMESTAMP", "DOUBLE")] == [
        "STRING", "BIGINT", "TIMESTAMP", "DOUBLE"]
    relation = load(tmp_path).relation("analytics.public.pageviews")
    assert schema_ddl(relation.columns) == "`id` BIGINT, `viewtime` BIGINT, `userid` STRING, `pageid` STRING"


def test_query_spec_is_pure_data(tmp_path):
    project = load(tmp_path)
    query = next(q for q in project.queries if q.fqn == "analytics.public.curated_views")
    spec = query_spec(project, query, "v1", "/ck/v1", "/run/status.json")
    assert (spec.name, spec.version, spec.checkpoint, spec.trigger_interval) == (
        "analytics.public.curated_views", "v1", "/ck/v1", "1 second")
    [source] = spec.sources
    assert (source.view, source.topic, source.starting_position) == (
        "__src0_analytics_public_curated_views", "pageviews", "earliest")
    assert source.client_config == {"bootstrap.servers": "127.0.0.1:9092"}
    assert (spec.sink.topic, spec.sink.columns) == ("curated_views", ["id", "user_upper", "view_second"])
    assert spec.select_sql == spark_select(query)


def test_timestamp_columns_stay_timestamp_through_a_query(tmp_path):
    sql = ("CREATE STREAM clicks (id BIGINT, ts TIMESTAMP, note STRING)\n"
           "  WITH ('value.format' = 'json', 'timestamp' = 'ts');\n"
           "CREATE STREAM recent AS SELECT id, ts FROM clicks;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": sql}))
    assert [c.type for c in project.relation("analytics.public.clicks").columns] == ["BIGINT", "TIMESTAMP", "TEXT"]
    assert [c.type for c in project.relation("analytics.public.recent").columns] == ["BIGINT", "TIMESTAMP"]


# --- windows, interval joins and aggregations -----------------------------------------------------------

def test_window_table_functions_and_within_round_trip():
    for text in ["SELECT window_start, COUNT(*) AS n FROM TUMBLE(pageviews, SIZE 10 SECONDS) "
                 "GROUP BY window_start, window_end",
                 "SELECT * FROM HOP(analytics.public.pageviews, SIZE 1 MINUTE, ADVANCE BY 10 SECONDS) AS p",
                 "SELECT a.id FROM pageviews AS a LEFT JOIN clicks AS b WITHIN 5 MINUTES ON a.k = b.k WHERE a.id > 1",
                 "SELECT a.id FROM pageviews AS a JOIN clicks AS b WITHIN 1.5 SECONDS ON a.k = b.k"]:
        assert parse_one_select(text).sql(dialect=DIALECT) == text


def test_window_without_advance_is_a_syntax_error():
    _, problems = parse_sql_file("CREATE CHANGELOG c AS SELECT COUNT(*) AS n FROM HOP(p, SIZE 1 MINUTE) "
                                 "GROUP BY window_start, window_end;", "f.sql")
    assert [p.code for p in problems] == ["DSF-E002"]
    assert "ADVANCE BY" in problems[0].message


def test_every_deltastream_form_in_one_select_round_trips():
    text = ("SELECT a.after->id, b.x FROM TUMBLE(orders WITH ('starting.position' = 'latest'), SIZE 1 MINUTE) AS a "
            "JOIN clicks WITH ('timestamp' = 'ts') AS b WITHIN 2 SECONDS ON a.after->id = b.id")
    select = parse_one_select(text)
    assert select.sql(dialect=DIALECT) == text
    assert select.sql(dialect="spark").startswith("SELECT a.after.id, b.x FROM TUMBLE(")  # Spark's own spelling


def test_dialect_syntax_errors_name_their_line_and_column():
    cases = {
        "SELECT COUNT(*) AS n FROM TUMBLE(p, 10 SECONDS) GROUP BY window_start": (1, "expected SIZE"),
        "SELECT COUNT(*) AS n FROM TUMBLE(p,\n SIZE ten SECONDS) GROUP BY window_start": (2, "a duration like 10"),
        "SELECT a.id FROM p AS a JOIN c AS b WITHIN 5 ON a.k = b.k": (1, "a duration like 10"),
        "SELECT id FROM p WITH (starting = 'x')": (1, "expected 'key' = value"),
        "SELECT id FROM p WITH ('a' = 'b' 'c' = 'd')": (1, "expected ) after"),
        "SELECT id,\n  after->(1) FROM p": (2, "field name after ->"),
    }
    for select, (line, message) in cases.items():
        _, problems = parse_sql_file(f"\nCREATE STREAM x AS {select};", "f.sql")
        assert [(p.code, p.location.line - 1) for p in problems] == [("DSF-E002", line)], select
        assert message in problems[0].message and problems[0].location.col > 1, select


def test_sqlglot_is_its_compiled_build():
    from sqlglot.tokens import SQLGLOTC_INSTALLED

    assert SQLGLOTC_INSTALLED, "install sqlglot[c] (pyproject.toml): the pure-Python build is ~1.5x slower to plan"


STATEFUL = """\
CREATE STREAM clicks (cid BIGINT, cts TIMESTAMP, userid VARCHAR) WITH ('value.format' = 'json', 'timestamp' = 'cts');
CREATE CHANGELOG per_window AS SELECT window_start, window_end, pageid, COUNT(DISTINCT userid) AS users
  FROM TUMBLE(pageviews, SIZE 10 SECONDS) AS p GROUP BY window_start, window_end, pageid;
CREATE STREAM joined AS SELECT p.id, c.cid FROM pageviews p FULL JOIN clicks c WITHIN 2 MINUTES
  ON p.userid = c.userid;
"""


def test_spark_translation_of_windows_joins_and_distinct_counts(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/sources.sql": PAGEVIEWS, "sql/q.sql": STATEFUL}))
    window = next(q for q in project.queries if q.fqn.endswith("per_window"))
    spec = query_spec(project, window, "v1", "/ck", "/st")
    assert spec.select_sql == (
        "SELECT p.__window.start AS `window_start`, p.__window.end AS `window_end`, `p`.`pageid` AS `pageid`, "
        "SIZE(COLLECT_SET(`p`.`userid`)) AS `users` FROM __src0_analytics_public_per_window AS p "
        "GROUP BY p.__window, `p`.`pageid`")
    [source] = spec.sources
    assert (source.event_time, source.watermark_delay, source.window) == (
        "timestamp_millis(`viewtime`)", "5000 milliseconds", ["10000 milliseconds", "10000 milliseconds"])
    assert (spec.sink.output_mode, spec.sink.key_columns) == ("update", ["window_start", "window_end", "pageid"])

    joined = next(q for q in project.queries if q.fqn.endswith("joined"))
    spec = query_spec(project, joined, "v1", "/ck", "/st")
    assert spec.select_sql.endswith(
        "COALESCE(p.__key, c.__key) AS __key FROM __src0_analytics_public_joined AS p FULL JOIN "
        "__src1_analytics_public_joined AS c ON `p`.`userid` = `c`.`userid` AND c.__ts BETWEEN p.__ts - "
        "INTERVAL '120000' MILLISECONDS AND p.__ts + INTERVAL '120000' MILLISECONDS")
    assert [s.event_time for s in spec.sources] == ["timestamp_millis(`viewtime`)", "`cts`"]
    assert (spec.sink.output_mode, spec.sink.key_columns) == ("append", [])


# --- struct field access: col->field -------------------------------------------------------------------

ORDERS = """\
CREATE STREAM orders (op VARCHAR,
  `after` STRUCT<id BIGINT, amount DECIMAL(10, 2), addr STRUCT<city VARCHAR, zip INT>>,
  source STRUCT<ts_ms BIGINT, `table` VARCHAR>) WITH ('value.format' = 'json');
CREATE STREAM users (uid BIGINT, name VARCHAR) WITH ('value.format' = 'json');
"""


def test_arrow_field_access_round_trips_and_is_not_a_lambda():
    for text in ["SELECT after->id AS id, after->addr->city, o.source->ts_ms FROM orders AS o "
                 "WHERE after->amount > 3",
                 "SELECT SUM(after->amount) AS total, after->addr->zip FROM orders GROUP BY after->addr->zip",
                 "SELECT after->`table` FROM orders"]:
        parsed = parse_one_select(text)
        assert parsed.sql(dialect=DIALECT) == text
        assert not list(parsed.find_all(exp.Lambda)) and not list(parsed.find_all(exp.JSONExtract))
    assert parse_one_select("SELECT after->'id' FROM orders").sql(dialect=DIALECT) == "SELECT after->`id` FROM orders"
    _, problems = parse_sql_file("CREATE STREAM x AS SELECT after->1 FROM orders;", "f.sql")
    assert [p.code for p in problems] == ["DSF-E002"] and "field name after ->" in problems[0].message


FIELD_QUERIES = """\
CREATE STREAM flat AS SELECT after->id, after->amount AS amount, after->addr->city AS city,
  source->ts_ms AS commit_ms FROM orders WHERE op <> 'd' AND after->addr->zip > 1000;
CREATE CHANGELOG per_city AS SELECT after->addr->city AS city, COUNT(*) AS n, SUM(after->amount) AS total
  FROM orders GROUP BY after->addr->city;
CREATE STREAM enriched AS SELECT o.after->id AS id, u.name FROM orders o JOIN users u WITHIN 1 MINUTE
  ON o.after->id = u.uid;
"""


def test_arrow_fields_are_typed_named_and_translated_to_spark(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/s.sql": ORDERS, "sql/q.sql": FIELD_QUERIES}))
    flat = project.relation("analytics.public.flat")
    assert [(c.name, c.type) for c in flat.columns] == [
        ("id", "BIGINT"), ("amount", "DECIMAL(10, 2)"), ("city", "VARCHAR"), ("commit_ms", "BIGINT")]
    query = next(q for q in project.queries if q.fqn == "analytics.public.flat")
    assert spark_select(query) == (
        "SELECT `orders`.`after`.`id` AS `id`, `orders`.`after`.`amount` AS `amount`, "
        "`orders`.`after`.`addr`.`city` AS `city`, `orders`.`source`.`ts_ms` AS `commit_ms`, "
        "orders.__key AS __key FROM __src0_analytics_public_flat AS orders "
        "WHERE `orders`.`op` <> 'd' AND `orders`.`after`.`addr`.`zip` > 1000")
    per_city = project.relation("analytics.public.per_city")
    assert [(c.name, c.type) for c in per_city.columns][:2] == [("city", "VARCHAR"), ("n", "BIGINT")]
    assert per_city.columns[2].type.startswith("DECIMAL")
    assert per_city.primary_key == ("city",)
    grouped = next(q for q in project.queries if q.fqn == "analytics.public.per_city")
    assert spark_select(grouped).endswith("GROUP BY `orders`.`after`.`addr`.`city`")
    joined = next(q for q in project.queries if q.fqn == "analytics.public.enriched")
    assert "ON `o`.`after`.`id` = `u`.`uid` AND" in spark_select(joined)


def test_an_unknown_field_is_e048_at_its_line_with_the_struct_fields(tmp_path):
    bad = ("CREATE STREAM f1 AS SELECT after->id AS id,\n"
           "  after->amout AS amount FROM orders;\n"
           "CREATE STREAM f2 AS SELECT op FROM orders WHERE after->addr->town = 'x';\n"
           "CREATE STREAM f3 AS SELECT op->x AS x FROM orders;\n"
           "CREATE STREAM f4 AS SELECT after->nope->deeper AS d FROM orders;\n")
    from dsflow.errors import ProjectError
    import pytest

    with pytest.raises(ProjectError) as caught:
        load_project(make_project(tmp_path, {"sql/s.sql": ORDERS, "sql/bad.sql": bad}))
    found = [(d.code, d.location.file.rsplit("/", 1)[-1], d.location.line, d.message, d.hint)
             for d in caught.value.diagnostics]
    assert [(c, f, line) for c, f, line, _, _ in found] == [
        ("DSF-E048", "bad.sql", 2), ("DSF-E048", "bad.sql", 3), ("DSF-E048", "bad.sql", 4),
        ("DSF-E048", "bad.sql", 5)], found
    first, second, third, fourth = found
    assert "no field 'amout'" in first[3] and "did you mean 'amount'?" in first[4]
    assert "its fields are id, amount, addr" in first[4]
    assert "no field 'town'" in second[3] and "city, zip" in second[4]
    assert "not a STRUCT" in third[3]
    assert "no field 'nope'" in fourth[3]  # reported once, not again for ->deeper


def test_dot_on_a_struct_column_hints_at_the_arrow(tmp_path):
    from dsflow.errors import ProjectError
    import pytest

    with pytest.raises(ProjectError) as caught:
        load_project(make_project(tmp_path, {"sql/s.sql": ORDERS,
                                             "sql/q.sql": "CREATE STREAM q AS SELECT after.id FROM orders;"}))
    [problem] = caught.value.diagnostics
    assert problem.code == "DSF-E040" and problem.hint == "a field of the column 'after' is after->id"
