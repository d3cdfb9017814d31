"""GROUP BY expressions, global aggregates (no GROUP BY) and SESSION windows: on real Spark and a real broker
against DuckDB or plain Python over the same input records, and their refusals (pure, no Spark).

One project holds every query. Input comes in two phases; the global aggregates run after each (their state and
the view's one row carried from batch to batch), the others once after the last (one availableNow run each, to
keep Spark's work small on a loaded machine):

    by_bucket    VIEW       GROUP BY UPPER(userid), bucket (the alias of CAST(amount / 10 AS INT))
    totals       CHANGELOG  COUNT(*), SUM, MIN without GROUP BY      (one record key: '{}')
    totals_view  VIEW       COUNT(*), MAX without GROUP BY, WHERE    (one row)
    sessions     CHANGELOG  SESSION(orders, GAP 5 SECONDS) per userid, HAVING COUNT(*) > 1 (append: a session
                            once closed; HAVING a filter)
    by_region    CHANGELOG  GROUP BY LOWER(region) over a changelog   (the retraction path)
"""

from __future__ import annotations

import random

import duckdb
import pytest
from sqlglot import parse_one

from support.changelogs import changelog_content, produce_changes
from dsflow.adapters.spark.retract import STATE_PROVIDER
from dsflow.adapters.spark.translate import query_spec
from dsflow.adapters.sqlite import mv
from dsflow.load.project import check_project, load_project
from dsflow.sql.parse import DIALECT
from support.projects import make_project
from support.streaming import produce, run, streaming_project
from support import pgserver

T0 = 1_700_000_000_000
GAP_MS, DELAY_MS = 5_000, 2_000
USERS = ["alice", "ALICE", "Bob", "bob", "carol", "Dave"]
FLUSH_USER = "zz_flush"

