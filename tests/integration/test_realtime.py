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

import pytest

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


@pytest.mark.usefixtures("kafka_broker")
def test_realtime_filter_writes_the_reference(tmp_path: Path, kafka_broker) -> None:
    broker = kafka_broker.bootstrap
    project = streaming_project(tmp_path, broker, SQL)
    query = next(q for q in project.queries if q.fqn.endswith("big_orders"))
    assert query.trigger == "realtime"
    spec = _spec(project, "big_orders", tmp_path)
    assert spec.realtime and "spark-sql-kafka" in spec.spark_conf["spark.jars"]
    first = [{"id": i, "amount": float(i % 100), "region": f"r{i % 3}"} for i in range(200)]
    produce(broker, project, "orders", first, key="id")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json())
    status = Path(spec.status_path)
    driver = subprocess.Popen([sys.executable, "-m", "dsflow.adapters.spark.driver", str(spec_file)],
                              env={**os.environ}, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.log", "w"))
    try:
        _wait(lambda: _status(status).get("state") == "running" or driver.poll() is not None, 180, "running")
        later = [{"id": i, "amount": float(i % 100), "region": f"r{i % 3}"} for i in range(200, 300)]
        produce(broker, project, "orders", later, key="id")  # while the real-time batch runs
        expected = reference(first + later)

        def written() -> list[dict]:
            return read_to_end(broker, topic(project, "big_orders"))

        _wait(lambda: {json.loads(r["value"])["id"] for r in written()} >= set(expected) or driver.poll() is not None,
              180, "the sink to hold every expected id")
        seen = _status(status)
        assert seen.get("state") == "running", (seen, (tmp_path / "driver.log").read_text()[-3000:])
        assert seen.get("pid") == driver.pid and seen.get("run_id")
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(120)
    records = written()
    got = [json.loads(r["value"]) for r in records]
    assert {g["id"] for g in got} == set(expected)
    assert all(g == expected[g["id"]] for g in got)  # duplicates (at-least-once) are the same record
    assert all(r["key"] == str(json.loads(r["value"])["id"]) for r in records)  # the source key carried, as dsflow
    assert _status(status).get("state") == "stopped"
