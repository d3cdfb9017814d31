"""Expectations with data (issue 43, item 1): the exact rows kept, dropped and dead-lettered by id, the counts per
rule in the micro-batch's progress, and FAIL QUERY writing nothing; the source error policies (item 2). One
availableNow run of dsflow's own spec on the session's Spark and the test broker each."""

from __future__ import annotations

import json

from dsflow.adapters.spark.driver import progress_status
from dsflow.adapters.spark.expectations import counts
from support.expectations import dead_letters, run_to_end, spec_of
from support.registry_projects import produce_raw, raw_records
from support.streaming import latest_by_key, produce, records, streaming_project, topic

SQL = """
CREATE STREAM orders (id BIGINT, amount BIGINT, region VARCHAR) WITH ('value.format' = 'json',
  'topic.partitions' = 2);
CREATE STREAM checked WITH ('topic.partitions' = 2)
  CONSTRAINT positive EXPECT (amount > 0) ON VIOLATION DROP ROW
  CONSTRAINT known_region EXPECT (region IN ('eu', 'us')) ON VIOLATION DEAD LETTER
  CONSTRAINT small EXPECT (amount < 1000) ON VIOLATION WARN
  AS SELECT id, amount, UPPER(region) AS region, region AS raw_region FROM orders;
CREATE STREAM strict
  CONSTRAINT has_amount EXPECT (amount IS NOT NULL) ON VIOLATION FAIL QUERY
  AS SELECT id, amount FROM orders;
"""
ORDERS = [
    {"id": 1, "amount": 5, "region": "eu"},      # kept
    {"id": 2, "amount": -1, "region": "eu"},     # dropped (positive)
    {"id": 3, "amount": 5, "region": "xx"},      # dead letter (known_region)
    {"id": 4, "amount": 5000, "region": "us"},   # kept, warned (small)
    {"id": 5, "amount": -2, "region": "xx"},     # fails positive and known_region: a dead letter
    {"id": 6, "amount": None, "region": "eu"},   # NULL is a violation: dropped (positive), warned (small)
    {"id": 7, "amount": 7, "region": None},      # dead letter (known_region is NULL)
]


def test_rows_kept_dropped_and_dead_lettered_by_id(spark, broker, tmp_path) -> None:
    sql = SQL.replace("region IN ('eu', 'us')", "raw_region IN ('eu', 'us')")
    project = streaming_project(tmp_path, broker, sql)
    produce(broker, project, "orders", ORDERS, key="id")
    finished = run_to_end(spark, project, "checked", tmp_path)
    assert finished.exception() is None, finished.exception()

    kept = sorted(json.loads(r["value"])["id"] for r in records(broker, project, "checked"))
    assert kept == [1, 4]
    query = next(q for q in project.queries if q.fqn.endswith(".checked"))
    letters = dead_letters(broker, project.dlq_topic(query))
    assert sorted(value["id"] for value, _ in letters) == [3, 5, 7]
    places = {json.loads(r["value"])["id"]: (str(r["partition"]), str(r["offset"]))
              for r in records(broker, project, "orders")}
    for value, headers in letters:
        assert (headers["dsflow.source.partition"], headers["dsflow.source.offset"]) == places[value["id"]]
        assert headers["dsflow.source.topic"] == topic(project, "orders")
        assert headers["dsflow.expectation"] == "known_region"
        assert headers["dsflow.query"] == "analytics.public.checked"
        assert "known_region" in headers["dsflow.error"] and "raw_region IN" in headers["dsflow.error"]
    assert next(value for value, _ in letters if value["id"] == 3) == {"id": 3, "amount": 5, "region": "XX",
                                                                      "raw_region": "xx"}

    totals: dict = {}
    spec = spec_of(project, "checked", tmp_path)
    counts(finished.recentProgress, spec.expectations, totals, None)
    assert {name: (t["action"], t["passed"], t["failed"]) for name, t in totals.items()} == {
        "positive": ("drop", 4, 3), "known_region": ("dead_letter", 4, 3), "small": ("warn", 5, 2)}


