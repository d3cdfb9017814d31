"""What a careless or hostile project holds gets a diagnostic with a code and a place, never a traceback
(issue 25): DSF-E200..E209, and E001/E004/E006/E012 for what they already cover.

Pure: projects are small {filename: content} folders; nothing talks to a broker or Spark.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsflow.errors import Diagnostic, Location
from dsflow.load.project import check_project
from support.projects import PAGEVIEWS, copy_example, make_project

SOURCES = {"sql/sources.sql": PAGEVIEWS}
KINESIS = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: kin
    type: kinesis
    properties:
      region: us-east-1
  - name: snow
    type: snowflake
    properties:
      account: acme
      database: DB
  - name: bricks
    type: databricks
    properties:
      path: lake
"""


def found(root: Path) -> list[Diagnostic]:
    return check_project(root).diagnostics


def only(diagnostics: list[Diagnostic], code: str) -> Diagnostic:
    matching = [d for d in diagnostics if d.code == code]
    assert len(matching) == 1, "\n".join(str(d) for d in diagnostics)
    return matching[0]


# --- files --------------------------------------------------------------------------------------------------------


def test_e006_project_file_that_is_a_folder_fifo_or_not_utf8(tmp_path):
    for kind in ("folder", "fifo", "latin-1"):
        root = make_project(tmp_path / kind, SOURCES)
        config = root / "dsflow.yml"
        config.unlink()
        if kind == "folder":
            config.mkdir()
        elif kind == "fifo":
            os.mkfifo(config)  # reading it would block: it is refused before it is opened
        else:
            config.write_bytes(b"name: caf\xe9\n")
        d = only(found(root), "DSF-E006")
        assert d.location == Location("dsflow.yml")
        assert "cannot read file" in d.message, kind


def test_e200_file_name_not_utf8_is_reported_not_read(tmp_path):
    root = make_project(tmp_path, SOURCES)
    (root / "sql" / os.fsdecode(b"bad\xff.sql")).write_text("CREATE STREAM nope (id BIGINT);\n")
    d = only(found(root), "DSF-E200")
    assert d.location == Location("sql/bad?.sql")
    assert "not valid UTF-8" in d.message and "\\udcff" in d.message
    assert len(found(root)) == 1  # the file's statement was not read


# --- YAML ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("char,line,col", [("\x00", 3, 12), ("\x07", 3, 12), ("\x1b", 3, 12)])
def test_e001_control_character_in_yaml_at_its_line_and_column(tmp_path, char, line, col):
    roles = f"roles:\n  - name: a\n  - name: b{char}c\n"
    d = only(found(make_project(tmp_path, {**SOURCES, "security/roles.yml": roles})), "DSF-E001")
    assert d.location == Location("security/roles.yml", line, col)
    assert f"U+{ord(char):04X}" in d.message


def test_e001_control_character_in_dsflow_yml(tmp_path):
    root = copy_example(tmp_path)
    config = root / "dsflow.yml"
    config.write_text(config.read_text().replace("name: clickstream", "name: click\x00stream"))
    d = only(found(root), "DSF-E001")
    assert d.location == Location("dsflow.yml", 2, 12)


def test_e202_yaml_nested_too_deeply(tmp_path):
    deep = "roles: " + "[" * 5000 + "]" * 5000 + "\n"
    d = only(found(make_project(tmp_path, {**SOURCES, "security/roles.yml": deep})), "DSF-E202")
    assert d.location == Location("security/roles.yml")


def test_e203_duplicate_yaml_key_even_the_project_name(tmp_path):
    root = copy_example(tmp_path)
    config = root / "dsflow.yml"
    text = config.read_text()
    config.write_text(text + "name: other\n")
    d = only(found(root), "DSF-E203")
    assert d.location == Location("dsflow.yml", text.count("\n") + 1, 1)
    assert "'name' is written twice" in d.message and "first written at line 2" in d.hint


def test_e203_duplicate_key_in_an_object_file_and_merge_keys_are_not_duplicates(tmp_path):
    store = "stores:\n  - name: kafka_main\n    type: kafka\n    bootstrap_servers: a:1\n    type: kafka\n"
    d = only(found(make_project(tmp_path / "dup", {**SOURCES, "stores/kafka.yml": store})), "DSF-E203")
    assert d.location == Location("stores/kafka.yml", 5, 5)
    merged = ("base: &base\n  type: kafka\nstores:\n  - <<: *base\n    name: kafka_main\n    type: kafka\n"
              "    bootstrap_servers: a:1\n")
    assert "DSF-E203" not in [d.code for d in found(make_project(tmp_path / "merge", {**SOURCES,
                                                                                       "stores/kafka.yml": merged}))]


