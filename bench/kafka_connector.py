"""dsflow beside Spark's own Kafka connector (spark-sql-kafka-0-10): records/s over a preload, availableNow.

    python bench/kafka_connector.py                         # 200,000 Nexmark events, q0-q2, 3 reps
    python bench/kafka_connector.py --events 500000 --reps 5
    python bench/kafka_connector.py --smoke                 # tiny, seconds (tests/integration/test_bench_connector.py)

Starts its own Apache Kafka (the dev broker, dsflow/adapters/kafka/kraft.py; stopped by its PID at the end) unless
`--bootstrap` names a running one, preloads Nexmark events (bench/preload.py), and runs q0, q1 and q2 three ways
over the bids, each with a fresh checkpoint and a freshly created sink topic:

- `dsflow`: the bench project (bench/nexmark_project) through dsflow's loader and translator, started by the query
  driver's own `start_query` (availableNow), reading and writing through dsflow's Python source and sink;
- `pyspark`: the query hand-written in PySpark on the same `dsflow_kafka` source and sink (bench/pipelines.py);
- `spark`: the query hand-written as a Spark user writes it, on Spark's own connector: `format("kafka")` in
  (`subscribe`, `startingOffsets=earliest`) and out, the value parsed with `from_json` and written with `to_json`.

Every run's sink must hold exactly the records the query makes of the preload (counted by end offsets; with
--smoke every value is compared as well). The connector's jars come from bench/spark_kafka.py. The table goes
into docs/benchmarks.md between the SECTION markers (replaced on each run; `--out` writes elsewhere).
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
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import pipelines as P  # noqa: E402
from bench import report, spark_kafka  # noqa: E402
from bench.preload import Preloaded, preload  # noqa: E402

SYSTEMS = ("dsflow", "pyspark", "spark")
SYSTEM_NAMES = {"dsflow": "dsflow", "pyspark": "hand-written PySpark, dsflow_kafka",
                "spark": "hand-written PySpark, Spark's connector"}
TARGET = 0.9
"""dsflow's records/s at least this share of Spark's connector's (issue 39)."""
DOC = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- bench/kafka_connector.py writes from here to its end marker; edits in between are replaced -->"
END = "<!-- end of bench/kafka_connector.py's section -->"


@dataclass
class Config:
    events: int = 200_000
    reps: int = 3
    queries: tuple[str, ...] = P.STATELESS
    partitions: int = 2
    prefix: str = ""
    """Before every topic name: runs sharing a broker keep apart."""
    smoke: bool = False
    """Tiny sizes, no warm-up, every sink value compared with the reference."""

    @classmethod
    def smoke_config(cls) -> Config:
        return cls(events=3_000, reps=1, smoke=True)


# --- Spark's own connector --------------------------------------------------------------------


def spark_frame(spark, query: str, bootstrap: str, prefix: str = "") -> object:
    """The query as a Spark user writes it: Kafka's bytes cast to strings, the value parsed with from_json."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", prefix + P.SOURCE_TOPIC).option("startingOffsets", "earliest").load())
    bids = raw.select(F.col("key").cast("string").alias("key"),
                      F.from_json(F.col("value").cast("string"), P.BID_DDL).alias("v")).select("key", "v.*")
    return P.stateless_select(bids, query)


def run_spark(frame, bootstrap: str, topic: str, checkpoint: str, started: float) -> tuple[float, int]:
    query = (frame.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    return P.finish(query, started)


# --- one run ----------------------------------------------------------------------------------


def retargeted(spec, prefix: str, sink: str):
    """A dsflow QuerySpec reading the prefixed topics and writing `sink`."""
    sources = [s.model_copy(update={"topic": prefix + s.topic}) for s in spec.sources]
    return spec.model_copy(update={"sources": sources, "sink": spec.sink.model_copy(update={"topic": sink})})


def one_run(spark, bootstrap: str, work: Path, specs: dict, query: str, system: str,
            cfg: Config) -> tuple[P.Run, bool | None]:
    """One availableNow run over the preload, from a new checkpoint into a sink topic of its own (deleted after
    it is counted and, with --smoke, its values checked: the second item); the time includes building the
    DataFrame, as dsflow's start_query builds its own."""
    from dsflow.adapters.kafka.admin import TopicSpec, delete_topic, ensure_topic

    run_id = time.time_ns()
    topic = f"{cfg.prefix}{P.sink_topic(query)}_{system}_{run_id}"
    ensure_topic(bootstrap, TopicSpec(topic, cfg.partitions))
    checkpoint = str(work / f"ckpt-{query}-{system}-{run_id}")
    started = time.monotonic()
    if system == "dsflow":
        seconds, records_in = P.run_dsflow_available_now(spark, retargeted(specs[query], cfg.prefix, topic),
                                                         checkpoint)
    elif system == "pyspark":
        frame = P.pyspark_frame(spark, query, bootstrap, prefix=cfg.prefix)
        seconds, records_in = P.run_available_now(frame, bootstrap, topic, checkpoint, started=started)
    else:
        seconds, records_in = run_spark(spark_frame(spark, query, bootstrap, cfg.prefix), bootstrap, topic,
                                        checkpoint, started)
    run = P.Run(query, system, records_in, _sink_count(bootstrap, topic), seconds)
    values_ok = values_match(bootstrap, topic, query, cfg.events) if cfg.smoke else None
    delete_topic(bootstrap, topic)
    return run, values_ok


