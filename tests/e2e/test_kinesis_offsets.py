"""Offsets of a Kinesis source through `dsflow apply` and real query drivers against kinesalite: a change the
plan says carries offsets starts the new version in a fresh checkpoint at the sequence numbers where the old
one stopped (nothing reprocessed, nothing skipped), and a killed driver resumes from its checkpoint.

Each step waits until the checkpoint's last committed batch covers every record put so far (the sequence
numbers read back with boto3), so the stop falls between batches and the sink must hold each record once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.kinesis.records import put_json_lines, read_records
from dsflow.adapters.spark.checkpoint import committed_offsets
from dsflow.core.plan import Action
from dsflow.core.safety import Allowance
from dsflow.engine.executors import query_identity
from support.projects import make_project

pytestmark = pytest.mark.integration

QUERY = "query.analytics.public.copied"
CONFIG = """\
name: kinoffsets
default:
  database: analytics
  schema: public
  store: kin
runtime:
  trigger_interval: 1 second
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
"""
STORES = """\
stores:
  - name: kin
    type: kinesis
    properties:
      region: us-east-1
      endpoint: "{{ var('kinesis') }}"
"""
SQL = """\
CREATE STREAM clicks (id BIGINT, page VARCHAR) WITH ('value.format' = 'json', 'topic.shards' = 2);
CREATE STREAM copied AS SELECT id, page FROM clicks WHERE id >= 0;
"""


def _put(settings: dict, stream: str, first: int, count: int) -> set[int]:
    rows = [{"id": i, "page": f"p{i % 5}"} for i in range(first, first + count)]
    assert put_json_lines(settings, stream, [json.dumps(r) for r in rows], key_field="page") == count
    return {r["id"] for r in rows}


def _sink_ids(settings: dict, stream: str) -> Counter:
    return Counter(json.loads(r["value"])["id"] for r in read_records(settings, stream, timeout=1.0))


def _state(options: operations.Options):
    return operations.load(options).workspace.state_backend().read()


def _wait_committed(options: operations.Options, settings: dict, source: str, timeout: float = 240.0) -> None:
    """Until the query's last committed batch ends at the last record of every shard of `source`."""
    last: dict[str, str] = {}
    for record in read_records(settings, source, timeout=1.0):
        last[record["shard"]] = f"after:{record['sequence']}"
    checkpoint = Path(_state(options).resources[QUERY].outputs["checkpoint"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        offsets = committed_offsets(checkpoint) if checkpoint.is_dir() else None
        if offsets and all(offsets[0].get(shard) == position for shard, position in last.items()):
            return
        time.sleep(1)
    raise AssertionError(f"the query never committed {last}; last committed: {committed_offsets(checkpoint)}")


def _kinesis_project(tmp_path: Path, endpoint: str, letter: str):
    """The project applied on kinesalite: its folder, options, client settings and (source, sink) streams."""
    prefix = f"{letter}{os.getpid()}{int(time.time()) % 100000}_"
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "stores/kafka.yml": STORES,
                                   "sql/all.sql": SQL})
    options = operations.Options(root, None, {"kinesis": endpoint})
    _apply(options)
    return root, options, {"endpoint": endpoint, "region": "us-east-1"}, (f"{prefix}clicks", f"{prefix}copied")


def _apply(options: operations.Options) -> None:
    loaded = operations.load(options)
    result = operations.apply(loaded, operations.plan(loaded))
    assert result.ok, result.failed


