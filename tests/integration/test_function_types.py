"""Every function of the allow-list (sql/functions.py) is typed as Spark computes it: the column type dsflow
declares for `SELECT <example call> AS out` equals the type of `out` in the Spark SQL dsflow runs for it.

One project holds one query per function; Spark only analyses each translated SELECT over an empty view of the
source's columns (no rows, no streaming), in the shared session.
"""

from __future__ import annotations

import pytest

from dsflow.adapters.spark.translate import KEY_COLUMN, spark_select, spark_type, view_name
from dsflow.sql.functions import FUNCTIONS
from dsflow.load.project import load_project
from support.projects import make_project

pytestmark = pytest.mark.integration

COLUMNS = (("s", "VARCHAR"), ("t", "VARCHAR"), ("n", "INT"), ("x", "DOUBLE"), ("ts", "TIMESTAMP"), ("ms", "BIGINT"),
           ("secs", "BIGINT"), ("a", "ARRAY<INT>"))
"""The columns the example calls in FUNCTIONS use."""


def test_every_function_is_typed_as_spark_computes_it(tmp_path, spark):
    sql = f"CREATE STREAM samples ({', '.join(f'{n} {t}' for n, t in COLUMNS)}) WITH ('value.format' = 'json');\n"
    sql += "".join(f"CREATE STREAM f_{name.lower()} AS SELECT {example} AS out FROM samples;\n"
                   for name, (_, example) in FUNCTIONS.items())
    project = load_project(make_project(tmp_path, {"sql/all.sql": sql}))
    assert len(project.queries) == len(FUNCTIONS)
    ddl = ", ".join([f"{n} {spark_type(t)}" for n, t in COLUMNS] + [f"{KEY_COLUMN} STRING"])
    wrong = {}
    for query in project.queries:
        spark.createDataFrame([], ddl).createOrReplaceTempView(view_name(0, query))
        declared = spark_type(query.output_columns[0].type).upper()
        computed = spark.sql(spark_select(query, project)).schema["out"].dataType.simpleString().upper()
        if declared != computed:
            wrong[query.fqn.split(".")[-1].removeprefix("f_").upper()] = (declared, computed)
    assert wrong == {}


def test_event_time_functions_are_timestamps(tmp_path):
    """The calls that make an event time out of epoch milliseconds or truncate one are TIMESTAMP, not VARCHAR."""
    sql = ("CREATE STREAM raw (ms BIGINT, ts TIMESTAMP) WITH ('value.format' = 'json');\n"
           "CREATE STREAM timed AS SELECT TO_TIMESTAMP_LTZ(ms, 3) AS event_ts, TO_TIMESTAMP_LTZ(ms, 0) AS secs_ts,\n"
           "  DATE_TRUNC('MINUTE', ts) AS minute, COALESCE(TO_TIMESTAMP_LTZ(ms, 3), ts) AS either,\n"
           "  YEAR(ts) + 1 AS next_year FROM raw;\n")
    query = load_project(make_project(tmp_path, {"sql/all.sql": sql})).queries[0]
    assert [(c.name, c.type) for c in query.output_columns] == [
        ("event_ts", "TIMESTAMP"), ("secs_ts", "TIMESTAMP"), ("minute", "TIMESTAMP"), ("either", "TIMESTAMP"),
        ("next_year", "INT")]
