"""Where a record's time goes in a micro-batch: dsflow's Kafka source and sink beside Spark's own connector.

    python bench/latency_breakdown.py --queries q0,q1 --seconds 20      # starts Apache Kafka; one Spark session

Runs bench/run.py's latency probe (bench/latency.py: bids at --rate, each timed out of the sink) on each query for
dsflow and for Spark's connector in turn, in one session with the connector's jars, and reports per system:
p50/p99, the micro-batches (how many, rows, Spark's StreamingQueryProgress durationMs per phase as medians, and the
idle time between one batch's end and the next one's start), and for dsflow the phases timed inside its Python
processes (bench/tracing/sitecustomize.py: latestOffset and its end-offset read, partitions, the read task, its
range read and Arrow conversion, the write task and its flush, the clients made). Prints a table, writes --json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACING = REPO / "bench" / "tracing"
sys.path.insert(0, str(REPO))

from bench import pipelines as P  # noqa: E402
from bench import run  # noqa: E402

PHASES = ("source.latestOffset", "source.end_offsets", "source.partitions", "source.commit", "read.task",
          "read.range", "read.decode", "read.to_arrow", "write.task", "write.flush", "write.commit", "write.plan",
          "source.reader", "client.new_consumer", "client.new_producer")


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def spark_phases(progress: list[dict]) -> dict:
    """Medians of durationMs per phase over the batches with input; idle ms between batches; batches and rows."""
    busy = [p for p in progress if p.get("numInputRows")]
    keys = sorted({k for p in busy for k in p.get("durationMs", {})})
    out: dict = {"batches": len(progress), "busy_batches": len(busy),
                 "rows_per_batch": median([p["numInputRows"] for p in busy])}
    out.update({k: median([p["durationMs"][k] for p in busy if k in p["durationMs"]]) for k in keys})
    gaps = []
    for before, after in zip(progress, progress[1:], strict=False):
        ended = epoch(before["timestamp"]) + before["durationMs"].get("triggerExecution", 0) / 1000
        gaps.append((epoch(after["timestamp"]) - ended) * 1000)
    out["idle_between_ms"] = median(gaps)
    return out


def python_phases(trace: Path, start: float, end: float) -> dict:
    """Per phase timed in dsflow's Python processes between `start` and `end`: calls, median and p90 ms, and the
    median ms spent inside a generator (not in its consumer); and how many processes took part."""
    if not trace.exists():
        return {}
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if start <= r["start"] <= end]
    out: dict = {"processes": len({r["pid"] for r in rows}), "timeline_ms": timeline(rows)}
    for phase in PHASES:
        found = [r for r in rows if r["phase"] == phase]
        if not found:
            continue
        ms = sorted((r["end"] - r["start"]) * 1000 for r in found)
        out[phase] = {"calls": len(found), "median_ms": median(ms), "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1),
                      "pids": len({r["pid"] for r in found})}
        inside = [r["inside"] * 1000 for r in found if "inside" in r]
        if inside:
            out[phase]["inside_median_ms"] = median(inside)
    return out


def timeline(rows: list[dict]) -> dict:
    """Medians over the micro-batches (each from one `partitions` call to the next) of where the time between them
    went, from the Python side: partitions -> first task start (Spark's planning and task launch), the tasks (first
    start to last write end), last write end -> the sink's commit (the commit runner), and the sink's commit -> the
    next batch's latestOffset (Spark's commit log, the trigger)."""
    anchors = sorted(r["start"] for r in rows if r["phase"] == "source.partitions")
    spans: dict[str, list[float]] = {"plan_to_tasks": [], "tasks": [], "tasks_to_sink_commit": [],
                                     "sink_commit_to_next_latest": [], "latest_offset": []}
    for begin, end in zip(anchors, anchors[1:], strict=False):
        inside = [r for r in rows if begin <= r["start"] < end]
        tasks = [r for r in inside if r["phase"] in ("read.task", "write.task")]
        commits = [r for r in inside if r["phase"] == "write.commit"]
        latest = [r for r in inside if r["phase"] == "source.latestOffset"]
        if not tasks or not commits or not latest:
            continue
        last_write = max(r["end"] for r in tasks)
        spans["plan_to_tasks"].append(min(r["start"] for r in tasks) - begin)
        spans["tasks"].append(last_write - min(r["start"] for r in tasks))
        spans["tasks_to_sink_commit"].append(commits[-1]["start"] - last_write)
        spans["sink_commit_to_next_latest"].append(latest[-1]["start"] - commits[-1]["end"])
        spans["latest_offset"].append(latest[-1]["end"] - latest[-1]["start"])
    return {k: median([v * 1000 for v in values]) for k, values in spans.items()}


def probe(spark, bootstrap: str, work: Path, specs: dict, query: str, system: str, cfg: run.Config,
          trace: Path) -> dict:
    """One latency run with the full progress list kept (bench/run.py keeps only medians)."""
    kept: dict = {}
    original = run.batch_durations

    def keep(progress: list[dict]) -> dict:
        kept["progress"] = [json.loads(p.json) if hasattr(p, "json") else p for p in progress]
        return original(progress)

    run.batch_durations = keep
    run.recreate_topics(bootstrap, 2, [P.sink_topic(query)])
    started = time.time()
    try:
        row = run._latency_run(spark, bootstrap, work, specs, query, system, cfg)
    finally:
        run.batch_durations = original
    ended = time.time()
    row = {k: v for k, v in row.items() if k != "batch_breakdown_ms"}
    progress = kept.get("progress", [])
    row["spark"] = spark_phases(progress)
    if system == "dsflow":
        row["python"] = python_phases(trace, started, ended)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", default="q0,q1")
    p.add_argument("--systems", default="dsflow,spark")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--warmup", type=float, default=10)
    p.add_argument("--rate", type=float, default=10_000)
    p.add_argument("--bootstrap", default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    if os.environ.get("DSFLOW_KAFKA_TRACE") is None or str(TRACING) not in os.environ.get("PYTHONPATH", ""):
        os.environ["DSFLOW_KAFKA_TRACE"] = os.environ.get("DSFLOW_KAFKA_TRACE") or tempfile.mktemp(suffix=".jsonl")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(TRACING), str(REPO), os.environ.get("PYTHONPATH", "")])
        os.execv(sys.executable, [sys.executable, *sys.argv])  # this process traced too
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from dsflow.adapters.kafka import devbroker
    from dsflow.adapters.kafka.connector import jars
    from dsflow.adapters.spark.session import build_session

    trace = Path(os.environ["DSFLOW_KAFKA_TRACE"])
    work = Path(tempfile.mkdtemp(prefix="dsflow-lat-breakdown-"))
    broker = None if args.bootstrap else devbroker.start(work / "broker", port=devbroker.free_port(), kind="kafka")
    bootstrap = args.bootstrap or broker.bootstrap
    conf = {"spark.jars": jars().spark_jars, **dict(c.split("=", 1) for c in args.spark_conf)}
    spark = build_session("local[2]", "dsflow-latency-breakdown", conf)
    results: dict = {"load_before": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M %Z"), "rows": []}
    try:
        specs = P.load_specs(bootstrap, work, 2)
        cfg = run.Config(rate=args.rate, latency_seconds=args.seconds, latency_warmup=args.warmup, partitions=2)
        systems = args.systems.split(",")
        for system in systems:  # untimed: the session's first query of each kind starts cold
            probe(spark, bootstrap, work, specs, "q0", system, run.Config(rate=args.rate, latency_seconds=3,
                                                                           latency_warmup=1), trace)
        for i, query in enumerate(args.queries.split(",")):
            for system in (systems if i % 2 == 0 else systems[::-1]):
                row = {"query": query, "system": system, **probe(spark, bootstrap, work, specs, query, system, cfg,
                                                                   trace)}
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
    finally:
        spark.stop()
        if broker is not None:
            devbroker.stop(work / "broker")
        shutil.rmtree(work, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: results[k] for k in ("load_before", "load_after")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
