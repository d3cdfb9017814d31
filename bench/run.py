"""The benchmark harness: one command, results to docs/benchmarks.md.

    python bench/run.py                     # 1,000,000 Nexmark events, all sections (~15 min)
    python bench/run.py --events 200000     # a smaller preload
    python bench/run.py --smoke             # tiny sizes, seconds; what tests/integration/test_bench_smoke.py runs
    python bench/run.py --only throughput   # one section: throughput | latency | plan | published
    python bench/run.py --only published    # the published Nexmark queries (bench/published.py), its own section
    python bench/run.py --help              # every option (reps, queries, sizes, --no-dbt, ...)

Starts its own tansu broker on a free port (stopped by PID at the end), preloads Nexmark events,
then for Nexmark q0-q3, q5, q7 and q8 measures (a) dsflow, (b) the same query hand-written in
PySpark and, for q0-q2, (c) a plain Python confluent-kafka loop: records/s over the preload with
the availableNow trigger; and end-to-end latency at a fixed input rate (every query; for the
stateful ones, see bench/latency.py for what a sample is). Then plan time
at scale against dbt parse. Then the published Nexmark queries that run (bench/nexmark_published, as
adapted files) for records/s over the same events (bench/published.py). Writes the numbers, the machine and
the versions to docs/benchmarks.md (see bench/report.py; the published queries in a section of their own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import pipelines as P  # noqa: E402
from bench import plan_scale, published, report  # noqa: E402
from bench.preload import TOPICS, Preloaded, delete_topics, preload, recreate_topics  # noqa: E402

SYSTEMS = ("dsflow", "pyspark", "loop")
SPARK_CONNECTOR = ("spark",)
"""The way bench/kafka_connector.py adds: the query on Spark's own Kafka connector (its session has the jars)."""
LATENCY_MEASURE = {"q3": "join", "q8": "join", "q5": "window", "q7": "window"}
"""How bench/latency.py times a stateful query's results (q0-q2: each record)."""
DOC = REPO / "docs" / "benchmarks.md"


@dataclass
class Config:
    events: int = 1_000_000
    partitions: int = 2
    reps: int = 3
    rate: float = 10_000
    latency_seconds: float = 40
    latency_warmup: float = 15
    sizes: list[int] = field(default_factory=lambda: [100, 1_000, 10_000])
    with_dbt: bool = True
    without_bytecode: bool = False
    """Plan time: also time dsflow with no bytecode of its modules (bench/plan_scale.py's run_scale)."""
    sections: tuple[str, ...] = ("throughput", "latency", "plan", "published")
    queries: tuple[str, ...] = P.QUERIES
    latency_queries: tuple[str, ...] = P.QUERIES
    latency_systems: tuple[str, ...] = SYSTEMS
    verify: bool = False
    """Read every sink back and compare it with what the generator says (smoke mode)."""
    smoke: bool = False

    @classmethod
    def smoke_config(cls) -> Config:
        return cls(events=3_000, reps=1, rate=200, latency_seconds=2, latency_warmup=0.5, sizes=[20],
                   with_dbt=False, verify=True, smoke=True, latency_queries=("q0", "q8"), latency_systems=("dsflow",),
                   sections=("throughput", "latency", "plan"))


# --- throughput -------------------------------------------------------------------------------


def throughput(spark, bootstrap: str, work: Path, cfg: Config, loaded: Preloaded) -> list[dict]:
    """records/s per query and system: a warm-up run, then `reps` measured runs (median and best)."""
    specs = P.load_specs(bootstrap, work, cfg.partitions)
    results = []
    if not cfg.smoke:
        _warm_up(spark, bootstrap, work, specs)
    for index, query in enumerate(cfg.queries):
        systems = systems_of(query)
        expected_out = P.expected_out(query, loaded)
        by_system: dict[str, list[P.Run]] = {s: [] for s in systems}
        verified = {s: True for s in systems}
        if not cfg.smoke and query in P.STATEFUL:
            _warm_up(spark, bootstrap, work, specs, query)
        for rep in range(cfg.reps):  # interleaved, so a change of machine load hits every system alike
            # and taking turns going first: the first run after another query's was up to 2x slower here
            for system in systems if (rep + index) % 2 == 0 else systems[::-1]:
                by_system[system].append(_one_run(spark, bootstrap, work, specs, query, system))
                if cfg.verify:
                    verified[system] = verified[system] and verify_sink(bootstrap, query, loaded)
        for system in systems:
            runs = by_system[system]
            rates = [r.rate for r in runs]
            row = {"query": query, "system": system, "records_in": runs[-1].records_in,
                   "expected_in": P.expected_in(query, loaded),
                   "records_out": runs[-1].records_out, "expected_out": expected_out,
                   "median_rate": statistics.median(rates), "best_rate": max(rates),
                   "seconds": [round(r.seconds, 2) for r in runs]}
            if cfg.verify:
                row["verified"] = verified[system]
            results.append(row)
            print(f"  {query} {system:<8} {row['median_rate']:>10,.0f} rec/s (best {row['best_rate']:,.0f}) "
                  f"out {row['records_out']}/{expected_out}", flush=True)
    return results