def test_fail_query_stops_before_anything_is_written(spark, broker, tmp_path) -> None:
    project = streaming_project(tmp_path, broker, SQL)
    produce(broker, project, "orders", [{"id": i, "amount": i, "region": "eu"} for i in range(1, 9)]
            + [{"id": 9, "amount": None, "region": "eu"}], key="id")
    finished = run_to_end(spark, project, "strict", tmp_path)
    error = str(finished.exception())
    assert "DSF-E778" in error and "'has_amount'" in error and '{"id":9}' in error, error
    assert records(broker, project, "strict") == []
    assert not (tmp_path / "checkpoints" / "strict" / "commits" / "0").exists()


POLICY_SQL = """
CREATE STREAM events (id BIGINT, name VARCHAR) WITH ('value.format' = 'json');
CREATE STREAM ignored WITH ('source.deserialization.error.handling' = 'IGNORE') AS SELECT id, name FROM events;
CREATE STREAM terminated WITH ('source.deserialization.error.handling' = 'TERMINATE') AS SELECT id, name FROM events;
CREATE STREAM logged WITH ('source.deserialization.error.handling' = 'IGNORE_AND_LOG') AS SELECT id, name FROM events;
"""
EVENTS = [b'{"id": 1, "name": "a"}', b"not json", b'{"id": "x", "name": "b"}', b'{"id": 4, "name": "d"}']


def test_source_error_policies_with_data(spark, broker, tmp_path) -> None:
    project = streaming_project(tmp_path, broker, POLICY_SQL)
    produce_raw(broker, topic(project, "events"), EVENTS)
    by_name = {q.fqn.rsplit(".", 1)[-1]: q for q in project.queries}

    ignored = run_to_end(spark, project, "ignored", tmp_path)  # skipped, counted, no dead letter
    assert ignored.exception() is None, ignored.exception()
    assert sorted(json.loads(r["value"])["id"] for r in records(broker, project, "ignored")) == [1, 4]
    assert dead_letters(broker, project.dlq_topic(by_name["ignored"])) == []
    assert progress_status(spec_of(project, "ignored", tmp_path), ignored, "stopped")["skipped_records"] == 2

    terminated = run_to_end(spark, project, "terminated", tmp_path)  # stops at the first bad record
    assert "DSF-E779" in str(terminated.exception()) and "offset 1" in str(terminated.exception())
    assert records(broker, project, "terminated") == []

    logged = run_to_end(spark, project, "logged", tmp_path)  # today's dead letters
    assert logged.exception() is None, logged.exception()
    assert sorted(json.loads(r["value"])["id"] for r in records(broker, project, "logged")) == [1, 4]
    assert sorted(m.value() for m in raw_records(broker, project.dlq_topic(by_name["logged"]))) == \
        [b"not json", b'{"id": "x", "name": "b"}']


def test_an_aggregation_drops_the_groups_that_fail(spark, broker, tmp_path) -> None:
    sql = SQL + """
CREATE CHANGELOG per_region
  CONSTRAINT few EXPECT (n < 3) ON VIOLATION DROP ROW
  AS SELECT region, COUNT(*) AS n FROM orders GROUP BY region;
"""
    project = streaming_project(tmp_path, broker, sql)
    produce(broker, project, "orders", ORDERS, key="id")
    finished = run_to_end(spark, project, "per_region", tmp_path)
    assert finished.exception() is None, finished.exception()
    assert latest_by_key(broker, project, "per_region") == {
        "xx": {"region": "xx", "n": 2}, "us": {"region": "us", "n": 1}, '{"region":null}': {"n": 1}}
    totals: dict = {}
    counts(finished.recentProgress, spec_of(project, "per_region", tmp_path).expectations, totals, None)
    assert (totals["few"]["passed"], totals["few"]["failed"]) == (3, 1)