@pytest.mark.parametrize("edit,where", [
    ("  path: .dsflow", "  path: \".ds\\0flow\""), ("  path: .dsflow", "  path: \"a\\nb\""),
    ("  path: .dsflow", "  path: \"\""), ("  dev:", "  ../../etc:"),
])
def test_e012_state_path_with_control_characters_or_a_path_as_environment(tmp_path, edit, where):
    root = copy_example(tmp_path)
    config = root / "dsflow.yml"
    config.write_text(config.read_text().replace(edit, where))
    d = only(found(root), "DSF-E012")
    assert d.location.file == "dsflow.yml" and d.location.line > 0


# --- templates ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("template,message", [
    ("{{ 1/0 }}", "ZeroDivisionError: division by zero"),
    ("{{ var() }}", "var() takes a name in quotes"),
    ("{{ var(1, 2, 3) }}", "var() takes a name in quotes"),
    ("{{ env_var() }}", "env_var() takes a name in quotes"),
    ("{{ ''.__class__.__mro__ }}", "unsafe"),
    ("{{ 'a' * 10**10 }}", "longer than 10,000,000"),
    ("{{ 9**(9**9) }}", "too large"),
    ("{{ range(10**9) | list }}", "range too big"),
    ("{{ lipsum(10**6) }}", "'lipsum' is undefined"),
])
def test_e004_template_runtime_errors_at_their_line(tmp_path, template, message):
    sql = f"-- line 1\n-- {template}\n"
    d = only(found(make_project(tmp_path, {**SOURCES, "sql/t.sql": sql})), "DSF-E004")
    assert d.location == Location("sql/t.sql", 2)
    assert message in d.message.lower() or message in d.message, d.message


@pytest.mark.parametrize("template", ["{% include 'a.sql' %}", "{% extends 'base.sql' %}", "{% import 'm' as m %}"])
def test_e201_include_extends_import(tmp_path, template):
    d = only(found(make_project(tmp_path, {**SOURCES, "sql/t.sql": f"\n{template}\n"})), "DSF-E201")
    assert d.location.file == "sql/t.sql"
    assert "not supported" in d.message


@pytest.mark.parametrize("template", ["{{ " + "(" * 200 + "1" + ")" * 200 + " }}",
                                      "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"])
def test_e202_template_nested_too_deeply_or_endless_macro(tmp_path, template):
    d = only(found(make_project(tmp_path, {**SOURCES, "sql/t.sql": f"-- {template}\n"})), "DSF-E202")
    assert d.location == Location("sql/t.sql")


def test_templates_still_render_loops_filters_and_defaults(tmp_path):
    sql = ("{% for n in ['a', 'b'] %}CREATE STREAM s_{{ n | upper }} (id BIGINT) WITH ('value.format' = 'json', "
           "'topic' = '{{ var('missing', 'x') }}_{{ n }}');\n{% endfor %}")
    result = check_project(make_project(tmp_path, {**SOURCES, "sql/t.sql": sql}))
    assert result.diagnostics == []
    assert sorted(r.topic for r in result.project.relations) == ["pageviews", "x_a", "x_b"]


# --- SQL ----------------------------------------------------------------------------------------------------------


def test_e202_sql_nested_too_deeply(tmp_path):
    sql = PAGEVIEWS + "\nCREATE STREAM x AS SELECT " + "(" * 800 + "id" + ")" * 800 + " AS id FROM pageviews;\n"
    d = only(found(make_project(tmp_path, {"sql/sources.sql": sql})), "DSF-E202")
    assert d.location == Location("sql/sources.sql", 12, 1)


def test_e204_duplicate_with_property(tmp_path):
    sql = "CREATE STREAM y (id BIGINT) WITH ('value.format' = 'json', 'topic' = 'a',\n  'TOPIC' = 'b');\n"
    d = only(found(make_project(tmp_path, {**SOURCES, "sql/y.sql": sql})), "DSF-E204")
    assert d.location == Location("sql/y.sql", 2, 3)
    assert "first given at sql/y.sql:1:" in d.hint


@pytest.mark.parametrize("name", ['""', 'analytics."".y', '" "'])
def test_e205_empty_relation_name(tmp_path, name):
    sql = f"\nCREATE STREAM {name} (id BIGINT) WITH ('value.format' = 'json');\n"
    d = only(found(make_project(tmp_path, {**SOURCES, "sql/y.sql": sql})), "DSF-E205")
    assert d.location.file == "sql/y.sql" and d.location.line == 2


@pytest.mark.parametrize("topic,why", [
    ("tópico", "'ó' is not allowed"), ("a b", "' ' is not allowed"), ("t" * 250, "250 characters long"),
    ("..", "'.' and '..' are not topic names"), ("a/b", "'/' is not allowed"),
])
def test_e206_invalid_kafka_topic_name(tmp_path, topic, why):
    sql = f"\nCREATE STREAM y (id BIGINT) WITH ('value.format' = 'json', 'topic' = '{topic}');\n"
    d = only(found(make_project(tmp_path, {**SOURCES, "sql/y.sql": sql})), "DSF-E206")
    assert d.location.file == "sql/y.sql" and d.location.line == 2
    assert why in d.message


