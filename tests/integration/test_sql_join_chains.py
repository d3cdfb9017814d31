"""Joins of more than two relations (a left-deep chain): three temporal joins (INNER, LEFT keyed by the first
changelog's column, INNER keyed by the stream's); an INNER and a LEFT interval join each followed by a LEFT
temporal join; two interval joins chained (INNER-INNER ON the second stream's column, LEFT-LEFT then a LEFT
temporal join); on real Spark and a real broker; and the chains that are refused (DSF-E045, E131, E132, E194,
E196..E198, and E190, E192 for chains of changelogs), with their places. Chains of changelogs themselves:
tests/integration/test_sql_changelog_chains.py.

In each of two phases (`enriched` and the chains of two interval joins run after each, on one checkpoint; the others
after the last) the changelog changes (updates, tombstones, keys that never exist) are produced before the stream
records, in random order; the second brings late records and ends with a far-future order, shipment and return that
move the watermark past everything. A plain Python reference joins each order with each changelog's newest version
at or before the order's time, and with the shipments and returns within each WITHIN of the order's time (the
event time of every joined row: the first stream's); the sinks must equal it row for row.

Late records (dropped: they join nothing, and a late order is not written even by a LEFT join). `enriched`: an order
at or behind the watermark the first run leaves (the newest order time minus 5 s). The interval chains: with W1 the
watermark the first run leaves (the smallest of the three streams' newest event times, minus 5 s), an order or a
shipment at or behind W1, a return at or behind W1 - 5 s (Spark drops a row behind its join's input watermark, which
for the second join is the first join's output watermark: W1 minus its WITHIN). The feed keeps every record of the
second phase more than a second away from these bounds, so the test does not rest on Spark's rounding.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from support.changelogs import produce_changes
from dsflow.adapters.spark.temporal import step
from dsflow.adapters.spark.translate import chain_spec, spark_select
from dsflow.core.model import IntervalJoin, TemporalJoin
from dsflow.load.project import check_project, load_project
from dsflow.sql.plan import lower
from support.projects import make_project
from support.streaming import produce, records, run, streaming_project

T0 = 1_700_000_000_000
FLUSH = 99_999
DELAY_MS = 5_000
SHIP_WITHIN, RETURN_WITHIN = 5_000, 3_000
USERS, PRODUCTS, COUNTRIES = [f"u{i}" for i in range(8)], [f"p{i}" for i in range(6)], [f"c{i}" for i in range(4)]
EXISTING = {"users": USERS[:6], "products": PRODUCTS[:5], "countries": COUNTRIES[:3]}  # the rest never exist

SOURCES = """\
CREATE STREAM orders (id BIGINT, ts BIGINT, userid VARCHAR, pid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);
CREATE STREAM ships (sid BIGINT, sts BIGINT, oid BIGINT, carrier VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'sts');
CREATE STREAM returns (rid BIGINT, rts BIGINT, oid BIGINT, sid BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'rts');
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, cid VARCHAR, cts BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'timestamp' = 'cts', 'topic.partitions' = 2);
CREATE CHANGELOG products (pid VARCHAR, title VARCHAR, cts BIGINT, PRIMARY KEY (pid))
  WITH ('value.format' = 'json', 'timestamp' = 'cts');
CREATE CHANGELOG countries (cid VARCHAR, cname VARCHAR, cts BIGINT, PRIMARY KEY (cid))
  WITH ('value.format' = 'json', 'timestamp' = 'cts');
"""
SQL = SOURCES + """
CREATE STREAM enriched AS
  SELECT o.id, u.name, c.cname, p.title FROM orders o JOIN users u ON o.userid = u.userid
  LEFT JOIN countries c ON c.cid = u.cid JOIN products p ON o.pid = p.pid WHERE o.id <> 13;
CREATE STREAM shipped AS
  SELECT o.id, s.sid, u.name FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  LEFT JOIN users u ON o.userid = u.userid;
CREATE STREAM shipped_left AS
  SELECT o.id, s.sid, u.name FROM orders o LEFT JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  LEFT JOIN users u ON o.userid = u.userid;
