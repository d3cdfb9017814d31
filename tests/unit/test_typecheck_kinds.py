"""The checker's fixes from the differential run over every statement kind (seed 2, 2026-11-30; docs/validate.md):
IS NULL is a BOOLEAN wherever it is an argument, TO_DATE of anything is a DATE, NULL IN (...) needs a common type of
its list, and a TIMESTAMP or DATE minus a string casts the string (an INTERVAL). Spark's verdict on each is a case of
tests/integration/test_typecheck.py. Pure: no Spark."""

from __future__ import annotations

import pytest

from dsflow.load.project import check_project
from support.projects import make_project

SOURCE = ("CREATE STREAM v (id BIGINT, userid VARCHAR, ts TIMESTAMP, a ARRAY<INT>, d DATE)\n"
          "  WITH ('value.format' = 'json');\n")


def codes(tmp_path, expression: str) -> list[str]:
    root = make_project(tmp_path, {"sql/all.sql": SOURCE + f"CREATE STREAM o AS SELECT {expression} AS e FROM v;\n"})
    return [d.code for d in check_project(root).diagnostics]


@pytest.mark.parametrize(("expression", "code"), [
    ("YEAR(a IS NULL)", "DSF-E409"), ("TRY_CAST((-5 IS NULL) AS TIMESTAMP)", "DSF-E407"),
    ("NULL IN (1, TRUE)", "DSF-E401"), ("CAST(TO_DATE(TRUE) AS DECIMAL(6, 2))", "DSF-E407"),
    ("CAST(TO_DATE(userid) AS INT)", "DSF-E407"), ("(ts - 'x') > INTERVAL 1 HOUR", "DSF-E402"),
    ("(d - 'x') > INTERVAL 1 DAY", "DSF-E402"), ("('x' - ts) > INTERVAL 1 HOUR", "DSF-E402"),
    ("(ts - userid) > INTERVAL 1 HOUR", "DSF-E403"), ("ts - '2024-01-01'", "DSF-E410"),
    ("ts + '2024-01-01'", "DSF-E404"),
])
def test_refused_as_spark_refuses_or_fails(tmp_path, expression, code):
    assert codes(tmp_path, expression) == [code]


@pytest.mark.parametrize("expression", ["NULL IN (1, 'x')", "NULL IN (TRUE, 'x')", "(a IS NULL) AND TRUE",
                                        "(ts - '2024-01-01') > INTERVAL 1 HOUR", "YEAR(TO_DATE(userid))"])
def test_accepted_as_spark_accepts(tmp_path, expression):
    assert codes(tmp_path, expression) == []
