"""Memory and start time of queries in their own drivers (`runtime.isolation: query`) vs a shared application.

For each mode and each count N, a project of N stateless queries (each over its own topic of RECORDS small JSON
records) is applied on a broker this script starts; once every query made its first progress, the memory of the
processes running them is summed (the drivers or hosts and every child: the JVM, Spark's Python workers). Then one
more query is added by a second apply, and the time from that apply's start to the end of the added query's first
micro-batch is measured (in shared mode: a query added to a warm application, or a new one when the others fill
`--per-app`), with the apply's own time and, in shared mode, the time from the host starting the query to that
batch's end.

    python bench/shared_drivers.py --counts 1,10 --modes shared,query     # by hand; results in docs/benchmarks.md
    python bench/shared_drivers.py --counts 50 --modes shared --per-app 50
    python bench/shared_drivers.py --counts 50 --modes shared --conf spark.python.factory.idleWorkerMaxPoolSize=4
    python bench/shared_drivers.py --counts 50 --modes shared --batches-at-once 0    # runtime.batches_at_once: 0
    python bench/shared_drivers.py --counts 50 --modes shared --shape stateful --with-runtime

`--shape example` (the default) runs the example project's two queries (example_project/sql/pipelines.sql: the
filter and the enrich query) in turn, each over its own topic of pageviews; `--shape simple` the filter and
projection of the first measurements; `--shape stateful` aggregations over the same pageviews (a count per user, a
count and latest view per page: changelogs whose state Spark keeps in each query's state store). Once every query
made its first progress, `--rate` records a second are fed into each topic (5: the example's datagen) and memory is
sampled every 10 s for `--settle` s (90: longer than the minute after which Spark stops idle Python workers): the
largest total RSS and PSS seen, and the last sample with RSS, PSS and USS per kind of process (`kinds`: the JVM, the
driver or host, each query's Python streaming source runner, the task workers, each kind of Spark's driver-side
Python workers and their daemons). Meanwhile a thread sums the RSS every 0.2 s from /proc (`fast_*`: the largest and
the median total, the samples over 6 GiB, what the largest held, the write-planning workers alive per tenth of the
second); `fast_rss_max_without_spawning_jvm` leaves out a child of the JVM caught between its vfork and exec (same
command line as the JVM, counted with the JVM's ~1 GB although it shares the JVM's memory).

Each query-mode driver is a JVM of ~1 GB heap: 10 of them took 15.6 GB and several minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
  spark_conf: {conf}
{batches}default_environment: dev
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


EXAMPLE_QUERIES = (
    "SELECT id, viewtime, userid, pageid FROM in_{i} WHERE pageid <> 'Page_2'",
    "SELECT id, CAST(viewtime / 1000 AS BIGINT) AS view_second, UPPER(userid) AS user_upper, "
    "CONCAT('https://example.com/', pageid) AS url, CASE WHEN pageid LIKE 'Page_1%' THEN 'top' ELSE 'other' END "
    "AS section FROM in_{i} WHERE userid IS NOT NULL",
)
"""example_project/sql/pipelines.sql's filter and enrich queries, over `in_{i}` instead of `pageviews`."""
STATEFUL_QUERIES = (
    "SELECT userid, COUNT(*) AS views FROM in_{i} GROUP BY userid",
    "SELECT pageid, COUNT(*) AS views, MAX(viewtime) AS last_view FROM in_{i} GROUP BY pageid",
)
"""`--shape stateful`: aggregations over the same pageviews (9 users, 90 pages), each a changelog keeping state."""


def sql(count: int, shape: str = "example") -> str:
    lines = []
    for i in range(count):
        if shape == "simple":
            lines.append(f"CREATE STREAM in_{i} (id BIGINT, v BIGINT) WITH ('value.format' = 'json', "
                         "'topic.partitions' = 1);")
            lines.append(f"CREATE STREAM out_{i} AS SELECT id, v * 2 AS w FROM in_{i} WHERE v >= 0;")
            continue
        lines.append(f"CREATE STREAM in_{i} (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR) WITH "
                     "('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 1);")
        if shape == "stateful":
            lines.append(f"CREATE CHANGELOG out_{i} WITH ('topic.partitions' = 1) AS "
                         f"{STATEFUL_QUERIES[i % 2].format(i=i)};")
            continue
        lines.append(f"CREATE STREAM out_{i} WITH ('topic.partitions' = 1) AS "
                     f"{EXAMPLE_QUERIES[i % 2].format(i=i)};")
    return "\n".join(lines) + "\n"


