"""A NULL group key: the record key of a changelog row whose one key column is NULL is '{"col":null}'
(formats/keys.py null_key_text), never a null key, which the producer would spread over the partitions at random
so that the group's updates and its tombstone lost their order. On real Spark and a real broker against DuckDB."""

from __future__ import annotations

import duckdb

from support.changelogs import changelog_content, produce_changes
from dsflow.adapters.spark.retract import STATE_PROVIDER
from dsflow.formats.keys import _key_value, null_key_text, record_text
from support.streaming import records, run, streaming_project

SQL = """\
CREATE CHANGELOG users (userid VARCHAR, tier VARCHAR, score BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE CHANGELOG by_tier WITH ('topic.partitions' = 4) AS
  SELECT tier, COUNT(*) AS n, SUM(score) AS s FROM users GROUP BY tier;
CREATE CHANGELOG tier_copy WITH ('topic.partitions' = 3) AS SELECT tier, n FROM by_tier;
"""
MARKER = null_key_text("tier")


def _phases() -> list[list[tuple[str, dict | None]]]:
    first = [(f"u{i}", {"userid": f"u{i}", "tier": None if i % 3 == 0 else f"t{i % 2}", "score": i})
             for i in range(30)]
    second = [(f"u{i}", None) for i in range(0, 30, 3)]  # every NULL-tier user deleted: the NULL group goes
    second += [("u1", {"userid": "u1", "tier": None, "score": 100})]  # and comes back with one user
    third = [("u1", None)]  # and goes again
    return [first, second, third]


def _expected(changes: list[tuple[str, dict | None]]) -> dict:
    users: dict[str, dict] = {}
    for key, value in changes:
        users.pop(key, None) if value is None else users.__setitem__(key, value)
    con = duckdb.connect()
    con.execute("CREATE TABLE users (userid VARCHAR, tier VARCHAR, score BIGINT)")
    if users:
        con.executemany("INSERT INTO users VALUES (?, ?, ?)", [(u["userid"], u["tier"], u["score"])
                                                                for u in users.values()])
    return {tier: (n, s) for tier, n, s in con.execute("SELECT tier, COUNT(*), SUM(score) FROM users GROUP BY tier")
            .fetchall()}


def test_a_null_group_keeps_one_partition_and_is_read_back_as_null(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    seen: list[tuple[str, dict | None]] = []
    try:
        for phase, changes in enumerate(_phases()):
            produce_changes(broker, project, "users", changes)
            seen += changes
            for name in ("by_tier", "tier_copy"):
                run(spark, project, name, tmp_path, timeout=300)
            content, _ = changelog_content(broker, project, "by_tier")
            assert {v.get("tier"): (v["n"], v["s"]) for v in content.values()} == _expected(seen), phase
            copied, _ = changelog_content(broker, project, "tier_copy")
            assert {v.get("tier"): v["n"] for v in copied.values()} == {t: n for t, (n, _) in _expected(seen).items()}
    finally:
        spark.conf.unset(STATE_PROVIDER)
    for name in ("by_tier", "tier_copy"):
        written = [r for r in records(broker, project, name) if r["key"] == MARKER]
        assert len(written) >= 3, written  # created, updated (deleted and back in one batch), deleted
        assert len({r["partition"] for r in written}) == 1, written
        assert all(r["key"] is not None for r in records(broker, project, name))
        assert written[-1]["value"] is None  # the NULL group's last record is its tombstone


def test_the_null_key_text_round_trips_through_key_schemas():
    assert MARKER == '{"tier":null}'
    assert _key_value(MARKER, [("tier", "VARCHAR")], "t") == {"tier": None}
    assert _key_value("t1", [("tier", "VARCHAR")], "t") == {"tier": "t1"}
    assert _key_value(null_key_text("id"), [("id", "BIGINT")], "t") == {"id": None}
    assert record_text({"tier": None}) == MARKER and record_text({"tier": "x"}) == "x"
