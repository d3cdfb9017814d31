"""The host of a shared Spark application: one process, one SparkContext, many continuous queries.

    python -m dsflow.adapters.spark.host APP_DIR/queries.json

Each query runs in its own `SparkSession.newSession()` (its own temporary views and SQL conf), in its own FAIR
scheduler pool, on its own checkpoint. At most `batches_at_once` (app.json) of them run a micro-batch at a time
(gate.py). Every POLL_SECONDS the host reads queries.json (adapters/spark/apps.py) and
starts, stops or restarts only the queries that changed there. A query that fails is recorded failed (its status
file and host.json) and left stopped; the others go on. The supervisor restarts it by raising its generation.
SIGTERM stops every query between two micro-batches, then the application.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from dsflow.adapters.spark.apps import HOST_FILE, desired, read_json, write_json
from dsflow.adapters.spark.driver import (STATUS_EVERY_SECONDS, ExpectationTotals, error_summary, progress_status,
                                          resolve_env_refs, start_query, stop_between_batches, write_status)
from dsflow.adapters.spark.session import isolated_session
from dsflow.adapters.spark.gate import GATE_ENV, BatchGate, spark_query_name
from dsflow.adapters.spark.spec import QuerySpec
from dsflow.core.secrets import scrub

POLL_SECONDS = 0.5
BATCHES_PER_CORE = 2

SHARED_APP_CONF: dict[str, str] = {"spark.python.factory.idleWorkerMaxPoolSize": "4"}
"""Spark settings under every shared application, below the project's `runtime.spark_conf`. Spark keeps one pool of
idle Python workers per kind of planning call, as large as the number of calls made at one moment; a shared
application's queries plan a micro-batch's write (`write_into_data_source`, ~73 MB each, for pyarrow) at once, so
50 queries on 2 cores held 30-36 of them, 2.2-2.6 GB. Capped at 4, a worker released beyond the cap exits and the
next call forks another from the daemon (docs/benchmarks.md, "50 queries")."""


@dataclass
class Hosted:
    """One query the host runs (or ran, when it failed)."""

    spec: QuerySpec
    generation: int
    query: Any = None
    session: Any = None
    lag: Any = None
    state: str = "starting"
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    totals: Any = None
    """Its expectations' counts (driver.ExpectationTotals), made when first asked."""

    ids: dict[str, str] = field(default_factory=dict)
    """Spark's query id (kept by the checkpoint) and run id (new at every start), asked once."""

    def report(self) -> dict[str, Any]:
        return {"generation": self.generation, "state": self.state, "error": self.error,
                "started_at": self.started_at, **self.ids}


class Host:
    """The queries of one application, kept as queries.json says."""

    def __init__(self, app_dir: Path, spark, gate: BatchGate | None = None):
        self.app_dir = app_dir
        self.spark = spark
        self.gate = gate
        self.listener = _batch_ends(gate) if gate is not None else None
        self.hosted: dict[str, Hosted] = {}
        self.broken: dict[str, dict[str, Any]] = {}
        """Queries whose spec could not be read, as host.json reports them (failed)."""
        self.unreadable: dict[int, set[str]] = {}
        self.last_status = 0.0

    def reconcile(self) -> None:
        wanted = desired(self.app_dir)
        if self.gate is not None and (app := read_json(self.app_dir / "app.json")):  # 0 or unreadable: it stays
            self.gate.resize(batches_at_once(app) or self.gate.slots)
        self.broken = {n: b for n, b in self.broken.items() if n in wanted}
        for name in [n for n, h in self.hosted.items()
                     if n not in wanted or int(wanted[n].get("generation", 0)) != h.generation]:
            self.stop(name)
        for name, entry in wanted.items():
            if name not in self.hosted and name not in self.unreadable.get(int(entry.get("generation", 0)), ()):
                self.start(name, entry)
        self.watch()

    def start(self, name: str, entry: dict[str, Any]) -> None:
        from dsflow.adapters.spark.lag import LagProbe

        generation = int(entry.get("generation", 0))
        try:
            hosted = Hosted(spec=_read_spec(entry["spec"]), generation=generation)
        except (OSError, ValueError) as err:  # its spec file is gone or damaged: the query fails, the host goes on
            self.unreadable.setdefault(generation, set()).add(name)
            self.broken[name] = {"generation": generation, "state": "failed", "error": f"its spec: {err}"[:2000]}
            log(f"query {name} failed: cannot read its spec {entry.get('spec')}: {err}")
            return
        self.broken.pop(name, None)
        self.hosted[name] = hosted
        write_status(hosted.spec.status_path, self.status(hosted, "starting"))
        try:
            session = hosted.session = isolated_session(self.spark)
            for key, value in hosted.spec.spark_conf.items():
                if key.startswith("spark.sql."):
                    session.conf.set(key, value)
            session.sparkContext.setLocalProperty("spark.scheduler.pool", name)
            if self.listener is not None:  # each session has its own listeners, for its own queries
                session.streams.addListener(self.listener)
            hosted.lag = LagProbe(hosted.spec)
            hosted.query = start_query(session, hosted.spec)
            hosted.state, hosted.started_at = "running", time.time()
            hosted.ids = {"query_id": str(hosted.query.id), "run_id": str(hosted.query.runId)}
            log(f"started {name} (generation {hosted.generation}, run id {hosted.query.runId})")
        except Exception as err:  # noqa: BLE001 - a query that cannot start fails alone
            self.failed(hosted, err)

    def stop(self, name: str) -> None:
        hosted = self.hosted.pop(name)
        if self.gate is not None:  # its batch, if waiting for a slot, runs now: the stop comes between two batches
            self.gate.release(spark_query_name(hosted.spec.name))
        if hosted.query is not None:
            stop_between_batches(hosted.query, hosted.spec.name)
        if hosted.lag is not None:
            hosted.lag.close()
        if self.gate is not None:
            self.gate.release(spark_query_name(hosted.spec.name))
            if hosted.session is not None:
                hosted.session.streams.removeListener(self.listener)
        if hosted.state != "failed":
            write_status(hosted.spec.status_path, self.status(hosted, "stopped"))
        log(f"stopped {name} (generation {hosted.generation})")

    def watch(self) -> None:
        due = time.monotonic() - self.last_status >= STATUS_EVERY_SECONDS
        for hosted in self.hosted.values():
            if hosted.state != "running":
                continue
            if not hosted.query.isActive:
                self.failed(hosted, hosted.query.exception() or RuntimeError("the query stopped by itself"))
            elif due:
                write_status(hosted.spec.status_path, {**self.status(hosted, "running"), **_lag(hosted)})
        if due:
            self.last_status = time.monotonic()
        self.report()

    def failed(self, hosted: Hosted, err: BaseException) -> None:
        hosted.state, hosted.error = "failed", _summary(err)
        if self.gate is not None:
            self.gate.release(spark_query_name(hosted.spec.name))
        write_status(hosted.spec.status_path, {**self.status(hosted, "failed"), "error": hosted.error})
        log(scrub(f"query {hosted.spec.name} failed: {err}"))

    def status(self, hosted: Hosted, state: str) -> dict[str, Any]:
        slots = {"batch_slot": self.gate.slot_of(spark_query_name(hosted.spec.name)),
                 "app_batches": self.gate.report()} if self.gate is not None else {}
        hosted.totals = hosted.totals or ExpectationTotals(hosted.spec)
        return {**progress_status(hosted.spec, hosted.query, state, hosted.totals), "app": self.app_dir.name, **slots,
                **{k: v for k, v in hosted.report().items() if k in ("query_id", "run_id", "started_at")}}

    def report(self) -> None:
        write_json(self.app_dir / HOST_FILE, {"pid": os.getpid(), "app": self.app_dir.name, "updated_at": time.time(),
                                              "queries": {**self.broken,
                                                          **{n: h.report() for n, h in self.hosted.items()}},
                                              **({"gate": self.gate.report()} if self.gate is not None else {})})

    def stop_all(self) -> None:
        for name in list(self.hosted):
            self.stop(name)
        self.report()


