"""Joins of three changelogs (a left-deep chain, issue 21) on real Spark and a real broker; DuckDB is the oracle.

    orders o JOIN customers c ON o.customer_id = c.id LEFT JOIN products p ON o.product_id = p.id

is written into a changelog (`order_view`, keyed by the orders' key: both later joins are ON the joined changelog's
whole key), and a chain ending in a FULL join (keyed inside by the orders' and the products' keys) is aggregated in
the same query into a materialized view (`by_title`, GROUP BY with retractions over the chain, WHERE on the joined
rows). Both run side by side, each on its own checkpoint. Two micro-batches (two availableNow runs on the same
checkpoints) bring inserts, updates (an order moving to another customer and another product, a key updated twice
in one batch), deletes on each of the three sides, a customer re-inserted and rows that join nothing. After each run
each output, read as a changelog (latest value per key, tombstones remove keys) or as the view's table, must equal
DuckDB's answer to the same SELECT over the snapshots of the three sources at that point. The chaining in plain
Python (hypothesis, every pair of sides, rows not aggregated): tests/unit/test_changelog_chain_stages.py. Two queries of
four and six transformWithState stages: each run starts one Python process per stage to plan it (most of the
test's time).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from support.changelogs import changelog_content, duckdb_answer, keyed_rows, produce_changes
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.retract import STATE_PROVIDER
from dsflow.adapters.spark.translate import query_spec
from dsflow.adapters.sqlite import mv
from support.streaming import streaming_project

pytestmark = pytest.mark.integration

TABLES = {"orders": "order_id BIGINT, customer_id VARCHAR, product_id VARCHAR, qty BIGINT",
          "customers": "id VARCHAR, name VARCHAR, region VARCHAR",
          "products": "id VARCHAR, title VARCHAR"}
KEYS = {"orders": "order_id", "customers": "id", "products": "id"}
SOURCES = "".join(f"CREATE CHANGELOG {name} ({columns}, PRIMARY KEY ({KEYS[name]}))\n"
                  f"  WITH ('value.format' = 'json', 'topic.partitions' = 2);\n" for name, columns in TABLES.items())
CHAIN = "FROM orders o JOIN customers c ON o.customer_id = c.id LEFT JOIN products p ON o.product_id = p.id"
QUERIES = {  # name: (sink kind, SELECT, key columns)
    "order_view": ("CHANGELOG", f"SELECT o.order_id, o.qty, c.name, p.title {CHAIN}", ("order_id",)),
    "by_title": ("MATERIALIZED VIEW", "SELECT p.title, COUNT(*) AS n, COUNT(o.order_id) AS orders, SUM(o.qty) AS qty, "
                 "MIN(c.name) AS first_name FROM orders o LEFT JOIN customers c ON o.customer_id = c.id "
                 "FULL JOIN products p ON p.id = o.product_id WHERE c.region IS NULL OR c.region <> 'eu' "
                 "GROUP BY p.title", ("title",)),
}
SQL = SOURCES + "".join(f"CREATE {kind} {name} AS {select};\n" for name, (kind, select, _) in QUERIES.items())


def _order(order_id: int, customer: str | None, product: str | None, qty: int) -> tuple[str, str, dict]:
    return "orders", str(order_id), {"order_id": order_id, "customer_id": customer, "product_id": product, "qty": qty}


def _customer(key: str, name: str, region: str = "us") -> tuple[str, str, dict]:
    return "customers", key, {"id": key, "name": name, "region": region}


def _product(key: str, title: str) -> tuple[str, str, dict]:
    return "products", key, {"id": key, "title": title}


FEED = [
    [_customer("c1", "ann"), _customer("c2", "bob", "eu"), _customer("c3", "cy"),
     _product("p1", "pen"), _product("p2", "ink"), _product("p3", "cap"),
     _order(1, "c1", "p1", 2), _order(2, "c1", "p2", 1), _order(3, "c2", "p9", 5),  # p9: no such product
     _order(4, "c9", "p1", 1),  # c9: no such customer (INNER drops it)
     _order(5, "c3", None, 7), _order(6, "c3", "p3", 1), _order(6, "c3", "p3", 3),  # order 6 updated in the batch
     ("orders", "7", None)],  # a tombstone of a key never written
    [_order(1, "c2", "p2", 2),  # moves to another customer and another product
     ("customers", "c1", None), _customer("c1", "ann2"),  # deleted and re-inserted in one batch
     ("customers", "c3", None),  # deleted: its orders leave the INNER join
     _customer("c2", "bob", "us"),  # updated: its rows change (and pass the view's WHERE)
     _product("p3", "lid"), ("products", "p2", None),  # updated; deleted: its orders keep NULLs (LEFT)
     _product("p9", "new"),  # arrives: order 3 joins it
     _customer("c9", "dan"), ("orders", "2", None),  # order 4 joins; order 2 deleted
     _order(8, "c1", "p1", 4), _order(8, "c1", "p3", 4)],  # inserted, then moved within the batch
]


def test_a_chain_of_three_changelogs_equals_duckdb_after_every_batch(broker, spark):
    work = Path(tempfile.mkdtemp(prefix="dsflow-cchain-"))
    project = streaming_project(work, broker, SQL)
    snapshots: dict[str, dict] = {name: {} for name in TABLES}
    try:
        for batch in FEED:
            for relation in TABLES:
                produce_changes(broker, project, relation, [(k, v) for r, k, v in batch if r == relation])
            for relation, key, value in batch:
                if value is None:
                    snapshots[relation].pop(key, None)
                else:
                    snapshots[relation][key] = value
            _run_all(spark, project, work)
            _check(broker, project, snapshots)
    finally:  # the stages set the session's state store to RocksDB: later tests' new checkpoints keep Spark's default
        spark.conf.unset(STATE_PROVIDER)
    assert changelog_content(broker, project, "order_view")[1] > 0, "no tombstone written"


def _run_all(spark, project, work: Path) -> None:
    """One availableNow run of every query, side by side (each on its own checkpoint)."""
    running = []
    for name in QUERIES:
        query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
        spec = query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))
        running.append(start_query(spark, spec, available_now=True))
    for query in running:
        assert query.awaitTermination(300), "a chain did not finish"
        assert query.exception() is None, query.exception()


def _check(broker, project, snapshots: dict[str, dict]) -> None:
    database = mv.database_path(project.root, project.state_path, project.environment)
    for name, (kind, select, keys) in QUERIES.items():
        expected = duckdb_answer(TABLES, {n: snapshots[n].values() for n in TABLES}, select, keys)
        if kind == "CHANGELOG":
            found = keyed_rows(changelog_content(broker, project, name)[0].values(), keys)
        else:
            columns, rows = mv.run_query(database, f"SELECT * FROM {name}")
            found = keyed_rows([dict(zip(columns, r, strict=False)) for r in rows], keys)
        assert found == expected, name
