"""End-to-end latency probe: produce Nexmark bids at a fixed rate, time them out of the sink.

    python bench/latency.py --bootstrap HOST:PORT --sink nexmark_q0 --rate 10000 --seconds 30

Runs in its own process (so the probe and the pipeline under test do not share a GIL). A
producer thread sends bid `n` with key `n` (unique) at `rate` records/s, deadline-paced, and
notes the wall-clock time of each produce() call; `date_time` is that time too. A consumer
thread follows every partition of the sink topic from its end and notes when each key arrives.
Latency = arrival - produce, for records produced after `--warmup` seconds. The pipeline must
carry the Kafka key through (dsflow does). Prints one JSON object.

Stateful queries (`--measure window` or `--measure join`): the producer sends every Nexmark event kind
(persons, auctions, bids, each to its topic) at `rate` events/s with `date_time` = the produce time, so
event time is wall-clock time.

    window  q5, q7: one sample per result key (window, and auction for q5) whose window ended after the
            warm-up and before the producer stopped: the arrival of its last update minus the produce time
            of the last bid in that window (of that auction for q5), i.e. how long after its last input
            the final figure was visible (the sink gets updates, not just final rows).
    join    q3, q8: one sample per joined auction: its arrival minus the produce time of that auction (the
            later of the two joined events: a seller exists before their auction).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsflow.datagen import nexmark  # noqa: E402
from dsflow.adapters.kafka import client  # noqa: E402

SOURCE = "nexmark_bid"
TICK_S = 0.002
QUEUE_MESSAGES = 1_000_000
FLUSH_S = 120.0


def produce_paced(bootstrap: str, rate: float, seconds: float, sent: dict[str, float], stop: threading.Event,
                  first_n: int, prefix: str = "") -> int:
    """Bids first_n, first_n+1, ... at `rate`/s for `seconds`; sent[key] = produce time. Returns how many records
    the broker had still not acknowledged after the final flush (0 normally)."""
    from confluent_kafka import Producer

    # A queue deep enough for a minute at 10k/s: the default (100,000 messages) filled during a slow spell of the
    # broker and produce() raised BufferError, which ended the probe ("Producer terminating with 100000 messages").
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "partitioner": "murmur2_random",
                         "queue.buffering.max.messages": QUEUE_MESSAGES, "queue.buffering.max.kbytes": 1_048_576})
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    start = time.time()
    n = 0
    while not stop.is_set():
        now = time.time()
        if now - start >= seconds:
            break
        due = int((now - start) * rate)
        while n < due:
            i = first_n + nexmark.nth_of_kind("bid", n)
            t = time.time()
            record, key = dumps(nexmark.bid(i, 0, int(t * 1000))), str(i)
            _produce(producer, record, key, prefix + SOURCE)
            sent[key] = t  # latency counts from the first attempt: time spent waiting for queue room included
            n += 1
        producer.poll(0)
        time.sleep(TICK_S)
    return _flush(producer, FLUSH_S)


def _produce(producer, value: bytes, key: str, topic: str = SOURCE) -> None:
    """produce(), waiting for room in the local queue instead of failing when the broker falls behind."""
    while True:
        try:
            producer.produce(topic, value, key)
            return
        except BufferError:
            producer.poll(0.05)


def _flush(producer, timeout: float) -> int:
    """Deliver everything queued (up to `timeout` s); the number of records still undelivered."""
    deadline = time.time() + timeout
    left = len(producer)
    while left and time.time() < deadline:
        left = producer.flush(min(5.0, max(0.1, deadline - time.time())))
    return left


def produce_all_kinds(bootstrap: str, rate: float, seconds: float, auctions: dict[str, float],
                      bids: dict[str, list[int]], stop: threading.Event, first_n: int,
                      prefix: str = "") -> tuple[int, int]:
    """Nexmark events first_n, first_n+1, ... of every kind at `rate`/s, each to its topic, with event time =
    produce time; auctions[id] = produce time of each auction, bids[auction] (and bids['*']) = the event times
    (ms, ascending) of its bids. Returns (records sent, records undelivered)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "partitioner": "murmur2_random",
                         "queue.buffering.max.messages": QUEUE_MESSAGES, "queue.buffering.max.kbytes": 1_048_576})
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    start = time.time()
    n = 0
    while not stop.is_set() and time.time() - start < seconds:
        due = int((time.time() - start) * rate)
        while n < due:
            t = time.time()
            kind, key, record = nexmark.event(first_n + n, 0, int(t * 1000))
            _produce(producer, dumps(record), key, f"{prefix}nexmark_{kind}")
            if kind == "auction":
                auctions[str(record["id"])] = t
            elif kind == "bid":
                bids.setdefault(str(record["auction"]), []).append(record["date_time"])
                bids.setdefault("*", []).append(record["date_time"])
            n += 1
        producer.poll(0)
        time.sleep(TICK_S)
    return n, _flush(producer, FLUSH_S)