def systems_of(query: str) -> tuple[str, ...]:
    """The plain loop exists for the stateless queries only (a join or window in it would be a stream processor)."""
    return SYSTEMS if query in P.STATELESS else ("dsflow", "pyspark")


def _warm_up(spark, bootstrap: str, work: Path, specs: dict, query: str = "q0") -> None:
    """Untimed runs of both Spark systems: JVM JIT and the Python workers' first start (and first imports of
    each system's code paths, e.g. dsflow's dead-letter check) are not what is measured. The stateful queries
    get one each as well: the first run of a window or join was 3-4x slower than the next (JIT of its
    operators and state store), whichever system ran it (docs/benchmarks.md, "q5's gap")."""
    for system in ("pyspark", "dsflow"):
        _one_run(spark, bootstrap, work, specs, query, system)


def _one_run(spark, bootstrap: str, work: Path, specs: dict, query: str, system: str) -> P.Run:
    topic = P.sink_topic(query)
    recreate_topics(bootstrap, 2, [topic])
    checkpoint = str(work / f"ckpt-{query}-{system}-{time.time_ns()}")
    if system == "loop":
        seconds, records_in, _ = P.run_loop(query, bootstrap, topic)
    elif system == "dsflow":
        seconds, records_in = P.run_dsflow_available_now(spark, specs[query], checkpoint)
    else:
        started = time.monotonic()  # like dsflow's run (start_query builds its DataFrame): frame building included
        frame = P.pyspark_frame(spark, query, bootstrap)
        seconds, records_in = P.run_available_now(frame, bootstrap, topic, checkpoint, update=query in P.CHANGELOGS,
                                                  started=started)
    return P.Run(query, system, records_in, P.sink_count(bootstrap, topic), seconds)


def verify_sink(bootstrap: str, query: str, loaded: Preloaded) -> bool:
    """The sink holds exactly the records the query must produce from the preload (values and keys).

    Reads every record up to the topic's end offsets (`read_to_end`), not until the topic goes quiet for a
    moment: on a loaded machine a quiet spell can come before the last fetch. A mismatch is printed with what
    differs.
    """
    from dsflow.datagen import nexmark
    from dsflow.adapters.kafka.client import read_to_end

    records = read_to_end(bootstrap, P.sink_topic(query))
    expected = P.expected_canonical(query, list(nexmark.events(0, loaded.events)))
    got = P.sink_canonical(query, records)
    if got != expected:
        print(f"  {query}: {P.sink_difference(got, expected, len(records))}", flush=True)
    return got == expected


# --- latency ----------------------------------------------------------------------------------


def latency(spark, bootstrap: str, work: Path, cfg: Config) -> list[dict]:
    """p50/p99 end-to-end latency at cfg.rate for each query and system."""
    specs = P.load_specs(bootstrap, work, cfg.partitions)
    if not cfg.smoke and "throughput" not in cfg.sections:
        _warm_up(spark, bootstrap, work, specs)  # the first streaming query of a session starts cold
    results = []
    for index, query in enumerate(cfg.latency_queries):
        order = [s for s in cfg.latency_systems if s in systems_of(query) or s in SPARK_CONNECTOR]
        if index % 2:  # dsflow and hand-written PySpark take turns going first
            order.reverse()
        for system in order:
            recreate_topics(bootstrap, 2, [P.sink_topic(query)])
            row = {"query": query, "system": system, **_latency_run(spark, bootstrap, work, specs, query, system, cfg)}
            results.append(row)
            print(f"  {query} {system:<8} p50 {row.get('p50_ms')} ms p99 {row.get('p99_ms')} ms "
                  f"({row.get('arrived')} measured)", flush=True)
    rank = {s: i for i, s in enumerate(cfg.latency_systems)}
    return sorted(results, key=lambda r: (cfg.latency_queries.index(r["query"]), rank[r["system"]]))


