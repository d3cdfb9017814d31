"""A replay's estimate beside what apply then did (issue 44: "estimates are checked against what apply then did").

A GROUP BY query reads a preloaded source of N records, then a trickle (the steady state in which a plan is
usually made). A changed WHERE makes it a replay; the plan's estimate (records, rate, seconds) is read, the plan is
applied, and the new version's status is followed until its source offsets reach the end offsets the source had at
apply: the records it re-read (from the status's offsets), the seconds from apply's end to the first progress
(the driver's start, which the estimate does not include) and from there to the caught-up batch (the catch-up the
estimate prices).

    python bench/replay_estimate.py --records 20000,200000        # starts Apache Kafka; prints one JSON line per size

docs/plan.md ("Estimates beside what apply did") keeps the runs, with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = "name: {name}\ndefault:\n  database: analytics\n  store: k\n" \
         "environments:\n  dev:\n    vars: {{bootstrap: '{bootstrap}'}}\n"
STORES = "stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: \"{{ var('bootstrap') }}\"\n" \
         "databases:\n  - name: analytics\n    schemas: [public]\n"
SQL = """CREATE STREAM events (id BIGINT, grp VARCHAR, v BIGINT, ts BIGINT)
  WITH ('topic' = '{prefix}_events', 'value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE CHANGELOG counts WITH ('topic' = '{prefix}_counts', 'value.format' = 'json') AS
  SELECT grp, COUNT(*) AS n, SUM(v) AS total FROM events WHERE v >= {least} GROUP BY grp;
"""
TRICKLE_SECONDS = 20
TRICKLE_PER_SECOND = 50


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    from dsflow.adapters.kafka.client import produce_json_lines

    rng = random.Random(first)
    for start in range(first, first + count, 20_000):
        lines = [json.dumps({"id": i, "grp": f"g{rng.randrange(50)}", "v": rng.randrange(100),
                             "ts": 1_700_000_000_000 + i}) for i in range(start, min(start + 20_000, first + count))]
        produce_json_lines(bootstrap, topic, lines)


def end_offsets(bootstrap: str, topic: str) -> dict[str, int]:
    from dsflow.adapters.kafka.client import consumer, high_watermarks, topic_partitions

    with consumer({"bootstrap.servers": bootstrap, "group.id": "dsflow-bench"}) as c:
        return {str(p): high for p, high in high_watermarks(c, topic, topic_partitions(c, topic)).items()}


def status_of(loaded) -> dict:
    from dsflow.engine.refresh import query_status

    deployed = loaded.workspace.state_backend().read().resources.get("query.analytics.public.counts")
    return query_status(deployed) if deployed is not None else {}


def reached(status: dict, target: dict[str, int]) -> bool:
    for source in status.get("sources") or []:
        offsets = source.get("end_offset")
        offsets = json.loads(offsets) if isinstance(offsets, str) else offsets or {}
        if all(int(offsets.get(p, 0)) >= high for p, high in target.items()):
            return True
    return False


def measure(bootstrap: str, workdir: Path, records: int) -> dict:
    from dsflow.engine import operations

    prefix = f"re{uuid.uuid4().hex[:6]}"
    root = workdir / prefix
    (root / "sql").mkdir(parents=True)
    (root / "dsflow.yml").write_text(CONFIG.format(name=prefix, bootstrap=bootstrap))
    (root / "stores.yml").write_text(STORES)
    (root / "sql" / "q.sql").write_text(SQL.format(prefix=prefix, least=0))
    options = operations.Options(root)
    loaded = operations.load(options)
    operations.apply(loaded, operations.plan(loaded))
    produce(bootstrap, f"{prefix}_events", 0, records)
    target = end_offsets(bootstrap, f"{prefix}_events")
    while not reached(status_of(loaded), target):
        time.sleep(0.5)
    produced = records
    for _ in range(TRICKLE_SECONDS):  # the steady state a plan is usually made in
        produce(bootstrap, f"{prefix}_events", produced, TRICKLE_PER_SECOND)
        produced += TRICKLE_PER_SECOND
        time.sleep(1)
    (root / "sql" / "q.sql").write_text(SQL.format(prefix=prefix, least=1))
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = [c for c in plan.actionable if c.address == "query.analytics.public.counts"]
    estimate = change.estimate
    before = status_of(loaded).get("run_id")  # a restart in the same driver keeps its PID
    operations.apply(loaded, plan)
    applied = time.time()
    target = end_offsets(bootstrap, f"{prefix}_events")
    first = None
    while True:
        status = status_of(loaded)
        if status.get("run_id") not in (None, before) and status.get("batch_id") is not None:
            first = first or status
            if reached(status, target):
                break
        time.sleep(0.2)
    started = _epoch(first["last_progress_at"])  # the new version's first batch began
    ended = _epoch(status["last_progress_at"]) + status["last_batch_duration_ms"] / 1000
    operations.apply(operations.load(options), operations.plan(operations.load(options), destroy=True),
                     allowance=_everything())
    return {"records": records + TRICKLE_SECONDS * TRICKLE_PER_SECOND, "estimate_records": estimate.records,
            "estimate_rate": estimate.rate_per_second, "estimate_seconds": estimate.seconds,
            "upper_bound": estimate.seconds_upper_bound, "measured_batches": estimate.measured_batches,
            "largest_batch": estimate.largest_batch, "start_seconds": round(started - applied, 1),
            "catch_up_seconds": round(ended - started, 1), "first_batch": first["batch_id"],
            "load": os.getloadavg()[0]}


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _everything():
    from dsflow.core.safety import Allowance

    return Allowance(everything=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="20000,200000", help="preloaded records, comma-separated sizes")
    parser.add_argument("--broker", help="bootstrap servers (default: start Apache Kafka)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dsflow-replay-estimate"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.broker:
        bootstrap, stop = args.broker, (lambda: None)
    else:
        from dsflow.adapters.kafka import devbroker

        run_dir = args.workdir / f"broker-{uuid.uuid4().hex[:6]}"
        run_dir.mkdir(parents=True)
        bootstrap = devbroker.start(run_dir, port=devbroker.free_port(), kind="kafka").bootstrap
        stop = lambda: devbroker.stop(run_dir)  # noqa: E731
    try:
        for size in (int(s) for s in args.records.split(",")):
            print(json.dumps(measure(bootstrap, args.workdir, size)), flush=True)
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
