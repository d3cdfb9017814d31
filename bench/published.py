"""The published Nexmark queries (bench/nexmark_published) for throughput, beside bench/run.py's seven.

    python bench/run.py --only published --events 200000 --reps 2

The same generated events as bench/run.py's other queries (dsflow.datagen.nexmark, seed 0, events 0..N-1, their
own times), written in the published DDL's shape to topics of their own (`pub_nexmark_person`, ...): columns
renamed (`dateTime`, `itemName`, ...), times as ISO-8601 text (`TIMESTAMP(3)`), each bid's price mapped onto the
published Flink generator's log-uniform prices as tests/integration/test_nexmark_published.py maps them (else
q14's band and q15-q17's top tiers hold nothing). Every query whose file validates alone in the project (what the
README calls "runs"; a query added later is measured without an edit) runs with the availableNow trigger over the
whole preload, as dsflow's driver starts it (`start_query`), on a fresh checkpoint into a recreated sink topic:
records/s = records read / wall time from start to end, query start included. Values are not checked here (the
integration test compares every query with DuckDB); records out are counted.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import pipelines as P
from bench.preload import recreate_topics

FOLDER = Path(__file__).resolve().parent / "nexmark_published"
PREFIX = "pub_"
FEWER = {"q23": 4_000}
"""Queries measured over a preload of their own of the first N events: q23's three-way regular join's output grows
with the square of the events (415,357 rows of 4,000 events, 26,400 of 1,000), so over the whole preload it would
measure its output, not its input."""
RENAMED = {"email_address": "emailAddress", "credit_card": "creditCard", "item_name": "itemName",
           "initial_bid": "initialBid", "date_time": "dateTime"}
TIMES = ("date_time", "expires")
BEGIN = "<!-- bench/run.py's published-queries section -->"
END = "<!-- end of bench/run.py's published-queries section -->"


def published_price(price: int) -> int:
    """The generator's uniform price (100..100,099) mapped onto Nexmark's log-uniform one (100..10^8)."""
    return round(10 ** ((price - 100) / 100_000 * 6) * 100)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def published_record(kind: str, record: dict) -> dict:
    """A generated record in the published DDL's shape."""
    row = {RENAMED.get(k, k): _iso(v) if k in TIMES else v for k, v in record.items()}
    if kind == "bid":
        row["price"] = published_price(row["price"])
    return row


def preload(bootstrap: str, events: int, partitions: int, prefix: str = PREFIX) -> dict[str, int]:
    """Events 0..events-1 into the `prefix` topics, keyed as bench/preload.py keys them; records per kind."""
    from confluent_kafka import Producer

    from dsflow.datagen import nexmark

    topics = {kind: f"{prefix}nexmark_{kind}" for kind in ("person", "auction", "bid")}
    recreate_topics(bootstrap, partitions, list(topics.values()))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 2_000_000, "enable.idempotence": True,
                         "partitioner": "murmur2_random"})
    counts = dict.fromkeys(topics, 0)
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    for kind, key, record in nexmark.events(0, events):
        while True:
            try:
                producer.produce(topics[kind], dumps(published_record(kind, record)).encode(), key.encode())
                break
            except BufferError:
                producer.poll(0.05)
        counts[kind] += 1
    if producer.flush(120):
        raise RuntimeError("the published preload was not flushed")
    return counts


SIDE_KEYS = 10_000
"""q13's side input: a row for every key of `mod(auction, 10000)`, so every bid joins one."""


def side_input(bootstrap: str, topic: str, partitions: int) -> None:
    """q13's side input (Flink's CSV file table, here a Kafka changelog keyed by `key`): SIDE_KEYS rows."""
    from confluent_kafka import Producer

    recreate_topics(bootstrap, partitions, [topic])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for key in range(SIDE_KEYS):
        producer.produce(topic, json.dumps({"key": key, "value": f"side-{key}"}).encode(), str(key).encode())
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("q13's side input was not flushed")


def project(bootstrap: str, root: Path, partitions: int, prefix: str = PREFIX,
            only: tuple[str, ...] = ()) -> tuple[object, list[str], dict[str, str]]:
    """The published project with every query file that validates alone (copied to `root`, topics prefixed; with
    `only`, those of its queries; else all but FEWER's): (project, the queries that run, {query: why not} for the
    others)."""
    from dsflow.load.project import check_project, load_project

    shutil.copytree(FOLDER / "project", root)
    config = root / "dsflow.yml"
    config.write_text(config.read_text().replace("  dev:\n", f"  dev:\n    topic_prefix: \"{prefix}\"\n"))
    runs, refused = [], {}
    for path in sorted((FOLDER / "queries").glob("q*.sql"), key=lambda p: int(p.stem[1:])):
        name = path.stem
        if (name not in only) if only else (name in FEWER):
            continue
        with tempfile.TemporaryDirectory() as alone:
            shutil.copytree(root, alone, dirs_exist_ok=True)
            shutil.copy(path, Path(alone) / "sql")
            errors = check_project(Path(alone), None, {"bootstrap": bootstrap}).errors
        if errors:
            refused[name] = f"refused by validate ({errors[0].code})"
        else:
            shutil.copy(path, root / "sql")
            runs.append(name)
    return load_project(root, variables={"bootstrap": bootstrap, "partitions": partitions}), runs, refused


