"""End-to-end latency probe: produce Nexmark bids at a fixed rate, time them out of the sink.

    python bench/latency.py --bootstrap HOST:PORT --sink nexmark_q0 --rate 10000 --seconds 30

Runs in its own process (so the probe and the pipeline under test do not share a GIL). A
producer thread sends bid `n` with key `n` (unique) at `rate` records/s, deadline-paced, and
notes the wall-clock time of each produce() call; `date_time` is that time too. A consumer
thread follows every partition of the sink topic from its end and notes when each key arrives.
Latency = arrival - produce, for records produced after `--warmup` seconds. The pipeline must
carry the Kafka key through (dsflow does). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsflow import nexmark  # noqa: E402
from dsflow.adapters.kafka import client  # noqa: E402

SOURCE = "nexmark_bid"
TICK_S = 0.002
QUEUE_MESSAGES = 1_000_000
FLUSH_S = 120.0


def produce_paced(bootstrap: str, rate: float, seconds: float, sent: dict[str, float], stop: threading.Event,
                  first_n: int) -> int:
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
            _produce(producer, record, key)
            sent[key] = t  # latency counts from the first attempt: time spent waiting for queue room included
            n += 1
        producer.poll(0)
        time.sleep(TICK_S)
    return _flush(producer, FLUSH_S)


def _produce(producer, value: bytes, key: str) -> None:
    """produce(), waiting for room in the local queue instead of failing when the broker falls behind."""
    while True:
        try:
            producer.produce(SOURCE, value, key)
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


def follow(bootstrap: str, topic: str, arrived: dict[str, float], stop: threading.Event) -> None:
    """Note the arrival time of every key written to `topic` from now on."""
    from confluent_kafka import TopicPartition

    with client.consumer(client.client_config(bootstrap, {"fetch.wait.max.ms": "10"})) as c:
        parts = client.topic_partitions(c, topic)
        ends = client.end_offsets(c, topic, parts)
        c.assign([TopicPartition(topic, p, off) for p, off in ends.items()])
        while not stop.is_set():
            for m in c.consume(10_000, 0.005):
                if m.error() is None and m.key() is not None:
                    arrived.setdefault(m.key().decode(), time.time())


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def measure(bootstrap: str, sink: str, rate: float, seconds: float, warmup: float, drain: float,
            expect_all: bool, first_n: int) -> dict:
    sent: dict[str, float] = {}
    arrived: dict[str, float] = {}
    stop_consumer, stop_producer = threading.Event(), threading.Event()
    consumer = threading.Thread(target=follow, args=(bootstrap, sink, arrived, stop_consumer), daemon=True)
    consumer.start()
    time.sleep(1.0)  # the consumer is assigned before the first record is sent
    began = time.time()
    unsent = produce_paced(bootstrap, rate, seconds, sent, stop_producer, first_n)
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
    p.add_argument("--filtered", action="store_true", help="the query drops records: do not wait for all")
    args = p.parse_args(argv)
    result = measure(args.bootstrap, args.sink, args.rate, args.seconds, args.warmup, args.drain,
                     not args.filtered, args.first_event)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
