"""Bounded OVER aggregates in validate (sql/over.py): the shape accepted over a stream (its model, output types and
Spark spec), each variant refused at its file:line:col (DSF-E188 the shape, DSF-E189 an updating input); and the
per-key state of adapters/spark/over_state.py against a plain-Python reference, over any cut of the rows into
micro-batches (hypothesis). Pure: no broker, no Spark (tests/integration/test_sql_over.py runs it)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsflow.adapters.spark.over_state import aggregates, step, timer_at
from dsflow.adapters.spark.translate import query_spec
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = """\
CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, amount DECIMAL(10, 2), name VARCHAR, dt TIMESTAMP)
  WITH ('value.format' = 'json', 'timestamp' = 'dt');
CREATE STREAM untimed (auction BIGINT, price BIGINT, dt TIMESTAMP) WITH ('value.format' = 'json');
CREATE CHANGELOG bids_now (id BIGINT, auction BIGINT, price BIGINT, dt TIMESTAMP, PRIMARY KEY (id))
  WITH ('value.format' = 'json', 'timestamp' = 'dt');
"""
ROWS = "OVER (PARTITION BY auction ORDER BY dt ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)"
RANGE = "OVER (PARTITION BY auction ORDER BY dt RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)"


def problems(tmp_path, sql: str) -> list[tuple[str, int, int, str, str]]:
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    return [(d.code, d.location.line, d.location.col, d.message, d.hint or "") for d in check_project(root).diagnostics]


def test_over_aggregates_of_a_stream_load_typed_with_their_spark_spec(tmp_path):
    sql = (f"CREATE STREAM moving AS SELECT auction, price, SUM(price) {ROWS} AS s, AVG(amount) FILTER (WHERE price "
           f"> 3) {ROWS} AS a,\n  COUNT(DISTINCT bidder) {ROWS} AS n, COUNT(*) {ROWS} AS c, MAX(dt) {ROWS} AS m "
           "FROM bids WHERE price > 0;\n"
           f"CREATE STREAM recent AS SELECT auction, MIN(name) {RANGE} AS lo FROM bids;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    moving, recent = sorted(project.queries, key=lambda q: q.fqn)
    assert moving.over is not None and (moving.over.partition, moving.over.order, moving.over.frame,
                                        moving.over.preceding) == (("auction",), "dt", "rows", 2)
    assert (recent.over.frame, recent.over.preceding) == ("range", 10_000)
    assert [(c.name, c.type) for c in moving.output_columns] == [
        ("auction", "BIGINT"), ("price", "BIGINT"), ("s", "BIGINT"), ("a", "DECIMAL(14, 6)"), ("n", "BIGINT"),
        ("c", "BIGINT"), ("m", "TIMESTAMP")]
    assert (moving.stateful, moving.output_mode, moving.key_columns) == (True, "append", ())
    spec = query_spec(project, moving, "v1", "/tmp/checkpoint", "/tmp/status")
    assert spec.over is not None and [a["function"] for a in spec.over.aggregates] == [
        "sum", "avg", "count_distinct", "count_star", "max"]
    assert spec.over.columns[:3] == [("auction", None), ("price", None), ("s", 0)]
    assert "OVER" not in spec.select_sql and "COALESCE((`bids`.`price` > 3), FALSE) AS __f1" in spec.select_sql
    assert "WHERE `bids`.`price` > 0" in spec.select_sql
    source = spec.sources[0]
    assert (source.event_time, source.watermark_delay, source.keep_position) == ("`dt`", "5000 milliseconds", True)


@pytest.mark.parametrize(("query", "code", "col", "words"), [
    ("SELECT auction, SUM(price) OVER (PARTITION BY auction ORDER BY dt ROWS BETWEEN UNBOUNDED PRECEDING AND "
     "CURRENT ROW) AS s FROM bids", "DSF-E188", 17, "UNBOUNDED PRECEDING keeps every row"),
    ("SELECT auction, SUM(price) OVER (PARTITION BY auction ORDER BY dt) AS s FROM bids", "DSF-E188", 17,
     "needs a bounded frame"),
    ("SELECT auction, SUM(price) OVER (PARTITION BY auction ORDER BY dt ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) "
     "AS s FROM bids", "DSF-E188", 17, "waits for rows after the current one"),
    (f"SELECT auction, SUM(price) {ROWS.replace('ORDER BY dt', 'ORDER BY price')} AS s FROM bids", "DSF-E188", 64,
     "ordered by the stream's event time alone (its column dt)"),
    (f"SELECT auction, SUM(price) {ROWS.replace('ORDER BY dt', 'ORDER BY dt DESC')} AS s FROM bids", "DSF-E188", 64,
     "ORDER BY dt DESC"),
    (f"SELECT auction, SUM(price) {ROWS} AS s FROM untimed", "DSF-E188", 64, "it declares none"),
    (f"SELECT auction, SUM(price) {ROWS} AS s, MIN(price) {RANGE} AS m FROM bids", "DSF-E188", 115,
     "the OVER windows of a query differ"),
    (f"SELECT auction, SUM(price) {ROWS} + 1 AS s FROM bids", "DSF-E188", 17, "inside an expression"),
    (f"SELECT auction, SUM(name) {ROWS} AS s FROM bids", "DSF-E188", 21, "SUM takes a number"),
    (f"SELECT auction, STDDEV(price) {ROWS} AS s FROM bids", "DSF-E188", 17, "is not supported"),
    (f"SELECT auction, SUM(price) {ROWS} AS s, MAX(price) AS m FROM bids", "DSF-E188", 115, "without OVER"),
    (f"SELECT auction, SUM(price) {ROWS} AS s FROM bids GROUP BY auction, price, dt", "DSF-E188", 133,
     "takes no GROUP BY"),
    (f"SELECT a.auction, SUM(a.price) {ROWS} AS s FROM bids a JOIN bids b WITHIN 1 MINUTE ON a.auction = b.auction",
     "DSF-E188", 19, "reads one stream"),
    (f"SELECT auction, SUM(price) {ROWS} AS s FROM bids_now", "DSF-E189", 17, "over the changelog 'bids_now'"),
    (f"SELECT auction, SUM(price) {ROWS} AS s FROM (SELECT auction, MAX(price) AS price, MAX(dt) AS dt FROM bids "
     "GROUP BY auction) q", "DSF-E189", 17, "an aggregating subquery"),
    (f"SELECT auction, SUM(price) {ROWS} AS s FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price "
     "DESC) AS rn FROM bids) WHERE rn <= 1", "DSF-E189", 17, "a ROW_NUMBER top-N subquery"),
])
def test_a_variant_is_refused_at_its_place(tmp_path, query, code, col, words):
    prefix = "CREATE STREAM o AS "
    found = problems(tmp_path, f"{prefix}{query};\n")
    assert [(c, ln, cl) for c, ln, cl, *_ in found] == [(code, 1, col + len(prefix))], found
    assert words in found[0][3]
    assert found[0][4]  # a hint


def test_a_row_number_at_the_top_stays_unsupported(tmp_path):
    found = problems(tmp_path, "CREATE STREAM o AS SELECT auction, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY "
                               "price) AS rn FROM bids;\n")
    assert [c for c, *_ in found] == ["DSF-E045"]


def _row(t: int, place: int, value, passes: bool = True, count: int = 7) -> list:
    """A row whose `count` aggregates all take `value` and `passes` (the state's inputs, over_state.py)."""
    inputs = {k: v for i in range(count) for k, v in ((f"__a{i}", value), (f"__f{i}", passes))}
    return [t, 0, place, json.dumps({"id": place}), json.dumps(inputs)]


FUNCTIONS = ("sum", "count", "count_star", "count_distinct", "avg", "min", "max")
SPECS = [{"function": f, "number": "integral"} for f in FUNCTIONS]


def _plain(members: list[list]) -> dict[str, str | None]:
    """The aggregates of a frame, written out plainly (FILTER drops a row; NULLs are skipped)."""
    kept = [json.loads(m[4]) for m in members]
    kept = [k["__a0"] for k in kept if k["__f0"]]
    values = [v for v in kept if v is not None]
    found = {"sum": sum(values) if values else None, "count": len(values), "count_star": len(kept),
             "count_distinct": len(set(values)), "avg": sum(values) / len(values) if values else None,
             "min": min(values, default=None), "max": max(values, default=None)}
    return {f"a{i}": None if found[f] is None else repr(found[f]) if f == "avg" else str(found[f])
            for i, f in enumerate(FUNCTIONS)}


def _reference(rows: list[list], frame: str, preceding: int, watermark_ms: int) -> dict[int, dict]:
    """Each row at or before the watermark with the aggregates of its frame, computed from all the rows at once."""
    ordered = sorted(rows, key=lambda r: (r[0], r[1], r[2]))
    out = {}
    for index, row in enumerate(ordered):
        if row[0] > watermark_ms * 1000:
            continue
        if frame == "rows":
            members = ordered[max(0, index - preceding):index + 1]
        else:
            members = [r for r in ordered if row[0] - preceding * 1000 <= r[0] <= row[0]]
        out[json.loads(row[3])["id"]] = _plain(members)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.one_of(st.none(), st.integers(-5, 5)), st.booleans()),
                min_size=1, max_size=25),
       st.lists(st.integers(1, 6), min_size=1, max_size=6), st.sampled_from(["rows", "range"]), st.integers(0, 4))
