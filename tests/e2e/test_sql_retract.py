"""GROUP BY over a changelog, with retractions, on real Spark and a real broker; DuckDB is the oracle.

Random changes of a few keys (upserts that move keys between groups, deletes of the current MIN/MAX, null values,
re-inserts) are produced in several rounds, each processed as its own micro-batches by every query, started once
per example on its own checkpoint (one query start per example, not per round: a start of a stateful query is
seconds of planning). The explicit example's last round runs after a restart (one availableNow run), so the state
is read back from the checkpoint; the kill test below reads it back after a kill -9 mid-stream. After the last
round the output topic, read as a changelog (latest value per key, tombstones remove keys), must equal DuckDB's
answer to the same SELECT over the final snapshot of the input.

CI runs the explicit example and two generated ones (a fixed seed); for more, random ones (each ~25 s):

    DSFLOW_RETRACT_EXAMPLES=50 python -m pytest tests/e2e/test_sql_retract.py -q
"""

from __future__ import annotations

import math
import os
import random
import signal
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from support.changelogs import changelog_content, duckdb_answer, produce_changes
from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.spark.retract import STATE_PROVIDER
from dsflow.adapters.sqlite import mv
from dsflow.engine.executors import query_identity
from support.projects import make_project
from support.streaming import CONFIG, run, running, streaming_project
from support.waiting import wait_for

pytestmark = pytest.mark.integration

SOURCE = """\
CREATE CHANGELOG users (userid VARCHAR, region VARCHAR, team VARCHAR, score BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""
QUERIES = {
    "per_region": "SELECT region, COUNT(*) AS n, SUM(score) AS total, AVG(score) AS mean, MIN(score) AS lo, "
                  "MAX(score) AS hi, COUNT(score) AS scored, COUNT(DISTINCT team) AS teams "
                  "FROM users WHERE region IS NOT NULL GROUP BY region",
    "per_team": "SELECT region, team, COUNT(*) AS n, MAX(score) * 2 AS hi2 FROM users WHERE score > 20 "
                "GROUP BY region, team HAVING COUNT(*) < 3",
}
KEYS = {"per_region": ("region",), "per_team": ("region", "team")}
SQL = SOURCE + "".join(f"CREATE CHANGELOG {name} AS {select};\n" for name, select in QUERIES.items())
EXAMPLES = int(os.environ.get("DSFLOW_RETRACT_EXAMPLES", "2"))

row = st.one_of(st.none(), st.fixed_dictionaries({
    "region": st.sampled_from(["eu", "us", "apac", None]), "team": st.sampled_from(["a", "b", "c"]),
    "score": st.one_of(st.none(), st.integers(-5, 100))}))
change = st.tuples(st.integers(0, 7), row)
batches = st.lists(st.lists(change, min_size=1, max_size=25), min_size=2, max_size=3)

EXTREMES = [  # the MAX and MIN of a group deleted, a key moved to another group, a group emptied and refilled
    [(1, {"region": "eu", "team": "a", "score": 10}), (2, {"region": "eu", "team": "b", "score": 90}),
     (3, {"region": "us", "team": "a", "score": 30})],
    [(2, None), (1, {"region": "us", "team": "a", "score": 10}), (3, {"region": "us", "team": "a", "score": 40}),
     (4, {"region": "eu", "team": "c", "score": 50})],
    [(4, None), (5, {"region": "eu", "team": "c", "score": 70}), (3, None)],
]


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.generate),  # no shrinking: each example runs Spark queries
          derandomize="DSFLOW_RETRACT_EXAMPLES" not in os.environ)  # CI: the same examples every run
@example(feed=EXTREMES)
@given(feed=batches)
def test_aggregations_of_a_changelog_equal_duckdb_over_the_final_snapshot(broker, spark, feed):
    work = Path(tempfile.mkdtemp(prefix="dsflow-retract-"))
    project = streaming_project(work, broker, SQL)
    restart = feed == EXTREMES  # its last round after a restart: the state read back from the checkpoint
    try:
        with running(spark, project, QUERIES, work) as caught_up:
            for changes in feed[:-1] if restart else feed:
                produce_changes(broker, project, "users", [(f"u{k}", _value(k, v)) for k, v in changes])
                caught_up()
        if restart:
            produce_changes(broker, project, "users", [(f"u{k}", _value(k, v)) for k, v in feed[-1]])
            for name in QUERIES:
                run(spark, project, name, work)
    finally:  # the retraction stages set the session's state store to RocksDB: new checkpoints of later tests keep
        spark.conf.unset(STATE_PROVIDER)  # Spark's default (a checkpoint records its own provider)
    snapshot = _snapshot(feed)
    for name, select in QUERIES.items():
        content, _ = changelog_content(broker, project, name)
        assert _rows(content.values(), KEYS[name]) == _expected(snapshot, select, KEYS[name]), name


def _value(key: int, value: dict | None) -> dict | None:
    return None if value is None else {"userid": f"u{key}", **value}


def _snapshot(feed) -> dict[str, dict]:
    state: dict[str, dict] = {}
    for changes in feed:
        for key, value in changes:
            if value is None:
                state.pop(f"u{key}", None)
            else:
                state[f"u{key}"] = _value(key, value)
    return state


def _expected(snapshot: dict[str, dict], select: str, keys: tuple[str, ...]) -> dict[tuple, dict]:
    return duckdb_answer({"users": "userid VARCHAR, region VARCHAR, team VARCHAR, score BIGINT"},
                         {"users": snapshot.values()}, select, keys, _number)


def _rows(rows, keys: tuple[str, ...]) -> dict[tuple, dict]:
    """{group: row}, with absent (null) fields as None and numbers rounded (AVG is a float)."""
    out = {}
    for found in rows:
        tidy = {k: _number(v) for k, v in found.items() if v is not None}
        out[tuple(found.get(k) for k in keys)] = tidy
    return out


def _number(value):
    return round(float(value), 9) if isinstance(value, float) and math.isfinite(value) else value


KILL_SQL = SOURCE + """\
CREATE CHANGELOG region_stats WITH ('trigger.interval' = '500 ms') AS
  SELECT region, COUNT(*) AS n, SUM(score) AS total, MIN(score) AS lo, MAX(score) AS hi
  FROM users WHERE region IS NOT NULL GROUP BY region;
