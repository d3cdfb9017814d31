"""Stress: a query's first run (and stops, kills, restarts) while the source is being written, under CPU pressure.

Each round makes a fresh source and sink topic, produces ids 0..N-1 into the source from a thread (random
pauses and producer batching), starts a dsflow query on it through dsflow's own translation and driver
functions (fresh checkpoint: a first run), and while producing stops it between batches, or stops it mid-batch,
and starts it again on the same checkpoint. When the producer is done and the query has caught up, the
sink must hold every id at least once; ids missing from the sink are counted (the target is 0).

    python bench/first_run_stress.py --starts 500 --seed 1 --hogs 2     # by hand (docs/benchmarks.md)

tests/e2e/test_first_run_stress.py runs a bounded slice of it in the suite.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

SQL = """\
CREATE STREAM src (id BIGINT, pad VARCHAR, userid VARCHAR)
WITH ('value.format' = 'json', 'topic.partitions' = {partitions});
CREATE STREAM mid WITH ('topic.partitions' = {partitions}) AS
SELECT id, UPPER(userid) AS user_upper, pad FROM src WHERE userid IS NOT NULL;
CREATE STREAM out WITH ('topic.partitions' = {out_partitions}) AS
SELECT id, user_upper FROM mid;
"""

CONFIG = """\
name: stress
default:
  database: analytics
  schema: public
  store: kafka_main
runtime:
  trigger_interval: {trigger}
  spark_conf:
    spark.sql.shuffle.partitions: "2"
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
    vars:
      bootstrap: {bootstrap}
"""

STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
"""


@dataclass
class Round:
    """What one round did and found."""

    seed: int
    records: int
    starts: int
    missing: list[int] = field(default_factory=list)
    error: str | None = None
    """Query failures seen while catching up (a kill makes some; DSF-E709 is a read that refused to skip)."""

    @property
    def refused(self) -> int:
        """Query failures that were DSF-E709: records the broker did not return, caught instead of skipped."""
        return (self.error or "").count("DSF-E709")


def _hog(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def cpu_hogs(count: int, seconds: float) -> list[multiprocessing.Process]:
    """`count` busy processes for at most `seconds` (they stop by themselves)."""
    procs = [multiprocessing.Process(target=_hog, args=(time.monotonic() + seconds,), daemon=True)
             for _ in range(count)]
    for p in procs:
        p.start()
    return procs


def _project(work: Path, bootstrap: str, rng: random.Random):
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
    from dsflow.load.project import load_project

    root = work / f"p{uuid.uuid4().hex[:8]}"
    (root / "sql").mkdir(parents=True)
    (root / "stores").mkdir()
    trigger = rng.choice(["0 seconds", "100 milliseconds", "500 milliseconds", "1 second"])
    partitions = rng.choice([1, 2, 3])
    (root / "dsflow.yml").write_text(CONFIG.format(trigger=trigger, prefix=f"s{uuid.uuid4().hex[:8]}_",
                                                   bootstrap=bootstrap))
    (root / "stores" / "kafka.yml").write_text(STORE)
    (root / "sql" / "all.sql").write_text(SQL.format(partitions=partitions, out_partitions=rng.choice([1, 2])))
    project = load_project(root, variables={"bootstrap": bootstrap})
    for relation in project.relations:
        ensure_topic(bootstrap, TopicSpec(relation.topic, relation.partitions, 1, {}))
    return project, root


def _producer(bootstrap: str, topic: str, count: int, rng: random.Random, done: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": rng.choice([0, 1, 5, 50]),
                         "batch.num.messages": rng.choice([1, 10, 1000])})
    pad = "x" * rng.choice([10, 200, 2000])
    sent = 0
    while sent < count:
        burst = min(count - sent, rng.choice([1, 5, 50, 500]))
        for i in range(sent, sent + burst):
            producer.produce(topic, json.dumps({"id": i, "pad": pad, "userid": f"u{i % 7}"}), f"u{i % 7}")
        producer.poll(0)
        sent += burst
        time.sleep(rng.choice([0, 0.001, 0.05, 0.3]))
    assert producer.flush(60) == 0, "the stress producer could not deliver"
    done.set()


def _sink_ids(bootstrap: str, topic: str) -> set[int]:
    from dsflow.adapters.kafka.client import read_to_end

    return {json.loads(r["value"])["id"] for r in read_to_end(bootstrap, topic)}


def _plain_ids(bootstrap: str, topic: str, want: int, timeout: float) -> set[int]:
    """The sink read by a plain consumer loop (no end-offset logic of dsflow's): until `want` ids or `timeout`."""
    from confluent_kafka import Consumer, TopicPartition

    from dsflow.adapters.kafka.client import topic_partitions

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "stress-check", "enable.auto.commit": False})
    try:
        parts = topic_partitions(c, topic)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        ids: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(ids) < want and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    ids.add(json.loads(m.value())["id"])
        return ids
    finally:
        c.close()


def kill_python_workers() -> int:
    """SIGKILL the Spark Python workers of this process's session (a crash in the middle of read or write tasks:
    the queries running a task fail and are restarted from their checkpoints)."""
    import psutil

    killed = 0
    for child in psutil.Process().children(recursive=True):
        try:
            if "pyspark.daemon" in " ".join(child.cmdline()) and child.parent().name() != "java":
                child.kill()
                killed += 1
        except psutil.Error:
            pass
    return killed


