"""`apply --exclude` on the real broker and a real driver: the excluded query keeps running its deployed SQL
(the same driver, its records still follow the old WHERE), the rest of the edit is applied, and a later plan
without --exclude still shows the query's change."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dsflow.adapters.kafka.admin import list_topics
from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.engine import operations
from test_data_loss import _project, _wait_ids

pytestmark = pytest.mark.integration

SQL = ("CREATE STREAM events (id BIGINT, name VARCHAR) WITH ('topic' = '{p}_events', 'value.format' = 'json');\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT id, name FROM events WHERE id >= 0;\n")
EDITED = SQL.replace("WHERE id >= 0", "WHERE id < 0") + \
    "CREATE STREAM extra (id BIGINT) WITH ('topic' = '{p}_extra', 'value.format' = 'json');\n"
QUERY = "query.default.public.copied"


def _deployed(options: operations.Options) -> dict:
    return operations.load(options).workspace.state_backend().read().resources[QUERY].model_dump()


def test_an_excluded_query_keeps_running_its_deployed_sql(tmp_path: Path, broker: str) -> None:
    root, options, prefix = _project(tmp_path, SQL, broker)
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i, "name": f"n{i}"}) for i in range(10)])
        _wait_ids(broker, f"{prefix}_copied", set(range(10)))
        before = _deployed(options)

        (root / "rel.sql").write_text(EDITED.replace("{p}", prefix))
        shown = subprocess.run(["dsflow", "-C", str(root), "--var", f"bootstrap={broker}", "plan", "--exclude", QUERY],
                               capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
        assert shown.returncode == 0, shown.stderr
        assert f"Excluded, left as deployed: {QUERY}." in shown.stdout
        loaded = operations.load(options)
        plan = operations.plan(loaded, excludes=frozenset({QUERY}))
        assert [c.address for c in plan.actionable] == ["relation.default.public.extra"]
        assert operations.apply(loaded, plan).ok

        assert f"{prefix}_extra" in list_topics(broker), "the rest of the edit was applied"
        after = _deployed(options)
        assert after == before, "the excluded query's state entry is as deployed"
        os.kill(after["outputs"]["pid"], 0)  # the same driver still runs
        produce_json_lines(broker, f"{prefix}_events", [json.dumps({"id": i, "name": f"n{i}"}) for i in range(10, 20)])
        ids = _wait_ids(broker, f"{prefix}_copied", set(range(20)))
        assert sorted(ids) == list(range(20)), "the deployed WHERE (id >= 0) still filters: every id, once"

        loaded = operations.load(options)
        assert QUERY in {c.address for c in operations.plan(loaded).actionable}, "its change is still pending"
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
