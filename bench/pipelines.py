"""The three ways the benchmark runs each Nexmark query over the same Kafka topics.

- `dsflow`: the bench project (bench/nexmark_project) loaded by dsflow's real loader, translated
  by `translate.query_spec` and built by the query driver's own `build_dataframe`; only the
  trigger differs from `dsflow apply` (availableNow for throughput; the driver's processing-time
  trigger through `driver.start_query` for latency).
- `pyspark`: the same query written by hand in PySpark, same `dsflow_kafka` source and sink.
- `loop`: a plain Python confluent-kafka consume -> json -> transform -> json -> produce loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent / "nexmark_project"
STATELESS = ("q0", "q1", "q2")
STATEFUL = ("q3", "q5", "q7", "q8")
QUERIES = STATELESS + STATEFUL
CHANGELOGS = ("q5", "q7")
"""Aggregations: update mode, the sink holds upserts by key (its final content is the last value per key)."""
BID_DDL = "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time BIGINT, extra STRING"
PERSON_DDL = ("id BIGINT, name STRING, email_address STRING, credit_card STRING, city STRING, state STRING, "
              "date_time BIGINT, extra STRING")
AUCTION_DDL = ("id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, reserve BIGINT, "
               "date_time BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING")
SOURCE_TOPIC = "nexmark_bid"
WATERMARK_DELAY = "5 seconds"
"""dsflow's default 'watermark.delay', which the bench project keeps."""


def sink_topic(query: str) -> str:
    return f"nexmark_{query}"


@dataclass(frozen=True)
class Run:
    """One measured run over a fixed preload."""

    query: str
    system: str
    records_in: int
    records_out: int
    seconds: float
    """Wall time from start to the last record delivered (query start included)."""

    @property
    def rate(self) -> float:
        return self.records_in / self.seconds if self.seconds else 0.0


# --- dsflow -----------------------------------------------------------------------------------


def load_specs(bootstrap: str, work: Path, partitions: int = 2) -> dict[str, Any]:
    """QuerySpec per query name, through dsflow's loader and translator."""
    from dsflow.adapters.spark.translate import query_spec
    from dsflow.load.project import load_project

    project = load_project(PROJECT, variables={"bootstrap": bootstrap, "partitions": partitions})
    specs = {}
    for query in project.queries:
        name = query.fqn.rsplit(".", 1)[-1]
        specs[name] = query_spec(project, query, "bench", str(work / f"ckpt-{name}-{time.time_ns()}"),
                                 str(work / f"status-{name}.json"))
    return specs


def dsflow_frame(spark, spec) -> Any:
    from dsflow.adapters.spark.driver import build_dataframe

    return build_dataframe(spark, spec)


def run_dsflow_available_now(spark, spec, checkpoint: str) -> tuple[float, int]:
    """The query started exactly as dsflow's driver starts it (`start_query`), with the availableNow trigger."""
    from dsflow.adapters.spark.driver import start_query

    started = time.monotonic()
    query = start_query(spark, spec.model_copy(update={"checkpoint": checkpoint}), available_now=True)
    return finish(query, started)


# --- hand-written PySpark ---------------------------------------------------------------------


Reader = Callable[[str, str, bool], Any]
"""(topic, value DDL, timed) -> a source's rows: key + the value's columns, and with `timed` event time `ts` from
date_time (epoch ms), watermarked. The queries below are written once over a reader; which source reads the topic
(dsflow_kafka: `dsflow_reader`; Spark's own `kafka`: `spark_reader`, bench/kafka_connector.py's third way) is
the reader's business."""


def with_event_time(rows) -> Any:
    """`ts` from date_time (epoch ms), watermarked by dsflow's default delay."""
    from pyspark.sql import functions as F

    return rows.withColumn("ts", F.timestamp_millis("date_time")).withWatermark("ts", WATERMARK_DELAY)


def dsflow_reader(spark, bootstrap: str, starting_position: str, prefix: str = "") -> Reader:
    """Topics read through dsflow's `dsflow_kafka` source (its value is already a string)."""
    from pyspark.sql import functions as F

    def read(topic: str, ddl: str, timed: bool = False) -> Any:
        raw = (spark.readStream.format("dsflow_kafka").option("bootstrap.servers", bootstrap)
               .option("topic", prefix + topic).option("starting.position", starting_position).load())
        rows = raw.select("key", F.from_json("value", ddl).alias("v")).select("key", "v.*")
        return with_event_time(rows) if timed else rows

    return read