def one_round(spark, bootstrap: str, work: Path, seed: int, restarts: int = 2, records: int = 400,
              catch_up: float = 120.0) -> Round:
    """Two chained queries (src -> mid -> out) on fresh topics: first runs while producing, then `restarts`
    interruptions (a stop between batches, a stop mid-batch, or Python workers killed) each followed by a start
    on the same checkpoints; every id must reach both sinks."""
    from dsflow.adapters.spark.driver import start_query
    from dsflow.adapters.spark.translate import query_spec

    rng = random.Random(seed)
    project, root = _project(work, bootstrap, rng)
    specs = {q.fqn.rsplit(".", 1)[-1]: query_spec(project, q, "stress", str(root / f"cp-{q.fqn}"),
                                                    str(root / f"{q.fqn}.status.json")) for q in project.queries}
    topics = {name: project.relation(f"analytics.public.{name}").topic for name in ("src", "mid", "out")}
    result = Round(seed, records, 0)
    if rng.random() < 0.5:
        _producer(bootstrap, topics["src"], rng.choice([1, 3, 20]), random.Random(seed + 1), threading.Event())
    done = threading.Event()
    producing = threading.Thread(target=_producer, args=(bootstrap, topics["src"], records, rng, done), daemon=True)
    producing.start()
    running = {}
    for name in rng.sample(sorted(specs), len(specs)):
        running[name] = start_query(spark, specs[name])
        result.starts += 1
    for _ in range(restarts):
        time.sleep(rng.choice([0.2, 1.0, 3.0]))
        result.starts += _interrupt(spark, specs, running, rng)
    producing.join(120)
    try:
        result.error = _catch_up(spark, specs, running, bootstrap, topics, set(range(records)), catch_up)
    finally:
        for query in running.values():
            query.stop()
    for sink in ("mid", "out"):
        missing = sorted(set(range(records)) - _sink_ids(bootstrap, topics[sink]))
        result.missing += missing
        if missing:
            plain = _plain_ids(bootstrap, topics[sink], records, 20)
            result.error = (result.error or "") + f" {sink} misses {missing[:10]}; a plain reader misses " \
                                                  f"{sorted(set(range(records)) - plain)[:10]}"
    return result


def _interrupt(spark, specs: dict, running: dict, rng: random.Random) -> int:
    """One interruption and the starts that follow it; returns how many queries were started."""
    from dsflow.adapters.spark.driver import start_query, stop_between_batches

    how = rng.choice(["between", "mid", "kill"])
    if how == "kill" and kill_python_workers():
        time.sleep(2)
        names = [n for n, q in running.items() if not q.isActive]
    else:
        names = [rng.choice(sorted(running))]
        if how == "between":
            stop_between_batches(running[names[0]], names[0])
        else:
            running[names[0]].stop()  # mid-batch when one runs: at-least-once, never a gap
    for name in names:
        running[name].stop()
        running[name] = start_query(spark, specs[name])
    return len(names)


def _catch_up(spark, specs: dict, running: dict, bootstrap: str, topics: dict, expected: set[int],
              timeout: float) -> str | None:
    """Wait until both sinks hold every id; a query that failed is reported (and restarted once, as a
    supervisor would: the check is that nothing is skipped, a failure is loud by design)."""
    from dsflow.adapters.spark.driver import start_query

    deadline, errors = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        for name, query in list(running.items()):
            if not query.isActive:
                errors.append(f"{name}: {str(query.exception()).splitlines()[0][:300]}")
                running[name] = start_query(spark, specs[name])
        if all(expected <= _sink_ids(bootstrap, topics[s]) for s in ("mid", "out")):
            break
        time.sleep(1)
    return "; ".join(errors) or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=60, help="query starts in all (up to 2 + restarts per round)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the queries")
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--restarts", type=int, default=6, help="interruptions per round (each then starts again)")
    parser.add_argument("--bootstrap", default=None, help="a running broker; default: start the embedded one")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from dsflow.adapters.kafka import devbroker
    from dsflow.adapters.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="dsflow-stress-"))
    bootstrap = args.bootstrap
    if bootstrap is None:
        bootstrap = devbroker.start(work / "broker", port=devbroker.free_port()).bootstrap
    spark = build_session("local[2]", app_name="dsflow-stress", conf={})
    rounds, seed, started = [], args.seed * 1_000_003, time.monotonic()
    try:
        while sum(r.starts for r in rounds) < args.starts:
            hogs = cpu_hogs(args.hogs, 600)
            try:
                found = one_round(spark, bootstrap, work, seed, restarts=args.restarts, records=args.records)
            finally:
                for h in hogs:
                    h.terminate()
            rounds.append(found)
            seed += 1
            print(json.dumps({"seed": found.seed, "starts": found.starts, "missing": len(found.missing),
                              "refused": found.refused, "error": found.error}), flush=True)
    finally:
        spark.stop()
        if args.bootstrap is None:
            devbroker.stop(work / "broker")
    starts, missing = sum(r.starts for r in rounds), sum(len(r.missing) for r in rounds)
    print(f"{len(rounds)} rounds, {starts} query starts, {missing} missing records, "
          f"{sum(r.refused for r in rounds)} reads refused (DSF-E709), "
          f"{sum(1 for r in rounds if r.error)} rounds with a query failure, {time.monotonic() - started:.0f} s")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
