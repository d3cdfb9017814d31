"""The query driver: one process runs one continuous query until told to stop.

    python -m dsflow.adapters.spark.driver SPEC.json

It writes its status (state, rates, last progress) to the spec's status file every few seconds,
stops gracefully on SIGTERM, and records a failure with its message before exiting non-zero.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dsflow.adapters.spark import realtime
from dsflow.adapters.spark.expectations import counts, guarded
from dsflow.adapters.spark.facets import for_kind
from dsflow.adapters.spark.frames import gap_log_path, skip_log_path, source_view
from dsflow.adapters.spark.gate import hold, held_twice, release
from dsflow.adapters.spark.lag import LagProbe
from dsflow.adapters.spark.retract import retracted_view
from dsflow.adapters.spark.spec import ENV_REF, QuerySpec
from dsflow.core.categories import STOP_GRACE_SECONDS as PLANNED_STOP_GRACE
from dsflow.core.latency import NewestBatch
from dsflow.core.secrets import register, registered, scrub
from dsflow.errors import DsflowError
from dsflow.formats.decoding import skipped_count

STATUS_EVERY_SECONDS = 2.0
ASYNC_CHECKPOINT = {
    "asyncProgressTrackingEnabled": "true",
    "asyncProgressTrackingCheckpointIntervalMs": "0",
    "_asyncProgressTrackingOverrideSinkSupportCheck": "true",
}
"""Spark's async progress tracking (`runtime.async_checkpoint`, off by default): a micro-batch's offset and commit
log entries are written on a background thread while the next batch runs, instead of two synchronous file writes
per batch. Spark lets only its own log sink use it, because a sink must tolerate replays: a sink whose facet says
`async_checkpoint` is at-least-once like Spark's, so dsflow passes Spark's sink-check override. An interval of 0
keeps an entry for every batch, so offsets read from the checkpoint stay exact and turning it off is safe. Since
checkpoint files are written through Hadoop's FileSystem API (session.py) the two writes take ~45 ms, and on 2 cores
the background writer made each batch's addBatch ~50 ms longer and records ~40 ms later (docs/benchmarks.md,
"Seventh pass")."""
STOP_GRACE_SECONDS = float(PLANNED_STOP_GRACE)  # the plan's wording says it (core/categories.py REPEATS)


def build_dataframe(spark, spec: QuerySpec):
    """The streaming DataFrame the sink writes: the query's result (`build_result`), then the rows the sink's facet
    writes ((key, value) for a log, the SELECT's columns otherwise)."""
    result = build_result(spark, spec)
    sink = for_kind(spec.sink.kind)
    return result if sink is None else sink.sink_rows(result, spec.sink)


def build_result(spark, spec: QuerySpec):
    """The query's result rows: each source read by its facet into its view, the SELECT over them, the
    expectations applied (`dsflow test` collects these rows itself: adapters/spark/unittest_run.py)."""
    if spec.functions:  # the user-defined functions the SQL calls, known to the session before it is planned
        from dsflow.adapters.spark.udfs import register_functions

        register_functions(spark, spec.functions)
    for source in spec.sources:
        facet = for_kind(source.kind)
        if facet is None:
            raise ValueError(f"no store reads sources of kind {source.kind!r}")
        if source.lookup:  # a processing-time temporal join's changelog, read at every micro-batch
            from dsflow.adapters.spark.lookup import bounded_view

            bounded_view(spark, spec, source, facet).createOrReplaceTempView(source.view)
            continue
        source_view(_read(spark, spec, source, facet), source).createOrReplaceTempView(source.view)
    if spec.temporal is not None:
        from dsflow.adapters.spark.temporal import joined_view

        joined_view(spark, spec.temporal)
    if spec.chain is not None:
        from dsflow.adapters.spark.join_chain import joined_view as joined_chain

        joined_chain(spark, spec.chain)
    if spec.changelog_join is not None:
        from dsflow.adapters.spark.changelog_join import joined_view as joined_changelogs

        joined_changelogs(spark, spec.changelog_join)
    if spec.stacked is not None:  # an aggregating subquery's changelog (adapters/spark/stacked.py)
        from dsflow.adapters.spark.stacked import stacked_view

        stacked_view(spark, spec.stacked)
    result = spark.sql(spec.select_sql)
    if spec.top_n is not None:  # ROW_NUMBER top-N: select_sql gives its per-record rows (adapters/spark/topn.py)
        from dsflow.adapters.spark.topn import ranked_frame

        result = ranked_frame(spark, spec.top_n, result)
    if spec.over is not None:  # OVER aggregates: select_sql gives their per-record rows (adapters/spark/over.py)
        from dsflow.adapters.spark.over import over_frame

        result = over_frame(spark, spec.over, result)
    if spec.retract is not None:  # GROUP BY over a changelog: select_sql gives its per-change rows
        retracted_view(spark, spec.retract, result)
        result = spark.sql(spec.retract.post_sql)
    return guarded(result, spec)  # the expectations (adapters/spark/expectations.py)


def _read(spark, spec: QuerySpec, source, facet):
    """A source's raw rows: its facet's reader, or its store's own connector in real-time mode."""
    return realtime.stream(spark, spec, source) if spec.realtime else facet.stream(spark, spec, source)


def counted_gaps(spec: QuerySpec) -> int:
    """Offsets the query's reads found empty and counted (gaps.jsonl), 0 if none; a gap a replayed micro-batch
    logged again (the same log, partition and offsets) is counted once."""
    try:
        lines = gap_log_path(spec).read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    gaps = {(e.get("topic"), e.get("partition"), e["start"], e["end"]) for e in map(json.loads, filter(None, lines))}
    return sum(end - start for _, _, start, end in gaps)


def start_query(spark, spec: QuerySpec, available_now: bool = False):
    """Start the query; `available_now` processes what is there now and stops (tests, one-off runs)."""
    frame = build_dataframe(spark, spec)
    if spec.realtime and not available_now:
        return realtime.start(spec, frame)
    trigger = {"availableNow": True} if available_now else {"processingTime": spec.trigger_interval}
    facet = for_kind(spec.sink.kind)
    if facet is None:
        raise ValueError(f"no store writes sinks of kind {spec.sink.kind!r}")
    options = ASYNC_CHECKPOINT if spec.async_checkpoint and not available_now else {}
    return facet.start(spec, frame, trigger, dict(options))


def write_status(path: str, status: dict[str, Any]) -> None:
    target = Path(path)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(status, default=str))
    os.replace(tmp, target)


