"""Joins and aggregations in one query on real Spark and a real broker (issue 46, item 2's first bullet), each
checked against DuckDB over the same events:

- a windowed GROUP BY over an interval join of two streams (TUMBLE over the join's first stream; HOP over a CTE that
  LEFT JOINs, sql/ctes.py inlining it): two stateful operators in one Spark query, in append mode; and a GROUP BY
  without a window over a subquery that joins two streams, in update mode (its final state compared);
- Nexmark q8 in dsflow's window spelling (a join of two windowed aggregations in subqueries) and an aggregate of a
  windowed aggregation read as a CTE (sql/nested.py);
- Nexmark q7's and q5's shapes: a stream joined with a windowed aggregation, bounded in event time by its window
  (sql/window_bound.py: the join's state is dropped), and a subquery that takes the MAX of a windowed count in a
  subquery (whose GROUP BY auction is not selected), joined with a windowed count on the window and `>=`.

Events arrive in phases, one availableNow run each on the query's one checkpoint, shuffled within a phase; a last
phase far ahead in event time moves the watermark so that every window closes. Each window's row must be written
exactly once (append mode: no update of a key), and a run after the last adds nothing.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import datetime, timezone

import duckdb
import pytest

from support.streaming import latest_by_key, produce, records, run, running, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000  # epoch ms, a multiple of 20 s
FLUSH = 90_000  # ids and users from here on move the watermark and are not compared
FAR = (T0 + 1_000_000, T0 + 2_000_000)

JOIN_SQL = """\
CREATE STREAM views (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE STREAM clicks (cid BIGINT, cts BIGINT, userid VARCHAR, target VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'cts', 'topic.partitions' = 2);

CREATE CHANGELOG pair_counts AS
  SELECT window_start, window_end, v.userid, COUNT(*) AS pairs, COUNT(DISTINCT c.target) AS targets,
         MAX(c.cid) AS last_click
  FROM TUMBLE(views, SIZE 10 SECONDS) AS v JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid
  GROUP BY window_start, window_end, v.userid;

CREATE CHANGELOG hop_views AS
  WITH j AS (SELECT v.id, v.userid, c.cid FROM views v LEFT JOIN clicks c WITHIN 5 SECONDS
             ON v.userid = c.userid AND c.target <> 'none')
  SELECT window_start, window_end, userid, COUNT(*) AS n, COUNT(cid) AS matched
  FROM HOP(j, SIZE 20 SECONDS, ADVANCE BY 10 SECONDS) GROUP BY window_start, window_end, userid;

CREATE CHANGELOG user_pairs AS
  SELECT userid, COUNT(*) AS n, COUNT(DISTINCT cid) AS clicks, MAX(target) AS last_target
  FROM (SELECT v.userid, c.cid, c.target FROM views v JOIN clicks c WITHIN 5 SECONDS ON v.userid = c.userid) j
  GROUP BY userid;
"""
JOIN_ORACLE = {
    "pair_counts": "SELECT v.ts - v.ts % 10000 AS ws, v.userid, COUNT(*) AS pairs, COUNT(DISTINCT c.target) AS "
                   "targets, MAX(c.cid) AS last_click FROM views v JOIN clicks c ON v.userid = c.userid "
                   "AND c.cts BETWEEN v.ts - 5000 AND v.ts + 5000 GROUP BY ALL",
    "hop_views": "WITH j AS (SELECT v.ts, v.userid, c.cid FROM views v LEFT JOIN clicks c ON v.userid = c.userid "
                 "AND c.target <> 'none' AND c.cts BETWEEN v.ts - 5000 AND v.ts + 5000) "
                 "SELECT j.ts - j.ts % 10000 - k * 10000 AS ws, userid, COUNT(*) AS n, COUNT(cid) AS matched "
                 "FROM j, (VALUES (0), (1)) AS t(k) GROUP BY ALL",
    "user_pairs": "SELECT v.userid, COUNT(*) AS n, COUNT(DISTINCT c.cid) AS clicks, MAX(c.target) AS last_target FROM "
                  "views v JOIN clicks c ON v.userid = c.userid AND c.cts BETWEEN v.ts - 5000 AND v.ts + 5000 "
                  "GROUP BY ALL",
}
JOIN_TABLES = {"views": "id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR",
               "clicks": "cid BIGINT, cts BIGINT, userid VARCHAR, target VARCHAR"}

NESTED_SQL = """\
CREATE STREAM person (id BIGINT, name VARCHAR, dt BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'dt', 'topic.partitions' = 2);
CREATE STREAM auction (id BIGINT, seller BIGINT, dt BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'dt', 'topic.partitions' = 2);
CREATE STREAM bid (auction BIGINT, price BIGINT, dt BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'dt', 'topic.partitions' = 2);

CREATE STREAM new_sellers AS
  SELECT P.id, P.name, P.starttime
  FROM (SELECT id, name, window_start AS starttime, window_end AS endtime
        FROM TUMBLE(person, SIZE 10 SECONDS) GROUP BY id, name, window_start, window_end) P
  JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
        FROM TUMBLE(auction, SIZE 10 SECONDS) GROUP BY seller, window_start, window_end) A
  ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;

