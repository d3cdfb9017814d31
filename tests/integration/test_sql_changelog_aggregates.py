"""Aggregates over changelogs with retractions, beyond one GROUP BY over one changelog: on real Spark and a real
broker, against DuckDB over the snapshots of the inputs after every micro-batch (not only the last).

    total        CHANGELOG  COUNT(*), SUM, MIN, MAX, AVG, COUNT(x) without GROUP BY over a changelog (key '{}')
    eu_view      VIEW       COUNT(*), MIN, MAX without GROUP BY, WHERE region = 'eu' (one row, replaced)
    order_users  CHANGELOG  orders LEFT JOIN users (a join of two changelogs written into a changelog) ...
    tier_stats   CHANGELOG  ... then GROUP BY tier over order_users in a second query: COUNT, SUM, MIN, MAX, AVG
    tier_once    CHANGELOG  the same GROUP BY over the join in one query (the join's stages, then the retraction's)

The batches insert; update (users change tier and region, moving their orders to other groups); delete the
current MIN and MAX of everything, of eu and of a tier group; delete a user (their orders' tier becomes 'none');
empty eu through WHERE alone; then delete every row (the global aggregates become COUNT 0 and NULLs, DuckDB's
answer over an empty table). Every query runs on its own checkpoint, started once for the first batches (each
processed, then checked, before the next is produced: one start, not one per batch, as a stateful query's start is
seconds of planning) and restarted for the last (one availableNow run of each: the state read back from the
checkpoint). The stages of a global aggregate are also checked in
plain Python below (hypothesis), with the loader's choices.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.changelogs import changelog_content, duckdb_answer, keyed_rows, produce_changes
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.retract import STATE_PROVIDER
from dsflow.adapters.spark.retract_state import apply_changes, empty_accumulator, group_row, key_changes
from dsflow.adapters.spark.translate import query_spec
from dsflow.adapters.sqlite import mv
from dsflow.sql.aggregates import GLOBAL_KEY
from dsflow.load.project import check_project, load_project
from support.projects import make_project
from support.streaming import produce, running, streaming_project

SOURCES = """\
CREATE CHANGELOG users (userid VARCHAR, region VARCHAR, tier VARCHAR, score BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE CHANGELOG orders (order_id BIGINT, userid VARCHAR, amount BIGINT, PRIMARY KEY (order_id))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""
JOIN = ("SELECT o.order_id, o.amount, COALESCE(u.tier, 'none') AS tier FROM orders o LEFT JOIN users u "
        "ON o.userid = u.userid")
"""No NULL group: a NULL single-column key is a record of null key, which the producer's partitioner (murmur2_random)
spreads over partitions, so its updates have no order a reader can follow."""
BY_TIER = "COUNT(*) AS n, SUM(amount) AS s, MIN(amount) AS lo, MAX(amount) AS hi, AVG(amount) AS mean"
FIRST = {  # name: (kind, SELECT, key columns); they read the inputs
    "total": ("CHANGELOG", "SELECT COUNT(*) AS n, SUM(score) AS s, MIN(score) AS lo, MAX(score) AS hi, "
                           "AVG(score) AS mean, COUNT(score) AS scored FROM users", ()),
    "eu_view": ("MATERIALIZED VIEW", "SELECT COUNT(*) AS n, MIN(score) AS lo, MAX(score) AS hi FROM users "
                                     "WHERE region = 'eu'", ()),
    "order_users": ("CHANGELOG", JOIN, ("order_id",)),
    "tier_once": ("CHANGELOG", "SELECT COALESCE(u.tier, 'none') AS tier, " + BY_TIER.replace("(amount)", "(o.amount)")
                  + " FROM orders o LEFT JOIN users u ON o.userid = u.userid GROUP BY COALESCE(u.tier, 'none')",
                  ("tier",)),
}
SECOND = {"tier_stats": ("CHANGELOG", f"SELECT tier, {BY_TIER} FROM order_users GROUP BY tier", ("tier",))}
"""Reads order_users: run after it."""
SQL = SOURCES + "".join(f"CREATE {kind} {name} AS {select};\n"
                        for name, (kind, select, _) in {**FIRST, **SECOND}.items())


def _user(key: str, region: str | None, tier: str | None, score: int | None) -> tuple[str, dict]:
    return key, {"userid": key, "region": region, "tier": tier, "score": score}


def _order(key: int, user: str | None, amount: int) -> tuple[str, dict]:
    return str(key), {"order_id": key, "userid": user, "amount": amount}


BATCHES = [  # (users changes, orders changes) per micro-batch
    ([_user("u1", "eu", "gold", 10), _user("u2", "eu", "basic", 90), _user("u3", "us", "gold", 30),
      _user("u4", "us", None, None)],
     [_order(1, "u1", 5), _order(2, "u1", 70), _order(3, "u2", 20), _order(4, "u3", 1), _order(5, None, 40),
      _order(6, "u9", 100)]),
    # users: the MAX (u2: 90) deleted and the MIN (u1: 10) moved out of eu (eu is empty: by WHERE and a delete)
    # and updated twice; u3 deleted (order 3 moves to it: NULL tier). orders: the MAX of gold (2: 70), of the
    # NULL tier (6: 100) and the MIN of everything (4: 1) deleted
    ([("u2", None), _user("u1", "us", "basic", 10), ("u3", None), _user("u5", "us", "gold", 50),
      _user("u1", "us", "basic", 15)],
     [("2", None), ("4", None), _order(3, "u3", 25), _order(7, "u5", 8), ("6", None), _order(8, "u1", 33)]),
    # every row deleted (and a tombstone of an unknown key): the global aggregates become COUNT 0 and NULLs, every
    # group of the joins goes. (Refilling after this is left to the stages' test below: each run costs Spark time.)
    ([("u1", None), ("u4", None), ("u5", None), ("u7", None)], [(str(k), None) for k in (1, 3, 5, 7, 8)]),
]
EMPTY = 2
"""The batch after which both inputs are empty."""


@pytest.mark.integration
def test_global_and_join_aggregates_of_changelogs_equal_duckdb_after_every_batch(broker, spark):
    work = Path(tempfile.mkdtemp(prefix="dsflow-clagg-"))
    project = streaming_project(work, broker, SQL)
    snapshots: dict[str, dict] = {"users": {}, "orders": {}}
    try:
        with running(spark, project, [*FIRST, *SECOND], work) as caught_up:  # FIRST's caught up before SECOND's
            for number, (users, orders) in enumerate(BATCHES[:-1]):
                _produce(broker, project, snapshots, users, orders)
                caught_up()
                _check(broker, project, snapshots, number)
        _produce(broker, project, snapshots, *BATCHES[-1])  # after a restart: the state read back from checkpoints
        _run_all(spark, project, work, FIRST)
        _run_all(spark, project, work, SECOND)
        _check(broker, project, snapshots, len(BATCHES) - 1)
    finally:  # the stages set the session's state store to RocksDB: later tests' new checkpoints keep Spark's default
        spark.conf.unset(STATE_PROVIDER)


def _produce(broker, project, snapshots: dict[str, dict], users, orders) -> None:
    produce_changes(broker, project, "users", users)
    produce_changes(broker, project, "orders", orders)
    for relation, changes in (("users", users), ("orders", orders)):
        for key, value in changes:
            snapshots[relation].pop(key, None) if value is None else snapshots[relation].__setitem__(key, value)


def _run_all(spark, project, work: Path, names) -> None:
    """One availableNow run of each query in turn (side by side, a loaded machine timed out starting their Python
    workers), each on its own checkpoint."""
    for name in names:
        query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
        spec = query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))
        running = start_query(spark, spec, available_now=True)
        assert running.awaitTermination(300), f"{name} did not finish"
        assert running.exception() is None, running.exception()


