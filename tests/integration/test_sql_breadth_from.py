"""SQL breadth on the FROM side, run for real on Spark and the broker: UNION ALL of streams, CTEs inlined into
the query, and CROSS JOIN UNNEST over an ARRAY column; each result is compared with DuckDB running the same SQL
over the same records (and the union's record keys with plain Python). Refusals are validation-only tests.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import duckdb
import pytest

from dsflow.adapters.spark.translate import spark_select
from dsflow.adapters.sqlite import mv
from dsflow.load.project import check_project, load_project
from support.lake import lake_project, stores_yaml
from support.projects import make_project
from support.streaming import produce, records, run

SOURCES = """\
CREATE STREAM clicks (id BIGINT, userid VARCHAR, amount INT, tags ARRAY<VARCHAR>, ts BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE STREAM orders (id BIGINT, userid VARCHAR, amount INT, ts BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE STREAM refunds (id BIGINT, buyer VARCHAR, amount INT, ts BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, PRIMARY KEY (userid)) WITH ('value.format' = 'json');
"""
UNION = """\
WITH paid AS (SELECT id, UPPER(userid) AS userid, amount FROM orders WHERE amount > 0),
     tagged AS (SELECT id, tags, amount * 2 AS doubled FROM clicks WHERE amount > 10)
SELECT id, userid, amount FROM clicks WHERE amount > 50
UNION ALL SELECT id, userid, amount FROM paid
UNION ALL SELECT id, buyer, amount * -1 AS amount FROM refunds WHERE buyer <> 'u0'
UNION ALL SELECT tagged.id + 1000000 AS id, UPPER(t.tag) AS userid, tagged.doubled AS amount
  FROM tagged CROSS JOIN UNNEST(tagged.tags) AS t(tag) WHERE t.tag <> 'skip'"""
CTE = """\
WITH big AS (SELECT id, userid AS who, amount * 2 AS doubled FROM orders WHERE amount > 20),
     named AS (SELECT who, doubled FROM big WHERE who <> 'u3')
SELECT who, doubled + 1 AS total FROM named WHERE doubled < 170"""
MONEY = """\
SELECT id, userid, amount FROM orders WHERE amount > 0
UNION ALL SELECT id, buyer, amount * -1 AS amount FROM refunds WHERE buyer <> 'u0'"""
SQL = SOURCES + f"""\
CREATE STREAM all_events AS\n{UNION};
CREATE MATERIALIZED VIEW money_view AS\n{MONEY};
CREATE TABLE money_table WITH ('store' = 'lake') AS\n{MONEY};
"""
TAGS = [[], None, ["news"], ["skip"], ["sport", "news", "skip"], ["game", "game"]]


def feed(seed: int, start: int, n: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(5)]
    one = lambda i: {"id": start + i, "userid": rng.choice(users), "amount": rng.randrange(100),  # noqa: E731
                     "ts": 1_700_000_000_000 + i}
    clicks = [one(i) | {"tags": TAGS[i % len(TAGS)]} for i in range(n)]
    orders = [one(i) for i in range(n)]
    refunds = [{"id": r["id"], "buyer": r["userid"], "amount": r["amount"], "ts": r["ts"]}
               for r in (one(i) for i in range(n // 2))]
    return {"clicks": clicks, "orders": orders, "refunds": refunds}


def duckdb_rows(feeds: list[dict[str, list[dict]]], sql: str) -> Counter:
    """The query's rows as DuckDB computes them over every record fed."""
    con = duckdb.connect()
    con.execute("CREATE TABLE clicks (id BIGINT, userid VARCHAR, amount INTEGER, tags VARCHAR[], ts BIGINT)")
    con.execute("CREATE TABLE orders (id BIGINT, userid VARCHAR, amount INTEGER, ts BIGINT)")
    con.execute("CREATE TABLE refunds (id BIGINT, buyer VARCHAR, amount INTEGER, ts BIGINT)")
    for data in feeds:
        for table, rows in data.items():
            columns = list(rows[0])
            con.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                            [[r[c] for c in columns] for r in rows])
    return Counter(con.execute(sql).fetchall())


def produced(broker, project, data: dict[str, list[dict]]) -> None:
    produce(broker, project, "clicks", data["clicks"], "userid")
    produce(broker, project, "orders", data["orders"], "userid")
    produce(broker, project, "refunds", data["refunds"], "buyer")


def output(broker, project, name: str, columns: list[str]) -> Counter:
    return Counter(tuple(json.loads(r["value"]).get(c) for c in columns) for r in records(broker, project, name))


@pytest.mark.integration
def test_union_all_of_ctes_and_unnest_runs_on_spark_like_duckdb(tmp_path, broker, spark):
    """Two runs on one checkpoint each: four branches (a filter, a CTE, a filter with an expression, a CTE
    unnested) over three streams, one of them read by two branches, into a stream; and a two-branch UNION ALL
    into a materialized view (SQLite) and a Delta table (a local folder)."""
    project = lake_project(tmp_path, broker, SQL, stores_yaml())
    first, second = feed(1, 0, 60), feed(2, 10_000, 40)
    produced(broker, project, first)
    for name in ("all_events", "money_view", "money_table"):
        run(spark, project, name, tmp_path)
    assert sinks(project) == [duckdb_rows([first], MONEY)] * 2
    rows = output(broker, project, "all_events", ["id", "userid", "amount"])
    assert rows == duckdb_rows([first], UNION)
    # an empty or NULL array gives no row (as Flink's CROSS JOIN UNNEST); a repeated element one row each
    unnested = Counter({row: n for row, n in rows.items() if row[0] >= 1_000_000})
    assert {c["id"] + 1_000_000 for c in first["clicks"] if not c["tags"]}.isdisjoint(i for i, _, _ in unnested)
    assert {tag for _, tag, _ in unnested} == {"NEWS", "SPORT", "GAME"} and max(unnested.values()) == 2
    # each source keeps its own offsets: a second run reads only what is new, in every branch
    produced(broker, project, second)
    for name in ("all_events", "money_view", "money_table"):
        run(spark, project, name, tmp_path)
    assert output(broker, project, "all_events", ["id", "userid", "amount"]) == duckdb_rows([first, second], UNION)
    assert sinks(project) == [duckdb_rows([first, second], MONEY)] * 2  # each batch once in the view and the table
    keyed = Counter((r["key"], tuple(json.loads(r["value"]).values())) for r in records(broker, project, "all_events"))
    assert keyed == union_reference([first, second])
    assert sum(keyed.values()) > 150 and len({key for key, _ in keyed}) == 5


def sinks(project) -> list[Counter]:
    """The rows of the UNION ALL's materialized view (SQLite) and Delta table, as (id, userid, amount)."""
    from deltalake import DeltaTable

    from dsflow.adapters.tables import table_ref

    database = mv.database_path(project.root, project.state_path, project.environment)
    view = Counter(mv.run_query(database, "SELECT id, userid, amount FROM money_view")[1])
    relation = project.relation("analytics.public.money_table")
    table = DeltaTable(table_ref(project.root, project.store(relation.store), relation).location).to_pyarrow_table()
    return [Counter(map(tuple, view)), Counter((r["id"], r["userid"], r["amount"]) for r in table.to_pylist())]


def union_reference(feeds: list[dict[str, list[dict]]]) -> Counter:
    """The UNION ALL in plain Python, with the record key each branch carries from its source record."""
    rows: Counter = Counter()
    for data in feeds:
        rows.update((c["userid"], (c["id"], c["userid"], c["amount"])) for c in data["clicks"] if c["amount"] > 50)
        rows.update((o["userid"], (o["id"], o["userid"].upper(), o["amount"])) for o in data["orders"]
                    if o["amount"] > 0)
        rows.update((r["buyer"], (r["id"], r["buyer"], -r["amount"])) for r in data["refunds"] if r["buyer"] != "u0")
        rows.update((c["userid"], (c["id"] + 1_000_000, tag.upper(), c["amount"] * 2)) for c in data["clicks"]
                    if c["amount"] > 10 for tag in c["tags"] or [] if tag != "skip")
    return rows


def problems(tmp_path, sql: str) -> list[tuple[str, int, str]]:
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).diagnostics
    return [(d.code, d.location.line, d.message) for d in found]