def _batch_ends(gate: BatchGate):
    from pyspark.sql.streaming import StreamingQueryListener

    class BatchEnds(StreamingQueryListener):
        """Gives a query's slot back when Spark reports the end of its micro-batch."""

        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            progress = event.progress
            took = (progress.durationMs or {}).get("triggerExecution", 0)
            began = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
            gate.release_after(progress.name, began + took / 1000)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return BatchEnds()


def _summary(err: BaseException) -> str:
    """The failure in one line; for Py4J's 'An error occurred while calling ...', with the JVM's exception."""
    summary = error_summary(err)
    if summary.startswith("An error occurred while calling"):
        lines = [line.lstrip(": ").strip() for line in scrub(str(err)).splitlines()[1:] if line.strip()]
        summary = f"{summary} {lines[0]}"[:2000] if lines else summary
    return summary


def _read_spec(path: str) -> QuerySpec:
    return resolve_env_refs(QuerySpec.model_validate_json(Path(path).read_text()))


def _lag(hosted: Hosted) -> dict[str, Any]:
    progress = hosted.query.lastProgress
    try:
        return hosted.lag.measure(progress.get("sources", []) if progress else [])
    except Exception:  # noqa: BLE001 - lag is a measurement: an unreachable broker must not stop the query
        return hosted.lag.last


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp}Z {message}", flush=True)


def app_conf(app: dict[str, Any]) -> dict[str, str]:
    """The Spark conf of the application described by app.json: SHARED_APP_CONF, the project's conf over it, and the
    FAIR scheduler its queries' pools need."""
    return {**SHARED_APP_CONF, **app.get("spark_conf", {}), "spark.scheduler.mode": "FAIR"}


def batches_at_once(app: dict[str, Any]) -> int:
    """The application's bound on micro-batches at once (0: none), from app.json's `batches_at_once`; by default
    BATCHES_PER_CORE per core of this machine."""
    value = app.get("batches_at_once")
    return int(value) if value is not None else BATCHES_PER_CORE * (os.cpu_count() or 1)


def run(queries_path: Path) -> int:
    from dsflow.adapters.spark.session import build_session

    app_dir = queries_path.parent
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    app = read_json(app_dir / "app.json")
    slots = batches_at_once(app)
    gate = BatchGate(slots) if slots > 0 else None
    if gate is not None:  # before the JVM starts: every Python process Spark starts inherits it
        os.environ[GATE_ENV] = gate.path
    spark = build_session(app.get("master", "local[2]"), f"dsflow:{app_dir.name}", app_conf(app))
    host = Host(app_dir, spark, gate)
    log(f"host of {app_dir.name} started (pid {os.getpid()})")
    try:
        while not stop.is_set():
            try:
                host.reconcile()
            except Exception as err:  # noqa: BLE001 - a control file briefly unreadable: looked at again
                log(f"reconcile failed: {err}")
            stop.wait(POLL_SECONDS)
        host.stop_all()
    finally:
        spark.stop()
        if gate is not None:
            gate.close()
        log("host stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
