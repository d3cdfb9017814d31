"""Changelog semantics on real Spark and a real broker: a record is an insert the first time its key appears and
an upsert afterwards, the key is the Kafka message key, and a null value (tombstone) deletes the key.

Seeded changes (upserts, tombstones, re-inserts, null regions, event times out of order) are fed in phases,
one availableNow run of each query per phase on one checkpoint. A plain Python reference applies the same
changes to a dict; the changelog sink's final content (tombstones included), the view's snapshot and the
stream of changes must equal it value for value.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from support.changelogs import changelog_content, produce_changes
from dsflow.adapters.sqlite import mv
from support.streaming import records, run, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
SQL = """\
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, region VARCHAR, score BIGINT, uts BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'timestamp' = 'uts', 'topic.partitions' = 2);

CREATE CHANGELOG users_outside_eu AS
  SELECT userid, name, region, score * 2 AS double_score FROM users WHERE region <> 'eu';
CREATE STREAM high_scores AS SELECT userid, name, score FROM users WHERE score > 50;
CREATE MATERIALIZED VIEW users_us AS SELECT u.userid, u.name, u.score FROM users u WHERE u.region = 'us';
"""
QUERIES = ("users_outside_eu", "high_scores", "users_us")


def phases(seed: int = 5) -> list[list[tuple[str, dict | None]]]:
    """Two phases of changes to 25 users: upserts, deletes, re-inserts; event times deliberately unordered."""
    rng = random.Random(seed)
    out = []
    for _ in range(2):
        changes: list[tuple[str, dict | None]] = []
        for _ in range(100):
            user = f"u{rng.randrange(25)}"
            if rng.random() < 0.2:
                changes.append((user, None))
                continue
            changes.append((user, {"userid": user, "name": f"n{rng.randrange(1000)}",
                                   "region": rng.choice(["eu", "us", "apac", None]), "score": rng.randrange(100),
                                   "uts": T0 + rng.randrange(0, 300_000)}))  # out of order: arrival decides
        out.append(changes)
    return out


def final_state(feed) -> dict[str, dict]:
    state: dict[str, dict] = {}
    for changes in feed:
        for key, value in changes:
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return state


def test_changelog_filters_emit_deletes_and_views_apply_them(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    feed = phases()
    for changes in feed:
        produce_changes(broker, project, "users", changes)
        for name in QUERIES:
            run(spark, project, name, tmp_path)
    state = final_state(feed)

    content, tombstones = changelog_content(broker, project, "users_outside_eu")
    expected = {k: {"userid": k, "name": v["name"], "region": v["region"], "double_score": v["score"] * 2}
                for k, v in state.items() if v["region"] is not None and v["region"] != "eu"}
    assert len(expected) >= 5 and len(state) > len(expected)
    assert content == expected
    assert tombstones > 0  # deleted users, and users that moved into 'eu' or to no region, were deleted

    database = mv.database_path(project.root, project.state_path, project.environment)
    _, rows = mv.run_query(database, "SELECT userid, name, score FROM users_us")
    assert {r[0]: (r[1], r[2]) for r in rows} == {k: (v["name"], v["score"]) for k, v in state.items()
                                                  if v["region"] == "us"}

    changes = [json.loads(r["value"]) | {"__key": r["key"]} for r in records(broker, project, "high_scores")]
    assert Counter((c["__key"], c["userid"], c["name"], c["score"]) for c in changes) == Counter(
        (k, v["userid"], v["name"], v["score"]) for batch in feed for k, v in batch
        if v is not None and v["score"] > 50)