def pyspark_frame(spark, query: str, bootstrap: str, starting_position: str = "earliest", prefix: str = "") -> Any:
    """Each query written directly against the DataFrame API: (key, value) rows for the sink. `prefix` names
    other source topics (`<prefix>nexmark_bid` ...): each latency run has its own."""
    return query_frame(dsflow_reader(spark, bootstrap, starting_position, prefix), query)


def query_frame(read: Reader, query: str) -> Any:
    """The query's (key, value JSON) rows for the sink over the topics `read` reads."""
    if query in STATEFUL:
        return STATEFUL_FRAMES[query](read)
    return stateless_select(read(SOURCE_TOPIC, BID_DDL, False), query)


def spark_reader(spark, bootstrap: str, prefix: str = "", starting: str = "earliest") -> Reader:
    """Topics as a Spark user reads them: Kafka's bytes cast to strings, the value parsed with from_json and an
    explicit schema, event time watermarked where the query needs it."""
    from pyspark.sql import functions as F

    def read(topic: str, ddl: str, timed: bool = False) -> object:
        raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", prefix + topic).option("startingOffsets", starting).load())
        rows = raw.select(F.col("key").cast("string").alias("key"),
                          F.from_json(F.col("value").cast("string"), ddl).alias("v")).select("key", "v.*")
        return with_event_time(rows) if timed else rows

    return read


def spark_frame(spark, query: str, bootstrap: str, prefix: str = "", starting: str = "earliest") -> object:
    """The query (as the `pyspark` way runs it) over Spark's own Kafka source (bench/kafka_connector.py)."""
    return query_frame(spark_reader(spark, bootstrap, prefix, starting), query)


def spark_writer(frame, bootstrap: str, topic: str, checkpoint: str, update: bool) -> Any:
    """Spark's own Kafka sink; the aggregations in update mode (each batch writes the windows it changed), which
    Spark's Kafka sink takes as it is."""
    writer = (frame.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("checkpointLocation", checkpoint))
    return writer.outputMode("update") if update else writer


def run_spark(frame, bootstrap: str, topic: str, checkpoint: str, started: float, update: bool) -> tuple[float, int]:
    """availableNow into Spark's own Kafka sink: (seconds, records read)."""
    return finish(spark_writer(frame, bootstrap, topic, checkpoint, update).trigger(availableNow=True).start(),
                    started)


def start_spark(frame, bootstrap: str, topic: str, checkpoint: str, interval: str, update: bool) -> Any:
    """The query running on Spark's own Kafka sink, a micro-batch every `interval` (bench/run.py's latency probe)."""
    return spark_writer(frame, bootstrap, topic, checkpoint, update).trigger(processingTime=interval).start()


def stateless_select(bids, query: str) -> Any:
    """q0-q2 over bid rows (key + the value's columns): (key, value JSON) rows for the sink."""
    from pyspark.sql import functions as F

    cols = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]
    if query == "q1":
        bids = bids.withColumn("price", (F.lit(0.908) * F.col("price")).cast("double"))
    if query == "q2":
        bids = bids.where(F.col("auction") % 123 == 0)
        cols = ["auction", "price"]
    return bids.select("key", F.to_json(F.struct(*cols)).alias("value"))


def _q3_frame(read: Reader) -> Any:
    from pyspark.sql import functions as F

    auctions = read("nexmark_auction", AUCTION_DDL, True).alias("a")
    persons = read("nexmark_person", PERSON_DDL, True).alias("p")
    joined = auctions.join(persons, F.expr("a.seller = p.id AND p.ts BETWEEN a.ts - INTERVAL 10 SECONDS "
                                           "AND a.ts + INTERVAL 10 SECONDS"))
    joined = joined.where("a.category = 10 AND (p.state = 'OR' OR p.state = 'ID' OR p.state = 'CA')")
    return joined.select(F.col("a.key").alias("key"),
                         F.to_json(F.struct("p.name", "p.city", "p.state", "a.id")).alias("value"))