class ExpectationTotals:
    """What the driver's status keeps across its writes: the passed and failed rows of each expectation since the
    driver started, and in the last micro-batch, from the query's recent progress (adapters/spark/expectations.py
    `counts`; each batch counted once); and the cost of its recent batches (`batch_costs`)."""

    def __init__(self, spec: QuerySpec) -> None:
        self.rules = spec.expectations
        self.totals: dict[str, Any] = {}
        self.last_batch: int | None = None
        self.costs = BatchCosts()
        self.latency = NewestBatch(spec.realtime)

    def fields(self, query) -> dict[str, Any]:
        """{"expectations": {rule: {action, passed, failed, last_batch_passed, last_batch_failed}}} ({} without
        rules), and {"batch_costs": [[records, ms], ...]} once a batch read records."""
        costs = self.costs.fields(query.lastProgress if query is not None else None)
        if not self.rules:
            return costs
        if query is not None:
            self.last_batch = counts(list(query.recentProgress or []), self.rules, self.totals, self.last_batch)
        return {**costs, "expectations": {r.name: self.totals.get(r.name, {"action": r.action, "passed": 0,
                                                                           "failed": 0}) for r in self.rules}}


class BatchCosts:
    """(records, milliseconds, cold) of the micro-batches the status saw that read records: the most recent and the
    largest few, which a plan's replay estimate fits its time on (core/catchup.py); cold: the first of the run."""

    RECENT = 20
    LARGEST = 5

    def __init__(self) -> None:
        self.recent: list[tuple[int, int, int, bool]] = []  # (batch id, records, ms, cold)
        self.largest: list[tuple[int, int, int, bool]] = []

    def fields(self, progress: dict[str, Any] | None) -> dict[str, Any]:
        if progress:
            batch, rows = int(progress.get("batchId", -1)), int(progress.get("numInputRows") or 0)
            ms = int((progress.get("durationMs") or {}).get("triggerExecution") or 0)
            seen = {c[0] for c in self.recent + self.largest}
            if rows > 0 and ms > 0 and batch not in seen:
                cost = (batch, rows, ms, not seen)  # the run's first batch with records warms everything up
                self.recent = [*self.recent, cost][-self.RECENT:]
                self.largest = sorted([*self.largest, cost], key=lambda c: -c[1])[:self.LARGEST]
        kept = {c[0]: [c[1], c[2], c[3]] for c in self.largest + self.recent}
        return {"batch_costs": [kept[b] for b in sorted(kept)]} if kept else {}


