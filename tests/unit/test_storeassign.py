"""INSERT INTO a declared column: what Spark's ANSI store assignment writes (`Cast.canANSIStoreAssign`; the
differential test, tests/support/type_queries.py, asks Spark the same for every generated INSERT), and DSF-E411 at
the column it does not. Pure: no Spark."""

from __future__ import annotations

import pytest
from sqlglot import exp

from dsflow.load.project import check_project
from dsflow.sql.storeassign import storable
from support.projects import make_project
from support.type_queries import REFUSED, STORED

@pytest.mark.parametrize(("got", "wanted"), STORED)
def test_what_spark_stores(got, wanted):
    assert storable(exp.DataType.build(got), exp.DataType.build(wanted))


@pytest.mark.parametrize(("got", "wanted"), REFUSED)
def test_what_spark_does_not_store(got, wanted):
    assert not storable(exp.DataType.build(got), exp.DataType.build(wanted))


def problems(tmp_path, declared: str, select: str) -> list[tuple[str, int, int]]:
    sql = ("CREATE STREAM v (id BIGINT, userid VARCHAR, ts TIMESTAMP, x DOUBLE) WITH ('value.format' = 'json');\n"
           f"CREATE STREAM k (o {declared}, id BIGINT) WITH ('value.format' = 'json');\n"
           f"INSERT INTO k SELECT {select}, id FROM v;\n")
    root = make_project(tmp_path, {"sql/all.sql": sql})
    return [(d.code, d.location.line, d.location.col) for d in check_project(root).diagnostics]


@pytest.mark.parametrize(("declared", "select"), [("INT", "userid AS o"), ("BIGINT", "ts AS o"),
                                                  ("BOOLEAN", "userid AS o"), ("DATE", "x AS o")])
def test_a_column_spark_does_not_store_is_refused_at_its_place(tmp_path, declared, select):
    assert problems(tmp_path, declared, select) == [("DSF-E411", 3, 22)]


@pytest.mark.parametrize(("declared", "select"), [("INT", "x AS o"), ("VARCHAR", "id AS o"), ("DATE", "ts AS o"),
                                                  ("INT", "NULL AS o"), ("INT", "CAST(userid AS INT) AS o")])
def test_a_column_spark_stores_is_accepted(tmp_path, declared, select):
    assert problems(tmp_path, declared, select) == []
