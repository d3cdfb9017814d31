"""A DATE plus or minus a number in validate: Spark's DATE_ADD/DATE_SUB, whose days are an INT, SMALLINT or TINYINT
(tests/integration/test_typecheck.py holds Spark's verdict on each case). Pure: no Spark."""

from __future__ import annotations

import pytest

from dsflow.load.project import check_project
from support.projects import make_project

SOURCE = ("CREATE STREAM v (id BIGINT, n INT, x DOUBLE, d DATE, p DECIMAL(10, 2), t SMALLINT, ts TIMESTAMP)\n"
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
    assert (code, line, col) == ("DSF-E404", 3, 27), message
    assert f"{width} '" in message and "Spark adds days of an INT only" in message, message


def test_a_timestamp_plus_a_number_stays_refused(tmp_path):
    assert [p[0] for p in problems(tmp_path, "ts + n")] == ["DSF-E404"]
