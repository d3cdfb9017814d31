"""The type checker's rules (sql/typecheck.py, typerules.py, typeargs.py), each with Spark's own verdict.

Each case is an expression over the stream `v` of tests/support/type_queries.py (id BIGINT, userid VARCHAR, n INT, x
DOUBLE, ts TIMESTAMP, a ARRAY<INT>, m MAP<VARCHAR, INT>, s STRUCT<f INT, g VARCHAR>, b BOOLEAN, d DATE,
p DECIMAL(10, 2)), the codes `dsflow validate` reports on it, and what Spark 4 does with it under ANSI: REFUSES (its
analyzer), FAILS (the analyzer accepts it and the run over tests/support/type_queries.SAMPLE_ROWS fails), ACCEPTS, or
NO_SINK (the analyzer accepts it, and its result column is an INTERVAL, which no sink holds: DSF-E410). The unit test
checks dsflow's codes; the integration test asks Spark, so that a rule is never kept against Spark's verdict (no false
refusal: a case dsflow refuses with a code other than E402/E403/E410 must be one Spark REFUSES).
"""

from __future__ import annotations

import pytest

from support import type_queries as tq
from dsflow.errors import ProjectError
from dsflow.sql.dialect import MAX_MILLISECONDS
from dsflow.load.project import load_project
from support.projects import make_project

REFUSES, FAILS, ACCEPTS, NO_SINK = "refuses", "fails", "accepts", "no sink type"
E402, E403, E404, E409, E410 = "DSF-E402", "DSF-E403", "DSF-E404", "DSF-E409", "DSF-E410"

