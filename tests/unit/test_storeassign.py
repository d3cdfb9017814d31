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


@pytest.mark.parametrize(("declared", "select", "written"), [
    ("VARCHAR", "id AS o", "CAST(v.id AS STRING)"), ("VARCHAR", "x * 2 AS o", "CAST(v.x * 2 AS STRING)"),
    ("VARCHAR", "id > 1 AS o", "CAST(v.id > 1 AS STRING)"), ("VARCHAR", "ts AS o", "CAST(v.ts AS STRING)"),
    ("DATE", "ts AS o", "CAST(v.ts AS DATE)"), ("INT", "x AS o", "CAST(v.x AS INT)"),
    ("INT", "NULL AS o", "CAST(NULL AS INT)"), ("VARCHAR", "userid AS o", None), ("DOUBLE", "x AS o", None)])
def test_a_stored_column_is_written_as_spark_stores_it(tmp_path, declared, select, written):
    """A number, BOOLEAN or TIMESTAMP into a VARCHAR is written as its string ("7", not 7), as Spark's store
    assignment casts it; a column of the declared type as it is."""
    from dsflow.load.project import load_project

    sql = ("CREATE STREAM v (id BIGINT, userid VARCHAR, ts TIMESTAMP, x DOUBLE) WITH ('value.format' = 'json');\n"
           f"CREATE STREAM k (o {declared}, id BIGINT) WITH ('value.format' = 'json');\n"
           f"INSERT INTO k SELECT {select}, id FROM v;\n")
    [query] = load_project(make_project(tmp_path, {"sql/all.sql": sql})).queries
    assert query.output_columns[0].type == declared
    text = query.select_sql.replace("`", "")
    assert (f"{written} AS o" in text) if written else ("CAST(" not in text.split(" FROM ")[0]), text
