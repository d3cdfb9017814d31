"""The benchmark harness in smoke mode: tiny sizes, real broker and Spark, values checked, no timing.

Keeps bench/ from rotting: every pipeline of the throughput section (dsflow, hand-written
PySpark, and for q0-q2 the plain loop; Nexmark q0-q3, q5, q7, q8) must write exactly the records
a plain Python reference computes from the generator's events; the latency probe and plan-scale
(tiny generated projects) must run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import pipelines, recovery, report, run, shared_drivers  # noqa: E402
from dsflow.datagen import nexmark  # noqa: E402

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


def test_stateful_references() -> None:
    events = list(nexmark.events(0, 3_000))
    q7 = pipelines.expected_stateful("q7", events)
    bids = [r for kind, _, r in events if kind == "bid"]
    assert len(q7) == 1 and q7[0][1]["bids"] == len(bids) and q7[0][1]["maxprice"] == max(b["price"] for b in bids)
    q5 = pipelines.expected_stateful("q5", events)
    assert sum(r["num"] for _, r in q5) == 5 * len(bids)  # every bid is in 5 windows of 10 s sliding by 2 s
    q8 = pipelines.expected_stateful("q8", events)
    assert q8 and all(r["person_time"] // 10_000 == r["auction_time"] // 10_000 for _, r in q8)
    assert all(r["state"] in ("OR", "ID", "CA") for _, r in pipelines.expected_stateful("q3", events))


def test_smoke_run_produces_the_right_records(broker: str, spark, tmp_path: Path) -> None:
    cfg = run.Config.smoke_config()
    results = run.run_all(cfg, broker, spark, tmp_path)
    rows = results["throughput"]
    assert {(r["query"], r["system"]) for r in rows} == {(q, s) for q in pipelines.QUERIES for s in run.systems_of(q)}
    for r in rows:
        assert r["records_in"] == r["expected_in"], r
        assert r["expected_out"] is None or r["records_out"] == r["expected_out"], r
        assert r["records_out"] > 0 and r["verified"], r
    assert results["preload"]["q2_matches"] > 0
    latency, joined = results["latency"]
    assert latency["arrived"] == latency["measured_sent"] > 0
    assert joined["query"] == "q8" and joined["measure"] == "join" and joined["sent"] > 0, joined
    assert {(t["tool"], t["size"]) for t in results["plan"]} == {
        ("dsflow plan, no cache", 20), ("dsflow validate", 20), ("dsflow plan --no-refresh", 20)}
    assert latency["undelivered"] == 0
    assert all(t["ok"] for t in results["plan"]), results["plan"]
    text = report.render(results, report.machine(), "")
    assert "| q1 currency conversion |" in text and "| q5 hot items" in text and "dsflow plan" in text
    assert text.rstrip().endswith(report.HAND_WRITTEN)
    _recovery_reads_real_checkpoints(tmp_path)


def _recovery_reads_real_checkpoints(work: Path) -> None:
    """bench/recovery.py times batches from a checkpoint's offsets log (trigger time) and commit files: on the
    checkpoints the runs above left, every committed batch has a start no later than its commit."""
    checkpoints = [p for p in work.glob("ckpt-*-dsflow-*") if (p / "commits").is_dir()]
    assert checkpoints
    for checkpoint in checkpoints:
        commits = recovery.batch_files(checkpoint, "commits")
        assert commits and set(commits) <= set(recovery.batch_files(checkpoint, "offsets"))
        batches = recovery.measured_batches(checkpoint, 0.0)
        assert set(batches) == set(commits) and all(0 < start <= end for start, end in batches.values())
        assert recovery.first_commit_after(checkpoint, 0.0) == min(commits.values())
        assert recovery.first_commit_after(checkpoint, max(commits.values())) is None


def test_recovery_accounting_against_plain_python() -> None:
    produced = set(range(100))
    found = [i for i in range(100) if i not in (7, 40)] + [3, 3, 99, 1000]
    assert recovery.account(produced, found) == {"lost": 2, "first_lost": 7, "duplicates": 3, "unexpected": 1}
    assert recovery.kept(0, 30) == {i for i in range(30) if i % 10 != 3} and len(recovery.kept(5, 300_000)) == 270_000
    rows = [{"mode": "query", "records_out_per_s": 100}, {"mode": "query", "records_out_per_s": 120},
            {"mode": "shared", "records_out_per_s": 99}]
    found = recovery.summary(rows)
    assert found["query"]["median"] == 110 and found["shared_vs_alone_median_pct"] == -10.0


@pytest.mark.parametrize("shape", ["example", "simple", "stateful", "recovery-stateful"])
def test_the_bench_projects_are_valid(tmp_path: Path, shape: str) -> None:
    """bench/shared_drivers.py's and bench/recovery.py's projects, checked as `dsflow validate` does."""
    from dsflow.load.project import check_project

    shared_drivers.write_project(tmp_path, "shared", 3, "127.0.0.1:9", 10, "t",
                                 "simple" if shape == "recovery-stateful" else shape)
    if shape == "recovery-stateful":
        (tmp_path / "sql" / "all.sql").write_text(recovery.stateful_sql(3))
    result = check_project(tmp_path, None, {})
    assert not result.errors, [d.to_dict() for d in result.diagnostics]
    outputs = {r.name: r.kind for r in result.project.relations if r.name.startswith("out_")}
    kind = "changelog" if "stateful" in shape else "stream"
    assert outputs == {f"out_{i}": kind for i in range(3)} and len(result.project.queries) == 3


def test_a_sink_difference_names_what_is_missing_and_what_is_not_expected() -> None:
    expected = pipelines.canonical([("k1", {"num": 1}), ("k2", {"num": 2}), ("k3", {"num": 3})])
    got = pipelines.canonical([("k1", {"num": 1}), ("k2", {"num": 5})])
    text = pipelines.sink_difference(got, expected, read=2)
    assert "(2 vs 3, from 2 records read)" in text
    assert "2 missing, first ('k2', (('num', 2),))" in text and "1 unexpected, first ('k2', (('num', 5),))" in text


def test_the_published_bench_measures_every_query_that_validates_and_q23_over_its_own_preload(tmp_path: Path) -> None:
    """bench/published.py (`bench/run.py --only published`) takes each published query that validates alone, and q23
    in a project of its own (FEWER): what bench/nexmark_published/README.md says runs, with no list kept by hand."""
    from bench import published

    _, runs, refused = published.project("127.0.0.1:9", tmp_path / "all", 2)
    assert set(refused) == {"q6"} and refused["q6"] == "refused by validate (DSF-E189)"
    assert len(runs) == 22 and "q23" not in runs and {"q4", "q5", "q7", "q9", "q12", "q13"} <= set(runs)
    _, alone, none = published.project("127.0.0.1:9", tmp_path / "q23", 2, "pub_q23_", ("q23",))
    assert alone == ["q23"] and not none
    record = published.published_record("bid", {"auction": 1, "price": 100, "date_time": 0, "bidder": 2})
    assert record == {"auction": 1, "price": 100, "dateTime": "1970-01-01T00:00:00.000Z", "bidder": 2}
