"""kill -9 mid-stream of the operators built on Spark's stateful processors: a global aggregate of a changelog,
a GROUP BY over a join of two changelogs (one query), a chain of temporal joins (a stream joined to one
changelog, then LEFT to another) and a single LEFT temporal join. All four run in one shared application
(`runtime.isolation: shared`: one JVM for the four), whose host is killed with SIGKILL while changes and orders
keep arriving; apply sees the dead queries and starts them again on their checkpoints.

After the inputs stop, the two changelogs' final content must equal DuckDB's answer to the same SELECT over
the final snapshots of the inputs, and each join's stream must hold one row per order equal to a plain Python
reference (each order joined with each changelog's newest version at or before its time); a row written twice
(the batch the kill interrupted, replayed) is allowed in a stream, a different or missing one is not.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest

from changelogs import changelog_content, duckdb_answer, keyed_rows, produce_changes
from dsflow.adapters import process
from dsflow.adapters.spark import apps
from dsflow.engine import operations
from projects import make_project
from streaming import CONFIG, produce, records
from waiting import wait_for

pytestmark = pytest.mark.integration

SHARED = CONFIG.replace("  trigger_interval: 1 second\n", "  trigger_interval: 1 second\n  isolation: shared\n")
T0 = 1_700_000_000_000
ROUND_MS = 20_000
SPREAD_MS = 4_000
"""Orders of one round are this far apart at most: under the 5 s watermark delay, so none is late."""
FLUSH = 999_999
KILLED_AFTER = 2
ROUNDS = 5
WAIT = 300
USERS, PRODUCTS = [f"u{i}" for i in range(8)], [f"p{i}" for i in range(5)]

SQL = """\
CREATE CHANGELOG users (userid VARCHAR, tier VARCHAR, score BIGINT, cts BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'timestamp' = 'cts', 'topic.partitions' = 2);
CREATE CHANGELOG products (pid VARCHAR, title VARCHAR, cts BIGINT, PRIMARY KEY (pid))
  WITH ('value.format' = 'json', 'timestamp' = 'cts');
CREATE CHANGELOG orders (order_id BIGINT, userid VARCHAR, amount BIGINT, PRIMARY KEY (order_id))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM buys (id BIGINT, ts BIGINT, userid VARCHAR, pid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);

CREATE CHANGELOG total WITH ('trigger.interval' = '500 ms') AS
  SELECT COUNT(*) AS n, SUM(score) AS s, MIN(score) AS lo, MAX(score) AS hi FROM users;
CREATE CHANGELOG by_tier WITH ('trigger.interval' = '500 ms') AS
  SELECT COALESCE(u.tier, 'none') AS tier, COUNT(*) AS n, SUM(o.amount) AS s, MIN(o.amount) AS lo,
         MAX(o.amount) AS hi
  FROM orders o LEFT JOIN users u ON o.userid = u.userid GROUP BY COALESCE(u.tier, 'none');
CREATE STREAM enriched WITH ('trigger.interval' = '500 ms') AS
  SELECT b.id, u.tier, p.title FROM buys b JOIN users u ON b.userid = u.userid
  LEFT JOIN products p ON b.pid = p.pid;
CREATE STREAM tagged WITH ('trigger.interval' = '500 ms') AS
  SELECT b.id, p.title FROM buys b LEFT JOIN products p ON b.pid = p.pid;
"""
QUERIES = [f"query.analytics.public.{n}" for n in ("total", "by_tier", "enriched", "tagged")]
CHECKS = {  # changelog: (SELECT for DuckDB, key columns)
    "total": ("SELECT COUNT(*) AS n, SUM(score) AS s, MIN(score) AS lo, MAX(score) AS hi FROM users", ()),
    "by_tier": ("SELECT COALESCE(u.tier, 'none') AS tier, COUNT(*) AS n, SUM(o.amount) AS s, MIN(o.amount) AS lo, "
                "MAX(o.amount) AS hi FROM orders o LEFT JOIN users u ON o.userid = u.userid "
                "GROUP BY COALESCE(u.tier, 'none')", ("tier",)),
}


def _round(rng: random.Random, number: int, ids) -> dict:
    """Changes of users, products and orders (a tombstone one time in five), then orders of the stream, all
    timed in this round's slot: the changes just before its orders."""
    ts = T0 + number * ROUND_MS
    users = [(key, None) if rng.random() < 0.2 else
             (key, {"userid": key, "tier": rng.choice(("gold", "basic", None)), "score": rng.randrange(-50, 100),
                    "cts": ts - 1_000})
             for key in (USERS if number == 0 else rng.sample(USERS, 4))]
    products = [(key, None) if number and rng.random() < 0.2 else (key, {"pid": key, "title": f"{key}-{number}",
                                                                         "cts": ts - 1_000})
                for key in (PRODUCTS if number == 0 else rng.sample(PRODUCTS, 2))]
    orders = [(str(key), None) if rng.random() < 0.2 else
              (str(key), {"order_id": key, "userid": rng.choice(USERS + ["nobody"]), "amount": rng.randrange(1, 500)})
              for key in rng.sample(range(1, 40), 12)]
    buys = [{"id": next(ids), "ts": ts + rng.randrange(SPREAD_MS), "userid": rng.choice(USERS),
             "pid": rng.choice(PRODUCTS + ["none"])} for _ in range(25)]
    return {"users": (users, ts - 1_000), "products": (products, ts - 1_000), "orders": (orders, ts - 1_000),
            "buys": buys}


