"""The runtime supervisor (dsflow/runtime) against real drivers on the test broker.

One project, two queries, `runtime.standby: false`. `id_counts` counts each id (a changelog: exactly once through
its checkpoint); its driver is killed with SIGKILL while records keep arriving, and the supervisor must restart it
cold from its checkpoint (a new PID, recorded in the state) so that every id produced before and after the kill is
counted exactly once. `copy`'s recorded spec is made unreadable and its driver killed: every restart fails (fast:
before Spark starts), and `dsflow status --json` must show a crash loop (growing restarts, the last error, a next
retry). The metrics endpoint is scraped once; two malformed records, written in a transaction, make one dead-letter
event and one gap event (the commit marker's offset) by the supervisor; ids from 2,500 fail an expectation (WARN),
which the supervisor logs too.
Destroy, with the supervisor still up, must not be undone by it.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest
from click.testing import CliRunner

from dsflow.cli import cli
from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.kafka.client import read_to_end
from dsflow.engine.executors import query_identity
from dsflow.runtime import control
from dsflow.runtime.records import backoff
from support.identities import running as running_processes
from support.projects import make_project
from support.streaming import CONFIG, latest_by_key, produce, topic
from support.waiting import wait_for

SQL = """\
CREATE STREAM events (id BIGINT, ts BIGINT)
  WITH ('value.format' = 'json', 'topic.partitions' = 2, 'topic.gaps' = 'count');

CREATE CHANGELOG id_counts WITH ('trigger.interval' = '500 ms')
  CONSTRAINT early EXPECT (id < 2500) ON VIOLATION WARN
  AS SELECT id, COUNT(*) AS n FROM events GROUP BY id;
CREATE STREAM copy WITH ('trigger.interval' = '500 ms') AS SELECT id, ts FROM events;
"""
COUNTS = "query.analytics.public.id_counts"
BROKEN = "query.analytics.public.copy"


def test_backoff_doubles_from_one_second_and_is_capped():
    assert [backoff(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]


def _events(first: int, count: int) -> list[dict]:
    return [{"id": i, "ts": 1_700_000_000_000 + i} for i in range(first, first + count)]


def _state(options):
    return operations.load(options).workspace.state_backend().read()


def _in_a_transaction(broker: str, log: str, values: list[bytes]) -> None:
    """Produced to partition 0 in one committed transaction: its commit marker takes an offset that holds no
    record, a gap the queries count ('topic.gaps' = 'count')."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker, "transactional.id": f"rt-{os.getpid()}-{log}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(log, value, partition=0)
    producer.commit_transaction(30)


def _state_events(options):
    return operations.load(options).workspace.state_backend().read_events()


def _status(root, broker) -> dict[str, dict]:
    """`dsflow status --json`, run in this process through click (a new interpreter per poll cost ~1.5 s of CPU)."""
    done = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "status", "--json"])
    assert done.exit_code == 0, (done.output, done.exception)
    return {e["address"]: e for e in json.loads(done.stdout)}


def _counts(broker, project) -> dict[int, int]:
    return {v["id"]: v["n"] for v in latest_by_key(broker, project, "id_counts").values()}


@pytest.mark.integration
def test_supervisor_restarts_a_killed_driver_and_shows_a_crash_loop(tmp_path, broker):
    config = CONFIG.format(prefix=f"rt{os.getpid()}_").replace("runtime:\n", "runtime:\n  standby: false\n")
    root = make_project(tmp_path, {"dsflow.yml": config, "sql/all.sql": SQL})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    try:  # a first apply that fails part way is torn down too
        assert operations.apply(loaded, operations.plan(loaded)).ok
        found, started = control.up(loaded, options)
        again, started_again = control.up(loaded, options)
        assert started and not started_again and again["pid"] == found["pid"]  # one supervisor per environment
        _run(root, options, loaded.project, broker, found)
        _destroy_is_not_undone(root, options)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
        control.down(loaded)
        assert control.info(loaded) is None