def _q5_frame(read: Reader) -> Any:
    from pyspark.sql import functions as F

    counts = (read(SOURCE_TOPIC, BID_DDL, True)
              .groupBy(F.window("ts", "10 seconds", "2 seconds").alias("w"), "auction")
              .agg(F.count(F.lit(1)).alias("num"))
              .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "auction", "num"))
    return counts.select(F.to_json(F.struct("window_start", "window_end", "auction")).alias("key"),
                         F.to_json(F.struct("window_start", "window_end", "auction", "num")).alias("value"))


def _q7_frame(read: Reader) -> Any:
    from pyspark.sql import functions as F

    highest = (read(SOURCE_TOPIC, BID_DDL, True)
               .groupBy(F.window("ts", "10 seconds").alias("w"))
               .agg(F.max("price").alias("maxprice"), F.count(F.lit(1)).alias("bids"))
               .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "maxprice", "bids"))
    return highest.select(F.to_json(F.struct("window_start", "window_end")).alias("key"),
                          F.to_json(F.struct("window_start", "window_end", "maxprice", "bids")).alias("value"))


def _q8_frame(read: Reader) -> Any:
    from pyspark.sql import functions as F

    persons = read("nexmark_person", PERSON_DDL, True).alias("p")
    auctions = read("nexmark_auction", AUCTION_DDL, True).alias("a")
    joined = persons.join(auctions, F.expr(
        "p.id = a.seller AND FLOOR(p.date_time / 10000) = FLOOR(a.date_time / 10000) "
        "AND a.ts BETWEEN p.ts - INTERVAL 10 SECONDS AND p.ts + INTERVAL 10 SECONDS"))
    value = F.struct(F.col("p.id").alias("id"), F.col("p.name").alias("name"),
                     F.col("p.date_time").alias("person_time"), F.col("a.id").alias("auction"),
                     F.col("a.date_time").alias("auction_time"))
    return joined.select(F.col("p.key").alias("key"), F.to_json(value).alias("value"))


STATEFUL_FRAMES: dict[str, Callable[[Reader], Any]] = {
    "q3": _q3_frame, "q5": _q5_frame, "q7": _q7_frame, "q8": _q8_frame,
}


# --- running a frame once over the preload ----------------------------------------------------


def _writer(frame, bootstrap: str, topic: str, checkpoint: str, update: bool) -> Any:
    """The sink: the dsflow_kafka stream writer, or (aggregations, update mode) foreachBatch + the batch writer,
    the way dsflow writes a changelog."""
    if not update:
        return (frame.writeStream.format("dsflow_kafka").option("bootstrap.servers", bootstrap)
                .option("topic", topic).option("checkpointLocation", checkpoint))

    def write(batch, _batch_id: int) -> None:
        batch.write.format("dsflow_kafka").mode("append").option("bootstrap.servers", bootstrap) \
            .option("topic", topic).save()

    return frame.writeStream.foreachBatch(write).outputMode("update").option("checkpointLocation", checkpoint)


def start_processing(frame, bootstrap: str, topic: str, checkpoint: str, interval: str, update: bool = False) -> Any:
    """The hand-written query started the way the dsflow driver starts one (processing-time trigger)."""
    return _writer(frame, bootstrap, topic, checkpoint, update).trigger(processingTime=interval).start()


def run_available_now(frame, bootstrap: str, topic: str, checkpoint: str, update: bool = False,
                      started: float | None = None) -> tuple[float, int]:
    """Write `frame` to `topic` with the availableNow trigger; (seconds, input rows) since `started` (default:
    now). The harness passes the time from before it built `frame`, as dsflow's time includes building its own."""
    started = time.monotonic() if started is None else started
    query = _writer(frame, bootstrap, topic, checkpoint, update).trigger(availableNow=True).start()
    return finish(query, started)


def finish(query, started: float) -> tuple[float, int]:
    """Wait for an availableNow query to end; (seconds since `started`, input rows), or its error raised."""
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    rows = sum(p.get("numInputRows", 0) for p in query.recentProgress)
    return seconds, rows


# --- the plain Python loop --------------------------------------------------------------------


def _q0(bid: dict) -> dict | None:
    return bid