CASES: list[tuple[str, tuple[str, ...], str]] = [
    # date and time functions given numbers or booleans (YEAR(x) is parsed as YEAR(TO_DATE(x)))
    ("YEAR(5)", (E409,), REFUSES), ("YEAR(2.5)", (E409,), REFUSES), ("WEEKOFYEAR(5)", (E409,), REFUSES),
    ("YEAR('2024-01-01')", (), ACCEPTS), ("YEAR(NULL)", (), ACCEPTS), ("YEAR('x')", (E402,), FAILS),
    ("DATE_FORMAT(5, 'yyyy')", (E409,), REFUSES), ("DATE_FORMAT(b, 'yyyy')", (E409,), REFUSES),
    ("DATE_FORMAT(ts, 5)", (), ACCEPTS), ("DATE_FORMAT(userid, 'yyyy')", (E403,), FAILS),
    ("DATE_TRUNC('HOUR', 5)", (E409,), REFUSES), ("DATE_TRUNC('HOUR', b)", (E409,), REFUSES),
    ("DATEDIFF(ts, 5)", (E409,), REFUSES), ("DATEDIFF(5, ts)", (E409,), REFUSES),
    ("DATEDIFF(ts, b)", (E409,), REFUSES), ("DATEDIFF(ts, NULL)", (), ACCEPTS), ("DATEDIFF(ts, 'x')", (E402,), FAILS),
    ("TIMESTAMPDIFF(SECOND, ts, 5)", (E409,), REFUSES), ("TIMESTAMPDIFF(SECOND, 5, ts)", (E409,), REFUSES),
    ("TIMESTAMPDIFF(SECOND, ts, 'x')", (E402,), FAILS),
    ("FROM_UNIXTIME(ts)", (E409,), REFUSES), ("FROM_UNIXTIME(b)", (E409,), REFUSES),
    ("FROM_UNIXTIME(x)", (), ACCEPTS), ("FROM_UNIXTIME(id, 5)", (), ACCEPTS),
    ("FROM_UNIXTIME(id, a)", (E409,), REFUSES), ("FROM_UNIXTIME(userid)", (E403,), FAILS),
    ("TO_TIMESTAMP_LTZ(x, 3)", (E409,), REFUSES), ("TO_TIMESTAMP_LTZ(userid, 3)", (E409,), REFUSES),
    ("TO_TIMESTAMP_LTZ(2.5, 3)", (E409,), REFUSES), ("TO_TIMESTAMP_LTZ(n, 3)", (), ACCEPTS),
    ("TO_TIMESTAMP_LTZ(x, 0)", (), ACCEPTS), ("TO_TIMESTAMP_LTZ(userid, 0)", (E409,), REFUSES),
    ("TO_TIMESTAMP_LTZ(b, 0)", (E409,), REFUSES), ("TO_TIMESTAMP_LTZ(NULL, 3)", (), ACCEPTS),
    ("UNIX_TIMESTAMP(x, 'yyyy')", (E409,), REFUSES), ("UNIX_TIMESTAMP(b, 'yyyy')", (E409,), REFUSES),
    ("UNIX_TIMESTAMP(ts, 'yyyy')", (), ACCEPTS), ("TO_TIMESTAMP(ts, 'yyyy')", (), ACCEPTS),
    ("TO_TIMESTAMP(a, 'yyyy')", (E409,), REFUSES),
    # DATE_ADD: a TIMESTAMP or DATE, and an INT (not a BIGINT, not a DOUBLE) of days
    ("DATE_ADD(ts, n)", (), ACCEPTS), ("DATE_ADD(ts, -3)", (), ACCEPTS), ("DATE_ADD(ts, NULL)", (), ACCEPTS),
    ("DATE_ADD(ts, CAST(2 AS SMALLINT))", (), ACCEPTS), ("DATE_ADD(ts, '1')", (), ACCEPTS),
    ("DATE_ADD(ts, id)", (E409,), REFUSES), ("DATE_ADD(ts, 3000000000)", (E409,), REFUSES),
    ("DATE_ADD(ts, 2.5)", (E409,), REFUSES), ("DATE_ADD(ts, x)", (E409,), REFUSES),
    ("DATE_ADD(ts, TRUE)", (E409,), REFUSES), ("DATE_ADD(ts, ts)", (E409,), REFUSES),
    ("DATE_ADD(5, 1)", (E409,), REFUSES), ("DATE_ADD(b, 1)", (E409,), REFUSES),
    ("DATE_ADD(ts, COALESCE(n, 0))", (), ACCEPTS), ("DATE_ADD(ts, n + 1)", (), ACCEPTS),
    ("TO_TIMESTAMP_LTZ(ROUND(id), 3)", (), ACCEPTS), ("TO_TIMESTAMP_LTZ(id + 1, 3)", (), ACCEPTS),
    ("DATE_ADD(ts, 'x')", (E402,), FAILS), ("DATE_ADD(ts, userid)", (E403,), FAILS),
    ("DATE_ADD(userid, 1)", (E403,), FAILS),
    # string functions' counts and positions are numbers, their other arguments strings
    ("SUBSTRING(userid, 'x')", (E402,), FAILS), ("SUBSTRING(userid, 2, 'x')", (E402,), FAILS),
    ("SUBSTRING(userid, '2')", (), ACCEPTS), ("SUBSTRING(userid, 2.5)", (), ACCEPTS),
    ("SUBSTRING(userid, id)", (), ACCEPTS), ("SUBSTRING(userid, NULL)", (), ACCEPTS),
    ("SUBSTRING(userid, TRUE)", (E409,), REFUSES), ("SUBSTRING(userid, ts)", (E409,), REFUSES),
    ("SUBSTRING(userid, a)", (E409,), REFUSES), ("SUBSTRING(userid, 1, b)", (E409,), REFUSES),
    ("SUBSTRING(userid, userid)", (E403,), FAILS),
    ("REPEAT(userid, 'x')", (E402,), FAILS), ("REPEAT(userid, x)", (), ACCEPTS),
    ("REPEAT(userid, TRUE)", (E409,), REFUSES), ("REPEAT(userid, ts)", (E409,), REFUSES),
    ("LPAD(userid, 'x', '*')", (E402,), FAILS), ("LPAD(userid, 8, 5)", (), ACCEPTS),
    ("LPAD(userid, 8, ts)", (), ACCEPTS),
    ("LPAD(userid, 8, a)", (E409,), REFUSES), ("LPAD(userid, TRUE, '*')", (E409,), REFUSES),
    ("LEFT(userid, TRUE)", (E409,), REFUSES), ("LEFT(userid, ts)", (E409,), REFUSES),
    ("RIGHT(userid, x)", (), ACCEPTS),
    ("REPLACE(userid, 5, 'b')", (), ACCEPTS), ("REPLACE(userid, a, 'b')", (E409,), REFUSES),
    ("REGEXP_REPLACE(userid, a, 'b')", (E409,), REFUSES), ("REGEXP_EXTRACT(userid, a, 1)", (E409,), REFUSES),
    ("REGEXP_EXTRACT(userid, 'a', TRUE)", (E409,), REFUSES), ("REGEXP_EXTRACT(userid, 'a', 'x')", (E402,), FAILS),
    ("REGEXP_LIKE(userid, a)", (E409,), REFUSES), ("REGEXP_LIKE(userid, 5)", (), ACCEPTS),
    ("SPLIT_INDEX(userid, ',', TRUE)", (E409,), REFUSES), ("SPLIT_INDEX(userid, a, 0)", (E409,), REFUSES),
    ("SPLIT_INDEX(a, ',', 0)", (E409,), REFUSES), ("SPLIT_INDEX(userid, ',', x)", (), ACCEPTS),
    ("SPLIT_INDEX(userid, ',', 'x')", (E402,), FAILS),
    ("LOCATE(a, userid)", (E409,), REFUSES), ("INSTR(userid, a)", (E409,), REFUSES), ("LOCATE(5, userid)", (), ACCEPTS),
    ("CHR(b)", (E409,), REFUSES), ("CHR(ts)", (E409,), REFUSES), ("CHR(userid)", (E403,), FAILS),
    ("ASCII(a)", (E409,), REFUSES), ("ASCII(5)", (), ACCEPTS), ("SPLIT(a, ',')", (E409,), REFUSES),
    ("SPLIT(userid, 5)", (), ACCEPTS),
    ("JSON_VALUE(userid, 5)", (E409,), REFUSES), ("JSON_VALUE(5, '$.a')", (E409,), REFUSES),
    ("JSON_VALUE(b, '$.a')", (E409,), REFUSES), ("JSON_VALUE(userid, NULL)", (), ACCEPTS),
    ("CONCAT_WS(',', a)", (), ACCEPTS), ("CONCAT_WS(',', a, userid)", (), ACCEPTS),
    ("CONCAT_WS(',', ts)", (), ACCEPTS), ("CONCAT_WS(a, userid)", (E409,), REFUSES),
    ("CONCAT_WS(',', m)", (E409,), REFUSES), ("CONCAT_WS(',', s)", (E409,), REFUSES),
    # number functions' second arguments
    ("POWER(x, TRUE)", (E409,), REFUSES), ("POWER(x, ts)", (E409,), REFUSES), ("POWER(x, a)", (E409,), REFUSES),
    ("POWER(x, 'a')", (E402,), FAILS), ("POWER(x, userid)", (E403,), FAILS),
    ("LOG(2, b)", (E409,), REFUSES), ("LOG(x, ts)", (E409,), REFUSES), ("LOG(x, 'x')", (E402,), FAILS),
    ("ROUND(x, n)", (E409,), REFUSES), ("ROUND(x, n + 1)", (E409,), REFUSES), ("ROUND(x, -1)", (), ACCEPTS),
    ("ROUND(x, 1 + 1)", (), ACCEPTS), ("ROUND(x, NULL)", (), ACCEPTS), ("ROUND(x, 2.5)", (), ACCEPTS),
    # CONCAT of ARRAYs and strings, COALESCE of mixed kinds
    ("CONCAT(a, NULL)", (E409,), REFUSES), ("CONCAT(NULL, a)", (E409,), REFUSES), ("a || NULL", (E409,), REFUSES),
    ("CONCAT(a, a)", (), ACCEPTS), ("CONCAT(NULL, NULL)", (), ACCEPTS), ("CONCAT(userid, 5)", (), ACCEPTS),
    ("CONCAT(a, userid)", (E409,), REFUSES), ("COALESCE(ts, 5)", ("DSF-E406",), REFUSES),
    ("COALESCE(id, 'x')", (E402,), FAILS), ("COALESCE(b, 'x')", (E402,), FAILS),
    # BETWEEN is two comparisons: its bounds need no common type
    ("(NOT ('true' BETWEEN TRUE AND 1))", (E402,), FAILS), ("('1' BETWEEN TRUE AND 1)", (), ACCEPTS),
    ("(n BETWEEN 1 AND TRUE)", ("DSF-E401",), REFUSES),
    # arithmetic of a STRUCT, ARRAY or BOOLEAN inside a cast (its operands are not typed by sqlglot there)
    ("TRY_CAST((-3 - s) AS DOUBLE)", (E404,), REFUSES), ("TRY_CAST((s + 1) AS VARCHAR)", (E404,), REFUSES),
    ("CAST((a + 1) AS VARCHAR)", (E404,), REFUSES), ("TRY_CAST((b * 2) AS VARCHAR)", (E404,), REFUSES),
    ("TRY_CAST((-3 - n) AS DOUBLE)", (), ACCEPTS),
    # DATE_ADD's days computed: Spark's width of the result (sql/typewidths.py), not sqlglot's guess
    ("DATE_ADD(ts, id + 1)", (E409,), REFUSES), ("DATE_ADD(ts, COALESCE(n, id))", (E409,), REFUSES),
    ("DATE_ADD(ts, n / 2)", (E409,), REFUSES), ("DATE_ADD(ts, FLOOR(n))", (E409,), REFUSES),
    ("DATE_ADD(ts, n * 2.5)", (E409,), REFUSES), ("DATE_ADD(ts, -id)", (E409,), REFUSES),
    ("DATE_ADD(ts, NULL + NULL)", (E409,), REFUSES), ("DATE_ADD(ts, n + '1')", (E409,), REFUSES),
    ("DATE_ADD(ts, IF(b, n, 3000000000))", (E409,), REFUSES), ("DATE_ADD(ts, FLOOR(2.5))", (E409,), REFUSES),
    ("DATE_ADD(ts, n * 2)", (), ACCEPTS), ("DATE_ADD(ts, LENGTH(userid) + 1)", (), ACCEPTS),
    ("DATE_ADD(ts, IF(b, n, 1))", (), ACCEPTS), ("DATE_ADD(ts, a[1] + n)", (), ACCEPTS),
    ("DATE_ADD(ts, ABS(n))", (), ACCEPTS), ("DATE_ADD(ts, n + NULL)", (), ACCEPTS),
    ("DATE_ADD(ts, CASE WHEN b THEN n ELSE NULL END)", (), ACCEPTS),
    # arithmetic of two strings: Spark casts neither
    ("('1' + '1')", (E404,), REFUSES), ("('1' - '1')", (E404,), REFUSES), ("(userid * '2')", (E404,), REFUSES),
    # INTERVALs: TIMESTAMP - TIMESTAMP is one; no sink column holds it
    ("(ts - ts)", (E410,), NO_SINK), ("((ts - ts) * 2)", (E410,), NO_SINK), ("(- (ts - ts))", (E410,), NO_SINK),
    ("(CAST(ts AS DATE) - CAST(ts AS DATE))", (E410,), NO_SINK), ("((ts - ts) * '2')", (E410,), NO_SINK),
    ("((ts - ts) + 1)", (E404,), REFUSES), ("((ts - ts) % 2)", (E404,), REFUSES),
    ("((ts - ts) * (ts - ts))", (E404,), REFUSES), ("(2 / (ts - ts))", (E404,), REFUSES),
    ("CAST((ts - ts) AS BIGINT)", (), ACCEPTS), ("(ts - (ts - ts))", (), ACCEPTS),
    ("(((ts - ts) / 2) = (ts - ts))", (), ACCEPTS),
    # found by the 5,000-query run: IF casts no string to its condition; string functions give strings
    ("IF('true', -3, id)", ("DSF-E405",), REFUSES), ("CARDINALITY(TRIM(NULL))", (E409,), REFUSES),
    ("(NOT LEFT(x, -3))", (E403,), FAILS), ("(- LEFT(TRUE, a[2]))", (E403,), FAILS),
    ("(NOT SUBSTRING(s->f, id))", (E403,), FAILS),
    # a DATE plus or minus a number is Spark's DATE_ADD/DATE_SUB: days of an INT, SMALLINT or TINYINT
    ("(d + 1)", (), ACCEPTS), ("(n + d)", (), ACCEPTS), ("(d - n)", (), ACCEPTS), ("(d + (n + 1))", (), ACCEPTS),
    ("(d + CAST(2 AS SMALLINT))", (), ACCEPTS), ("(d + a[1])", (), ACCEPTS), ("(d + LENGTH(userid))", (), ACCEPTS),
    ("(d + id)", (E404,), REFUSES), ("(id + d)", (E404,), REFUSES), ("(d - id)", (E404,), REFUSES),
    ("(d + 2.5)", (E404,), REFUSES), ("(d + x)", (E404,), REFUSES), ("(d + p)", (E404,), REFUSES),
    ("(d + (id + 1))", (E404,), REFUSES), ("(d + ROUND(x))", (E404,), REFUSES), ("(d + 3000000000)", (E404,), REFUSES),
    ("(d + FLOOR(n))", (E404,), REFUSES), ("(d - 1e3)", (E404,), REFUSES), ("(1 - d)", (E404,), REFUSES),
    ("(d + '1')", (E404,), REFUSES),
    # DATE and DECIMAL columns elsewhere
    ("(d = ts)", (), ACCEPTS), ("(d = 'x')", ("DSF-E402",), FAILS), ("(d = id)", ("DSF-E401",), REFUSES),
    ("CAST(d AS INT)", ("DSF-E407",), REFUSES), ("CAST(p AS TIMESTAMP)", (), ACCEPTS), ("YEAR(p)", (E409,), REFUSES),
    ("HOUR(d)", (), ACCEPTS), ("(d + (ts - ts))", (), ACCEPTS), ("(p + '1')", (), ACCEPTS),
    ("COALESCE(p, x)", (), ACCEPTS), ("(p BETWEEN 1 AND 'x')", ("DSF-E402",), FAILS),
    # NULL and a TIMESTAMP or DATE: + NULL is a TIMESTAMP, - NULL an INTERVAL, no other operator (run of 5,000, 15:03)
    ("(NULL * d)", (E404,), REFUSES), ("(ts / NULL)", (E404,), REFUSES), ("(NULL % d)", (E404,), REFUSES),
    ("(NULL DIV ts)", (E404,), REFUSES), ("(NULL + d)", (), ACCEPTS), ("(ts + NULL)", (), ACCEPTS),
    ("(d - NULL)", (E410,), NO_SINK), ("(NULL - ts)", (E410,), NO_SINK), ("((d - NULL) > (ts - ts))", (), ACCEPTS),
    # TO_DATE of a collection (YEAR(TO_DATE(a)) too); of a number or a string it is a value error
    ("TO_DATE(a)", (E409,), REFUSES), ("TO_DATE(m)", (E409,), REFUSES), ("TO_DATE(s, 'yyyy')", (E409,), REFUSES),
    ("YEAR(TO_DATE(a))", (E409,), REFUSES), ("TO_DATE(d)", (), ACCEPTS), ("TO_DATE(NULL)", (), ACCEPTS),
    # the false accepts and the false refusal of the run of seed 2 (2026-11-30 15:34): IS NULL is a BOOLEAN, TO_DATE
    # of anything a DATE, NULL IN (...) needs a common type of its list, a TIMESTAMP or DATE minus a string casts it
    ("YEAR((a IS NULL))", (E409,), REFUSES), ("TRY_CAST(((- 5) IS NULL) AS TIMESTAMP)", ("DSF-E407",), REFUSES),
    ("(NULL IN (1, TRUE))", ("DSF-E401",), REFUSES), ("(NULL IN (1, 'x'))", (), ACCEPTS),
    ("(NULL IN (TRUE, 'x'))", (), ACCEPTS), ("CAST(TO_DATE(TRUE) AS DECIMAL(6, 2))", ("DSF-E407",), REFUSES),
    ("CAST(TO_DATE(userid) AS DECIMAL(6, 2))", ("DSF-E407",), REFUSES),
    ("((ts - 'x') > INTERVAL 1 HOUR)", (E402,), FAILS), ("((ts - userid) > INTERVAL 1 HOUR)", (E403,), FAILS),
    ("(ts - '2024-01-01')", (E410,), NO_SINK), ("(d - '2024-01-01')", (E410,), NO_SINK),
    ("(ts + '2024-01-01')", (E404,), REFUSES),
    # the false accepts of the run of seed 3 (2026-11-30 18:27): AND/OR of an untyped NULL and a string (no BOOLEAN
    # side to cast it to), a number function of NULL is a DOUBLE (FLOOR/CEIL a BIGINT)
    ("((NULL AND 'true') IS NULL)", ("DSF-E405",), REFUSES), ("(NULL OR userid)", ("DSF-E405",), REFUSES),
    ("(b AND 'true')", (), ACCEPTS), ("(NULL AND NULL)", (), ACCEPTS), ("(NOT ABS(NULL))", ("DSF-E405",), REFUSES),
    ("(NOT FLOOR(NULL))", ("DSF-E405",), REFUSES), ("ABS(NULL)", (), ACCEPTS), ("CEIL(NULL)", (), ACCEPTS),
]
"""(expression, dsflow's codes, Spark's verdict); Spark's verdicts were read from pyspark 4 and are checked again
by test_spark_agrees."""


