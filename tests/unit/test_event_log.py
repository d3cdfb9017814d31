"""The event log's pure parts (core/events.py: times, object names, filters, the system tables' rows), and
`dsflow events` over the local backend: the table, --json, --object, --since, and --follow in a real process that
prints what another process appends until it is interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from support.projects import REPO, make_project

from dsflow.adapters.state.local import LocalStateBackend
from dsflow.adapters.sqlite import systables
from dsflow.cli import cli
from dsflow.core.events import Event, event, matches, normalized_time, selected, system_tables
from dsflow.core.state import DeployedResource, LedgerEntry, State
from dsflow.engine import adhoc
from dsflow.errors import DsflowError

QUERY = "query.analytics.public.counts"
VIEW = "relation.analytics.public.counts"


def _at(time_text: str, object_: str, kind: str = "apply", **detail) -> Event:
    return Event(time=normalized_time(time_text), id=f"{object_}-{kind}-{time_text}", environment="dev",
                 object=object_, kind=kind, actor="a@h", detail=detail)


def test_times_are_normalized_to_utc_text_that_sorts() -> None:
    assert normalized_time("2026-11-30") == "2026-11-30T00:00:00.000000+00:00"
    assert normalized_time("2026-11-30T10:00:00+02:00") == "2026-11-30T08:00:00.000000+00:00"
    assert normalized_time("2026-11-30T08:00:00Z") == normalized_time("2026-11-30T08:00:00")
    made = event(QUERY, "start", "me", "dev", version="v1", skipped=None)
    assert made.detail == {"version": "v1"} and made.time == normalized_time(made.time)
    with pytest.raises(ValueError):
        normalized_time("yesterday")


def test_objects_match_by_address_or_name() -> None:
    assert matches(QUERY, QUERY) and matches(QUERY, "analytics.public.counts") and matches(QUERY, "counts")
    assert not matches(QUERY, "ounts") and not matches("query.analytics.public.xcounts", "counts")


def test_selected_filters_by_time_object_and_visibility() -> None:
    log = [_at("2026-11-30T09:00:00", VIEW), _at("2026-11-30T08:00:00", QUERY), _at("2026-11-30T10:00:00", QUERY)]
    assert [e.time[11:13] for e in selected(log)] == ["08", "09", "10"]
    assert [e.time[11:13] for e in selected(log, since="2026-11-30T08:00:00")] == ["09", "10"]
    assert [e.time[11:13] for e in selected(log, object="query.analytics.public.counts")] == ["08", "10"]
    assert [e.object for e in selected(log, visible=lambda a: a.startswith("relation."))] == [VIEW]


def _state() -> State:
    query = DeployedResource(address=QUERY, data_hash="d1", metadata_hash="m", data={
        "sink": "analytics.public.counts", "sources": [["analytics.public.pageviews", "p", None]],
        "statement": "CREATE MATERIALIZED VIEW counts AS ..."},
        outputs={"version": "v2", "checkpoint": "/c2", "pid": 7})
    view = DeployedResource(address=VIEW, data_hash="d", metadata_hash="m", data={
        "kind": "materialized_view", "store": "", "topic": "t_counts", "columns": [["n", "BIGINT"]]})
    ledger = [LedgerEntry(query=QUERY, version="v1", category="new", checkpoint="/c1", started_at="t1",
                          stopped_at="t2"),
              LedgerEntry(query=QUERY, version="v2", category="in_place", checkpoint="/c2", started_at="t2")]
    return State(lineage="L", serial=3, environment="dev", resources={QUERY: query, VIEW: view}, ledger=ledger)


def test_system_tables_hold_the_state_and_the_log_and_answer_sql() -> None:
    log = [_at("2026-11-30T08:00:00", QUERY, "restart"), _at("2026-11-30T09:00:00", QUERY, "restart"),
           _at("2026-11-30T09:30:00", VIEW, "apply", action="create")]
    tables = system_tables(_state(), log)
    [query] = tables["queries"][1]
    assert dict(zip(tables["queries"][0], query, strict=True)) == {
        "address": QUERY, "name": "analytics.public.counts", "version": "v2", "category": "in_place",
        "started_at": "t2", "checkpoint": "/c2", "pid": 7, "paused": False, "sink": "analytics.public.counts",
        "sources": '["analytics.public.pageviews"]', "statement": "CREATE MATERIALIZED VIEW counts AS ...",
        "restarts": 2}
    select = adhoc.system_select("SELECT q.name, q.restarts, COUNT(*) AS n FROM sys.queries AS q JOIN sys.events AS e "
                                 "ON e.object = q.address GROUP BY q.name, q.restarts")
    assert select is not None
    assert systables.run(tables, select.sql(dialect="sqlite")) == (["name", "restarts", "n"],
                                                                   [("analytics.public.counts", 2, 2)])
    only_views = system_tables(_state(), log, visible=lambda a: a == VIEW)
    assert only_views["queries"][1] == [] and [r[0] for r in only_views["events"][1]] == [log[2].time]
    assert only_views["relations"][1][0][:5] == (VIEW, "analytics.public.counts", "materialized_view", "", "t_counts")


def test_system_selects_are_told_apart_from_view_queries() -> None:
    assert adhoc.system_select("SELECT * FROM counts") is None
    with pytest.raises(DsflowError) as unknown:
        adhoc.system_select("SELECT * FROM sys.nope")
    assert unknown.value.code == "DSF-E720"
    with pytest.raises(DsflowError) as mixed:
        adhoc.system_select("SELECT * FROM sys.events JOIN counts ON 1 = 1")
    assert mixed.value.code == "DSF-E725"


@pytest.fixture
def project(tmp_path):
    root = make_project(tmp_path, {})
    return root, LocalStateBackend(root / ".dsflow" / "state", "dev")


def test_dsflow_events_reads_the_local_log(project) -> None:
    root, backend = project
    runner = CliRunner()
    assert runner.invoke(cli, ["-C", str(root), "events"]).stdout.strip() == "No events."
    first, second = _at("2026-11-30T08:00:00", QUERY, "crash", pid=3), _at("2026-11-30T09:00:00", VIEW, action="x")
    backend.append_events([second, first])
    ran = runner.invoke(cli, ["-C", str(root), "events", "--json"])
    assert ran.exit_code == 0, ran.output
    assert [Event.model_validate_json(line) for line in ran.stdout.splitlines()] == [first, second]
    table = runner.invoke(cli, ["-C", str(root), "events"]).stdout
    assert "crash" in table and QUERY in table and "pid=3" in table
    since = runner.invoke(cli, ["-C", str(root), "events", "--json", "--since", "2026-11-30T10:00:00+02:00"])
    assert [json.loads(line)["object"] for line in since.stdout.splitlines()] == [VIEW]
    named = runner.invoke(cli, ["-C", str(root), "events", "--json", "--object", "query.analytics.public.counts"])
    assert [json.loads(line)["kind"] for line in named.stdout.splitlines()] == ["crash"]
    bad = runner.invoke(cli, ["-C", str(root), "events", "--since", "soon"])
    assert bad.exit_code == 1 and isinstance(bad.exception, DsflowError) and bad.exception.code == "DSF-E724"


def _interruptible() -> None:
    """The follower takes SIGINT even when this run was started in the background (which ignores it, and a child
    keeps an ignored SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_follow_prints_what_is_appended_until_interrupted(project) -> None:
    root, backend = project
    backend.append_events([event(QUERY, "crash", "a@h", "dev")])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    follower = subprocess.Popen([sys.executable, "-m", "dsflow.cli", "-C", str(root), "events", "--follow",
                                 "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, preexec_fn=_interruptible)
    try:
        assert follower.stdout is not None
        assert " crash query.analytics.public.counts by a@h" in follower.stdout.readline()
        late = event(VIEW, "apply", "b@h", "dev", action="create")
        backend.append_events([late])
        assert follower.stdout.readline().strip() == f"{late.time} apply {VIEW} by b@h: action=create"
        early = Event(**{**event(QUERY, "gap", "supervisor", "dev").model_dump(), "time": normalized_time(
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 5)))})
        backend.append_events([early])  # stamped before the last one printed, appended after it: still shown
        assert f" gap {QUERY} by supervisor" in follower.stdout.readline()
    finally:
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0 and out == "" and "Traceback" not in err


def test_the_supervisor_logs_new_gaps_and_dead_letter_bursts_once(tmp_path) -> None:
    from dsflow.runtime import observed
    from dsflow.runtime.records import RuntimeRecord

    emitted: list[tuple[str, dict]] = []

    def emit(kind: str, **detail) -> None:
        emitted.append((kind, detail))

    record = RuntimeRecord(address=QUERY)
    gaps = tmp_path / observed.GAP_LOG
    assert not observed.new_gaps(tmp_path, record, emit)  # no log yet
    gaps.write_text('{"topic": "t", "partition": 0, "start": 5, "end": 7}\n{"topic": "t", "partition": 1, "start": 1,'
                    ' "end": 2}\n{"topic": "t", "partition": 0, "sta')  # the last line still being written
    assert observed.new_gaps(tmp_path, record, emit) and record.gaps_seen == 2
    assert emitted == [("gap", {"gaps": 2, "offsets": 3, "first": [
        {"topic": "t", "partition": 0, "start": 5, "end": 7}, {"topic": "t", "partition": 1, "start": 1, "end": 2}]})]
    assert not observed.new_gaps(tmp_path, record, emit)
    gaps.write_text(gaps.read_text() + 'rt": 9, "end": 19}\n')
    assert observed.new_gaps(tmp_path, record, emit) and emitted[-1][1]["offsets"] == 10 and record.gaps_seen == 3
    count = len(emitted)  # a replayed micro-batch logs a gap again: read, no event
    gaps.write_text(gaps.read_text() + '{"topic": "t", "partition": 0, "start": 5, "end": 7}\n')
    assert observed.new_gaps(tmp_path, record, emit) and record.gaps_seen == 4 and len(emitted) == count

    emitted.clear()
    counts = iter([{"dlq_topic": "d", "dead_letters": 0}, {"dlq_topic": "d", "dead_letters": 4},
                   {"dlq_topic": "d", "dead_letters": 4}, {"dlq_topic": "d"}, {"dlq_topic": "d", "dead_letters": 6}])
    looks = [observed.dead_letter_burst(record, lambda: next(counts), emit, now=t) for t in (0, 10, 31, 62, 93, 124)]
    assert looks == [True, False, True, True, True, True]
    assert emitted == [("dead_letters", {"new": 4, "total": 4, "topic": "d"}),
                       ("dead_letters", {"new": 2, "total": 6, "topic": "d"})]


def test_a_gap_a_replayed_batch_logs_again_is_counted_once(tmp_path) -> None:
    """`gap_offsets` in the status: the offsets of each gap once, though a replayed micro-batch logged it twice."""
    from types import SimpleNamespace

    from dsflow.adapters.spark.driver import counted_gaps

    spec = SimpleNamespace(status_path=str(tmp_path / "status.json"))
    (tmp_path / "gaps.jsonl").write_text('{"topic": "t", "partition": 0, "start": 2, "end": 3}\n'
                                         '{"topic": "t", "partition": 1, "start": 2, "end": 3}\n'
                                         '{"topic": "t", "partition": 0, "start": 2, "end": 3}\n')
    assert counted_gaps(spec) == 2  # type: ignore[arg-type]


def test_the_supervisor_logs_rows_failing_an_expectation_once_per_look(tmp_path) -> None:
    """'expectation_failed' per rule whose failed rows grew since the last look; a restarted driver counts from 0."""
    import json

    from dsflow.runtime import observed
    from dsflow.runtime.records import RuntimeRecord

    emitted: list[tuple[str, dict]] = []
    record, status = RuntimeRecord(address=QUERY), tmp_path / observed.STATUS_FILE

    def look(rules: dict) -> bool:
        status.write_text(json.dumps({"state": "running", "expectations": rules}))
        return observed.failed_rows(tmp_path, record, lambda kind, **detail: emitted.append((kind, detail)))

    assert not observed.failed_rows(tmp_path, record, lambda *a, **k: None)  # no status file yet
    assert not look({"positive": {"action": "warn", "passed": 5, "failed": 0}})
    assert look({"positive": {"action": "warn", "passed": 8, "failed": 2}, "known": {"action": "drop", "failed": 1,
                                                                                   "passed": 9}})
    assert not look({"positive": {"action": "warn", "passed": 9, "failed": 2}, "known": {"action": "drop",
                                                                                       "failed": 1, "passed": 10}})
    assert look({"positive": {"action": "warn", "passed": 1, "failed": 1}})  # a new driver: its 1 is new
    assert emitted == [
        ("expectation_failed", {"rule": "known", "action": "drop", "new": 1, "failed": 1, "passed": 9}),
        ("expectation_failed", {"rule": "positive", "action": "warn", "new": 2, "failed": 2, "passed": 8}),
        ("expectation_failed", {"rule": "positive", "action": "warn", "new": 1, "failed": 1, "passed": 1})]