def progress_status(spec: QuerySpec, query, state: str, totals: ExpectationTotals | None = None) -> dict[str, Any]:
    progress = query.lastProgress if query is not None else None
    status: dict[str, Any] = {"name": spec.name, "version": spec.version, "pid": os.getpid(), "state": state,
                              "updated_at": time.time(), "gap_offsets": counted_gaps(spec),
                              **_skipped(spec), **(totals.fields(query) if totals is not None else {})}
    if query is not None:  # a restart in the same driver keeps its PID and starts a new run
        status["run_id"] = str(query.runId)
    if progress:
        status.update({
            "batch_id": progress.get("batchId"),
            "input_rows_per_second": progress.get("inputRowsPerSecond"),
            "processed_rows_per_second": progress.get("processedRowsPerSecond"),
            "num_input_rows": progress.get("numInputRows"),
            "last_progress_at": progress.get("timestamp"),
            "last_batch_duration_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
            "sources": [{"description": s.get("description"), "end_offset": s.get("endOffset")}
                        for s in progress.get("sources", [])],
            "watermark": (progress.get("eventTime") or {}).get("watermark"),
            **state_size(progress.get("stateOperators") or []),
        })
    if query is not None:
        watch = totals.latency if totals is not None else NewestBatch(spec.realtime)
        status.update(watch.fields(progress, lambda: list(query.recentProgress or [])))
    return status


def _skipped(spec: QuerySpec) -> dict[str, int]:
    """Source records skipped under 'source.deserialization.error.handling' = IGNORE, when a source says so."""
    if not any(source.on_error == "IGNORE" for source in spec.sources):
        return {}
    return {"skipped_records": skipped_count(str(skip_log_path(spec)))}


def state_size(operators: list[dict[str, Any]]) -> dict[str, int]:
    """Rows and bytes the query's state stores hold after its last batch (summed over its stateful operators;
    nothing for a stateless query)."""
    if not operators:
        return {}
    return {"state_rows": sum(int(op.get("numRowsTotal") or 0) for op in operators),
            "state_bytes": sum(int(op.get("memoryUsedBytes") or 0) for op in operators)}


def error_summary(err: BaseException) -> str:
    """The dsflow diagnostic inside a Spark error if there is one, else the error's first line."""
    text = scrub(str(err))
    found = re.search(r"DSF-E\d+[^\n]*", text)
    if found:
        return found.group(0)[:2000]
    return text.splitlines()[0][:2000] if text else type(err).__name__


def stop_between_batches(query, name: str, grace: float = STOP_GRACE_SECONDS) -> bool:
    """Stop when no micro-batch is running, so the stopped version leaves no written-but-uncommitted batch; False if
    a batch still ran after `grace` seconds and was interrupted (it runs again on restart: at-least-once).

    The sources are held first (gate.hold): a trigger that starts afterwards finds no new data. The query is then
    stopped as soon as either no trigger runs and the last found no data, or a source answered held in two
    triggers (gate.held_twice: needed when triggers run back to back, as in a query behind its sources), and no
    batch without data (a watermark's) runs. The checkpoint's last committed offsets are then exactly where the
    sink stopped (what a restart on the same checkpoint, or a 'carry offsets' replacement, starts from).

    Checking `isTriggerActive` alone was not enough (issue 39, item 5): with triggers back to back a poll rarely
    sees none active and the wait ran out, and the next trigger could start between the check and the stop; the
    stop then cut a batch short, its records written and its commit not (tests/e2e/test_restart_exactly_once.py).
    """
    hold(name)
    try:
        between = _wait_between_batches(query, name, time.monotonic() + grace)
        if query.isActive:
            query.stop()
        return between
    finally:
        release(name)


def _stop(query, spec: QuerySpec) -> bool:
    """Stop between batches; a real-time query's batch runs until its interval ends: stopped at once (False: what it
    wrote since its last checkpoint is written again on restart, at-least-once)."""
    if not spec.realtime:
        return stop_between_batches(query, spec.name)
    if query.isActive:
        query.stop()
    return False


