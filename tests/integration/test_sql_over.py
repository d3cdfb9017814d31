"""Bounded OVER aggregates (sql/over.py, adapters/spark/over.py) on real Spark and a real broker, against DuckDB's
window functions over the same rows: a ROWS frame and a RANGE frame, each with SUM, COUNT(*), COUNT(DISTINCT), AVG,
MIN, MAX and FILTER, over rows of several keys that arrive in three rounds (one running query, several
micro-batches), out of order within the watermark delay, some of them late (behind the watermark when they arrive:
dropped, as Flink drops them) and some with NULL values or tied times.

Every record of a key goes to one partition (keyed by it), so ties in time are ordered by production order, which
DuckDB orders by `seq`. Two records far in the future, of a key of their own, move the watermark past every other
row at the end, so all of them are written. (A WHERE that drops them would not: Spark pushes a filter that does not
read the event time below the watermark, so rows it drops do not move the watermark.)
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from decimal import Decimal

import duckdb
import pytest

from support.streaming import produce, records, running, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
DELAY_MS = 5_000
AGGREGATES = ("SUM(v) {w} AS s, COUNT(*) {w} AS n, COUNT(DISTINCT c) {w} AS d, AVG(v) {w} AS a, MIN(v) {w} AS lo, "
              "MAX(c) {w} AS hi, SUM(v) FILTER (WHERE v > 50) {w} AS big, AVG(m) {w} AS am, MAX(ts) {w} AS last")
FRAMES = {"over_rows": "ROWS BETWEEN 3 PRECEDING AND CURRENT ROW",
          "over_range": "RANGE BETWEEN INTERVAL '4' SECOND PRECEDING AND CURRENT ROW"}
ROWS_OVER, RANGE_OVER = (f"OVER (PARTITION BY k ORDER BY ts {FRAMES[n]})" for n in ("over_rows", "over_range"))
SQL = f"""\
CREATE STREAM events (id BIGINT, k VARCHAR, v BIGINT, c VARCHAR, m DECIMAL(8, 2), ts TIMESTAMP)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE STREAM over_rows AS SELECT id, k, {AGGREGATES.format(w=ROWS_OVER)}
  FROM events WHERE c <> 'w';
CREATE STREAM over_range (id BIGINT, k VARCHAR, s BIGINT, n BIGINT, d BIGINT, a BIGINT, lo BIGINT, hi VARCHAR,
  big BIGINT, am DOUBLE, last TIMESTAMP) WITH ('value.format' = 'json');
INSERT INTO over_range SELECT id, k, {AGGREGATES.format(w=RANGE_OVER)}
  FROM events WHERE c <> 'w';
