"""A running query switched to Spark's real-time mode by `dsflow apply` (issue 45), and out of it by a blue/green
replay that also moves it back into it (issue 44), on Apache Kafka and real drivers.

Each switch is a replacement in a new checkpoint with the old version's offsets carried. Into real-time mode nothing
is read twice or skipped; out of it, what the real-time version wrote after its last checkpoint may be written again
(at-least-once), but nothing is skipped. `mirrored` reads the query in real-time mode throughout.

In real-time mode each record written carries its source record's timestamp as a header (checked by id against
the source topic), and `dsflow status` reports the latency of the records its sink received: its p50, p99 and max
are latencies of records the test reads from the sink itself (nearest rank of the same records).

While the query runs in real-time mode and events arrive, it is replayed blue/green in real-time mode with a new
factor. Its stop could not come at given offsets, so the deployment first restarts the deployed version in
micro-batches on a new checkpoint, its offsets carried from its last real-time checkpoint (`dsflow apply --blue-green`
in a process of its own, killed right after that restart was recorded): the state then records it in micro-batches,
running, and the next plan deploys from there (no first phase, nothing read twice). That apply builds, catches up
and cuts the new version in micro-batches, which then resumes in real-time mode at the cut; its real-time reader is
switched to the new log. Checked by id against a plain-Python reference from the source's offsets: the old log holds
every id before the cut with the old factor, twice only ids between the last real-time checkpoint and the sources'
ends when the new version was built (what the real-time version may have written after its checkpoint); the new
log every id once with the new factor; the reader each id before the cut as often as the old log holds it, with the
old factor, and each id after it exactly once with the new one, events produced after the apply included. The next
plan has nothing to change but the kept old version.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dsflow.adapters import process
from dsflow.adapters.kafka.client import consumer, produce_json_lines, read_to_end, topic_partitions
from dsflow.core.categories import REALTIME, Category
from dsflow.core.latency import SOURCE_TIMESTAMP_HEADER
from dsflow.engine import operations
from dsflow.engine.executors import query_identity
from support.background import Producer
from support.waiting import wait_for
from test_data_loss import _project, _wait_ids

pytestmark = pytest.mark.integration

QUERY, READER = "query.default.public.copied", "query.default.public.mirrored"
SQL = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json', "
       "'topic.partitions' = 2);\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied'{trigger}) AS SELECT id, id * {f} AS w FROM events "
       "WHERE id >= 0;\n"
       "CREATE STREAM mirrored WITH ('topic' = '{p}_mirrored'" + ", 'trigger' = 'realtime', 'trigger.interval' = "
       "'5 seconds') AS SELECT id, w FROM copied;\n")
REALTIME_PROPS = ", 'trigger' = 'realtime', 'trigger.interval' = '5 seconds'"
REPLAY = ", 'start.position' = 'earliest'"


def _sql(prefix: str, trigger: str, factor: int = 1) -> str:
    return SQL.format(p=prefix, trigger=trigger, f=factor)


def _switch(root: Path, options: operations.Options, prefix: str, trigger: str) -> None:
    (root / "rel.sql").write_text(_sql(prefix, trigger))
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = plan.actionable
    assert (change.address, change.category) == (QUERY, Category.CARRY_OFFSETS), change.reason
    assert "trigger changed" in change.reason and change.effect.endswith(REALTIME)
    assert operations.apply(loaded, plan).ok


def _produce(broker: str, prefix: str, ids: range) -> None:
    produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i}) for i in ids])


def _records(broker: str, topic: str) -> list[tuple[int, int, dict[str, bytes]]]:
    """(id, timestamp ms, headers) of every record of the topic, read to its end."""
    from confluent_kafka import TopicPartition

    with consumer({"bootstrap.servers": broker}) as c:
        parts = topic_partitions(c, topic)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p))[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts if ends[p] > 0])
        out, left = [], {p for p in parts if ends[p] > 0}
        while left:
            for m in c.consume(500, timeout=1.0):
                if m.error() is None:
                    out.append((json.loads(m.value())["id"], m.timestamp()[1], dict(m.headers() or [])))
                    if m.offset() + 1 >= ends[m.partition()]:
                        left.discard(m.partition())
        return out


def _status_latency(options: operations.Options, latencies: list[int]) -> dict:
    """The query's status once it reports the latency of records; each figure one of `latencies`."""
    def reported() -> dict | None:
        [entry] = [e for e in operations.status(operations.load(options), with_dead_letters=False)
                   if e.get("address") == QUERY]
        return entry if entry.get("record_latency_samples") else None

    return wait_for(reported, 60, "the real-time query's record latency in its status", interval=2)