CREATE MATERIALIZED VIEW region_view WITH ('trigger.interval' = '500 ms') AS
  SELECT region, COUNT(*) AS n, MAX(score) AS hi FROM users WHERE region IS NOT NULL GROUP BY region;
"""
KILLED = [f"query.analytics.public.{n}" for n in ("region_stats", "region_view")]


def _random_changes(rng, count: int) -> list[tuple[int, dict | None]]:
    return [(rng.randrange(60), None if rng.random() < 0.2 else
             {"region": rng.choice(["eu", "us", "apac", "latam", None]), "team": "a", "score": rng.randrange(1000)})
            for _ in range(count)]


def test_killed_retracting_queries_resume_exactly(tmp_path, broker):
    """kill -9 of the shared application running a changelog aggregation (a changelog sink and a view sink)
    mid-stream; apply restarts it and both queries on their checkpoints; the final content equals DuckDB's answer,
    in the topic and the view."""
    config = CONFIG.format(prefix=f"retract{os.getpid()}_").replace(
        "  trigger_interval: 1 second\n", "  trigger_interval: 1 second\n  isolation: shared\n")
    root = make_project(tmp_path, {"dsflow.yml": config, "sql/all.sql": KILL_SQL})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    project, rng, feed = loaded.project, random.Random(23), []
    try:
        for _ in range(4):  # keep changing while the queries run, then kill their host mid-stream
            feed.append(_random_changes(rng, 300))
            produce_changes(broker, project, "users", [(f"u{k}", _value(k, v)) for k, v in feed[-1]])
            wait_for(lambda: changelog_content(broker, project, "region_stats")[0], 240, "the first groups")
            time.sleep(0.5)
        state = operations.load(options).workspace.state_backend().read()
        [pid] = {state.resources[q].outputs["pid"] for q in KILLED}
        identity = query_identity(state.resources[KILLED[0]].outputs)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not process.is_running(pid, identity), 10, "the host to die")
        feed.append(_random_changes(rng, 300))
        produce_changes(broker, project, "users", [(f"u{k}", _value(k, v)) for k, v in feed[-1]])
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok

        snapshot = _snapshot(feed)
        select = KILL_SQL.split(" AS\n", 1)[1].split(";", 1)[0]
        expected = _expected(snapshot, select, ("region",))
        wait_for(lambda: _rows(changelog_content(broker, project, "region_stats")[0].values(), ("region",))
                 == expected, 300, "the groups to match DuckDB")
        database = mv.database_path(project.root, project.state_path, project.environment)
        view_expected = {k: {"region": v["region"], "n": v["n"], "hi": v["hi"]} for k, v in expected.items()}

        def view() -> dict:
            try:
                _, rows = mv.run_query(database, "SELECT region, n, hi FROM region_view")
            except Exception:  # noqa: BLE001 - not created yet
                return {}
            return _rows([{"region": r[0], "n": r[1], "hi": r[2]} for r in rows], ("region",))

        wait_for(lambda: view() == view_expected, 120, "the view to match DuckDB")
    finally:  # stop the drivers even when an assertion failed
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