def _q1(bid: dict) -> dict | None:
    bid["price"] = 0.908 * bid["price"]
    return bid


def _q2(bid: dict) -> dict | None:
    return {"auction": bid["auction"], "price": bid["price"]} if bid["auction"] % 123 == 0 else None


LOOP_TRANSFORMS: dict[str, Callable[[dict], dict | None]] = {"q0": _q0, "q1": _q1, "q2": _q2}


def run_loop(query: str, bootstrap: str, topic: str, partitions: list[int] | None = None,
             follow_seconds: float | None = None, source: str = SOURCE_TOPIC) -> tuple[float, int, int]:
    """consume -> json.loads -> transform -> json.dumps -> produce over every record now in the source.

    Reads each partition from 0 to its true end with assign() (no group), the way a hand-rolled
    Python service would; returns (seconds, records in, records out). With `follow_seconds` it
    starts at the end instead and keeps going that long (the latency run).
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    from dsflow.adapters.kafka import client

    transform = LOOP_TRANSFORMS[query]
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    loads = json.loads
    started = time.monotonic()
    consumer = Consumer({**client.CONSUMER_DEFAULTS, "bootstrap.servers": bootstrap})
    producer = Producer({**client.PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap})
    parts = partitions if partitions is not None else client.topic_partitions(consumer, source)
    ends = client.end_offsets(consumer, source, parts)
    follow = follow_seconds is not None
    consumer.assign([TopicPartition(source, p, ends[p] if follow else 0) for p in parts])
    left, seen, out = sum(ends.values()), 0, 0
    produce = producer.produce
    until = started + (follow_seconds or 0)
    while (time.monotonic() < until) if follow else (seen < left):
        for m in consumer.consume(10_000, 0.01 if follow else 0.5):
            if m.error() is not None:
                continue
            seen += 1
            result = transform(loads(m.value()))
            if result is not None:
                while True:
                    try:
                        produce(topic, dumps(result), m.key())
                        break
                    except BufferError:
                        producer.poll(0.05)
                out += 1
        producer.poll(0)
    producer.flush(60)
    consumer.close()
    return time.monotonic() - started, seen, out


def expected_records(query: str, bids: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """What the query must write for these (key, bid) inputs, as (key, record) pairs."""
    out = []
    for key, bid in bids:
        result = LOOP_TRANSFORMS[query](dict(bid))
        if result is not None:
            out.append((key, result))
    return out


def _iso(ms: int) -> str:
    """A window bound as Spark's to_json writes a TIMESTAMP (session time zone UTC)."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _hop_starts(ts: int, size: int, slide: int) -> list[int]:
    first = ts - ts % slide - (size - slide)
    return [start for start in range(first, ts + 1, slide) if start <= ts < start + size]


def expected_stateful(query: str, events: list[tuple[str, str, dict]]) -> list[tuple[str | None, dict]]:
    """What q3/q8 must write, or q5/q7's final content (one record per window key), for these events.

    Assumes no event is behind the watermark, which holds for the generator's preload (event time
    grows with the event number, far less than the 5 s delay apart between partitions).
    """
    persons = {r["id"]: (key, r) for kind, key, r in events if kind == "person"}
    auctions = [(key, r) for kind, key, r in events if kind == "auction"]
    bids = [r for kind, _, r in events if kind == "bid"]
    out: list[tuple[str | None, dict]] = []
    if query == "q3":
        for key, a in auctions:
            p = persons.get(a["seller"], (None, None))[1]
            if (a["category"] == 10 and p is not None and p["state"] in ("OR", "ID", "CA")
                    and abs(p["date_time"] - a["date_time"]) <= 10_000):
                out.append((key, {"name": p["name"], "city": p["city"], "state": p["state"], "id": a["id"]}))
    elif query == "q8":
        for _, a in auctions:
            pkey, p = persons.get(a["seller"], (None, None))
            if (p is not None and p["date_time"] // 10_000 == a["date_time"] // 10_000
                    and abs(p["date_time"] - a["date_time"]) <= 10_000):
                out.append((pkey, {"id": p["id"], "name": p["name"], "person_time": p["date_time"],
                                   "auction": a["id"], "auction_time": a["date_time"]}))
    elif query == "q5":
        counts: dict[tuple[int, int], int] = {}
        for b in bids:
            for start in _hop_starts(b["date_time"], 10_000, 2_000):
                counts[(start, b["auction"])] = counts.get((start, b["auction"]), 0) + 1
        out = [(None, {"window_start": _iso(s), "window_end": _iso(s + 10_000), "auction": a, "num": n})
               for (s, a), n in counts.items()]
    elif query == "q7":
        windows: dict[int, tuple[int, int]] = {}
        for b in bids:
            start = b["date_time"] - b["date_time"] % 10_000
            high, n = windows.get(start, (b["price"], 0))
            windows[start] = (max(high, b["price"]), n + 1)
        out = [(None, {"window_start": _iso(s), "window_end": _iso(s + 10_000), "maxprice": m, "bids": n})
               for s, (m, n) in windows.items()]
    return out


