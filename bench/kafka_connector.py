"""dsflow beside Spark's own Kafka connector (spark-sql-kafka-0-10): records/s and peak RSS over a preload.

    python bench/kafka_connector.py                         # 200,000 Nexmark events, q0-q3, q5, q7, q8, 3 reps
    python bench/kafka_connector.py --events 500000 --reps 5
    python bench/kafka_connector.py --smoke                 # tiny, seconds (tests/integration/test_bench_connector.py)
    python bench/kafka_connector.py --latency-seconds 20    # and p50/p99 at 10,000 events/s beside the connector

Starts its own Apache Kafka (the dev broker, dsflow/adapters/kafka/kraft.py; stopped by its PID at the end) unless
`--bootstrap` names a running one, preloads Nexmark events (bench/preload.py), and runs q0-q3, q5, q7 and q8 three ways
over them (availableNow), each with a fresh checkpoint and a freshly created sink topic:

- `dsflow`: the bench project (bench/nexmark_project) through dsflow's loader and translator, started by the query
  driver's own `start_query` (availableNow), reading and writing through dsflow's Python source and sink;
- `pyspark`: the query hand-written in PySpark on the same `dsflow_kafka` source and sink (bench/pipelines.py);
- `spark`: the query hand-written as a Spark user writes it, on Spark's own connector: `format("kafka")` in
  (`subscribe`, `startingOffsets=earliest`) and out, the value parsed with `from_json` and an explicit schema,
  event time watermarked for the windows and joins, the result written with `to_json` (update mode for the
  aggregations q5 and q7).

The queries are written once (bench/pipelines.py, over a "reader" of topics); the two hand-written ways differ
only in the reader and the writer. Every run's sink is read back and compared, record by record, with what the
plain-Python reference makes of the preload (q5 and q7: the final value per window key, as their update-mode
changelogs can write a key several times); its record count is checked too, except for those changelogs. The
peak RSS of this process tree (the Python driver, the Spark driver JVM, Spark's Python workers; bench/rss.py)
is sampled during each run. The connector's jars come from bench/spark_kafka.py. The table goes into
docs/benchmarks.md between the SECTION markers (replaced on each run; `--out` writes elsewhere).
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import pipelines as P  # noqa: E402
from bench import report, spark_kafka  # noqa: E402
from bench.rss import PeakRss  # noqa: E402
from bench.preload import Preloaded, preload  # noqa: E402

SYSTEMS = ("dsflow", "pyspark", "spark")
SYSTEM_NAMES = {"dsflow": "dsflow", "pyspark": "hand-written PySpark, dsflow_kafka",
                "spark": "hand-written PySpark, Spark's connector"}
TARGET = 0.9
"""dsflow's records/s at least this share of Spark's connector's (issue 39)."""
LATENCY_TARGET = 1.1
"""dsflow's p99 at most this multiple of Spark's connector's at a fixed rate (issue 39)."""
DOC = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- bench/kafka_connector.py writes from here to its end marker; edits in between are replaced -->"
END = "<!-- end of bench/kafka_connector.py's section -->"


@dataclass
class Config:
    events: int = 200_000
    reps: int = 3
    queries: tuple[str, ...] = P.QUERIES
    partitions: int = 2
    prefix: str = ""
    """Before every topic name: runs sharing a broker keep apart."""
    smoke: bool = False
    """Tiny sizes, no warm-up: a check of values, not a measurement."""
    rss_skip: tuple[int, ...] = ()
    """PIDs whose process trees the peak RSS leaves out: the broker the harness started."""
    latency_seconds: float = 0
    """Seconds of each latency probe after its warm-up (0: no latency section)."""
    latency_warmup: float = 10
    rate: float = 10_000
    """Events/s of the latency probe."""
    latency_queries: tuple[str, ...] = ()
    """The queries probed (none given: every query of the run)."""

    @classmethod
    def smoke_config(cls) -> Config:
        return cls(events=3_000, reps=1, smoke=True, latency_warmup=0.5, rate=200)


# --- Spark's own connector --------------------------------------------------------------------


# --- one run ----------------------------------------------------------------------------------


def retargeted(spec, prefix: str, sink: str):
    """A dsflow QuerySpec reading the prefixed topics and writing `sink`."""
    sources = [s.model_copy(update={"topic": prefix + s.topic}) for s in spec.sources]
    return spec.model_copy(update={"sources": sources, "sink": spec.sink.model_copy(update={"topic": sink})})


