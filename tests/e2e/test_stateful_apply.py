"""A stateful query through a real driver process (operations.apply): a materialized view aggregating a
stream, killed with SIGKILL mid-stream and resumed by apply, ends equal to a pandas reference; it is
readable by `dsflow query` and by a plain sqlite3 client while it is written; destroy drops its table.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time

import pandas as pd
import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.sqlite import mv
from dsflow.cli import cli
from dsflow.core.plan import Action
from dsflow.engine.executors import query_identity
from support.streaming import CONFIG, produce
from support.projects import make_project
from support.waiting import wait_for

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 2);

CREATE MATERIALIZED VIEW user_counts WITH ('trigger.interval' = '500 ms') AS
  SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum, MAX(viewtime) AS last_view
  FROM pageviews GROUP BY userid;
"""
QUERY = "query.analytics.public.user_counts"


def _events(first: int, count: int, rng: random.Random) -> list[dict]:
    return [{"id": i, "viewtime": 1_700_000_000_000 + i, "userid": f"User_{rng.randrange(1, 40)}",
             "pageid": f"Page_{rng.randrange(1, 9)}"} for i in range(first, first + count)]


def _snapshot(database) -> dict[str, tuple]:
    try:
        _, rows = mv.run_query(database, "SELECT userid, views, id_sum, last_view FROM user_counts")
    except Exception:  # noqa: BLE001 - not created yet
        return {}
    return {r[0]: tuple(r[1:]) for r in rows}


def _reference(events: list[dict]) -> dict[str, tuple]:
    frame = pd.DataFrame(events).groupby("userid").agg(views=("id", "size"), id_sum=("id", "sum"),
                                                        last_view=("viewtime", "max"))
    return {u: (int(r.views), int(r.id_sum), int(r.last_view)) for u, r in frame.iterrows()}


def test_view_survives_kill_minus_9_and_is_readable_while_written(tmp_path, broker):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"k{os.getpid()}_"), "sql/all.sql": SQL})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    result = operations.apply(loaded, operations.plan(loaded))
    assert result.ok, result.failed
    project = loaded.project
    database = mv.database_path(project.root, project.state_path, project.environment)
    rng = random.Random(11)
    events = _events(0, 2_000, rng)
    produce(broker, project, "pageviews", events, "userid")
    wait_for(lambda: _snapshot(database), 180, "the first batch in the view")

    for first in range(2_000, 6_000, 1_000):  # keep writing while the query runs, then kill it mid-stream
        time.sleep(0.3)
        more = _events(first, 1_000, rng)
        produce(broker, project, "pageviews", more, "userid")
        events += more
        # a plain client reads meanwhile; with a busy timeout, as clients set one: WAL readers wait out the
        # writer's brief exclusive moments (a checkpoint), which failed an untimed read under load
        reader = subprocess.run(["sqlite3", "-cmd", ".timeout 5000", str(database),
                                 "SELECT COUNT(*), SUM(views) FROM user_counts"],
                                capture_output=True, text=True, timeout=10)
        assert reader.returncode == 0 and "|" in reader.stdout, reader.stderr
    state = operations.load(options).workspace.state_backend().read()
    outputs = state.resources[QUERY].outputs
    pid = outputs["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process.is_running(pid, query_identity(outputs)), 10, "the driver to die")
    assert _snapshot(database) != _reference(events), "the view was complete before the kill; nothing tested"

    late = _events(6_000, 1_000, rng)
    produce(broker, project, "pageviews", late, "userid")
    events += late
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert [(c.address, c.action, c.drift) for c in plan.actionable] == [(QUERY, Action.UPDATE, True)]
    assert operations.apply(loaded, plan).ok
    expected = _reference(events)
    wait_for(lambda: _snapshot(database) == expected, 240, "the view to equal the reference")

    shown = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "query",
                                     "SELECT userid, views FROM user_counts WHERE views >= 100 ORDER BY userid",
                                     "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == [{"userid": u, "views": v[0]} for u, v in sorted(expected.items())
                                        if v[0] >= 100]

    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    with sqlite3.connect(database) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "user_counts" not in tables
