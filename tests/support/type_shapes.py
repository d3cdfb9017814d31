"""More statement shapes for the differential test of validate's type checker (tests/support/type_queries.py):
`CREATE TABLE ... AS SELECT` into a lake store, joins of two changelogs (and of two streams aggregated, which dsflow
runs as a join of changelogs, sql/keyed_join.py), and windows of generated bounds, with Spark's verdict on each.

- **CREATE TABLE ... AS SELECT** writes a Delta table of the store `lake` (a filesystem store): the SELECT is a
  stream's projection or an aggregate per `id`, translated and analysed as a stream's or a changelog's.
- **Joins of two changelogs** (`c`, keyed by `cid`, and `u`, keyed by `uid`; INNER, LEFT, FULL, ON keys of the same
  type, of types Spark casts one to the other, or of types it cannot compare, a generated WHERE), and joins of `v`
  and `w2` aggregated per `v.id`: the runtime joins in stateful functions (adapters/spark/changelog_join.py), so
  Spark's verdict is its analyzer on the join written as SQL over the empty views, as for temporal joins.
- **Window bounds**: TUMBLE's SIZE, HOP's SIZE and ADVANCE BY, SESSION's GAP (and Flink's TABLE(TUMBLE(...)) and
  TABLE(HOP(...)) with INTERVAL literals) drawn valid and invalid: zero, under a millisecond, negative, an ADVANCE
  longer than the SIZE, no unit, a string, an INTERVAL literal, units dsflow has not (WEEK, MONTH). The runtime
  computes the window on the source's DataFrame (`F.window(__ts, size, slide)`, `F.session_window(__ts, gap)`,
  adapters/spark/frames.py), outside the SELECT; Spark's verdict is its analyzer on `window(ts, size, slide)` with
  the durations the translator writes (`translate.spark_duration`: whole milliseconds) or, for a bound dsflow does
  not take, its text as written. Spark's analyzer takes any session gap; it drops every row whose gap is not a
  positive interval (`session_window` over the sample rows gives no window), which counts as its refusal.
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

U = {"uid": "BIGINT", "uk": "VARCHAR", "ux": "DOUBLE", "uts": "TIMESTAMP"}
U_DDL = "uid BIGINT, uk STRING, ux DOUBLE, uts TIMESTAMP"
U_ROWS = [(7, "abc", 7.0, "2024-01-01 10:00:00"), (12, "7", 12.0, "2024-06-30 23:00:00"),
          (2, "5x", None, None), (None, None, None, None)]
"""The rows of the changelog `u` (keyed by `uid`) the changelog `c` (C_ROWS) joins: each key of CHANGELOG_KEYS
Spark can compare matches a row, and one key is not a number."""
CHANGELOG_KEYS = ["c.cid = u.uid", "c.ck = u.uk", "c.cid = u.ux", "c.ck = u.uid", "c.cts = u.uts", "c.cts = u.uid",
                  "c.cx = u.uid", "c.cid = u.uk AND c.ck = u.uk"]
"""ON of a join of two changelogs: on `u`'s whole primary key (a foreign-key join) or not (many to many), of the same
type, of types Spark casts one to the other, of types it cannot compare."""
SIDES = ["JOIN", "LEFT JOIN", "FULL JOIN"]
LAKE_STORE = "stores:\n  - name: lake\n    type: filesystem\n    properties:\n      path: lake\n"
"""The store `CREATE TABLE ... AS SELECT` writes (stores/lake.yml of the generated project)."""

DURATIONS = ["1 MINUTE", "30 SECONDS", "10 SECONDS", "2 HOURS", "1.5 SECONDS", "500 MILLISECONDS", "1 DAY",
             "1 MINUTE", "30 SECONDS", "0 SECONDS", "0.4 MILLISECONDS", "-1 MINUTE", "5", "'1 minute'",
             "INTERVAL '1' MINUTE", "1 WEEK", "1 MONTH", "3 FORTNIGHTS"]
"""Window bounds in dsflow's spelling (`SIZE d`): valid ones twice as often, then zero, under a millisecond,
negative, no unit, a string, an INTERVAL literal, and units dsflow has not."""
FLINK_DURATIONS = ["INTERVAL '1' MINUTE", "INTERVAL '30' SECOND", "INTERVAL '10' SECOND", "INTERVAL '0' SECOND",
                   "INTERVAL '-1' MINUTE", "INTERVAL '1' MONTH", "'1 minute'", "1 MINUTE"]
"""Window bounds in Flink's window table functions (INTERVAL literals)."""
NOT_IN_GRAMMAR = "DISAGREE (documented): a window bound the dialect does not parse (DSF-E002), Spark's window() takes"
"""A bound written as a string or an INTERVAL literal in dsflow's spelling (`SIZE '1 minute'`, `SIZE INTERVAL '1'
MINUTE`), or without INTERVAL in Flink's (`DESCRIPTOR(ts), 1 MINUTE`): the dialect refuses it where it parses,
Spark's window() takes the duration it says (docs/validate.md)."""


