"""MAX_BY / MIN_BY in validate: what is accepted (with the value's type as the result type) and what is refused at
its file:line:col (DSF-E143 arity, DSF-E408 an unordered ordering, DSF-E165 an ordering a retracting aggregation
cannot compare exactly); and stage 2 of a retraction (adapters/spark/retract_state.py) on MAX_BY/MIN_BY pairs.
Pure: no broker, no Spark (tests/integration/test_sql_max_by.py runs them; test_typecheck.py asks Spark's verdict)."""

from __future__ import annotations

import pytest

from dsflow.adapters.spark.retract_state import apply_changes, empty_accumulator, results
from dsflow.adapters.spark.translate import query_spec
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = """\
CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, dt BIGINT, tags MAP<VARCHAR, INT>,
                    s STRUCT<a INT, m MAP<VARCHAR, INT>>, arr ARRAY<INT>, amount DECIMAL(12, 2))
  WITH ('value.format' = 'json', 'timestamp' = 'dt');
CREATE CHANGELOG bids_now (id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, arr ARRAY<INT>,
                           big DECIMAL(20, 2), amount DECIMAL(12, 2), b BINARY, PRIMARY KEY (id))
  WITH ('value.format' = 'json');
"""


def problems(tmp_path, sql: str) -> list[tuple[str, int, int, str]]:
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    return [(d.code, d.location.line, d.location.col, d.message) for d in check_project(root).diagnostics]


@pytest.mark.parametrize(("call", "code", "words"), [
    ("MAX_BY(bidder)", "DSF-E143", "MAX_BY takes 2 arguments (the value, its ordering), got 1"),
    ("MIN_BY(bidder, price, 2)", "DSF-E143", "MIN_BY takes 2 arguments (the value, its ordering), got 3"),
    ("MAX_BY(bidder, tags)", "DSF-E408", "MAX_BY ordered by MAP<STRING, INT> (maps are not ordered)"),
    ("MIN_BY(bidder, s)", "DSF-E408", "MIN_BY ordered by STRUCT<A: INT, M: MAP<STRING, INT>>"),
])
def test_a_wrong_call_is_refused_at_its_place(tmp_path, call, code, words):
    sql = f"CREATE CHANGELOG winners AS\n  SELECT auction,\n    {call} AS w FROM bids GROUP BY auction;\n"
    found = problems(tmp_path, sql)
    assert [(c, line, col) for c, line, col, _ in found] == [(code, 3, 5 + len(call.split("(")[0]) + 1)]
    assert words in found[0][3]


def test_accepted_calls_have_the_value_type_on_streams_and_windows(tmp_path):
    sql = ("CREATE CHANGELOG winners AS SELECT auction, MAX_BY(bidder, price) AS w, MIN_BY(tags, arr) AS t,\n"
           "  MAX_BY(amount, s->a) AS a, MAX_BY(bidder, price) + 1 AS w1 FROM bids GROUP BY auction;\n"
           "CREATE CHANGELOG per_window AS SELECT window_start, window_end, auction, MIN_BY(bidder, price) AS low\n"
           "  FROM HOP(bids, SIZE 20 SECONDS, ADVANCE BY 10 SECONDS) GROUP BY window_start, window_end, auction;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    types = {c.name: c.type for name in ("winners", "per_window")
             for c in project.relation(f"analytics.public.{name}").columns}
    assert {k: types[k] for k in ("w", "t", "a", "w1", "low")} == {
        "w": "BIGINT", "t": "MAP<VARCHAR, INT>", "a": "DECIMAL(12, 2)", "w1": "BIGINT", "low": "BIGINT"}
    spec = query_spec(project, project.queries[0], "v1", "/tmp/checkpoint", "/tmp/status")
    assert "MAX_BY(`bids`.`bidder`, `bids`.`price`) AS `w`" in spec.select_sql and spec.retract is None


def test_a_column_outside_max_by_must_be_grouped(tmp_path):
    found = problems(tmp_path, "CREATE CHANGELOG w AS SELECT auction, bidder, MAX_BY(bidder, price) AS w\n"
                               "  FROM bids GROUP BY auction;\n")
    assert [(c, line, col) for c, line, col, _ in found] == [("DSF-E046", 1, 39)]


