"""Recovery after kill -9 under the runtime supervisor, and one query's throughput alone vs in a shared application
(issue 22's targets; results in docs/benchmarks.md, "Recovery and shared throughput").

A broker this script starts; the supervisor is `dsflow.runtime.control.up` with DSFLOW_RUNTIME_TICK = --tick. While
the kills happen a thread produces records with increasing ids into every input topic; afterwards each output is
read back and every id produced must be in it (ids lost and duplicated counted). Each kill waits until every query
runs and the supervisor's record counts no failure in a row (so the backoff is back at its base). Seconds from the
kill: the supervisor noticing it (its record's `died_at`), the new PID recorded in the state (for a query failed
in a live host: the host reporting its restart), the query started again (a driver's first 'running' status, or
the start the host reports), and the end of its first micro-batch in the new process (the first commit file its
checkpoint gets after the process, or the restart in the host, began); and the backoff applied (records.backoff).
- `query`: one stateless query in its own driver (`runtime.isolation: query`) with `runtime.standby: false`, the
  driver killed (SIGKILL): a cold restart.
- `standby`: the same with the default `runtime.standby` (on): before each kill the script also waits for the
  supervisor's standby driver to be ready (its RSS, the standby process with its JVM and Python workers, is in the
  row), and the row says how the supervisor started the query again (`last_restart`: from the standby, or cold).
- `shared`: three such queries in one shared application; alternately the host is killed (SIGKILL), then one query
  fails alone (SIGKILL of one Python streaming source runner in the host: the driver side of its Kafka source).
- `throughput`: the same stateless query (a filter and a projection) alone in its own driver, or added to a warm
  shared application beside 2 idle queries; trigger --interval s. Started over WARM records (its first, cold batch),
  then --preloads times: half way between two triggers, --records small JSON records (~40 B) into its 2-partition
  topic, read by its next trigger; records/s = output records / (that batch's trigger time, `batchTimestampMs` of
  the checkpoint's offsets log, to its commit file's time). The output is compared with the ids the filter keeps.
  --reps runs per mode, their order alternated (query, shared, shared, query, ...). `--throughput-modes` adds
  `shared0`: the query alone in a shared application (no idle neighbours), to tell the neighbours' cost from the
  shared host's.

    python bench/recovery.py                                    # by hand: ~35 min on 2 cores
    python bench/recovery.py --scenarios throughput --reps 3 --records 300000
    python bench/recovery.py --scenarios query,standby --kills 3
    python bench/recovery.py --scenarios standby,shared --kills 3 --stateful    # queries that keep state

`--stateful` makes each recovery query `SELECT id, COUNT(*) AS n ... GROUP BY id` (a changelog): its first batch
after a restart also loads the state store, and the output's latest count of every id must be 1 (an input record
counted twice by a restart would show as 2: `counted_twice`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.shared_drivers import first_progress, machine, memory, sql, write_project  # noqa: E402

Q = "query.bench.public."
LOAD_IN = ("CREATE STREAM load_in (id BIGINT, v BIGINT, name VARCHAR) WITH ('value.format' = 'json', "
           "'topic.partitions' = 2);\n")
MEASURED = ("CREATE STREAM load_out WITH ('trigger.interval' = '{interval} seconds') AS "
            "SELECT id, v * 2 AS w, upper(name) AS name FROM load_in WHERE v <> 3;\n")
WARM = 2_000
"""Records the measured query reads in its first (cold) batch, before the preload."""
WAIT = 900.0
"""Seconds to wait for a host, a driver or an output: a Spark start took 90 s on this machine at load 20+."""
ONE_QUERY_WAIT = 300.0
"""Seconds to wait for a query to fail and come back after its source runner was killed."""


def load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def calm(max_load: float, wait: float) -> float:
    """Wait (up to `wait` s) while the 1-minute load average is above `max_load`; the seconds waited."""
    began = time.monotonic()
    while os.getloadavg()[0] > max_load and time.monotonic() - began < wait:
        time.sleep(5)
    return round(time.monotonic() - began)


class Feeder(threading.Thread):
    """Produces {"id": n, "v": n % 5} for n = 0, 1, 2, ... into each topic, `rate` records/s, until stopped."""

    def __init__(self, broker: str, topics: list[str], rate: int):
        super().__init__(daemon=True)
        self.broker, self.topics, self.rate = broker, topics, rate
        self.stop = threading.Event()
        self.produced = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from dsflow.adapters.kafka.client import (DeliveryErrors, client_config, flush_or_raise, new_producer,
                                                  produce_one)

        errors = DeliveryErrors()
        producer = new_producer(client_config(self.broker), errors)
        step = max(1, self.rate // 20)
        try:
            while not self.stop.is_set():
                for topic in self.topics:
                    for n in range(self.produced, self.produced + step):
                        produce_one(producer, topic, json.dumps({"id": n, "v": n % 5}), None)
                self.produced += step
                producer.poll(0)
                self.stop.wait(step / self.rate)
            for topic in self.topics:
                flush_or_raise(producer, topic, self.produced, errors)
        except BaseException as err:  # noqa: BLE001 - reported by finish()
            self.error = err

    def finish(self) -> int:
        self.stop.set()
        self.join(120)
        if self.error is not None:
            raise self.error
        return self.produced


def stateful_sql(count: int) -> str:
    """`--stateful`: each query counts its input per id (a changelog whose state store holds every id seen)."""
    return "".join(f"CREATE STREAM in_{i} (id BIGINT, v BIGINT) WITH ('value.format' = 'json', "
                   f"'topic.partitions' = 1);\nCREATE CHANGELOG out_{i} AS SELECT id, COUNT(*) AS n FROM in_{i} "
                   "GROUP BY id;\n" for i in range(count))


def output_ids(broker: str, topic: str) -> list[int]:
    from dsflow.adapters.kafka.client import read_to_end

    return read_to_end(broker, topic, convert=lambda m: json.loads(m.value())["id"])


def counted_twice(broker: str, topic: str) -> int:
    """Ids whose latest count in a `--stateful` output is above 1: an input record counted twice by a restart."""
    from dsflow.adapters.kafka.client import read_to_end

    latest: dict[int, int] = {}
    for value in read_to_end(broker, topic, convert=lambda m: json.loads(m.value())):
        latest[value["id"]] = value.get("n", 1)
    return sum(1 for n in latest.values() if n > 1)


def output_count(broker: str, topic: str) -> int:
    """Records the topic holds (its true end offsets: tansu's high watermark is its last batch's base + 1)."""
    from dsflow.adapters.kafka.client import client_config, consumer, end_offsets, topic_partitions

    with consumer(client_config(broker)) as c:
        return sum(end_offsets(c, topic, topic_partitions(c, topic)).values())


def account(expected: set[int], found: list[int]) -> dict:
    """Ids of `expected` missing from `found`, and records of `found` beyond one per id."""
    distinct = set(found)
    missing = sorted(expected - distinct)
    return {"lost": len(missing), "first_lost": missing[0] if missing else None,
            "duplicates": len(found) - len(distinct), "unexpected": len(distinct - expected)}


def wait_outputs(broker: str, topics: dict[str, str], produced: int, timeout: float) -> dict[str, dict]:
    """Per query, the account of its output once it holds every id produced (or after `timeout`)."""
    expected = set(range(produced))
    deadline = time.monotonic() + timeout
    while True:
        found = {name: account(expected, output_ids(broker, topic)) for name, topic in topics.items()}
        if all(f["lost"] == 0 for f in found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(2)


def batch_files(checkpoint: Path, kind: str) -> dict[int, float]:
    """{batch id: mtime} of the checkpoint's `offsets` (written as a batch starts) or `commits` (as it ends)."""
    folder = checkpoint / kind
    try:
        names = [p for p in folder.iterdir() if p.name.isdigit()]
    except OSError:
        return {}
    found = {}
    for path in names:
        try:
            found[int(path.name)] = path.stat().st_mtime
        except OSError:
            continue
    return found


