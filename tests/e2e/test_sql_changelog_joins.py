"""Joins of two changelogs (INNER, LEFT, FULL) on real Spark and a real broker; DuckDB is the oracle.

Random upserts and deletes of orders and users (orders moving between users, users deleted and re-inserted, NULL
foreign keys) are produced in several rounds, each processed as its own micro-batches by every query, started once
per example on its own checkpoint (one start per example, not per round: a stateful query's start is seconds of
planning); the explicit example's last round runs after a restart (one availableNow run of each), so the two
stages' state is read back from the checkpoint, as the kill test's is after a kill -9. After the last round each
output topic, read as a changelog (latest value per key, tombstones remove keys), must equal DuckDB's answer to
the same SELECT over the final snapshots of the two inputs, and so must the FULL join's materialized view (SQLite).
A second test kills a driver with -9 mid-stream and
resumes it. The stages' pure functions are checked in tests/unit/test_changelog_join_stages.py.

CI runs the explicit example and one generated one (a fixed seed); for more, random ones:

    DSFLOW_CJOIN_EXAMPLES=30 python -m pytest tests/e2e/test_sql_changelog_joins.py -q -k duckdb
"""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from support.changelogs import changelog_content, duckdb_answer, keyed_rows, produce_changes
from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.retract import STATE_PROVIDER
from dsflow.adapters.spark.translate import query_spec
from dsflow.adapters.sqlite import mv
from dsflow.engine.executors import query_identity
from support.projects import make_project
from support.streaming import CONFIG, running, streaming_project
from support.waiting import wait_for

pytestmark = pytest.mark.integration

SOURCES = """\
CREATE CHANGELOG orders (order_id BIGINT, user_id VARCHAR, amount BIGINT, PRIMARY KEY (order_id))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE CHANGELOG users (user_id VARCHAR, name VARCHAR, tier VARCHAR, PRIMARY KEY (user_id))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""
QUERIES = {
    "inner_join": "SELECT o.order_id, o.amount, u.name FROM orders o JOIN users u ON o.user_id = u.user_id",
    "left_join": "SELECT o.order_id, o.amount, u.name, u.tier FROM orders o LEFT JOIN users u "
                 "ON o.user_id = u.user_id WHERE o.amount > 10 OR u.tier = 'gold'",
    "full_join": "SELECT o.order_id, o.user_id AS ouid, u.user_id AS uid, u.name FROM orders o "
                 "FULL JOIN users u ON o.user_id = u.user_id",
}
KEYS = {"inner_join": ("order_id",), "left_join": ("order_id",), "full_join": ("order_id", "uid")}
AGGREGATE = ("tier_totals", "SELECT tier, COUNT(*) AS n, SUM(amount) AS total FROM left_join GROUP BY tier")
"""A GROUP BY over a join's changelog (the join written into a changelog, then aggregated with retractions)."""
VIEW = "full_view"
"""The FULL join into a materialized view (SQLite: upserts and deletes by the join's two keys)."""
SQL = SOURCES + "".join(f"CREATE CHANGELOG {name} AS {select};\n" for name, select in [*QUERIES.items(), AGGREGATE]) \
    + f"CREATE MATERIALIZED VIEW {VIEW} AS {QUERIES['full_join']};\n"
EXAMPLES = int(os.environ.get("DSFLOW_CJOIN_EXAMPLES", "1"))

order = st.fixed_dictionaries({"user_id": st.sampled_from(["u0", "u1", "u2", "u3", None]),
                               "amount": st.integers(0, 30)})
user = st.fixed_dictionaries({"name": st.sampled_from(["ann", "bob", None]),
                              "tier": st.sampled_from(["gold", "basic"])})
change = st.one_of(st.tuples(st.just("orders"), st.integers(0, 7), st.one_of(st.none(), order)),
                   st.tuples(st.just("users"), st.integers(0, 3), st.one_of(st.none(), user)))
