"""Stream-changelog (temporal) joins on real Spark and a real broker: each pageview joins the user's row as of
the pageview's event time.

Pageviews and user changes (updates, tombstones with their own record timestamps, users that never exist)
are interleaved and shuffled within each phase, so changes arrive out of order; a later phase brings late
pageviews (behind the watermark, dropped) and user changes older than pending pageviews (seen by them),
then a far-future pageview moves the watermark past everything. A plain Python reference picks, for each
pageview, the newest user version at or before its time; the sinks must equal it row for row.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from support.changelogs import produce_changes
from dsflow.adapters.spark.temporal import step
from pyspark.sql import functions as F
from support.streaming import produce, records, run, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
DELAY_MS = 5_000
USERS = [f"u{i}" for i in range(10)]  # u8 and u9 never get a row

SQL = """\
CREATE STREAM pageviews (id BIGINT, ts BIGINT, userid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, uts BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'timestamp' = 'uts', 'topic.partitions' = 2);

CREATE STREAM enriched AS
  SELECT p.id, p.userid, u.name FROM pageviews p JOIN users u ON p.userid = u.userid;
CREATE STREAM enriched_left WITH ('watermark.delay' = '5 seconds') AS
  SELECT p.id, p.ts, u.name AS user_name FROM pageviews AS p LEFT JOIN users AS u ON u.userid = p.userid
  WHERE p.id <> 13;
