"""Shared Spark applications (`runtime.isolation: shared`, adapters/spark/host.py) on the test broker.

Three stateless queries of a project in shared mode run in ONE host process. An apply that replaces one query
and adds another leaves the others' Spark runs alone (same run ids and start times) and their output complete
and without duplicates (counted by id). A poison record makes one query fail inside the host: the supervisor
restarts that query alone in its application (its restarts recorded), the others keep their run ids and go on.
kill -9 of the host brings every query back on a new host, with no id lost. `dsflow status --json` shows each
query's application and its own state.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.spark import apps
from dsflow.runtime import control
from dsflow.runtime.records import read_record
from support.identities import running as running_processes
from support.projects import make_project
from support.streaming import CONFIG, produce, records
from support.waiting import wait_for

SHARED = CONFIG.replace("  trigger_interval: 1 second\n", "  trigger_interval: 1 second\n  isolation: shared\n")
INPUTS = """\
CREATE STREAM a_in (id BIGINT, v BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE STREAM b_in (id BIGINT, v BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE STREAM c_in (id BIGINT, v BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 1);
"""
FIRST = INPUTS + """\
CREATE STREAM a_out WITH ('trigger.interval' = '500 ms') AS SELECT id, v FROM a_in WHERE v >= 0;
CREATE STREAM b_out WITH ('trigger.interval' = '500 ms') AS SELECT id, v * 2 AS w FROM b_in;
CREATE STREAM c_out WITH ('trigger.interval' = '500 ms') AS SELECT id, 100 / v AS q FROM c_in;
"""
SECOND = FIRST.replace("v * 2 AS w FROM b_in", "v * 3 AS w FROM b_in WHERE v >= 0") + """\
CREATE STREAM d_out WITH ('trigger.interval' = '500 ms') AS SELECT id, v FROM a_in;
"""
Q = "query.analytics.public."
WAIT = 300
"""Seconds to wait for a host or a query: generous, a Spark start took 90 s on this machine at load 20+."""


def _rows(first: int, count: int) -> list[dict]:
    return [{"id": i, "v": 1 + i % 7} for i in range(first, first + count)]


def _ids(project, name: str) -> list[int]:
    return [json.loads(r["value"])["id"] for r in records(_BROKER[0], project, name)]


def _exactly(project, name: str, expected: range) -> bool:
    found = _ids(project, name)
    return sorted(found) == list(expected)


def _hosted(state, name: str) -> dict:
    outputs = state.resources[Q + name].outputs
    return apps.reported(Path(outputs["app_dir"])).get(outputs["app_query"], {})


_BROKER: list[str] = []


@pytest.mark.integration
def test_queries_share_one_application_and_fail_and_come_back_alone(tmp_path, broker, monkeypatch):
    _BROKER[:] = [broker]
    monkeypatch.setenv("DSFLOW_RUNTIME_TICK", "0.2")
    root = make_project(tmp_path, {"dsflow.yml": SHARED.format(prefix=f"sh{os.getpid()}_"), "sql/all.sql": FIRST})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    try:  # a first apply that fails part way is torn down too
        assert operations.apply(loaded, operations.plan(loaded)).ok
        control.up(loaded, options)
        project = loaded.project
        pid = _one_host(options, ["a_out", "b_out", "c_out"])
        for name in ("a_in", "b_in", "c_in"):
            produce(broker, project, name, _rows(0, 200))
        wait_for(lambda: all(_exactly(project, n, range(200)) for n in ("a_out", "b_out", "c_out")), WAIT,
                 "the first outputs")
        _replace_and_add(root, options, pid)
        project = operations.load(options).project  # d_out added
        _fail_one(options, project)
        _kill_the_host(options, project, pid)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
        control.down(loaded)
    assert running_processes(root, "host") == []


def _one_host(options, names: list[str]) -> int:
    """Every query of the state records the same PID, a live host's; nothing else runs for the project."""
    state = operations.load(options).workspace.state_backend().read()
    pids = {state.resources[Q + n].outputs["pid"] for n in names}
    assert len(pids) == 1 and {state.resources[Q + n].outputs["app"] for n in names} == {"app-1"}
    pid = pids.pop()
    assert process.is_running(pid, apps.host_identity(state.resources[Q + names[0]].outputs["app_dir"]))
    wait_for(lambda: all(_hosted(state, n).get("state") == "running" for n in names), WAIT, "the queries to run")
    return pid


def _replace_and_add(root: Path, options, pid: int) -> None:
    state = operations.load(options).workspace.state_backend().read()
    before = {n: _hosted(state, n) for n in ("a_out", "c_out")}
    old_b = _hosted(state, "b_out")["run_id"]
    (root / "sql" / "all.sql").write_text(SECOND)
    loaded = operations.load(options)
    project = loaded.project
    assert operations.apply(loaded, operations.plan(loaded)).ok
    state = loaded.workspace.state_backend().read()
    assert {state.resources[Q + n].outputs["pid"] for n in ("a_out", "b_out", "c_out", "d_out")} == {pid}
    produce(_BROKER[0], project, "a_in", _rows(200, 300))
    produce(_BROKER[0], project, "b_in", _rows(200, 300))
    wait_for(lambda: _exactly(project, "d_out", range(500)), WAIT, "the added query's output")
    wait_for(lambda: _exactly(project, "a_out", range(500)), WAIT, "a_out: every id once")
    wait_for(lambda: sorted(set(_ids(project, "b_out"))) == list(range(500)), WAIT, "b_out after its replacement")
    after = {n: _hosted(state, n) for n in ("a_out", "c_out")}
    for name in ("a_out", "c_out"):
        assert (after[name]["run_id"], after[name]["started_at"]) == (before[name]["run_id"],
                                                                      before[name]["started_at"]), name
    assert _hosted(state, "b_out")["run_id"] != old_b


def _fail_one(options, project) -> None:
    """A poison record (v = 0: division by zero under ANSI SQL) fails c_out inside the host."""
    loaded = operations.load(options)
    state = loaded.workspace.state_backend().read()
    run_a = _hosted(state, "a_out")["run_id"]
    produce(_BROKER[0], project, "c_in", [{"id": 999_999, "v": 0}])
    run_dir = Path(state.resources[Q + "c_out"].outputs["run_dir"])
    record = wait_for(lambda: (r := read_record(run_dir)) and r.restarts >= 1 and r, WAIT, "c_out restarted")
    assert "shared application app-1" in record.last_exit and "DIVIDE_BY_ZERO" in (record.last_error or "")
    produce(_BROKER[0], project, "a_in", _rows(500, 100))
    wait_for(lambda: _exactly(project, "a_out", range(600)), WAIT, "a_out goes on while c_out fails")
    assert _hosted(state, "a_out")["run_id"] == run_a

    def status():
        return {e["address"]: e for e in operations.status(loaded, with_dead_letters=False)}
    found = wait_for(lambda: (s := status())[Q + "c_out"]["state"] == "crash_loop" and s, WAIT,
                     "c_out in a crash loop: three failures in a row, each restarted in its host")
    assert {found[Q + n]["app"] for n in ("a_out", "b_out", "c_out", "d_out")} == {"app-1"}
    assert {found[Q + n]["state"] for n in ("a_out", "b_out", "d_out")} == {"running"}
    assert found[Q + "d_out"]["uptime_seconds"] < found[Q + "a_out"]["uptime_seconds"]  # its own, not the host's
    assert found[Q + "c_out"]["restarts"] >= 2 and "DIVIDE_BY_ZERO" in found[Q + "c_out"]["last_error"]
    assert _hosted(state, "a_out")["run_id"] == run_a


def _kill_the_host(options, project, pid: int) -> None:
    import psutil

    jvms = [c for c in psutil.Process(pid).children(recursive=True) if "java" in c.name()]
    assert jvms, "the host runs its Spark JVM as a child"
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs(jvms, timeout=60)
    assert not any(j.is_running() and j.status() != psutil.STATUS_ZOMBIE for j in jvms), "the JVM outlived its host"
    produce(_BROKER[0], project, "a_in", _rows(600, 100))
    produce(_BROKER[0], project, "b_in", _rows(500, 200))

    def back():
        state = operations.load(options).workspace.state_backend().read()
        pids = {state.resources[Q + n].outputs["pid"] for n in ("a_out", "b_out", "d_out")}
        return len(pids) == 1 and pid not in pids and all(_hosted(state, n).get("state") == "running"
                                                         for n in ("a_out", "b_out", "d_out"))
    wait_for(back, WAIT, "every query back on a new host")
    wait_for(lambda: sorted(set(_ids(project, "a_out"))) == list(range(700)), WAIT, "a_out: no id lost")
    wait_for(lambda: sorted(set(_ids(project, "d_out"))) == list(range(700)), WAIT, "d_out: no id lost")
    wait_for(lambda: sorted(set(_ids(project, "b_out"))) == list(range(700)), WAIT, "b_out: no id lost")


def test_a_query_is_placed_in_the_first_application_with_room_and_the_same_conf(tmp_path):
    root = tmp_path / "apps"
    placed = []
    for i in range(5):
        folder = apps.place(root, f"q{i}", "local[2]", {}, limit=2)
        apps.write_json(folder / apps.QUERIES_FILE, {"queries": {**apps.desired(folder), f"q{i}": {"generation": 1}}})
        placed.append(folder.name)
    assert placed == ["app-1", "app-1", "app-2", "app-2", "app-3"]
    assert apps.place(root, "q3", "local[2]", {}, limit=2).name == "app-2"  # where it is listed already
    assert apps.place(root, "other", "local[2]", {"spark.sql.shuffle.partitions": "4"}, limit=2).name == "app-4"


def test_a_shared_application_caps_its_idle_python_workers_unless_the_project_says_otherwise():
    from dsflow.adapters.spark.host import app_conf

    cap = "spark.python.factory.idleWorkerMaxPoolSize"
    assert app_conf({"spark_conf": {"spark.sql.shuffle.partitions": "4"}}) == {
        cap: "4", "spark.sql.shuffle.partitions": "4", "spark.scheduler.mode": "FAIR"}
    assert app_conf({"spark_conf": {cap: "16", "spark.scheduler.mode": "FIFO"}}) == {
        cap: "16", "spark.scheduler.mode": "FAIR"}  # FAIR: each query's pool needs it


def test_an_application_takes_the_projects_bound_on_batches_at_once(tmp_path, monkeypatch):
    from dsflow.adapters.spark.host import BATCHES_PER_CORE, batches_at_once
    from dsflow.load.project import load_project

    config = SHARED.format(prefix="x_").replace("  isolation: shared\n", "  isolation: shared\n  batches_at_once: 3\n")
    project = load_project(make_project(tmp_path, {"dsflow.yml": config, "sql/all.sql": FIRST}))
    folder = apps.place(tmp_path / "apps", "q", "local[2]", {}, 10, project.runtime.batches_at_once)
    assert batches_at_once(apps.read_json(folder / "app.json")) == 3
    assert apps.place(tmp_path / "apps", "q", "local[2]", {}, 10, 0) == folder  # the same application, told again
    assert batches_at_once(apps.read_json(folder / "app.json")) == 0
    apps.place(tmp_path / "apps", "q", "local[2]", {}, 10, None)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert batches_at_once(apps.read_json(folder / "app.json")) == BATCHES_PER_CORE * 6


def test_a_failure_counts_only_for_the_generation_the_host_ran(tmp_path):
    folder = apps.place(tmp_path / "apps", "q", "local[2]", {}, limit=10)
    apps.write_json(folder / apps.QUERIES_FILE, {"queries": {"q": {"spec": "s", "generation": 1}}})
    apps.write_json(folder / apps.HOST_FILE, {"queries": {"q": {"generation": 1, "state": "failed", "error": "boom"}}})
    assert apps.failure(folder, "q") == "boom"
    assert apps.restart(folder, "q") and apps.desired(folder)["q"]["generation"] == 2
    assert apps.failure(folder, "q") is None  # asked to restart: the host has not run generation 2 yet
    assert not apps.restart(folder, "gone")


def test_isolation_is_read_from_the_project_and_each_query(tmp_path):
    from dsflow.core.resources import project_resources
    from dsflow.errors import DsflowError
    from dsflow.load.project import load_project

    sql = FIRST.replace("AS SELECT id, v * 2", "WITH ('runtime.isolation' = 'query') AS SELECT id, v * 2")
    root = make_project(tmp_path, {"dsflow.yml": SHARED.format(prefix="x_"), "sql/all.sql": sql})
    project = load_project(root)
    assert project.runtime.isolation == "shared" and project.runtime.queries_per_app == 10
    isolation = {q.fqn.rsplit(".", 1)[-1]: apps.isolation(project, q) for q in project.queries}
    assert isolation == {"a_out": "shared", "b_out": "query", "c_out": "shared"}
    metadata = {str(r.address): r.metadata for r in project_resources(project)}
    assert metadata[Q + "a_out"]["isolation"] == "shared" and "isolation" not in metadata[Q + "b_out"]
    (root / "sql" / "all.sql").write_text(sql.replace("'runtime.isolation' = 'query'", "'runtime.isolation' = 'x'"))
    with pytest.raises(DsflowError) as raised:
        load_project(root)
    assert "DSF-E280" in str(raised.value)


GATED = INPUTS + """\
CREATE STREAM a_out WITH ('trigger.interval' = '200 ms') AS SELECT id, v FROM a_in WHERE v >= 0;
CREATE STREAM b_out WITH ('trigger.interval' = '200 ms') AS SELECT id, v * 2 AS w FROM b_in;
CREATE STREAM c_out WITH ('trigger.interval' = '200 ms') AS SELECT id, v * 3 AS w FROM c_in;
"""


@pytest.mark.integration
def test_an_application_runs_at_most_its_batches_at_once(tmp_path, broker):
    """`runtime.batches_at_once: 1`: the three queries' micro-batches, as their checkpoints date them (the offsets
    file written once the batch may start, the commit file at its end), never overlap, and every id arrives."""
    _BROKER[:] = [broker]
    config = SHARED.replace("  isolation: shared\n", "  isolation: shared\n  batches_at_once: 1\n")
    root = make_project(tmp_path, {"dsflow.yml": config.format(prefix=f"gt{os.getpid()}_"), "sql/all.sql": GATED})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    names = ["a_out", "b_out", "c_out"]
    try:
        project = loaded.project
        _one_host(options, names)
        for wave in range(10):
            for name in ("a_in", "b_in", "c_in"):
                produce(broker, project, name, _rows(wave * 30, 30))
            time.sleep(0.3)
        for name in names:
            wait_for(lambda name=name: _exactly(project, name, range(300)), WAIT, f"{name}: every id once")
        state = operations.load(options).workspace.state_backend().read()
        batches = [(name, *span) for name in names for span in _batch_spans(state, name)]
        host_file = Path(state.resources[Q + "a_out"].outputs["app_dir"]) / apps.HOST_FILE
        # the host writes its gate's counts at each look of its loop: the last batch's grant can reach the file
        # after the batch's commit file (one CI run read 6 grants beside 7 batches); it must come, else the gate let
        # a batch by
        gate = wait_for(lambda: (g := apps.read_json(host_file)["gate"])["granted"] >= len(batches) and g, 60,
                        "the host's gate counts to include every batch")
        shown = {e["address"]: e for e in operations.status(operations.load(options), with_dead_letters=False)}
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
    assert len(batches) >= 3 and gate["slots"] == 1 and gate["granted"] >= len(batches), (batches, gate)
    assert {shown[Q + n]["batch_slot"] for n in names} <= {"held", "waiting", "free"}
    assert {shown[Q + n]["app_batches"]["slots"] for n in names} == {1}
    overlapping = [(x, y) for x in batches for y in batches
                   if x[0] < y[0] and x[1] < y[2] and y[1] < x[2]]
    assert not overlapping, overlapping


def _batch_spans(state, name: str) -> list[tuple[float, float]]:
    """(offsets file written, commit file written) of each micro-batch with records in the query's checkpoint, in
    seconds. Spark runs a query's first batch even when its source is empty (to record where it starts): the gate
    lets such a batch through, as a reader lets through any batch with nothing to read."""
    from dsflow.adapters.spark.spec import QuerySpec

    run_dir = Path(state.resources[Q + name].outputs["run_dir"])
    checkpoint = Path(QuerySpec.model_validate_json((run_dir / "spec.json").read_text()).checkpoint)
    spans, before = [], {"0": 0}
    for number in sorted(int(c.name) for c in (checkpoint / "commits").iterdir() if c.name.isdigit()):
        offsets = checkpoint / "offsets" / str(number)
        end = json.loads(offsets.read_text().splitlines()[-1])
        if end != before:
            spans.append((offsets.stat().st_mtime, (checkpoint / "commits" / str(number)).stat().st_mtime))
        before = end
    return spans