def first_commit_after(checkpoint: Path, instant: float) -> float | None:
    """When the first batch committed after `instant` (epoch s) ended, or None."""
    later = [t for t in batch_files(checkpoint, "commits").values() if t > instant]
    return min(later) if later else None


def created(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def deploy(root: Path, options, text: str | None = None):
    """Apply the project (its sql/all.sql replaced by `text` if given); the loaded project."""
    from dsflow.engine import operations

    if text is not None:
        (root / "sql" / "all.sql").write_text(text)
    loaded = operations.load(options)
    result = operations.apply(loaded, operations.plan(loaded))
    if not result.ok:
        raise SystemExit(f"apply failed in {root}")
    return operations.load(options)


def destroy(options) -> None:
    from dsflow.engine import operations

    loaded = operations.load(options)
    operations.apply(loaded, operations.plan(loaded, destroy=True))


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)
    return found


# --- recovery ---------------------------------------------------------------------------------------------------


def stable(backend, names: list[str]) -> bool:
    """Every query made progress since its last start and the supervisor counts no failure in a row for it."""
    from dsflow.runtime.records import read_record

    state = backend.read()
    for name in names:
        run_dir = Path(state.resources[Q + name].outputs["run_dir"])
        record = read_record(run_dir)
        if not first_progress(run_dir) or (record is not None and record.failures):
            return False
    return True