def _window(kind: str, size: str, advance: str) -> str:
    if kind == "TUMBLE":
        return f"TUMBLE(v, SIZE {size})"
    if kind == "HOP":
        return f"HOP(v, SIZE {size}, ADVANCE BY {advance})"
    if kind == "SESSION":
        return f"SESSION(v, GAP {size})"
    if kind == "FLINK TUMBLE":
        return f"TABLE(TUMBLE(TABLE v, DESCRIPTOR(ts), {size}))"
    return f"TABLE(HOP(TABLE v, DESCRIPTOR(ts), {advance}, {size}))"  # Flink's HOP: the slide, then the size


windows = st.one_of(
    st.tuples(st.sampled_from(["TUMBLE", "HOP", "SESSION"]), st.sampled_from(DURATIONS), st.sampled_from(DURATIONS)),
    st.tuples(st.sampled_from(["FLINK TUMBLE", "FLINK HOP"]), st.sampled_from(FLINK_DURATIONS),
              st.sampled_from(FLINK_DURATIONS))).map(lambda t: _window(*t))
WINDOW_SHAPES = [
    (re.compile(r"FROM TUMBLE\(v, SIZE (?P<size>[^,)]+)\)"), "tumble"),
    (re.compile(r"FROM HOP\(v, SIZE (?P<size>[^,)]+), ADVANCE BY (?P<advance>[^,)]+)\)"), "hop"),
    (re.compile(r"FROM SESSION\(v, GAP (?P<size>[^,)]+)\)"), "session"),
    (re.compile(r"FROM TABLE\(TUMBLE\(TABLE v, DESCRIPTOR\(ts\), (?P<size>[^,)]+)\)\)"), "tumble"),
    (re.compile(r"FROM TABLE\(HOP\(TABLE v, DESCRIPTOR\(ts\), (?P<advance>[^,)]+), (?P<size>[^,)]+)\)\)"), "hop"),
]
"""A generated query's window: its kind and the text of its bounds (`windows` writes them)."""


def table_queries(stream_select: st.SearchStrategy[str], expressions: st.SearchStrategy[str],
                  aggregates: list[str]) -> st.SearchStrategy[tuple[str, str]]:
    """CREATE TABLE ... AS SELECT into `lake`: a stream's projection, or an aggregate per `id` (merged by it)."""
    aggregated = st.tuples(st.sampled_from(aggregates), expressions).map(
        lambda t: f"SELECT id, {t[0]}({t[1]}) AS o FROM v GROUP BY id")
    return st.one_of(stream_select, aggregated).map(lambda sql: ("TABLE", sql))


def changelog_join_queries(leaves: st.SearchStrategy[str], literals: list[str], extend, changelog: dict[str, str],
                           aggregates: list[str]) -> st.SearchStrategy[tuple[str, str]]:
    """Joins of the changelogs `c` and `u` (the key columns of both selected; names of both, literals), and of the
    streams `v` and `w2` aggregated per `v.id` (sql/keyed_join.py; `v`'s leaves too), with generated projections
    and conditions."""
    names = st.sampled_from([*changelog, *changelog, *U, *U, "c.cid", "u.ux", "c.ck", "u.nope", "nope"])
    joined = st.recursive(st.one_of(st.sampled_from(literals), names), extend, max_leaves=3)
    changelogs = st.tuples(joined, st.sampled_from(SIDES), st.sampled_from(CHANGELOG_KEYS),
                           st.one_of(st.none(), joined)).map(
        lambda t: f"SELECT c.cid, u.uid, {t[0]} AS o FROM c {t[1]} u ON {t[2]}" + (f" WHERE {t[3]}" if t[3] else ""))
    stream_names = st.sampled_from(["wid", "wk", "wx", "v.id", "w2.wx", "w2.nope"])
    stream_expressions = st.recursive(st.one_of(leaves, stream_names), extend, max_leaves=3)
    streams = st.tuples(st.sampled_from(aggregates), stream_expressions,
                        st.sampled_from(["v.id = w2.wid", "v.userid = w2.wk", "v.x = w2.wx", "v.userid = w2.wid",
                                         "v.ts = w2.wid"])).map(
        lambda t: f"SELECT v.id, {t[0]}({t[1]}) AS o FROM v JOIN w2 ON {t[2]} GROUP BY v.id")
    return st.one_of(changelogs, changelogs, streams).map(lambda sql: ("CHANGELOG", sql))


