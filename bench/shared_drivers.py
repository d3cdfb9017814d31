"""Memory and start time of queries in their own drivers (`runtime.isolation: query`) vs a shared application.

For each mode and each count N, a project of N stateless queries (a filter and projection, each over its own
topic of RECORDS small JSON records) is applied on a broker this script starts; once every query made its first
progress, the total RSS of the processes running them is summed (the drivers or hosts and every child: the JVM,
Spark's Python workers). Then one more query is added by a second apply, and the time from that apply's start to
the end of the added query's first micro-batch is measured (in shared mode: a query added to a warm application),
with the apply's own time and, in shared mode, the time from the host starting the query to that batch's end.

    python bench/shared_drivers.py --counts 1,10 --modes shared,query     # by hand; results in docs/benchmarks.md
    python bench/shared_drivers.py --counts 50 --modes shared

Each query-mode driver is a JVM of ~1 GB heap: 10 of them need ~14 GB and several minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RECORDS = 1_000
CONFIG = """\
name: bench_shared
default: {{database: bench, schema: public, store: kafka_main}}
runtime:
  trigger_interval: 1 second
  isolation: {mode}
  queries_per_app: {per_app}
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
"""

STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{broker}"
"""


def sql(count: int) -> str:
    lines = []
    for i in range(count):
        lines.append(f"CREATE STREAM in_{i} (id BIGINT, v BIGINT) WITH ('value.format' = 'json', "
                     "'topic.partitions' = 1);")
        lines.append(f"CREATE STREAM out_{i} AS SELECT id, v * 2 AS w FROM in_{i} WHERE v >= 0;")
    return "\n".join(lines) + "\n"


def write_project(root: Path, mode: str, count: int, broker: str, per_app: int, tag: str) -> None:
    (root / "sql").mkdir(parents=True, exist_ok=True)
    (root / "dsflow.yml").write_text(CONFIG.format(mode=mode, per_app=per_app, prefix=f"b{os.getpid()}{tag}_"))
    (root / "stores").mkdir(exist_ok=True)
    (root / "stores" / "kafka.yml").write_text(STORE.format(broker=broker))
    (root / "sql" / "all.sql").write_text(sql(count))


def first_progress(run_dir: Path) -> bool:
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return False
    return status.get("batch_id") is not None


