"""ROW_NUMBER top-N and deduplication in validate (sql/topn.py): the shape accepted over a stream or a changelog,
into a changelog keyed by the partition columns (and the rank), and each variant refused at its file:line:col
(DSF-E185 the shape, DSF-E187 the key or the sink); and the ranking of adapters/spark/topn_state.py (ties, NULLs,
rank rows replaced and deleted). Pure: no broker, no Spark (tests/integration/test_nexmark_published.py runs it)."""

from __future__ import annotations

import pytest

from dsflow.adapters.spark.topn_state import partition_changes, rank_changes, ranked
from dsflow.adapters.spark.translate import query_spec
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = """\
CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, dt TIMESTAMP, tags ARRAY<INT>)
  WITH ('value.format' = 'json', 'timestamp' = 'dt');
CREATE CHANGELOG bids_now (id BIGINT, auction BIGINT, price BIGINT, PRIMARY KEY (id)) WITH ('value.format' = 'json');
CREATE CHANGELOG top3 (auction BIGINT, bidder BIGINT, price BIGINT, rn BIGINT, PRIMARY KEY (auction, rn))
  WITH ('value.format' = 'json');
CREATE STREAM out_stream (auction BIGINT, bidder BIGINT, price BIGINT, rn BIGINT) WITH ('value.format' = 'json');
"""
TOP3 = "SELECT auction, bidder, price, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC)"


def problems(tmp_path, sql: str) -> list[tuple[str, int, int, str]]:
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    return [(d.code, d.location.line, d.location.col, d.message) for d in check_project(root).diagnostics]


def test_top_n_into_a_changelog_keyed_by_partition_and_rank(tmp_path):
    sql = f"INSERT INTO top3 {TOP3} AS rn FROM bids WHERE price > 0) AS q WHERE q.rn <= 3;\n" \
          "CREATE CHANGELOG latest AS SELECT bidder, price FROM\n" \
          "  (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder ORDER BY dt DESC) AS r FROM bids) WHERE 1 = r;\n"
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    top3, latest = sorted(project.queries, key=lambda q: q.fqn, reverse=True)
    assert (top3.top_n.limit, top3.top_n.partition, top3.top_n.rank_column, top3.key_columns) == \
        (3, ("auction",), "rn", ("auction", "rn"))
    assert (latest.top_n.limit, latest.top_n.rank_column, latest.key_columns) == (1, None, ("bidder",))
    assert project.relation("analytics.public.latest").primary_key == ("bidder",)
    assert [c.name for c in latest.output_columns] == ["bidder", "price"]
    spec = query_spec(project, top3, "v1", "/tmp/checkpoint", "/tmp/status")
    assert spec.top_n is not None and spec.top_n.columns == ["auction", "bidder", "price", "rn"]
    assert (spec.top_n.descending, spec.top_n.nulls_first) == ([True], [False])
    assert spec.sink.key_columns == ["auction", "rn"] and not spec.top_n.changelog
    assert "WHERE `bids`.`price` > 0" in spec.select_sql and "ROW_NUMBER" not in spec.select_sql


@pytest.mark.parametrize(("query", "code", "line", "col", "words"), [
    (f"{TOP3} AS rn FROM bids)\n  WHERE rn > 3", "DSF-E185", 2, 9, "the rows kept are WHERE rn <= N"),
    (f"{TOP3} AS rn FROM bids)\n  WHERE rn <= 3 AND price > 5", "DSF-E185", 2, 9, "and nothing else"),
    (f"{TOP3} AS rn FROM bids)", "DSF-E185", 1, 8, "needs WHERE rn <= N"),
    ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY price) AS rn FROM bids) WHERE rn <= 3",
     "DSF-E185", 1, 26, "needs PARTITION BY"),
    ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY tags) AS rn FROM bids)\n"
     "  WHERE rn <= 3", "DSF-E185", 1, 75, "ORDER BY tags: a ARRAY<INT>"),
    ("SELECT auction, price + rn AS p FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price) AS rn"
     " FROM bids) WHERE rn <= 3", "DSF-E185", 1, 8, "inside an expression"),
    ("SELECT bidder, price, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price) AS rn FROM "
     "bids) WHERE rn <= 3", "DSF-E187", 1, 8, "the PARTITION BY column 'auction' must be selected"),
    ("SELECT auction, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price) AS rn FROM "
     "bids) WHERE rn <= 3", "DSF-E187", 1, 8, "the rank 'rn' must be selected"),
])
def test_a_variant_is_refused_at_its_place(tmp_path, query, code, line, col, words):
    found = problems(tmp_path, f"CREATE CHANGELOG ranked AS {query};\n")
    assert [(c, ln, cl) for c, ln, cl, _ in found] == [(code, line, col + len("CREATE CHANGELOG ranked AS "
                                                                              if line == 1 else ""))]
    assert words in found[0][3]