def test_e206_topic_prefix_and_dlq_topic_count_too(tmp_path):
    config = "name: p\ndefault:\n  database: analytics\n  schema: public\n  store: kafka_main\n" \
             "environments:\n  dev:\n    topic_prefix: 'dev env.'\n    vars:\n      bootstrap: a:1\n"
    d = only(found(make_project(tmp_path / "prefix", {**SOURCES, "dsflow.yml": config})), "DSF-E206")
    assert "'dev env.pageviews'" in d.message
    sql = "CREATE STREAM q WITH ('dlq.topic' = 'bad topic!') AS SELECT id FROM pageviews;\n"
    d = only(found(make_project(tmp_path / "dlq", {**SOURCES, "sql/q.sql": sql})), "DSF-E206")
    assert "'dlq.topic' of 'analytics.public.q'" in d.message and d.location.file == "sql/q.sql"


@pytest.mark.parametrize("topic,ok", [("a" * 128, True), ("a" * 129, False), ("s:t", False), ("ok_.-1", True)])
def test_e207_kinesis_stream_name(tmp_path, topic, ok):
    sql = f"CREATE STREAM k (id BIGINT) WITH ('store' = 'kin', 'value.format' = 'json', 'topic' = '{topic}', " \
          "'topic.shards' = 1);\n"
    codes = [d.code for d in found(make_project(tmp_path, {**SOURCES, "stores/kafka.yml": KINESIS, "sql/k.sql": sql}))]
    assert codes == ([] if ok else ["DSF-E207"])


@pytest.mark.parametrize("props,ok", [
    ("'store' = 'snow'", True), ("'store' = 'snow', 'snowflake.table.name' = 'my-table'", False),
    ("'store' = 'snow', 'snowflake.db.name' = '1db'", False),
    ("'store' = 'bricks', 'databricks.table.name' = 'a.b'", False), ("'store' = 'bricks'", True),
    ("'store' = 'bricks', 'delta.path' = 'x\ny'", False),
])
def test_e208_table_identifiers(tmp_path, props, ok):
    sql = f"CREATE TABLE t WITH ({props}) AS SELECT id, userid FROM pageviews;\n"
    codes = [d.code for d in found(make_project(tmp_path, {**SOURCES, "stores/kafka.yml": KINESIS, "sql/t.sql": sql}))]
    assert codes == ([] if ok else ["DSF-E208"])


@pytest.mark.parametrize("select", ["SELECT id", "SELECT 1 AS one"])
def test_e209_query_without_from(tmp_path, select):
    sql = f"\nCREATE STREAM x AS {select};\n"
    d = only(found(make_project(tmp_path, {**SOURCES, "sql/x.sql": sql})), "DSF-E209")
    assert d.location.file == "sql/x.sql" and d.location.line == 2


@pytest.mark.parametrize("roles,cycles", [
    ("roles:\n  - name: analyst\n    inherits: [analyst]\n", ["analyst -> analyst"]),
    ("roles:\n  - name: a\n    inherits: [b]\n  - name: b\n    inherits: [a]\n  - name: c\n    inherits: [a]\n",
     ["a -> b -> a", "b -> a -> b"]),
])
def test_e210_role_inheritance_cycle_is_a_load_error_not_a_plan_traceback(tmp_path, roles, cycles):
    result = check_project(make_project(tmp_path, {**SOURCES, "security/roles.yml": roles}))
    assert [d.code for d in result.diagnostics] == ["DSF-E210"] * len(cycles)
    assert [d.message.split(": ", 1)[1] for d in result.diagnostics] == cycles
    assert all(d.location.file == "security/roles.yml" and d.location.line > 0 for d in result.diagnostics)


def test_a_dot_inside_a_quoted_name_or_a_database_name_is_refused(tmp_path):
    """A '.' inside one part would read as another part of db.schema.name (the fuzzer found a traceback)."""
    sql = '\nCREATE STREAM "a.b" (id BIGINT) WITH (\'value.format\' = \'json\');\n'
    d = only(found(make_project(tmp_path / "quoted", {**SOURCES, "sql/y.sql": sql})), "DSF-E205")
    assert d.location.file == "sql/y.sql" and d.location.line == 2
    config = "name: p\ndefault:\n  database: a/../b.c\n  store: kafka_main\nenvironments:\n  dev:\n    vars:\n" \
             "      bootstrap: a:1\n"
    d = only(found(make_project(tmp_path / "default", {**SOURCES, "dsflow.yml": config})), "DSF-E012")
    assert d.location == Location("dsflow.yml", 3, 13) and "must not be empty or hold a '.'" in d.message
    databases = "databases:\n  - name: analytics\n    schemas: [public, 'cur.ated', '']\n"
    diagnostics = found(make_project(tmp_path / "yaml", {**SOURCES, "db.yml": databases}))
    assert [(d.code, d.location) for d in diagnostics] == [("DSF-E012", Location("db.yml", 3, 23)),
                                                           ("DSF-E012", Location("db.yml", 3, 35))]