batches = st.lists(st.lists(change, min_size=1, max_size=20), min_size=2, max_size=2)

MOVES = [  # users with several orders; an order moving to another user; a user deleted, then re-inserted
    [("users", 1, {"name": "ann", "tier": "gold"}), ("users", 2, {"name": "bob", "tier": "basic"}),
     ("orders", 1, {"user_id": "u1", "amount": 20}), ("orders", 2, {"user_id": "u1", "amount": 5}),
     ("orders", 3, {"user_id": "u3", "amount": 12}), ("orders", 4, {"user_id": None, "amount": 1})],
    [("orders", 1, {"user_id": "u2", "amount": 20}), ("users", 1, None), ("users", 3, {"name": None, "tier": "gold"}),
     ("orders", 4, None), ("users", 2, {"name": "bobby", "tier": "gold"})],
    [("users", 1, {"name": "ann", "tier": "basic"}), ("orders", 2, None), ("users", 3, None),
     ("orders", 5, {"user_id": "u1", "amount": 30})],
]


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.generate),  # no shrinking: each example runs Spark queries
          derandomize="DSFLOW_CJOIN_EXAMPLES" not in os.environ)  # CI: the same examples every run
@example(feed=MOVES)
@given(feed=batches)
def test_changelog_joins_equal_duckdb_over_the_final_snapshots(broker, spark, feed):
    work = Path(tempfile.mkdtemp(prefix="dsflow-cjoin-"))
    project = streaming_project(work, broker, SQL)
    restart = feed == MOVES  # its last round after a restart: the stages' state read back from the checkpoint
    try:
        with running(spark, project, (*QUERIES, VIEW), work) as caught_up:
            for changes in feed[:-1] if restart else feed:
                _produce_round(broker, project, changes)
                caught_up()
        if restart:
            _produce_round(broker, project, feed[-1])
            _run_all(spark, project, work, names=(*QUERIES, VIEW))
        _run_all(spark, project, work, names=[AGGREGATE[0]])  # once, over every change the join made
    finally:  # the stages set the session's state store to RocksDB: later tests' new checkpoints keep Spark's default
        spark.conf.unset(STATE_PROVIDER)
    snapshots = _snapshots(feed)
    for name, select in QUERIES.items():
        content, _ = changelog_content(broker, project, name)
        assert _rows(content.values(), KEYS[name]) == _expected(snapshots, select, KEYS[name]), name
    database = mv.database_path(project.root, project.state_path, project.environment)
    columns, rows = mv.run_query(database, f"SELECT * FROM {VIEW}")
    assert _rows([dict(zip(columns, r, strict=False)) for r in rows], KEYS["full_join"]) == \
        _expected(snapshots, QUERIES["full_join"], KEYS["full_join"]), VIEW
    content, _ = changelog_content(broker, project, AGGREGATE[0])
    over_the_join = AGGREGATE[1].replace("FROM left_join", f"FROM ({QUERIES['left_join']})")
    assert _rows(content.values(), ("tier",)) == _expected(snapshots, over_the_join, ("tier",)), AGGREGATE[0]


def _produce_round(broker: str, project, changes) -> None:
    for relation in ("orders", "users"):
        produce_changes(broker, project, relation, [_record(relation, k, v) for r, k, v in changes if r == relation])


def _run_all(spark, project, work: Path, names=tuple(QUERIES)) -> None:
    """One availableNow run of every join query (or of `names`), side by side (each on its own checkpoint)."""
    running = []
    for name in names:
        query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
        spec = query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))
        running.append(start_query(spark, spec, available_now=True))
    for query in running:
        assert query.awaitTermination(600), "a join did not finish"
        assert query.exception() is None, query.exception()


def _record(relation: str, key: int, value: dict | None) -> tuple[str, dict | None]:
    if relation == "orders":
        return str(key), None if value is None else {"order_id": key, **value}
    return f"u{key}", None if value is None else {"user_id": f"u{key}", **value}