@pytest.fixture(scope="module")
def verdicts() -> list[list[str]]:
    codes, _accepted, _project = tq.dsflow_verdicts([("STREAM", f"SELECT {e} AS o FROM v") for e, _, _ in CASES])
    return codes


@pytest.mark.parametrize(("index", "case"), list(enumerate(CASES)), ids=[c[0] for c in CASES])
def test_validate_refuses_what_spark_refuses(verdicts, index, case):
    expression, codes, _spark = case
    assert tuple(verdicts[index]) == codes, expression


def test_no_case_is_a_false_refusal():
    for expression, codes, spark in CASES:
        if spark == ACCEPTS:
            assert codes == (), expression
        elif spark == NO_SINK:
            assert codes == (E410,), expression
        elif spark == FAILS:
            assert codes and all(c in tq.RUNTIME_CODES for c in codes), expression
        else:
            assert codes and not all(c in tq.RUNTIME_CODES for c in codes), expression


@pytest.mark.integration
def test_spark_agrees(spark):
    """Spark's analyzer (and, for FAILS, a run over the sample rows) gives each case the verdict CASES says."""
    tq.prepare(spark)
    wrong = []
    for expression, _codes, expected in CASES:
        sql = f"SELECT {expression} AS o FROM v"
        refused = tq.spark_verdict(spark, tq.untyped_translation(sql, tq.EMPTY))
        found = NO_SINK if refused == tq.NO_SINK_TYPE else REFUSES if refused else None
        if found is None:
            failed = tq.runtime_failure(spark, tq.untyped_translation(sql, tq.ROWS))
            found = FAILS if failed else ACCEPTS
        if found != expected:
            wrong.append((expression, expected, found))
    assert wrong == []