def follow_values(bootstrap: str, topic: str, arrived: dict[str, tuple[float, dict]], key_of, stop: threading.Event,
                  last: bool) -> None:
    """Note when each result (by key_of(value)) arrives in `topic`: its first arrival, or with `last` its latest."""
    for m in tail(bootstrap, topic, stop):
        if m.value() is not None:
            value = json.loads(m.value())
            key = key_of(value)
            if last or key not in arrived:
                arrived[key] = (time.time(), value)


def tail(bootstrap: str, topic: str, stop: threading.Event):
    """Every record written to `topic` from now on (every partition, from its end), until `stop` is set."""
    from confluent_kafka import TopicPartition

    with client.consumer(client.client_config(bootstrap, {"fetch.wait.max.ms": "10"})) as c:
        parts = client.topic_partitions(c, topic)
        ends = client.end_offsets(c, topic, parts)
        c.assign([TopicPartition(topic, p, off) for p, off in ends.items()])
        while not stop.is_set():
            yield from (m for m in c.consume(10_000, 0.005) if m.error() is None)


def epoch_seconds(value: object) -> float:
    """A window bound as the sink writes it: epoch ms, or an ISO-8601 timestamp."""
    if isinstance(value, (int, float)):
        return float(value) / 1000
    from datetime import datetime, timezone

    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()


def last_input(times_ms: list[int], start: float, end: float) -> float | None:
    """The latest of the ascending event times (ms) in [start, end) (seconds), in seconds; None if none."""
    import bisect

    i = bisect.bisect_left(times_ms, end * 1000) - 1
    return times_ms[i] / 1000 if i >= 0 and times_ms[i] >= start * 1000 else None


def measure_stateful(bootstrap: str, sink: str, kind: str, rate: float, seconds: float, warmup: float,
                     drain: float, first_n: int, prefix: str = "") -> dict:
    """Latency of a windowed aggregation (kind 'window') or a join (kind 'join'); see the module docstring."""
    auctions: dict[str, float] = {}
    bids: dict[str, list[int]] = {}
    arrived: dict[str, tuple[float, dict]] = {}
    if kind == "window":
        def key_of(v: dict) -> str:
            return json.dumps([v.get("window_start"), v.get("window_end"), v.get("auction")])
    else:
        def key_of(v: dict) -> str:
            return str(v.get("auction", v.get("id")))
    stop_consumer, stop_producer = threading.Event(), threading.Event()
    consumer = threading.Thread(target=follow_values, args=(bootstrap, sink, arrived, key_of, stop_consumer,
                                                            kind == "window"), daemon=True)
    consumer.start()
    time.sleep(1.0)
    began = time.time()
    sent, unsent = produce_all_kinds(bootstrap, rate, seconds, auctions, bids, stop_producer, first_n, prefix)
    stopped = time.time()
    time.sleep(min(drain, 15.0 if kind == "window" else 5.0))  # a window closes once the watermark passes it
    stop_consumer.set()
    consumer.join(5)
    if kind == "window":
        lat = []
        for arrival, value in arrived.values():
            start, end = epoch_seconds(value["window_start"]), epoch_seconds(value["window_end"])
            last = last_input(bids.get(str(value.get("auction", "*")), []), start, end)
            if last is not None and began + warmup <= end <= stopped:
                lat.append(arrival - last)
        lat.sort()
    else:
        lat = sorted(t - auctions[k] for k, (t, _) in arrived.items() if k in auctions and
                     auctions[k] - began >= warmup)
    return {
        "rate": rate, "seconds": round(stopped - began, 1), "sent": sent,
        "measured_sent": len(lat), "arrived": len(lat), "results": len(arrived),
        "achieved_rate": round(sent / (stopped - began)), "p50_ms": round(percentile(lat, 0.50) * 1000, 1),
        "p99_ms": round(percentile(lat, 0.99) * 1000, 1), "max_ms": round(lat[-1] * 1000, 1) if lat else None,
        "undelivered": unsent, "measure": kind,
    }


