"""DATEs and TIMESTAMPs in validate: a DATE plus or minus a number is Spark's DATE_ADD/DATE_SUB, whose days are an
INT, SMALLINT or TINYINT; NULL and a DATE or TIMESTAMP; TO_DATE of a collection; SUM/AVG of a TIMESTAMP declared a
DOUBLE (tests/integration/test_typecheck.py holds Spark's verdict on each case). Pure: no Spark."""

from __future__ import annotations

import pytest

from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCE = ("CREATE STREAM v (id BIGINT, n INT, x DOUBLE, d DATE, p DECIMAL(10, 2), t SMALLINT, ts TIMESTAMP,\n"
          "  a ARRAY<INT>, s STRUCT<f INT>)\n"
          "  WITH ('value.format' = 'json');\n")


def problems(tmp_path, expression: str) -> list[tuple[str, int, int, str]]:
    root = make_project(tmp_path, {"sql/all.sql": SOURCE + f"CREATE STREAM o AS SELECT {expression} AS e FROM v;\n"})
    return [(d.code, d.location.line, d.location.col, d.message) for d in check_project(root).diagnostics]


@pytest.mark.parametrize("expression", ["d + 1", "d - n", "n + d", "d + t", "d + (n + 1)", "d + CAST(id AS INT)",
                                        "d + INTERVAL 2 DAYS", "d - d > INTERVAL 1 DAY", "d + NULL"])
def test_days_of_an_int_are_accepted(tmp_path, expression):
    assert problems(tmp_path, expression) == []


@pytest.mark.parametrize(("expression", "width"), [
    ("d + id", "BIGINT"), ("id + d", "BIGINT"), ("d - id", "BIGINT"), ("d + 2.5", "DECIMAL(2, 1)"),
    ("d + x", "DOUBLE"), ("d + p", "DECIMAL(10, 2)"), ("d + (id + 1)", "BIGINT"), ("d + 3000000000", "BIGINT"),
    ("d - 1e3", "DOUBLE"), ("d + FLOOR(n)", "BIGINT"),
])
def test_days_of_another_width_are_refused_at_their_place(tmp_path, expression, width):
    [(code, line, col, message)] = problems(tmp_path, expression)
    assert (code, line, col) == ("DSF-E404", 4, 27), message
    assert f"{width} '" in message and "Spark adds days of an INT only" in message, message


def test_a_timestamp_plus_a_number_stays_refused(tmp_path):
    assert [p[0] for p in problems(tmp_path, "ts + n")] == ["DSF-E404"]


@pytest.mark.parametrize("operator", ["*", "/", "%", "DIV"])
def test_null_times_a_date_or_timestamp_is_refused(tmp_path, operator):
    for expression in (f"NULL {operator} d", f"ts {operator} NULL"):
        [(code, _line, _col, message)] = problems(tmp_path, expression)
        assert code == "DSF-E404" and "of NULL and" in message, (expression, message)


def test_plus_null_is_a_timestamp_and_minus_null_an_interval(tmp_path):
    assert problems(tmp_path, "NULL + d") == problems(tmp_path, "(ts + NULL) > ts") == []
    assert [p[0] for p in problems(tmp_path, "d - NULL")] == ["DSF-E410"]  # no sink column holds an INTERVAL
    assert problems(tmp_path, "(NULL - ts) > INTERVAL 1 HOUR") == []


@pytest.mark.parametrize("expression", ["TO_DATE(a)", "TO_DATE(s, 'yyyy')", "YEAR(TO_DATE(a))"])
def test_to_date_of_a_collection_is_refused(tmp_path, expression):
    [(code, _line, _col, message)] = problems(tmp_path, expression)
    assert code == "DSF-E409" and "not a string, TIMESTAMP or DATE" in message, message


@pytest.mark.parametrize("expression", ["TO_DATE(d)", "TO_DATE(ts)", "TO_DATE(NULL)", "TO_DATE(n)", "YEAR(ts)"])
def test_to_date_of_a_scalar_is_accepted(tmp_path, expression):
    assert problems(tmp_path, expression) == []


@pytest.mark.parametrize(("aggregate", "declared"), [("SUM(ts)", "DOUBLE"), ("AVG(ts)", "DOUBLE"),
                                                     ("SUM(NULL)", "DOUBLE"), ("SUM(ABS(NULL))", "DOUBLE"),
                                                     ("SUM(n)", "BIGINT"), ("MAX(ts)", "TIMESTAMP")])
def test_a_sum_of_timestamps_or_nulls_is_declared_a_double(tmp_path, aggregate, declared):
    sql = SOURCE + f"CREATE CHANGELOG o AS SELECT id, {aggregate} AS e FROM v GROUP BY id;\n"
    [query] = load_project(make_project(tmp_path, {"sql/all.sql": sql})).queries
    assert next(c.type for c in query.output_columns if c.name == "e").upper() == declared