def test_union_all_resolves_to_the_first_branch_columns_and_every_source(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": (
        f"CREATE STREAM all_events AS\n{UNION};\n"
        "CREATE STREAM sink (id BIGINT, who VARCHAR) WITH ('value.format' = 'json');\n"
        "INSERT INTO sink SELECT id, userid AS who FROM orders UNION ALL SELECT id, buyer FROM refunds;\n")}))
    union = project.queries[0]
    assert [(c.name, c.type) for c in union.output_columns] == [("id", "BIGINT"), ("userid", "VARCHAR"),
                                                                 ("amount", "INT")]
    assert [s.relation.rsplit(".", 1)[1] for s in union.sources] == ["clicks", "orders", "refunds", "clicks"]
    assert "LATERAL VIEW EXPLODE" in spark_select(union, project) and "WITH" not in union.select_sql
    assert not union.stateful and union.output_mode == "append"
    assert [s.relation.rsplit(".", 1)[1] for s in project.queries[1].sources] == ["orders", "refunds"]


@pytest.mark.parametrize("sql, expected", [
    ("CREATE STREAM u AS SELECT id FROM orders\nUNION SELECT id FROM refunds;",
     ("DSF-E170", 2, "UNION (without ALL) would drop duplicate rows")),
    ("CREATE STREAM u AS SELECT id, userid FROM orders UNION ALL\nSELECT id FROM refunds;",
     ("DSF-E172", 2, "branch 2 of the UNION ALL selects 1 columns, the first branch 2")),
    ("CREATE STREAM u AS SELECT id, amount FROM orders UNION ALL\nSELECT id, buyer FROM refunds;",
     ("DSF-E172", 2, "branch 2 of the UNION ALL column 'buyer' is VARCHAR, the first branch's 'amount' is INT")),
    ("CREATE STREAM u AS SELECT userid FROM orders UNION ALL\nSELECT userid FROM users;",
     ("DSF-E171", 2, "each branch of a UNION ALL must select and filter one stream")),
    ("CREATE STREAM u AS SELECT o.id FROM orders o JOIN refunds r WITHIN 1 MINUTE ON o.id = r.id UNION ALL\n"
     "SELECT id FROM refunds;", ("DSF-E171", 1, "each branch of a UNION ALL must select and filter one stream")),
    ("CREATE STREAM u AS SELECT id FROM orders UNION ALL SELECT id FROM refunds\nORDER BY id;",
     ("DSF-E045", 2, "ORDER BY on a UNION ALL is not supported")),
    ("CREATE CHANGELOG c AS\nWITH n AS (SELECT userid, COUNT(*) AS k FROM orders GROUP BY userid)\n"
     "SELECT userid FROM n;",
     ("DSF-E173", 2, "the CTE 'n' has GROUP BY: it cannot be inlined")),
    ("CREATE STREAM c AS\nWITH j AS (SELECT o.id FROM orders o JOIN users u ON o.userid = u.userid)\n"
     "SELECT j.id FROM j JOIN refunds r WITHIN 1 MINUTE ON j.id = r.id;",
     ("DSF-E173", 3, "the CTE 'j' joins: it is inlined only where it is the one relation a SELECT reads")),
    ("CREATE STREAM c AS\nWITH RECURSIVE r AS (SELECT id FROM orders) SELECT id FROM r;",
     ("DSF-E173", 2, "WITH RECURSIVE is not supported in continuous queries")),
    ("CREATE STREAM c AS WITH u AS (SELECT userid, name FROM users WHERE name <> 'x')\n"
     "SELECT o.id, u.name FROM orders o LEFT JOIN u ON o.userid = u.userid;",
     ("DSF-E174", 2, "the CTE 'u' filters rows on a side of an outer join that keeps all of its rows")),
    ("CREATE STREAM c AS WITH b AS (SELECT id, userid FROM orders)\nSELECT amount FROM b;",
     ("DSF-E041", 2, "unknown column 'amount' in the CTE 'b'")),
    ("CREATE STREAM n AS SELECT id, x FROM clicks\nCROSS JOIN UNNEST(userid) AS t(x);",
     ("DSF-E175", 2, "UNNEST(userid) needs an ARRAY column of 'clicks'")),
    ("CREATE STREAM n AS SELECT id, x FROM clicks\nLEFT JOIN UNNEST(tags) AS t(x) ON TRUE;",
     ("DSF-E175", 2, "only CROSS JOIN UNNEST is supported")),
    ("CREATE STREAM n AS SELECT id, x FROM clicks\nCROSS JOIN UNNEST(tags) WITH ORDINALITY AS t(x, i);",
     ("DSF-E175", 2, "UNNEST takes one array, without WITH ORDINALITY")),
    ("CREATE STREAM n AS SELECT c.id, x FROM clicks c CROSS JOIN UNNEST(c.tags) AS t(x)\n"
     "JOIN users u ON c.userid = u.userid;", ("DSF-E175", 1, "UNNEST together with another join")),
    ("CREATE STREAM n AS SELECT id, t.y FROM clicks CROSS JOIN UNNEST(tags) AS t(x);",
     ("DSF-E041", 1, "unknown column 'y' of the UNNEST 't'")),
], ids=["union-distinct", "union-count", "union-type", "union-changelog", "union-join", "union-order",
        "cte-group-by", "cte-join", "cte-recursive", "cte-outer-join-filter", "cte-unknown-column",
        "unnest-not-array", "unnest-left-join", "unnest-ordinality", "unnest-and-join", "unnest-unknown-column"])