def _check(broker, project, snapshots: dict[str, dict], number: int) -> None:
    for name, (kind, select, keys) in {**FIRST, **SECOND}.items():
        expected = _expected(snapshots, select.replace("FROM order_users", f"FROM ({JOIN})"), keys)
        if kind == "MATERIALIZED VIEW":
            database = mv.database_path(project.root, project.state_path, project.environment)
            columns, rows = mv.run_query(database, f"SELECT * FROM {name}")
            actual = _rows([dict(zip(columns, r, strict=False)) for r in rows], keys)
        else:
            content, _ = changelog_content(broker, project, name)
            if not keys:
                assert set(content) == {GLOBAL_KEY}, (number, name, content)  # one record key: '{}'
            actual = _rows(content.values(), keys)
        assert actual == expected, (number, name)
    if number == EMPTY:  # the case this batch is for
        assert _expected(snapshots, FIRST["total"][1], ()) == {(): {"n": 0, "scored": 0}}
    if number == 1:
        assert _expected(snapshots, FIRST["eu_view"][1], ()) == {(): {"n": 0}}


TABLES = {"users": "userid VARCHAR, region VARCHAR, tier VARCHAR, score BIGINT",
          "orders": "order_id BIGINT, userid VARCHAR, amount BIGINT"}


def _expected(snapshots: dict[str, dict], select: str, keys: tuple[str, ...]) -> dict[tuple, dict]:
    return duckdb_answer(TABLES, {name: snapshots[name].values() for name in TABLES}, select, keys, _number)