def throughput(spark, bootstrap: str, work: Path, events: int, partitions: int, reps: int) -> dict:
    """records/s of each published query that runs: an untimed run, then `reps` measured ones (median, best)."""
    started = time.monotonic()
    counts = preload(bootstrap, events, partitions)
    preload_seconds = time.monotonic() - started
    loaded, runs, refused = project(bootstrap, work / "published_project", partitions)
    if "q13" in runs:
        side_input(bootstrap, loaded.relation("nexmark.public.side_input").topic, partitions)
    rows = [_measured(spark, bootstrap, work, loaded, name, partitions, reps, events) for name in runs]
    for name, count in FEWER.items():
        prefix = f"{PREFIX}{name}_"
        preload(bootstrap, min(count, events), partitions, prefix)
        own, alone, why = project(bootstrap, work / f"published_{name}", partitions, prefix, (name,))
        refused.update(why)
        rows += [_measured(spark, bootstrap, work, own, name, partitions, reps, min(count, events)) for name in alone]
    rows.sort(key=lambda row: int(row["query"][1:]))
    return {"events": events, "counts": counts, "partitions": partitions, "reps": reps, "rows": rows,
            "refused": refused, "preload_seconds": preload_seconds}


def _measured(spark, bootstrap: str, work: Path, loaded, name: str, partitions: int, reps: int, events: int) -> dict:
    """One untimed run of query `name`, then `reps` measured ones: its row of the table."""
    from dsflow.adapters.spark.translate import query_spec

    query = next(q for q in loaded.queries if q.sink.endswith(f".nexmark_{name}"))
    spec = query_spec(loaded, query, "bench", str(work / "unused"), str(work / f"status-pub-{name}.json"))
    sink = loaded.relation(query.sink).topic
    measured = [_one_run(spark, bootstrap, work, name, spec, sink, partitions) for _ in range(reps + 1)][1:]
    rates = [r.rate for r in measured]
    row = {"query": name, "median_rate": statistics.median(rates), "best_rate": max(rates), "events": events,
           "records_in": measured[-1].records_in, "records_out": measured[-1].records_out,
           "changelog": loaded.relation(query.sink).kind == "changelog",
           "seconds": [round(r.seconds, 2) for r in measured]}
    print(f"  {name} {row['median_rate']:>10,.0f} rec/s (best {row['best_rate']:,.0f}) in {row['records_in']:,}"
          f" out {row['records_out']:,}", flush=True)
    return row


def _one_run(spark, bootstrap: str, work: Path, name: str, spec, sink: str, partitions: int) -> P.Run:
    recreate_topics(bootstrap, partitions, [sink])
    seconds, records_in = P.run_dsflow_available_now(spark, spec, str(work / f"ckpt-pub-{name}-{time.time_ns()}"))
    return P.Run(name, "dsflow", records_in, P.sink_count(bootstrap, sink), seconds)


def render(results: dict, machine: dict, load: tuple) -> str:
    """The section of docs/benchmarks.md, between BEGIN and END."""
    pub, (before, after) = results["published"], load
    runs = len(pub["rows"])
    lines = [
        BEGIN,
        f"## The published Nexmark queries (issue 46): {runs} that run, {pub['events']:,} events, {pub['reps']} run(s)",
        "",
        f"`python bench/run.py --only published --events {pub['events']} --reps {pub['reps']}` (bench/published.py): "
        "each query of bench/nexmark_published that runs, as its adapted file, through dsflow's loader and "
        "translator, started by the driver's `start_query` with the availableNow trigger over the whole preload, "
        "on a fresh checkpoint into a recreated sink topic, after one untimed run of its own; records/s = records "
        "read (the query's sources: bids, or persons, auctions and bids for the joins) / wall time from start to "
        "end, query start included; median of the runs (best in brackets). Values are checked against DuckDB by "
        "tests/integration/test_nexmark_published.py, not here.",
        "",
        f"- machine: {machine['nproc']} cores ({machine['cpu']}), {machine['memory_gib']} GiB; run {machine['date']}; "
        f"load average (1/5/15 min) {_load(before)} before, {_load(after)} after",
        f"- PySpark {machine['pyspark']} (local[2]), {machine['java']}; broker: {machine['broker']}, on loopback",
        f"- data: {pub['events']:,} Nexmark events (seed 0: events 0 to {pub['events'] - 1:,} of the generator "
        "bench/run.py preloads for its other queries): "
        f"{pub['counts']['person']:,} persons, {pub['counts']['auction']:,} auctions, {pub['counts']['bid']:,} bids, "
        f"in the published DDL's shape (columns renamed, ISO times, prices mapped onto Nexmark's log-uniform ones), "
        f"topics of {pub['partitions']} partitions; preload {pub['preload_seconds']:.1f} s",
        "",
        "| query | records/s | records in | records out | seconds per run |",
        "|---|---|---|---|---|",
    ]
    for row in pub["rows"]:
        out = f"{row['records_out']:,}" + (" upserts" if row["changelog"] else "")
        label = row["query"] if row.get("events", pub["events"]) == pub["events"] else \
            f"{row['query']} (its own preload of the first {row['events']:,} events: FEWER)"
        lines.append(f"| {label} | {row['median_rate']:,.0f} ({row['best_rate']:,.0f}) | "
                     f"{row['records_in']:,} | {out} | {', '.join(str(s) for s in row['seconds'])} |")
    lines += ["", "Not measured: " + "; ".join(f"{q}, {why}" for q, why in pub["refused"].items()) + "."
              if pub["refused"] else "Every query that runs was measured.", END]
    return "\n".join(lines) + "\n"


def _load(values) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def replace_section(doc: str, section: str, marker: str) -> str:
    """`doc` with the text between BEGIN and END replaced by `section`; without them, the section goes right
    after `marker` (bench/run.py's hand-written marker, so that run.py keeps it), else at the end."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start >= 0 and end > start:
        return doc[:start] + section + doc[end + len(END):].removeprefix("\n")
    at = doc.find(marker)
    if at < 0:
        return doc.rstrip("\n") + "\n\n" + section if doc.strip() else section
    after = at + len(marker)
    return doc[:after] + "\n\n" + section + "\n" + doc[after:].lstrip("\n")
