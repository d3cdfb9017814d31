"""Aggregates with FILTER (WHERE ...) (Nexmark q15-q17's form) on real Spark and a real broker, against DuckDB running
the same aggregates with FILTER over the same records.

    per_window  CHANGELOG  10-second TUMBLE windows per channel: COUNT(*), COUNT(x), SUM, AVG, MIN, MAX,
                           COUNT(DISTINCT) and MAX_BY, each with a FILTER, beside an unfiltered COUNT(*)
    per_auction CHANGELOG  over a changelog of bids (updated and deleted: retractions): COUNT(*), SUM and MIN_BY
                           with a FILTER, after every batch

Some prices are NULL: a filter on the price is then not true, and the row is left out, as SQL says (COUNT(*) FILTER
(WHERE price < 50) does not count it). A group whose rows all fail a filter gets COUNT 0 and NULL for the others.
"""

from __future__ import annotations

import random
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dsflow.adapters.spark.retract import STATE_PROVIDER
from support.changelogs import changelog_content, duckdb_answer, keyed_rows, produce_changes
from support.streaming import latest_by_key, produce, running, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000  # epoch ms, a multiple of 10 s
BIDS = "auction BIGINT, bidder BIGINT, price BIGINT, dt BIGINT, channel VARCHAR"
AGGREGATES = """COUNT(*) AS n, COUNT(*) FILTER (WHERE price < 50) AS cheap,
         COUNT(bidder) FILTER (WHERE price >= 50) AS dear,
         SUM(price) FILTER (WHERE auction % 2 = 0) AS even_sum, AVG(price) FILTER (WHERE bidder > 500) AS late_avg,
         MIN(price) FILTER (WHERE channel = 'app') AS app_min, MAX(price) FILTER (WHERE price < 90) AS below_90,
         COUNT(DISTINCT bidder) FILTER (WHERE price >= 50) AS dear_bidders,
         MAX_BY(bidder, price) FILTER (WHERE auction < 4) AS low_auction_winner"""
SQL = f"""\
CREATE STREAM bids ({BIDS}) WITH ('value.format' = 'json', 'timestamp' = 'dt', 'topic.partitions' = 2);
CREATE CHANGELOG bids_now (id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, PRIMARY KEY (id))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);

CREATE CHANGELOG per_window WITH ('watermark.delay' = '5 seconds') AS
  SELECT window_start, window_end, channel, {AGGREGATES}
  FROM TUMBLE(bids, SIZE 10 SECONDS) GROUP BY window_start, window_end, channel;

CREATE CHANGELOG per_auction AS
  SELECT auction, COUNT(*) FILTER (WHERE price > 10) AS over_10, SUM(price) FILTER (WHERE bidder <> 7) AS not_7,
         MIN_BY(bidder, price) FILTER (WHERE price > 10) AS lowest_over_10
  FROM bids_now GROUP BY auction;
"""
PER_WINDOW = (f"SELECT dt - dt % 10000 AS window_start, dt - dt % 10000 + 10000 AS window_end, channel, "
              f"{AGGREGATES.replace('MAX_BY(', 'arg_max_null(')} FROM bids GROUP BY ALL")
PER_AUCTION = ("SELECT auction, COUNT(*) FILTER (WHERE price > 10) AS over_10, SUM(price) FILTER (WHERE bidder <> 7) "
               "AS not_7, arg_min_null(bidder, price) FILTER (WHERE price > 10) AS lowest_over_10 "
               "FROM bids_now GROUP BY auction")


def bids(seed: int = 5) -> list[list[dict]]:
    """Two phases of bids a minute apart (none behind the watermark); prices drawn without repetition (MAX_BY has
    no ties), some NULL."""
    rng = random.Random(seed)
    prices = rng.sample(range(1, 100), 80)
    return [[{"auction": rng.randint(1, 6), "bidder": rng.randint(1, 999),
              "price": None if rng.random() < 0.08 else prices[p * 40 + i],
              "dt": T0 + p * 60_000 + rng.randint(0, 39_999), "channel": rng.choice(["web", "app"])}
             for i in range(40)] for p in range(2)]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _rounded(value: object) -> object:
    return round(value, 9) if isinstance(value, float) else value


def test_filtered_aggregates_in_windows_equal_duckdb(broker, spark):
    work = Path(tempfile.mkdtemp(prefix="dsflow-filter-"))
    project = streaming_project(work, broker, SQL)
    feed = bids()
    with running(spark, project, ["per_window"], work) as caught_up:
        for batch in feed:
            produce(broker, project, "bids", batch, "auction")
            caught_up()
    events = [e for batch in feed for e in batch]
    keys = ("window_start", "window_end", "channel")
    answer = duckdb_answer({"bids": BIDS}, {"bids": events}, PER_WINDOW, keys, _rounded)
    expected = {(iso(s), iso(e), c): {**row, "window_start": iso(s), "window_end": iso(e)}
                for (s, e, c), row in answer.items()}
    assert any(row.get("cheap") == 0 for row in expected.values()) or len(expected) > 4
    actual = keyed_rows(latest_by_key(broker, project, "per_window").values(), keys, _rounded)
    assert actual == expected


CHANGES = [
    [("1", {"id": 1, "auction": 1, "bidder": 7, "price": 50}),
     ("2", {"id": 2, "auction": 1, "bidder": 8, "price": 5}),
     ("3", {"id": 3, "auction": 1, "bidder": 9, "price": 30}), ("4", {"id": 4, "auction": 2, "bidder": 7, "price": 8}),
     ("5", {"id": 5, "auction": 2, "bidder": 3, "price": None})],
    # auction 1's lowest bid over 10 (3: 30) deleted; bidder 7's bid moved to auction 2; auction 2's NULL price set
    [("3", None), ("1", {"id": 1, "auction": 2, "bidder": 7, "price": 60}),
     ("5", {"id": 5, "auction": 2, "bidder": 3, "price": 20}),
     ("6", {"id": 6, "auction": 1, "bidder": 4, "price": 11})],
]


def test_filtered_aggregates_over_a_changelog_are_retracted_as_duckdb(broker, spark):
    work = Path(tempfile.mkdtemp(prefix="dsflow-filter-cl-"))
    project = streaming_project(work, broker, SQL)
    snapshot: dict[str, dict] = {}
    try:
        with running(spark, project, ["per_auction"], work) as caught_up:
            for changes in CHANGES:
                produce_changes(broker, project, "bids_now", changes)
                for key, value in changes:
                    snapshot.pop(key, None) if value is None else snapshot.__setitem__(key, value)
                caught_up()
                content, _ = changelog_content(broker, project, "per_auction")
                expected = duckdb_answer({"bids_now": "id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT"},
                                         {"bids_now": snapshot.values()}, PER_AUCTION, ("auction",))
                assert keyed_rows(content.values(), ("auction",)) == expected, changes
    finally:  # the retracting stages set the session's state store to RocksDB: later tests keep Spark's default
        spark.conf.unset(STATE_PROVIDER)
