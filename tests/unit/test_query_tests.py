"""`dsflow test`'s test files (load/unittests.py) and its comparison (core/unittests.py), without Spark: problems at
their file:line, reported together; final states from upserts and deletes; diffs of rows."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from dsflow.cli import cli
from dsflow.core.unittests import Expected, Observed, UnitTest, compare, final_state, normal
from dsflow.errors import Location, ProjectError
from dsflow.load.unittests import fits
from support.projects import make_project

SQL = """\
CREATE STREAM pageviews (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 1);
CREATE STREAM checked AS SELECT id, pageid FROM pageviews;
CREATE CHANGELOG per_user AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
"""


def test_errors_in_test_files_are_located_and_reported_together(tmp_path) -> None:
    text = textwrap.dedent("""\
        tests:
          - name: t1
            query: no_such_query
            inputs: {pageviews: []}
            expect: {rows: []}
          - name: t2
            query: checked
            inputs:
              clicks: []
              pageviews:
                - {id: 1, ts: 1, userid: u, pagid: a}
                - {id: one, ts: 1, userid: u, pageid: a}
            expect: {state: []}
        """)
    root = make_project(tmp_path, {"sql/all.sql": SQL, "tests/bad.yml": text})
    with pytest.raises(ProjectError) as raised:
        CliRunner().invoke(cli, ["-C", str(root), "test"], catch_exceptions=False)
    found = sorted((d.code, d.location.line if d.location else 0) for d in raised.value.diagnostics)
    assert found == [("DSF-E881", 3), ("DSF-E882", 9), ("DSF-E883", 11), ("DSF-E884", 12), ("DSF-E885", 13)]
    assert str(raised.value.diagnostics[0].location).startswith("tests/bad.yml:")


def test_the_final_state_applies_upserts_and_deletes_in_order() -> None:
    observed = Observed(columns=["k", "v"], key_columns=["k"], batches=[
        [({"k": "a", "v": 1}, True), ({"k": "b", "v": 1}, True)],
        [({"k": "a", "v": 2}, True), ({"k": "b", "v": 1}, False)],
        [({"k": "b", "v": 3}, True), ({"k": "a", "v": 2}, False), ({"k": "a", "v": 4}, True)]])
    assert sorted(final_state(observed), key=lambda r: r["k"]) == [{"k": "a", "v": 4}, {"k": "b", "v": 3}]


def test_rows_are_a_multiset_compared_on_the_columns_named() -> None:
    test = UnitTest(name="t", query="q", batches=(), location=Location("t.yml", 1),
                    expected=Expected(rows=({"id": 1}, {"id": 1}, {"id": 2})))
    observed = Observed(columns=["id", "x"], key_columns=[], batches=[
        [({"id": 2, "x": "b"}, True), ({"id": 1, "x": "a"}, True)], [({"id": 3, "x": "c"}, True)]])
    [mismatch] = compare(test, observed)
    assert (mismatch.missing, mismatch.unexpected) == (({"id": 1},), ({"id": 3},))
    observed.batches[1] = [({"id": 1, "x": "c"}, True)]
    assert compare(test, observed) == []


@pytest.mark.parametrize(("sql_type", "value", "ok"), [
    ("BIGINT", 3, True), ("BIGINT", "3", False), ("BIGINT", True, False), ("DOUBLE", 3, True),
    ("VARCHAR", 3, False), ("TIMESTAMP", "2024-01-01 00:00:05", True), ("TIMESTAMP", "soon", False),
    ("ARRAY<INT>", [1], True), ("BOOLEAN", None, True)])
def test_values_fit_their_declared_types(sql_type: str, value, ok: bool) -> None:
    assert fits(sql_type, value) is ok


def test_timestamps_compare_in_utc_whatever_their_spelling() -> None:
    assert normal("2024-01-01T00:00:05Z") == normal("2024-01-01 00:00:05") == normal("2024-01-01T01:00:05+01:00")
    assert normal(1.0) == normal(1)


def test_the_test_source_releases_batches_and_never_goes_back(tmp_path) -> None:
    import json

    from dsflow.adapters.spark.testsource import TestInputSource, release

    (tmp_path / "0.json").write_text(json.dumps([[["k", '{"a": 1}', 1000, 0]], [], [["k", None, 2000, 0]]]))
    release(tmp_path, 0)
    reader = TestInputSource(options={"dir": str(tmp_path), "input": "0.json"}).streamReader(None)
    assert reader.latestOffset({"batch": 0}, None) == {"batch": 0}
    release(tmp_path, 3)
    end = reader.latestOffset({"batch": 0}, None)
    assert end == {"batch": 3} and reader.latestOffset({"batch": 3}, None) == end
    release(tmp_path, 1)  # a count below what was read already: the offset stays where it is
    assert reader.latestOffset({"batch": 3}, None) == {"batch": 3}
    [part] = reader.partitions({"batch": 1}, end)
    rows = list(reader.read(part))
    assert [(r[0], r[1], r[2].timestamp()) for r in rows] == [("k", None, 2.0)]


def test_the_tests_folder_hides_its_yaml_but_no_sql(tmp_path) -> None:
    """`tests/*.yml` are `dsflow test`'s files, not declarations; a `.sql` file there is still a project file (a
    project that kept declarations there loses none unseen)."""
    from dsflow.load.project import discover

    for rel in ("dsflow.yml", "sql/a.sql", "tests/t.yml", "tests/kept.sql", "sub/tests/x.yml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    found = [p.relative_to(tmp_path).as_posix() for p in discover(tmp_path)]
    assert found == ["sql/a.sql", "sub/tests/x.yml", "tests/kept.sql"]