def _latency_run(spark, bootstrap: str, work: Path, specs: dict, query: str, system: str, cfg: Config) -> dict:
    """One probe against one system. Each run has source topics of its own (`lat_q0_dsflow_nexmark_bid` ...),
    deleted afterwards: the embedded broker keeps topics in memory, and after ~3.5 million probe records in one
    topic it stopped answering fetches."""
    seconds = cfg.latency_seconds + cfg.latency_warmup
    prefix = f"lat_{query}_{system}_"
    sources = [prefix + t for t in TOPICS.values()]
    recreate_topics(bootstrap, cfg.partitions, sources)
    runner, query_handle = None, None
    if system == "loop":
        runner = subprocess.Popen([sys.executable, str(REPO / "bench" / "pipelines.py"), "loop", query, bootstrap,
                                   str(seconds + 30), prefix + P.SOURCE_TOPIC], stdout=subprocess.DEVNULL)
        time.sleep(2.0)
    try:
        if runner is None:
            query_handle = _start_streaming(spark, bootstrap, work, specs[query], query, system, prefix)
        probe = subprocess.run(
            [sys.executable, str(REPO / "bench" / "latency.py"), "--bootstrap", bootstrap, "--sink",
             P.sink_topic(query), "--rate", str(cfg.rate), "--seconds", str(seconds), "--warmup",
             str(cfg.latency_warmup), "--measure", LATENCY_MEASURE.get(query, "record"), "--prefix", prefix,
             *(["--filtered"] if query == "q2" else [])],
            capture_output=True, text=True, timeout=seconds + 120)
        if probe.returncode != 0:  # librdkafka's own log lines start with '%': show the Python error instead
            lines = [line for line in probe.stderr.strip().splitlines() if not line.startswith("%")]
            return {"error": (lines or probe.stderr.strip().splitlines())[-1:]}
        out = json.loads(probe.stdout.strip().splitlines()[-1])
        if query_handle is not None:
            out.update(batch_durations(query_handle.recentProgress))
        return out
    finally:
        if query_handle is not None:
            query_handle.stop()
        if runner is not None:
            runner.terminate()
            runner.wait(30)
        delete_topics(bootstrap, sources)


def batch_durations(progress: list[dict]) -> dict:
    """How many micro-batches ran, and the median ms of a batch with input and of its addBatch (Spark's
    StreamingQueryProgress.durationMs): where a record's latency goes on the Spark side."""
    busy = [p for p in progress if p.get("numInputRows")]

    def median(key: str) -> float | None:
        values = [p["durationMs"][key] for p in busy if key in p.get("durationMs", {})]
        return round(statistics.median(values)) if values else None

    breakdown = {k: median(k) for k in sorted({k for p in busy for k in p.get("durationMs", {})})}
    return {"batches": len(progress), "batch_ms": breakdown.get("triggerExecution"),
            "add_batch_ms": breakdown.get("addBatch"), "batch_breakdown_ms": breakdown}


def _start_streaming(spark, bootstrap: str, work: Path, spec, query: str, system: str, prefix: str):
    """Start the query from the tail of the run's own source topics and wait until its first batch is done."""
    from dsflow.adapters.spark.driver import start_query

    checkpoint = str(work / f"lat-{query}-{system}-{time.time_ns()}")
    if system == "dsflow":
        sources = [s.model_copy(update={"starting_position": "latest", "topic": prefix + s.topic})
                   for s in spec.sources]
        handle = start_query(spark, spec.model_copy(update={"sources": sources, "checkpoint": checkpoint}))
    elif system in SPARK_CONNECTOR:
        frame = P.spark_frame(spark, query, bootstrap, prefix, starting="latest")
        handle = P.start_spark(frame, bootstrap, P.sink_topic(query), checkpoint, spec.trigger_interval,
                               update=query in P.CHANGELOGS)
    else:
        frame = P.pyspark_frame(spark, query, bootstrap, starting_position="latest", prefix=prefix)
        handle = P.start_processing(frame, bootstrap, P.sink_topic(query), checkpoint, spec.trigger_interval,
                                    update=query in P.CHANGELOGS)
    deadline = time.monotonic() + 120
    while handle.lastProgress is None and time.monotonic() < deadline:
        if handle.exception() is not None:
            raise RuntimeError(str(handle.exception()))
        time.sleep(0.2)
    return handle


# --- the whole run ----------------------------------------------------------------------------