def hosted(outputs: dict) -> dict:
    """What the shared host reports of the query (generation, state, started_at), {} in query isolation."""
    from dsflow.adapters.spark import apps

    if "app_dir" not in outputs:
        return {}
    return apps.reported(Path(outputs["app_dir"])).get(outputs["app_query"]) or {}


def query_started(outputs: dict, after: float) -> float | None:
    """When the query runs again in a process started at `after`: its Spark session built and the query started
    (a driver's first 'running' status; in a shared host, the start the host reports)."""
    seen = hosted(outputs)
    if seen:
        started = seen.get("started_at")
        return started if seen.get("state") == "running" and started and started >= after else None
    try:
        status = json.loads((Path(outputs["run_dir"]) / "status.json").read_text())
    except (OSError, ValueError):
        return None
    updated = status.get("updated_at") or 0
    return updated if status.get("state") == "running" and updated >= after else None


class Watch:
    """Each query's way back after a kill at `killed` (epoch s): its new process recorded, its query started again,
    the end of its first micro-batch after that."""

    def __init__(self, names: list[str], killed: float):
        self.names, self.killed = names, killed
        self.back: dict[str, float] = {}
        """The new process's start time (or the restart in the host), per query, once known."""
        self.times: dict[str, dict[str, float]] = {n: {} for n in names}
        self.records: dict[str, object] = {}
        """The supervisor's record of each query as its restart was seen (before a stable run resets its failures)."""

    def look(self, state, restarted) -> None:
        from dsflow.runtime.records import read_record

        now = time.time()
        for name in self.names:
            outputs, times = state.resources[Q + name].outputs, self.times[name]
            if name not in self.back and (since := restarted(name, outputs)) is not None:
                self.back[name], times["pid_recorded"] = since, now
                self.records[name] = read_record(Path(outputs["run_dir"]))
            if name in self.back and "started" not in times and (t := query_started(outputs, self.back[name])):
                times["started"] = t
            if "started" in times and "batch_end" not in times:
                end = first_commit_after(Path(outputs["checkpoint"]), self.back[name])
                if end is not None:
                    times["batch_end"] = end

    def done(self) -> bool:
        return all("batch_end" in t for t in self.times.values())

    def seconds(self, name: str, key: str) -> float | None:
        at = self.times[name].get(key)
        return round(at - self.killed, 2) if at is not None else None


def kill_process(backend, names: list[str], pid: int, timeout: float) -> tuple[Watch, float | None]:
    """SIGKILL a driver or a host and watch, every 50 ms, each query come back in a new process; the watch and
    seconds until its JVM was gone."""
    import psutil

    jvms = [c for c in psutil.Process(pid).children(recursive=True) if "java" in c.name()]
    watch = Watch(names, time.time())
    os.kill(pid, signal.SIGKILL)
    jvm_gone = None

    def restarted(name: str, outputs: dict) -> float | None:
        """The new process's start; an adopted standby's is the kill (it was started long before)."""
        born = created(outputs["pid"]) if outputs.get("pid") != pid else None
        return None if born is None else max(born, watch.killed)
    deadline = time.monotonic() + timeout
    while not watch.done() and time.monotonic() < deadline:
        if jvm_gone is None and not any(j.is_running() and j.status() != psutil.STATUS_ZOMBIE for j in jvms):
            jvm_gone = round(time.time() - watch.killed, 2)
        watch.look(backend.read(), restarted)
        time.sleep(0.05)
    return watch, jvm_gone