def wait_all(state, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    dirs = [Path(state.resources[f"query.bench.public.{n}"].outputs["run_dir"]) for n in names]
    while not all(first_progress(d) for d in dirs):
        if time.monotonic() > deadline:
            raise SystemExit(f"queries did not make progress in {timeout:.0f} s")
        time.sleep(0.5)


def memory(pids: set[int]) -> dict[str, int]:
    """RSS and PSS (shared pages divided among the processes that map them) of the processes and all their
    descendants, in bytes (each process once), with the RSS per kind of process."""
    import psutil

    seen: dict[int, tuple[str, int, int]] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                info = proc.memory_full_info()
                seen[proc.pid] = (_kind(proc), info.rss, getattr(info, "pss", info.rss))
        except psutil.Error:
            continue
    kinds: dict[str, int] = {}
    for kind, rss, _ in seen.values():
        kinds[f"rss_{kind}"] = kinds.get(f"rss_{kind}", 0) + rss
    return {"rss": sum(r for _, r, _ in seen.values()), "pss": sum(p for _, _, p in seen.values()),
            "processes": len(seen), **kinds, **{f"n_{k}": sum(1 for v in seen.values() if v[0] == k)
                                                for k in {v[0] for v in seen.values()}}}


def _kind(proc) -> str:
    """java (the JVM), worker (Spark's Python workers and daemons), host (a driver or shared host), other."""
    import psutil

    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return "other"
    if "java" in proc.name():
        return "java"
    if "pyspark.daemon" in line or "pyspark.worker" in line or "pyspark/daemon" in line:
        return "worker"
    if "dsflow" in line:
        return "host"
    return "other"


def produce_all(broker: str, project, numbers) -> None:
    from dsflow.adapters.kafka.client import produce_json_lines

    lines = [json.dumps({"id": i, "v": i % 5}) for i in range(RECORDS)]
    for i in numbers:
        produce_json_lines(broker, project.relation(f"bench.public.in_{i}").topic, lines)


def progress_instant(run_dir: Path) -> float | None:
    """When the query's first micro-batch with data ended (epoch s): its trigger's start plus its duration, from
    the status file (written every 2 s: its own time would be up to 2 s late)."""
    from datetime import datetime

    status = json.loads((run_dir / "status.json").read_text())
    began, took = status.get("last_progress_at"), status.get("last_batch_duration_ms")
    if not began or took is None:
        return None
    return datetime.fromisoformat(began.replace("Z", "+00:00")).timestamp() + took / 1000


def hosted_start(outputs: dict) -> float | None:
    """When the shared host started the query (epoch s); None in query isolation."""
    if "app_dir" not in outputs:
        return None
    from dsflow.adapters.spark import apps

    return apps.reported(Path(outputs["app_dir"])).get(outputs["app_query"], {}).get("started_at")


def measure(work: Path, broker: str, mode: str, count: int, per_app: int, timeout: float) -> dict:
    from dsflow.engine import operations

    root = work / f"{mode}-{count}"
    tag = f"{mode[0]}{count}"
    write_project(root, mode, count, broker, per_app, tag)
    options = operations.Options(root, None, {})
    loaded = operations.load(options)
    started = time.monotonic()
    assert operations.apply(loaded, operations.plan(loaded)).ok
    try:
        produce_all(broker, operations.load(options).project, range(count))
        state = loaded.workspace.state_backend().read()
        wait_all(state, [f"out_{i}" for i in range(count)], timeout)
        all_up = time.monotonic() - started
        pids = {r.outputs["pid"] for k, r in state.resources.items() if k.startswith("query.")}
        used = memory(pids)
        write_project(root, mode, count + 1, broker, per_app, tag)
        loaded = operations.load(options)
        began = time.time()
        assert operations.apply(loaded, operations.plan(loaded)).ok
        applied = time.time() - began
        produce_all(broker, loaded.project, [count])  # the added query's topic only: the others stay idle
        state = loaded.workspace.state_backend().read()
        wait_all(state, [f"out_{count}"], timeout)
        outputs = state.resources[f"query.bench.public.out_{count}"].outputs
        progressed = progress_instant(Path(outputs["run_dir"]))
        hosted = hosted_start(outputs)
        return {"mode": mode, "queries": count, "drivers_or_hosts": len(pids),
                **{k: (round(v / 2**20) if not k.startswith(("n_", "processes")) else v) for k, v in used.items()},
                "all_first_progress_s": round(all_up, 1), "added_apply_s": round(applied, 1),
                "added_first_progress_s": round(progressed - began, 1) if progressed else None,
                "added_host_start_to_progress_s": round(progressed - hosted, 1) if progressed and hosted else None}
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def machine() -> dict:
    import psutil

    return {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "load_1m": round(os.getloadavg()[0], 1), "python": platform.python_version()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="1,10")
    parser.add_argument("--modes", default="shared,query")
    parser.add_argument("--per-app", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    os.environ.setdefault("DSFLOW_RUNTIME", "off")
    from dsflow.adapters.kafka import devbroker

    work = Path(tempfile.mkdtemp(prefix="dsflow-shared-bench-"))
    broker = devbroker.start(work / "broker", port=devbroker.free_port()).bootstrap
    try:
        print(json.dumps({"machine": machine(), "records_per_topic": RECORDS}), flush=True)
        for count in [int(c) for c in args.counts.split(",")]:
            for mode in args.modes.split(","):
                print(json.dumps({**measure(work, broker, mode, count, args.per_app, args.timeout),
                                  "load_1m_after": round(os.getloadavg()[0], 1)}), flush=True)
    finally:
        devbroker.stop(work / "broker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
