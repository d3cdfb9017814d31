"""Records/s of Nexmark q0 (stateless) on a 2-worker Spark standalone cluster beside local[2], by hand.

    python bench/cluster.py                  # 200,000 events, 3 runs per master
    python bench/cluster.py --events 50000 --reps 2

Starts a tansu broker and a standalone master with two workers on 127.0.0.1 (tests/support/cluster.py: pyspark's own
spark-class; 2 core slots and 1 GiB each), preloads Nexmark events, then in one process per master runs q0 as
dsflow's driver starts it (availableNow over the preload) after one untimed warm-up run. Prints the rates and the
load average; docs/benchmarks.md ("On a standalone cluster") has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests"))

CLUSTER_CONF = {"spark.executor.memory": "1g", "spark.executor.cores": "1", "spark.cores.max": "2"}
"""The application on the cluster: two executors of one core each, one on each worker."""


def measure(master: str, bootstrap: str, reps: int) -> list[dict]:
    """q0 through dsflow's start_query on `master`: one warm-up run, then `reps` measured ones."""
    from bench import pipelines as P
    from bench.preload import recreate_topics
    from dsflow.adapters.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="dsflow-bench-cluster-"))
    conf = CLUSTER_CONF if master.startswith("spark://") else {}
    spark = build_session(master, "dsflow-bench-cluster", conf)
    try:
        spec = P.load_specs(bootstrap, work)["q0"]
        runs = []
        for rep in range(reps + 1):
            recreate_topics(bootstrap, 2, [P.sink_topic("q0")])
            seconds, records = P.run_dsflow_available_now(spark, spec, str(work / f"ckpt-{rep}"))
            if rep:
                runs.append({"seconds": seconds, "records": records, "rate": records / seconds})
        return runs
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _in_process(master: str, bootstrap: str, reps: int) -> list[dict]:
    """`measure` in its own Python process (one SparkContext per process)."""
    out = subprocess.run([sys.executable, __file__, "--measure", master, "--bootstrap", bootstrap, "--reps",
                          str(reps)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.measure:
        print(json.dumps(measure(args.measure, args.bootstrap, args.reps)))
        return 0
    from bench.preload import preload
    from support.cluster import standalone_cluster
    from dsflow.adapters.kafka import devbroker

    work = Path(tempfile.mkdtemp(prefix="dsflow-bench-cluster-"))
    broker = devbroker.start(work / "broker", port=devbroker.free_port())
    try:
        loaded = preload(broker.bootstrap, args.events, 2)
        print(f"preloaded {loaded.counts} load {os.getloadavg()}", flush=True)
        with standalone_cluster(work / "cluster") as cluster:
            for master in ("local[2]", cluster.master):
                started = time.monotonic()
                runs = _in_process(master, broker.bootstrap, args.reps)
                rates = [r["rate"] for r in runs]
                print(f"{master}: median {statistics.median(rates):,.0f} rec/s, best {max(rates):,.0f} "
                      f"({[round(r) for r in rates]}; {time.monotonic() - started:.0f} s with start) "
                      f"load {os.getloadavg()}", flush=True)
    finally:
        devbroker.stop(work / "broker")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