SOURCES = """\
CREATE STREAM orders (id BIGINT, ts BIGINT, userid VARCHAR, amount BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE CHANGELOG users (userid VARCHAR, region VARCHAR, score BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""
QUERIES = {
    "by_bucket": "CREATE MATERIALIZED VIEW by_bucket AS SELECT UPPER(userid) AS u, CAST(amount / 10 AS INT) AS "
                 "bucket, COUNT(*) AS n, MAX(id) AS max_id FROM orders GROUP BY UPPER(userid), bucket",
    "totals": "CREATE CHANGELOG totals AS SELECT COUNT(*) AS n, SUM(amount) AS s, MIN(amount) AS lo FROM orders",
    "totals_view": "CREATE MATERIALIZED VIEW totals_view AS SELECT COUNT(*) AS n, MAX(amount) AS hi FROM orders "
                   "WHERE amount > 50",
    "sessions": "CREATE CHANGELOG sessions WITH ('watermark.delay' = '2 seconds') AS SELECT window_start, window_end, "
                "userid, COUNT(*) AS n, SUM(amount) AS total FROM SESSION(orders, GAP 5 SECONDS) "
                "GROUP BY window_start, window_end, userid HAVING COUNT(*) > 1",
    "by_region": "CREATE CHANGELOG by_region AS SELECT LOWER(region) AS r, COUNT(*) AS n, SUM(score) AS s "
                 "FROM users GROUP BY LOWER(region)",
}
SQL = SOURCES + "".join(f"{q};\n" for q in QUERIES.values())
EVERY_PHASE = ("totals", "totals_view")


def order_phases(seed: int = 11) -> list[list[dict]]:
    """Two phases of orders in time order (shuffled within a phase, none behind the watermark); the second ends
    with one order of FLUSH_USER a minute later, whose event time closes every other session."""
    rng = random.Random(seed)
    ids = iter(range(1, 10_000))
    phases, start = [], T0
    for _ in range(2):
        times, ts = [], start
        for _ in range(60):
            ts += rng.choice([rng.randrange(1, 3_000), rng.randrange(6_000, 12_000)])  # within or past the gap
            times.append(ts)
        batch = [{"id": next(ids), "ts": t, "userid": rng.choice(USERS), "amount": rng.randrange(-40, 200)}
                 for t in times]
        rng.shuffle(batch)
        phases.append(batch)
        start = ts + 1
    phases[-1].append({"id": next(ids), "ts": start + 60_000, "userid": FLUSH_USER, "amount": 1})
    return phases


def user_changes(seed: int = 5) -> list[list[tuple[str, dict | None]]]:
    """Two phases of upserts and deletes of a few users whose regions differ in case only."""
    rng = random.Random(seed)
    regions = ["EU", "eu", "Us", "us", None]

    def change() -> tuple[str, dict | None]:
        key = f"u{rng.randrange(8)}"
        if rng.random() < 0.2:
            return key, None
        return key, {"userid": key, "region": rng.choice(regions), "score": rng.randrange(0, 50)}

    return [[change() for _ in range(20)] for _ in range(2)]


@pytest.mark.integration
def test_group_by_expressions_global_aggregates_and_sessions_match_references(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    orders, users = order_phases(), user_changes()
    try:
        for phase, (batch, changes) in enumerate(zip(orders, users, strict=False)):
            produce(broker, project, "orders", batch, "userid")
            produce_changes(broker, project, "users", changes)
            for name in QUERIES if phase == len(orders) - 1 else EVERY_PHASE:
                run(spark, project, name, tmp_path, timeout=300)  # the retraction's first run is slow when loaded
    finally:  # the retraction stages set the session's state store to RocksDB (see tests/e2e/test_sql_retract.py)
        spark.conf.unset(STATE_PROVIDER)
    everything = [o for batch in orders for o in batch]
    con = _duckdb(everything, users)
    _check_stream_aggregates(broker, project, con, everything)
    _check_sessions(broker, project, everything)
    content, _ = changelog_content(broker, project, "by_region")
    expected = con.execute("SELECT LOWER(region) AS r, COUNT(*) AS n, SUM(score) AS s FROM users "
                           "GROUP BY LOWER(region)").fetchall()
    assert {v.get("r"): (v["n"], v["s"]) for v in content.values()} == {r: (n, s) for r, n, s in expected}


def _duckdb(orders: list[dict], users: list[list[tuple[str, dict | None]]]):
    con = duckdb.connect()
    con.execute("CREATE TABLE orders (id BIGINT, ts BIGINT, userid VARCHAR, amount BIGINT)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", [(o["id"], o["ts"], o["userid"], o["amount"])
                                                               for o in orders])
    snapshot: dict[str, dict] = {}
    for changes in users:
        for key, value in changes:
            snapshot.pop(key, None) if value is None else snapshot.__setitem__(key, value)
    con.execute("CREATE TABLE users (userid VARCHAR, region VARCHAR, score BIGINT)")
    con.executemany("INSERT INTO users VALUES (?, ?, ?)", [(v["userid"], v["region"], v["score"])
                                                           for v in snapshot.values()])
    return con


def _check_stream_aggregates(broker, project, con, orders: list[dict]) -> None:
    content, _ = changelog_content(broker, project, "totals")
    n, s, lo = con.execute("SELECT COUNT(*), SUM(amount), MIN(amount) FROM orders").fetchone()
    assert content == {"{}": {"n": n, "s": s, "lo": lo}}
    database = mv.database_path(project.root, project.state_path, project.environment)
    buckets: dict[tuple[str, int], list[int]] = {}
    for o in orders:  # Spark's CAST of a double to INT truncates toward zero, as Python's int() does
        buckets.setdefault((o["userid"].upper(), int(o["amount"] / 10)), []).append(o["id"])
    _, rows = mv.run_query(database, "SELECT u, bucket, n, max_id FROM by_bucket ORDER BY u, bucket")
    assert rows == [(*k, len(ids), max(ids)) for k, ids in sorted(buckets.items())]
    assert len({u for u, *_ in rows}) < len({o["userid"] for o in orders}), "mixed-case user ids should merge"
    _, rows = mv.run_query(database, "SELECT n, hi FROM totals_view")
    assert rows == [con.execute("SELECT COUNT(*), MAX(amount) FROM orders WHERE amount > 50").fetchone()]


def sessions_of(orders: list[dict]) -> dict[tuple[int, int, str], tuple[int, int]]:
    """{(start, end, userid): (count, total)}: per user, events less than a gap apart make one session, from its
    first event to its last plus the gap (Spark's session_window)."""
    found: dict[tuple[int, int, str], tuple[int, int]] = {}
    for user in {o["userid"] for o in orders}:
        events = sorted((o["ts"], o["amount"]) for o in orders if o["userid"] == user)
        group = [events[0]]
        for event in events[1:] + [None]:
            if event is not None and event[0] < group[-1][0] + GAP_MS:
                group.append(event)
                continue
            found[(group[0][0], group[-1][0] + GAP_MS, user)] = (len(group), sum(a for _, a in group))
            group = [event]
    return found


def _check_sessions(broker, project, orders: list[dict]) -> None:
    from datetime import datetime, timezone

    def ms(text: str) -> int:
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").astimezone(timezone.utc).timestamp() * 1000)

    for user in USERS:
        times = sorted(o["ts"] for o in orders if o["userid"] == user)
        assert GAP_MS not in {b - a for a, b in zip(times, times[1:], strict=False)}, \
            "a gap of exactly GAP_MS is a boundary"
    closed = {k: v for k, v in sessions_of(orders).items() if k[2] != FLUSH_USER}  # the flush stays open
    expected = {k: v for k, v in closed.items() if v[0] > 1}  # HAVING COUNT(*) > 1
    content, _ = changelog_content(broker, project, "sessions")
    actual = {(ms(v["window_start"]), ms(v["window_end"]), v["userid"]): (v["n"], v["total"])
              for v in content.values()}
    assert actual == expected
    assert len(USERS) < len(expected) < len(closed), "sessions should be varied, HAVING keep some and drop some"


# --- what validates and what is refused (pure: no Spark, no broker) -------------------------------------------


def problems(tmp_path, sql: str) -> list[tuple[str, int]]:
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    return [(d.code, d.location.line) for d in check_project(root).diagnostics]


def test_translation_of_sessions_and_global_aggregates(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/all.sql": SQL}))
    specs = {q.fqn.rsplit(".", 1)[1]: query_spec(project, q, "v", "/tmp/c", "/tmp/s") for q in project.queries}
    session = specs["sessions"]
    assert (session.sources[0].session_gap, session.sources[0].window, session.sink.output_mode) == \
        ("5000 milliseconds", None, "append")
    assert "GROUP BY orders.__window, `orders`.`userid` HAVING COUNT(*) > 1" in session.select_sql  # a filter
    assert "__keep" not in session.select_sql
    assert specs["totals"].sink.key_columns == [] and "'{}' AS __key" in specs["totals"].select_sql
    assert project.relation("analytics.public.totals").primary_key == ()
    assert specs["by_region"].retract.post_sql.startswith("SELECT __g0 AS `r`")
    window = next(q.window for q in project.queries if q.fqn.endswith("sessions"))
    assert (window.kind, window.size, window.advance) == ("session", "5 seconds", None)
    written = parse_one(QUERIES["sessions"], dialect=DIALECT).sql(dialect=DIALECT)  # the dialect writes it back
    assert "FROM SESSION(orders, GAP 5 SECONDS) GROUP BY" in written


@pytest.mark.parametrize("sql, expected", [
    ("CREATE CHANGELOG c AS SELECT userid, COUNT(*) AS n\n FROM orders GROUP BY 'x', userid;", [("DSF-E160", 2)]),
    ("CREATE CHANGELOG c AS SELECT userid, COUNT(*) AS n\n FROM orders GROUP BY userid, SUM(amount);",
     [("DSF-E160", 2)]),
    ("CREATE CHANGELOG c AS SELECT window_start, window_end, COUNT(*) AS n\n FROM SESSION(orders, GAP 5 SECONDS)\n"
     " GROUP BY window_start, window_end;", [("DSF-E161", 3)]),
    ("CREATE CHANGELOG c AS SELECT window_start, window_end, userid, COUNT(*) AS n\n"
     " FROM SESSION(orders, GAP 0 SECONDS) GROUP BY window_start, window_end, userid;", [("DSF-E032", 2)]),
    ("CREATE CHANGELOG c AS SELECT window_start, window_end, userid, COUNT(*) AS n\n"
     " FROM SESSION(orders, GAP 5 FORTNIGHTS) GROUP BY window_start, window_end, userid;", [("DSF-E032", 2)]),
    ("CREATE CHANGELOG c AS SELECT userid, COUNT(*) AS n\n FROM orders;", [("DSF-E046", 1)]),
    ("CREATE CHANGELOG c AS SELECT COUNT(*) AS n\n FROM orders GROUP BY UPPER(userid);", [("DSF-E046", 2)]),
    ("CREATE CHANGELOG c AS SELECT UPPER(userid) AS u, amount, COUNT(*) AS n\n FROM orders GROUP BY UPPER(userid);",
     [("DSF-E046", 1)]),
    ("CREATE STREAM c AS SELECT COUNT(*) AS n FROM orders;", [("DSF-E046", 1)]),
    ("CREATE CHANGELOG c AS SELECT userid, SUM(amount) AS s FROM orders GROUP BY userid\n HAVING s > 1;",
     [("DSF-E041", 2)]),  # a select alias in HAVING: HAVING reads aggregates and grouped columns
])
def test_refusals(tmp_path, sql, expected):
    assert problems(tmp_path, sql) == expected


def test_e163_a_global_aggregate_into_a_table(tmp_path):
    lake = "stores:\n  - name: lake\n    type: filesystem\n    properties:\n      path: lake\n"
    sql = "CREATE TABLE t WITH ('store' = 'lake') AS\n  SELECT COUNT(*) AS n FROM orders;\n"
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql, "stores/lake.yml": lake})
    assert [(d.code, d.location.line) for d in check_project(root).diagnostics] == [("DSF-E163", 1)]


