"""A running query switched to Spark's real-time mode and back by `dsflow apply` (issue 45): each switch is a
replacement in a new checkpoint with the old version's offsets carried, on Apache Kafka and real drivers. Into
real-time mode nothing is read twice or skipped; out of it, what the real-time version wrote after its last
checkpoint may be written again (at-least-once), but nothing is skipped."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.core.categories import REALTIME, Category
from dsflow.engine import operations
from test_data_loss import _project, _wait_ids

pytestmark = pytest.mark.integration

QUERY = "query.default.public.copied"
SQL = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json', "
       "'topic.partitions' = 2);\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied'{trigger}) AS SELECT id FROM events WHERE id >= 0;\n")
REALTIME_PROPS = ", 'trigger' = 'realtime', 'trigger.interval' = '5 seconds'"


def _switch(root: Path, options: operations.Options, prefix: str, trigger: str) -> None:
    (root / "rel.sql").write_text(SQL.format(p=prefix, trigger=trigger))
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = plan.actionable
    assert (change.address, change.category) == (QUERY, Category.CARRY_OFFSETS), change.reason
    assert "trigger changed" in change.reason and change.effect.endswith(REALTIME)
    assert operations.apply(loaded, plan).ok


def _produce(broker: str, prefix: str, ids: range) -> None:
    produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i}) for i in ids])


def test_switching_a_running_query_to_real_time_mode_and_back_carries_its_offsets(tmp_path: Path, broker: str) -> None:
    root, options, prefix = _project(tmp_path, SQL.format(p="{p}", trigger=""), broker)
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _produce(broker, prefix, range(50))
        _wait_ids(broker, f"{prefix}_copied", set(range(50)))

        _switch(root, options, prefix, REALTIME_PROPS)
        _produce(broker, prefix, range(50, 100))
        ids = Counter(_wait_ids(broker, f"{prefix}_copied", set(range(100))))
        assert all(n == 1 for n in ids.values()), "into real-time mode: nothing read twice"

        _switch(root, options, prefix, "")
        _produce(broker, prefix, range(100, 130))
        ids = Counter(_wait_ids(broker, f"{prefix}_copied", set(range(130))))
        assert set(ids) == set(range(130)), "out of real-time mode: nothing skipped, nothing else written"
        assert all(ids[i] == 1 for i in range(50)) and all(ids[i] == 1 for i in range(100, 130))
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
