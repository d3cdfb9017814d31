"""Async checkpoint writes (Spark's async progress tracking) for stateless queries into Kafka, when
`runtime.async_checkpoint` asks for them (off by default: docs/benchmarks.md, "Seventh pass").

Which queries get it is decided in translate.query_spec; the driver starts those with the option, and Spark
runs them in its AsyncProgressTrackingMicroBatchExecution. Stopping such a query leaves an offset and a commit log
entry for every batch, so a restart (with or without the option) continues exactly where it stopped.

The restart itself is not run here: with a Python data source, Spark 4.3's async cleanup commits the source after
stopping it, the stream thread ends on that error and the query stays registered in its session, so the same
checkpoint cannot start again in this session. dsflow runs each query in a driver process of its own, which exits
after the stop; the e2e and stateful-kill tests restart drivers that way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dsflow.adapters.kafka.client import client_config, consumer, end_offsets, topic_partitions
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from support.streaming import produce, records, streaming_project, topic

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM views (id BIGINT, ts BIGINT, userid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE STREAM clicks (cid BIGINT, cts BIGINT, userid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'cts', 'topic.partitions' = 2);
CREATE STREAM upper_views WITH ('trigger.interval' = '200 ms') AS SELECT id, UPPER(userid) AS userid FROM views;
CREATE STREAM pairs AS SELECT v.id, c.cid FROM views v JOIN clicks c WITHIN 10 SECONDS ON v.userid = c.userid;
CREATE CHANGELOG per_user AS SELECT userid, COUNT(*) AS n FROM views GROUP BY userid;
"""


def _spec(project, name: str, work: Path):
    query = next(q for q in project.queries if q.fqn.endswith(f".{name}"))
    return query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))


def _async_on(project):
    return project.model_copy(update={"runtime": project.runtime.model_copy(update={"async_checkpoint": True})})


def test_only_stateless_kafka_queries_write_the_checkpoint_in_the_background_when_asked(tmp_path, broker):
    project = streaming_project(tmp_path, broker, SQL)
    names = ("upper_views", "pairs", "per_user")
    assert {name: _spec(project, name, tmp_path).async_checkpoint for name in names} == dict.fromkeys(names, False)
    chosen = {name: _spec(_async_on(project), name, tmp_path).async_checkpoint for name in names}
    assert chosen == {"upper_views": True, "pairs": False, "per_user": False}


def _until(condition, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def _batch_files(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def test_stopping_leaves_every_batch_in_both_logs_so_a_restart_continues_exactly(spark, broker, tmp_path):
    project = _async_on(streaming_project(tmp_path, broker, SQL))
    spec = _spec(project, "upper_views", tmp_path)
    running = start_query(spark, spec)
    try:
        assert running._jsq.streamingQuery().getClass().getSimpleName() == "AsyncProgressTrackingMicroBatchExecution"
        for wave in range(3):
            produce(broker, project, "views", [{"id": wave * 10 + i, "ts": i, "userid": f"u{i}"} for i in range(10)])
            _until(lambda wave=wave: len(records(broker, project, "upper_views")) >= 10 * (wave + 1))
    finally:
        running.stop()
    assert running.exception() is None, running.exception()
    ids = sorted(json.loads(r["value"])["id"] for r in records(broker, project, "upper_views"))
    assert ids == list(range(30))
    last = running.lastProgress["batchId"]
    checkpoint = Path(spec.checkpoint)
    assert max(_batch_files(checkpoint / "commits")) == max(_batch_files(checkpoint / "offsets")) >= last
    logged = json.loads((checkpoint / "offsets" / str(max(_batch_files(checkpoint / "offsets")))).read_text()
                        .splitlines()[-1])
    with consumer(client_config(broker)) as c:
        source = topic(project, "views")
        ends = end_offsets(c, source, topic_partitions(c, source))
    assert {int(p): o for p, o in logged.items()} == ends  # a restart reads from here: nothing again, nothing skipped
