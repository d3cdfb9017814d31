"""MAX_BY / MIN_BY (arg-max, arg-min) on real Spark and a real broker, against DuckDB's arg_max_null /
arg_min_null over the same records.

    top_all    CHANGELOG  without GROUP BY (one row): the auction of the highest bid, the time of the lowest
    winning    CHANGELOG  per auction: the winning bidder (MAX_BY price), the first bidder (MIN_BY event time), the
                          channel of the lowest bid, beside MAX(price) (a Nexmark-style winning bid)
    win_tumble CHANGELOG  the same per auction and 10-second TUMBLE window
    low_hop    CHANGELOG  the lowest bidder per auction and 20-second HOP window (advance 10 s)
    best_now   CHANGELOG  over a changelog of bids (updated and deleted: retractions), MAX_BY and MIN_BY by price and
                          MIN_BY by a TIMESTAMP, after every batch (the last after a restart)

Ties: Spark's MAX_BY gives the value of any of the rows that tie on the ordering, so every ordering here is
tie-free (prices and event times are drawn without repetition); the comparison is then exact. NULLs: some bids
have no bidder (a NULL value is a result: Spark, like DuckDB's arg_max_null, keeps the row of the extreme ordering
whatever its value) and some no price (a NULL ordering: the row is skipped by both); DuckDB's plain arg_max would
skip a NULL value instead, which is not Spark's answer.
"""

from __future__ import annotations

import random
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dsflow.adapters.spark.retract import STATE_PROVIDER
from support.changelogs import changelog_content, duckdb_answer, keyed_rows, produce_changes
from support.streaming import latest_by_key, produce, run, running, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000  # epoch ms, a multiple of 20 s
BIDS = "auction BIGINT, bidder BIGINT, price BIGINT, dt BIGINT, channel VARCHAR"
SQL = f"""\
CREATE STREAM bids ({BIDS}) WITH ('value.format' = 'json', 'timestamp' = 'dt', 'topic.partitions' = 2);
CREATE CHANGELOG bids_now (id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, placed BIGINT, PRIMARY KEY (id))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);

CREATE CHANGELOG winning AS
  SELECT auction, MAX_BY(bidder, price) AS winner, MAX(price) AS top, MIN_BY(bidder, dt) AS first_bidder,
         MIN_BY(channel, price) AS cheap_channel
  FROM bids GROUP BY auction;

CREATE CHANGELOG top_all AS SELECT MAX_BY(auction, price) AS auction, MIN_BY(dt, price) AS dt, COUNT(*) AS n FROM bids;

CREATE CHANGELOG win_tumble WITH ('watermark.delay' = '5 seconds') AS
  SELECT window_start, window_end, auction, MAX_BY(bidder, price) AS winner
  FROM TUMBLE(bids, SIZE 10 SECONDS) GROUP BY window_start, window_end, auction;

CREATE CHANGELOG low_hop WITH ('watermark.delay' = '5 seconds') AS
  SELECT window_start, window_end, auction, MIN_BY(bidder, price) AS low
  FROM HOP(bids, SIZE 20 SECONDS, ADVANCE BY 10 SECONDS) GROUP BY window_start, window_end, auction;

CREATE CHANGELOG best_now AS
  SELECT auction, MAX_BY(bidder, price) AS winner, MIN_BY(bidder, price) AS loser,
         MIN_BY(bidder, TO_TIMESTAMP_LTZ(placed / 1000000.0, 0)) AS earliest, COUNT(*) AS n
  FROM bids_now GROUP BY auction;
"""
WINNING = ("SELECT auction, arg_max_null(bidder, price) AS winner, MAX(price) AS top, "
           "arg_min_null(bidder, dt) AS first_bidder, arg_min_null(channel, price) AS cheap_channel "
           "FROM bids GROUP BY auction")
WINDOWED = ("SELECT w AS window_start, w + {size} AS window_end, auction, {agg}(bidder, price) AS {name} "
            "FROM (SELECT *, UNNEST(range(dt - dt % {slide} - {size} + {slide}, dt + 1, {slide})) AS w FROM bids) "
            "WHERE w >= 0 GROUP BY w, auction")
BEST_NOW = ("SELECT auction, arg_max_null(bidder, price) AS winner, arg_min_null(bidder, price) AS loser, "
            "arg_min_null(bidder, placed) AS earliest, COUNT(*) AS n FROM bids_now GROUP BY auction")