def _blue_green(root: Path, options: operations.Options, sql: str, effect: str):
    (root / "rel.sql").write_text(sql)
    loaded = operations.load(options)
    plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=240))
    [change] = plan.actionable
    assert change.address == QUERY and change.blue_green is not None and change.blue_green.readers == [READER]
    assert effect in (change.effect or ""), change.effect
    return loaded, plan, change.blue_green


def _running(state, address: str) -> bool:
    outputs = state.resources[address].outputs
    return process.is_running(outputs["pid"], query_identity(outputs))


def _producer(broker: str, prefix: str, first: int) -> Producer:
    """Events produced in the background while an apply runs, two every 200 ms."""
    return Producer(lambda start, n: _produce(broker, prefix, range(start, start + n)), first, 2, 0.2)


def _values(broker: str, log: str) -> list[dict]:
    return [json.loads(r["value"]) for r in read_to_end(broker, log)]


def test_switching_a_running_query_to_real_time_mode_and_back_carries_its_offsets(tmp_path: Path, broker: str) -> None:
    root, options, prefix = _project(tmp_path, _sql("{p}", ""), broker)
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _produce(broker, prefix, range(50))
        _wait_ids(broker, f"{prefix}_copied", set(range(50)))

        _switch(root, options, prefix, REALTIME_PROPS)
        _produce(broker, prefix, range(50, 100))
        ids = Counter(_wait_ids(broker, f"{prefix}_copied", set(range(100))))
        assert all(n == 1 for n in ids.values()), "into real-time mode: nothing read twice"

        source_ts = {i: ts for i, ts, _ in _records(broker, f"{prefix}_events")}
        written = {i: (ts, headers) for i, ts, headers in _records(broker, f"{prefix}_copied")}
        assert all(SOURCE_TIMESTAMP_HEADER not in written[i][1] for i in range(50)), "micro-batches add no header"
        assert {i: int(written[i][1][SOURCE_TIMESTAMP_HEADER]) for i in range(50, 100)} == \
            {i: source_ts[i] for i in range(50, 100)}, "each real-time record carries its source record's timestamp"
        latencies = [written[i][0] - source_ts[i] for i in range(50, 100)]
        entry = _status_latency(options, latencies)
        assert entry["record_latency_samples"] <= 50
        for field in ("record_latency_p50_ms", "record_latency_p99_ms", "record_latency_max_ms"):
            assert entry[field] in latencies, (field, entry[field], sorted(latencies))
        assert entry["record_latency_p50_ms"] <= entry["record_latency_p99_ms"] <= entry["record_latency_max_ms"]
        _blue_green_from_real_time_mode(root, options, prefix, broker)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def _killed_after_the_move(root: Path, options: operations.Options, prefix: str, broker: str):
    """`dsflow apply --blue-green` killed once it restarted the real-time version in micro-batches: the state records
    that version, running; the next plan deploys from it (the plan of before said the move)."""
    from test_bluegreen import _killed_at

    loaded, _, bg = _blue_green(root, options, _sql(prefix, REALTIME_PROPS + REPLAY, 2),
                                "nothing skipped; the deployed version first moves to micro-batches")
    assert bg.phases[0] == "micro_batches"
    backend = loaded.workspace.state_backend()
    realtime = backend.read().resources[QUERY]
    _killed_at(root, broker, "blue_green.micro_batches", backend)
    state = backend.read()
    moved = state.resources[QUERY]
    assert "trigger" not in moved.data and moved.data_hash != realtime.data_hash and _running(state, QUERY)
    spec = json.loads((Path(moved.outputs["run_dir"]) / "spec.json").read_text())
    assert not spec["realtime"] and spec["checkpoint"] == moved.outputs["checkpoint"] != realtime.outputs["checkpoint"]
    [*_, stopped, started] = state.history(QUERY)
    assert stopped.checkpoint == realtime.outputs["checkpoint"] and stopped.stopped_at is not None
    assert (started.category, started.checkpoint, started.stopped_at) == ("carry_offsets", spec["checkpoint"], None)
    assert started.start_offsets == stopped.stop_offsets, "offsets carried from its last real-time checkpoint"
    [entry] = [e for e in operations.status(operations.load(options), with_dead_letters=False)
               if e.get("address") == QUERY]
    assert (entry["blue_green"]["phase"], entry["blue_green"]["under_way"]) == ("micro_batches", True)
    return _blue_green(root, options, _sql(prefix, REALTIME_PROPS + REPLAY, 2), "nothing read twice or skipped")


