"""Records/s of a GROUP BY over a changelog (dsflow's retractions) beside the same GROUP BY over a stream (Spark's
own update-mode aggregation), on the same keyed input, by hand.

    python bench/retract.py                       # 200,000 records, 3 runs per query
    python bench/retract.py --records 2000 --reps 1

Starts a tansu broker, produces N keyed changes (keys spread over ~N/10 keys and 50 groups; 5% tombstones of
live keys, the rest upserts: the first of a key is an insert, later ones update it and may move it to another
group) into a changelog's topic, and the same records without the tombstones into a stream's topic. Then, in one
local[2] session, runs `SELECT grp, COUNT(*), SUM(score), MIN(score), MAX(score) ... GROUP BY grp` over each as
dsflow's driver starts it (`start_query` with the spec `translate.query_spec` makes, availableNow over the preload,
a fresh checkpoint and an emptied output topic per run): one untimed warm-up each, then `reps` timed runs,
alternating. The warm-ups' outputs are checked against plain Python references (the changelog's final state; every
stream record), so the timed runs are of a query that computes the right thing. Prints records/s (input records
over wall time, query start included) and the load average; docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests"))

GROUPS = 50
SQL = """\
CREATE CHANGELOG users_cl (userid VARCHAR, grp VARCHAR, score BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM users_st (userid VARCHAR, grp VARCHAR, score BIGINT)
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE CHANGELOG by_changelog AS
  SELECT grp, COUNT(*) AS n, SUM(score) AS total, MIN(score) AS lo, MAX(score) AS hi FROM users_cl GROUP BY grp;
CREATE CHANGELOG by_stream AS
  SELECT grp, COUNT(*) AS n, SUM(score) AS total, MIN(score) AS lo, MAX(score) AS hi FROM users_st GROUP BY grp;
"""
QUERIES = {"changelog": "by_changelog", "stream": "by_stream"}
"""What each run measures: the retracting GROUP BY over the changelog, Spark's own over the stream."""

Change = tuple[str, dict | None]


def changes(records: int, seed: int = 0, deletes: float = 0.05) -> tuple[list[Change], dict[str, int]]:
    """`records` keyed changes (a None value is a tombstone) and how many were inserts, updates and deletes."""
    rng = random.Random(seed)
    keys = max(1, records // 10)
    live: dict[str, int] = {}
    out: list[Change] = []
    mix = {"inserts": 0, "updates": 0, "deletes": 0}
    for _ in range(records):
        if live and rng.random() < deletes:
            key = list(live)[rng.randrange(len(live))] if len(live) < 64 else _live_key(rng, live, keys)
            del live[key]
            out.append((key, None))
            mix["deletes"] += 1
            continue
        key = f"u{rng.randrange(keys)}"
        mix["updates" if key in live else "inserts"] += 1
        live[key] = 1
        out.append((key, {"userid": key, "grp": f"g{rng.randrange(GROUPS)}", "score": rng.randrange(-1000, 100_000)}))
    return out, mix


def _live_key(rng: random.Random, live: dict[str, int], keys: int) -> str:
    while True:
        key = f"u{rng.randrange(keys)}"
        if key in live:
            return key


def _aggregate(rows) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for row in rows:
        acc = out.setdefault(row["grp"], {"grp": row["grp"], "n": 0, "total": 0, "lo": row["score"],
                                          "hi": row["score"]})
        acc["n"] += 1
        acc["total"] += row["score"]
        acc["lo"], acc["hi"] = min(acc["lo"], row["score"]), max(acc["hi"], row["score"])
    return out


def expected(feed: list[Change]) -> dict[str, dict[str, dict]]:
    """{query: {group: row}}: the changelog's final state grouped, and every stream record grouped."""
    final: dict[str, dict] = {}
    for key, value in feed:
        if value is None:
            final.pop(key, None)
        else:
            final[key] = value
    return {"changelog": _aggregate(final.values()), "stream": _aggregate(v for _, v in feed if v is not None)}


def _one_run(spark, project, work: Path, broker: str, name: str, label: str) -> tuple[float, int]:
    """One availableNow run of the query `name` on a fresh checkpoint into its emptied topic: (seconds, input)."""
    from bench.preload import recreate_topics
    from dsflow.adapters.spark.driver import start_query
    from dsflow.adapters.spark.retract import STATE_PROVIDER
    from dsflow.adapters.spark.translate import query_spec

    relation = project.relation(f"analytics.public.{name}")
    recreate_topics(broker, relation.partitions, [relation.topic])
    query = next(q for q in project.queries if q.fqn == relation.fqn)
    spec = query_spec(project, query, "bench", str(work / f"ckpt-{label}"), str(work / f"{label}.status"))
    started = time.monotonic()
    try:
        running = start_query(spark, spec, available_now=True)
        running.awaitTermination()
        seconds = time.monotonic() - started
        if running.exception() is not None:
            raise RuntimeError(str(running.exception()))
    finally:  # the retraction stages set RocksDB for the session: the stream's aggregation keeps Spark's default
        spark.conf.unset(STATE_PROVIDER)
    return seconds, sum(p.get("numInputRows", 0) for p in running.recentProgress)


def _check(broker: str, project, system: str, want: dict[str, dict]) -> None:
    from support.changelogs import changelog_content

    content, _ = changelog_content(broker, project, QUERIES[system])
    got = {row["grp"]: row for row in content.values()}
    if got != want:
        wrong = sorted(g for g in set(got) | set(want) if got.get(g) != want.get(g))
        raise AssertionError(f"{system}: {len(wrong)} groups differ from the reference, e.g. "
                             f"{wrong[0]}: {got.get(wrong[0])} != {want.get(wrong[0])}")


def measure(spark, project, work: Path, broker: str, reps: int, want: dict) -> dict[str, list[dict]]:
    """A checked warm-up of each query, then `reps` timed runs of each, alternating."""
    runs: dict[str, list[dict]] = {system: [] for system in QUERIES}
    for rep in range(reps + 1):
        for system, name in QUERIES.items():
            seconds, records = _one_run(spark, project, work, broker, name, f"{system}-{rep}")
            if rep == 0:
                _check(broker, project, system, want[system])
                print(f"{system}: warm-up {seconds:.1f} s, output equals the reference "
                      f"({len(want[system])} groups)", flush=True)
            else:
                runs[system].append({"seconds": seconds, "records": records, "rate": records / seconds})
    return runs


def _summary(runs: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    for system, found in runs.items():
        rates = [r["rate"] for r in found]
        out[system] = {"median": statistics.median(rates), "best": max(rates), "rates": [round(r) for r in rates],
                       "records": found[0]["records"], "seconds": [round(r["seconds"], 2) for r in found]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from support.changelogs import produce_changes
    from dsflow.adapters.kafka import devbroker
    from dsflow.adapters.spark.session import build_session
    from support.streaming import streaming_project

    print(f"load at start {os.getloadavg()}", flush=True)
    started = time.monotonic()
    feed, mix = changes(args.records, args.seed)
    want = expected(feed)
    work = Path(tempfile.mkdtemp(prefix="dsflow-bench-retract-"))
    broker = devbroker.start(work / "broker", port=devbroker.free_port())
    spark = None
    try:
        project = streaming_project(work, broker.bootstrap, SQL)
        loading = time.monotonic()
        produce_changes(broker.bootstrap, project, "users_cl", feed)
        produce_changes(broker.bootstrap, project, "users_st", [c for c in feed if c[1] is not None])
        print(f"preloaded {len(feed):,} changes {mix} in {time.monotonic() - loading:.1f} s", flush=True)
        spark = build_session("local[2]", "dsflow-bench-retract", {})
        summary = _summary(measure(spark, project, work, broker.bootstrap, args.reps, want))
        for system, s in summary.items():
            print(f"{system}: median {s['median']:,.0f} rec/s, best {s['best']:,.0f} ({s['rates']}; "
                  f"{s['records']:,} records, {s['seconds']} s)", flush=True)
        print(json.dumps({"records": args.records, "reps": args.reps, "mix": mix, "summary": summary,
                          "load_end": os.getloadavg(), "minutes": round((time.monotonic() - started) / 60, 1)}))
    finally:
        if spark is not None:
            spark.stop()
        devbroker.stop(work / "broker")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
