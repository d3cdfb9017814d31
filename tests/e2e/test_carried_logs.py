"""Offsets are carried only to the log they were read from: a source topic deleted and created again under the same
name is another log (the broker's topic id changed). The plan then replays from the earliest offset, with an
estimate, instead of carrying offsets that would skip the new log's records; a saved plan that still says 'carry'
is refused at apply, before anything stops. Checked against the sink's records on a real broker and driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.kafka.admin import TopicSpec, delete_topic, ensure_topic
from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.core.categories import Category
from dsflow.errors import DsflowError
from dsflow.engine.executors import query_identity
from test_data_loss import _project, _wait_ids

pytestmark = pytest.mark.integration

QUERY = "query.default.public.copied"
SQL = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json', "
       "'topic.partitions' = 2);\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied'{carry}) AS SELECT id FROM events WHERE id >= {low};\n")


def test_offsets_are_never_carried_onto_a_recreated_topic(tmp_path: Path, broker: str) -> None:
    root, options, prefix = _project(tmp_path, SQL.format(p="{p}", carry="", low=0), broker)
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i}) for i in range(50)])
        _wait_ids(broker, f"{prefix}_copied", set(range(50)))

        (root / "rel.sql").write_text(SQL.format(p=prefix, carry=", 'start.position' = 'carry'", low=1))
        loaded = operations.load(options)
        carry = operations.plan(loaded)
        assert [(c.address, c.category) for c in carry.actionable] == [(QUERY, Category.CARRY_OFFSETS)]

        delete_topic(broker, f"{prefix}_events")  # outside dsflow: same name, another log
        ensure_topic(broker, TopicSpec(f"{prefix}_events", 2, 1))
        produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i}) for i in range(100, 130)])

        outputs = loaded.workspace.state_backend().read().resources[QUERY].outputs
        pid = outputs["pid"]
        result = operations.apply(loaded, carry)
        assert isinstance(result.failed[1], DsflowError) and result.failed[1].code == "DSF-E824"
        assert process.is_running(pid, query_identity(outputs)), "a refused carry stopped the running version"

        replay = operations.plan(operations.load(options))
        [change] = replay.actionable
        assert change.category is Category.REPLAY and "deleted and created again" in change.reason
        assert change.estimate is not None and change.estimate.records == 30
        assert operations.apply(operations.load(options), replay).ok
        copied = _wait_ids(broker, f"{prefix}_copied", set(range(100, 130)))
        assert sorted(i for i in copied if i >= 100) == list(range(100, 130)), "each new record once, none skipped"
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