def windowed_bound_queries(expressions: st.SearchStrategy[str],
                           aggregates: list[str]) -> st.SearchStrategy[tuple[str, str]]:
    """Windowed aggregates per `id` over windows of generated bounds (`windows`; a SESSION is per key, DSF-E161): half
    of them of a valid aggregate, so that the verdict is the bounds'."""
    aggregated = st.one_of(st.sampled_from(["COUNT(*)", "SUM(id)", "MAX(x)", "MIN(userid)"]),
                           st.tuples(st.sampled_from(aggregates), expressions).map(lambda t: f"{t[0]}({t[1]})"))
    return st.tuples(windows, aggregated).map(
        lambda t: ("CHANGELOG", f"SELECT window_start, window_end, id, {t[1]} AS o FROM {t[0]} "
                                "GROUP BY window_start, window_end, id"))


def window_of(sql: str) -> tuple[str, str, str | None, re.Match] | None:
    """(kind, size text, advance text, where it is written) of a generated query's window; None without one."""
    for pattern, kind in WINDOW_SHAPES:
        found = pattern.search(sql)
        if found:
            return kind, found.group("size").strip(), found.groupdict().get("advance"), found
    return None


def plain_window(sql: str) -> str:
    """The query with its window written `TUMBLE(v, SIZE 1 MINUTE)`: the SELECT Spark's analyzer is given reads
    the window from the source view's __window column whatever its bounds (they are compared on their own)."""
    window = window_of(sql)
    return sql if window is None else sql[:window[3].start()] + "FROM TUMBLE(v, SIZE 1 MINUTE)" + sql[window[3].end():]


def spark_bound(text: str) -> str:
    """A bound as the translator gives it to Spark: whole milliseconds (translate.spark_duration) of a duration
    dsflow reads (`1.5 SECONDS`, Flink's `INTERVAL '10' SECOND`), else its text as written (`5`, `-1 minute`)."""
    from dsflow.adapters.spark.translate import spark_duration
    from dsflow.sql.dialect import normalized_duration

    written = text.strip()
    literal = re.fullmatch(r"INTERVAL\s+'([^']*)'\s+(\w+)", written, re.I)
    if literal:
        written = f"{literal.group(1)} {literal.group(2)}"
    elif written.startswith("'") and written.endswith("'"):
        written = written[1:-1]
    duration = normalized_duration(written)
    try:
        return spark_duration(duration) if duration else written.lower()
    except (KeyError, ValueError):
        return written.lower()


def window_refusal(spark, sql: str, query=None) -> str | None:
    """Spark's verdict on the query's window: None if it windows rows with the bounds the translator gives it (the
    accepted query's own, translate._window_spec), else why not."""
    from dsflow.adapters.spark.translate import _window_spec

    window = window_of(sql)
    if window is None:
        return None
    kind, size, advance, _ = window
    if query is not None and query.window is not None:
        spec = _window_spec(query.window, query.window.source)
        bounds = [spec["session_gap"]] if "session_gap" in spec else spec["window"]
    else:
        bounds = [spark_bound(size)] + ([spark_bound(advance)] if advance else [])
    quoted = ", ".join("'" + b.replace("'", "''") + "'" for b in bounds)
    if kind == "session":
        return _session_refusal(spark, quoted)
    from support.type_queries import _analysis

    error = _analysis(spark, f"SELECT window(ts, {quoted}) AS w FROM __types_empty")[0]
    return None if error is None else f"window: {error[:160]}"


def _session_refusal(spark, gap: str) -> str | None:
    try:
        windowed = spark.sql(f"SELECT session_window(ts, {gap}) AS w, COUNT(*) AS n FROM __types_rows "
                             f"WHERE ts IS NOT NULL GROUP BY session_window(ts, {gap})").collect()
    except Exception as error:  # noqa: BLE001
        return "session window: " + str(error).split("\n")[0][:160]
    return None if windowed else f"session window: a gap of {gap} windows no row (Spark drops them)"


def prepare(spark, sample) -> None:
    """The empty and sample-row views of the changelog `u` (as type_queries.prepare makes the others)."""
    for name, data in (("__types_u_empty", []), ("__types_u_rows", [tuple(sample(4 if i == 3 else -1, v)
                                                                            for i, v in enumerate(r))
                                                                      for r in U_ROWS])):
        spark.createDataFrame(data, U_DDL).createOrReplaceTempView(f"{name}_plain")
        spark.sql(f"SELECT *, CAST(NULL AS STRING) AS __key, uts AS __ts, "
                  f"named_struct('start', uts, 'end', uts + INTERVAL 1 MINUTE) AS __window "
                  f"FROM {name}_plain").createOrReplaceTempView(name)
