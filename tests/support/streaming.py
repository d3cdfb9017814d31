"""Helpers for stateful SQL tests: a project on the test broker, availableNow runs through dsflow's own
translation and driver functions, and reading a sink's final content.

    project = streaming_project(tmp_path, broker, SQL)      # topics created, names prefixed per test
    run(spark, project, "counts", tmp_path)                 # one availableNow run (same checkpoint each time)
    with running(spark, project, ["counts"], tmp_path) as caught_up:   # started once, on the same checkpoint
        produce(...); caught_up()                           # each round processed, in the one running query
    latest_by_key(broker, project, "counts")                # {key: value} (last record per key)
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.client import produce_json_lines, read_to_end
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from dsflow.core.model import Project
from dsflow.load.project import load_project
from support.projects import make_project

CONFIG = """\
name: streamtest
default:
  database: analytics
  schema: public
  store: kafka_main
runtime:
  trigger_interval: 1 second
  spark_conf:
    spark.sql.shuffle.partitions: "2"
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
    vars:
      bootstrap: 127.0.0.1:9092
"""


def streaming_project(tmp_path: Path, broker: str, sql: str, files: dict[str, str] | None = None) -> Project:
    """The project of `sql` (and other `files`, {name: content}) on the broker, its topics created."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "sql/all.sql": sql, **(files or {})})
    project = load_project(root, variables={"bootstrap": broker})
    for relation in project.relations:
        if relation.kind != "materialized_view":
            ensure_topic(broker, TopicSpec(relation.topic, relation.partitions, 1, {}))
    return project


def topic(project: Project, name: str) -> str:
    return project.relation(f"analytics.public.{name}").topic


def produce(broker: str, project: Project, relation: str, records: list[dict], key: str | None = None) -> None:
    produce_json_lines(broker, topic(project, relation), [json.dumps(r) for r in records], key_field=key)


def _spec(project: Project, name: str, work: Path):
    query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
    return query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))


def run(spark, project: Project, name: str, work: Path, timeout: float = 120) -> Any:
    """One availableNow run of the query `name` on its checkpoint under `work` (kept between runs); the finished
    StreamingQuery."""
    query = start_query(spark, _spec(project, name, work), available_now=True)
    assert query.awaitTermination(timeout), f"{name} did not finish in {timeout} s"
    assert query.exception() is None, query.exception()
    return query


@contextmanager
def running(spark, project: Project, names, work: Path) -> Iterator[Callable[[], None]]:
    """The queries `names` started once with their trigger, on the checkpoints `run` uses, and stopped when the
    block ends. The function it yields returns when each has processed everything its sources held when it was
    called (`processAllAvailable`): one query start for several rounds of input instead of one per round."""
    started = [start_query(spark, _spec(project, name, work)) for name in names]

    def caught_up() -> None:
        for query in started:
            query.processAllAvailable()  # raises the query's error if it failed
            assert query.exception() is None, query.exception()

    try:
        yield caught_up
    finally:
        for query in started:
            query.stop()


def records(broker: str, project: Project, name: str) -> list[dict]:
    """Every record the relation's topic holds now (up to its end offsets, in partition and offset order)."""
    return read_to_end(broker, topic(project, name))


def latest_by_key(broker: str, project: Project, name: str) -> dict[str, dict]:
    """A changelog's final content: the last value of each key (by partition offset)."""
    latest: dict[str, tuple[int, dict]] = {}
    for record in records(broker, project, name):
        if record["key"] not in latest or record["offset"] > latest[record["key"]][0]:
            latest[record["key"]] = (record["offset"], json.loads(record["value"]))
    return {k: v for k, (_, v) in latest.items()}


class Feed:
    """Produces the records `make(0)`, `make(1)`, ... to a topic, 10 every `pause` seconds, until stopped; `sent`
    counts them."""

    def __init__(self, broker: str, topic: str, make: Callable[[int], dict] = lambda i: {"id": i},
                 pause: float = 0.2) -> None:
        self.broker, self.topic, self.make, self.pause, self.sent = broker, topic, make, pause, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            chunk = range(self.sent, self.sent + 10)
            produce_json_lines(self.broker, self.topic, [json.dumps(self.make(i)) for i in chunk])
            self.sent += len(chunk)
            self._stop.wait(self.pause)

    def __enter__(self) -> Feed:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)