def write_project(root: Path, mode: str, count: int, broker: str, per_app: int, tag: str, shape: str = "example",
                  conf: dict[str, str] | None = None, batches: int | None = None) -> None:
    (root / "sql").mkdir(parents=True, exist_ok=True)
    bound = "" if batches is None else f"  batches_at_once: {batches}\n"
    (root / "dsflow.yml").write_text(CONFIG.format(mode=mode, per_app=per_app, prefix=f"b{os.getpid()}{tag}_",
                                                   conf=json.dumps(conf or {}), batches=bound))
    (root / "stores").mkdir(exist_ok=True)
    (root / "stores" / "kafka.yml").write_text(STORE.format(broker=broker))
    (root / "sql" / "all.sql").write_text(sql(count, shape))


def first_progress(run_dir: Path) -> bool:
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return False
    return status.get("batch_id") is not None


def _status(state, name: str) -> dict:
    try:
        return json.loads((Path(state.resources[f"query.bench.public.{name}"].outputs["run_dir"])
                           / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _state(state, name: str) -> str | None:
    return _status(state, name).get("state")


def batches(state, count: int) -> int:
    """The micro-batches the queries have run so far (their last batch ids, summed)."""
    return sum(int(_status(state, f"out_{i}").get("batch_id") or 0) for i in range(count))


def wait_all(state, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    dirs = [Path(state.resources[f"query.bench.public.{n}"].outputs["run_dir"]) for n in names]
    while not all(first_progress(d) for d in dirs):
        if time.monotonic() > deadline:
            raise SystemExit(f"queries did not make progress in {timeout:.0f} s")
        time.sleep(0.5)


def memory(pids: set[int]) -> dict:
    """RSS, PSS (shared pages divided among the processes that map them) and USS (pages of the process alone) of
    the processes and all their descendants, in bytes (each process once), in all and per kind of process."""
    import psutil

    seen: dict[int, tuple[str, Any]] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            family = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in family:
            try:  # a worker that ended since the listing is left out, not the rest
                seen[proc.pid] = (_kind(proc), proc.memory_full_info())
            except psutil.Error:
                continue
    kinds: dict[str, dict[str, int]] = {}
    for kind, info in seen.values():
        entry = kinds.setdefault(kind, {"n": 0, "rss": 0, "pss": 0, "uss": 0})
        entry["n"] += 1
        for key in ("rss", "pss", "uss"):
            entry[key] += getattr(info, key, info.rss)
    return {"processes": len(seen), **{key: sum(k[key] for k in kinds.values()) for key in ("rss", "pss", "uss")},
            "kinds": dict(sorted(kinds.items()))}


def _kind(proc) -> str:
    """java (the JVM); host (a driver or shared host); source_runner (a query's Python streaming source runner);
    task_worker (the read and write tasks' Python workers); for Spark's driver-side Python workers the name of
    their module (create_data_source, write_into_data_source, python_streaming_sink_runner, ...), and
    `daemon:<module>` for the daemon each is forked from; other."""
    import psutil

    try:
        args = proc.cmdline()
        parent = proc.parent()
    except psutil.Error:
        return "other"
    line = " ".join(args)
    if not args:
        return "other"
    if "java" in proc.name():
        return "java"
    if "python_streaming_source_runner" in line:
        return "source_runner"
    if "pyspark.daemon" in line or "pyspark/daemon" in line:
        module = args[-1].rsplit(".", 1)[-1] if args[-1].startswith("pyspark.") and args[-1] != "pyspark.daemon" \
            else "worker"
        module = "task_worker" if module == "worker" else module
        return f"daemon:{module}" if parent is not None and "java" in parent.name() else module
    if "pyspark.worker" in line:
        return "task_worker"
    if "dsflow" in line:
        return "host"
    return "other"


def _mb(used: dict) -> dict:
    return {**{k: round(used[k] / 2**20) for k in ("rss", "pss", "uss")}, "processes": used["processes"],
            "kinds": {kind: {k: (v if k == "n" else round(v / 2**20)) for k, v in e.items()}
                      for kind, e in used["kinds"].items()}}


def record(i: int, shape: str) -> str:
    if shape == "simple":
        return json.dumps({"id": i, "v": i % 5})
    return json.dumps({"id": i, "viewtime": 1_700_000_000_000 + i * 200, "userid": f"User_{i % 9 + 1}",
                       "pageid": f"Page_{i % 90 + 1}"})


def produce_all(broker: str, project, numbers, shape: str = "example") -> None:
    from dsflow.adapters.kafka.client import produce_json_lines

    lines = [record(i, shape) for i in range(RECORDS)]
    for i in numbers:
        produce_json_lines(broker, project.relation(f"bench.public.in_{i}").topic, lines)


class Feeder:
    """Produces `rate` records a second into each topic in a thread while the memory is sampled (the example's
    datagen writes 5 pageviews a second): every query runs a micro-batch each trigger, so Spark's driver-side
    Python workers stay busy as in a running pipeline (idle, Spark stops them after a minute)."""

    def __init__(self, broker: str, topics: list[str], rate: int, shape: str) -> None:
        import threading

        self.broker, self.topics, self.rate, self.shape = broker, topics, rate, shape
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.sent = 0

    def __enter__(self) -> "Feeder":
        if self.rate > 0:
            self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.broker, "linger.ms": 5})
        n = RECORDS
        while not self.stopped.wait(1.0):
            for topic in self.topics:
                for _ in range(self.rate):
                    producer.produce(topic, record(n, self.shape))
                    n += 1
            producer.poll(0)
            self.sent = n - RECORDS
        producer.flush(30)


def sampled(pids: set[int], settle: float, every: float = 10.0) -> tuple[dict, dict]:
    """Memory samples every `every` s for `settle` s: the largest total RSS and PSS seen, the RSS of each sample
    (MB, in order), what the sample with the largest RSS held per kind of process (count, MB RSS), and the last
    sample (with its breakdown per kind)."""
    peak: dict[str, Any] = {"rss_max": 0, "pss_max": 0, "samples": 0, "rss_samples": [], "at_rss_max": {}}
    deadline = time.monotonic() + settle
    while True:
        used = memory(pids)
        if used["rss"] > peak["rss_max"]:
            peak["at_rss_max"] = {kind: [v["n"], round(v["rss"] / 2**20)] for kind, v in used["kinds"].items()}
        peak.update(rss_max=max(peak["rss_max"], used["rss"]), pss_max=max(peak["pss_max"], used["pss"]),
                    samples=peak["samples"] + 1, rss_samples=[*peak["rss_samples"], round(used["rss"] / 2**20)])
        if time.monotonic() >= deadline:
            return {**peak, "rss_max": round(peak["rss_max"] / 2**20), "pss_max": round(peak["pss_max"] / 2**20)}, used
        time.sleep(min(every, max(0.0, deadline - time.monotonic())))


class FastSampler:
    """Sums the RSS of the processes and their descendants every `every` s in a thread (from /proc, cheaper than
    `memory`): the largest total, how many samples were over 6 GiB, and the write-planning workers alive per
    sample with the millisecond of the second it was taken at (Spark starts a query's batches at multiples of its
    trigger interval), so a burst shows when it happens and how often."""

    def __init__(self, pids: set[int], every: float = 0.2) -> None:
        import threading

        self.pids, self.every = pids, every
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.samples: list[tuple[float, int, int]] = []
        self.at_max: dict[str, list[int]] = {}
        """What the sample with the largest RSS held: {kind: [processes, MB]} (kinds from command lines)."""

    def __enter__(self) -> "FastSampler":
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)

    def run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self.stopped.wait(self.every):
            at, rss, planners, spawning, kinds = time.time(), 0, 0, 0, {}
            family, parents = _family(self.pids)
            lines: dict[int, bytes] = {}
            for pid in family:
                try:
                    used = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
                    line = lines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
                except (OSError, ValueError, IndexError):
                    continue
                rss += used
                planners += b"write_into_data_source" in line
                if line == lines.get(parents.get(pid, 0)) and _line_kind(line) == "java":
                    spawning += used  # the JVM's child between its vfork and exec: the JVM's own pages
                kind = kinds.setdefault(_line_kind(line), [0, 0])
                kind[0], kind[1] = kind[0] + 1, kind[1] + used
            if rss > max((s[1] for s in self.samples), default=0):
                self.at_max = {k: [n, round(b / 2**20)] for k, (n, b) in sorted(kinds.items())}
            self.samples.append((at, rss, planners, spawning))

    def summary(self) -> dict:
        limit = 6 * 2**30
        over = [s for s in self.samples if s[1] > limit]
        by_phase: dict[int, list[int]] = {}
        for at, _, planners, _ in self.samples:
            by_phase.setdefault(int(at % 1 * 10), []).append(planners)
        without_spawns = [s[1] - s[3] for s in self.samples]
        return {"fast_samples": len(self.samples), "fast_every_s": self.every,
                "fast_rss_max_without_spawning_jvm": round(max(without_spawns, default=0) / 2**20),
                "fast_spawning_jvm_samples": sum(1 for s in self.samples if s[3]),
                "fast_rss_max": round(max((s[1] for s in self.samples), default=0) / 2**20),
                "fast_rss_median": round(sorted(s[1] for s in self.samples)[len(self.samples) // 2] / 2**20)
                if self.samples else 0,
                "fast_over_6gib": len(over), "fast_at_max": self.at_max,
                "planners_max": max((s[2] for s in self.samples), default=0),
                "planners_mean_by_tenth_of_second": {k: round(sum(v) / len(v), 1) for k, v in sorted(by_phase.items())}}


def _line_kind(line: bytes) -> str:
    """A process's kind from its command line: java, the module of a Python worker or daemon, or the first word."""
    args = line.decode("utf-8", "replace").split("\0")
    if "java" in args[0]:
        return "java"
    modules = [a for a in args if a.startswith(("pyspark.", "dsflow."))]
    return modules[-1] if modules else (args[-2] if len(args) > 1 else args[0]).rsplit("/", 1)[-1]


def _family(pids: set[int]) -> tuple[set[int], dict[int, int]]:
    """The processes and all their descendants, from /proc's parent links; and each process's parent."""
    children: dict[int, list[int]] = {}
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
        parents[int(entry.name)] = parent
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found, parents


def _gate(state, count: int) -> dict:
    """What the host of the first query's application reports of its batch gate (host.py), if it has one."""
    from dsflow.adapters.spark import apps

    outputs = state.resources["query.bench.public.out_0"].outputs
    if "app_dir" not in outputs:
        return {}
    return apps.read_json(Path(outputs["app_dir"]) / apps.HOST_FILE).get("gate", {})


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


@dataclass(frozen=True)
class Run:
    """What every measurement of one invocation shares."""

    work: Path
    broker: str
    per_app: int
    timeout: float
    shape: str = "example"
    conf: dict[str, str] = field(default_factory=dict)
    settle: float = 90.0
    rate: int = 5
    batches: int | None = None
    runtime: bool = False
    """--with-runtime: the runtime supervisor runs too, and its memory and the broker's are counted."""


def measure(run: Run, mode: str, count: int) -> dict:
    from dsflow.engine import operations

    from dsflow.adapters.kafka import devbroker
    from dsflow.runtime import control

    root = run.work / f"{mode}-{count}"
    tag = f"{mode[0]}{count}"
    write_project(root, mode, count, run.broker, run.per_app, tag, run.shape, run.conf, run.batches)
    options = operations.Options(root, None, {})
    loaded = operations.load(options)
    started = time.monotonic()
    assert operations.apply(loaded, operations.plan(loaded)).ok
    try:
        produce_all(run.broker, operations.load(options).project, range(count), run.shape)
        state = loaded.workspace.state_backend().read()
        wait_all(state, [f"out_{i}" for i in range(count)], run.timeout)
        all_up = time.monotonic() - started
        pids = {r.outputs["pid"] for k, r in state.resources.items() if k.startswith("query.")}
        if run.runtime:
            pids |= {control.up(loaded, options)[0]["pid"], devbroker.read(run.work / "broker").pid}
        topics = [loaded.project.relation(f"bench.public.in_{i}").topic for i in range(count)]
        before = batches(state, count)
        with Feeder(run.broker, topics, run.rate, run.shape) as feeder, FastSampler(pids) as fast:
            peak, used = sampled(pids, run.settle)
            load_at_memory = round(os.getloadavg()[0], 1)
        ran = batches(state, count) - before
        lag = sum(int(_status(state, f"out_{i}").get("lag_records") or 0) for i in range(count))
        failed = [n for n in range(count) if _state(state, f"out_{n}") != "running"]
        write_project(root, mode, count + 1, run.broker, run.per_app, tag, run.shape, run.conf, run.batches)
        loaded = operations.load(options)
        began = time.time()
        assert operations.apply(loaded, operations.plan(loaded)).ok
        applied = time.time() - began
        produce_all(run.broker, loaded.project, [count], run.shape)  # the added query's topic only
        state = loaded.workspace.state_backend().read()
        wait_all(state, [f"out_{count}"], run.timeout)
        outputs = state.resources[f"query.bench.public.out_{count}"].outputs
        progressed = progress_instant(Path(outputs["run_dir"]))
        hosted = hosted_start(outputs)
        return {"mode": mode, "queries": count, "shape": run.shape, "with_runtime": run.runtime, "conf": run.conf,
                "batches_at_once": run.batches,
                "gate": _gate(state, count), "drivers_or_hosts": len(pids),
                "rate_per_topic": run.rate, "fed": feeder.sent, "settle_s": run.settle, "batches_while_sampled": ran,
                "lag_records_at_end": lag,
                "load_1m_at_memory": load_at_memory, "not_running": failed, **peak, **fast.summary(), **_mb(used),
                "all_first_progress_s": round(all_up, 1), "added_apply_s": round(applied, 1),
                "added_first_progress_s": round(progressed - began, 1) if progressed else None,
                "added_host_start_to_progress_s": round(progressed - hosted, 1) if progressed and hosted else None}
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
        control.down(loaded)


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
    parser.add_argument("--shape", choices=["example", "simple", "stateful"], default="example")
    parser.add_argument("--settle", type=float, default=90.0,
                        help="s of sampling memory (every 10 s) after every query's first progress")
    parser.add_argument("--rate", type=int, default=5, help="records/s fed into each topic while sampling")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting key=value (runtime.spark_conf)")
    parser.add_argument("--batches-at-once", type=int, default=None, help="runtime.batches_at_once (default: unset)")
    parser.add_argument("--with-runtime", action="store_true",
                        help="start the runtime supervisor too; count its memory and the broker's with the queries'")
    args = parser.parse_args()
    os.environ.setdefault("DSFLOW_RUNTIME", "off")
    from dsflow.adapters.kafka import devbroker

    work = Path(tempfile.mkdtemp(prefix="dsflow-shared-bench-"))
    broker = devbroker.start(work / "broker", port=devbroker.free_port()).bootstrap
    run = Run(work, broker, args.per_app, args.timeout, args.shape,
              dict(item.split("=", 1) for item in args.conf), args.settle, args.rate, args.batches_at_once,
              args.with_runtime)
    try:
        print(json.dumps({"machine": machine(), "records_per_topic": RECORDS, "work": str(work)}), flush=True)
        for count in [int(c) for c in args.counts.split(",")]:
            for mode in args.modes.split(","):
                print(json.dumps({**measure(run, mode, count), "load_1m_after": round(os.getloadavg()[0], 1)}),
                      flush=True)
    finally:
        devbroker.stop(work / "broker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