def follow(bootstrap: str, topic: str, arrived: dict[str, float], stop: threading.Event) -> None:
    """Note the arrival time of every key written to `topic` from now on."""
    for m in tail(bootstrap, topic, stop):
        if m.key() is not None:
            arrived.setdefault(m.key().decode(), time.time())


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def measure(bootstrap: str, sink: str, rate: float, seconds: float, warmup: float, drain: float,
            expect_all: bool, first_n: int, prefix: str = "") -> dict:
    sent: dict[str, float] = {}
    arrived: dict[str, float] = {}
    stop_consumer, stop_producer = threading.Event(), threading.Event()
    consumer = threading.Thread(target=follow, args=(bootstrap, sink, arrived, stop_consumer), daemon=True)
    consumer.start()
    time.sleep(1.0)  # the consumer is assigned before the first record is sent
    began = time.time()
    unsent = produce_paced(bootstrap, rate, seconds, sent, stop_producer, first_n, prefix)
    produced_for = time.time() - began
    deadline = time.time() + drain
    counted = {k: t for k, t in sent.items() if t - began >= warmup}
    while time.time() < deadline and (expect_all and not counted.keys() <= arrived.keys()):
        time.sleep(0.2)
    if not expect_all:
        time.sleep(min(drain, 5.0))
    stop_consumer.set()
    consumer.join(5)
    lat = sorted(arrived[k] - t for k, t in counted.items() if k in arrived)
    return {
        "rate": rate, "seconds": round(produced_for, 1), "sent": len(sent), "measured_sent": len(counted),
        "arrived": len(lat), "achieved_rate": round(len(sent) / produced_for),
        "p50_ms": round(percentile(lat, 0.50) * 1000, 1), "p99_ms": round(percentile(lat, 0.99) * 1000, 1),
        "max_ms": round(lat[-1] * 1000, 1) if lat else None, "undelivered": unsent,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--rate", type=float, default=10_000)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--warmup", type=float, default=5)
    p.add_argument("--drain", type=float, default=20)
    p.add_argument("--first-event", type=int, default=10**9, help="event numbers (keys) start here")
    p.add_argument("--prefix", default="", help="source topics are <prefix>nexmark_bid, ... (one set per run)")
    p.add_argument("--filtered", action="store_true", help="the query drops records: do not wait for all")
    p.add_argument("--measure", choices=["record", "window", "join"], default="record",
                   help="record: each bid's own latency (q0-q2); window: q5, q7; join: q3, q8")
    args = p.parse_args(argv)
    if args.measure != "record":
        result = measure_stateful(args.bootstrap, args.sink, args.measure, args.rate, args.seconds, args.warmup,
                                  args.drain, args.first_event, args.prefix)
        print(json.dumps(result), flush=True)
        return 0
    result = measure(args.bootstrap, args.sink, args.rate, args.seconds, args.warmup, args.drain,
                     not args.filtered, args.first_event, args.prefix)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