def test_session_needs_gap_not_size(tmp_path):
    sql = ("CREATE CHANGELOG c AS SELECT window_start, window_end, userid, COUNT(*) AS n\n"
           " FROM SESSION(orders, SIZE 5 SECONDS) GROUP BY window_start, window_end, userid;")
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).diagnostics
    assert len(found) == 1 and "expected GAP" in found[0].message and found[0].location.line == 2


def test_aliased_or_repeated_expressions_validate(tmp_path):
    sql = ("CREATE CHANGELOG a AS SELECT UPPER(userid) AS u, COUNT(*) AS n FROM orders GROUP BY u;\n"
           "CREATE CHANGELOG b AS SELECT LOWER(UPPER(userid)) AS l, UPPER(userid) AS u, COUNT(*) AS n FROM orders "
           "GROUP BY UPPER(userid);\n"
           "CREATE MATERIALIZED VIEW t AS SELECT COUNT(DISTINCT userid) AS users, AVG(amount) AS mean FROM orders;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    keys = {q.fqn.rsplit(".", 1)[1]: q.key_columns for q in project.queries}
    assert keys == {"a": ("u",), "b": ("u",), "t": ()}


def test_a_sqlite_view_row_whose_key_holds_nulls_is_replaced_and_deleted(tmp_path):
    """A key column may be NULL (a FULL join's missing side, a NULL group): its row is replaced by the next row of
    that key and deleted by its tombstone, as a key without NULLs is (SQLite's own key keeps NULLs apart)."""
    database = str(tmp_path / "views.db")
    mv.ensure_table(database, "j", [("o", "BIGINT"), ("u", "VARCHAR"), ("v", "BIGINT")], ["o", "u"])
    names = ["o", "u", "v"]
    assert mv.write_batch(database, "j", names, ["o", "u"], [(1, None, 1), (None, "a", 2), (2, "b", 3)], "ck", 0)
    assert mv.write_batch(database, "j", names, ["o", "u"], [(1, None, 10), (None, "a", 20)], "ck", 1,
                          deletes=[(2, "b")])
    assert mv.write_batch(database, "j", names, ["o", "u"], [(None, None, 7)], "ck", 2, deletes=[(None, "a")])
    found = mv.run_query(database, "SELECT o, u, v FROM j")[1]
    assert sorted(found, key=repr) == sorted([(1, None, 10), (None, None, 7)], key=repr)


def test_a_keyless_view_row_is_replaced_by_each_update_in_sqlite_and_postgres(tmp_path):
    """The view writers' `replace` (a global aggregate's view): a batch's row replaces the table's; an empty batch
    keeps it; a replayed batch changes nothing; a delete of the key () (HAVING stopped matching) empties it.
    the session's PostgreSQL, a database of its own."""
    import uuid

    import psycopg2

    from dsflow.adapters.postgres import mv as pg

    columns, names = [("n", "BIGINT"), ("hi", "BIGINT")], ["n", "hi"]
    batches = [[(3, 70)], [], [(5, 90)]]
    database = str(tmp_path / "views.db")
    mv.ensure_table(database, "totals", columns, [])
    for batch_id, batch in enumerate(batches):
        assert mv.write_batch(database, "totals", names, [], batch, "ck", batch_id, replace=True)
    assert not mv.write_batch(database, "totals", names, [], [(1, 1)], "ck", 1, replace=True)
    assert mv.run_query(database, "SELECT n, hi FROM totals")[1] == [(5, 90)]
    assert mv.write_batch(database, "totals", names, [], [], "ck", 3, deletes=[()], replace=True)
    assert mv.run_query(database, "SELECT n, hi FROM totals")[1] == []
    server = dict(pgserver.SERVER)
    name = f"dsflow_agg_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(dbname="postgres", **server)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        pg.ensure_table(server, name, "public", "totals", columns, [])
        for batch_id, batch in enumerate(batches):
            assert pg.write_batch(server, name, "public", "totals", names, [], batch, "ck", batch_id, replace=True)
        assert not pg.write_batch(server, name, "public", "totals", names, [], [(1, 1)], "ck", 1, replace=True)
        with psycopg2.connect(dbname=name, **server) as conn, conn.cursor() as cur:
            cur.execute("SELECT n, hi FROM totals")
            assert cur.fetchall() == [(5, 90)]
        conn.close()
        assert pg.write_batch(server, name, "public", "totals", names, [], [], "ck", 3, deletes=[()], replace=True)
        with psycopg2.connect(dbname=name, **server) as conn, conn.cursor() as cur:
            cur.execute("SELECT n, hi FROM totals")
            assert cur.fetchall() == []
        conn.close()
    finally:
        admin.cursor().execute(f"DROP DATABASE {name} WITH (FORCE)")
        admin.close()