BY_CASES = [("MAX_BY(id, m)", ("DSF-E408",), REFUSES), ("MIN_BY(userid, m)", ("DSF-E408",), REFUSES),
            ("MAX_BY(id, s)", (), ACCEPTS), ("MIN_BY(id, a)", (), ACCEPTS), ("MAX_BY(m, ts)", (), ACCEPTS),
            ("MIN_BY(s, userid)", (), ACCEPTS), ("MAX_BY(NULL, x)", (), ACCEPTS), ("MAX_BY(b, b)", (), ACCEPTS)]
"""MAX_BY/MIN_BY per id (a CHANGELOG grouped by id): any value; an ordering Spark can order (RowOrdering.isOrderable:
a STRUCT or an ARRAY is, a MAP is not)."""


def _by_query(expression: str) -> str:
    return f"SELECT id, {expression} AS o FROM v GROUP BY id"


def test_max_by_orderings_are_refused_as_spark_refuses_them():
    codes, _accepted, _project = tq.dsflow_verdicts([("CHANGELOG", _by_query(e)) for e, _, _ in BY_CASES])
    assert [(e, tuple(c)) for (e, _, _), c in zip(BY_CASES, codes, strict=True)] == [(e, c) for e, c, _ in BY_CASES]


@pytest.mark.integration
def test_spark_agrees_on_max_by_orderings(spark):
    tq.prepare(spark)
    found = [(e, REFUSES if tq.spark_verdict(spark, tq.untyped_translation(_by_query(e), tq.EMPTY))
              else ACCEPTS) for e, _, _ in BY_CASES]
    assert found == [(e, verdict) for e, _, verdict in BY_CASES]