def _wait_between_batches(query, name: str, deadline: float) -> bool:
    """Poll until the query is between batches (True) or the deadline passes (True only if no trigger runs then).
    The answer comes from the same status that ended the wait: a second read could see the next trigger, which
    finds the sources held and runs no batch, and call that stop interrupted (the CI failure of stop 52)."""
    while True:
        status = query.status
        if not query.isActive or _between_batches(status, held_twice(name)):
            return True
        if time.monotonic() >= deadline:
            return not status.get("isTriggerActive")
        time.sleep(0.05)


BATCH_MESSAGES = ("Processing new data", "No new data but cleaning up state")
"""Spark's status messages while a trigger runs a micro-batch (with data, or a watermark's without)."""


def _between_batches(status: dict[str, Any], held_twice: bool) -> bool:
    """With the sources held: no micro-batch runs, and none that reads data can start."""
    if status.get("message") in BATCH_MESSAGES:
        return False
    return held_twice or (not status.get("isTriggerActive") and not status.get("isDataAvailable"))


def run(spec: QuerySpec, spark=None, stop: threading.Event | None = None) -> int:
    """Run the query until SIGTERM (or `stop`); `spark`: a session already built for the spec's master and conf
    (a warm standby that became this query's driver, adapters/spark/standby.py), else one is built. A planned
    restart runs the next version in this process (adapters/spark/reload.py)."""
    from dsflow.adapters.spark import reload
    from dsflow.adapters.spark.session import build_session

    stop = stop or threading.Event()
    wake = threading.Event()

    def stopping(*_: Any) -> None:
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    signal.signal(signal.SIGUSR1, lambda *_: wake.set())
    write_status(spec.status_path, {"name": spec.name, "version": spec.version, "pid": os.getpid(),
                                    "state": "starting", "updated_at": time.time()})
    try:
        spark = spark or build_session(spec.master, f"dsflow:{spec.name}", spec.spark_conf)
    except DsflowError as err:  # a master it cannot submit to (DSF-E271, DSF-E272): the status says why
        write_status(spec.status_path, {**progress_status(spec, None, "failed"), "error": error_summary(err)})
        return 1
    _redact_in_spark(spark)
    reload.forget(Path(spec.status_path).parent)  # a request left for the driver before this one is not for it
    session, built, loaded = spark, spec, reload.code_fingerprint()
    try:
        while True:
            code, parked = _run_version(session, spec, stop, wake)
            if not parked:
                return code
            resumed = _await_resume(spec, built, stop, wake, loaded)
            if resumed is None:
                return 0
            write_status(resumed.status_path, {"name": resumed.name, "version": resumed.version, "pid": os.getpid(),
                                               "state": "starting", "updated_at": time.time()})
            spec, session = resumed, _fresh_session(spark, resumed)
    finally:
        spark.stop()


def _run_version(spark, spec: QuerySpec, stop: threading.Event, wake: threading.Event) -> tuple[int, bool]:
    """Run one version of the query until a stop or a park request; (exit code, parked)."""
    from dsflow.adapters.spark import reload
    run_dir = Path(spec.status_path).parent
    query, request = None, None
    lag = LagProbe(spec)
    totals = ExpectationTotals(spec)
    records = _latency_probe(spec)
    try:
        query = start_query(spark, spec)
        while not stop.is_set() and query.isActive:
            write_status(spec.status_path, {**progress_status(spec, query, "running", totals), **_lag(lag, query),
                                            **_record_latency(records)})
            request = reload.pending(run_dir, "park")
            if request is not None:
                break
            wake.wait(STATUS_EVERY_SECONDS)
            wake.clear()
        between = _stop(query, spec)
        error = query.exception()
        if error is not None:
            raise RuntimeError(str(error))
        write_status(spec.status_path, {**progress_status(spec, query, "stopped", totals),
                                        "stopped_between_batches": between})
        if request is not None:
            reload.answer(run_dir, request, parked=True, stopped_between_batches=between)
        return 0, request is not None
    except Exception as err:  # noqa: BLE001 - the status file is how the failure reaches dsflow status
        status = progress_status(spec, query, "failed", totals)
        status["error"] = error_summary(err)
        write_status(spec.status_path, status)
        print(scrub(f"query {spec.name} failed: {err}"), file=sys.stderr)
        return 1, False
    finally:
        lag.close()
        if records is not None:
            records.close()