def _rows(rows, keys: tuple[str, ...]) -> dict[tuple, dict]:
    """Numbers rounded: AVG is a float."""
    return keyed_rows(rows, keys, _number)


def _number(value):
    return round(float(value), 9) if isinstance(value, float) and math.isfinite(value) else value


# --- the stages of a global aggregate in plain Python, and what validates (pure: no broker, no Spark) ----------


KINDS = ["count_star", "count", "sum", "avg", "min", "max"]


def _global_pipeline(batches) -> list[dict | None]:
    """Run stage 1 (touch=True) and stage 2 of a global aggregate over batches of (key, value or None, kept by
    WHERE); the row after each batch (None: nothing emitted yet)."""
    by_key: dict[str, list] = {}
    acc, existed, row, offset, out = empty_accumulator(KINDS), False, None, 0, []
    for batch in batches:
        per_key: dict[str, list] = {}
        for key, value, kept in batch:
            offset += 1
            inputs = json.dumps({} if value is None else {f"__a{i}": value for i in range(1, len(KINDS))})
            per_key.setdefault(key, []).append((offset, value is not None and kept, GLOBAL_KEY, inputs))
        changes = []
        for key, rows in per_key.items():
            new, emitted = key_changes(by_key.get(key), rows, touch=True)
            by_key.pop(key, None) if new is None else by_key.__setitem__(key, new)
            changes += emitted
        if changes:
            assert {g for g, _, _ in changes} == {GLOBAL_KEY}
            kept, emitted_row = group_row(apply_changes(acc, KINDS, [(s, json.loads(a)) for _, s, a in changes]),
                                          KINDS, existed, True)
            acc, existed = kept, True
            assert emitted_row[0] is True, "a global aggregate's row is never deleted"
            row = emitted_row[1]
        out.append(row)
    return out


def _sql_answer(snapshot: dict[str, int]) -> dict:
    values = list(snapshot.values())
    return {"__r0": len(values), "__r1": len(values), "__r2": sum(values) if values else None,
            "__r3": sum(values) / len(values) if values else None, "__r4": min(values, default=None),
            "__r5": max(values, default=None)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("abcd"), st.one_of(st.none(), st.integers(-9, 9)),
                                   st.booleans()), max_size=8), min_size=1, max_size=6))
def test_global_aggregate_stages_equal_sql_over_every_snapshot(batches):
    """After each batch that read anything the row equals SQL's global aggregate over the rows WHERE keeps (COUNT 0
    and NULLs when none); the current MIN/MAX deleted finds the next one."""
    rows, snapshot, seen = _global_pipeline(batches), {}, False
    for batch, row in zip(batches, rows, strict=False):
        for key, value, kept in batch:
            snapshot.pop(key, None) if value is None or not kept else snapshot.__setitem__(key, value)
        seen = seen or bool(batch)
        assert row == (_sql_answer(snapshot) if seen else None)


def test_deleting_every_row_leaves_count_zero_and_nulls():
    rows = _global_pipeline([[("a", 5, True), ("b", 9, True)], [("b", None, True)], [("a", None, True)],
                             [("c", 3, False)], [("x", None, True)]])
    assert [r["__r5"] for r in rows] == [9, 5, None, None, None]
    assert rows[2] == rows[3] == rows[4] == {"__r0": 0, "__r1": 0, "__r2": None, "__r3": None, "__r4": None,
                                             "__r5": None}