def _sink_count(bootstrap: str, topic: str) -> int:
    from dsflow.adapters.kafka import client

    with client.consumer(client.client_config(bootstrap)) as c:
        return sum(client.end_offsets(c, topic, client.topic_partitions(c, topic)).values())


def values_match(bootstrap: str, topic: str, query: str, events: int) -> bool:
    """The sink holds exactly the (key, value) records the plain-Python reference makes of the bids."""
    from dsflow.datagen import nexmark
    from dsflow.adapters.kafka.client import read_to_end

    bids = [(key, record) for kind, key, record in nexmark.events(0, events) if kind == "bid"]
    got = P.canonical([(r["key"], json.loads(r["value"])) for r in read_to_end(bootstrap, topic)])
    return got == P.canonical(P.expected_records(query, bids))


# --- the measurement --------------------------------------------------------------------------


def expected_out(query: str, loaded: Preloaded) -> int:
    return loaded.q2_matches if query == "q2" else loaded.counts["bid"]


def measure(spark, bootstrap: str, work: Path, cfg: Config, loaded: Preloaded) -> list[dict]:
    """Per query and system: `reps` runs, the systems' order reversed every other run (and query)."""
    specs = P.load_specs(bootstrap, work, cfg.partitions)
    if not cfg.smoke:  # JIT, the first Python workers and first imports are not what is measured
        for system in SYSTEMS:
            one_run(spark, bootstrap, work, specs, cfg.queries[0], system, cfg)
    rows = []
    for index, query in enumerate(cfg.queries):
        runs: dict[str, list[P.Run]] = {s: [] for s in SYSTEMS}
        checked: dict[str, list[bool | None]] = {s: [] for s in SYSTEMS}
        for rep in range(cfg.reps):
            for system in SYSTEMS if (rep + index) % 2 == 0 else SYSTEMS[::-1]:
                run, values_ok = one_run(spark, bootstrap, work, specs, query, system, cfg)
                runs[system].append(run)
                checked[system].append(values_ok)
        for system in SYSTEMS:
            rates = [r.rate for r in runs[system]]
            row = {"query": query, "system": system, "expected_in": loaded.counts["bid"],
                   "expected_out": expected_out(query, loaded),
                   "records_in": [r.records_in for r in runs[system]],
                   "records_out": [r.records_out for r in runs[system]],
                   "seconds": [round(r.seconds, 2) for r in runs[system]],
                   "median_rate": statistics.median(rates), "best_rate": max(rates)}
            row["counts_ok"] = (set(row["records_in"]) == {row["expected_in"]}
                                and set(row["records_out"]) == {row["expected_out"]})
            if cfg.smoke:
                row["values_ok"] = all(checked[system])
            rows.append(row)
            print(f"  {query} {system:<8} {row['median_rate']:>10,.0f} rec/s (best {row['best_rate']:,.0f}) "
                  f"in {row['records_in']} out {row['records_out']} of {row['expected_out']}"
                  f"{'' if row['counts_ok'] else '  COUNT MISMATCH'}", flush=True)
    return rows


