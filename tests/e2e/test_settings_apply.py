"""A setting a running query writes with (the sink's 'key.format') restarts the query on its checkpoint: checked in
the sink's records on the real broker, not in the plan text. Records before the change keep the old key codec,
records after carry the new one, and every id is in the sink exactly once."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters.kafka.client import produce_json_lines, read_to_end
from dsflow.core.plan import Action

pytestmark = pytest.mark.integration

CONFIG = "name: {name}\ndefault:\n  store: k\nenvironments:\n  dev:\n    vars: {{bootstrap: 'unset:1'}}\n"
STORES = "stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: \"{{ var('bootstrap') }}\"\n"
SQL = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json');\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied'{key}) AS SELECT id FROM events PARTITION BY id;\n")


def _records(broker: str, topic: str) -> list[tuple[bytes, int]]:
    return read_to_end(broker, topic, convert=lambda m: (m.key(), json.loads(m.value())["id"]))


def _wait_ids(broker: str, topic: str, expected: set[int]) -> list[tuple[bytes, int]]:
    from support.waiting import wait_for

    def complete() -> list[tuple[bytes, int]] | None:
        records = _records(broker, topic)
        return records if expected <= {i for _, i in records} else None

    return wait_for(complete, 240, f"ids {min(expected)}-{max(expected)} in {topic}", interval=2)


def test_a_sink_key_format_change_restarts_the_running_query_on_its_checkpoint(tmp_path: Path, broker: str) -> None:
    prefix = f"st{uuid.uuid4().hex[:6]}"
    root = tmp_path / prefix
    root.mkdir()
    (root / "dsflow.yml").write_text(CONFIG.format(name=prefix))
    (root / "stores.yml").write_text(STORES)
    (root / "rel.sql").write_text(SQL.format(p=prefix, key=""))
    options = operations.Options(root, None, {"bootstrap": broker})
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i}) for i in range(50)])
        before = _wait_ids(broker, f"{prefix}_copied", set(range(50)))
        assert sorted(before, key=lambda r: r[1]) == [(str(i).encode(), i) for i in range(50)], "text keys"

        (root / "rel.sql").write_text(SQL.format(p=prefix, key=", 'key.format' = 'long'"))
        loaded = operations.load(options)
        plan = operations.plan(loaded)
        changes = {c.address: c for c in plan.actionable}
        assert {a: c.action for a, c in changes.items()} == {"relation.default.public.copied": Action.UPDATE,
                                                            "query.default.public.copied": Action.UPDATE}
        query = changes["query.default.public.copied"]
        assert query.category.value == "in_place"
        assert query.reason == "'key.format' of relation default.public.copied changed (in place)"
        assert operations.apply(loaded, plan).ok

        produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i}) for i in range(50, 100)])
        records = _wait_ids(broker, f"{prefix}_copied", set(range(100)))
        assert sorted(i for _, i in records) == list(range(100)), "the plan promised nothing reprocessed or skipped"
        after = sorted((r for r in records if r[1] >= 50), key=lambda r: r[1])
        assert after == [(struct.pack(">q", i), i) for i in range(50, 100)], "the restarted query writes long keys"
        assert sorted((r for r in records if r[1] < 50), key=lambda r: r[1]) == sorted(before, key=lambda r: r[1])
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