def phases(seed: int = 11) -> list[list[dict]]:
    """Three phases of bids over successive minutes (shuffled within a phase, none behind the watermark): prices
    and event times all distinct (no ties), a few bids without a bidder or without a price."""
    rng = random.Random(seed)
    prices = rng.sample(range(1, 100_000), 360)
    out = []
    for p in range(3):
        times = rng.sample(range(T0 + p * 60_000, T0 + (p + 1) * 60_000), 120)
        batch = [{"auction": rng.randint(1, 6), "bidder": None if rng.random() < 0.05 else rng.randint(100, 999),
                  "price": None if rng.random() < 0.05 else prices[p * 120 + i], "dt": ts,
                  "channel": rng.choice(["web", "app", "partner"])} for i, ts in enumerate(times)]
        out.append(batch)
    out[1][0] |= {"auction": 1, "bidder": None, "price": 100_000}  # the top bid of all has no bidder: a NULL winner
    return out


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_max_by_and_min_by_of_streams_and_windows_equal_duckdb(broker, spark):
    work = Path(tempfile.mkdtemp(prefix="dsflow-maxby-"))
    project = streaming_project(work, broker, SQL)
    feed = phases()
    with running(spark, project, ["winning", "top_all", "win_tumble", "low_hop"], work) as caught_up:
        for batch in feed:
            produce(broker, project, "bids", batch, "auction")
            caught_up()
    events = [e for batch in feed for e in batch]
    assert any(e["bidder"] is None for e in events) and any(e["price"] is None for e in events)
    tables = {"bids": BIDS}
    expected = duckdb_answer(tables, {"bids": events}, WINNING, ("auction",))
    assert "winner" not in expected[(1,)]
    top = duckdb_answer(tables, {"bids": events}, "SELECT arg_max_null(auction, price) AS auction, "
                        "arg_min_null(dt, price) AS dt, COUNT(*) AS n FROM bids", ())
    assert keyed_rows(latest_by_key(broker, project, "top_all").values(), ()) == top
    assert keyed_rows(latest_by_key(broker, project, "winning").values(), ("auction",)) == expected
    for name, agg, size, slide in (("winner", "arg_max_null", 10_000, 10_000), ("low", "arg_min_null", 20_000, 10_000)):
        relation = "win_tumble" if name == "winner" else "low_hop"
        answer = duckdb_answer(tables, {"bids": events}, WINDOWED.format(size=size, slide=slide, agg=agg, name=name),
                               ("window_start", "window_end", "auction"))
        expected = {(iso(s), iso(e), a): {**row, "window_start": iso(s), "window_end": iso(e)}
                    for (s, e, a), row in answer.items()}
        actual = keyed_rows(latest_by_key(broker, project, relation).values(), ("window_start", "window_end",
                                                                                  "auction"))
        assert actual == expected, relation


def _bid(key: int, auction: int, bidder: int | None, price: int | None, micros: int) -> tuple[str, dict]:
    """A bid `placed` (epoch microseconds) `micros` after T0: the bids' times differ by microseconds only, within
    one millisecond (a TIMESTAMP ordering kept to the millisecond would tie them all)."""
    placed = T0 * 1000 + 500 + micros
    return str(key), {"id": key, "auction": auction, "bidder": bidder, "price": price, "placed": placed}


CHANGES = [
    [_bid(1, 1, 101, 50, 5), _bid(2, 1, 102, 70, 3), _bid(3, 1, 103, 20, 9), _bid(4, 2, 201, 10, 1),
     _bid(5, 2, None, 90, 2), _bid(6, 2, 203, None, 0), _bid(7, 3, 301, 5, 4)],
    # the winner of auction 1 (2: 70) deleted, its loser (3: 20) raised above everything; the NULL-bidder winner of
    # auction 2 (5) moved to auction 3; the ordering-less bid (6) given a price; the earliest bid of 1 updated later
    [("2", None), _bid(3, 1, 103, 95, 9), _bid(5, 3, None, 90, 2), _bid(6, 2, 203, 12, 0),
     _bid(1, 1, 101, 50, 20), _bid(8, 1, 108, 1, 30)],
    # auction 3 emptied (a tombstone of its group), auction 1's extremes deleted, an unknown key deleted
    [("5", None), ("7", None), ("3", None), ("8", None), ("99", None), _bid(9, 2, 209, 11, 40)],
    # after a restart (the pairs read back from the checkpoint): auction 2's winner deleted, a new low in 1
    [("9", None), _bid(10, 1, 110, 3, 2), _bid(6, 2, 203, 12, -5)],
]


def test_max_by_and_min_by_over_a_changelog_are_retracted_as_duckdb_after_every_batch(broker, spark):
    work = Path(tempfile.mkdtemp(prefix="dsflow-maxby-cl-"))
    project = streaming_project(work, broker, SQL)
    snapshot: dict[str, dict] = {}
    try:
        with running(spark, project, ["best_now"], work) as caught_up:
            for changes in CHANGES[:-1]:
                _produce(broker, project, snapshot, changes)
                caught_up()
                _check_best_now(broker, project, snapshot, changes)
        _produce(broker, project, snapshot, CHANGES[-1])
        run(spark, project, "best_now", work)  # one availableNow run: the state read back from the checkpoint
        _check_best_now(broker, project, snapshot, CHANGES[-1])
    finally:  # the stages set the session's state store to RocksDB: later tests' new checkpoints keep Spark's default
        spark.conf.unset(STATE_PROVIDER)


def _produce(broker, project, snapshot: dict[str, dict], changes) -> None:
    produce_changes(broker, project, "bids_now", changes)
    for key, value in changes:
        snapshot.pop(key, None) if value is None else snapshot.__setitem__(key, value)


def _check_best_now(broker, project, snapshot: dict[str, dict], changes) -> None:
    content, _ = changelog_content(broker, project, "best_now")
    expected = duckdb_answer({"bids_now": "id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, placed BIGINT"},
                             {"bids_now": snapshot.values()}, BEST_NOW, ("auction",))
    assert keyed_rows(content.values(), ("auction",)) == expected, changes