def test_top_n_over_a_changelog_ranks_with_its_deletes(tmp_path):
    sql = "CREATE CHANGELOG top_now AS SELECT * FROM\n  (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY " \
          "price DESC) AS rn FROM bids_now WHERE price > 0) WHERE rn <= 2;\n"
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    query = next(q for q in project.queries if q.fqn.endswith("top_now"))
    assert (query.key_columns, query.deletes) == (("auction", "rn"), "none")
    spec = query_spec(project, query, "v1", "/tmp/checkpoint", "/tmp/status")
    assert spec.top_n is not None and spec.top_n.changelog
    assert "TO_JSON(ARRAY(CAST(bids_now.id AS STRING))) AS __pk" in spec.select_sql
    assert "COALESCE((`bids_now`.`price` > 0), FALSE) AND NOT bids_now.__deleted AS __keep" in spec.select_sql
    assert " WHERE " not in spec.select_sql  # a row that stops matching leaves the ranking: __keep


def test_another_row_number_stays_unsupported_with_the_top_n_hint(tmp_path):
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql":
                                   "CREATE STREAM r AS SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY "
                                   "price) AS rn FROM bids;\n"})
    found = check_project(root).diagnostics
    assert [d.code for d in found] == ["DSF-E045"] and "WHERE rn <= N" in (found[0].hint or "")


@pytest.mark.parametrize(("sql", "words"), [
    (f"CREATE STREAM ranked AS {TOP3} AS rn FROM bids) WHERE rn <= 3;", "is a stream"),
    (f"INSERT INTO out_stream {TOP3} AS rn FROM bids) WHERE rn <= 3;", "is a stream"),
    (f"INSERT INTO top3 {TOP3} AS rn FROM bids) WHERE rn = 1;", "keyed by (auction, rn), but a ROW_NUMBER top-1 "
                                                                  "makes a changelog keyed by (auction)"),
])
def test_a_sink_that_is_not_the_keyed_changelog_is_refused(tmp_path, sql, words):
    found = problems(tmp_path, sql + "\n")
    assert [(c, ln) for c, ln, _, _ in found] == [("DSF-E187", 1)]
    assert words in found[0][3]


def _row(price, place, name=None):
    return [[price], [0, place], name or f"r{place}"]


def test_ranking_orders_ties_by_place_and_nulls_as_sql_does():
    rows = ranked([], [_row(5, 3), _row(7, 1), _row(5, 2), _row(None, 0)], 3, [True], [False])
    assert [r[1][1] for r in rows] == [1, 2, 3]  # 7, then the tied 5s by offset; DESC puts NULL last
    assert [r[1][1] for r in ranked([], [_row(5, 3), _row(None, 0)], 2, [False], [True])] == [0, 3]
    again = ranked(rows, [_row(7, 1)], 3, [True], [False])  # a replayed record is not ranked twice
    assert again == rows


def test_rank_changes_upsert_changed_ranks_and_delete_ranks_left_empty():
    old = [_row(9, 1), _row(8, 2), _row(7, 3)]
    new = ranked(old, [_row(8.5, 4)], 3, [True], [False])
    assert rank_changes(old, new) == [(2, True, "r4"), (3, True, "r2")]
    assert rank_changes(old, old[:1]) == [(2, False, "r2"), (3, False, "r3")]
    assert rank_changes([], old[:1]) == [(1, True, "r1")]


def test_a_changelog_key_ranks_every_row_so_a_deleted_top_row_gives_way():
    def row(pk, price, text):
        return [[price], [str(pk)], text]

    rows = {'["1"]': row(1, 9, "a"), '["2"]': row(2, 8, "b"), '["3"]': row(3, 7, "c")}
    rows, out = partition_changes(rows, [('["1"]', None)], 2, [True], [False])  # the top row deleted
    assert out == [(1, True, "b"), (2, True, "c")] and set(rows) == {'["2"]', '["3"]'}
    rows, out = partition_changes(rows, [('["3"]', row(3, 8, "c2"))], 2, [True], [False])  # a tie: "2" < "3"
    assert out == [(2, True, "c2")]
    rows, out = partition_changes(rows, [('["2"]', None), ('["3"]', None)], 2, [True], [False])
    assert out == [(1, False, "b"), (2, False, "c2")] and rows == {}