def test_the_state_writes_each_row_with_its_frame_however_the_rows_arrive(events, cuts, frame, preceding):
    """Rows arrive in batches, the watermark moving to each batch's newest time minus 3 ms (late rows: dropped):
    what is written equals the reference over the rows that were not late."""
    over = {"frame": frame, "preceding": preceding, "aggregates": SPECS}
    rows = [_row(t * 1000, i, v, passes) for i, (t, v, passes) in enumerate(events)]
    pending: list = []
    kept: list = []
    written: dict[int, dict] = {}
    accepted: list = []
    watermark, start = -1, 0
    for size in [*cuts, len(rows)]:
        batch, start = rows[start:start + size], start + size
        accepted += [r for r in batch if r[0] > watermark * 1000]
        pending, kept, out = step(pending, kept, batch, watermark, over)
        written.update({json.loads(r)["id"]: json.loads(a) for r, a in out})
        if batch:
            watermark = max(watermark, max(r[0] for r in batch) // 1000 - 3)
    pending, kept, out = step(pending, kept, [], watermark, over)
    written.update({json.loads(r)["id"]: json.loads(a) for r, a in out})
    assert written == _reference(accepted, frame, preceding, watermark)
    assert all(r[0] > watermark * 1000 for r in pending)
    assert len(kept) <= (preceding if frame == "rows" else len(rows))


def test_aggregates_follow_sql_null_filter_and_decimal_rules():
    rows = [_row(1, 0, None, count=6), _row(2, 1, "2.50", count=6), _row(3, 2, "1.25", passes=False, count=6),
            _row(4, 3, "2.50", count=6)]
    for row in rows:  # numbers in JSON, as Spark's to_json writes a DECIMAL
        row[4] = row[4].replace('"2.50"', "2.50").replace('"1.25"', "1.25")
    specs = [{"function": f, "number": "decimal"} for f in ("sum", "avg", "count", "count_star", "count_distinct",
                                                             "min")]
    got = json.loads(aggregates(rows, specs))
    assert got == {"a0": "5.00", "a1": format(Decimal("5.00") / 2, "f"), "a2": "2", "a3": "3", "a4": "1",
                   "a5": "2.50"}
    assert json.loads(aggregates(rows[:1], specs)) == {"a0": None, "a1": None, "a2": "0", "a3": "1", "a4": "0",
                                                       "a5": None}


def test_a_timer_fires_once_the_watermark_reaches_the_row_and_is_never_behind_it():
    assert timer_at(5_000_500, 10) == 5_000  # 5,000.5 ms: fires once the watermark is 5,001 ms
    assert timer_at(5_000_000, 10) == 4_999  # fires once the watermark is 5,000 ms, the row's time
    assert timer_at(5_000_000, 4_999) == 5_000  # never at the watermark now: a later scan starts after it


def test_an_insert_names_an_unnamed_over_aggregate_by_its_place_and_stores_it_as_the_sink_declares(tmp_path):
    """Nexmark q6's spelling over a stream: `AVG(price) OVER (...)` without AS into a sink's BIGINT column."""
    sql = ("CREATE STREAM sink (auction BIGINT, avg_price BIGINT) WITH ('value.format' = 'json');\n"
           f"INSERT INTO sink SELECT auction, AVG(price) {RANGE} FROM bids;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    (query,) = project.queries
    assert [(c.name, c.type) for c in query.output_columns] == [("auction", "BIGINT"), ("avg_price", "BIGINT")]
    spec = query_spec(project, query, "v1", "/tmp/checkpoint", "/tmp/status")
    assert spec.over is not None and spec.over.aggregates == [{"function": "avg", "type": "BIGINT"}]
    assert spec.over.columns[:2] == [("auction", None), ("avg_price", 0)] and "OVER" not in spec.select_sql
