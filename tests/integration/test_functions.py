"""Scalar functions: the allow-list (dsflow/sql/functions.py) and its diagnostics, the Spark spelling of
DeltaStream names, every listed function resolving in real Spark, and a continuous query using many of
them on a real broker compared value by value with a Python reference.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal

import pytest
from sqlglot import parse_one

from dsflow.sql.functions import FUNCTIONS, to_spark
from dsflow.load.project import check_project
from dsflow.sql.parse import DIALECT
from support.projects import make_project
from support.streaming import produce, records, run, streaming_project

SOURCE = """\
CREATE STREAM src (s VARCHAR, t VARCHAR, n BIGINT, x DOUBLE, secs BIGINT, ms BIGINT, ts TIMESTAMP,
                   a ARRAY<BIGINT>, opt VARCHAR)
  WITH ('value.format' = 'json');
"""
TEMP_VIEW = ("SELECT 'abc_12,x' AS s, 'zz' AS t, 7L AS n, 2.345D AS x, 1700000000L AS secs, 1700000000123L AS ms, "
             "TIMESTAMP'2024-05-01 10:20:30' AS ts, array(1L, 2L) AS a, CAST(NULL AS STRING) AS opt")


def _check(tmp_path, sql: str):
    return check_project(make_project(tmp_path, {"sql/src.sql": SOURCE, "sql/q.sql": sql}))


def test_every_listed_function_validates(tmp_path) -> None:
    sql = "".join(f"CREATE STREAM out_{i} AS SELECT {example} AS r FROM src;\n"
                  for i, (_, example) in enumerate(FUNCTIONS.values()))
    result = _check(tmp_path, sql)
    assert [str(d) for d in result.diagnostics] == []
    assert len(result.project.queries) == len(FUNCTIONS)


def test_unknown_functions_are_e143_with_place_and_hint_and_all_collected(tmp_path) -> None:
    sql = ("CREATE STREAM a AS SELECT s,\n"
           "  UPPPER(s) AS up FROM src;\n"
           "CREATE STREAM b AS SELECT EXPLODE(a) AS e, FOO_BAR(t) AS f FROM src;\n"
           "CREATE STREAM c AS SELECT nope FROM src;\n")
    found = [(d.code, d.location.file, d.location.line, d.location.col, d.message, d.hint)
             for d in _check(tmp_path, sql).diagnostics]
    e143 = [f for f in found if f[0] == "DSF-E143"]
    assert [(f[2], f[4]) for f in e143] == [
        (2, "function UPPPER is not supported in continuous queries"),
        (3, "function EXPLODE is not supported in continuous queries"),
        (3, "function FOO_BAR is not supported in continuous queries")]
    assert e143[0][1] == "sql/q.sql" and e143[0][3] == 3  # where UPPPER( starts on line 2
    assert e143[0][5].startswith("did you mean 'UPPER'?") and "docs/project.md" in e143[2][5]
    assert any(f[0] == "DSF-E041" and f[2] == 4 for f in found), "other problems are still reported"


def test_functions_dsflow_rewrites_are_checked_for_their_arguments(tmp_path) -> None:
    sql = ("CREATE STREAM a AS SELECT SPLIT_INDEX(s, ',') AS p, TO_TIMESTAMP_LTZ(ms, 6) AS t,\n"
           "  JSON_VALUE(s, '$.a') AS j, NOW(1) AS n FROM src;\n")
    found = [(d.code, d.message, d.hint) for d in _check(tmp_path, sql).diagnostics]
    assert found == [
        ("DSF-E143", "function SPLIT_INDEX takes 3 arguments, got 2", "e.g. SPLIT_INDEX(s, ',', 0)"),
        ("DSF-E143", "function TO_TIMESTAMP_LTZ takes a precision of 0 (seconds) or 3 (milliseconds), got 6",
         "e.g. TO_TIMESTAMP_LTZ(ms, 3)"),
        ("DSF-E143", "function NOW takes 0 arguments, got 1", "e.g. NOW()")]


@pytest.mark.parametrize("written, spark", [
    ("SPLIT_INDEX(s, ',', 1)", "NULLIF(SPLIT_PART(s, ',', 1 + 1), '')"),
    ("SHA256(s)", "SHA2(s, 256)"),
    ("JSON_VALUE(s, '$.a.b')", "GET_JSON_OBJECT(s, '$.a.b')"),
    ("TO_TIMESTAMP_LTZ(ms, 3)", "TIMESTAMP_MILLIS(ms)"),
    ("TO_TIMESTAMP_LTZ(secs, 0)", "TIMESTAMP_SECONDS(secs)"),
    ("FROM_BASE64(s)", "CAST(UNBASE64(s) AS STRING)"),
    ("CHAR_LENGTH(s)", "LENGTH(s)"),
    ("IFNULL(s, 'x')", "COALESCE(s, 'x')"),
])
def test_deltastream_names_get_their_spark_spelling(written: str, spark: str) -> None:
    select = to_spark(parse_one(f"SELECT {written} AS r FROM v", dialect=DIALECT))
    assert select.sql(dialect="spark") == f"SELECT {spark} AS r FROM v"


@pytest.mark.integration
def test_every_listed_function_resolves_in_spark(spark) -> None:
    spark.sql(TEMP_VIEW).createOrReplaceTempView("fn_src")
    failed = {}
    for name, (_, example) in FUNCTIONS.items():
        sql = to_spark(parse_one(f"SELECT {example} AS r FROM fn_src", dialect=DIALECT)).sql(dialect="spark")
        try:
            spark.sql(sql).schema  # noqa: B018 - read for the analysis: the function exists with these arguments
        except Exception as err:  # noqa: BLE001 - collected and shown
            failed[name] = str(err).splitlines()[0]
    assert failed == {}


QUERY = """\
CREATE STREAM people (id BIGINT, name VARCHAR, padded VARCHAR, code VARCHAR, csv VARCHAR, n BIGINT, x DOUBLE,
                      ms BIGINT, doc VARCHAR, opt VARCHAR, b64 VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);

