"""The benchmark harness in smoke mode: tiny sizes, real broker and Spark, values checked, no timing.

Keeps bench/ from rotting: every pipeline of the throughput section (dsflow, hand-written
PySpark, plain loop; q0-q2) must write exactly the records the Nexmark generator implies.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import pipelines, report, run  # noqa: E402
from dsflow import nexmark  # noqa: E402

pytestmark = pytest.mark.integration


def test_nexmark_is_deterministic_and_shaped() -> None:
    assert [nexmark.kind_of(n) for n in range(50)].count("bid") == 46
    assert nexmark.event(123, seed=7) == nexmark.event(123, seed=7)
    assert nexmark.event(123, seed=7) != nexmark.event(123, seed=8)
    kind, key, bid = nexmark.event(nexmark.nth_of_kind("bid", 1000))
    assert kind == "bid" and key == str(bid["auction"])
    assert set(bid) == {"auction", "bidder", "price", "channel", "url", "date_time", "extra"}
    assert bid["auction"] <= nexmark.last_auction_id(nexmark.nth_of_kind("bid", 1000))


def test_q1_and_q2_transforms() -> None:
    bids = [("k1", {"auction": 246, "price": 1000, "bidder": 1}), ("k2", {"auction": 247, "price": 10, "bidder": 2})]
    assert pipelines.expected_records("q1", bids)[0][1]["price"] == pytest.approx(908.0)
    assert pipelines.expected_records("q2", bids) == [("k1", {"auction": 246, "price": 1000})]


def test_smoke_run_produces_the_right_records(broker: str, spark, tmp_path: Path) -> None:
    cfg = run.Config.smoke_config()
    results = run.run_all(cfg, broker, spark, tmp_path)
    rows = results["throughput"]
    assert {(r["query"], r["system"]) for r in rows} == {(q, s) for q in pipelines.QUERIES for s in run.SYSTEMS}
    for r in rows:
        assert r["records_out"] == r["expected_out"], r
        assert r["verified"], r
    assert results["preload"]["q2_matches"] > 0
    latency = results["latency"][0]
    assert latency["arrived"] == latency["measured_sent"] > 0
    assert all(t["ok"] for t in results["plan"]), results["plan"]
    text = report.render(results, report.machine())
    assert "| q1 |" in text and "dsflow plan" in text and "q3, q5, q7, q8" in text