def kill_one_query(backend, names: list[str], pid: int, timeout: float) -> tuple[Watch, str | None]:
    """Fail one query inside a live shared host: SIGKILL one of its Python streaming source runners (one per
    query: the driver side of dsflow's Kafka source); watch the query that failed come back in the same host."""
    import psutil

    runners = [p for p in psutil.Process(pid).children(recursive=True) if _is_source_runner(p)]
    if not runners:
        return Watch(names, time.time()), None
    state = backend.read()
    before = {n: hosted(state.resources[Q + n].outputs).get("generation") for n in names}
    watch = Watch(names, time.time())
    min(runners, key=lambda p: p.pid).kill()

    def restarted(name: str, outputs: dict) -> float | None:
        seen = hosted(outputs)
        return seen.get("started_at") if seen.get("generation") != before[name] else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        watch.look(backend.read(), restarted)
        failed = [n for n in names if n in watch.back]
        if failed and all("batch_end" in watch.times[n] for n in failed):
            break
        time.sleep(0.05)
    failed = [n for n in names if n in watch.back]
    watch.names = failed
    return watch, ",".join(failed) or None


def _is_source_runner(proc) -> bool:
    import psutil

    try:
        return any("python_streaming_source_runner" in part for part in proc.cmdline())
    except psutil.Error:  # ended meanwhile (a short-lived Python worker)
        return False


def recovery_row(watch: Watch, scenario: str, kill: int) -> dict:
    """One kill's figures, seconds from the kill: per query, and the latest query for the whole."""
    from dsflow.runtime.records import backoff

    per = {}
    for name in watch.names:
        record = watch.records.get(name)
        per[name] = {"noticed_s": round(record.died_at - watch.killed, 2) if record and record.died_at else None,
                     "backoff_s": backoff(record.failures) if record and record.failures else None,
                     "last_restart": record.last_restart if record else None,
                     **{f"{key}_s": watch.seconds(name, key) for key in ("pid_recorded", "started", "batch_end")}}
    return {"scenario": scenario, "kill": kill, "queries": len(watch.names),
            **{f"{key}_s": _latest([p[f"{key}_s"] for p in per.values()])
               for key in ("noticed", "pid_recorded", "started", "batch_end")},
            "backoff_s": max((p["backoff_s"] or 0 for p in per.values()), default=None), "per_query": per}


def _latest(values: list[float | None]) -> float | None:
    """The largest, or None if any is missing (that query never got there) or there is none."""
    return None if not values or any(v is None for v in values) else max(values)


def one_kill(backend, names: list[str], mode: str, action: str, number: int, args) -> dict:
    """Wait for the queries to be up with no failure in a row (and for the load, up to --calm-wait), then kill."""
    wait_for(lambda: stable(backend, names), WAIT, "every query running with no failure in a row")
    waiting = standby_ready(backend, WAIT) if mode == "standby" else {}
    waited = calm(args.max_load, args.calm_wait)
    time.sleep(3)  # a few batches of the running process
    before = load()
    pid = backend.read().resources[Q + names[0]].outputs["pid"]
    if action == "one query":
        watch, extra = kill_one_query(backend, names, pid, ONE_QUERY_WAIT)
        extra = {"failed_query": extra}
    else:
        watch, jvm_gone = kill_process(backend, names, pid, WAIT)
        extra = {"jvm_gone_s": jvm_gone}
    scenario = {"driver": "query: driver killed", "host": "shared: host killed",
                "one query": "shared: one query failed"}[action]
    scenario = "query + standby: driver killed" if mode == "standby" else scenario
    scenario = f"{scenario} (stateful)" if args.stateful else scenario
    return {**recovery_row(watch, scenario, number), **extra, **waiting, "load_before": before, "load_after": load(),
            "waited_for_load_s": waited}