"""
QUERIES = {"over_rows": "over_rows", "over_range": "over_range_insert_1"}
"""Sink -> its query. over_range is an INSERT INTO a stream that declares `a` a BIGINT and `am` a DOUBLE: Spark's
DOUBLE and DECIMAL(12, 6) averages are stored as those (a BIGINT truncated toward zero)."""
COLUMNS = ("id", "k", "s", "n", "d", "a", "lo", "hi", "big", "am", "last")


def _rounds(seed: int = 7) -> tuple[list[list[dict]], set[int]]:
    """Three rounds of events of keys a, b, c (and their late ones), and the ids of the late ones."""
    rng = random.Random(seed)
    rounds, late, newest, next_id = [], set(), T0, 0
    for round_ in range(3):
        batch = []
        for _ in range(40):
            t = newest + rng.choice([-4_000, -2_000, -1_000, 0, 0, 500, 1_000, 1_000, 2_000])  # within the delay
            t = max(t, newest - DELAY_MS + 1)  # never behind the newest row so far minus the delay: not late
            newest = max(newest, t)
            value = None if rng.random() < 0.1 else rng.randrange(0, 100)
            batch.append(_event(next_id, rng.choice("abc"), value, rng.choice("wxyz"), t))
            next_id += 1
        if round_:
            for key in "abc":  # behind the watermark of the rounds before: dropped
                batch.insert(rng.randrange(len(batch)), _event(next_id, key, 1, "x", T0 + round_ * 100 - 40_000))
                late.add(next_id)
                next_id += 1
        rounds.append(batch)
    return rounds, late


def _event(id_: int, key: str, value: int | None, category: str, t: int) -> dict:
    iso = datetime.fromtimestamp(t / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    amount = round(id_ * 7.31 % 100, 2)  # a DECIMAL(8, 2): AVG is a DECIMAL(12, 6) on Spark, a DOUBLE in DuckDB
    return {"id": id_, "k": key, "v": value, "c": category, "m": amount, "ts": iso}


def _reference(sent: list[dict], late: set[int]) -> dict[str, dict[int, tuple]]:
    con = duckdb.connect()
    con.execute("CREATE TABLE events (seq INT, id BIGINT, k VARCHAR, v BIGINT, c VARCHAR, m DECIMAL(8, 2), "
                "ts TIMESTAMP)")
    con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(i, e["id"], e["k"], e["v"], e["c"], Decimal(str(e["m"])), _time(e["ts"]))
                     for i, e in enumerate(sent) if e["id"] not in late and e["c"] != "w"])
    out = {}
    for name, frame in FRAMES.items():
        order = "ts, seq" if frame.startswith("ROWS") else "ts"
        window = f"OVER (PARTITION BY k ORDER BY {order} {frame})"
        rows = con.execute(f"SELECT id, k, {AGGREGATES.format(w=window)} FROM events").fetchall()
        if name == "over_range":  # a BIGINT sink column: the average truncated toward zero
            rows = [(*r[:5], None if r[5] is None else int(r[5]), *r[6:]) for r in rows]
        out[name] = {r[0]: _normal(r) for r in rows}
    return out


def _time(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", ""))


def _normal(row) -> tuple:
    """Numbers with a fraction rounded to 6 places, times as naive UTC datetimes (DuckDB's TIMESTAMP)."""
    return tuple(round(float(v), 6) if isinstance(v, (float, Decimal)) else v for v in row)


def _dropped_by_watermark(spark, name: str) -> int:
    """The rows Spark's stateful operators of the running query `name` dropped as late, over its recent batches."""
    query = next(q for q in spark.streams.active if q.name and q.name.endswith(name))
    return sum(op.numRowsDroppedByWatermark for p in query.recentProgress for op in p.stateOperators)


def test_over_windows_match_duckdb_window_functions(spark, broker, tmp_path):
    project = streaming_project(tmp_path, broker, SQL)
    rounds, late = _rounds()
    sent: list[dict] = []
    newest = max(datetime.fromisoformat(e["ts"].replace("Z", "")) for r in rounds for e in r).timestamp() * 1000
    flushes = [[_event(10_000 + i, "flush", 0, "x", int(newest) + (i + 1) * 3_600_000)] for i in range(2)]
    with running(spark, project, list(QUERIES.values()), tmp_path) as caught_up:
        for batch in [*rounds, *flushes]:
            produce(broker, project, "events", batch, key="k")
            sent += batch
            caught_up()
        dropped = {name: _dropped_by_watermark(spark, query) for name, query in QUERIES.items()}
    assert dropped == dict.fromkeys(FRAMES, len(late))  # counted as Spark counts late rows
    expected = _reference([e for e in sent if e["k"] != "flush"], late)
    for name in FRAMES:
        got = {}
        for record in records(broker, project, name):
            value = json.loads(record["value"])
            if value["k"] == "flush":  # written once the watermark passes it, which the test does not wait for
                continue
            got[value["id"]] = _normal(tuple(
                _time(value[c]) if c == "last" else float(value[c]) if c == "am" or (c == "a" and name == "over_rows")
                and value.get(c) is not None
                else value.get(c) for c in COLUMNS))
        assert not late & set(got), name  # late rows are dropped
        assert got == expected[name], name
        assert len(got) == len([e for r in rounds for e in r if e["id"] not in late and e["c"] != "w"])