def test_a_problem_inside_a_function_is_reported_once(tmp_path):
    sql = ("CREATE STREAM v (b BOOLEAN, x DOUBLE) WITH ('value.format' = 'json');\n"
           "CREATE STREAM out AS SELECT ABS(b + 1) AS o, SUBSTRING('abc', b + 1) AS p FROM v;\n")
    with pytest.raises(ProjectError) as raised:
        load_project(make_project(tmp_path, {"sql/all.sql": sql}))
    assert [(d.code, d.location.col) for d in raised.value.diagnostics] == [(E404, 33), (E404, 63)]


@pytest.mark.parametrize(("window", "message"), [
    ("HOP(w, SIZE 1 MINUTE, ADVANCE BY 5 MINUTES)", "ADVANCE BY (5 minutes) is longer than its SIZE (1 minutes)"),
    ("TUMBLE(w, SIZE 0.1 MILLISECONDS)", "window SIZE must be a positive duration"),
    ("HOP(w, SIZE 1 MINUTE, ADVANCE BY 0.2 ms)", "window ADVANCE must be a positive duration"),
    ("SESSION(w, GAP 0.4 MILLISECONDS)", "window GAP must be a positive duration"),  # Spark windows no row
    ("HOP(w, SIZE 1 WEEK, ADVANCE BY 500 MILLISECONDS)", "puts each row in 1,209,600 windows"),  # Spark: out of memory
    ("TUMBLE(w, SIZE 9223372036854776 MILLISECONDS)", "is longer than Spark's longest interval"),
    ("HOP(w, SIZE 100000000000 DAYS, ADVANCE BY 1 DAY)", "is longer than Spark's longest interval"),
])
def test_window_bounds_spark_refuses(tmp_path, window, message):
    """Spark's window() refuses a slide longer than the window, and a duration of 0 whole milliseconds; its
    session_window() drops every row of a gap of 0 whole milliseconds."""
    sql = ("CREATE STREAM w (id BIGINT, ts TIMESTAMP) WITH ('value.format' = 'json', 'timestamp' = 'ts');\n"
           f"CREATE CHANGELOG out AS SELECT window_start, window_end, COUNT(*) AS c FROM {window}\n"
           "  GROUP BY window_start, window_end;\n")
    with pytest.raises(ProjectError) as raised:
        load_project(make_project(tmp_path, {"sql/all.sql": sql}))
    [diagnostic] = raised.value.diagnostics
    assert diagnostic.code == "DSF-E032" and message in diagnostic.message, diagnostic


