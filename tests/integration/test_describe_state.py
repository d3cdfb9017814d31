"""`dsflow describe QUERY --state-sample N` (issue 42, item 7): a query's state read from its checkpoint with Spark's
state data source, on Apache Kafka and the session's Spark. A count per user and a count per tumbling window and
page run (availableNow) over generated pageviews; the state must hold one row per group with the count a
plain-Python reading of the records makes, the sample must be rows of it, and a stateless query has none. The
status the driver would write of those runs reports their latency (core/latency.py): the windowed query's event-time
lags are the batch's end, between the test's clock before and after the runs, minus the newest and oldest `ts`
produced; the queries without a watermark have none (unknown, not 0)."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from dsflow.adapters.spark.driver import ExpectationTotals, progress_status
from dsflow.core.engines import engine
from dsflow.engine.describing import describe_text
from support.streaming import _spec, produce, run, streaming_project

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE CHANGELOG per_user AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
CREATE CHANGELOG per_page WITH ('watermark.delay' = '1 hour') AS
  SELECT window_start, window_end, pageid, COUNT(*) AS views
  FROM TUMBLE(pageviews, SIZE 10 SECONDS) GROUP BY window_start, window_end, pageid;
CREATE STREAM copied AS SELECT id, userid FROM pageviews;
CREATE CHANGELOG users (userid VARCHAR, tier VARCHAR, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE CHANGELOG per_tier AS SELECT tier, COUNT(*) AS n FROM users GROUP BY tier;
"""


def test_the_state_sample_is_the_groups_a_python_reading_counts(spark, tmp_path, broker):
    project = streaming_project(tmp_path, broker, SQL)
    rng = random.Random(5)
    events = [{"id": i, "ts": 1_700_000_000_000 + rng.randrange(60_000), "userid": f"u{rng.randrange(9)}",
               "pageid": f"p{rng.randrange(4)}"} for i in range(300)]
    produce(broker, project, "pageviews", events, "userid")
    before = time.time() * 1000
    ran = {name: run(spark, project, name, tmp_path) for name in ("per_user", "per_page", "copied")}
    _latency_is_that_of_the_data(project, tmp_path, ran, events, before, time.time() * 1000)
    checkpoints = Path(tmp_path) / "checkpoints"

    users = engine().state_sample(checkpoints / "per_user", 5)
    assert len(users) == 1 and "error" not in users[0], users
    per_user = Counter(e["userid"] for e in events)
    assert users[0]["rows"] == len(per_user) and users[0]["disk_bytes"] > 0
    assert len(users[0]["sample"]) == 5
    for row in users[0]["sample"]:
        (user,) = row["key"].values()
        assert per_user[user] in row["value"].values(), row  # the count kept for the user is the user's count

    pages = engine().state_sample(checkpoints / "per_page", 100)
    windows = Counter(((e["ts"] // 10_000), e["pageid"]) for e in events)
    assert [op["rows"] for op in pages] == [len(windows)], pages  # one row per open window and page
    assert len(pages[0]["sample"]) == len(windows)

    assert engine().state_sample(checkpoints / "copied", 5) == []  # stateless: no state

    # a GROUP BY over a changelog retracts through transformWithState (adapters/spark/retract.py): its state is read
    # per state variable; the first operator keeps one row per live user, the second one per tier
    tier_of = {f"u{i}": f"t{i % 3}" for i in range(10)}
    produce(broker, project, "users", [{"userid": u, "tier": t} for u, t in tier_of.items()], "userid")
    run(spark, project, "per_tier", tmp_path)
    tiers = engine().state_sample(checkpoints / "per_tier", 3)
    assert tiers and all("error" not in op for op in tiers), tiers
    assert {len(tier_of), len(set(tier_of.values()))} <= {op["rows"] for op in tiers}, tiers
    assert all(row["part"].startswith("variable ") for op in tiers for row in op["sample"])
    text = describe_text({"address": "query.x", "version": "v", "started_at": None, "category": None,
                          "paused": False, "sink": "s", "sql": "SELECT", "sources": [], "checkpoint": "c",
                          "last_committed_batch": 0, "status": {}, "state": users})
    assert f"{len(per_user):,} rows" in text and text.count('"key"') == 5


def _latency_is_that_of_the_data(project, work, ran, events, before: float, after: float) -> None:
    """The latency fields of each run's status, against the produced records and the test's clock."""
    status = {name: progress_status(_spec(project, name, work), query, "stopped", ExpectationTotals(
        _spec(project, name, work))) for name, query in ran.items()}
    windowed = status["per_page"]
    assert isinstance(windowed["latency_batch_id"], int), windowed
    assert 0 < windowed["batch_latency_ms"] <= after - before
    newest, oldest = max(e["ts"] for e in events), min(e["ts"] for e in events)
    assert before - newest <= windowed["event_time_lag_ms"] <= after - newest, (windowed, before, after, newest)
    assert before - oldest <= windowed["oldest_event_lag_ms"] <= after - oldest
    assert windowed["oldest_event_lag_ms"] - windowed["event_time_lag_ms"] == newest - oldest  # one batch read all
    for name in ("per_user", "copied"):  # no watermark: Spark reports no event time
        assert status[name]["batch_latency_ms"] > 0 and status[name]["event_time_lag_ms"] is None, status[name]
        assert status[name]["oldest_event_lag_ms"] is None
