"""A grammar of DeltaStream statements for the project fuzzer (tests/unit/test_fuzz_project.py,
bench/fuzz_statements.py).

Every statement kind (CREATE STREAM/CHANGELOG with columns, CREATE STREAM/CHANGELOG/TABLE/MATERIALIZED VIEW AS
SELECT, INSERT INTO, and forms dsflow does not support) over the relations of example_project and names it does not
know, with functions of the allow-list and others, called with right and wrong numbers of arguments, windows, joins,
aggregates, CTEs, UNION, subqueries and window functions: statements a user could write, right or wrong, rather than
mutated bytes. Each must end in success or diagnostics, never a traceback.
"""

from __future__ import annotations

from hypothesis import strategies as st

from dsflow.sql.functions import FUNCTIONS

RELATIONS = ["pageviews", "users", "analytics.public.pageviews", "curated.pageviews_filtered", "nope", "curated.nope",
             "a.b.c.d", "fz_1", "fz_2", "\"pageviews\"", "PAGEVIEWS"]
COLUMNS = ["id", "viewtime", "userid", "pageid", "registertime", "regionid", "gender", "nope", "p.id", "u.userid",
           "x.y", "p.nope", "window_start", "window_end", "ID", "`id`"]
LITERALS = ["1", "0", "-1", "2.5", "'x'", "'Page_1'", "NULL", "TRUE", "''", "1e400", "99999999999999999999",
            "DATE '2024-01-01'", "TIMESTAMP '2024-01-01 00:00:00'", "INTERVAL '1' MINUTE", "ARRAY[1, 2]"]
TYPES = ["BIGINT", "INT", "VARCHAR", "DOUBLE", "BOOLEAN", "TIMESTAMP", "DATE", "ARRAY<INT>", "MAP<VARCHAR, INT>",
         "STRUCT<a INT, b VARCHAR>", "FOO", "DECIMAL(10, 2)", "DECIMAL(99, 99)", "VARCHAR(5)", "ARRAY<ARRAY<INT>>",
         "BYTES", "TIMESTAMP_LTZ(3)"]
FUNCTION_NAMES = sorted(FUNCTIONS) + ["FOO", "ROW_NUMBER", "ARRAY_AGG", "COLLECT_LIST", "EXPLODE", "UNNEST",
                                      "COUNT", "SUM", "MIN", "MAX", "AVG", "TUMBLE", "HOP"]
PROPERTIES = ["'topic' = 'fz'", "'value.format' = 'json'", "'value.format' = 'avro'", "'value.format' = 'nope'",
              "'store' = 'nope'", "'store' = 'kafka_main'", "'topic.partitions' = 0", "'topic.partitions' = 'x'",
              "'topic.partitions' = 3", "'timestamp' = 'nope'", "'timestamp' = 'viewtime'", "'key.format' = 'json'",
              "'delivery.guarantee' = 'x'", "'dlq.topic' = 'dlq'", "'trigger.interval' = 'x'",
              "'watermark.delay' = '1 minute'", "'unknown' = 1", "'starting.position' = 'latest'",
              "'runtime.isolation' = 'query'", "'lifecycle.prevent_destroy' = 'maybe'", "'owner' = 'nobody'",
              "'value.schema.compatibility' = 'x'", "'topic.replicas' = -1", "'topic.shards' = 2"]
DURATIONS = ["1 MINUTE", "10 SECONDS", "0 SECONDS", "-1 SECONDS", "1 FORTNIGHT", "x", "1.5 HOURS", ""]
NAMES = ["fz_1", "fz_2", "curated.fz_3", "pageviews", "nope.fz", "a.b.c.d", "\"fz q\"", "fz_1"]

WINDOW_PARTS = ["SIZE", "ADVANCE BY", "GAP"]
GROUP_WINDOW = " GROUP BY window_start, window_end"

ops = st.sampled_from