def _blue_green_from_real_time_mode(root: Path, options: operations.Options, prefix: str, broker: str) -> None:
    _wait_ids(broker, f"{prefix}_mirrored", set(range(100)))
    with _producer(broker, prefix, 100) as producer:
        loaded, plan, bg = _killed_after_the_move(root, options, prefix, broker)
        assert bg.phases[0] == "build" and bg.interrupted is None, bg
        assert plan.actionable[0].effect.endswith("it resumes in real-time mode at the cut, its offsets carried")
        result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    state = loaded.workspace.state_backend().read()
    record = state.deployments[QUERY]
    assert record.phase == "keep_old" and record.new_log == bg.new_log == f"{prefix}_copied_v2"
    assert state.resources[QUERY].data.get("trigger") == "realtime" and _running(state, QUERY)
    spec = json.loads((Path(state.resources[QUERY].outputs["run_dir"]) / "spec.json").read_text())
    assert spec["realtime"] and spec["checkpoint"].endswith("-rt"), "resumed in real-time mode"
    assert not Path(spec["checkpoint"].removesuffix("-rt")).exists(), "its micro-batch checkpoint removed"
    assert _running(state, READER) and set(record.switched) == {READER}
    [*_, realtime, moved, new] = state.history(QUERY)
    assert record.micro_batches_from == realtime.stop_offsets == moved.start_offsets, "recorded across the kill"
    assert moved.stop_offsets == record.cut and record.kept["checkpoint"] == moved.checkpoint
    produced = producer.next + 20
    _produce(broker, prefix, range(producer.next, produced))  # through the new version in real-time mode
    _check_by_id(broker, prefix, bg.new_log, record, produced)

    loaded = operations.load(options)  # nothing drifted; the kept old version goes
    plan = operations.plan(loaded)
    assert not plan.actionable and [r.log for r in plan.retired] == [f"{prefix}_copied"]


def _check_by_id(broker: str, prefix: str, new_log: str, record, produced: int) -> None:
    """The logs and the reader against the source's offsets: the cut, the last real-time checkpoint, the ends the new
    version was built to."""
    where = {r["id"]: (str(r["partition"]), r["offset"])
             for r in map(lambda r: {**r, **json.loads(r["value"])}, read_to_end(broker, f"{prefix}_events"))}
    assert sorted(where) == list(range(produced))
    events = f"{prefix}_events"
    cut, checkpointed, built = record.cut[events], record.micro_batches_from[events], record.built_to[events]
    before_cut = {i for i, (p, o) in where.items() if o < cut[p]}
    assert 100 <= len(before_cut) < produced - 20, "the cut came while events arrived"
    new = Counter(_wait_ids(broker, new_log, set(range(produced))))
    assert new == Counter(range(produced)), "the new log: every id once"
    assert all(r["w"] == 2 * r["id"] for r in _values(broker, new_log)), "the new factor"
    old = Counter(_wait_ids(broker, f"{prefix}_copied", before_cut))
    assert set(old) == before_cut and all(r["w"] == r["id"] for r in _values(broker, f"{prefix}_copied"))
    again = {i for i, (p, o) in where.items() if checkpointed[p] <= o < built[p]}
    twice = {i for i, n in old.items() if n > 1}
    assert max(old.values()) <= 2 and twice <= again, "written again: only after the last real-time checkpoint"
    print(f"written twice by the move to micro-batches: {len(twice)} of {len(again)} ids that could be")
    copied = Counter(_wait_ids(broker, f"{prefix}_mirrored", set(range(produced))))
    assert {i: copied[i] for i in before_cut} == dict(old), "the reader: the old log once, to the cut"
    assert all(copied[i] == 1 for i in set(range(produced)) - before_cut), "after the cut: every id once"
    values = {(r["id"], r["w"]) for r in _values(broker, f"{prefix}_mirrored")}
    assert values == {(i, (1 if i in before_cut else 2) * i) for i in range(produced)}, \
        "the old factor before the cut, the new one after it"