def _produce(broker: str, project, feed: dict, snapshots: dict[str, dict]) -> None:
    for relation in ("users", "products", "orders"):
        changes, ts = feed[relation]
        produce_changes(broker, project, relation, changes, timestamps=[ts] * len(changes))
        for key, value in changes:
            snapshots[relation].pop(key, None) if value is None else snapshots[relation].__setitem__(key, value)
    produce(broker, project, "buys", feed["buys"], "userid")


def _references(feeds: list[dict]) -> dict[str, dict[int, tuple]]:
    """{stream: {order id: row}}: `enriched` joins each order INNER with its user's and LEFT with its product's
    newest version at or before its time (tier, title); `tagged` LEFT with its product's (title)."""
    versions: dict[tuple[str, str], list] = {}
    for feed in feeds:
        for relation in ("users", "products"):
            changes, ts = feed[relation]
            for key, value in changes:
                versions.setdefault((relation, key), []).append((ts, value))

    def as_of(relation: str, key: str, ts: int) -> dict | None:
        known = [value for when, value in versions.get((relation, key), []) if when <= ts]
        return known[-1] if known else None

    out: dict[str, dict[int, tuple]] = {"enriched": {}, "tagged": {}}
    for buy in (b for feed in feeds for b in feed["buys"] if b["id"] != FLUSH):
        user, product = as_of("users", buy["userid"], buy["ts"]), as_of("products", buy["pid"], buy["ts"])
        if user:
            out["enriched"][buy["id"]] = (user["tier"], product and product["title"])
        out["tagged"][buy["id"]] = (product and product["title"],)
    return out


TABLES = {"users": "userid VARCHAR, tier VARCHAR, score BIGINT, cts BIGINT",
          "orders": "order_id BIGINT, userid VARCHAR, amount BIGINT"}


def _stream_rows(broker: str, project, name: str, columns: tuple[str, ...]) -> dict[int, tuple] | None:
    """{id: (columns...)} of a join's stream, the far-future order left out; None when one id was written with two
    different rows (a row written twice, the batch the kill interrupted, is the same row)."""
    out: dict[int, tuple] = {}
    for record in records(broker, project, name):
        row = json.loads(record["value"])
        found = tuple(row.get(c) for c in columns)
        if row["id"] != FLUSH and out.setdefault(row["id"], found) != found:
            return None
    return out


def test_killed_stateful_operators_resume_exactly(tmp_path, broker):
    root = make_project(tmp_path, {"dsflow.yml": SHARED.format(prefix=f"opk{os.getpid()}_"), "sql/all.sql": SQL})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    try:
        _run(options, loaded.project, broker)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def _run(options, project, broker: str) -> None:
    rng = random.Random(23)
    ids = iter(range(1, FLUSH))
    feeds = [_round(rng, number, ids) for number in range(ROUNDS)]
    feeds[-1]["buys"].append({"id": FLUSH, "ts": T0 + 100 * ROUND_MS, "userid": "nobody", "pid": "none"})
    snapshots: dict[str, dict] = {"users": {}, "products": {}, "orders": {}}
    _produce(broker, project, feeds[0], snapshots)
    wait_for(lambda: all(changelog_content(broker, project, name)[0] for name in CHECKS), WAIT,
             "the first aggregates")
    for feed in feeds[1:KILLED_AFTER + 1]:  # more changes while the queries run, then the kill mid-stream
        _produce(broker, project, feed, snapshots)
    time.sleep(1)  # a batch of them under way
    _kill_the_host(options)

    for feed in feeds[KILLED_AFTER + 1:]:
        _produce(broker, project, feed, snapshots)
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert sorted(c.address for c in plan.actionable if c.drift) == sorted(QUERIES)
    assert operations.apply(loaded, plan).ok

    inputs = {name: snapshots[name].values() for name in TABLES}
    for name, (select, keys) in CHECKS.items():
        expected = duckdb_answer(TABLES, inputs, select, keys)
        wait_for(lambda: keyed_rows(changelog_content(broker, project, name)[0].values(), keys) == expected, WAIT,
                 f"{name} to equal DuckDB over the final inputs")
    expected = _references(feeds)
    assert len(expected["enriched"]) > 40 and None in {title for _, title in expected["enriched"].values()}
    assert {(None,)} < set(expected["tagged"].values())
    for name, columns in (("enriched", ("tier", "title")), ("tagged", ("title",))):
        wait_for(lambda: _stream_rows(broker, project, name, columns) == expected[name], WAIT,
                 f"{name}'s rows to equal the reference")


def _kill_the_host(options) -> None:
    state = operations.load(options).workspace.state_backend().read()
    pids = {state.resources[q].outputs["pid"] for q in QUERIES}
    assert len(pids) == 1, "one shared application runs the three"
    pid = pids.pop()
    os.kill(pid, signal.SIGKILL)
    marker = apps.host_marker(state.resources[QUERIES[0]].outputs["app_dir"])
    wait_for(lambda: not process.is_running(pid, marker), 30, "the host to die")