def run_all(cfg: Config, bootstrap: str, spark, work: Path) -> dict:
    results: dict = {"config": asdict(cfg), "load_before": os.getloadavg(),
                     "date": time.strftime("%Y-%m-%d %H:%M %Z")}
    started = time.monotonic()
    print(f"preloading {cfg.events:,} Nexmark events", flush=True)
    loaded = preload(bootstrap, cfg.events, cfg.partitions, prefix=cfg.prefix)
    results["preload"] = asdict(loaded)
    results["rows"] = measure(spark, bootstrap, work, cfg, loaded)
    results["load_after"] = os.getloadavg()
    results["wall_seconds"] = time.monotonic() - started
    return results


# --- the report -------------------------------------------------------------------------------


def render(results: dict, machine: dict, versions: dict) -> str:
    """docs/benchmarks.md's section for one run, between the markers: a pure function of its inputs."""
    cfg, pre = results["config"], results["preload"]
    load = report._load  # noqa: SLF001 - the same "1.3 / 1.6 / 1.4" as the generated machine line
    lines = [
        BEGIN,
        "",
        f"## Spark's own Kafka connector beside dsflow ({results.get('date', machine['date'])}, "
        f"{pre['events']:,} events, {cfg['reps']} run(s))",
        "",
        "`python bench/kafka_connector.py" + (" --smoke" if cfg["smoke"] else "")
        + f" --events {pre['events']} --reps {cfg['reps']}`: records/s over the preloaded bids, availableNow, median "
        "of the runs (best in brackets), wall time from building the DataFrame to the end of the run, query start "
        "included; the systems take turns going first" + (", after an untimed q0 run of each." if not cfg["smoke"]
                                                          else "; smoke run, no warm-up: the rates mean nothing."),
        "Every run: a fresh checkpoint, a new sink topic, and the sink's record count checked against the preload "
        "(q2: the bids it selects).",
        "",
        f"- machine: {machine['nproc']} cores ({machine['cpu']}), {machine['memory_gib']} GiB; load average (1/5/15 "
        f"min) {load(results['load_before'])} before, {load(results['load_after'])} after: other engineers' runs "
        "share the cores",
        f"- PySpark {machine['pyspark']} (local[2]), {machine['java']}; Spark's connector "
        f"spark-sql-kafka-0-10_2.13 {versions.get(spark_kafka.CONNECTOR_ARTIFACT, '?')} (the newest Maven Central "
        f"serves; bench/spark_kafka.py) with kafka-clients {versions.get('kafka-clients', '?')}; dsflow's source "
        f"and sink on confluent-kafka {machine['confluent_kafka']} (librdkafka {machine['librdkafka']})",
        f"- broker: {results.get('broker', '?')}",
        f"- data: {pre['counts']['bid']:,} bids of {pre['events']:,} Nexmark events (seed 0), "
        f"{pre['bytes_per_bid']:.0f} B of JSON each, {pre['partitions']} partitions; preload and runs took "
        f"{results['wall_seconds'] / 60:.1f} min",
        "",
        "| query | dsflow | hand-written PySpark, `dsflow_kafka` | hand-written PySpark, Spark's `kafka` "
        "| dsflow ÷ Spark's connector | records in | records out |",
        "|---|---|---|---|---|---|---|",
    ]
    by = {(r["query"], r["system"]): r for r in results["rows"]}
    met = []
    for query in cfg["queries"]:
        cells = [f"{report._n(by[(query, s)]['median_rate'])} ({report._n(by[(query, s)]['best_rate'])})"  # noqa: SLF001
                 for s in SYSTEMS]
        d, s = by[(query, "dsflow")], by[(query, "spark")]
        ratio = d["median_rate"] / s["median_rate"] if s["median_rate"] else float("nan")
        ok = all(by[(query, x)]["counts_ok"] for x in SYSTEMS)
        values = "" if "values_ok" not in d else (", values checked" if all(by[(query, x)]["values_ok"]
                                                                            for x in SYSTEMS) else ", VALUES DIFFER")
        lines.append(f"| {query} {report.QUERY_NAMES[query]} | {' | '.join(cells)} | {ratio:.2f}x | "
                     f"{d['expected_in']:,} | {d['expected_out']:,}{'' if ok else ' (COUNT MISMATCH)'}{values} |")
        met.append(f"{query} {'yes' if ratio >= TARGET else 'no'}")
    lines += ["", f"Issue 39's throughput target, dsflow ≥ {TARGET}x Spark's connector (medians): {', '.join(met)}.",
              "", END]
    return "\n".join(lines) + "\n"