def standby_ready(backend, timeout: float) -> dict:
    """Wait for the supervisor's standby driver to be ready; its PID and idle RSS (it, its JVM, its Python
    workers), by kind of process."""
    from dsflow.adapters.spark import standby

    root = Path(backend.read().resources[Q + "out_0"].outputs["run_dir"]).parent.parent / "standby"
    found = wait_for(lambda: (w := standby.describe(root)) and w["state"] == "ready" and w, timeout,
                     "a ready standby driver")
    time.sleep(2)
    return {"standby_pid": found["pid"], "standby_rss_mb": {k: round(v / 2**20) for k, v in
                                                            memory({found["pid"]}).items() if k.startswith("rss")}}


def recovery(work: Path, broker: str, mode: str, args) -> list[dict]:
    """Deploy 1 (query) or 3 (shared) queries, feed them, kill --kills times (shared: the host, then one query's
    source runner, alternately); rows per kill, each with the ids lost and duplicated over the whole run."""
    from dsflow.engine import operations
    from dsflow.runtime import control

    count = 3 if mode == "shared" else 1
    names = [f"out_{i}" for i in range(count)]
    root = work / f"recovery-{mode}"
    write_project(root, "shared" if mode == "shared" else "query", count, broker, 10,
                  f"r{mode[0]}{'s' if args.stateful else ''}", shape="simple")
    if args.stateful:
        (root / "sql" / "all.sql").write_text(stateful_sql(count))
    if mode != "standby":  # the standby is on by default: `query` measures the cold restart without it
        config = root / "dsflow.yml"
        config.write_text(config.read_text().replace("runtime:\n", "runtime:\n  standby: false\n"))
    options = operations.Options(root, None, {})
    loaded = deploy(root, options)
    backend = loaded.workspace.state_backend()
    topics = {n: loaded.project.relation(f"bench.public.{n}").topic for n in names}
    feeder = Feeder(broker, [loaded.project.relation(f"bench.public.in_{i}").topic for i in range(count)], args.rate)
    actions = ["host", "one query"] * args.kills if mode == "shared" else ["driver"] * args.kills
    rows = []
    try:
        control.up(loaded, options)
        feeder.start()
        for number, action in enumerate(actions, start=1):
            rows.append(one_kill(backend, names, mode, action, number, args))
            print(json.dumps(rows[-1]), flush=True)
        time.sleep(5)
        produced = feeder.finish()
        found = wait_outputs(broker, topics, produced, args.output_wait)
        if args.stateful:
            for name, topic in topics.items():
                found[name]["counted_twice"] = counted_twice(broker, topic)
        for row in rows:
            row.update({"ids_produced": produced, "ids": found})
        print(json.dumps({"scenario": mode, "stateful": args.stateful, "ids_produced": produced, "ids": found}),
              flush=True)
        return rows
    finally:
        feeder.stop.set()
        destroy(options)
        control.down(operations.load(options))


# --- throughput -------------------------------------------------------------------------------------------------


def encoded(first: int, count: int) -> list[str]:
    """Records {"id", "v" = id % 10, "name"} for ids first .. first + count - 1, as JSON text."""
    return [json.dumps({"id": i, "v": i % 10, "name": f"n{i % 100}"}) for i in range(first, first + count)]


def produce_all(broker: str, topic: str, values: list[str], partitions: int = 2) -> float:
    """Produce with one producer, the last record of each partition alone in its own request: the query's reader
    takes a busy partition's high watermark as its end, and tansu's is its last batch's first offset + 1, so the
    rest of a larger last batch would wait for the next trigger. Seconds taken, flushes included."""
    from dsflow.adapters.kafka.client import DeliveryErrors, client_config, flush_or_raise, new_producer, produce_one

    began = time.monotonic()
    errors = DeliveryErrors()
    producer = new_producer(client_config(broker, {"linger.ms": "20"}), errors)
    for i, value in enumerate(values[:-partitions]):
        produce_one(producer, topic, value, None)
        if i % 10_000 == 0:
            producer.poll(0)
    flush_or_raise(producer, topic, len(values), errors, timeout=300)
    for partition, value in enumerate(values[-partitions:]):
        produce_one(producer, topic, value, None, partition)
        flush_or_raise(producer, topic, len(values), errors)
    return time.monotonic() - began


