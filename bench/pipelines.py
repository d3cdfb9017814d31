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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent / "nexmark_project"
QUERIES = ("q0", "q1", "q2")
BID_DDL = "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time BIGINT, extra STRING"
SOURCE_TOPIC = "nexmark_bid"


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


# --- hand-written PySpark ---------------------------------------------------------------------


def _bids(spark, bootstrap: str, starting_position: str) -> Any:
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("dsflow_kafka").option("bootstrap.servers", bootstrap)
           .option("topic", SOURCE_TOPIC).option("starting.position", starting_position).load())
    return raw.select("key", F.from_json("value", BID_DDL).alias("b")).select("key", "b.*")


def pyspark_frame(spark, query: str, bootstrap: str, starting_position: str = "earliest") -> Any:
    """q0-q2 written directly against the DataFrame API."""
    from pyspark.sql import functions as F

    bids = _bids(spark, bootstrap, starting_position)
    cols = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]
    if query == "q1":
        bids = bids.withColumn("price", (F.lit(0.908) * F.col("price")).cast("double"))
    if query == "q2":
        bids = bids.where(F.col("auction") % 123 == 0)
        cols = ["auction", "price"]
    return bids.select("key", F.to_json(F.struct(*cols)).alias("value"))


# --- running a frame once over the preload ----------------------------------------------------


def start_processing(frame, bootstrap: str, topic: str, checkpoint: str, interval: str) -> Any:
    """The hand-written query started the way the dsflow driver starts one (processing-time trigger)."""
    return (frame.writeStream.format("dsflow_kafka").option("bootstrap.servers", bootstrap)
            .option("topic", topic).option("checkpointLocation", checkpoint)
            .trigger(processingTime=interval).start())


def run_available_now(frame, bootstrap: str, topic: str, checkpoint: str) -> tuple[float, int]:
    """Write `frame` to `topic` with the availableNow trigger; (seconds, input rows)."""
    started = time.monotonic()
    query = (frame.writeStream.format("dsflow_kafka").option("bootstrap.servers", bootstrap)
             .option("topic", topic).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
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
             follow_seconds: float | None = None) -> tuple[float, int, int]:
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
    parts = partitions if partitions is not None else client.topic_partitions(consumer, SOURCE_TOPIC)
    ends = client.end_offsets(consumer, SOURCE_TOPIC, parts)
    follow = follow_seconds is not None
    consumer.assign([TopicPartition(SOURCE_TOPIC, p, ends[p] if follow else 0) for p in parts])
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


def canonical(records: list[tuple[str | None, dict]]) -> list[tuple]:
    """Records as sortable tuples, floats rounded (q1's price is a double on every path)."""
    rows = []
    for key, record in records:
        rows.append((key, tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in record.items()))))
    return sorted(rows, key=repr)


def main(argv: list[str]) -> int:
    """`python bench/pipelines.py loop QUERY BOOTSTRAP SECONDS`: the loop following the topic's tail."""
    _, query, bootstrap, seconds = argv
    run_loop(query, bootstrap, sink_topic(query), follow_seconds=float(seconds))
    return 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main(sys.argv[1:]))