def test_refusals_name_their_code_place_and_problem(tmp_path, sql, expected):
    found = problems(tmp_path, sql)
    assert len(found) == 1, found
    code, line, message = found[0]
    assert (code, line) == expected[:2] and message.startswith(expected[2]), found


def test_a_cte_reads_like_the_relation_it_inlines(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": (
        f"CREATE STREAM big_orders AS\n{CTE};\n"
        "CREATE CHANGELOG per_user AS WITH o AS (SELECT userid, amount FROM orders WHERE amount > 0)\n"
        "  SELECT window_start, window_end, userid, COUNT(*) AS n FROM TUMBLE(o, SIZE 1 MINUTE)\n"
        "  GROUP BY window_start, window_end, userid;\n"
        "CREATE STREAM named AS WITH o AS (SELECT id, userid FROM orders WHERE id > 5)\n"
        "  SELECT o.id, u.name FROM o JOIN users u ON o.userid = u.userid;\n")}))
    cte, windowed, joined = project.queries
    assert [(c.name, c.type) for c in cte.output_columns] == [("who", "VARCHAR"), ("total", "INT")]
    assert [s.relation for s in cte.sources] == ["analytics.public.orders"]
    assert windowed.window is not None and windowed.window.source == "o" and windowed.output_mode == "update"
    assert joined.temporal_join is not None and [s.alias for s in joined.sources] == ["o", "u"]
    assert "WITH" not in cte.select_sql.upper().split("FROM")[0] and "`id` > 5" in joined.select_sql