VALIDATED = SOURCES + """\
CREATE CHANGELOG total AS SELECT COUNT(*) AS n, MIN(score) AS lo FROM users WHERE region = 'eu';
CREATE MATERIALIZED VIEW total_view AS SELECT COUNT(*) AS n, MAX(score) AS hi FROM users;
CREATE CHANGELOG tiers AS SELECT u.tier, COUNT(*) AS n, MIN(o.amount) AS lo FROM orders o
  LEFT JOIN users u ON o.userid = u.userid WHERE o.amount > 2 GROUP BY u.tier;
CREATE MATERIALIZED VIEW pairs AS SELECT COUNT(*) AS n FROM orders o FULL JOIN users u ON o.userid = u.userid;
"""


def test_global_and_join_aggregates_of_changelogs_validate_and_translate(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/all.sql": VALIDATED}))
    specs = {q.fqn.rsplit(".", 1)[1]: (q, query_spec(project, q, "v", "/tmp/c", "/tmp/s")) for q in project.queries}
    for name in ("total", "total_view", "pairs"):
        query, spec = specs[name]
        assert (query.key_columns, project.relation(query.sink).primary_key, spec.sink.key_columns) == ((), (), [])
        assert spec.retract.groups == 0 and f"'{GLOBAL_KEY}' AS __key" in spec.retract.post_sql
    query, spec = specs["tiers"]
    assert (query.key_columns, project.relation(query.sink).primary_key) == (("tier",), ("tier",))
    assert query.changelog_join.left_keys == ("userid",) and spec.changelog_join is not None
    assert spec.select_sql.startswith("SELECT __cj.__okey AS __pk, CAST(0 AS BIGINT) AS __offset, "
                                      "COALESCE((`o`.`amount` > 2), FALSE) AND __cj.__alive AS __keep")
    assert "__keep" in specs["pairs"][1].retract.post_sql


def test_e163_a_global_aggregate_of_a_changelog_into_a_table(tmp_path):
    """Into any table (even one that merges deletes): E163 at the statement; a join of streams aggregated: E045."""
    stores = (f"stores:\n  - name: ice\n    type: iceberg\n    properties:\n      warehouse: {tmp_path / 'wh'}\n"
              "  - name: lake\n    type: filesystem\n    properties:\n      path: lake\n")
    sql = ("CREATE TABLE t1 WITH ('store' = 'ice') AS\n  SELECT COUNT(*) AS n FROM users;\n"
           "CREATE TABLE t2 WITH ('store' = 'lake') AS\n  SELECT COUNT(*) AS n FROM users;\n")
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql, "stores/lake.yml": stores})
    assert [(d.code, d.location.line) for d in check_project(root).diagnostics] == [("DSF-E163", 1), ("DSF-E163", 3)]


# --- aggregations and ROW_NUMBER over a regular join of streams (sql/keyed_join.py, sql/stacked.py) -----------

