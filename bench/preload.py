"""Preload Nexmark events into Kafka topics, fast and reproducibly.

Events are generated in chunks by a process pool (both cores), encoded as compact JSON, and
produced by one idempotent producer: persons, auctions and bids each to their own topic
(`nexmark_person`, `nexmark_auction`, `nexmark_bid`), keyed like `dsflow.datagen.nexmark.event`.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from dsflow.datagen import nexmark
from dsflow.adapters.kafka.admin import TopicSpec, delete_topic, ensure_topic

TOPICS = {"person": "nexmark_person", "auction": "nexmark_auction", "bid": "nexmark_bid"}
CHUNK = 50_000


@dataclass(frozen=True)
class Preloaded:
    events: int
    counts: dict[str, int]
    """Records per kind."""
    bytes_per_bid: float
    seconds: float
    partitions: int
    q2_matches: int
    """Bids with auction % 123 = 0: what q2 must output."""
    expected: dict[str, int] = field(default_factory=dict)
    """Records the joins (q3, q8) must output, from the generated persons and auctions."""


def encode_chunk(args: tuple[int, int, int]) -> tuple[dict[str, list[tuple[bytes, bytes]]], int]:
    """(key, value) pairs per kind for events start <= n < stop, and how many bids q2 selects."""
    start, stop, seed = args
    out: dict[str, list[tuple[bytes, bytes]]] = {"person": [], "auction": [], "bid": []}
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    q2 = 0
    for n in range(start, stop):
        kind, key, record = nexmark.event(n, seed)
        out[kind].append((key.encode(), dumps(record).encode()))
        q2 += kind == "bid" and record["auction"] % 123 == 0
    return out, q2


def delete_topics(bootstrap: str, names: list[str]) -> None:
    for name in names:
        delete_topic(bootstrap, name)


def recreate_topics(bootstrap: str, partitions: int, names: list[str], attempts: int = 5) -> None:
    """Delete and create the topics. tansu (memory engine) once answered a create right after a delete with
    'already exists' and described the topic with twice its partitions (DSF-E701, 2026-11-23): delete again."""
    from dsflow.errors import DsflowError

    for name in names:
        for attempt in range(attempts):
            delete_topic(bootstrap, name)
            time.sleep(0.5 * (attempt + 1))
            try:
                ensure_topic(bootstrap, TopicSpec(name, partitions))
                break
            except DsflowError as err:
                if err.code != "DSF-E701" or attempt == attempts - 1:
                    raise


def preload(bootstrap: str, events: int, partitions: int = 2, seed: int = 0, workers: int = 2,
            prefix: str = "") -> Preloaded:
    """Recreate the three topics (each name after `prefix`) and produce events 0..events-1 into them."""
    from confluent_kafka import Producer

    topics = {kind: prefix + name for kind, name in TOPICS.items()}
    recreate_topics(bootstrap, partitions, list(topics.values()))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151,
                         "enable.idempotence": True, "partitioner": "murmur2_random"})
    errors: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    counts = {k: 0 for k in TOPICS}
    people_and_auctions: list[tuple[str, str, dict]] = []
    bid_bytes = q2 = 0
    started = time.monotonic()
    chunks = [(s, min(events, s + CHUNK), seed) for s in range(0, events, CHUNK)]
    # spawn, not fork: a forked copy of a process holding Kafka clients (or a JVM gateway) can
    # crash when the child garbage-collects them; a small preload needs no pool at all
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) if len(chunks) > 1 else None
    with pool or _Inline() as runner:
        for encoded, matches in runner.map(encode_chunk, chunks):
            q2 += matches
            for kind, pairs in encoded.items():
                topic = topics[kind]
                for key, value in pairs:
                    _produce(producer, topic, value, key, report)
                counts[kind] += len(pairs)
                if kind != "bid":
                    people_and_auctions += [(kind, k.decode(), json.loads(v)) for k, v in pairs]
                if kind == "bid":
                    bid_bytes += sum(len(v) for _, v in pairs)
            producer.poll(0)
    left = producer.flush(120)
    if left or errors:
        raise RuntimeError(f"preload failed: {left} not flushed; {errors[:1]}")
    seconds = time.monotonic() - started
    from bench.pipelines import expected_stateful

    joins = {q: len(expected_stateful(q, people_and_auctions)) for q in ("q3", "q8")}
    return Preloaded(events, counts, bid_bytes / max(1, counts["bid"]), seconds, partitions, q2, joins)


class _Inline:
    """The executor interface, in this process."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn, items):
        return map(fn, items)


def _produce(producer, topic: str, value: bytes, key: bytes, report) -> None:
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=report)
            return
        except BufferError:
            producer.poll(0.05)