CREATE STREAM returned AS
  SELECT o.id, s.sid, r.rid FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  JOIN returns r WITHIN 3 SECONDS ON r.sid = s.sid;
CREATE STREAM returned_left AS
  SELECT o.id, s.sid, r.rid, u.name FROM orders o LEFT JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  LEFT JOIN returns r WITHIN 3 SECONDS ON r.oid = o.id LEFT JOIN users u ON o.userid = u.userid;
"""
TWICE = ("enriched", "returned", "returned_left")
INTERVAL_CHAINS = TWICE[1:]


def _change(rng: random.Random, relation: str, ts: int, key: str | None = None) -> tuple:
    """A change of one row (a tombstone one time in five); with `key`: that row's first version."""
    if key is None:
        key = rng.choice(EXISTING[relation])
        if rng.random() < 0.2:
            return relation, key, None, ts
    value = {"users": lambda: {"userid": key, "name": f"{key}-{rng.randrange(10_000)}",
                               "cid": rng.choice(COUNTRIES)},
             "products": lambda: {"pid": key, "title": f"{key}-{rng.randrange(10_000)}"},
             "countries": lambda: {"cid": key, "cname": f"{key}-{rng.randrange(10_000)}"}}[relation]()
    return relation, key, value | {"cts": ts}, ts


def feed(seed: int = 21) -> list[dict]:
    """Phases of {'changes': [(relation, key, value or None, ts)], 'orders': [...], 'ships': [...]}."""
    rng = random.Random(seed)
    ids = iter(range(1, 10_000))
    sids = iter(range(1, 10_000))

    def phase(lo: int, hi: int, changes: list[tuple], orders: int) -> dict:
        changes += [_change(rng, rng.choice(list(EXISTING)), T0 + rng.randrange(lo, hi)) for _ in range(30)]
        made = [{"id": next(ids), "ts": T0 + rng.randrange(lo, hi), "userid": rng.choice(USERS),
                 "pid": rng.choice(PRODUCTS)} for _ in range(orders)]
        ships = [{"sid": next(sids), "sts": o["ts"] + rng.randrange(-8_000, 8_000), "oid": o["id"], "carrier": "x"}
                 for o in made for _ in range(rng.choice((0, 1, 1, 2)))]
        for items in (changes, made, ships):
            rng.shuffle(items)
        return {"changes": changes, "orders": made, "ships": ships}

    initial = [_change(rng, relation, T0, key) for relation, keys in EXISTING.items() for key in keys]
    first = phase(1_000, 30_000, [], 60)
    first["changes"] = initial + first["changes"]  # the first versions arrive first, then changes in random order
    flush = {"changes": [], "orders": [{"id": FLUSH, "ts": T0 + 1_000_000, "userid": "nobody", "pid": "none"}],
             "ships": [{"sid": FLUSH, "sts": T0 + 1_000_000, "oid": -1, "carrier": "x"}]}
    second = phase(50_000, 80_000, [], 60)
    second["orders"] += [{"id": next(ids), "ts": T0 + rng.randrange(1_000, 15_000), "userid": rng.choice(USERS),
                          "pid": rng.choice(PRODUCTS)} for _ in range(8)]  # late: behind the first run's watermark
    phases = [first, {k: second[k] + flush[k] for k in second}]  # two runs of each query
    _add_returns(phases, random.Random(seed + 1))  # another generator: the records above stay as they were
    return phases


def first_watermark(phases: list[dict]) -> int:
    """W1: the watermark the first run of an interval chain leaves (the smallest newest event time, minus 5 s)."""
    first = phases[0]
    return min(max(r[ts] for r in first[name]) for name, ts in (("orders", "ts"), ("ships", "sts"),
                                                                 ("returns", "rts"))) - DELAY_MS