def kept(first: int, count: int) -> set[int]:
    """The ids the measured query's filter keeps (v = id % 10, WHERE v <> 3): the reference."""
    return {i for i in range(first, first + count) if i % 10 != 3}


def batch_start(checkpoint: Path, batch: int) -> float:
    """The batch's trigger time (epoch s) as Spark wrote it in the offsets log (`batchTimestampMs`)."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return json.loads(lines[1])["batchTimestampMs"] / 1000


def between_triggers(interval: float) -> float:
    """Sleep until half way between two trigger times of a query with this trigger interval (Spark's processing
    time triggers fall on multiples of the interval since the epoch; one may start late on a busy machine); the
    next trigger time."""
    now = time.time()
    boundary = (now // interval + 1) * interval
    time.sleep(boundary + interval / 2 - now)
    return boundary + interval


def warm_up(broker: str, root: Path, options, text: str, args):
    """Deploy the measured query over WARM records and wait for them in its output: the query's first (cold)
    batch is over; the loaded project, the query's outputs and its output topic."""
    loaded = deploy(root, options, text)
    outputs = loaded.workspace.state_backend().read().resources[Q + "load_out"].outputs
    out_topic = loaded.project.relation("bench.public.load_out").topic
    wait_for(lambda: output_count(broker, out_topic) >= len(kept(0, WARM)), WAIT, "the warm-up records")
    time.sleep(2)  # its commit, and the trigger that follows a batch longer than the interval at once
    return loaded, outputs, out_topic


def measured_batches(checkpoint: Path, since: float) -> dict[int, tuple[float, float]]:
    """{batch: (start, end)} of the batches triggered after `since`: those that read the preload."""
    commits = batch_files(checkpoint, "commits")
    found = {}
    for batch in batch_files(checkpoint, "offsets"):
        start = batch_start(checkpoint, batch)
        if start > since and batch in commits:
            found[batch] = (start, commits[batch])
    return found


def committed_batches(checkpoint: Path, since: float) -> dict[int, tuple[float, float]]:
    """measured_batches once every batch triggered after `since` has its commit file (empty until then)."""
    started = [batch for batch in batch_files(checkpoint, "offsets") if batch_start(checkpoint, batch) > since]
    found = measured_batches(checkpoint, since)
    return found if started and len(found) == len(started) else {}


def measure_preload(broker: str, topic: str, out_topic: str, checkpoint: Path, first: int, args) -> dict:
    """Half way between two triggers of the measured query, produce --records records (ids from `first`); once its
    output holds them, its records/s over the batch(es) that read them (first trigger time to last commit)."""
    values = encoded(first, args.records)
    waited = calm(args.max_load, args.calm_wait)
    before = load()
    trigger = between_triggers(args.interval)
    produced_from = time.time()
    preload_s = produce_all(broker, topic, values)
    expected = kept(0, first + args.records)
    wait_for(lambda: output_count(broker, out_topic) >= len(expected), WAIT, "the measured query's output")
    # the sink has written the batch before Spark writes its commit file: wait for that too
    batches = wait_for(lambda: committed_batches(checkpoint, produced_from), 60, "the measured batch's commit")
    start, end = min(b[0] for b in batches.values()), max(b[1] for b in batches.values())
    written = len(kept(first, args.records))
    return {"records_in": args.records, "records_out": written, "batches": len(batches),
            "seconds": round(end - start, 2), "batch_seconds": round(sum(b[1] - b[0] for b in batches.values()), 2),
            "records_out_per_s": round(written / (end - start)),
            "records_in_per_s": round(args.records / (end - start)),
            "preload_s": round(preload_s, 1), "preload_before_trigger": produced_from + preload_s < trigger,
            **account(expected, output_ids(broker, out_topic)), "load_before": before, "load_after": load(),
            "waited_for_load_s": waited}