"""


def feed(seed: int = 21) -> list[dict]:
    """Phases of {'views': [...], 'users': [(key, value or None, record ts)]}."""
    rng = random.Random(seed)
    ids = iter(range(1, 100_000))
    initial = [(u, {"userid": u, "name": f"{u}-v0", "uts": T0}, T0) for u in USERS[:8]]

    def change(ts: int) -> tuple:
        user = rng.choice(USERS[:8])
        if rng.random() < 0.2:
            return user, None, ts
        return user, {"userid": user, "name": f"{user}-{rng.randrange(10_000)}", "uts": ts}, ts

    def views(lo: int, hi: int, count: int) -> list[dict]:
        return [{"id": next(ids), "ts": T0 + rng.randrange(lo, hi), "userid": rng.choice(USERS)} for _ in range(count)]

    first = {"views": views(1_000, 30_000, 80), "users": [change(T0 + rng.randrange(1_000, 30_000)) for _ in range(30)]}
    rng.shuffle(first["users"])
    first["users"] = initial + first["users"]  # the first versions arrive first, then updates in random order
    newest = max(v["ts"] for v in first["views"])
    second = {"views": views(30_000, 60_000, 80) + views(0, 15_000, 10),  # the last 10 are late
              "users": [change(newest - rng.randrange(0, 3_000)) for _ in range(10)]  # older than pending views
              + [change(T0 + rng.randrange(30_000, 60_000)) for _ in range(30)]}
    rng.shuffle(first["views"])
    rng.shuffle(second["views"])
    rng.shuffle(second["users"])
    flush = {"views": [{"id": 99_999, "ts": T0 + 1_000_000, "userid": "nobody"}], "users": []}
    return [first, second, flush]


def reference(phases: list[dict]) -> tuple[Counter, Counter]:
    versions: dict[str, list[tuple[int, int, dict | None]]] = {}
    order = 0
    for phase in phases:
        for key, value, ts in phase["users"]:
            versions.setdefault(key, []).append((ts, order, value))
            order += 1
    inner, left = Counter(), Counter()
    watermark = -1
    for phase in phases:
        for view in phase["views"]:
            if view["ts"] <= watermark or view["id"] == 99_999:
                continue  # late: behind the watermark of the earlier phases
            known = [v for v in versions.get(view["userid"], []) if v[0] <= view["ts"]]
            row = max(known, key=lambda v: (v[0], v[1]))[2] if known else None
            if row is not None:
                inner[(view["id"], view["userid"], row["name"])] += 1
            if view["id"] != 13:
                left[(view["id"], view["ts"], row["name"] if row else None)] += 1
        if phase["views"]:
            watermark = max(watermark, max(v["ts"] for v in phase["views"]) - DELAY_MS)
    return inner, left


def test_temporal_join_matches_the_changelog_as_of_each_event(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    phases = feed()
    for phase in phases:
        if phase["users"]:
            produce_changes(broker, project, "users", [(k, v) for k, v, _ in phase["users"]],
                            timestamps=[ts for _, _, ts in phase["users"]])
        produce(broker, project, "pageviews", phase["views"], "userid")
        for name in ("enriched", "enriched_left"):
            run(spark, project, name, tmp_path)
    inner, left = reference(phases)
    assert sum(left.values()) > sum(inner.values()) > 60

    rows = [(r["key"], json.loads(r["value"])) for r in records(broker, project, "enriched")]
    assert all(key == row["userid"] for key, row in rows)  # the pageview's key is carried through
    assert Counter((row["id"], row["userid"], row["name"]) for _, row in rows) == inner
    rows = [json.loads(r["value"]) for r in records(broker, project, "enriched_left")]
    assert Counter((row["id"], row["ts"], row.get("user_name")) for row in rows) == left  # JSON omits nulls


def test_step_waits_for_the_watermark_and_prunes_old_versions():
    rows = [(1, 100, 0, None, '{"n":"a"}'), (1, 200, 1, None, '{"n":"b"}'), (1, 300, 2, None, None)]
    stream = [(0, 150, 0, "k", '{"id":1}', None), (0, 250, 0, "k", '{"id":2}', None),
              (0, 350, 0, "k", '{"id":3}', None), (0, 90, 0, "k", '{"id":4}', None)]
    versions, pending, out = step([], [], [(s, e, o, None, None, c) for s, e, o, _, c in rows] + stream, 0, False)
    assert out == [] and [p[0] for p in pending] == [90, 150, 250, 350]
    versions, pending, out = step(versions, pending, [], 260, False)
    assert out == [("k", '{"id":4}', None), ("k", '{"id":1}', '{"n":"a"}'), ("k", '{"id":2}', '{"n":"b"}')]
    assert [v[0] for v in versions] == [200, 300] and [p[0] for p in pending] == [350]
    versions, pending, out = step(versions, pending, [(0, 100, 0, "k", '{"id":5}', None)], 400, True)
    assert out == [] and pending == [] and versions == []  # late row dropped; the tombstone alone is pruned


def test_keys_of_two_types_match_when_spark_finds_them_equal(spark):
    """A stream key of another type than the changelog's BIGINT key matches as Spark's `=` compares them (7.0 = 7),
    not by the texts of the two types ('7.0' and '7' were no match); one select each side, for speed."""
    from dsflow.adapters.spark.temporal import key_text, key_types

    stream = spark.createDataFrame([(7.0, "7.00", 7, "07"), (7.5, "7.50", 8, "8")],
                                   "x DOUBLE, p STRING, n INT, s STRING")
    stream = stream.selectExpr("x", "CAST(p AS DECIMAL(10, 2)) AS p", "n", "s")
    changelog = spark.createDataFrame([(7,)], "cid BIGINT")
    keys = ["x", "p", "n", "s"]
    types = {k: key_types(stream, changelog, [k], ["cid"]) for k in keys}
    [wanted] = changelog.select(*[key_text(["cid"], types[k]).alias(k) for k in keys]).collect()
    rows = stream.select(*[key_text([k], types[k]).alias(k) for k in keys],
                         *[F.expr(f"{k} = CAST(7 AS BIGINT)").alias(f"{k}_eq") for k in keys]).collect()
    assert [[row[k] == wanted[k] for k in keys] for row in rows] == [[row[f"{k}_eq"] for k in keys] for row in rows]
    assert [[row[f"{k}_eq"] for k in keys] for row in rows] == [[True] * 4, [False] * 4]  # Spark's `=`
