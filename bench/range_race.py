"""The race behind the skipped record (issue 27), measured on the embedded broker: a tailing reader against
producers writing one partition concurrently.

tansu hands out a batch's offsets (and moves the partition's end) before it stores the batch, and a fetch lists
the batches stored so far. Two produce requests in flight for one partition can be stored in the other order, so
for a moment a fetch answers with batch N+1 while batch N is missing. A reader that took that jump for a
compaction gap skipped batch N for good, although the log holds it (dsflow did until 2026-11-25).

    python bench/range_race.py --seconds 240                 # dsflow's reader: every hole read again
    python bench/range_race.py --seconds 240 --no-reread     # a hole taken as a gap at once (the old behaviour)

Each read covers [position, end) with ends as a query gets them (client.EndTracker, before every micro-batch);
afterwards the whole partition is read again and every offset a read reported as a gap is checked: an offset that
holds a record there was skipped. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path


def _producer(bootstrap: str, topic: str, stop: threading.Event, delivered: list[int], rate: float) -> None:
    """Bursts of 20 records at `rate` records/s (the broker's fetch lists every stored batch, so the partition
    is kept to a size it serves quickly)."""
    from confluent_kafka import Producer

    producer, sent = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1}), 0
    while not stop.is_set():
        for _ in range(20):
            producer.produce(topic, str(sent).encode(), partition=0)
            sent += 1
        producer.poll(0)
        time.sleep(20 / rate)
    producer.flush(60)
    delivered.append(sent)


def tail(bootstrap: str, topic: str, seconds: float, reread: bool) -> dict:
    """Read [position, end) again and again while producers write; the gaps each read reported."""
    from dsflow.adapters.kafka import client, ranges

    gaps: list[tuple[int, int]] = []
    reads = records = 0
    saved = ranges.COUNTED_GAP_WAITS  # gaps are counted here (allow_gaps) so that each can be checked afterwards
    ranges.COUNTED_GAP_WAITS = ranges.COUNTED_GAP_WAITS if reread else ()
    try:
        with client.consumer({"bootstrap.servers": bootstrap}) as consumer:
            tracker, pos, started = client.EndTracker(), 0, time.monotonic()
            while time.monotonic() - started < seconds:
                end = tracker.ends(consumer, topic, [0], 0.02, 0.02)[0]
                if end <= pos:
                    continue
                for batch in ranges.read_range(consumer, topic, 0, pos, end, allow_gaps=True,
                                               on_gap=lambda _t, _p, a, b: gaps.append((a, b))):
                    records += len(batch)
                reads, pos = reads + 1, end
    finally:
        ranges.COUNTED_GAP_WAITS = saved
    return {"reads": reads, "records": records, "gaps": gaps}


def skipped(bootstrap: str, topic: str, gaps: list[tuple[int, int]]) -> int:
    """Offsets reported as gaps that hold a record when the partition is read again from the start."""
    from dsflow.adapters.kafka.client import read_to_end

    held = {r["offset"] for r in read_to_end(bootstrap, topic)}
    return sum(1 for a, b in gaps for offset in range(a, b) if offset in held)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=4000, help="records/s of all producers together")
    parser.add_argument("--no-reread", dest="reread", action="store_false")
    args = parser.parse_args(argv)
    from dsflow.adapters.kafka import devbroker
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

    work = Path(tempfile.mkdtemp(prefix="dsflow-race-"))
    bootstrap = devbroker.start(work, port=devbroker.free_port()).bootstrap
    try:
        ensure_topic(bootstrap, TopicSpec("race", 1, 1, {}))
        stop, delivered = threading.Event(), []
        writers = [threading.Thread(target=_producer, args=(bootstrap, "race", stop, delivered,
                                                            args.rate / args.producers))
                   for _ in range(args.producers)]
        for writer in writers:
            writer.start()
        found = tail(bootstrap, "race", args.seconds, args.reread)
        stop.set()
        for writer in writers:
            writer.join()
        result = {"reread": args.reread, "producers": args.producers, "rate": args.rate, "seconds": args.seconds,
                  "reads": found["reads"], "records_read": found["records"], "records_written": sum(delivered),
                  "gaps_reported": len(found["gaps"]), "offsets_skipped": skipped(bootstrap, "race", found["gaps"])}
    finally:
        devbroker.stop(work)
    print(json.dumps(result))
    return 1 if result["offsets_skipped"] else 0


if __name__ == "__main__":
    sys.exit(main())