def test_window_bounds_spark_accepts(tmp_path):
    sql = ("CREATE STREAM w (id BIGINT, ts TIMESTAMP) WITH ('value.format' = 'json', 'timestamp' = 'ts');\n"
           "CREATE CHANGELOG out AS SELECT window_start, window_end, COUNT(*) AS c\n"
           "  FROM HOP(w, SIZE 1 MINUTE, ADVANCE BY 7 SECONDS) GROUP BY window_start, window_end;\n"
           "CREATE CHANGELOG out2 AS SELECT window_start, window_end, COUNT(*) AS c\n"
           "  FROM HOP(w, SIZE 1 MINUTE, ADVANCE BY 60 SECONDS) GROUP BY window_start, window_end;\n"
           "CREATE CHANGELOG out3 AS SELECT window_start, window_end, COUNT(*) AS c\n"
           "  FROM HOP(w, SIZE 2 WEEKS, ADVANCE BY 1 WEEK) GROUP BY window_start, window_end;\n")
    queries = load_project(make_project(tmp_path, {"sql/all.sql": sql})).queries
    assert [(q.window.size, q.window.advance) for q in queries] == [  # Spark's window() takes weeks (7 days)
        ("1 minutes", "7 seconds"), ("1 minutes", "60 seconds"), ("2 weeks", "1 weeks")]


