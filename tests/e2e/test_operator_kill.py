"""kill -9 mid-stream of the operators built on Spark's stateful processors: a global aggregate of a changelog,
a GROUP BY over a join of two changelogs (one query), a chain of temporal joins (a stream joined to one
changelog, then LEFT to another), a single LEFT temporal join and a chain of three changelogs (orders INNER
users LEFT products, into a changelog: adapters/spark/changelog_join.py). All five run in one shared application
(`runtime.isolation: shared`: one JVM for the five), whose host is killed with SIGKILL while changes and orders
keep arriving; apply sees the dead queries and starts them again on their checkpoints. Each changelog query has
written its first rows before the kill, and `order_view` (the slowest) equals DuckDB after the first round of
changes before the next round arrives, a second before the kill (in a run: its batch of that round logged, not
committed, at the kill). Rows of each of the three changelogs are deleted and orders move to other users and
products, before and after the kill (`_chain_changes` checks the feed does that).

After the inputs stop, the three changelogs' final content must equal DuckDB's answer to the same SELECT over
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

from support.changelogs import changelog_content, duckdb_answer, keyed_rows, produce_changes
from dsflow.adapters import process
from dsflow.adapters.spark import apps
from dsflow.engine import operations
from support.projects import make_project
from support.streaming import CONFIG, produce, records
from support.waiting import wait_for

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

CHAIN = ("SELECT o.order_id, o.amount, u.tier, u.score, p.title FROM orders o JOIN users u ON o.userid = u.userid "
         "LEFT JOIN products p ON o.pid = p.pid")
SQL = """\
CREATE CHANGELOG users (userid VARCHAR, tier VARCHAR, score BIGINT, cts BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'timestamp' = 'cts', 'topic.partitions' = 2);
CREATE CHANGELOG products (pid VARCHAR, title VARCHAR, cts BIGINT, PRIMARY KEY (pid))
  WITH ('value.format' = 'json', 'timestamp' = 'cts');
CREATE CHANGELOG orders (order_id BIGINT, userid VARCHAR, pid VARCHAR, amount BIGINT, PRIMARY KEY (order_id))
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
SQL += f"CREATE CHANGELOG order_view WITH ('trigger.interval' = '500 ms') AS\n  {CHAIN};\n"
QUERIES = [f"query.analytics.public.{n}" for n in ("total", "by_tier", "enriched", "tagged", "order_view")]
CHECKS = {  # changelog: (SELECT for DuckDB, key columns)
    "total": ("SELECT COUNT(*) AS n, SUM(score) AS s, MIN(score) AS lo, MAX(score) AS hi FROM users", ()),
    "by_tier": ("SELECT COALESCE(u.tier, 'none') AS tier, COUNT(*) AS n, SUM(o.amount) AS s, MIN(o.amount) AS lo, "
                "MAX(o.amount) AS hi FROM orders o LEFT JOIN users u ON o.userid = u.userid "
                "GROUP BY COALESCE(u.tier, 'none')", ("tier",)),
    "order_view": (CHAIN, ("order_id",)),
}


