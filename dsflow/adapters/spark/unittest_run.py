"""One `dsflow test` case on Spark, without a broker (core/unittests.py says what a test is).

The query is compiled as apply compiles it (translate.query_spec); only where its sources read and where its rows go
differ: each source reads the test's records (testsource.py), released one arrival batch at a time with
`processAllAvailable` in between, and the result rows, before the sink's facet turns them into its records, are
collected in foreachBatch. Expectations run as in production (DEAD LETTER rows land in the test's folder).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from dsflow.adapters.spark import testsource
from dsflow.adapters.spark.driver import build_result
from dsflow.adapters.spark.expectations import counts
from dsflow.adapters.spark.session import borrowed_session, isolated_session
from dsflow.adapters.spark.spec import QuerySpec
from dsflow.adapters.spark.translate import query_spec
from dsflow.core.model import Project, Query, Relation
from dsflow.core.unittests import Observed, Outcome, Record, UnitTest, compare

KEY, KEEP = "__key", "__keep"
TRIGGER = "100 milliseconds"
MAX_ROUNDS = 50
"""processAllAvailable can return on a trigger that looked for data just before a batch was released; it is asked
again until every source committed the released batches (at most this many times)."""


def run_test(spark: Any, project: Project, query: Query, test: UnitTest) -> Observed:
    """Run the test's batches through the query in a session of its own; what it produced."""
    folder = Path(tempfile.mkdtemp(prefix="dsflow-test-"))
    try:
        spec = _test_spec(project, query, test, folder)
        session = isolated_session(spark)
        for key, value in spec.spark_conf.items():  # the project's and the query's SQL settings, in this session only
            if key.startswith("spark.sql."):
                session.conf.set(key, value)
        return _run(session, spec, test, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _test_spec(project: Project, query: Query, test: UnitTest, folder: Path) -> QuerySpec:
    """The query's spec as apply makes it, each source reading its relation's batches from `folder`."""
    spec = query_spec(project, query, "test", str(folder / "checkpoint"), str(folder / "status.json"))
    testsource.release(folder, 0)
    sources = []
    for index, (source, read) in enumerate(zip(spec.sources, query.sources, strict=True)):
        relation = project.relation(read.relation)
        assert relation is not None  # a loaded project's sources name its relations
        name = f"{index}.json"
        (folder / name).write_text(json.dumps([[_raw(relation, r, n) for n, r in enumerate(b.records.get(
            relation.fqn, ()))] for b in test.batches]))
        sources.append(source.model_copy(update={
            "kind": testsource.KIND, "client_config": {"dir": str(folder), "input": name}, "options": {},
            "value_format": "json", "registry": {}, "key_format": None, "on_error": None}))
    return spec.model_copy(update={"sources": sources, "realtime": False})  # its SQL, on the test's batches


def _raw(relation: Relation, record: Record, offset: int) -> list:
    """[key, value JSON or None, record time ms, offset]: a changelog's key is its primary key, as a topic's."""
    key = None
    if relation.kind == "changelog" and relation.primary_key:
        values = [record.values.get(k) for k in relation.primary_key]
        key = _text(values[0]) if len(values) == 1 else \
            json.dumps(dict(zip(relation.primary_key, map(_plain, values), strict=True)), separators=(",", ":"))
    value = None if record.delete else json.dumps({k: _plain(v) for k, v in record.values.items()})
    return [key, value, record.time_ms or 0, offset]


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _text(value: Any) -> str | None:
    return None if value is None else str(_plain(value))


def _run(spark: Any, spec: QuerySpec, test: UnitTest, folder: Path) -> Observed:
    result = build_result(spark, spec)
    columns = list(spec.sink.columns)
    extra = [c for c in (KEY, KEEP) if c in result.columns]
    observed = Observed(columns=columns, key_columns=list(spec.sink.key_columns) or ([KEY] if KEY in extra else []),
                        replaces=not spec.sink.key_columns and KEY not in extra)

    def collect(frame: Any, _batch_id: int) -> None:
        rows = frame.select(*[f"`{c}`" for c in columns + extra]).collect()
        observed.batches.append([({c: row[c] for c in columns + extra if c != KEEP},
                                  bool(row[KEEP]) if KEEP in extra else True) for row in rows])

    running = (result.writeStream.foreachBatch(collect).outputMode(spec.sink.output_mode)
               .option("checkpointLocation", spec.checkpoint).trigger(processingTime=TRIGGER).start())
    try:
        for released in range(1, len(test.batches) + 1):
            testsource.release(folder, released)
            _process(running, released, len(spec.sources))
            progress = running.lastProgress or {}
            observed.watermarks.append((progress.get("eventTime") or {}).get("watermark"))
        totals: dict[str, Any] = {}
        counts(list(running.recentProgress or []), spec.expectations, totals, None)
        observed.expectations = {rule: {"passed": t["passed"], "failed": t["failed"]} for rule, t in totals.items()}
    finally:
        running.stop()
    observed.dead_letters = _dead_letters(folder)
    return observed


def _process(running: Any, released: int, sources: int) -> None:
    """Until every source committed `released` batches, and the batch without data a watermark needs ran."""
    for _ in range(MAX_ROUNDS):
        running.processAllAvailable()
        ends = [s.get("endOffset") for s in (running.lastProgress or {}).get("sources", [])]
        if len(ends) == sources and all(_batch(e) >= released for e in ends):
            return
    raise RuntimeError(f"the query did not read arrival batch {released}")


def _batch(offset: Any) -> int:
    parsed = json.loads(offset) if isinstance(offset, str) else offset
    return int((parsed or {}).get("batch", 0))


def _dead_letters(folder: Path) -> list[dict[str, Any]]:
    path = folder / testsource.DEAD_LETTERS
    if not path.exists():
        return []
    found = []
    for line in filter(None, path.read_text(encoding="utf-8").splitlines()):
        entry = json.loads(line)
        found.append({**json.loads(entry["value"]), "_rule": entry["headers"].get("dsflow.expectation")})
    return found


def run_tests(project: Project, tests: list[UnitTest], on_outcome: Callable[[Outcome], None]) -> list[Outcome]:
    """Every test in one Spark session: the process's own if it has one (pytest's), else one built for the run
    and stopped after it."""
    outcomes = []
    with borrowed_session(project.runtime.spark_master, "dsflow:test") as spark:
        queries = {q.fqn: q for q in project.queries}
        for test in tests:
            outcome = _outcome(spark, project, queries[test.query], test)
            on_outcome(outcome)
            outcomes.append(outcome)
    return outcomes


def observe(project: Project, test: UnitTest) -> Observed:
    """One test's run, uncompared (`dsflow test --record`), in a session as `run_tests` has one."""
    with borrowed_session(project.runtime.spark_master, "dsflow:test") as spark:
        return run_test(spark, project, next(q for q in project.queries if q.fqn == test.query), test)


def _outcome(spark: Any, project: Project, query: Query, test: UnitTest) -> Outcome:
    started = time.monotonic()
    try:
        observed = run_test(spark, project, query, test)
    except Exception as err:  # noqa: BLE001 - a query that fails is the test's error, the others still run
        from dsflow.adapters.spark.driver import error_summary

        return Outcome(test, error=error_summary(err), seconds=time.monotonic() - started)
    return Outcome(test, tuple(compare(test, observed)), seconds=time.monotonic() - started)