def _calls(e: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(ops(FUNCTION_NAMES), st.lists(e, max_size=4)).map(lambda t: f"{t[0]}({', '.join(t[1])})")


def _extend(e: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        _calls(e), _calls(e),
        st.tuples(e, ops(["+", "-", "*", "/", "%", "=", "<>", "<", ">=", "AND", "OR", "||", "LIKE"]), e)
        .map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        e.map(lambda x: f"NOT {x}"), e.map(lambda x: f"({x})"), e.map(lambda x: f"{x} IS NULL"),
        st.tuples(ops(["CAST", "TRY_CAST"]), e, ops(TYPES)).map(lambda t: f"{t[0]}({t[1]} AS {t[2]})"),
        st.tuples(e, e, e).map(lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END"),
        st.tuples(e, e).map(lambda t: f"CASE {t[0]} WHEN {t[1]} THEN 1 END"),
        st.tuples(e, e).map(lambda t: f"{t[0]}[{t[1]}]"), e.map(lambda x: f"{x}->a"),
        st.tuples(e, st.lists(e, min_size=1, max_size=3)).map(lambda t: f"{t[0]} IN ({', '.join(t[1])})"),
        st.tuples(e, e, e).map(lambda t: f"{t[0]} BETWEEN {t[1]} AND {t[2]}"),
        e.map(lambda x: f"COUNT(DISTINCT {x})"), e.map(lambda x: f"{x} OVER (PARTITION BY id)"),
        e.map(lambda x: f"(SELECT {x} FROM pageviews)"), e.map(lambda x: f"EXISTS (SELECT {x})"),
        ops(["*", "p.*", "COUNT(*)", "EXTRACT(HOUR FROM viewtime)", "POSITION('a' IN userid)"]),
    )


expressions = st.recursive(st.one_of(ops(COLUMNS), ops(LITERALS)), _extend, max_leaves=4)
simple = st.recursive(st.one_of(ops(COLUMNS[:8]), ops(LITERALS[:7])), lambda e: st.one_of(
    _calls(e), st.tuples(e, ops(["+", "=", "<", "AND", "||"]), e).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
    st.tuples(e, ops(TYPES[:7])).map(lambda t: f"CAST({t[0]} AS {t[1]})")), max_leaves=3)
"""Expressions nearer to valid ones: known columns, the common operators, one function."""


def _relation(name: str, alias: str | None) -> str:
    return f"{name} {alias}" if alias else name


sources = st.one_of(
    st.tuples(ops(RELATIONS), ops([None, "p", "u"])).map(lambda t: _relation(*t)),
    st.tuples(ops(["TUMBLE", "HOP", "SESSION"]), ops(RELATIONS), st.lists(ops(DURATIONS), max_size=3))
    .map(lambda t: f"{t[0]}({t[1]}" + "".join(f", {k} {d}" for k, d in zip(WINDOW_PARTS, t[2], strict=False))
         + ")"),
    st.tuples(ops(RELATIONS), ops(PROPERTIES)).map(lambda t: f"{t[0]} WITH ({t[1]})"),
)
joins = st.tuples(ops(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN", "INNER JOIN"]),
                  ops(RELATIONS), ops([None, "u", "q"]), ops([None, *DURATIONS]), st.one_of(st.none(), expressions)) \
    .map(lambda t: f" {t[0]} {_relation(t[1], t[2])}" + (f" WITHIN {t[3]}" if t[3] is not None else "")
         + (f" ON {t[4]}" if t[4] is not None else ""))
projections = st.lists(st.tuples(expressions, ops([None, "c", "id", "o", "c"])), min_size=0, max_size=4).map(
    lambda items: ", ".join(e + (f" AS {a}" if a else "") for e, a in items))
selects = st.tuples(
    ops(["", "DISTINCT "]), projections, sources, st.lists(joins, max_size=3), st.one_of(st.none(), expressions),
    st.lists(expressions, max_size=3), st.one_of(st.none(), expressions),
    ops(["", " LIMIT 5", " ORDER BY id", " UNION ALL SELECT id FROM pageviews", " UNION SELECT 1"]),
).map(lambda t: f"SELECT {t[0]}{t[1]} FROM {t[2]}{''.join(t[3])}" + (f" WHERE {t[4]}" if t[4] else "")
      + (f" GROUP BY {', '.join(t[5])}" if t[5] else "") + (f" HAVING {t[6]}" if t[6] else "") + t[7])
near_valid = st.tuples(st.lists(st.tuples(simple, ops(["c", "d", "id", "n"])), min_size=1, max_size=3),
                       ops(["pageviews", "users", "pageviews p", "TUMBLE(pageviews, SIZE 1 MINUTE)", "nope"]),
                       st.one_of(st.none(), simple), ops(["", " GROUP BY userid", GROUP_WINDOW])) \
    .map(lambda t: f"SELECT {', '.join(f'{e} AS {a}' for e, a in t[0])} FROM {t[1]}"
         + (f" WHERE {t[2]}" if t[2] else "") + t[3])
queries = st.one_of(near_valid, near_valid, selects, selects.map(lambda s: f"WITH c AS ({s}) SELECT * FROM c"))
properties = st.lists(ops(PROPERTIES), max_size=4).map(lambda p: f" WITH ({', '.join(p)})" if p else "")
column_lists = st.lists(st.tuples(ops(COLUMNS[:8] + ["fz", "id"]), ops(TYPES)), max_size=5).map(
    lambda cs: ", ".join(f"{c} {t}" for c, t in cs))
keys = st.lists(ops(COLUMNS[:8]), max_size=2).map(lambda ks: f", PRIMARY KEY ({', '.join(ks)})" if ks else "")

statements = st.one_of(
    st.tuples(ops(NAMES), column_lists, properties).map(lambda t: f"CREATE STREAM {t[0]} ({t[1]}){t[2]};"),
    st.tuples(ops(NAMES), column_lists, keys, properties)
    .map(lambda t: f"CREATE CHANGELOG {t[0]} ({t[1]}{t[2]}){t[3]};"),
    st.tuples(ops(["STREAM", "CHANGELOG", "TABLE", "MATERIALIZED VIEW"]), ops(NAMES), properties, queries,
              ops(["", " PARTITION BY id", " PARTITION BY nope"]))
    .map(lambda t: f"CREATE {t[0]} {t[1]}{t[2]} AS {t[3]}{t[4]};"),
    st.tuples(ops(RELATIONS), properties, queries).map(lambda t: f"INSERT INTO {t[0]}{t[1]} {t[2]};"),
    st.tuples(ops(["DROP STREAM", "CREATE VIEW", "ALTER STREAM", "CREATE STREAM", "CREATE TABLE", "SELECT",
                   "DESCRIBE", "CREATE CHANGELOG", "INSERT INTO"]), ops(NAMES), queries)
    .map(lambda t: f"{t[0]} {t[1]} AS {t[2]};" if t[0].startswith("CREATE") else f"{t[0]} {t[1]};"),
)
"""One statement, ending with ';'."""