def _await_resume(spec: QuerySpec, built: QuerySpec, stop: threading.Event, wake: threading.Event,
                  code: str | None = None) -> QuerySpec | None:
    """Parked: wait for the next version's spec (reload.PARK_SECONDS at most); None to exit (none came, a stop, or a
    spec this session cannot run as it is, refused)."""
    from dsflow.adapters.spark import reload
    from dsflow.adapters.spark.spec import misfit

    run_dir = Path(spec.status_path).parent
    deadline = time.monotonic() + reload.PARK_SECONDS
    while not stop.is_set() and time.monotonic() < deadline:
        again = reload.pending(run_dir, "park")
        if again is not None:  # an apply interrupted after parking it, run again: it is parked already
            reload.answer(run_dir, again, parked=True, stopped_between_batches=True)
            deadline = time.monotonic() + reload.PARK_SECONDS
        request = reload.pending(run_dir, "resume")
        if request is None:
            wake.wait(0.5)
            wake.clear()
            continue
        try:
            resumed = resolve_env_refs(QuerySpec.model_validate_json(Path(request["spec"]).read_text()))
        except (OSError, ValueError) as err:
            reload.answer(run_dir, request, ok=False, reason=f"its spec cannot be read: {err}")
            return None
        reason = misfit(built.master, built.spark_conf, resumed.master, resumed.spark_conf)
        if reason is None and not reload.holds_secrets(request):
            reason = "its secrets are not the ones this driver was started with"
        if reason is None and request.get("code") != (code or reload.code_fingerprint()):
            reason = "dsflow's code changed since this driver started"
        reload.answer(run_dir, request, ok=reason is None, reason=reason)
        return resumed if reason is None else None
    return None


def _fresh_session(spark, spec: QuerySpec):
    """A session of its own for the next version: temporary views and SQL conf (a state store provider set by the
    version before) start as a new driver's would."""
    from dsflow.adapters.spark.session import isolated_session

    session = isolated_session(spark)
    for key, value in spec.spark_conf.items():
        if key.startswith("spark.sql."):
            session.conf.set(key, value)
    _redact_in_spark(session)
    return session


def _lag(probe: LagProbe, query) -> dict[str, Any]:
    """The lag fields of the status; a broker that does not answer leaves the last ones (the query goes on)."""
    progress = query.lastProgress
    try:
        return probe.measure(progress.get("sources", []) if progress else [])
    except Exception:  # noqa: BLE001 - lag is a measurement: an unreachable broker must not stop the query
        return probe.last


def _latency_probe(spec: QuerySpec) -> Any:
    """A real-time query's reader of its records' latency (its sink's facet: `latency_probe`); None otherwise."""
    sink: Any = for_kind(spec.sink.kind)
    return sink.latency_probe(spec.sink) if spec.realtime and hasattr(sink, "latency_probe") else None


def _record_latency(probe: Any) -> dict[str, Any]:
    """The record_latency_* fields of the status (core/latency.py); an unreachable broker leaves the last ones."""
    if probe is None:
        return {}
    try:
        return probe.fields()
    except Exception:  # noqa: BLE001 - latency is a measurement: an unreachable broker must not stop the query
        return probe.last


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    spec = resolve_env_refs(QuerySpec.model_validate_json(Path(args[0]).read_text()))
    return run(spec)


def resolve_env_refs(spec: QuerySpec) -> QuerySpec:
    """Client settings written as '@env:NAME' (secrets) take their value from the environment."""
    def resolve(config: dict[str, str]) -> dict[str, str]:
        resolved = {k: os.environ.get(v[len(ENV_REF):], "") if v.startswith(ENV_REF) else v for k, v in config.items()}
        register(resolved[k] for k, v in config.items() if v.startswith(ENV_REF))  # scrubbed from output
        return resolved

    sources = [s.model_copy(update={"client_config": resolve(s.client_config), "registry": resolve(s.registry)})
               for s in spec.sources]
    sink = spec.sink.model_copy(update={"client_config": resolve(spec.sink.client_config),
                                        "registry": resolve(spec.sink.registry)})
    return spec.model_copy(update={"sources": sources, "sink": sink})


def _redact_in_spark(spark) -> None:
    """Spark's own redaction of the secret values this driver was given, in plans and explain output. Set on the
    running session, never in the session's start conf: PySpark passes that conf to the JVM's command line."""
    values = sorted(registered(), key=len, reverse=True)
    if values:
        spark.conf.set("spark.sql.redaction.string.regex", "|".join(re.escape(v) for v in values))


if __name__ == "__main__":
    sys.exit(main())
