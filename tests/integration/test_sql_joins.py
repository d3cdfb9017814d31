"""Interval joins of two streams (INNER, LEFT, FULL ... WITHIN) on real Spark and a real broker.

Events arrive shuffled (out of order) in phases; two final phases of far-future events move the
watermark so that unmatched rows of outer joins are emitted. Each sink's content must equal the
pairs a plain Python reference finds, row for row.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from support.streaming import produce, records, run, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
WITHIN_MS = 10_000

SQL = """\
CREATE STREAM views (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE STREAM clicks (cid BIGINT, cts BIGINT, userid VARCHAR, target VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'cts', 'topic.partitions' = 2);

CREATE STREAM inner_pairs AS
  SELECT v.id, c.cid, v.userid, c.target FROM views v JOIN clicks c WITHIN 10 SECONDS ON v.userid = c.userid;
CREATE STREAM left_pairs AS
  SELECT v.id, c.cid, v.userid, c.target FROM views v LEFT JOIN clicks c WITHIN 10 SECONDS ON v.userid = c.userid;
CREATE STREAM full_pairs AS
  SELECT v.id, c.cid, c.target FROM views AS v FULL OUTER JOIN clicks AS c WITHIN 10 SECONDS
  ON v.userid = c.userid AND c.target <> 'none';
"""


def feed(seed: int = 3) -> list[tuple[list[dict], list[dict]]]:
    rng = random.Random(seed)
    out = []
    for p in range(2):
        base = T0 + p * 60_000
        views = [{"id": p * 1000 + i, "ts": base + rng.randrange(60_000), "userid": f"u{rng.randrange(12)}",
                  "pageid": "x"} for i in range(60)]
        clicks = [{"cid": p * 1000 + i, "cts": base + rng.randrange(60_000), "userid": f"u{rng.randrange(12)}",
                   "target": rng.choice(["a", "b", "none"])} for i in range(60)]
        rng.shuffle(views)
        rng.shuffle(clicks)
        out.append((views, clicks))
    for p, offset in enumerate((1_000_000, 2_000_000)):  # move the watermark far ahead: outer rows come out
        flush = ([{"id": 90_000 + p, "ts": T0 + offset, "userid": "flush", "pageid": "x"}],
                 [{"cid": 90_000 + p, "cts": T0 + offset, "userid": "flush", "target": "a"}])
        if p == 0:
            out[-1] = (out[-1][0] + flush[0], out[-1][1] + flush[1])
        else:
            out.append(flush)
    return out


def reference(phases) -> dict[str, Counter]:
    views = [v for vs, _ in phases for v in vs if v["userid"] != "flush"]
    clicks = [c for _, cs in phases for c in cs if c["userid"] != "flush"]

    def near(v, c) -> bool:
        return v["userid"] == c["userid"] and v["ts"] - WITHIN_MS <= c["cts"] <= v["ts"] + WITHIN_MS

    pairs = [(v, c) for v in views for c in clicks if near(v, c)]
    inner = Counter((v["id"], c["cid"], v["userid"], c["target"]) for v, c in pairs)
    matched = {v["id"] for v, _ in pairs}
    left = inner + Counter((v["id"], None, v["userid"], None) for v in views if v["id"] not in matched)
    full_pairs = [(v, c) for v, c in pairs if c["target"] != "none"]
    full = Counter((v["id"], c["cid"], c["target"]) for v, c in full_pairs)
    full += Counter((v["id"], None, None) for v in views if v["id"] not in {v["id"] for v, _ in full_pairs})
    full += Counter((None, c["cid"], c["target"]) for c in clicks if c["cid"] not in {c["cid"] for _, c in full_pairs})
    return {"inner_pairs": inner, "left_pairs": left, "full_pairs": full}


def test_interval_joins_match_reference(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    phases = feed()
    for views, clicks in phases:
        produce(broker, project, "views", views, "userid")
        produce(broker, project, "clicks", clicks, "userid")
        for name in ("inner_pairs", "left_pairs", "full_pairs"):
            run(spark, project, name, tmp_path)
    expected = reference(phases)
    assert sum(expected["left_pairs"].values()) > sum(expected["inner_pairs"].values()) > 20
    for name, fields in (("inner_pairs", ("id", "cid", "userid", "target")),
                         ("left_pairs", ("id", "cid", "userid", "target")), ("full_pairs", ("id", "cid", "target"))):
        rows = [json.loads(r["value"]) for r in records(broker, project, name)]
        actual = Counter(tuple(row.get(f) for f in fields) for row in rows
                         if "flush" not in (row.get("userid"), ) and (row.get("id") or 0) < 90_000
                         and (row.get("cid") or 0) < 90_000)
        assert actual == expected[name], name