def _add_returns(phases: list[dict], rng: random.Random) -> None:
    """Returns of each phase's orders (each names one of the order's shipments, or none: sid -1); then in the second
    phase late shipments and returns, of the late orders and of orders of the first phase, and a far-future return."""
    rids = iter(range(1, 10_000))

    def returns(order: dict, ships: list[dict]) -> list[dict]:
        sids = [s["sid"] for s in ships if s["oid"] == order["id"]] + [-1]
        return [{"rid": next(rids), "rts": order["ts"] + rng.randrange(-5_000, 5_000), "oid": order["id"],
                 "sid": rng.choice(sids)} for _ in range(rng.choice((0, 1, 1, 2)))]

    first, second = phases
    first["returns"] = [r for o in first["orders"] for r in returns(o, first["ships"])]
    second["returns"] = [r for o in second["orders"] if o["id"] != FLUSH and o["ts"] > T0 + 40_000
                         for r in returns(o, second["ships"])]
    w1 = first_watermark(phases)
    olds = [o for o in second["orders"] if o["ts"] <= w1] + rng.sample(first["orders"], 12)
    ships = [{"sid": 5_000 + i, "sts": o["ts"] + rng.randrange(-4_000, 4_000), "oid": o["id"], "carrier": "late"}
             for i, o in enumerate(olds)]
    ships = [s for s in ships if s["sts"] < w1 - 1_000]
    late = [r for o in olds for r in returns(o, ships) if r["rts"] < w1 - SHIP_WITHIN - 1_000]
    second["ships"] = ships + second["ships"]
    second["returns"] += late + [{"rid": FLUSH, "rts": T0 + 1_000_000, "oid": -1, "sid": -1}]
    rng.shuffle(second["returns"])


def _as_of(phases: list[dict]):
    """as_of(relation, key, ts): the changelog's newest version of `key` at or before `ts` (None: none, or deleted)."""
    versions: dict[tuple[str, str], list] = {}
    for order, (relation, key, value, ts) in enumerate(c for p in phases for c in p["changes"]):
        versions.setdefault((relation, key), []).append((ts, order, value))

    def as_of(relation: str, key, ts: int) -> dict | None:
        known = [v for v in versions.get((relation, key), []) if v[0] <= ts]
        return max(known, key=lambda v: (v[0], v[1]))[2] if known else None

    return as_of


def reference(phases: list[dict]) -> dict[str, Counter]:
    """What each query must write: every order joined with each changelog's newest version at or before its time."""
    as_of = _as_of(phases)
    watermark = max(o["ts"] for o in phases[0]["orders"]) - DELAY_MS  # after the first run
    late = {o["id"] for o in phases[1]["orders"] if o["ts"] <= watermark}
    assert len(late) == 8
    orders = [o for p in phases for o in p["orders"] if o["id"] != FLUSH]
    ships = [s for p in phases for s in p["ships"] if s["sid"] != FLUSH]
    out = {"enriched": Counter(), "shipped": Counter(), "shipped_left": Counter()}
    for o in orders:
        user, product = as_of("users", o["userid"], o["ts"]), as_of("products", o["pid"], o["ts"])
        country = as_of("countries", user["cid"], o["ts"]) if user else None
        if user and product and o["id"] != 13 and o["id"] not in late:  # late: dropped
            out["enriched"][(o["id"], user["name"], country and country["cname"], product["title"])] += 1
        matched = [s for s in ships if s["oid"] == o["id"] and abs(s["sts"] - o["ts"]) <= 5_000]
        for s in matched:
            out["shipped"][(o["id"], s["sid"], user and user["name"])] += 1
        for sid in [s["sid"] for s in matched] or [None]:  # an order without a shipment: once the watermark passes
            out["shipped_left"][(o["id"], sid, user and user["name"])] += 1
    return out | interval_reference(phases, as_of)