def final_content(records: list[dict]) -> list[tuple[None, dict]]:
    """A changelog sink's last value per key (records in partition-offset order, as read)."""
    latest: dict[tuple, tuple[int, dict]] = {}
    for r in records:
        k = (r["partition"], r["key"])
        if k not in latest or r["offset"] > latest[k][0]:
            latest[k] = (r["offset"], json.loads(r["value"]))
    return [(None, v) for _, v in latest.values()]


def canonical(records: Iterable[tuple[str | None, dict]]) -> list[tuple]:
    """Records as sortable tuples, floats rounded (q1's price is a double on every path)."""
    rows = []
    for key, record in records:
        rows.append((key, tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in record.items()))))
    return sorted(rows, key=repr)


def expected_in(query: str, loaded: Any) -> int:
    """Records a run over the preload (a bench.preload.Preloaded) reads: every bid, or for the joins every person
    and auction."""
    if query in ("q3", "q8"):
        return loaded.counts["person"] + loaded.counts["auction"]
    return loaded.counts["bid"]


def expected_out(query: str, loaded: Any) -> int | None:
    """Records the sink must hold after a run over the preload; None for the changelogs (their update count
    depends on the batching)."""
    if query == "q2":
        return loaded.q2_matches
    if query in STATELESS:
        return loaded.counts["bid"]
    return loaded.expected.get(query)


def sink_count(bootstrap: str, topic: str) -> int:
    """Records in a topic, by its end offsets."""
    from dsflow.adapters.kafka import client

    with client.consumer(client.client_config(bootstrap)) as c:
        return sum(client.end_offsets(c, topic, client.topic_partitions(c, topic)).values())


def expected_canonical(query: str, events: list[tuple[str, str, dict]]) -> list[tuple]:
    """What the query's sink must hold for these (kind, key, record) events, canonical: every record of q0-q3 and
    q8, q5/q7's final content (one record per window key)."""
    if query in STATELESS:
        return canonical(expected_records(query, [(k, r) for kind, k, r in events if kind == "bid"]))
    return canonical(expected_stateful(query, events))


def sink_canonical(query: str, records: list[dict]) -> list[tuple]:
    """A sink's records as read (`read_to_end`), canonical, comparable with `expected_canonical`."""
    if query in CHANGELOGS:
        return canonical(final_content(records))
    return canonical([(r["key"], json.loads(r["value"])) for r in records])


def sink_difference(got: list[tuple], expected: list[tuple], read: int) -> str:
    """What a sink holds that it should not and what it lacks, for the report of a failed check."""
    from collections import Counter

    missing = Counter(expected) - Counter(got)
    unexpected = Counter(got) - Counter(expected)
    parts = [f"sink differs from the expected records ({len(got)} vs {len(expected)}, from {read} records read)"]
    for label, rows in (("missing", missing), ("unexpected", unexpected)):
        if rows:
            parts.append(f"{sum(rows.values())} {label}, first {min(rows, key=repr)}")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    """`python bench/pipelines.py loop QUERY BOOTSTRAP SECONDS [SOURCE]`: the loop following the topic's tail."""
    _, query, bootstrap, seconds, *source = argv
    run_loop(query, bootstrap, sink_topic(query), follow_seconds=float(seconds),
             source=source[0] if source else SOURCE_TOPIC)
    return 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main(sys.argv[1:]))
