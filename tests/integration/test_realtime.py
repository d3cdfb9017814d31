"""A query in Spark's real-time mode ('trigger' = 'realtime') on Apache Kafka: the query's own driver process reads
and writes through Spark's Kafka connector; what it writes is compared by id with a plain-Python reference, and
its status file says it runs. Real-time mode's sink is at-least-once: a duplicate is allowed, a missing or
unexpected record is not, and a record is never changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from dsflow.adapters.kafka.client import read_to_end
from support.streaming import _spec, produce, streaming_project, topic

SQL = """
CREATE STREAM orders (id BIGINT, amount DOUBLE, region VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM big_orders WITH ('trigger' = 'realtime', 'trigger.interval' = '5 seconds') AS
  SELECT id, amount * 2 AS doubled, UPPER(region) AS region FROM orders WHERE amount > 50;
"""


def reference(orders: list[dict]) -> dict[int, dict]:
    return {o["id"]: {"id": o["id"], "doubled": o["amount"] * 2, "region": o["region"].upper()}
            for o in orders if o["amount"] > 50}


def _status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def orders(ids: range) -> list[dict]:
    return [{"id": i, "amount": float(i % 100), "region": f"r{i % 3}"} for i in ids]


def test_realtime_filter_writes_the_reference(tmp_path: Path, kafka_broker) -> None:
    broker = kafka_broker.bootstrap
    project = streaming_project(tmp_path, broker, SQL)
    query = next(q for q in project.queries if q.fqn.endswith("big_orders"))
    assert query.trigger == "realtime"
    spec = _spec(project, "big_orders", tmp_path)
    assert spec.realtime and "spark-sql-kafka" in spec.spark_conf["spark.jars"]
    first = orders(range(200))
    produce(broker, project, "orders", first, key="id")
    got = _run_driver(spec, tmp_path, broker, project, first)
    assert {g["id"] for g in got} == set(reference(first + orders(range(200, 300))))


def test_offsets_carried_from_a_micro_batch_checkpoint_into_real_time_mode(tmp_path: Path, kafka_broker,
                                                                          spark) -> None:
    """The switch to real-time mode as apply makes it (carry_offsets): the micro-batch version's committed offsets
    start the real-time version's new checkpoint, so nothing is read twice or skipped."""
    from dsflow.adapters.spark.checkpoint import committed_offsets
    from dsflow.adapters.spark.driver import start_query
    from dsflow.adapters.spark.translate import query_spec
    from dsflow.core.engines import StartAt

    broker = kafka_broker.bootstrap
    project = streaming_project(tmp_path, broker, SQL)
    query = next(q for q in project.queries if q.fqn.endswith("big_orders"))
    first = orders(range(200))
    produce(broker, project, "orders", first, key="id")
    old = query_spec(project, query.model_copy(update={"trigger": "micro-batch"}), "v1",
                     str(tmp_path / "old-checkpoint"), str(tmp_path / "old.status"))
    assert not old.realtime
    ran = start_query(spark, old, available_now=True)
    assert ran.awaitTermination(180) and ran.exception() is None
    assert len(written(broker, project)) == len(reference(first))
    [carried] = committed_offsets(tmp_path / "old-checkpoint")
    assert sum(int(o) for o in carried.values()) == len(first)
    start = StartAt(offsets={topic(project, "orders"): {p: int(o) for p, o in carried.items()}})
    spec = query_spec(project, query, "v2", str(tmp_path / "checkpoint"), str(tmp_path / "new.status"), start)
    assert spec.realtime and spec.sources[0].starting_offsets == carried
    got = _run_driver(spec, tmp_path, broker, project, first)
    ids = [g["id"] for g in got]
    assert sorted(ids) == sorted(set(ids)), "a record of the micro-batch version written again by the real-time one"


def written(broker: str, project) -> list[dict]:
    return read_to_end(broker, topic(project, "big_orders"))


def _run_driver(spec, tmp_path: Path, broker: str, project, first: list[dict]) -> list[dict]:
    """The query's driver process started on `spec`; 100 more orders produced once it runs; the sink's values
    when it holds every expected id, checked against the reference, then the driver stopped by SIGTERM."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json())
    status = Path(spec.status_path)
    driver = subprocess.Popen([sys.executable, "-m", "dsflow.adapters.spark.driver", str(spec_file)],
                              env={**os.environ}, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.log", "w"))
    try:
        _wait(lambda: _status(status).get("state") == "running" or driver.poll() is not None, 180, "running")
        later = orders(range(200, 300))
        produce(broker, project, "orders", later, key="id")  # while the real-time batch runs
        expected = reference(first + later)
        _wait(lambda: {json.loads(r["value"])["id"] for r in written(broker, project)} >= set(expected)
              or driver.poll() is not None, 180, "the sink to hold every expected id")
        seen = _status(status)
        assert seen.get("state") == "running", (seen, (tmp_path / "driver.log").read_text()[-3000:])
        assert seen.get("pid") == driver.pid and seen.get("run_id")
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(120)
    records = written(broker, project)
    got = [json.loads(r["value"]) for r in records]
    assert {g["id"] for g in got} == set(expected)
    assert all(g == expected[g["id"]] for g in got)  # duplicates (at-least-once) are the same record
    assert all(r["key"] == str(json.loads(r["value"])["id"]) for r in records)  # the source key carried, as dsflow
    assert _status(status).get("state") == "stopped"
    return got
