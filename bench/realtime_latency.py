"""End-to-end latency of a stateless query in Spark's real-time mode beside micro-batches and the plain loop.

    python bench/realtime_latency.py --bootstrap HOST:PORT --query q1 --rate 10000 --seconds 20

One Spark session (local[2], Spark's Kafka connector on its classpath: dsflow/adapters/kafka/connector.py) runs the
bench project's query (bench/nexmark_project) as dsflow's driver starts it (`start_query`) in turn:

- `realtime`: 'trigger' = 'realtime' (Spark's real-time mode, its checkpoint every `--checkpoint-interval`),
  through Spark's Kafka connector (adapters/spark/realtime.py);
- `dsflow`: micro-batches on dsflow's own source and sink, at the project's trigger interval;
- `loop`: the plain Python consume-transform-produce loop (bench/pipelines.py `loop`), the floor.

Each run gets source topics of its own and a fresh sink, starts from their tail, and bench/latency.py produces Nexmark
bids at `--rate` and times each key out of the sink (p50/p99 of records produced after `--warmup`). Prints one JSON
line per run; the machine's load is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import pipelines as P  # noqa: E402
from bench.preload import TOPICS, delete_topics, recreate_topics  # noqa: E402

SYSTEMS = ("realtime", "dsflow", "loop")


def start(spark, spec, system: str, prefix: str, work: Path, interval: str):
    """The query started from the tail of the run's own topics; returns once it runs (a micro-batch query: its
    first batch done; a real-time query: its long batch started, which reports progress only when it ends)."""
    from dsflow.adapters.spark.driver import start_query

    sources = [s.model_copy(update={"starting_position": "latest", "topic": prefix + s.topic, "dlq_topic": None
                                    if system == "realtime" else s.dlq_topic}) for s in spec.sources]
    update = {"sources": sources, "checkpoint": str(work / f"ckpt-{system}-{time.time_ns()}")}
    if system == "realtime":
        update |= {"realtime": True, "trigger_interval": interval, "async_checkpoint": False}
    handle = start_query(spark, spec.model_copy(update=update))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if handle.exception() is not None:
            raise RuntimeError(str(handle.exception()))
        if handle.lastProgress is not None or (system == "realtime" and handle.status.get("isTriggerActive")):
            break
        time.sleep(0.2)
    time.sleep(3 if system == "realtime" else 0)  # its tasks subscribed to every partition
    return handle


def one_run(spark, bootstrap: str, spec, query: str, system: str, args, work: Path) -> dict:
    prefix = f"rt_{query}_{system}_{time.time_ns() % 10**6}_"
    sources = [prefix + t for t in TOPICS.values()]
    recreate_topics(bootstrap, args.partitions, sources)
    recreate_topics(bootstrap, args.partitions, [P.sink_topic(query)])
    seconds = args.seconds + args.warmup
    handle, runner = None, None
    try:
        if system == "loop":
            runner = subprocess.Popen([sys.executable, str(REPO / "bench" / "pipelines.py"), "loop", query, bootstrap,
                                       str(seconds + 30), prefix + P.SOURCE_TOPIC], stdout=subprocess.DEVNULL)
            time.sleep(2.0)
        else:
            handle = start(spark, spec, system, prefix, work, args.checkpoint_interval)
        probe = subprocess.run([sys.executable, str(REPO / "bench" / "latency.py"), "--bootstrap", bootstrap,
                                "--sink", P.sink_topic(query), "--rate", str(args.rate), "--seconds", str(seconds),
                                "--warmup", str(args.warmup), "--prefix", prefix],
                               capture_output=True, text=True, timeout=seconds + 180)
        if probe.returncode != 0:
            lines = [line for line in probe.stderr.splitlines() if not line.startswith("%")]
            return {"query": query, "system": system, "error": lines[-3:]}
        return {"query": query, "system": system, **json.loads(probe.stdout.strip().splitlines()[-1])}
    finally:
        if handle is not None:
            handle.stop()
        if runner is not None:
            runner.terminate()
            runner.wait(30)
        delete_topics(bootstrap, sources)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--query", default="q1", choices=sorted(P.STATELESS))
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--checkpoint-interval", default="5 seconds")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args(argv)
    from dsflow.adapters.kafka.connector import jars
    from dsflow.adapters.spark.session import build_session

    print(json.dumps({"load_before": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    work = Path(tempfile.mkdtemp(prefix="dsflow-rt-bench-"))
    spark = build_session("local[2]", "dsflow-rt-bench", {"spark.jars": jars().spark_jars,
                                                          "spark.sql.shuffle.partitions": "2"})
    try:
        spec = P.load_specs(args.bootstrap, work, args.partitions)[args.query]
        for system in args.systems.split(","):
            print(json.dumps(one_run(spark, args.bootstrap, spec, args.query, system, args, work)), flush=True)
    finally:
        spark.stop()
    print(json.dumps({"load_after": os.getloadavg()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