def interval_reference(phases: list[dict], as_of, before: int | None = None) -> dict[str, Counter]:
    """What the chains of two interval joins write (late records dropped: see the module's docstring); with
    `before`: only the rows of orders older than it."""
    w1 = first_watermark(phases)
    bounds = {"orders": ("ts", w1), "ships": ("sts", w1), "returns": ("rts", w1 - SHIP_WITHIN)}
    kept = {}
    for name, (ts, bound) in bounds.items():
        assert all(abs(r[ts] - bound) > 1_000 for r in phases[1][name]), name  # clear of the bound
        kept[name] = phases[0][name] + [r for r in phases[1][name] if r[ts] > bound]
    out = {name: Counter() for name in INTERVAL_CHAINS}
    for o in kept["orders"]:
        if o["id"] == FLUSH or (before is not None and o["ts"] >= before):
            continue
        user = as_of("users", o["userid"], o["ts"])
        ships = [s for s in kept["ships"] if s["oid"] == o["id"] and abs(s["sts"] - o["ts"]) <= SHIP_WITHIN]
        near = [r for r in kept["returns"] if abs(r["rts"] - o["ts"]) <= RETURN_WITHIN]  # the time bound: the order's
        for s in ships:  # INNER, ON the shipment's column
            out["returned"].update((o["id"], s["sid"], r["rid"]) for r in near if r["sid"] == s["sid"])
        returns = [r["rid"] for r in near if r["oid"] == o["id"]] or [None]
        for sid in [s["sid"] for s in ships] or [None]:  # LEFT: NULLs once the watermark passes
            out["returned_left"].update((o["id"], sid, rid, user and user["name"]) for rid in returns)
    return out