def replace_section(doc: str, section: str) -> str:
    """`doc` with the text between BEGIN and END (markers included) replaced by `section`; without them, the
    section goes right after bench/run.py's hand-written marker (so bench/run.py keeps it), else at the end."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start >= 0 and end > start:
        return doc[:start] + section + doc[end + len(END):].removeprefix("\n")
    at = doc.find(report.HAND_WRITTEN)
    if at < 0:
        return doc.rstrip("\n") + "\n\n" + section if doc.strip() else section
    after = at + len(report.HAND_WRITTEN)
    return doc[:after] + "\n\n" + section + "\n" + doc[after:].lstrip("\n")


# --- the command ------------------------------------------------------------------------------


def config_from(args: argparse.Namespace) -> Config:
    cfg = Config.smoke_config() if args.smoke else Config()
    if args.events:
        cfg.events = args.events
    if args.reps:
        cfg.reps = args.reps
    if args.queries:
        cfg.queries = tuple(q.strip() for q in args.queries.split(","))
        if bad := [q for q in cfg.queries if q not in P.STATELESS]:
            raise SystemExit(f"--queries: {', '.join(bad)} not among {', '.join(P.STATELESS)}")
    cfg.prefix = args.prefix
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=None, help="Nexmark events to preload (default 200,000)")
    parser.add_argument("--reps", type=int, default=None, help="measured runs per query and system (default 3)")
    parser.add_argument("--queries", default=None, help="comma-separated among q0,q1,q2 (default all three)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, values checked; seconds, not a measurement")
    parser.add_argument("--bootstrap", default=None, help="use this running broker instead of starting one")
    parser.add_argument("--prefix", default="", help="before every topic name (a shared broker)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the report (default docs/benchmarks.md; with --smoke a file in the temp folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="run nothing: write the section of the results a run saved with --json")
    args = parser.parse_args(argv)
    if args.render:
        results = json.loads(args.render.read_text())
        return _write(results, args.out or DOC, results["versions"])
    cfg = config_from(args)
    try:
        connector = spark_kafka.jars()
    except spark_kafka.ResolveError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="dsflow-bench-connector-"))
    try:
        results = _measured(cfg, args.bootstrap, work, connector)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["versions"] = connector.versions
    results["machine"] = report.machine()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    out = args.out or (Path(tempfile.gettempdir()) / f"dsflow-bench-connector-{os.getpid()}.md" if cfg.smoke
                       else DOC)
    return _write(results, out, connector.versions)


def _write(results: dict, out: Path, versions: dict) -> int:
    """The section into `out`; 1 if any run's counts (or, smoke, values) were wrong."""
    results.setdefault("machine", report.machine())
    section = render(results, results["machine"], versions)
    out.write_text(replace_section(out.read_text() if out.exists() else "", section))
    print(f"wrote {out}", flush=True)
    return 0 if all(r["counts_ok"] and r.get("values_ok", True) for r in results["rows"]) else 1


def _measured(cfg: Config, bootstrap: str | None, work: Path, connector: spark_kafka.Connector) -> dict:
    """Start the broker (unless given) and a Spark session with the connector's jars, run, stop both."""
    from dsflow.adapters.kafka import devbroker, kraft
    from dsflow.adapters.spark.session import build_session

    broker = None if bootstrap else devbroker.start(work / "broker", port=devbroker.free_port(), kind="kafka")
    spark = None
    try:
        spark = build_session("local[2]", "dsflow-bench-connector", {"spark.jars": connector.spark_jars})
        results = run_all(cfg, bootstrap or broker.bootstrap, spark, work)
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            devbroker.stop(work / "broker")
    results["broker"] = (f"Apache Kafka {kraft.KAFKA_VERSION} (KRaft, one node) on loopback, started by the harness"
                         if broker is not None
                         else f"the broker at {bootstrap} (--bootstrap)")
    return results


if __name__ == "__main__":
    sys.exit(main())