@pytest.mark.parametrize(("ordering", "shown"), [("arr", "ARRAY<INT>"), ("big", "DECIMAL(20, 2)"), ("b", "BINARY")])
def test_over_a_changelog_an_ordering_compared_inexactly_is_refused(tmp_path, ordering, shown):
    sql = (f"CREATE CHANGELOG best AS SELECT auction,\n  MAX_BY(bidder, {ordering}) AS w FROM bids_now "
           "GROUP BY auction;\n")
    found = problems(tmp_path, sql)
    assert [(c, line, col) for c, line, col, _ in found] == [("DSF-E165", 2, 10)]
    assert f"MAX_BY over a changelog ordered by {shown}" in found[0][3]


def test_over_a_changelog_max_by_is_retracted(tmp_path):
    sql = ("CREATE CHANGELOG best AS SELECT auction, MAX_BY(bidder, price) AS w, MIN_BY(price, amount) AS p\n"
           "  FROM bids_now GROUP BY auction;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    spec = query_spec(project, project.queries[0], "v1", "/tmp/checkpoint", "/tmp/status")
    assert spec.retract.aggregates == ["max_by", "min_by"]
    assert ("IF(`bids_now`.`price` IS NULL, NULL, NAMED_STRUCT('o', `bids_now`.`price`, 'v', `bids_now`.`bidder`)) "
            "AS __a0") in spec.select_sql


def test_stage_two_keeps_every_pair_and_retracts_the_extreme():
    kinds = ["max_by", "min_by"]
    acc = empty_accumulator(kinds)
    rows = [{"__a0": {"o": 5, "v": "a"}, "__a1": {"o": 5, "v": "a"}}, {"__a0": {"o": 9}, "__a1": {"o": 9}},
            {"__a0": {"o": 1, "v": "c"}, "__a1": {"o": 1, "v": "c"}}, {}]  # a NULL value; a NULL ordering (absent)
    apply_changes(acc, kinds, [(1, r) for r in rows])
    assert results(acc, kinds) == {"__r0": None, "__r1": "c"}  # the highest ordering's value is NULL
    apply_changes(acc, kinds, [(-1, rows[1]), (-1, rows[2])])  # the extremes retracted: the next ones
    assert results(acc, kinds) == {"__r0": "a", "__r1": "a"}
    apply_changes(acc, kinds, [(-1, rows[0]), (-1, rows[3])])
    assert (acc["n"], results(acc, kinds)) == (0, {"__r0": None, "__r1": None})


def test_stage_two_compares_strings_by_code_point_and_keeps_a_tie_until_retracted():
    kinds = ["max_by"]
    acc = apply_changes(empty_accumulator(kinds), kinds, [(1, {"__a0": {"o": "Z", "v": 1}}),
                                                           (1, {"__a0": {"o": "a", "v": 2}}),
                                                           (1, {"__a0": {"o": "a", "v": 3}})])
    assert results(acc, kinds)["__r0"] in (2, 3)  # a tie: any of them, as Spark's MAX_BY
    apply_changes(acc, kinds, [(-1, {"__a0": {"o": "a", "v": 2}})])
    assert results(acc, kinds)["__r0"] == 3


def test_row_number_outside_the_top_n_form_is_refused_with_its_rewrites(tmp_path):
    sql = ("CREATE STREAM best AS SELECT auction, bidder,\n  ROW_NUMBER() OVER "
           "(PARTITION BY auction ORDER BY price DESC) AS rn FROM bids;\n")  # the top-N form: test_topn_validate.py
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    [found] = check_project(root).diagnostics
    assert (found.code, found.location.line) == ("DSF-E045", 2)
    assert "SELECT auction, MAX_BY(c, price) AS c, ... GROUP BY auction" in found.hint
    assert "AS rn FROM stream) WHERE rn <= N, into a CHANGELOG keyed by (auction[, rn])" in found.hint