def _destroy_is_not_undone(root, options) -> None:
    """Destroy with the supervisor up: after three more looks, no driver of the project runs again."""
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    ticks = control.info(loaded)["ticks"]
    wait_for(lambda: (control.info(loaded) or {}).get("ticks", 0) >= ticks + 3, 120, "three more looks")
    assert not _state(options).resources
    assert running_processes(root, "driver") == []


def _run(root, options, project, broker, supervisor) -> None:
    _in_a_transaction(broker, topic(project, "events"), [b"not json", b"{cut"])  # dead letters and a gap
    produce(broker, project, "events", _events(0, 1_000))
    wait_for(lambda: len(_counts(broker, project)) == 1_000, 300, "the first counts")
    state = _state(options)
    old_pid, identity = state.resources[COUNTS].outputs["pid"], query_identity(state.resources[COUNTS].outputs)
    broken_pid = state.resources[BROKEN].outputs["pid"]
    spec = os.path.join(state.resources[BROKEN].outputs["run_dir"], "spec.json")

    produce(broker, project, "events", _events(1_000, 1_000))
    with open(spec, "w") as broken:
        broken.write("{not json")  # every start of `copy` now fails reading its spec
    os.kill(old_pid, signal.SIGKILL)
    os.kill(broken_pid, signal.SIGKILL)
    wait_for(lambda: not process.is_running(old_pid, identity), 30, "the driver to die")
    produce(broker, project, "events", _events(2_000, 1_000))

    new_pid = wait_for(lambda: (p := _state(options).resources[COUNTS].outputs["pid"]) != old_pid and p, 300,
                       "the supervisor to restart id_counts")
    assert process.is_running(new_pid, identity)
    wait_for(lambda: len(_counts(broker, project)) == 3_000, 300, "every id counted after the restart")
    counts = _counts(broker, project)
    assert set(counts) == set(range(3_000))
    assert {n for n in counts.values()} == {1}, "an id counted twice or not at all"

    # The status is written every 2 s from the last progress Spark reported, the lag measured every 5 s: one CI
    # run read lag 0 beside 1,000 state rows while all 3,000 counts were out. What must hold is that the status
    # comes to show both, the caught-up lag and one state row per id counted (its group); it fails if it never does.
    lagged = wait_for(lambda: (e := _status(root, broker)[COUNTS]).get("lag_records") == 0
                      and e.get("state_rows") == len(counts) and e, 120,
                      "the lag to come down to 0 and the state to hold one row per id counted")
    assert lagged["state_bytes"] > 0 and lagged["last_batch_duration_ms"] > 0
    events = f"{project.topic_prefix}events"
    assert list(lagged["lag"]) == [events] and set(lagged["lag"][events]) == {"0", "1"}
    entries = _status(root, broker)
    restarted = entries[COUNTS]
    assert restarted["state"] == "running" and restarted["pid"] == new_pid
    assert restarted["restarts"] == 1 and restarted["last_exit"].startswith("gone without recording a failure")
    assert restarted["last_error"] is None  # a SIGKILL leaves none
    assert restarted["last_restart"] == "cold start" and restarted["standby"] is None  # `standby: false`
    assert restarted["uptime_seconds"] is not None

    first = wait_for(lambda: (e := _status(root, broker)[BROKEN])["restarts"] >= 2 and e["last_error"] and e,
                     600, "copy to fail after restarts")
    again = wait_for(lambda: (e := _status(root, broker)[BROKEN])["restarts"] > first["restarts"] and e, 600,
                     "copy's restarts to grow")
    # 'crash_loop' also shows while the next attempt starts (no retry pending then): wait for it between tries
    looping = wait_for(lambda: (e := _status(root, broker)[BROKEN])["state"] == "crash_loop" and e["next_retry"]
                       and e, 600, "copy to show a crash loop with its next retry")
    assert again["restarts"] >= 3 and looping["next_retry"] and looping["last_error"]
    assert looping["last_exit"] == "exit code 1" and "ValidationError" in looping["last_error"], looping

    with urllib.request.urlopen(f"http://127.0.0.1:{supervisor['port']}/metrics", timeout=30) as response:
        text = response.read().decode()
    for name in ("dsflow_query_up", "dsflow_query_state", "dsflow_query_uptime_seconds",
                 "dsflow_query_restarts_total", "dsflow_query_last_error_info", "dsflow_query_input_rows_per_second"):
        samples = [line for line in text.splitlines() if line.startswith(name + "{")]
        assert any('query="analytics.public.' in line for line in samples), (name, text)
    assert 'dsflow_query_up{query="analytics.public.id_counts"} 1.0' in text
    assert 'dsflow_query_lag_records{query="analytics.public.id_counts"} 0.0' in text
    assert f'dsflow_query_state_rows{{query="analytics.public.id_counts"}} {float(len(counts))}' in text
    durations = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith('dsflow_query_last_batch_duration_seconds{query="analytics.public.id_counts"}')]
    assert len(durations) == 1 and 0 < durations[0] < 600
    assert (f'dsflow_query_partition_lag_records{{partition="1",query="analytics.public.id_counts",'
            f'topic="{project.topic_prefix}events"}} 0.0') in text
    assert 'dsflow_query_restarts_total{query="analytics.public.id_counts"} 1.0' in text
    assert 'dsflow_query_last_error_info{error="pydantic_core._pydantic_core.ValidationError' in text
    # the transaction: one dead-letter event for id_counts (looked for every 30 s: by now at least once), one gap
    burst = wait_for(lambda: [e for e in _state_events(options) if e.kind == "dead_letters" and e.object == COUNTS],
                     120, "the supervisor's event for id_counts' dead letters")
    # dead letters are written at least once: the batch the kill cut short may have written them again
    held = read_to_end(broker, restarted["dlq_topic"])
    assert {r["value"] for r in held} == {"not json", "{cut"} and len(held) in (2, 4)
    assert all(e.actor == "supervisor" and e.detail["topic"] == restarted["dlq_topic"] for e in burst)
    assert sum(e.detail["new"] for e in burst) == burst[-1].detail["total"] <= len(held)
    # ids 2,500 to 2,999 (all produced after the kill) fail 'early': events by the supervisor, as the driver counts
    entry = _status(root, broker)[COUNTS]
    failing = [e for e in _state_events(options) if e.kind == "expectation_failed" and e.object == COUNTS]
    assert entry["expectations"]["early"]["failed"] >= 500 and {e.detail["rule"] for e in failing} == {"early"}
    assert sum(e.detail["new"] for e in failing) == failing[-1].detail["failed"] <= entry["expectations"]["early"][
        "failed"]
    gaps = [e for e in _state_events(options) if e.kind == "gap" and e.object == COUNTS]
    assert len(gaps) == 1 and gaps[0].detail["offsets"] == 1 and gaps[0].actor == "supervisor", gaps  # the marker
    _events_say_what_the_supervisor_did(options, old_pid, new_pid, again["restarts"])