CREATE STREAM shaped AS SELECT id,
  UPPER(name) AS up, LOWER(name) AS low, TRIM(padded) AS trimmed, SUBSTRING(name, 2, 3) AS sub,
  CONCAT(name, '-', CAST(n AS VARCHAR)) AS joined, LENGTH(name) AS len, REPLACE(name, 'a', 'o') AS replaced,
  REGEXP_REPLACE(code, '[0-9]+', '#') AS masked, REGEXP_EXTRACT(code, '([a-z]+)_([0-9]+)', 2) AS digits,
  LPAD(name, 8, '*') AS padded8, SPLIT_INDEX(csv, ',', 1) AS second, ABS(n) AS absn, ROUND(x, 2) AS rounded,
  FLOOR(x) AS floored, CEIL(x) AS ceiled, POWER(n, 2) AS squared, MOD(n, 7) AS modded,
  DATE_FORMAT(TO_TIMESTAMP_LTZ(ms, 3), 'yyyy-MM-dd HH:mm') AS minute, EXTRACT(HOUR FROM TO_TIMESTAMP_LTZ(ms, 3)) AS hr,
  FROM_UNIXTIME(ms / 1000, 'yyyy-MM-dd') AS day,
  CASE WHEN n < 0 THEN 'neg' WHEN n = 0 THEN 'zero' ELSE 'pos' END AS sign_word,
  COALESCE(opt, 'none') AS opt_or, NULLIF(name, 'bob') AS not_bob, CAST(x AS BIGINT) AS truncated,
  SHA256(name) AS sha, MD5(name) AS md, JSON_VALUE(doc, '$.a') AS doc_a, FROM_BASE64(b64) AS decoded
FROM people WHERE LENGTH(name) > 2;
"""


def _person(i: int) -> dict:
    name = ["anna", "bob", "carla", "al", "dmitri"][i % 5]
    return {"id": i, "name": name, "padded": f"  {name} ", "code": f"{name}_{i * 13}", "csv": "p,q" if i % 3 else "p",
            "n": (i - 7) * (1 if i % 2 else -1), "x": i * 1.005 - 3.0, "ms": 1_700_000_000_000 + i * 3_600_123,
            "doc": json.dumps({"a": f"v{i}"}), "opt": None if i % 4 else f"o{i}",
            "b64": base64.b64encode(f"text {i}".encode()).decode()}


def _expected(p: dict) -> dict:
    """The same columns computed in Python (Spark semantics: HALF_UP rounding, Java % sign, UTC)."""
    name, n, x = p["name"], p["n"], p["x"]
    when = datetime.fromtimestamp(p["ms"] / 1000, tz=timezone.utc)
    return {
        "id": p["id"], "up": name.upper(), "low": name.lower(), "trimmed": p["padded"].strip(), "sub": name[1:4],
        "joined": f"{name}-{n}", "len": len(name), "replaced": name.replace("a", "o"),
        "masked": re.sub("[0-9]+", "#", p["code"]), "digits": p["code"].split("_")[1],
        "padded8": name.rjust(8, "*")[:8], "second": p["csv"].split(",")[1] if "," in p["csv"] else None,
        "absn": abs(n), "rounded": float(Decimal(repr(x)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)),
        "floored": math.floor(x), "ceiled": math.ceil(x), "squared": float(n * n), "modded": int(math.fmod(n, 7)),
        "minute": when.strftime("%Y-%m-%d %H:%M"), "hr": when.hour, "day": when.strftime("%Y-%m-%d"),
        "sign_word": "neg" if n < 0 else "zero" if n == 0 else "pos", "opt_or": p["opt"] or "none",
        "not_bob": None if name == "bob" else name, "truncated": int(x),
        "sha": hashlib.sha256(name.encode()).hexdigest(), "md": hashlib.md5(name.encode()).hexdigest(),
        "doc_a": json.loads(p["doc"])["a"], "decoded": base64.b64decode(p["b64"]).decode(),
    }


@pytest.mark.integration
def test_query_with_many_functions_equals_python_reference(tmp_path, spark, broker) -> None:
    project = streaming_project(tmp_path, broker, QUERY)
    people = [_person(i) for i in range(40)]
    produce(broker, project, "people", people, "name")
    run(spark, project, "shaped", tmp_path)
    got = {r["id"]: r for r in (json.loads(rec["value"]) for rec in records(broker, project, "shaped"))}
    want = {p["id"]: _expected(p) for p in people if len(p["name"]) > 2}
    assert got.keys() == want.keys()
    for key, row in want.items():  # to_json leaves out null fields
        assert {k: v for k, v in got[key].items()} == {k: v for k, v in row.items() if v is not None}, key


def test_docs_list_every_function() -> None:
    from support.projects import REPO

    text = (REPO / "docs" / "project.md").read_text()
    section = text[text.index("\n## Functions"):].split("\n## ", 2)[1]
    listed = set(re.findall(r"`([A-Z_0-9]+)", section))
    assert sorted(set(FUNCTIONS) - listed) == []