def _round(rng: random.Random, number: int, ids, extra: random.Random) -> dict:
    """Changes of users, products and orders (a tombstone one time in five), then orders of the stream, all
    timed in this round's slot: the changes just before its orders. What `order_view` added is drawn from `extra`
    (the orders' products; after the kill, one more user deleted), so every other draw is the one the test made
    before. (Drawn from `rng`, they moved the other draws; in that feed a batch read one buys partition into the
    next round while the broker's end offset of the other still left out two orders of this round, which the next
    batch read behind the watermark and dropped as late.)"""
    ts = T0 + number * ROUND_MS
    users = [(key, None) if rng.random() < 0.2 else
             (key, {"userid": key, "tier": rng.choice(("gold", "basic", None)), "score": rng.randrange(-50, 100),
                    "cts": ts - 1_000})
             for key in (USERS if number == 0 else rng.sample(USERS, 4))]
    users += [(extra.choice(USERS), None)] if number > KILLED_AFTER else []
    products = [(key, None) if number and rng.random() < 0.2 else (key, {"pid": key, "title": f"{key}-{number}",
                                                                         "cts": ts - 1_000})
                for key in (PRODUCTS if number == 0 else rng.sample(PRODUCTS, 2))]
    orders = [(str(key), None) if rng.random() < 0.2 else
              (str(key), {"order_id": key, "userid": rng.choice(USERS + ["nobody"]),
                          "pid": extra.choice(PRODUCTS + ["none"]), "amount": rng.randrange(1, 500)})
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


def _chain_changes(feeds: list[dict]) -> set[tuple[str, bool]]:
    """What the feed does to `order_view`'s inputs, before the kill (False) and after it (True): (relation, _) when
    a row there is deleted, ("userid" or "pid", _) when an order that was there moves to another user or product."""
    seen: dict[str, dict] = {"users": {}, "products": {}, "orders": {}}
    out: set[tuple[str, bool]] = set()
    for number, feed in enumerate(feeds):
        for relation, rows in seen.items():
            for key, value in feed[relation][0]:
                old, after = rows.pop(key, None), number > KILLED_AFTER
                if old and value is None:
                    out.add((relation, after))
                elif old and relation == "orders":
                    out |= {(column, after) for column in ("userid", "pid") if old[column] != value[column]}
                if value:
                    rows[key] = value
    return out


TABLES = {"users": "userid VARCHAR, tier VARCHAR, score BIGINT, cts BIGINT",
          "products": "pid VARCHAR, title VARCHAR, cts BIGINT",
          "orders": "order_id BIGINT, userid VARCHAR, pid VARCHAR, amount BIGINT"}


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
    try:  # a first apply that fails part way is torn down too
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _run(options, loaded.project, broker)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def _run(options, project, broker: str) -> None:
    rng, extra = random.Random(23), random.Random(29)
    ids = iter(range(1, FLUSH))
    feeds = [_round(rng, number, ids, extra) for number in range(ROUNDS)]
    feeds[-1]["buys"].append({"id": FLUSH, "ts": T0 + 100 * ROUND_MS, "userid": "nobody", "pid": "none"})
    assert _chain_changes(feeds) == {(c, after) for c in ("users", "products", "orders", "userid", "pid")
                                     for after in (False, True)}
    snapshots: dict[str, dict] = {"users": {}, "products": {}, "orders": {}}
    _produce(broker, project, feeds[0], snapshots)
    wait_for(lambda: all(changelog_content(broker, project, name)[0] for name in CHECKS), WAIT,
             "the first aggregates")
    for feed in feeds[1:KILLED_AFTER]:  # more changes while the queries run
        _produce(broker, project, feed, snapshots)
    select, keys = CHECKS["order_view"]  # the chain (the slowest to start) at work on them before the kill
    progressed = duckdb_answer(TABLES, {name: snapshots[name].values() for name in TABLES}, select, keys)
    wait_for(lambda: keyed_rows(changelog_content(broker, project, "order_view")[0].values(), keys) == progressed,
             WAIT, f"order_view to equal DuckDB after round {KILLED_AFTER - 1}")
    _produce(broker, project, feeds[KILLED_AFTER], snapshots)  # then the kill mid-stream
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
        wait_for(lambda name=name, keys=keys, expected=expected:
                 keyed_rows(changelog_content(broker, project, name)[0].values(), keys) == expected, WAIT,
                 f"{name} to equal DuckDB over the final inputs")
    expected = _references(feeds)
    assert len(expected["enriched"]) > 40 and None in {title for _, title in expected["enriched"].values()}
    assert {(None,)} < set(expected["tagged"].values())
    for name, columns in (("enriched", ("tier", "title")), ("tagged", ("title",))):
        wait_for(lambda name=name, columns=columns: _stream_rows(broker, project, name, columns) == expected[name],
                 WAIT, f"{name}'s rows to equal the reference")


def _kill_the_host(options) -> None:
    state = operations.load(options).workspace.state_backend().read()
    pids = {state.resources[q].outputs["pid"] for q in QUERIES}
    assert len(pids) == 1, "one shared application runs them all"
    pid = pids.pop()
    os.kill(pid, signal.SIGKILL)
    identity = apps.host_identity(state.resources[QUERIES[0]].outputs["app_dir"])
    wait_for(lambda: not process.is_running(pid, identity), 30, "the host to die")