@pytest.mark.integration
def test_unnest_of_structs_on_a_static_view_matches_duckdb(tmp_path, spark):
    """The translated SELECT on a static view: an array of structs, read as t.x->field; empty and NULL arrays and
    NULL elements."""
    from dsflow.adapters.spark.translate import KEY_COLUMN, view_name

    sql = ("CREATE STREAM carts (id BIGINT, items ARRAY<STRUCT<sku VARCHAR, qty INT>>)\n"
           "  WITH ('value.format' = 'json');\n"
           "CREATE STREAM lines AS SELECT c.id, t.item->sku AS sku, t.item->qty * 10 AS qty\n"
           "  FROM carts c CROSS JOIN UNNEST(c.items) AS t(item);\n")
    project = load_project(make_project(tmp_path, {"sql/all.sql": sql}))
    carts = [(1, [("a", 1), ("b", 2)]), (2, []), (3, None), (4, [None, ("c", None)]), (5, [("a", 1), ("a", 1)])]
    spark.createDataFrame([(i, items, str(i)) for i, items in carts],
                          f"id BIGINT, items ARRAY<STRUCT<sku: STRING, qty: INT>>, {KEY_COLUMN} STRING",
                          ).createOrReplaceTempView(view_name(0, project.queries[0]))
    got = Counter((r["id"], r["sku"], r["qty"]) for r in spark.sql(spark_select(project.queries[0], project)).collect())
    con = duckdb.connect()
    con.execute("CREATE TABLE carts (id BIGINT, items STRUCT(sku VARCHAR, qty INTEGER)[])")
    con.executemany("INSERT INTO carts VALUES (?, ?)",
                    [(i, [None if x is None else {"sku": x[0], "qty": x[1]} for x in items] if items is not None
                      else None) for i, items in carts])
    expected = Counter(con.execute("SELECT c.id, t.item.sku, t.item.qty * 10 FROM carts c "
                                   "CROSS JOIN UNNEST(c.items) AS t(item)").fetchall())
    assert got == expected and got[(5, "a", 10)] == 2 and not {i for i, _, _ in got} & {2, 3}