CREATE CHANGELOG busiest AS
  WITH counts AS (SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
                  FROM TUMBLE(bid, SIZE 10 SECONDS) GROUP BY auction, window_start, window_end)
  SELECT starttime, endtime, MAX(num) AS maxn, COUNT(*) AS auctions, SUM(num) AS bids
  FROM counts GROUP BY starttime, endtime;
"""
NESTED_ORACLE = {
    "new_sellers": "SELECT P.id, P.name, P.starttime FROM "
                   "(SELECT id, name, dt - dt % 10000 AS starttime, dt - dt % 10000 + 10000 AS endtime FROM person "
                   "GROUP BY ALL) P JOIN (SELECT seller, dt - dt % 10000 AS starttime, dt - dt % 10000 + 10000 AS "
                   "endtime FROM auction GROUP BY ALL) A "
                   "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
    "busiest": "SELECT starttime, MAX(num) AS maxn, COUNT(*) AS auctions, SUM(num) AS bids FROM "
               "(SELECT auction, COUNT(*) AS num, dt - dt % 10000 AS starttime FROM bid GROUP BY ALL) GROUP BY ALL",
}
NESTED_TABLES = {"person": "id BIGINT, name VARCHAR, dt BIGINT", "auction": "id BIGINT, seller BIGINT, dt BIGINT",
                 "bid": "auction BIGINT, price BIGINT, dt BIGINT"}


BOUNDED_SQL = """\
CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3))
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);

CREATE STREAM highest AS
  SELECT B.auction, B.bidder, B.price, B.ts, B1.st
  FROM bids B
  JOIN (SELECT MAX(price) AS maxprice, window_start AS st, window_end AS et
        FROM TUMBLE(bids, SIZE 10 SECONDS) GROUP BY window_start, window_end) B1
  ON B.price = B1.maxprice AND B.ts >= B1.st AND B.ts < B1.et + INTERVAL '5' SECOND;

CREATE STREAM hot AS
  SELECT A.auction, A.num, A.starttime
  FROM (SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
        FROM HOP(bids, SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) GROUP BY auction, window_start, window_end) A
  JOIN (SELECT MAX(C.num) AS maxn, C.starttime, C.endtime
        FROM (SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
              FROM HOP(bids, SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) GROUP BY auction, window_start, window_end) C
        GROUP BY C.starttime, C.endtime) M
  ON A.starttime = M.starttime AND A.endtime = M.endtime AND A.num >= M.maxn;
