"""A replay whose source no longer holds what the deployed version read (issue 44, item 3), on Apache Kafka.

A changelog counts events per group. After it has counted 1,000 events, the first records of each partition of
its source are deleted (what retention does: the log's first offset moves on; here by the admin API's
DeleteRecords). The query is then changed so that it replays from the earliest offset. The plan must say, from the
real offsets, how many records the replay re-reads and how many the deployed version read that are gone; apply must
refuse it (DSF-E822) and leave the running version as it was; allowed, the replay must re-read exactly the records
the plan said, and its result must equal DuckDB's answer over the records still held, not over all of them. The new
version read from the log as it is now: a later replay finds nothing gone.
"""

from __future__ import annotations

import json
import os

import duckdb
import pytest
from click.testing import CliRunner

from dsflow.adapters import process
from dsflow.cli import cli
from dsflow.core.safety import Allowance
from dsflow.engine import operations
from dsflow.engine.executors import query_identity
from dsflow.errors import DsflowError
from support.projects import make_project
from support.streaming import CONFIG, latest_by_key, produce, records, topic
from support.waiting import wait_for

pytestmark = pytest.mark.integration

SOURCE = """\
CREATE STREAM events (id BIGINT, grp VARCHAR, ts BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""
COUNTS = """\
CREATE CHANGELOG grp_counts WITH ('trigger.interval' = '500 ms') AS
  SELECT grp, COUNT(*) AS n, SUM(id) AS total{more} FROM events GROUP BY grp;
"""
QUERY = "query.analytics.public.grp_counts"
DELETED_PER_PARTITION = 150


def _events(count: int) -> list[dict]:
    return [{"id": i, "grp": f"g{i % 7}", "ts": 1_700_000_000_000 + i} for i in range(count)]


def _write(root, more: str) -> None:
    (root / "sql" / "all.sql").write_text(SOURCE + COUNTS.format(more=more))


def _delete_first(broker: str, log: str, count: int) -> None:
    """DeleteRecords before offset `count` in each partition: the log's first offset moves on, as with retention."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker})
    done = admin.delete_records([TopicPartition(log, p, count) for p in (0, 1)], request_timeout=30)
    for future in done.values():
        assert future.result(timeout=60).low_watermark == count  # the new first offset of the partition


def _reference(held: list[dict]) -> dict[str, tuple[int, int, int]]:
    """DuckDB's answer to the changed query over the records the source holds."""
    con = duckdb.connect()
    con.execute("CREATE TABLE events (id BIGINT, grp VARCHAR)")
    con.executemany("INSERT INTO events VALUES (?, ?)", [(e["id"], e["grp"]) for e in held])
    rows = con.execute("SELECT grp, COUNT(*), SUM(id), MAX(id) FROM events GROUP BY grp").fetchall()
    return {g: (int(n), int(s), int(m)) for g, n, s, m in rows}


def _replay_change(options):
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    return loaded, plan, next(c for c in plan.changes if c.address == QUERY)


def test_a_replay_that_cannot_reread_what_was_read_is_refused_unless_allowed_and_rebuilds_from_what_is_held(
        tmp_path, broker):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"gone{os.getpid()}_"),
                                   "sql/all.sql": SOURCE + COUNTS.format(more="")})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    project, log = loaded.project, topic(loaded.project, "events")
    try:
        events = _events(1_000)
        produce(broker, project, "events", events, "grp")
        wait_for(lambda: sum(v["n"] for v in latest_by_key(broker, project, "grp_counts").values()) == 1_000, 180,
                 "the first version to count every event")
        by_partition = {(r["partition"], r["offset"]): json.loads(r["value"])
                        for r in records(broker, project, "events")}
        _delete_first(broker, log, DELETED_PER_PARTITION)
        held = [e for (_, offset), e in by_partition.items() if offset >= DELETED_PER_PARTITION]
        assert len(held) == 1_000 - 2 * DELETED_PER_PARTITION

        _write(root, ", MAX(id) AS top")
        _, plan, change = _replay_change(options)
        assert change.category is not None and change.category.value == "replay", change.reason
        assert change.estimate is not None
        assert change.estimate.gone == {log: 2 * DELETED_PER_PARTITION}
        assert change.estimate.sources == {log: len(held)} and change.estimate.records == len(held)
        assert change.estimate.read_again == len(held)  # the deployed version counted every event it still holds
        shown = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "plan"])
        assert shown.exit_code == 0, shown.output
        assert "GONE" in shown.output and f"~{2 * DELETED_PER_PARTITION:,} records of {log}" in shown.output

        before = operations.load(options).workspace.state_backend().read().resources[QUERY]
        with pytest.raises(DsflowError) as refused:
            operations.apply(operations.load(options), plan)
        assert refused.value.code == "DSF-E822" and "no longer holds" in str(refused.value)
        after = operations.load(options).workspace.state_backend().read().resources[QUERY]
        assert after.data_hash == before.data_hash and after.outputs["pid"] == before.outputs["pid"]
        assert process.is_running(after.outputs["pid"], query_identity(after.outputs)), "refused: left running"

        loaded, plan, change = _replay_change(options)
        assert operations.apply(loaded, plan, allowance=Allowance(addresses=frozenset({QUERY}))).ok
        expected = _reference(held)
        rebuilt = lambda: {v["grp"]: (v["n"], v["total"], v["top"])  # noqa: E731
                           for v in latest_by_key(broker, project, "grp_counts").values() if "top" in v}
        wait_for(lambda: rebuilt() == expected, 180, "the replay to rebuild every group from the records held")
        assert sum(n for n, _, _ in rebuilt().values()) == change.estimate.records, "re-read what the plan said"

        _write(root, ", MAX(id) AS top, MIN(id) AS low")
        _, _, again = _replay_change(options)
        assert again.estimate is not None and again.estimate.gone == {}, "the new version read the log as it is"
        assert again.estimate.read_again == len(held)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