def run_all(cfg: Config, bootstrap: str, spark, work: Path) -> dict:
    """Every section in `cfg.sections` against a running broker and Spark session."""
    results: dict = {"config": asdict(cfg), "load_before": os.getloadavg()}
    kafka_sections = {"throughput", "latency"} & set(cfg.sections)
    if kafka_sections:
        print(f"preloading {cfg.events:,} Nexmark events", flush=True)
        loaded = preload(bootstrap, cfg.events, cfg.partitions)
        results["preload"] = asdict(loaded)
        if "throughput" in cfg.sections:
            print("throughput (availableNow over the preload)", flush=True)
            results["throughput"] = throughput(spark, bootstrap, work, cfg, loaded)
        if "latency" in cfg.sections:
            print(f"latency at {cfg.rate:,.0f} events/s", flush=True)
            results["latency"] = latency(spark, bootstrap, work, cfg)
    if "plan" in cfg.sections:
        print("plan time at scale", flush=True)
        timings = plan_scale.run_scale(cfg.sizes, work / "scale", cfg.with_dbt, cfg.without_bytecode)
        results["plan"] = [asdict(t) for t in timings]
        results["dbt_version"] = plan_scale.dbt_version() if cfg.with_dbt else None
    if "published" in cfg.sections:
        print(f"the published Nexmark queries over {cfg.events:,} events", flush=True)
        load = os.getloadavg()
        results["published"] = published.throughput(spark, bootstrap, work, cfg.events, cfg.partitions, cfg.reps)
        results["published_load"] = (load, os.getloadavg())
    results["load_after"] = os.getloadavg()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=None, help="Nexmark events to preload (default 1,000,000)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; checks values, not speed")
    parser.add_argument("--only", choices=["throughput", "latency", "plan", "published"], action="append")
    parser.add_argument("--rate", type=float, default=None, help="input rate of the latency runs (default 10,000/s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the report (default docs/benchmarks.md; with --smoke a file in the temp folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    parser.add_argument("--reps", type=int, default=None, help="measured runs per query and system (default 3)")
    parser.add_argument("--queries", default=None, help="comma-separated, e.g. q0,q5 (default all: q0-q3,q5,q7,q8)")
    parser.add_argument("--latency-seconds", type=float, default=None, help="measured seconds per latency run (40)")
    parser.add_argument("--sizes", default=None, help="plan-scale sizes, comma-separated (default 100,1000,10000)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session of both Spark systems (repeatable)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu",
                        help="the broker it starts: tansu (default) or Apache Kafka (KRaft, from Maven's jars)")
    parser.add_argument("--no-bytecode-too", action="store_true",
                        help="plan time: also time dsflow with its modules compiled from source (no .pyc)")
    parser.add_argument("--no-dbt", action="store_true",
                        help="skip dbt parse (otherwise installed into bench/.venv-dbt)")
    args = parser.parse_args(argv)
    if bad := [item for item in args.spark_conf if "=" not in item]:
        parser.error(f"--spark-conf takes KEY=VALUE, got {bad[0]!r}")
    cfg = Config.smoke_config() if args.smoke else Config()
    if args.reps:
        cfg.reps = args.reps
    if args.queries:
        cfg.queries = tuple(q.strip() for q in args.queries.split(","))
        cfg.latency_queries = tuple(q for q in cfg.latency_queries if q in cfg.queries)
    if args.latency_seconds:
        cfg.latency_seconds = args.latency_seconds
    if args.sizes:
        cfg.sizes = [int(n) for n in args.sizes.split(",")]
    if args.no_dbt:
        cfg.with_dbt = False
    cfg.without_bytecode = args.no_bytecode_too
    if args.events:
        cfg.events = args.events
    if args.rate:
        cfg.rate = args.rate
    if args.only:
        cfg.sections = tuple(args.only)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from dsflow.adapters.kafka import devbroker
    from dsflow.adapters.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="dsflow-bench-"))
    broker = devbroker.start(work / "broker", port=devbroker.free_port(), kind=args.broker, timeout=120)
    spark = None
    try:
        started = time.monotonic()
        conf = dict(item.split("=", 1) for item in args.spark_conf)
        spark = (build_session("local[2]", "dsflow-bench", conf)
                 if {"throughput", "latency", "published"} & set(cfg.sections) else None)
        results = run_all(cfg, broker.bootstrap, spark, work)
        results["wall_seconds"] = time.monotonic() - started
        results["spark_conf"] = conf
        if args.broker == "kafka":
            from dsflow.adapters.kafka import kraft

            results["broker"] = f"Apache Kafka {kraft.KAFKA_VERSION} (KRaft, one node)"
    finally:
        if spark is not None:
            spark.stop()
        devbroker.stop(work / "broker")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    out = args.out or (work.parent / f"dsflow-bench-smoke-{os.getpid()}.md" if args.smoke else DOC)
    _write(results, cfg, out)
    print(f"wrote {out}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _write(results: dict, cfg: Config, out: Path) -> None:
    """The report: the generated part (unless only the published queries ran: then the rest of `out` is kept),
    the published queries' section in the hand-written part (replacing the previous one)."""
    machine = report.machine()
    if results.get("broker"):
        machine["broker"] = results["broker"]
    text = out.read_text() if out.exists() and cfg.sections == ("published",) else \
        report.render(results, machine, report.hand_written(DOC))
    if results.get("published"):
        section = published.render(results, machine, results["published_load"])
        text = published.replace_section(text, section, report.HAND_WRITTEN)
    out.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