@dataclass(frozen=True)
class Outcome:
    """One run, whether its sink held exactly the expected records, and its peak RSS."""

    run: P.Run
    values_ok: bool
    rss: dict[str, float]


def one_run(spark, bootstrap: str, work: Path, specs: dict, query: str, system: str, cfg: Config,
            expected: list[tuple]) -> Outcome:
    """One availableNow run over the preload, from a new checkpoint into a sink topic of its own (deleted after
    it is counted and its values compared with `expected`); the time includes building the DataFrame, as
    dsflow's start_query builds its own."""
    from dsflow.adapters.kafka.admin import TopicSpec, delete_topic, ensure_topic

    run_id = time.time_ns()
    topic = f"{cfg.prefix}{P.sink_topic(query)}_{system}_{run_id}"
    ensure_topic(bootstrap, TopicSpec(topic, cfg.partitions))
    checkpoint = str(work / f"ckpt-{query}-{system}-{run_id}")
    update = query in P.CHANGELOGS
    with PeakRss(skip=frozenset(cfg.rss_skip)) as peak:
        started = time.monotonic()
        if system == "dsflow":
            seconds, records_in = P.run_dsflow_available_now(spark, retargeted(specs[query], cfg.prefix, topic),
                                                             checkpoint)
        elif system == "pyspark":
            frame = P.pyspark_frame(spark, query, bootstrap, prefix=cfg.prefix)
            seconds, records_in = P.run_available_now(frame, bootstrap, topic, checkpoint, update=update,
                                                      started=started)
        else:
            seconds, records_in = P.run_spark(P.spark_frame(spark, query, bootstrap, cfg.prefix), bootstrap, topic,
                                            checkpoint, started, update)
    run = P.Run(query, system, records_in, P.sink_count(bootstrap, topic), seconds)
    values_ok = values_match(bootstrap, topic, query, expected)
    delete_topic(bootstrap, topic)
    return Outcome(run, values_ok, peak.result.as_dict())


def values_match(bootstrap: str, topic: str, query: str, expected: list[tuple]) -> bool:
    """The sink holds exactly the `expected` records (bench/pipelines.py's canonical form); a difference is
    printed."""
    from dsflow.adapters.kafka.client import read_to_end

    records = read_to_end(bootstrap, topic)
    got = P.sink_canonical(query, records)
    if got != expected:
        print(f"  {query} {topic}: {P.sink_difference(got, expected, len(records))}", flush=True)
    return got == expected


# --- the measurement --------------------------------------------------------------------------


def measure(spark, bootstrap: str, work: Path, cfg: Config, loaded: Preloaded) -> list[dict]:
    """Per query and system: `reps` runs, the systems' order reversed every other run (and query), after the
    untimed runs of `warms_up`."""
    from dsflow.datagen import nexmark

    specs = P.load_specs(bootstrap, work, cfg.partitions)
    events = list(nexmark.events(0, loaded.events))
    rows = []
    for index, query in enumerate(cfg.queries):
        expected = P.expected_canonical(query, events)
        if warms_up(cfg, index, query):
            for system in SYSTEMS:
                one_run(spark, bootstrap, work, specs, query, system, cfg, expected)
        outcomes: dict[str, list[Outcome]] = {s: [] for s in SYSTEMS}
        for rep in range(cfg.reps):
            for system in SYSTEMS if (rep + index) % 2 == 0 else SYSTEMS[::-1]:
                outcomes[system].append(one_run(spark, bootstrap, work, specs, query, system, cfg, expected))
        for system in SYSTEMS:
            rows.append(summary(query, system, outcomes[system], loaded, len(expected)))
    return rows


def warms_up(cfg: Config, index: int, query: str) -> bool:
    """Whether each system runs `query` once, untimed, before its measured runs: the first query (JIT, the first
    Python workers and imports) and every stateful one. The first run of a window or a join in a session pays for
    its operators and state store (JIT, the first foreachBatch of an update-mode sink), whichever system runs it:
    2-4x the next run's time (docs/benchmarks.md, "q5's gap (2026-11-30)"); the measured runs take turns going
    first, but with one or two reps the same system would pay it."""
    return not cfg.smoke and (index == 0 or query in P.STATEFUL)