@pytest.mark.integration
def test_chained_joins_match_each_changelog_as_of_each_order(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    phases = feed()
    expected = reference(phases)
    for phase in phases:
        for relation in EXISTING:
            changes = [c for c in phase["changes"] if c[0] == relation]
            if changes:
                produce_changes(broker, project, relation, [(k, v) for _, k, v, _ in changes],
                                timestamps=[ts for *_, ts in changes])
        produce(broker, project, "orders", phase["orders"], "userid")
        produce(broker, project, "ships", phase["ships"])
        produce(broker, project, "returns", phase["returns"])
        for name in TWICE + ("shipped", "shipped_left") if phase is phases[-1] else TWICE:
            run(spark, project, name, tmp_path, timeout=600)
        if phase is phases[0]:  # what the watermark passed in both joins is written, LEFT rows with their NULLs
            settled = first_watermark(phases) - SHIP_WITHIN - RETURN_WITHIN - 1_000
            must = interval_reference(phases, _as_of(phases), before=settled)
            for name in INTERVAL_CHAINS:
                written = _interval_rows(broker, project, name)
                assert not written - expected[name] and not must[name] - written, name
    assert sum(expected["enriched"].values()) > 20 and None in {c for _, _, c, _ in expected["enriched"]}
    assert sum(expected["shipped"].values()) > 40 and None in {n for _, _, n in expected["shipped"]}
    assert sum(1 for _, sid, _ in expected["shipped_left"] if sid is None) > 20
    assert sum(expected["returned"].values()) > 20
    late = {o["id"] for o in phases[1]["orders"] if o["ts"] <= first_watermark(phases)}
    assert late & {s["oid"] for s in phases[1]["ships"]} and late & {r["oid"] for r in phases[1]["returns"]}
    assert {(sid is None, rid is None) for _, sid, rid, _ in expected["returned_left"]} == {
        (True, True), (True, False), (False, True), (False, False)}  # LEFT rows with a shipment or not, a return or not
    assert None in {n for *_, n in expected["returned_left"]}

    rows = [(r["key"], json.loads(r["value"])) for r in records(broker, project, "enriched")]
    assert {key for key, _ in rows} <= set(USERS)  # the order's key is carried through
    assert Counter((row["id"], row["name"], row.get("cname"), row["title"]) for _, row in rows) == \
        expected["enriched"]
    for name in ("shipped", "shipped_left"):
        rows = [json.loads(r["value"]) for r in records(broker, project, name)]
        assert Counter((row["id"], row.get("sid"), row.get("name")) for row in rows) == expected[name]
    for name in INTERVAL_CHAINS:
        assert _interval_rows(broker, project, name) == expected[name], name


def _interval_rows(broker: str, project, name: str) -> Counter:
    fields = ("id", "sid", "rid", "name") if name == "returned_left" else ("id", "sid", "rid")
    return Counter(tuple(row.get(f) for f in fields)
                   for row in (json.loads(r["value"]) for r in records(broker, project, name)))


def test_chains_resolve_to_their_temporal_joins(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/all.sql": SQL}))
    queries = {q.fqn.rsplit(".", 1)[-1]: q for q in project.queries}
    assert queries["enriched"].temporal_join == TemporalJoin(stream="o", changelog="u", side="inner",
                                                             stream_keys=("userid",), changelog_keys=("userid",))
    assert queries["enriched"].join_chain == (
        TemporalJoin(stream="u", changelog="c", side="left", stream_keys=("cid",), changelog_keys=("cid",)),
        TemporalJoin(stream="o", changelog="p", side="inner", stream_keys=("pid",), changelog_keys=("pid",)))
    assert queries["shipped"].join_within == "5 seconds" and queries["shipped"].temporal_join is None
    assert [j.changelog for j in queries["shipped"].join_chain] == ["u"]
    assert "FROM __chain_analytics_public_enriched AS __tj" in spark_select(queries["enriched"], project)
    assert queries["returned"].join_within == "5 seconds" and queries["returned"].join_chain == (
        IntervalJoin(stream="r", side="inner", within="3 seconds"),)
    left = queries["returned_left"]
    assert left.join_chain == (IntervalJoin(stream="r", side="left", within="3 seconds"), TemporalJoin(
        stream="o", changelog="u", side="left", stream_keys=("userid",), changelog_keys=("userid",)))
    spec = chain_spec(project, lower(left, project))
    assert spec.horizon_ms == 2 * (SHIP_WITHIN + RETURN_WITHIN) and [s.changelog_alias for s in spec.steps] == ["u"]
    assert "WITHIN" not in left.select_sql and "BETWEEN `__rows`.`__ts` - INTERVAL 3000 milliseconds" in spec.first_sql


REFUSED = """\
CREATE STREAM b1 AS SELECT o.id FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  FULL JOIN returns r WITHIN 5 SECONDS ON o.id = r.oid;
CREATE STREAM b2 AS SELECT o.id FROM orders o JOIN users u ON o.userid = u.userid
  JOIN ships t WITHIN 5 SECONDS ON o.id = t.oid;
CREATE CHANGELOG b3 AS SELECT u.userid, u.name FROM users u JOIN countries c ON u.cid = c.cid
  JOIN orders o ON o.userid = u.userid;
CREATE STREAM b4 AS SELECT o.id FROM orders o JOIN users u ON o.userid = u.userid
  JOIN countries c ON c.cid = u.cid AND c.cid = o.pid;
CREATE STREAM b5 AS SELECT o.id FROM orders o FULL JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  JOIN products p ON p.pid = o.pid;
CREATE STREAM b6 AS SELECT o.id FROM orders o JOIN users u ON o.userid = u.userid
  JOIN products p ON p.title = o.pid;
CREATE STREAM b7 AS SELECT o.id FROM orders o JOIN users u ON o.userid = u.userid
  FULL JOIN products p ON p.pid = o.pid;
CREATE STREAM b8 AS SELECT u.name, COUNT(*) AS n FROM orders o JOIN users u ON o.userid = u.userid
  JOIN products p ON p.pid = o.pid GROUP BY u.name;
CREATE STREAM b9 AS SELECT o.id FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  JOIN returns r ON o.id = r.oid;
CREATE STREAM b10 AS SELECT o.id FROM orders o LEFT JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  JOIN users u ON o.userid = u.userid JOIN returns r WITHIN 5 SECONDS ON o.id = r.oid;
CREATE STREAM b11 AS SELECT o.id FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  RIGHT JOIN returns r WITHIN 5 SECONDS ON o.id = r.oid;
CREATE STREAM b12 AS SELECT o.id FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  JOIN returns r WITHIN 5 SECONDS ON r.oid = r.sid;
CREATE STREAM b13 AS SELECT s.sid, COUNT(*) AS n FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid
  JOIN returns r WITHIN 5 SECONDS ON o.id = r.oid GROUP BY s.sid;
CREATE CHANGELOG b14 AS SELECT u.userid FROM users u JOIN countries c ON u.cid = c.cid
  JOIN products p ON p.pid = u.userid AND p.title = 'x';
CREATE CHANGELOG b15 AS SELECT u.userid, p.title FROM users u JOIN countries c ON u.cid = c.cid
  FULL JOIN products p ON p.pid = u.userid;
CREATE CHANGELOG b16 AS SELECT u.userid FROM users u JOIN countries c ON u.cid = c.cid
  RIGHT JOIN products p ON p.pid = u.userid;
"""


def test_refused_chains_name_their_code_and_place(tmp_path):
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": REFUSED})
    found = [(d.code, d.location.line, d.message) for d in check_project(root).diagnostics]
    assert [(code, line) for code, line, _ in found] == [
        ("DSF-E198", 2), ("DSF-E196", 4), ("DSF-E194", 6), ("DSF-E197", 8), ("DSF-E198", 10), ("DSF-E132", 12),
        ("DSF-E131", 14), ("DSF-E045", 15), ("DSF-E045", 18), ("DSF-E196", 20), ("DSF-E045", 22),
        ("DSF-E045", 24), ("DSF-E045", 25), ("DSF-E190", 28), ("DSF-E192", 29), ("DSF-E190", 32)]
    assert all(d.location.file.endswith("q.sql") for d in check_project(root).diagnostics)
    assert "ships" in found[1][2] and "several relations (o, u)" in found[3][2]
    assert "not the stream 'analytics.public.orders'" in found[2][2]  # only changelogs after two changelogs
    assert [message.split(",")[0].split(":")[0] for _, _, message in found[8:13]] == [
        "a stream joined without WITHIN after an interval join is not supported yet",
        "a stream joined after a temporal join in one query is not supported",
        "RIGHT JOIN is not supported", "a join of the stream 'r' needs an equality in ON between it and an earlier "
        "relation (o", "aggregating a join of more than two streams is not supported yet"]
    assert "'x'" in found[13][2] and "p.pid must be selected" in found[14][2] and "RIGHT JOIN" in found[15][2]


def test_a_chained_step_takes_rows_behind_the_watermark_and_keeps_versions_for_the_horizon():
    versions = [[100, 0, '{"n":"a"}'], [200, 1, '{"n":"b"}'], [300, 2, '{"n":"c"}']]
    rows = [(0, 150, 0, "k", '{"id":1}', None), (0, 450, 0, "k", '{"id":2}', None)]
    kept, pending, out = step(versions, [], rows, 400, True, chained=True, horizon=250)
    assert out == [("k", '{"id":1}', '{"n":"a"}')]  # behind the watermark: joined at once, not dropped
    assert [p[0] for p in pending] == [450] and [v[0] for v in kept] == [100, 200, 300]  # kept back to 150
    kept, _, out = step(versions, [], rows[:1], 400, True)  # the first step of a chain drops it as late
    assert out == [] and [v[0] for v in kept] == [300]


def test_for_system_time_as_of_on_every_changelog_of_a_temporal_chain(tmp_path):
    sql = ("CREATE STREAM timed AS SELECT o.id, u.name, p.title FROM orders o\n"
           "  JOIN users FOR SYSTEM_TIME AS OF o.ts AS u ON o.userid = u.userid\n"
           "  JOIN products FOR SYSTEM_TIME AS OF o.ts AS p ON o.pid = p.pid;\n")
    query = load_project(make_project(tmp_path / "ok", {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).queries[0]
    assert [(s.alias, s.timestamp) for s in query.sources] == [("o", "ts"), ("u", None), ("p", None)]
    assert "SYSTEM_TIME" not in query.select_sql and len(query.join_chain) == 1
    other = sql.replace("AS OF o.ts AS p", "AS OF o.id AS p")  # another event time than the first AS OF
    interval = ("CREATE STREAM s AS SELECT o.id FROM orders o JOIN ships s WITHIN 5 SECONDS ON o.id = s.oid\n"
                "  JOIN products FOR SYSTEM_TIME AS OF o.ts AS p ON o.pid = p.pid;\n")
    for name, refused, line in (("other", other, 3), ("interval", interval, 2)):
        found = check_project(make_project(tmp_path / name, {"sql/sources.sql": SOURCES, "sql/q.sql": refused}))
        assert [(d.code, d.location.line) for d in found.diagnostics] == [("DSF-E155", line)]
