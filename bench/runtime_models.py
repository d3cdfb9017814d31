"""Measure the two runtime models for continuous queries on this machine.

(a) one Spark driver process per query (what dsflow does), and
(b) one long-running driver hosting N queries.

For each: seconds from process start until every query has reported its first progress, and
resident memory of the whole process tree (Python driver + JVM + Python workers).

    python bench/runtime_models.py --queries 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HOST_SCRIPT = r'''
import json, sys, time
from dsflow.adapters.spark.spec import QuerySpec
from dsflow.adapters.spark.session import build_session
from dsflow.adapters.spark.driver import start_query
specs = [QuerySpec.model_validate_json(open(p).read()) for p in sys.argv[1:]]
spark = build_session(specs[0].master, "bench-host", specs[0].spark_conf)
queries = [start_query(spark, s) for s in specs]
while True:
    time.sleep(0.5)
    done = sum(1 for q in queries if q.lastProgress is not None)
    print(json.dumps({"progressed": done}), flush=True)
'''


def tree_rss_mb(pid: int) -> float:
    proc = psutil.Process(pid)
    procs = [proc, *proc.children(recursive=True)]
    return sum(p.memory_info().rss for p in procs if p.is_running()) / 2**20


def make_specs(bootstrap: str, n: int, work: Path) -> list[Path]:
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
    from dsflow.adapters.spark.spec import QuerySpec, SinkSpec, SourceSpec

    ensure_topic(bootstrap, TopicSpec("bench_in", 2, 1))
    paths = []
    for i in range(n):
        ensure_topic(bootstrap, TopicSpec(f"bench_out_{i}", 1, 1))
        spec = QuerySpec(
            name=f"bench.q{i}", version="v1", master="local[2]", spark_conf={"spark.driver.memory": "512m"},
            checkpoint=str(work / f"ckpt{i}"), status_path=str(work / f"status{i}.json"), trigger_interval="1 second",
            sources=[SourceSpec(view=f"src{i}", topic="bench_in", client_config={"bootstrap.servers": bootstrap},
                                schema_ddl="id BIGINT, name STRING")],
            sink=SinkSpec(topic=f"bench_out_{i}", client_config={"bootstrap.servers": bootstrap},
                          columns=["id", "name"]),
            select_sql=f"SELECT id, name, __key FROM src{i} WHERE id % 2 = 0",
        )
        path = work / f"spec{i}.json"
        path.write_text(spec.model_dump_json())
        paths.append(path)
    return paths


def per_query(specs: list[Path]) -> dict:
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "dsflow.adapters.spark.driver", str(p)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in specs]
    statuses = [Path(json.loads(p.read_text())["status_path"]) for p in specs]
    while not all(_progressed(s) for s in statuses):
        time.sleep(0.2)
    elapsed = time.monotonic() - start
    rss = sum(tree_rss_mb(p.pid) for p in procs)
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(60)
    return {"model": "driver per query", "queries": len(specs), "seconds_to_all_running": round(elapsed, 1),
            "rss_mb_total": round(rss)}


def _progressed(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("batch_id") is not None
    except (OSError, ValueError):
        return False


def one_host(specs: list[Path], work: Path) -> dict:
    script = work / "host.py"
    script.write_text(HOST_SCRIPT)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(script), *map(str, specs)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if json.loads(line)["progressed"] == len(specs):
            break
    elapsed = time.monotonic() - start
    rss = tree_rss_mb(proc.pid)
    proc.terminate()
    proc.wait(60)
    return {"model": "one driver, many queries", "queries": len(specs), "seconds_to_all_running": round(elapsed, 1),
            "rss_mb_total": round(rss)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from dsflow.adapters.kafka import devbroker

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = devbroker.start(work / "broker", port=devbroker.free_port())
        try:
            results = []
            for n in (1, args.queries):
                for model in ("per", "host"):
                    run = work / f"{model}{n}"
                    run.mkdir()
                    specs = make_specs(broker.bootstrap, n, run)
                    results.append(per_query(specs) if model == "per" else one_host(specs, run))
                    print(json.dumps(results[-1]), flush=True)
        finally:
            devbroker.stop(work / "broker")


if __name__ == "__main__":
    main()