def throughput(work: Path, broker: str, mode: str, rep: int, args) -> list[dict]:
    """One run: the input topic (and in shared mode 2 idle queries) deployed, the measured query started over WARM
    records, then --preloads preloads one after the other; a row for each."""
    from dsflow.engine import operations

    root = work / f"tp-{mode}-{rep}"
    isolation = "query" if mode == "query" else "shared"
    write_project(root, isolation, 0, broker, 10, f"t{mode[0]}{mode[-1]}{rep}")
    options = operations.Options(root, None, {})
    idle = sql(2) if mode == "shared" else ""  # shared0: alone in a shared application
    rows = []
    try:
        loaded = deploy(root, options, LOAD_IN + idle)
        topic = loaded.project.relation("bench.public.load_in").topic
        produce_all(broker, topic, encoded(0, WARM))
        loaded, outputs, out_topic = warm_up(broker, root, options,
                                             LOAD_IN + idle + MEASURED.format(interval=args.interval), args)
        for number in range(1, args.preloads + 1):
            row = measure_preload(broker, topic, out_topic, Path(outputs["checkpoint"]),
                                  WARM + (number - 1) * args.records, args)
            rows.append({"scenario": "throughput", "mode": mode, "rep": rep, "preload": number, **row})
            print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        destroy(options)


def throughput_runs(work: Path, broker: str, args) -> list[dict]:
    rows = []
    modes = args.throughput_modes.split(",")
    for rep in range(1, args.reps + 1):
        for mode in (modes if rep % 2 else modes[::-1]):
            rows += throughput(work, broker, mode, rep, args)
    return rows


def summary(rows: list[dict]) -> dict:
    """Shared vs alone: the median and mean records/s of each mode over every preload, and the differences."""
    import statistics

    found: dict = {"summary": "throughput"}
    for mode in ("query", "shared", "shared0"):
        rates = [r["records_out_per_s"] for r in rows if r.get("mode") == mode]
        found[mode] = {"median": round(statistics.median(rates)), "mean": round(statistics.mean(rates)),
                       "runs": len(rates)} if rates else None
    for mode in ("shared", "shared0"):
        if found["query"] and found[mode]:
            for key in ("median", "mean"):
                found[f"{mode}_vs_alone_{key}_pct"] = round(100 * (found[mode][key] / found["query"][key] - 1), 1)
    return found


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", default="query,shared,throughput")
    parser.add_argument("--kills", type=int, default=2, help="kills per recovery scenario")
    parser.add_argument("--rate", type=int, default=200, help="records/s per topic produced during the kills")
    parser.add_argument("--tick", type=float, default=1.0, help="DSFLOW_RUNTIME_TICK: the supervisor's look interval")
    parser.add_argument("--records", type=int, default=300_000, help="preload of the throughput runs")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--preloads", type=int, default=2, help="preloads measured one after the other per run")
    parser.add_argument("--interval", type=int, default=30, help="trigger interval of the measured query (s)")
    parser.add_argument("--throughput-modes", default="query,shared",
                        help="query (own driver), shared (beside 2 idle queries), shared0 (alone in a shared app)")
    parser.add_argument("--output-wait", type=float, default=300, help="seconds to wait for every id in the output")
    parser.add_argument("--stateful", action="store_true",
                        help="recovery queries count per id (CREATE CHANGELOG ... GROUP BY id) instead of a filter")
    parser.add_argument("--max-load", type=float, default=12.0, help="wait before a row while the load is above")
    parser.add_argument("--calm-wait", type=float, default=120.0, help="... for at most this many seconds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ["DSFLOW_RUNTIME"] = "off"  # apply starts no supervisor: this script starts it (control.up)
    os.environ["DSFLOW_RUNTIME_TICK"] = str(args.tick)
    from dsflow.adapters.kafka import devbroker

    work = Path(tempfile.mkdtemp(prefix="dsflow-recovery-bench-"))
    broker = devbroker.start(work / "broker", port=devbroker.free_port()).bootstrap
    try:
        print(json.dumps({"machine": {**machine(), "load": load()}, "tick_s": args.tick, "args": vars(args)}),
              flush=True)
        scenarios = args.scenarios.split(",")
        for mode in ("query", "standby", "shared"):
            if mode in scenarios:
                recovery(work, broker, mode, args)
        if "throughput" in scenarios:
            print(json.dumps(summary(throughput_runs(work, broker, args))), flush=True)
        print(json.dumps({"machine_after": {"load": load()}}), flush=True)
    finally:
        devbroker.stop(work / "broker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
