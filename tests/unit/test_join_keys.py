"""DSF-E211 (sql/join_keys.py): a join that matches its keys by their text refuses key columns of two declared
types, at the join; the first temporal join of a stream (compared in Spark's common type) and keys of one type
(whatever the synonym or VARCHAR length) validate. Pure: no broker, no Spark."""

from __future__ import annotations

import pytest

from dsflow.load.project import check_project
from dsflow.sql.join_keys import _normal
from support.projects import make_project

SOURCES = """\
CREATE CHANGELOG a (id BIGINT, v BIGINT, PRIMARY KEY (id)) WITH ('value.format' = 'json');
CREATE CHANGELOG b (bid DOUBLE, w BIGINT, PRIMARY KEY (bid)) WITH ('value.format' = 'json');
CREATE CHANGELOG c (cid BIGINT, name VARCHAR, PRIMARY KEY (cid)) WITH ('value.format' = 'json');
CREATE STREAM s (sid BIGINT, ts TIMESTAMP) WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE STREAM t (tid DOUBLE, ts TIMESTAMP) WITH ('value.format' = 'json', 'timestamp' = 'ts');
"""


def _found(tmp_path, sql: str) -> list[tuple[str, int]]:
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    return [(d.code, d.location.line) for d in check_project(root).diagnostics if d.code != "DSF-W001"]


@pytest.mark.parametrize("sql", [
    "CREATE CHANGELOG j AS SELECT a.id, a.v, b.w FROM a JOIN b ON a.id = b.bid;",  # two changelogs
    "CREATE CHANGELOG j AS SELECT a.id, c.name, b.w FROM a JOIN c ON a.id = c.cid LEFT JOIN b ON a.id = b.bid;",
    "CREATE STREAM j AS SELECT s.sid, c.name, b.w FROM s JOIN c ON s.sid = c.cid JOIN b ON s.sid = b.bid;",
    "CREATE CHANGELOG j AS SELECT s.sid, COUNT(*) AS n FROM s JOIN t ON s.sid = t.tid GROUP BY s.sid;",
])
def test_text_keyed_joins_of_two_key_types_are_refused_at_the_join(tmp_path, sql):
    assert _found(tmp_path, sql) == [("DSF-E211", 1)]


@pytest.mark.parametrize("sql", [
    "CREATE STREAM j AS SELECT s.sid, b.w FROM s JOIN b ON s.sid = b.bid;",  # compared in the common type
    "CREATE CHANGELOG j AS SELECT a.id, a.v, c.name FROM a JOIN c ON a.id = c.cid;",
])
def test_a_first_temporal_join_and_keys_of_one_type_validate(tmp_path, sql):
    assert _found(tmp_path, sql) == []


def test_synonyms_and_lengths_are_one_type():
    assert _normal("string") == _normal("VARCHAR(20)") == _normal("varchar") == "VARCHAR"
    assert _normal("INTEGER") == "INT" and _normal("decimal(10, 2)") == "DECIMAL(10,2)" != _normal("DECIMAL(12,3)")