def _snapshots(feed) -> dict[str, dict]:
    state: dict[str, dict] = {"orders": {}, "users": {}}
    for changes in feed:
        for relation, key, value in changes:
            name, row = _record(relation, key, value)
            if row is None:
                state[relation].pop(name, None)
            else:
                state[relation][name] = row
    return state


TABLES = {"orders": "order_id BIGINT, user_id VARCHAR, amount BIGINT",
          "users": "user_id VARCHAR, name VARCHAR, tier VARCHAR"}


def _expected(snapshots: dict[str, dict], select: str, keys: tuple[str, ...]) -> dict[tuple, dict]:
    return duckdb_answer(TABLES, {name: snapshots[name].values() for name in TABLES}, select, keys)


def _rows(rows, keys: tuple[str, ...]) -> dict[tuple, dict]:
    return keyed_rows(rows, keys)


KILL_SQL = SOURCES + """\
CREATE CHANGELOG order_users WITH ('trigger.interval' = '500 ms') AS
  SELECT o.order_id, o.user_id AS ouid, u.user_id AS uid, o.amount, u.name FROM orders o
  FULL JOIN users u ON o.user_id = u.user_id;
"""
KILLED = "query.analytics.public.order_users"


def _random_changes(rng, count: int) -> list[tuple[str, int, dict | None]]:
    out = []
    for _ in range(count):
        if rng.random() < 0.6:
            value = None if rng.random() < 0.2 else {"user_id": rng.choice([f"u{i}" for i in range(15)] + [None]),
                                                     "amount": rng.randrange(100)}
            out.append(("orders", rng.randrange(80), value))
        else:
            value = None if rng.random() < 0.25 else {"name": rng.choice(["ann", "bob", "cy"]), "tier": "gold"}
            out.append(("users", rng.randrange(15), value))
    return out


def _produce(broker, project, changes) -> None:
    for relation in ("orders", "users"):
        produce_changes(broker, project, relation, [_record(relation, k, v) for r, k, v in changes if r == relation])


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet, or being replaced
        return {}


def test_killed_changelog_join_driver_resumes_exactly(tmp_path, broker):
    """kill -9 of a FULL join's driver mid-stream; apply restarts it on its checkpoint; the final content of its
    topic equals DuckDB's answer over the final snapshots."""
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"cjoin{os.getpid()}_"), "sql/all.sql": KILL_SQL})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    project, rng, feed = loaded.project, random.Random(31), []
    run = Path(project.root) / ".dsflow/run/dev/queries/analytics.public.order_users"
    try:
        feed.append(_random_changes(rng, 80))
        _produce(broker, project, feed[-1])
        wait_for(lambda: "batch_id" in _json(run / "status.json"), 600, "a first committed batch")
        checkpoint = Path(_json(run / "spec.json")["checkpoint"])
        feed.append(_random_changes(rng, 80))
        _produce(broker, project, feed[-1])
        wait_for(lambda: (checkpoint / "offsets/1").exists(), 300, "a second batch to start")
        time.sleep(0.5)  # kill it mid-batch (here a batch takes seconds): its state and output are not committed
        outputs = operations.load(options).workspace.state_backend().read().resources[KILLED].outputs
        pid = outputs["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not process.is_running(pid, query_identity(outputs)), 10, "the driver to die")
        feed.append(_random_changes(rng, 80))
        _produce(broker, project, feed[-1])
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok  # drift repair: the same checkpoint
        assert _json(run / "spec.json")["checkpoint"] == str(checkpoint), "resumed on another checkpoint"

        select = KILL_SQL.split(" AS\n", 1)[1].split(";", 1)[0]
        expected = _expected(_snapshots(feed), select, ("order_id", "uid"))
        wait_for(lambda: _rows(changelog_content(broker, project, "order_users")[0].values(), ("order_id", "uid"))
                 == expected, 600, "the joined rows to match DuckDB")
    finally:  # stop the driver even when an assertion failed
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