def summary(query: str, system: str, outcomes: list[Outcome], loaded: Preloaded, expected_records: int) -> dict:
    """One table row: rates (median, best), counts and values checked, peak RSS (the highest of the runs)."""
    runs = [o.run for o in outcomes]
    rates = [r.rate for r in runs]
    row: dict[str, Any] = {"query": query, "system": system, "expected_in": P.expected_in(query, loaded),
           "expected_out": P.expected_out(query, loaded), "expected_records": expected_records,
           "records_in": [r.records_in for r in runs], "records_out": [r.records_out for r in runs],
           "seconds": [round(r.seconds, 2) for r in runs],
           "median_rate": statistics.median(rates), "best_rate": max(rates),
           "values_ok": all(o.values_ok for o in outcomes),
           "rss": [o.rss for o in outcomes],
           "rss_peak_mib": max(o.rss["rss_peak_mib"] for o in outcomes)}
    row["counts_ok"] = (set(row["records_in"]) == {row["expected_in"]}
                        and (row["expected_out"] is None or set(row["records_out"]) == {row["expected_out"]}))
    print(f"  {query} {system:<8} {row['median_rate']:>10,.0f} rec/s (best {row['best_rate']:,.0f}) "
          f"in {row['records_in']} out {row['records_out']} of {row['expected_out'] or 'changelog'}, "
          f"values {'ok' if row['values_ok'] else 'DIFFER'}, peak RSS {row['rss_peak_mib']:,} MiB"
          f"{'' if row['counts_ok'] else '  COUNT MISMATCH'}", flush=True)
    return row


def run_all(cfg: Config, bootstrap: str, spark, work: Path) -> dict:
    results: dict = {"config": asdict(cfg), "load_before": os.getloadavg(),
                     "date": time.strftime("%Y-%m-%d %H:%M %Z")}
    started = time.monotonic()
    print(f"preloading {cfg.events:,} Nexmark events", flush=True)
    loaded = preload(bootstrap, cfg.events, cfg.partitions, prefix=cfg.prefix)
    results["preload"] = asdict(loaded)
    results["rows"] = measure(spark, bootstrap, work, cfg, loaded)
    if cfg.latency_seconds > 0:
        results["latency"] = latency(spark, bootstrap, work, cfg)
    results["load_after"] = os.getloadavg()
    results["wall_seconds"] = time.monotonic() - started
    return results


def latency(spark, bootstrap: str, work: Path, cfg: Config) -> list[dict]:
    """bench/run.py's latency probe, dsflow and Spark's connector in turn on each query (the session is warm from
    the throughput runs)."""
    from bench import run

    probe = run.Config(rate=cfg.rate, latency_seconds=cfg.latency_seconds, latency_warmup=cfg.latency_warmup,
                       partitions=cfg.partitions, sections=("throughput", "latency"),
                       latency_queries=cfg.latency_queries or cfg.queries,
                       latency_systems=("dsflow", *run.SPARK_CONNECTOR))
    return run.latency(spark, bootstrap, work, probe)


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
        + f" --events {pre['events']} --reps {cfg['reps']}`: records/s over the preload (the records each query reads: "
        "bids, or persons and auctions for the joins), availableNow, median of the runs (best in brackets), wall time "
        "from building the DataFrame to the end of the run, query start included; the systems take turns going first"
        + (", after an untimed run of each on the first query and on each stateful one (q3, q5, q7, q8: the first "
           "run of a window or join in a session pays its JIT, whichever system runs it)." if not cfg["smoke"]
           else "; smoke run, no warm-up: the rates mean nothing."),
        "Every run: a fresh checkpoint, a new sink topic, its records read back and compared with the plain-Python "
        "reference (q5, q7: update-mode changelogs, compared by their final value per window key; their record "
        "count depends on the batching), its record count checked for the others. Peak RSS: the highest sum over "
        "the Python driver, the Spark driver JVM and Spark's Python workers sampled every 0.25 s during a run "
        "(bench/rss.py); all systems share one Spark session, so the JVM's heap carries over from run to run.",
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
        "| dsflow ÷ Spark's connector | peak RSS MiB, dsflow / `dsflow_kafka` / `kafka` | records in | records out |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["query"], r["system"]): r for r in results["rows"]}
    met = []
    for query in cfg["queries"]:
        line, ratio = table_row(query, [by[(query, s)] for s in SYSTEMS])
        lines.append(line)
        met.append(f"{query} {'yes' if ratio >= TARGET else 'no'}")
    lines += ["", f"Issue 39's throughput target, dsflow ≥ {TARGET}x Spark's connector (medians): {', '.join(met)}."]
    if results.get("latency"):
        lines += latency_lines(results["latency"], cfg)
    return "\n".join([*lines, "", END]) + "\n"


