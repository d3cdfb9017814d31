"""The example project end to end on a real tansu broker and real Spark query drivers.

apply -> records arrive with the right content -> plan shows no changes -> edit the WHERE clause
-> only that query is replaced -> kill -9 a driver -> apply resumes it from its checkpoint with no
record lost -> destroy leaves no topics and no processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.kafka.admin import list_topics
from dsflow.adapters.kafka.client import produce_json_lines, read_to_end
from dsflow.core.plan import Action
from dsflow.cli import cli
from dsflow.engine.executors import datagen_identity, query_identity
from dsflow.engine.refresh import measured_costs, query_status
from dsflow.core.catchup import catch_up
from support import drivers
from support.waiting import wait_for

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"
FIRST_BATCH = 200
QUERY_FILTERED = "query.analytics.curated.pageviews_filtered"
QUERY_ENRICHED = "query.analytics.curated.pageviews_enriched"


@pytest.fixture()
def project_dir(tmp_path: Path, broker: str) -> Path:
    target = tmp_path / "example"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".dsflow"))
    stores = target / "stores" / "kafka.yml"
    text = stores.read_text().replace("rate: {{ var('pageview_rate') }}", f"rate: 0\n    count: {FIRST_BATCH}")
    stores.write_text(text.replace("rate: 1\n", "rate: 0\n    count: 20\n"))
    return target


def _options(project_dir: Path, broker: str) -> operations.Options:
    return operations.Options(project_dir, None, {"bootstrap": broker})


def _records(broker: str, topic: str) -> list[dict]:
    return [{**json.loads(r["value"]), "__key": r["key"]}
            for r in read_to_end(broker, topic)]


def _wait_for_ids(broker: str, topic: str, expected: set[int], timeout: float = 240.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    records: list[dict] = []
    while time.monotonic() < deadline:
        records = _records(broker, topic)
        if expected <= {r["id"] for r in records}:
            return records
        time.sleep(2)
    missing = sorted(expected - {r["id"] for r in records})
    raise AssertionError(f"{len(missing)} ids never reached {topic}: {missing[:20]}")


def _apply(options: operations.Options) -> list:
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    return plan.actionable


def _pids(options: operations.Options) -> dict[str, int]:
    state = operations.load(options).workspace.state_backend().read()
    return {k: v.outputs["pid"] for k, v in state.resources.items() if "pid" in v.outputs}


def _wait_for_runs(options: operations.Options) -> dict[str, tuple[int, str | None]]:
    """Each query's (PID, run id) once every query's status names its run."""
    found: dict[str, tuple[int, str | None]] = {}

    def named() -> bool:
        found.update(drivers.runs(options))
        return all(run for address, (_, run) in found.items() if address.startswith("query."))

    deadline = time.monotonic() + 120
    while not named():
        assert time.monotonic() < deadline, f"a query's status names no run: {found}"
        time.sleep(0.5)
    return found


def _started(pids: dict[str, int]) -> dict[str, float | None]:
    """Each process's start time: a pid reused later by another test's process (pid_max is 32768 here) is not it."""
    import psutil

    def started(pid: int) -> float | None:
        try:
            return psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            return None

    return {address: started(pid) for address, pid in pids.items()}


def _identities(options: operations.Options) -> dict[str, process.Identity]:
    """The identity of each deployed query's and generator's process (adapters/process.py)."""
    state = operations.load(options).workspace.state_backend().read()
    return {k: datagen_identity(v.outputs.get("run_dir")) if k.startswith("datagen.") else query_identity(v.outputs)
            for k, v in state.resources.items() if "pid" in v.outputs}


def _still_running(pid: int, started: float | None, identity: process.Identity) -> bool:
    import psutil

    try:
        same = started is not None and psutil.Process(pid).create_time() == started
    except psutil.NoSuchProcess:
        return False
    return same and process.is_running(pid, identity)


def test_example_project_lifecycle(project_dir: Path, broker: str) -> None:
    options = _options(project_dir, broker)
    created = _apply(options)
    assert {c.action for c in created} == {Action.CREATE}

    source = _wait_for_ids(broker, "pageviews", set(range(FIRST_BATCH)), timeout=60)
    by_id = {r["id"]: r for r in source}
    expected_filtered = {i for i, r in by_id.items() if r["pageid"] != "Page_2"}
    filtered = _wait_for_ids(broker, "pageviews_filtered", expected_filtered)
    for record in filtered:
        original = by_id[record["id"]]
        assert record["pageid"] != "Page_2"
        assert {k: record[k] for k in ("viewtime", "userid", "pageid")} == \
               {k: original[k] for k in ("viewtime", "userid", "pageid")}
        assert record["__key"] == original["userid"]
    enriched = _wait_for_ids(broker, "pageviews_enriched", set(by_id))
    for record in enriched:
        original = by_id[record["id"]]
        assert record["view_second"] == original["viewtime"] // 1000
        assert record["user_upper"] == original["userid"].upper()
        assert record["url"] == f"https://example.com/{original['pageid']}"
        assert record["section"] == ("top" if original["pageid"].startswith("Page_1") else "other")

    assert not operations.plan(operations.load(options)).has_changes

    original = (project_dir / "sql" / "pipelines.sql").read_text()
    _edit_where_clause(project_dir, options, broker, by_id)
    _carry_offsets(project_dir, options, broker, by_id)
    _replay(project_dir, options, broker, by_id)
    _rollback(project_dir, options, broker, by_id, original)
    _kill_and_resume(options, broker, by_id)
    _destroy(options, broker)


def _produce_batch(broker: str, first_id: int, count: int) -> dict[int, dict]:
    records = [{"id": first_id + i, "viewtime": 1_700_000_000_000 + i, "userid": f"User_{i % 9 + 1}",
                "pageid": f"Page_{i % 5 + 1}"} for i in range(count)]
    produce_json_lines(broker, "pageviews", [json.dumps(r) for r in records], key_field="userid")
    return {r["id"]: r for r in records}


def _ids(records: list[dict]) -> list[int]:
    return [r["id"] for r in records]


def _edit_where_clause(project_dir: Path, options: operations.Options, broker: str, by_id: dict) -> None:
    """A filter change keeps the checkpoint: old records are not re-read, new ones use the new filter."""
    sql = project_dir / "sql" / "pipelines.sql"
    sql.write_text(sql.read_text().replace("WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'"))
    plan = operations.plan(operations.load(options))
    assert [(c.address, c.action, c.category) for c in plan.actionable] == \
           [(QUERY_FILTERED, Action.UPDATE, "keep_checkpoint")]
    _wait_for_runs(options)
    before = drivers.runs(options)
    checkpoint = _state(options).resources[QUERY_FILTERED].outputs["checkpoint"]
    _apply(options)
    after = _wait_for_runs(options)
    assert after[QUERY_FILTERED][0] == before[QUERY_FILTERED][0], "restarted in its own driver: the same process"
    assert after[QUERY_FILTERED][1] != before[QUERY_FILTERED][1], "the query was not restarted"
    assert after[QUERY_ENRICHED] == before[QUERY_ENRICHED], "an unrelated query was restarted"
    assert _state(options).resources[QUERY_FILTERED].outputs["checkpoint"] == checkpoint

    batch = _produce_batch(broker, 20_000, 100)
    by_id.update(batch)
    expected = {i for i, r in batch.items() if r["pageid"] != "Page_3"}
    records = _wait_for_ids(broker, "pageviews_filtered", expected)
    ids = _ids(records)
    assert len(ids) == len(set(ids)), "records were processed twice: the checkpoint was not kept"
    assert not {i for i, r in batch.items() if r["pageid"] == "Page_3"} & set(ids)
    assert not {i for i, r in by_id.items() if r["pageid"] == "Page_2" and i < 20_000} & set(ids)


def _carry_offsets(project_dir: Path, options: operations.Options, broker: str, by_id: dict) -> None:
    """'start.position' = 'carry': a new checkpoint that starts exactly where the old version stopped."""
    sql = project_dir / "sql" / "pipelines.sql"
    sql.write_text(sql.read_text().replace(
        "WITH ('topic.partitions' = 1) AS", "WITH ('topic.partitions' = 1, 'start.position' = 'carry') AS").replace(
        "WHERE pageid <> 'Page_3'", "WHERE pageid <> 'Page_4'"))
    plan = operations.plan(operations.load(options))
    assert [(c.address, c.action, c.category, c.override) for c in plan.actionable] == \
           [(QUERY_FILTERED, Action.REPLACE, "carry_offsets", "carry")]
    _apply(options)
    history = _state(options).history(QUERY_FILTERED)
    assert history[-2].stop_offsets and history[-1].start_offsets == history[-2].stop_offsets
    assert history[-1].checkpoint != history[-2].checkpoint and history[-1].category == "carry_offsets"
    shown = CliRunner().invoke(cli, ["-C", str(project_dir), "--var", f"bootstrap={broker}", "history",
                                     "pageviews_filtered", "--json"])
    assert [e["category"] for e in json.loads(shown.output)] == ["new", "keep_checkpoint", "carry_offsets"]

    batch = _produce_batch(broker, 30_000, 100)
    by_id.update(batch)
    expected = {i for i, r in batch.items() if r["pageid"] != "Page_4"}
    ids = _ids(_wait_for_ids(broker, "pageviews_filtered", expected))
    assert len(ids) == len(set(ids)), "the carried offsets reprocessed records"
    assert not {i for i, r in batch.items() if r["pageid"] == "Page_4"} & set(ids)
    # the driver writes its status every 2 s: the batch that wrote these records may not be in it yet, and the next
    # plan prices a replay from the batches the status measured
    wait_for(lambda: catch_up(1, measured_costs(query_status(_state(options).resources[QUERY_FILTERED]))), 60,
             "the driver's status to hold a measured batch of the carried version")


def _replay(project_dir: Path, options: operations.Options, broker: str, by_id: dict) -> None:
    """'start.position' = 'earliest': the plan estimates the re-read, and apply re-reads exactly that."""
    sql = project_dir / "sql" / "pipelines.sql"
    sql.write_text(sql.read_text().replace("'start.position' = 'carry'", "'start.position' = 'earliest'"))
    plan = operations.plan(operations.load(options))
    [change] = plan.actionable
    assert (change.address, change.action, change.category) == (QUERY_FILTERED, Action.REPLACE, "replay")
    assert change.estimate is not None and change.estimate.records == len(by_id)
    assert change.estimate.seconds and change.estimate.measured_batches, "timed from the query's measured batches"
    end_before = len(_records(broker, "pageviews_filtered"))
    _apply(options)
    expected = {i for i, r in by_id.items() if r["pageid"] != "Page_4"}
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        replayed = _records(broker, "pageviews_filtered")[end_before:]
        if len(replayed) >= len(expected):
            break
        time.sleep(2)
    assert sorted(_ids(replayed)) == sorted(expected), "the replay did not re-read every source record once"


def _rollback(project_dir: Path, options: operations.Options, broker: str, by_id: dict, original: str) -> None:
    """Applying the original SQL again is a rollback: the plan says so and the query resumes without loss."""
    (project_dir / "sql" / "pipelines.sql").write_text(original)
    first_version = _state(options).history(QUERY_FILTERED)[0].version
    plan = operations.plan(operations.load(options))
    [change] = plan.actionable
    assert change.address == QUERY_FILTERED and change.rollback_of == first_version
    assert change.reason.startswith(f"rollback to version {first_version}")
    _apply(options)
    batch = _produce_batch(broker, 40_000, 50)
    by_id.update(batch)
    _wait_for_ids(broker, "pageviews_filtered", {i for i, r in batch.items() if r["pageid"] != "Page_2"})


def _state(options: operations.Options):
    return operations.load(options).workspace.state_backend().read()


def _kill_and_resume(options: operations.Options, broker: str, by_id: dict) -> None:
    pid = _pids(options)[QUERY_ENRICHED]
    checkpoint = _state(options).resources[QUERY_ENRICHED].outputs["checkpoint"]
    _wait_until_committed(options)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    identity = _identities(options)[QUERY_ENRICHED]
    while process.is_running(pid, identity) and time.monotonic() < deadline:
        time.sleep(0.1)
    more = list(_produce_batch(broker, 10_000, 300).values())

    plan = operations.plan(operations.load(options))
    assert [(c.address, c.action, c.drift) for c in plan.actionable] == [(QUERY_ENRICHED, Action.UPDATE, True)]
    _apply(options)
    new_pid = _pids(options)[QUERY_ENRICHED]
    assert new_pid != pid and process.is_running(new_pid, identity)
    expected = set(by_id) | {r["id"] for r in more}
    by_id.update({r["id"]: r for r in more})
    records = _wait_for_ids(broker, "pageviews_enriched", expected)
    assert expected == {r["id"] for r in records}
    assert _state(options).resources[QUERY_ENRICHED].outputs["checkpoint"] == checkpoint, \
        "not resumed from its checkpoint"


def _wait_until_committed(options: operations.Options, timeout: float = 60.0) -> None:
    """Wait until the enriched query has reported progress, so a checkpoint exists to resume from."""
    loaded = operations.load(options)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = {e["address"]: e for e in operations.status(loaded)}
        if entries[QUERY_ENRICHED].get("batch_id") is not None:
            assert entries[QUERY_ENRICHED]["state"] == "running"
            return
        time.sleep(1)
    raise AssertionError("the enriched query never reported progress")


def _destroy(options: operations.Options, broker: str) -> None:
    pids = _pids(options)
    started, identities = _started(pids), _identities(options)
    loaded = operations.load(options)
    result = operations.apply(loaded, operations.plan(loaded, destroy=True))
    assert result.ok, result.failed
    assert not operations.load(options).workspace.state_backend().read().resources
    project_topics = {"pageviews", "users", "pageviews_filtered", "pageviews_enriched"}
    assert not project_topics & set(list_topics(broker))
    for address, pid in pids.items():
        assert not _still_running(pid, started[address], identities[address]), address
