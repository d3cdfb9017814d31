"""kill -9 of running queries' process (its whole process group: the host and its JVM), then `dsflow apply` restarts
them (operations.apply, a real shared Spark application: `runtime.isolation: shared`; drivers of their own are
killed in tests/e2e/test_e2e_example.py, tests/integration/test_lake_sinks.py, tests/integration/test_lake_sources.py,
tests/e2e/test_sql_changelog_joins.py and tests/integration/test_runtime.py).

An aggregation writes a changelog, a materialized view reads that changelog (upserts by its key), and a
filter writes a stream. Their application is killed with SIGKILL while records keep arriving; apply
sees the dead queries as drift and restarts them on their checkpoints. The changelog's final content and
the view's snapshot must equal a pandas reference exactly; the stream sink must hold every id (duplicates
are allowed: it is at-least-once). The killed JVM ran no shutdown hook: its Spark files (state stores' working
copies, block files) stay in the host's scratch folder until the restart empties it, and destroy removes it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pandas as pd
import pytest

from support.changelogs import changelog_content
from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.sqlite import mv
from dsflow.core.plan import Action
from dsflow.engine.executors import query_identity
from support.projects import make_project
from support.streaming import CONFIG, produce, records
from support.waiting import wait_for

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 2);

CREATE CHANGELOG user_totals WITH ('trigger.interval' = '500 ms') AS
  SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum FROM pageviews GROUP BY userid;
CREATE MATERIALIZED VIEW busy_users WITH ('trigger.interval' = '500 ms') AS
  SELECT userid, views, id_sum FROM user_totals WHERE views >= 185;
CREATE STREAM page_one WITH ('trigger.interval' = '500 ms') AS
  SELECT id, userid FROM pageviews WHERE pageid = 'Page_1';
"""
QUERIES = [f"query.analytics.public.{n}" for n in ("user_totals", "busy_users", "page_one")]


def _events(first: int, count: int, rng: random.Random) -> list[dict]:
    return [{"id": i, "viewtime": 1_700_000_000_000 + rng.randrange(0, 600_000), "userid": f"User_{rng.randrange(30)}",
             "pageid": f"Page_{rng.randrange(1, 5)}"} for i in range(first, first + count)]


def _reference(events: list[dict]) -> dict[str, dict]:
    frame = pd.DataFrame(events).groupby("userid").agg(views=("id", "size"), id_sum=("id", "sum"))
    return {u: {"userid": u, "views": int(r.views), "id_sum": int(r.id_sum)} for u, r in frame.iterrows()}


def _view(database) -> dict[str, dict]:
    try:
        _, rows = mv.run_query(database, "SELECT userid, views, id_sum FROM busy_users")
    except Exception:  # noqa: BLE001 - not created yet
        return {}
    return {r[0]: {"userid": r[0], "views": r[1], "id_sum": r[2]} for r in rows}


def test_killed_stateful_queries_resume_exactly(tmp_path, broker):
    config = CONFIG.format(prefix=f"kill{os.getpid()}_").replace(
        "  trigger_interval: 1 second\n", "  trigger_interval: 1 second\n  isolation: shared\n")
    root = make_project(tmp_path, {"dsflow.yml": config, "sql/all.sql": SQL})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    scratch = None
    try:
        scratch = _run(options, loaded.project, broker)
    finally:  # stop the drivers even when an assertion failed
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
    assert scratch is not None and not scratch.exists(), "destroy removed the application's temporary files"


def _run(options, project, broker) -> Path:
    """The killed application's scratch folder (adapters/process.py): its Spark files were removed by the restart."""
    rng = random.Random(17)
    events = _events(0, 1_500, rng)
    produce(broker, project, "pageviews", events, "userid")
    wait_for(lambda: changelog_content(broker, project, "user_totals")[0], 240, "the first totals")

    for first in range(1_500, 4_500, 1_000):  # keep writing while the queries run, then kill them mid-stream
        more = _events(first, 1_000, rng)
        produce(broker, project, "pageviews", more, "userid")
        events += more
        time.sleep(0.5)
    state = operations.load(options).workspace.state_backend().read()
    [pid] = {state.resources[q].outputs["pid"] for q in QUERIES}
    identity = query_identity(state.resources[QUERIES[0]].outputs)
    os.killpg(pid, signal.SIGKILL)  # the host and its JVM at once: no shutdown hook cleans Spark's files up
    wait_for(lambda: not process.is_running(pid, identity), 10, "the application to die")
    scratch = identity.scratch
    left = [p for p in scratch.iterdir() if p.name.startswith(("spark-", "blockmgr-"))]
    assert left, f"Spark's local folders (state stores' working copies) in its scratch: {list(scratch.iterdir())}"
    assert changelog_content(broker, project, "user_totals")[0] != _reference(events), "complete before the kill"

    late = _events(4_500, 1_000, rng)
    produce(broker, project, "pageviews", late, "userid")
    events += late
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert sorted((c.address, c.action, c.drift) for c in plan.actionable) == [
        (q, Action.UPDATE, True) for q in sorted(QUERIES)]
    assert operations.apply(loaded, plan).ok
    assert not any(p.exists() for p in left), "the restart emptied the killed host's scratch folder"

    expected = _reference(events)
    wait_for(lambda: changelog_content(broker, project, "user_totals")[0] == expected, 300,
             "the totals to match")
    database = mv.database_path(project.root, project.state_path, project.environment)
    busy = {u: v for u, v in expected.items() if v["views"] >= 185}
    assert busy and len(busy) < len(expected)
    wait_for(lambda: _view(database) == busy, 120, "the view to match")
    wanted = {e["id"] for e in events if e["pageid"] == "Page_1"}
    wait_for(lambda: {json.loads(r["value"])["id"] for r in records(broker, project, "page_one")} == wanted, 120,
             "every Page_1 id in the stream sink")
    return scratch
