"""Interval joins of two streams (INNER, LEFT, FULL ... WITHIN), and regular joins (INNER without WITHIN, two-way
and three-way), on real Spark and a real broker.

Interval joins: events arrive shuffled (out of order) in phases; two final phases of far-future events move the
watermark so that unmatched rows of outer joins are emitted. Each sink's content must equal the
pairs a plain Python reference finds, row for row.

Regular joins: rounds of records, each processed by the one running query before the next round is produced (one
micro-batch or more per round), so that each side's records arrive in a later micro-batch than the records they
match, in both directions, and the third stream's last; some with event times days behind the others (no
watermark: none is late). A last round runs after a restart on the checkpoint: it joins the state kept there.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from support.streaming import produce, records, run, running, streaming_project

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


REGULAR_SQL = """\
CREATE STREAM views (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE STREAM clicks (cid BIGINT, cts BIGINT, userid VARCHAR, target VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'cts', 'topic.partitions' = 2);
CREATE STREAM buys (bid BIGINT, bts BIGINT, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'bts');

CREATE STREAM regular_pairs AS
  SELECT v.id, c.cid, v.userid, c.target FROM views v, clicks c WHERE v.userid = c.userid AND c.target <> 'none';
CREATE STREAM regular_triples AS
  SELECT v.id, c.cid, b.bid FROM views v JOIN clicks c ON c.userid = v.userid JOIN buys b ON b.pageid = v.pageid;
"""
DAY_MS = 86_400_000


def regular_rounds(seed: int = 5) -> list[dict[str, list[dict]]]:
    """Round 0: views of u0..u2, clicks of u3..u5, no buys (nothing joins yet). Round 1: the other side of each
    (clicks of u0..u2, views of u3..u5), a day behind in event time, and the first buys. Round 2: more of all
    three, shuffled. Round 3 (after a restart): one more record of each stream."""
    rng = random.Random(seed)
    ids = iter(range(1, 10_000))

    def view(users, ts):
        return {"id": next(ids), "ts": ts + rng.randrange(60_000), "userid": rng.choice(users),
                "pageid": f"p{rng.randrange(3)}"}

    def click(users, ts):
        return {"cid": next(ids), "cts": ts + rng.randrange(60_000), "userid": rng.choice(users),
                "target": rng.choice(["a", "b", "none"])}

    def buy(ts):
        return {"bid": next(ids), "bts": ts + rng.randrange(60_000), "pageid": f"p{rng.randrange(4)}"}

    low, high, every = ["u0", "u1", "u2"], ["u3", "u4", "u5"], [f"u{i}" for i in range(7)]
    rounds = [{"views": [view(low, T0) for _ in range(12)], "clicks": [click(high, T0) for _ in range(12)],
               "buys": []},
              {"views": [view(high, T0 - DAY_MS) for _ in range(12)],
               "clicks": [click(low, T0 - DAY_MS) for _ in range(12)], "buys": [buy(T0) for _ in range(4)]},
              {"views": [view(every, T0 + DAY_MS) for _ in range(10)],
               "clicks": [click(every, T0 - 2 * DAY_MS) for _ in range(10)], "buys": [buy(T0) for _ in range(4)]},
              {"views": [view(every, T0)], "clicks": [click(every, T0)], "buys": [buy(T0 - DAY_MS)]}]
    for batch in rounds:
        for rows in batch.values():
            rng.shuffle(rows)
    return rounds


def regular_reference(rounds) -> dict[str, Counter]:
    """Every pair (and triple) with equal keys, whatever their event times and arrival."""
    views, clicks, buys = ([r for batch in rounds for r in batch[name]] for name in ("views", "clicks", "buys"))
    pairs = [(v, c) for v in views for c in clicks if v["userid"] == c["userid"]]
    return {"regular_pairs": Counter((v["id"], c["cid"], v["userid"], c["target"]) for v, c in pairs
                                     if c["target"] != "none"),
            "regular_triples": Counter((v["id"], c["cid"], b["bid"]) for v, c in pairs for b in buys
                                       if b["pageid"] == v["pageid"])}


def test_regular_joins_match_reference_whatever_the_micro_batch_each_side_arrives_in(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, REGULAR_SQL)
    rounds = regular_rounds()
    names = ("regular_pairs", "regular_triples")

    def feed(batch) -> None:
        for stream, key in (("views", "userid"), ("clicks", "userid"), ("buys", "pageid")):
            produce(broker, project, stream, batch[stream], key)

    def sink(name: str, fields: tuple[str, ...]) -> Counter:
        return Counter(tuple(json.loads(r["value"])[f] for f in fields) for r in records(broker, project, name))

    pairs, triples = ("id", "cid", "userid", "target"), ("id", "cid", "bid")
    with running(spark, project, names, tmp_path) as caught_up:
        for index, batch in enumerate(rounds[:3]):
            feed(batch)
            caught_up()
            if index == 0:  # each side's records wait in the state for the other side's, in a later batch
                assert sink("regular_pairs", pairs) == Counter() and sink("regular_triples", triples) == Counter()
    first = regular_reference(rounds[:3])
    assert sink("regular_pairs", pairs) == first["regular_pairs"]
    assert sink("regular_triples", triples) == first["regular_triples"]
    feed(rounds[3])
    for name in names:  # restarted on its checkpoint: the new records join the state it kept
        run(spark, project, name, tmp_path)
    expected = regular_reference(rounds)
    assert sum(expected["regular_pairs"].values()) > sum(first["regular_pairs"].values()) > 50
    assert sum(expected["regular_triples"].values()) > sum(first["regular_triples"].values()) > 50
    assert sink("regular_pairs", pairs) == expected["regular_pairs"]
    assert sink("regular_triples", triples) == expected["regular_triples"]
