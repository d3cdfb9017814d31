"""kill -9 mid-stream of every published Nexmark query that runs in dsflow (issue 46, item 1): the queries of
test_nexmark_published.py's RUNS (so a query added there is covered here without an edit), each as its adapted
file, all in ONE shared Spark application (`runtime.isolation: shared`: one host process to kill), their stream
sinks exactly-once (`runtime.delivery_guarantee: exactly-once`: an INSERT INTO has no WITH clause; each write
task's records and the micro-batch id in one Kafka transaction), on the session's broker.

The first KILL_EVENTS // 2 generated events (the same generator, renaming and prices as test_nexmark_published.py)
are in the topics before `dsflow apply` starts the application; the moment every query has planned its first
micro-batch over them (its checkpoint's `offsets/0`: the host starts them one after the other, so the first have
committed theirs, `commits/0`, and the last are in it), the host is killed with SIGKILL. The rest of
the events are produced while it is dead; apply sees the dead queries (drift) and starts them again on their
checkpoints. Then every query's sink must equal DuckDB running the published SELECT over all the events: a
stream's records as a multiset (read with read_committed: a record written twice, or lost, fails it), a changelog's
last record per key.

Each part is produced whole while no query runs (before the first apply; while the host is dead): a micro-batch
reads the part entirely or not at all, so the event-time queries (q8's windows, q11's sessions) never see one
partition's records ahead of the other's and drop the late ones, which a live feed could make happen whatever the
engine. Records arriving after their match in a later micro-batch: tests/integration/test_sql_joins.py.

KILL_EVENTS is 2,000, not test_nexmark_published.py's 4,000: q23's three-way join makes 104,013 rows of 2,000 events
(415,357 of 4,000); q2, q3 and q8 each select one row of them.

The processing-time queries (PROCESSING: q12, q13) run in the same application and are killed with the others. q13's
side input is produced before the first apply and not changed: every bid joins the same row of its key, so its sink
must hold DuckDB's join of all the bids with it. q12's windows are of the processing time of the micro-batch that
reads each bid (a bid replayed after the kill may fall in a later window than the killed batch would have put it in),
so what is compared is what stays true: per bidder, the bid_count of its closed windows adds up to its bids, and
every window is 10 seconds long and aligned. A window closes when a micro-batch starts after its end: flush bids
(FLUSH_BIDDER, left out of the counts) are produced, a window apart, after the other queries are checked.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections import Counter
from pathlib import Path

import pytest
from test_nexmark_published import (
    CHANGELOGS, FLUSH_BIDDER, PROCESSING_TIME_COUNTS, RUNS, SIDE_JOIN, TIMES, WINDOW_MS, _after_window_of, _bid_table,
    _iso, _project_files, _rows, _side_input, _side_rows, _side_table, duckdb_rows, duckdb_tables, dsflow_rows, events,
    stored,
)

from dsflow.adapters import process
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.client import read_to_end
from dsflow.adapters.spark import apps
from dsflow.engine import operations
from dsflow.load.project import load_project
from support.brokers import kafka_only
from support.projects import make_project
from support.streaming import CONFIG, latest_by_key, produce, topic
from support.waiting import wait_for

pytestmark = [pytest.mark.integration, kafka_only]

KILL_EVENTS = 2_000
PROCESSING = ("q12", "q13")
KILLED = RUNS + PROCESSING
SHARED = CONFIG.replace("  trigger_interval: 1 second\n", "  trigger_interval: 1 second\n  isolation: shared\n"
                        f"  queries_per_app: {len(KILLED) + 10}\n  delivery_guarantee: exactly-once\n")
WAIT = 300


def _split(count: int) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """events(count) cut in two at event count // 2: the first part's rows of each kind, then the rest's."""
    first, every = events(count // 2), events(count)
    return first, {kind: rows[len(first[kind]):] for kind, rows in every.items()}


def _produce(broker: str, project, part: dict[str, list[dict]]) -> None:
    for kind, rows in part.items():
        key = "auction" if kind == "bid" else "id"
        produce(broker, project, kind, [{**r, **{t: _iso(r[t]) for t in TIMES if t in r}} for r in rows], key=key)


def _sink_rows(broker: str, project, name: str) -> list[tuple]:
    """A stream's records read with read_committed (records of aborted transactions skipped, their offsets and the
    transaction markers counted as gaps), or a changelog's last record per key, as rows of the sink's columns."""
    if name in CHANGELOGS:
        return dsflow_rows(broker, project, name)
    sink = next(r for r in project.relations if r.name == f"nexmark_{name}")
    found = read_to_end(broker, topic(project, sink.name), allow_gaps=True)
    return _rows(sink, (json.loads(record["value"]) for record in found))


def _equal(got: list[tuple], expected: list[tuple], name: str) -> bool:
    if name not in CHANGELOGS:
        return Counter(got) == Counter(expected)
    places = CHANGELOGS[name]
    keyed = {tuple(row[i] for i in places): row for row in got}
    return len(keyed) == len(got) and keyed == {tuple(row[i] for i in places): row for row in expected}


def _written(broker: str, project, address: str) -> bool:
    """The query's sink topic holds records or transaction markers (its high watermark, read_uncommitted)."""
    from dsflow.adapters.kafka import client

    relation = project.relation(next(q.sink for q in project.queries if f"query.{q.fqn}" == address))
    with client.consumer(client.client_config(broker)) as c:
        return sum(client.end_offsets(c, relation.topic, client.topic_partitions(c, relation.topic)).values()) > 0


def _committed(checkpoint: str, batch: int = 0) -> bool:
    return (Path(checkpoint) / "commits" / str(batch)).is_file()


def test_every_published_query_killed_mid_stream_equals_duckdb(tmp_path, broker):
    sources, files = _project_files(KILLED)
    root = make_project(tmp_path, {"dsflow.yml": SHARED.format(prefix=f"nxk{uuid.uuid4().hex[:6]}_"),
                                   "sql/all.sql": sources, **files})
    options = operations.Options(root, None, {"bootstrap": broker})
    project = load_project(root, variables={"bootstrap": broker})
    for relation in project.relations:
        ensure_topic(broker, TopicSpec(relation.topic, relation.partitions, 1, {}))
    first, rest = _split(KILL_EVENTS)
    _produce(broker, project, first)
    side = _side_of(first["bid"] + rest["bid"])
    _side_input(broker, project, side)
    loaded = operations.load(options)
    try:  # a first apply that fails part way is torn down too
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _kill_and_resume(options, project, broker, rest)
        every = {kind: first[kind] + rest[kind] for kind in first}
        _check(broker, project, every)
        _check_q13(broker, project, every["bid"], side)
        _check_q12(broker, project, every["bid"])
    finally:
        _stop_hosts(options)


def _stop_hosts(options) -> None:
    """Stop the host apply started last, by the PID and identity its state records (a destroy plan took ~16 s; the
    topics stay on the run's broker, as other tests' do)."""
    resources = operations.load(options).workspace.state_backend().read().resources.values()
    for pid, app_dir in {(r.outputs["pid"], r.outputs["app_dir"]) for r in resources if "app_dir" in r.outputs}:
        process.stop(pid, apps.host_identity(app_dir), timeout=10)


def _kill_and_resume(options, project, broker: str, rest: dict[str, list[dict]]) -> None:
    """SIGKILL the one host once every query has planned its first micro-batch (over the first part; the host
    starts them one after the other, so the first have committed theirs and the last are in it), produce `rest`,
    apply again: every query restarts on its checkpoint."""
    state = operations.load(options).workspace.state_backend().read()
    queries = {f"query.{q.fqn}": state.resources[f"query.{q.fqn}"].outputs for q in project.queries}
    assert len(queries) == len(KILLED)
    [pid] = {outputs["pid"] for outputs in queries.values()}  # one shared application runs them all
    checkpoints = {address: outputs["checkpoint"] for address, outputs in queries.items()}
    wait_for(lambda: all((Path(c) / "offsets" / "0").is_file() for c in checkpoints.values()), WAIT,
             "every query's first micro-batch planned", interval=0.05)
    os.kill(pid, signal.SIGKILL)
    identity = apps.host_identity(next(iter(queries.values()))["app_dir"])
    wait_for(lambda: not process.is_running(pid, identity), 30, "the host to die")
    done = sorted(a for a, c in checkpoints.items() if _committed(c))
    started = sorted(a for a, c in checkpoints.items() if (Path(c) / "offsets" / "0").is_file() and not _committed(c))
    written = [a for a in started if _written(broker, project, a)]
    print(f"killed with {len(done)} of {len(checkpoints)} queries past their first batch, {len(started)} in it "
          f"({len(written)} with records in their sink's log, written or being written before the kill: a replay "
          f"must not write them again): {started}")
    assert started, "the kill came while the first part was processed partly: some first batch not committed"

    _produce(broker, project, rest)
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert sorted(c.address for c in plan.actionable if c.drift) == sorted(queries)
    assert operations.apply(loaded, plan).ok
    state = operations.load(options).workspace.state_backend().read()
    assert {a: state.resources[a].outputs["checkpoint"] for a in queries} == checkpoints, "the same checkpoints"


def _check(broker: str, project, data: dict[str, list[dict]]) -> None:
    """Every query's sink equals DuckDB over all the events (the biggest, q23, last)."""
    reference = duckdb_tables(data)
    names = sorted(RUNS, key=lambda name: name == "q23")
    for name in names:
        sink = next(r for r in project.relations if r.name == f"nexmark_{name}")
        expected = [stored(sink, row) for row in duckdb_rows(reference, name)]
        assert expected, f"{name}: the reference is empty, the comparison would prove nothing"
        try:
            wait_for(lambda name=name, expected=expected: _equal(_sink_rows(broker, project, name), expected, name),
                     WAIT, f"{name} to equal DuckDB over every event", interval=1)
        except AssertionError:
            got = Counter(_sink_rows(broker, project, name))
            missing, extra = Counter(expected) - got, got - Counter(expected)
            raise AssertionError(f"{name}: {sum(missing.values())} rows missing (first {list(missing)[:3]}), "
                                 f"{sum(extra.values())} not expected (first {list(extra)[:3]})") from None


def _side_of(bids: list[dict]) -> list[tuple[int, str | None]]:
    """q13's side input: a row for two keys of three of the bids' `mod(auction, 10000)`; the others join nothing."""
    return [(k, f"value-{k}") for k in sorted({b["auction"] % 10_000 for b in bids}) if k % 3]


def _check_q13(broker: str, project, bids: list[dict], side: list[tuple[int, str | None]]) -> None:
    """q13's sink holds each bid joined with the side input's row of its key, once (DuckDB's join)."""
    con = _bid_table(bids)
    con.execute("CREATE TABLE side_input (key BIGINT, value VARCHAR)")
    con.executemany("INSERT INTO side_input VALUES (?, ?)", list(_side_table(side).items()))
    expected = _side_rows(con.execute(SIDE_JOIN).fetchall())
    assert expected, "q13: the reference is empty, the comparison would prove nothing"
    wait_for(lambda: Counter(_sink_rows(broker, project, "q13")) == expected, WAIT,
             "q13 to equal DuckDB's join of every bid with the side input", interval=1)


def _check_q12(broker: str, project, bids: list[dict]) -> None:
    """Per bidder, q12's closed windows count its bids (DuckDB), each window 10 s long and aligned; flush bids, a
    window apart, close the windows the bids are in."""
    import time

    expected = Counter(dict(_bid_table(bids).execute(PROCESSING_TIME_COUNTS).fetchall()))
    flush = {**bids[0], "bidder": FLUSH_BIDDER, "dateTime": _iso(bids[0]["dateTime"])}

    def counted() -> Counter:
        sink = next(r for r in project.relations if r.name == "nexmark_q12")
        rows = _rows(sink, latest_by_key(broker, project, sink.name).values())
        assert all(end - start == WINDOW_MS and start % WINDOW_MS == 0 for _, _, start, end in rows), rows
        found: Counter = Counter()
        for bidder, count, _, _ in rows:
            if bidder != FLUSH_BIDDER:
                found[bidder] += count
        return found

    for attempt in range(6):
        _after_window_of(time.time() * 1000)
        produce(broker, project, "bid", [flush], key="auction")
        try:
            wait_for(lambda: counted() == expected, 20, "q12's windows to count every bid", interval=1)
            return
        except AssertionError:
            if attempt == 5:
                raise