def test_carry_offsets_and_restart_on_kinesis(tmp_path: Path, kinesis_endpoint: str) -> None:
    root, options, settings, (source, sink) = _kinesis_project(tmp_path, kinesis_endpoint, "o")
    try:
        expected = _put(settings, source, 0, 60)
        _wait_committed(options, settings, source)
        assert _sink_ids(settings, sink) == Counter(expected)

        # a change the plan says carries offsets: a fresh checkpoint starting at the old one's sequence numbers
        sql = root / "sql" / "all.sql"
        sql.write_text(sql.read_text().replace("CREATE STREAM copied AS", "CREATE STREAM copied WITH "
                                               "('start.position' = 'carry') AS").replace("id >= 0", "id > -1"))
        plan = operations.plan(operations.load(options))
        assert [(c.address, c.action, c.category) for c in plan.actionable] == \
               [(QUERY, Action.REPLACE, "carry_offsets")]
        _apply(options)
        history = _state(options).history(QUERY)
        stopped = history[-2].stop_offsets[source]
        assert set(stopped) == {r["shard"] for r in read_records(settings, source, timeout=1.0)}
        assert all(str(p).startswith("after:") for p in stopped.values())
        assert history[-1].start_offsets == {source: stopped} and history[-1].checkpoint != history[-2].checkpoint

        expected |= _put(settings, source, 1000, 40)
        _wait_committed(options, settings, source)
        assert _sink_ids(settings, sink) == Counter(expected), "records reprocessed or lost across the carry"

        # a killed driver: apply repairs the drift and the query resumes from its checkpoint
        resources = _state(options).resources[QUERY].outputs
        os.kill(resources["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while process.is_running(resources["pid"], query_identity(resources)) and time.monotonic() < deadline:
            time.sleep(0.1)
        expected |= _put(settings, source, 2000, 30)
        plan = operations.plan(operations.load(options))
        assert [(c.address, c.action, c.drift) for c in plan.actionable] == [(QUERY, Action.UPDATE, True)]
        _apply(options)
        assert _state(options).resources[QUERY].outputs["checkpoint"] == resources["checkpoint"]
        _wait_committed(options, settings, source)
        assert _sink_ids(settings, sink) == Counter(expected), "records reprocessed or lost across the restart"
    finally:
        loaded = operations.load(options)
        result = operations.apply(loaded, operations.plan(loaded, destroy=True))
        assert result.ok, result.failed


def test_offsets_are_never_carried_onto_a_recreated_stream(tmp_path: Path, kinesis_endpoint: str) -> None:
    """A source stream deleted and created again under the same name is another log (its creation time changed):
    a saved plan that carries offsets onto it is refused at apply (DSF-E824) with the old version left running,
    and the plan made now replays it, its estimate the records the new stream holds; what a replacement of the
    sink stream would destroy is counted on the stream."""
    from dsflow.adapters.kinesis import admin
    from dsflow.errors import DsflowError

    root, options, settings, (source, sink) = _kinesis_project(tmp_path, kinesis_endpoint, "r")
    try:
        expected = _put(settings, source, 0, 40)
        _wait_committed(options, settings, source)
        logs = _state(options).resources[QUERY].outputs["logs"]
        assert set(logs) == {source} and logs[source].startswith("arn:aws:kinesis:")

        sql = root / "sql" / "all.sql"
        sql.write_text(sql.read_text().replace("CREATE STREAM copied AS", "CREATE STREAM copied WITH "
                                               "('start.position' = 'carry') AS").replace("id >= 0", "id > -1"))
        loaded = operations.load(options)
        carry = operations.plan(loaded)
        assert [c.category for c in carry.actionable] == ["carry_offsets"]

        admin.delete_stream(settings, source)  # outside dsflow: same name, another stream
        time.sleep(1.1)  # a creation time in another second, as any real recreation has
        admin.ensure_stream(settings, source, 2)
        admin.wait_active(settings, source)
        expected |= _put(settings, source, 500, 25)
        deployed = _state(options).resources[QUERY]
        result = operations.apply(loaded, carry)
        assert isinstance(result.failed[1], DsflowError) and result.failed[1].code == "DSF-E824"
        # apply left the running version alone (it may have failed by itself while its stream was gone: DSF-E763)
        assert _state(options).resources[QUERY] == deployed, "a refused carry changed the deployed version"
        assert result.done == [], "a refused carry did something first"
        if not process.is_running(deployed.outputs["pid"], query_identity(deployed.outputs)):
            log = (Path(deployed.outputs["run_dir"]) / "driver.log").read_text()
            assert "DSF-E763" in log, [line for line in log.splitlines() if "DSF-" in line or "Error" in line][-8:]

        replay = operations.plan(operations.load(options))
        [change] = replay.actionable
        assert change.category == "replay" and "deleted and created again" in change.reason
        assert change.estimate is not None and change.estimate.records == 25, "the new stream holds 25 records"
        _apply(options)
        deadline = time.monotonic() + 240
        while _sink_ids(settings, sink) != Counter(expected) and time.monotonic() < deadline:
            time.sleep(1)
        assert _sink_ids(settings, sink) == Counter(expected), "each record once, none skipped"

        sql.write_text(sql.read_text().replace("SELECT id, page FROM", "SELECT CAST(id AS VARCHAR) AS id, page FROM"))
        destroying = operations.plan(operations.load(options)).destroying
        assert [(c.address, c.destroys.records) for c in destroying] == \
               [("relation.analytics.public.copied", sum(_sink_ids(settings, sink).values()))]
    finally:
        loaded = operations.load(options)
        result = operations.apply(loaded, operations.plan(loaded, destroy=True), allowance=Allowance(everything=True))
        assert result.ok, result.failed