AUCTIONS = """\
CREATE STREAM auction (id BIGINT, category BIGINT, `dateTime` TIMESTAMP(3), expires TIMESTAMP(3))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM bid (auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""
BOUNDED = "FROM auction A, bid B WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires"
KEYED = {  # name: (SELECT, key columns): Nexmark q4 and q9, over the two streams above
    "avg_final": (f"SELECT Q.category, AVG(Q.final) AS final, COUNT(*) AS n FROM (SELECT MAX(B.price) AS final, "
                  f"A.category {BOUNDED} GROUP BY A.id, A.category) Q GROUP BY Q.category", ("category",)),
    "winner": (f"SELECT id, category, bidder, price, bid_time FROM (SELECT A.*, B.bidder, B.price, B.`dateTime` AS "
               f"bid_time, ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.`dateTime` ASC) AS rn "
               f"{BOUNDED}) WHERE rn <= 1", ("id",)),
    # an aggregation of an aggregation of one stream (each record a row keyed by its place): a bidder's bids, and
    # the most on one auction, as a count per (bidder, auction) grows (its old count retracted from the SUM)
    "most_bids": ("SELECT Q.bidder, SUM(Q.n) AS bids, MAX(Q.n) AS most FROM (SELECT bidder, auction, COUNT(*) AS n "
                  "FROM bid GROUP BY bidder, auction) Q GROUP BY Q.bidder", ("bidder",)),
}
KEYED_TABLES = {"auction": "id BIGINT, category BIGINT, dateTime TIMESTAMP, expires TIMESTAMP",
                "bid": "auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP"}


def _auction(id_: int, category: int, start: int, end: int) -> dict:
    return {"id": id_, "category": category, "dateTime": _at(start), "expires": _at(end)}


def _bid(auction: int, bidder: int, price: int, second: int) -> dict:
    return {"auction": auction, "bidder": bidder, "price": price, "dateTime": _at(second)}


def _at(second: int) -> str:
    return f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}.000Z"


AUCTION_ROUNDS = [  # (auctions, bids) per micro-batch
    # auction 4's bid arrives before auction 4; auction 1's price 1000 is after its end, auction 3's 900 before its
    # start: neither counts
    ([_auction(1, 1, 0, 100), _auction(2, 1, 0, 100), _auction(3, 2, 50, 200)],
     [_bid(1, 10, 100, 10), _bid(2, 11, 50, 20), _bid(3, 12, 70, 60), _bid(4, 13, 500, 30), _bid(1, 14, 1000, 150),
      _bid(3, 15, 900, 40)]),
    # auction 4 joins its earlier bid (category 2's AVG moves); auction 1's MAX grows (100 retracted from category
    # 1's AVG, its winner replaced: bidder 10 bids again, and a third time lower, which changes nothing); auction 2
    # gets an equal price earlier (the earlier bid wins the tie); auction 3's MAX grows (9999 is after its end);
    # auction 5 has no bid in its bounds: no row
    ([_auction(4, 2, 0, 100), _auction(5, 3, 0, 10)],
     [_bid(1, 10, 300, 90), _bid(2, 17, 50, 15), _bid(3, 18, 9999, 201), _bid(1, 10, 200, 95), _bid(3, 10, 80, 199),
      _bid(5, 21, 5, 11)]),
]


@pytest.mark.integration
def test_q4_and_q9_over_a_regular_join_of_streams_equal_duckdb_after_every_batch(broker, spark):
    """Nexmark q4 (AVG per category of each auction's MAX bid in its time bounds), q9 (each auction's top bid,
    ties by the earlier bid) and an aggregation of an aggregation of one stream, over two micro-batches of one
    running query each: after each, the changelogs equal DuckDB's answer over every record so far, as bids raise a
    MAX (retracted from the AVG), arrive before their auction, or fall outside its bounds."""
    work = Path(tempfile.mkdtemp(prefix="dsflow-keyed-"))
    sql = AUCTIONS + "".join(f"CREATE CHANGELOG {name} AS {select};\n" for name, (select, _) in KEYED.items())
    project = streaming_project(work, broker, sql)
    seen: dict[str, list[dict]] = {"auction": [], "bid": []}
    winners, most = [], []
    try:
        with running(spark, project, list(KEYED), work) as caught_up:
            for auctions, bids in AUCTION_ROUNDS:
                produce(broker, project, "auction", auctions, key="id")
                produce(broker, project, "bid", bids, key="auction")
                seen["auction"] += auctions
                seen["bid"] += bids
                caught_up()
                snapshots = {k: [{**r, "dateTime": _stamp(r["dateTime"]), **({"expires": _stamp(r["expires"])}
                                  if "expires" in r else {})} for r in rows] for k, rows in seen.items()}
                for name, (select, keys) in KEYED.items():
                    expected = duckdb_answer(KEYED_TABLES, snapshots, select.replace("`", ""), keys, _number)
                    content, _ = changelog_content(broker, project, name)
                    got = _rows(content.values(), keys)
                    if name == "winner":
                        got = {k: {c: _stamp(v) if c == "bid_time" else v for c, v in row.items()}
                               for k, row in got.items()}
                        expected = {k: {c: v.replace(tzinfo=None) if c == "bid_time" else v for c, v in row.items()}
                                    for k, row in expected.items()}
                        winners.append({k[0]: row["bidder"] for k, row in got.items()})
                    if name == "most_bids":
                        most.append({c: got[(10,)][c] for c in ("bids", "most")})
                    assert got == expected, (name, len(seen["bid"]))
    finally:
        spark.conf.unset(STATE_PROVIDER)
    assert winners == [{1: 10, 2: 11, 3: 12}, {1: 10, 2: 17, 3: 10, 4: 13}]
    assert most[-1] == {"bids": 4, "most": 3}  # bidder 10: three bids on auction 1, one on auction 3


def _stamp(text: str):
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)