JOINED = ("CREATE STREAM w (id BIGINT, ts TIMESTAMP) WITH ('value.format' = 'json', 'timestamp' = 'ts');\n"
          "CREATE STREAM w2 (id BIGINT, ts TIMESTAMP) WITH ('value.format' = 'json', 'timestamp' = 'ts');\n"
          "CREATE STREAM out AS SELECT a.id AS id FROM w a JOIN w2 b WITHIN {within} ON a.id = b.id;\n")


@pytest.mark.parametrize("within", ["100000000000 DAYS", "106751992 DAYS"])
def test_a_within_longer_than_sparks_longest_interval_is_refused(tmp_path, within):
    """The join's event-time range is `b.ts BETWEEN a.ts - INTERVAL n milliseconds AND ...`: Spark fails to parse
    an interval past 2^63 microseconds (INVALID_INTERVAL_FORMAT)."""
    with pytest.raises(ProjectError) as raised:
        load_project(make_project(tmp_path, {"sql/all.sql": JOINED.format(within=within)}))
    [diagnostic] = raised.value.diagnostics
    assert diagnostic.code == "DSF-E032" and "longer than Spark's longest interval" in diagnostic.message, diagnostic


def test_the_longest_within_spark_takes_is_accepted(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/all.sql": JOINED.format(within="106751991 DAYS")}))
    assert [q.join_within for q in project.queries] == ["106751991 days"]


@pytest.mark.integration
def test_sparks_longest_interval(spark):
    """The translator's interval (spark_duration) of the longest WITHIN dsflow takes is one Spark parses; one day more
    is not."""
    from dsflow.adapters.spark.translate import spark_duration

    tq.prepare(spark)
    verdicts = [tq.spark_verdict(spark, f"SELECT ts + INTERVAL {spark_duration(d)} AS o FROM __types_empty")
                for d in ("106751991 days", "106751992 days")]
    assert verdicts[0] is None and "INTERVAL" in (verdicts[1] or ""), verdicts
    assert (MAX_MILLISECONDS - 86_400_000) < 106751991 * 86_400_000 <= MAX_MILLISECONDS


OUTPUT_TYPES = [("CONCAT(a, a)", "ARRAY<INT>"), ("a || a", "ARRAY<INT>"), ("-NULL", "DOUBLE"), ("ROUND(n, 1)", "INT"),
                ("(ROUND(id, 2))", "BIGINT"), ("ROUND(x, 1)", "DOUBLE"), ("CONCAT(userid, 5)", "VARCHAR"),
                # numbers as Spark types them (sql/typewidths.py): DECIMAL literals and arithmetic, widened integers
                ("n * 2.5", "DECIMAL(13, 1)"), ("COALESCE(n, 2.5)", "DECIMAL(11, 1)"),
                ("IF(b, 1, 2.5)", "DECIMAL(11, 1)"), ("id + 2.5", "DECIMAL(22, 1)"), ("2.5 / n", "DECIMAL(13, 12)"),
                ("(2.5 - id) % 5", "DECIMAL(2, 1)"),
                ("(id * 2.5) / (id * 2.5)", "DECIMAL(38, 15)"), ("(n * 2.5) * (n * 2.5) * (n * 2.5) * (n * 2.5)",
                                                                  "DECIMAL(38, 4)"),
                ("ROUND(2.55, 1)", "DECIMAL(3, 1)"), ("FLOOR(2.5)", "DECIMAL(2, 0)"), ("-(n * 2.5)", "DECIMAL(13, 1)"),
                ("x * 2.5", "DOUBLE"), ("n / 2", "DOUBLE"), ("FLOOR(n)", "BIGINT"), ("COALESCE(NULL, 1)", "INT"),
                ("n + '1'", "BIGINT"), ("x + '1'", "DOUBLE"), ("COALESCE(n, '1')", "BIGINT"), ("- '1'", "DOUBLE"),
                ("NULL + NULL", "DOUBLE"), ("LENGTH(userid) + 1", "INT"), ("LEFT(x, 2)", "VARCHAR"),
                ("SUBSTRING(n, 1)", "VARCHAR"),
                ("SUM(n * 2.5)", "DECIMAL(23, 1)"), ("AVG(2.5)", "DECIMAL(6, 5)"), ("SUM(n)", "BIGINT"),
                ("AVG(n)", "DOUBLE"), ("MAX_BY(userid, x)", "VARCHAR"), ("MIN_BY(x, id)", "DOUBLE"),
                ("MAX_BY(a, n)", "ARRAY<INT>"), ("MIN_BY(ts, s)", "TIMESTAMP"),
                ("MAX_BY(n * 2.5, id)", "DECIMAL(13, 1)"),
                # the run of 5,000 queries (15:19): SUM/AVG of a TIMESTAMP or a NULL is a DOUBLE
                ("SUM(ts)", "DOUBLE"), ("AVG(ts)", "DOUBLE"), ("SUM(NULL)", "DOUBLE"), ("SUM(ABS(NULL))", "DOUBLE"),
                ("AVG(NULL)", "DOUBLE"),
                # the run of seed 3 (18:27): `-3` is one literal to Spark (its digits' precision); a number function
                # of NULL a DOUBLE (FLOOR/CEIL a BIGINT)
                ("-3 - p", "DECIMAL(11, 2)"), ("AVG(- (-3 - p))", "DECIMAL(15, 6)"), ("ABS(NULL)", "DOUBLE"),
                ("FLOOR(NULL)", "BIGINT"), ("ROUND(NULL, 2)", "DOUBLE")]
"""A result column's declared type where sqlglot's annotation differs from Spark's (typecheck._result_type); an
aggregate's is read from a CHANGELOG grouped by id."""
AGGREGATES = ("SUM(", "AVG(", "MAX_BY(", "MIN_BY(")


def _output_query(expression: str) -> tuple[str, str]:
    if expression.startswith(AGGREGATES):
        return ("CHANGELOG", f"SELECT id, {expression} AS o FROM v GROUP BY id")
    return ("STREAM", f"SELECT {expression} AS o FROM v")


@pytest.fixture(scope="module")
def typed_outputs():
    batch = [_output_query(e) for e, _ in OUTPUT_TYPES]
    codes, accepted, project = tq.dsflow_verdicts(batch)
    assert codes == [[] for _ in batch]
    return accepted, project


def _declared(query) -> str:
    return next(c.type for c in query.output_columns if c.name == "o")


def test_result_columns_are_declared_with_sparks_type(typed_outputs):
    accepted, _project = typed_outputs
    assert [_declared(accepted[i]) for i in range(len(OUTPUT_TYPES))] == [t for _, t in OUTPUT_TYPES]


@pytest.mark.integration
def test_spark_computes_the_declared_result_types(spark, typed_outputs):
    from dsflow.adapters.spark.translate import spark_select, spark_type, view_name

    tq.prepare(spark)
    accepted, project = typed_outputs
    found = []
    for i, (expression, _) in enumerate(OUTPUT_TYPES):
        query = accepted[i]
        schema = spark.sql(spark_select(query, project).replace(view_name(0, query), tq.EMPTY["v"])).schema
        found.append((expression, spark_type(_declared(query)).upper().replace(" ", ""),
                      schema["o"].dataType.simpleString().upper()))
    assert [f for f in found if f[1] != f[2]] == []