"""
BOUNDED_ORACLE = {
    "highest": "WITH W AS (SELECT ts - ts % 10000 AS st, MAX(price) AS maxprice FROM bids GROUP BY ALL) "
               "SELECT B.auction, B.bidder, B.price, B.ts, W.st FROM bids B JOIN W ON B.price = W.maxprice "
               "AND B.ts >= W.st AND B.ts < W.st + 15000",
    "hot": "WITH C AS (SELECT auction, ts - ts % 5000 - k * 5000 AS starttime, COUNT(*) AS num "
           "FROM bids, (VALUES (0), (1)) AS t(k) GROUP BY ALL) "
           "SELECT C.auction, C.num, C.starttime FROM C "
           "JOIN (SELECT starttime, MAX(num) AS maxn FROM C GROUP BY ALL) M "
           "ON C.starttime = M.starttime AND C.num >= M.maxn",
}


def ms(text: str) -> int:
    """A window bound as the sink writes it ('2023-11-14T22:13:20.000Z') in epoch ms."""
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def duckdb_rows(tables: dict[str, str], data: dict[str, list[dict]], select: str) -> list[tuple]:
    con = duckdb.connect()
    for name, columns in tables.items():
        con.execute(f"CREATE TABLE {name} ({columns})")
        names = [c.split()[0] for c in columns.split(", ")]
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(names))})",
                        [[row[n] for n in names] for row in data[name]])
    return con.execute(select).fetchall()


def join_phases(seed: int = 5) -> list[dict[str, list[dict]]]:
    """Three phases of a minute of views and clicks, shuffled; the last with a far event of each, then a phase of
    farther ones."""
    rng = random.Random(seed)
    phases = []
    for p in range(3):
        base = T0 + p * 60_000
        views = [{"id": p * 1000 + i, "ts": base + rng.randrange(60_000), "userid": f"u{rng.randrange(6)}",
                  "pageid": rng.choice("xyz")} for i in range(40)]
        clicks = [{"cid": p * 1000 + i, "cts": base + rng.randrange(60_000), "userid": f"u{rng.randrange(6)}",
                   "target": rng.choice(["a", "b", "none"])} for i in range(40)]
        rng.shuffle(views)
        rng.shuffle(clicks)
        phases.append({"views": views, "clicks": clicks})
    for p, at in enumerate(FAR):
        flush = {"views": [{"id": FLUSH + p, "ts": at, "userid": "flush", "pageid": "x"}],
                 "clicks": [{"cid": FLUSH + p, "cts": at, "userid": "flush", "target": "a"}]}
        if p == 0:
            phases[-1] = {k: phases[-1][k] + flush[k] for k in flush}
        else:
            phases.append(flush)
    return phases


def nested_phases(seed: int = 8) -> list[dict[str, list[dict]]]:
    """Three phases of persons, their auctions (half in a person's 10-second window) and bids; then far ones."""
    rng = random.Random(seed)
    phases, people = [], []
    for p in range(3):
        base = T0 + p * 60_000
        persons = [{"id": p * 100 + i, "name": f"n{p * 100 + i}", "dt": base + rng.randrange(60_000)}
                   for i in range(15)]
        people += persons
        auctions = []
        for i in range(30):
            seller = rng.choice(people + [{"id": 999, "dt": base}])
            near = min(max(seller["dt"] + rng.randrange(-3_000, 3_000), base), base + 59_999)
            auctions.append({"id": p * 100 + i, "seller": seller["id"],
                             "dt": near if rng.random() < 0.5 else base + rng.randrange(60_000)})
        bids = [{"auction": rng.randrange(1, 7), "price": rng.randrange(100, 200), "dt": base + rng.randrange(60_000)}
                for _ in range(60)]
        for rows in (persons, auctions, bids):
            rng.shuffle(rows)
        phases.append({"person": persons, "auction": auctions, "bid": bids})
    for p, at in enumerate(FAR):
        flush = {"person": [{"id": FLUSH + p, "name": "flush", "dt": at}],
                 "auction": [{"id": FLUSH + p, "seller": FLUSH + p, "dt": at}],
                 "bid": [{"auction": FLUSH + p, "price": 1, "dt": at}]}
        if p == 0:
            phases[-1] = {k: phases[-1][k] + flush[k] for k in flush}
        else:
            phases.append(flush)
    return phases


def feed(broker, spark, project, phases, names, work) -> dict[str, list[dict]]:
    """Each phase produced, then each query run once; everything produced, without the far events."""
    for phase in phases:
        for relation, rows in phase.items():
            produce(broker, project, relation, rows)
        for name in names:
            run(spark, project, name, work)
    return {relation: [r for phase in phases for r in phase[relation]
                       if all(r.get(k, 0) < FLUSH for k in ("id", "cid", "seller", "auction"))]
            for relation in phases[0]}


def appended(broker, project, name: str, keys: tuple[str, ...]) -> list[dict]:
    """The sink's records as rows, each key written once (append mode); the far windows left out."""
    rows = [json.loads(r["value"]) for r in records(broker, project, name)]
    written = Counter(tuple(row[k] for k in keys) for row in rows)
    assert not [k for k, n in written.items() if n > 1], f"{name}: a window written twice"
    return [row for row in rows if ms(row[keys[0]]) < FAR[0] - 60_000]


def test_a_windowed_group_by_over_an_interval_join_equals_duckdb(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, JOIN_SQL)
    names = ("pair_counts", "hop_views", "user_pairs")
    data = feed(broker, spark, project, join_phases(), names, tmp_path)
    expected = Counter(duckdb_rows(JOIN_TABLES, data, JOIN_ORACLE["pair_counts"]))
    rows = appended(broker, project, "pair_counts", ("window_start", "window_end", "userid"))
    assert all(ms(r["window_end"]) - ms(r["window_start"]) == 10_000 for r in rows)
    assert Counter((ms(r["window_start"]), r["userid"], r["pairs"], r["targets"], r["last_click"]) for r in rows) \
        == expected and sum(expected.values()) > 30
    expected = Counter(duckdb_rows(JOIN_TABLES, data, JOIN_ORACLE["hop_views"]))
    rows = appended(broker, project, "hop_views", ("window_start", "window_end", "userid"))
    assert Counter((ms(r["window_start"]), r["userid"], r["n"], r["matched"]) for r in rows) == expected
    assert any(n > matched for _, _, n, matched in expected)  # views without a click are counted (LEFT)
    expected = {row[0]: row for row in duckdb_rows(JOIN_TABLES, data, JOIN_ORACLE["user_pairs"])}
    final = {k: v for k, v in latest_by_key(broker, project, "user_pairs").items() if k != "flush"}
    assert {k: (v["userid"], v["n"], v["clicks"], v["last_target"]) for k, v in final.items()} == expected
    before = len(records(broker, project, "pair_counts"))
    run(spark, project, "pair_counts", tmp_path)
    assert len(records(broker, project, "pair_counts")) == before


def test_windowed_aggregations_in_subqueries_and_ctes_equal_duckdb(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, NESTED_SQL)
    data = feed(broker, spark, project, nested_phases(), ("new_sellers", "busiest"), tmp_path)
    expected = Counter(duckdb_rows(NESTED_TABLES, data, NESTED_ORACLE["new_sellers"]))
    rows = appended(broker, project, "new_sellers", ("starttime", "id"))
    assert Counter((r["id"], r["name"], ms(r["starttime"])) for r in rows) == expected
    assert sum(expected.values()) > 5
    expected = Counter(duckdb_rows(NESTED_TABLES, data, NESTED_ORACLE["busiest"]))
    rows = appended(broker, project, "busiest", ("starttime", "endtime"))
    assert Counter((ms(r["starttime"]), r["maxn"], r["auctions"], r["bids"]) for r in rows) == expected
    assert len(expected) >= 15
    before = len(records(broker, project, "new_sellers"))
    run(spark, project, "new_sellers", tmp_path)
    assert len(records(broker, project, "new_sellers")) == before


def bid_phases(seed: int = 3) -> list[list[dict]]:
    """Two phases of a minute of bids (a few prices, so that the highest is often tied, within a window and in the
    5 seconds after it), shuffled, the second with a far bid (auction FLUSH) that closes every window before it: a
    window of the first phase's last seconds is closed in the second, its bids kept in state until then."""
    rng = random.Random(seed)
    phases = []
    for p in range(2):
        base = T0 + p * 60_000
        bids = [{"auction": rng.randrange(1, 5), "bidder": p * 1000 + i, "price": rng.randrange(100, 104),
                 "ts": base + rng.randrange(60_000)} for i in range(60)]
        rng.shuffle(bids)
        phases.append(bids)
    return phases[:-1] + [phases[-1] + [{"auction": FLUSH, "bidder": FLUSH, "price": 1, "ts": FAR[0]}]]


def test_a_stream_joined_with_windowed_subqueries_equals_duckdb(tmp_path, broker, spark):
    """Nexmark q7's shape (a stream joined with a windowed MAX, bounded by its window: the join's state is dropped,
    not kept for ever) and q5's (a windowed count joined on its window with the MAX of a windowed count in a
    subquery in a subquery), over bids arriving in several micro-batches, against DuckDB."""
    project = streaming_project(tmp_path, broker, BOUNDED_SQL)
    phases = bid_phases()
    with running(spark, project, ["highest", "hot"], tmp_path) as caught_up:  # one start, a round per phase
        for phase in phases:
            produce(broker, project, "bids", [{**b, "ts": _iso(b["ts"])} for b in phase])
            caught_up()
        (joined,) = [q for q in spark.streams.active if (q.name or "").endswith("_highest")]
        joins = [op for op in joined.lastProgress["stateOperators"] if op["operatorName"] == "symmetricHashJoin"]
    sent = {"bids": [b for phase in phases for b in phase if b["auction"] < FLUSH]}
    tables = {"bids": "auction BIGINT, bidder BIGINT, price BIGINT, ts BIGINT"}
    expected = Counter(duckdb_rows(tables, sent, BOUNDED_ORACLE["highest"]))
    rows = [json.loads(r["value"]) for r in records(broker, project, "highest")]
    got = Counter((r["auction"], r["bidder"], r["price"], ms(r["ts"]), ms(r["st"]))
                  for r in rows if r["auction"] < FLUSH)
    assert got == expected
    assert any(ts >= st + 10_000 for _, _, _, ts, st in expected)  # a bid after its window, joined with it
    assert len({st for *_, st in expected}) == 12 and sum(expected.values()) > 20
    assert joins and joins[0]["numRowsTotal"] <= 2  # the far bid (and its window): the 120 bids were dropped
    expected = Counter(duckdb_rows(tables, sent, BOUNDED_ORACLE["hot"]))
    rows = appended(broker, project, "hot", ("starttime", "auction"))
    assert Counter((r["auction"], r["num"], ms(r["starttime"])) for r in rows) == expected
    assert len({start for *_, start in expected}) == 25 and any(n > 1 for n in Counter(
        start for *_, start in expected).values())  # every window, ties of several auctions in some


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