def latency_lines(rows: list[dict], cfg: dict) -> list[str]:
    """The latency table: p50/p99 per query, dsflow beside Spark's connector at one fixed rate (bench/run.py's
    probe, bench/latency.py), and issue 39's p99 target."""
    by = {(r["query"], r["system"]): r for r in rows}
    lines = ["", f"End-to-end latency at {cfg['rate']:,.0f} events/s (`--latency-seconds {cfg['latency_seconds']:g}`"
             f", after {cfg['latency_warmup']:g} s of warm-up; bench/run.py's probe, each query from the tail of "
             "topics of its own, both on the bench project's trigger interval):", "",
             "| query | dsflow p50 / p99 ms | Spark's connector p50 / p99 ms | p99 dsflow ÷ connector | measured |",
             "|---|---|---|---|---|"]
    met = []
    for query in cfg.get("latency_queries") or cfg["queries"]:
        ours, theirs = by.get((query, "dsflow"), {}), by.get((query, "spark"), {})
        ratio = (ours["p99_ms"] / theirs["p99_ms"]) if ours.get("p99_ms") and theirs.get("p99_ms") else None
        lines.append(f"| {query} | {_p(ours)} | {_p(theirs)} | {f'{ratio:.2f}x' if ratio else '—'} | "
                     f"{ours.get('arrived', '—')} / {theirs.get('arrived', '—')} |")
        met.append(f"{query} {'yes' if ratio is not None and ratio <= LATENCY_TARGET else 'no'}")
    return [*lines, "", f"Issue 39's latency target, dsflow's p99 ≤ {LATENCY_TARGET}x Spark's connector's: "
            f"{', '.join(met)}."]


def _p(row: dict) -> str:
    if "error" in row:
        return f"error: {' '.join(row['error'])[:80]}"
    return f"{row.get('p50_ms', '—')} / {row.get('p99_ms', '—')}"


def table_row(query: str, rows: list[dict]) -> tuple[str, float]:
    """One query's line of the table (rows in SYSTEMS order) and dsflow's rate over Spark's connector's."""
    n = report._n  # noqa: SLF001 - the generated tables' number format
    d, s = rows[0], rows[-1]
    ratio = d["median_rate"] / s["median_rate"] if s["median_rate"] else float("nan")
    rates = " | ".join(f"{n(r['median_rate'])} ({n(r['best_rate'])})" for r in rows)
    rss = " / ".join(f"{r['rss_peak_mib']:,}" if "rss_peak_mib" in r else "?" for r in rows)
    out = (f"{d['expected_out']:,}" if d["expected_out"] is not None
           else f"changelog, {d['expected_records']:,} window keys")
    counts = "" if all(r["counts_ok"] for r in rows) else " (COUNT MISMATCH)"
    values = "" if "values_ok" not in d else (", values checked" if all(r["values_ok"] for r in rows)
                                              else ", VALUES DIFFER")
    return (f"| {query} {report.QUERY_NAMES[query]} | {rates} | {ratio:.2f}x | {rss} | {d['expected_in']:,} | "
            f"{out}{counts}{values} |"), ratio


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
        if bad := [q for q in cfg.queries if q not in P.QUERIES]:
            raise SystemExit(f"--queries: {', '.join(bad)} not among {', '.join(P.QUERIES)}")
    cfg.prefix = args.prefix
    if args.latency_seconds is not None:
        cfg.latency_seconds = args.latency_seconds
    if args.rate:
        cfg.rate = args.rate
    if args.latency_queries:
        cfg.latency_queries = tuple(q.strip() for q in args.latency_queries.split(","))
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
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


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=None, help="Nexmark events to preload (default 200,000)")
    parser.add_argument("--reps", type=int, default=None, help="measured runs per query and system (default 3)")
    parser.add_argument("--queries", default=None, help="comma-separated among q0-q3,q5,q7,q8 (default all)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, values checked; seconds, not a measurement")
    parser.add_argument("--bootstrap", default=None, help="use this running broker instead of starting one")
    parser.add_argument("--prefix", default="", help="before every topic name (a shared broker)")
    parser.add_argument("--latency-seconds", type=float, default=None,
                        help="also probe p50/p99 at --rate for this long per query and system (default: no probe)")
    parser.add_argument("--rate", type=float, default=None, help="events/s of the latency probe (default 10,000)")
    parser.add_argument("--latency-queries", default=None, help="the queries probed (default: those of --queries)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the report (default docs/benchmarks.md; with --smoke a file in the temp folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="run nothing: write the section of the results a run saved with --json")
    return parser


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
    if broker is not None:
        cfg.rss_skip = (broker.pid,)
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