def _events_say_what_the_supervisor_did(options, old_pid: int, new_pid: int, broken_restarts: int) -> None:
    """The event log (issue 42 item 6): the kill as a crash and the cold restart, by the supervisor, as status says
    them; `copy`'s crash loop as a crash with its error before each restart."""
    from dsflow.engine import eventlog

    backend = operations.load(options).workspace.state_backend()
    by_supervisor = [e for e in eventlog.read(backend) if e.actor == eventlog.SUPERVISOR]
    counts = [(e.kind, e.detail) for e in by_supervisor if e.object == COUNTS and e.kind in ("crash", "restart")]
    assert [kind for kind, _ in counts] == ["crash", "restart"], counts
    assert counts[0][1]["pid"] == old_pid and counts[0][1]["exit"].startswith("gone without recording a failure")
    assert counts[1][1] == {"pid": new_pid, "restarts": 1, "how": "cold start"}
    broken = [(e.kind, e.detail) for e in by_supervisor if e.object == BROKEN and e.kind in ("crash", "restart")]
    kinds = [kind for kind, _ in broken]
    assert kinds[:2] == ["crash", "restart"] and kinds.count("restart") >= broken_restarts
    assert all(a != b for a, b in zip(kinds, kinds[1:], strict=False)), "a crash, then its restart, in turn"
    assert any(d.get("exit") == "exit code 1" and "ValidationError" in d.get("error", "") for k, d in broken
               if k == "crash")
