"""Aggregations and windows on real Spark and a real broker, checked against references in plain pandas.

Input is fixed and seeded, fed in phases (one availableNow run each, on one checkpoint), shuffled
within a phase (out of order) and with events far behind the watermark (late, dropped). Each sink's
final content (the last value per key) must equal the reference, value for value.

The HAVING queries (a changelog by user, a view of 120-second windows, a view of a global aggregate) sum a
`delta` that is positive for every user in the first phase, negative for some in the second and positive again
for some in the third: a group passes HAVING, falls below it, and passes again. After every phase each must equal
DuckDB's answer to the same SELECT over the records so far (a group that stopped matching deleted: a tombstone,
a deleted view row).
"""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pandas as pd
import pytest

from support.changelogs import changelog_content, duckdb_answer, keyed_rows
from dsflow.adapters.sqlite import mv
from support.streaming import latest_by_key, produce, run, streaming_project

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000  # epoch ms, a multiple of 20 s
DELAY_MS = 5_000
USERS = [f"User_{i}" for i in range(1, 6)]
PAGES = [f"Page_{i}" for i in range(1, 8)]
DELTAS = [dict.fromkeys(USERS, (0, 10)),  # per phase and user: the range of an event's delta
          {**dict.fromkeys(USERS[:3], (-20, 0)), **dict.fromkeys(USERS[3:], (0, 10))},
          {**dict.fromkeys(USERS[:2], (0, 40)), USERS[2]: (-10, 0), USERS[3]: (-20, 0), USERS[4]: (0, 10)}]
HAVING = {
    "user_having": "SELECT userid, SUM(delta) AS net, COUNT(*) AS views FROM pageviews GROUP BY userid "
                   "HAVING SUM(delta) > 50 AND COUNT(DISTINCT pageid) > 1",
    "total_having": "SELECT COUNT(*) AS n, SUM(delta) AS net FROM pageviews HAVING SUM(delta) > 200",
    "window_having": "SELECT window_start, window_end, userid, SUM(delta) AS net "
                     "FROM TUMBLE(pageviews, SIZE 120 SECONDS) GROUP BY window_start, window_end, userid "
                     "HAVING SUM(delta) > 0",
}
WINDOW_ORACLE = ("SELECT viewtime - viewtime % 120000 AS window_start, viewtime - viewtime % 120000 + 120000 AS "
                 "window_end, userid, SUM(delta) AS net FROM pageviews WHERE NOT late GROUP BY 1, 2, userid "
                 "HAVING SUM(delta) > 0")

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR, delta BIGINT)
  WITH ('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 2);

CREATE CHANGELOG user_stats AS
  SELECT userid, COUNT(*) AS views, COUNT(DISTINCT pageid) AS pages, SUM(id) AS id_sum,
         MIN(viewtime) AS first_view, MAX(viewtime) AS last_view, AVG(id) AS avg_id
  FROM pageviews WHERE pageid <> 'Page_7' GROUP BY userid;

CREATE CHANGELOG page_tumble WITH ('watermark.delay' = '5 seconds') AS
  SELECT window_start, window_end, pageid, COUNT(*) AS views, MAX(id) AS max_id
  FROM TUMBLE(pageviews, SIZE 10 SECONDS) GROUP BY window_start, window_end, pageid;

CREATE CHANGELOG user_hop WITH ('watermark.delay' = '5 seconds') AS
  SELECT window_start, window_end, userid, COUNT(*) AS views
  FROM HOP(pageviews, SIZE 20 SECONDS, ADVANCE BY 10 SECONDS) AS p GROUP BY window_start, window_end, userid;

CREATE MATERIALIZED VIEW user_pages AS
  SELECT userid, pageid, COUNT(*) AS views, MAX(viewtime) AS last_view FROM pageviews GROUP BY userid, pageid;

CREATE MATERIALIZED VIEW page7_views AS
  SELECT id, userid, viewtime FROM pageviews WHERE pageid = 'Page_7';

CREATE CHANGELOG user_having AS {user_having};
CREATE MATERIALIZED VIEW total_having AS {total_having};
CREATE MATERIALIZED VIEW window_having WITH ('watermark.delay' = '5 seconds') AS {window_having};
""".format(**HAVING)


def phases(seed: int = 7) -> list[list[dict]]:
    """Three phases of pageviews over time; the last adds out-of-order events and events far too late. An
    event's delta is drawn from DELTAS of its phase and user (by a generator of its own)."""
    rng, deltas = random.Random(seed), random.Random(seed + 1)
    next_id = iter(range(1, 10_000))

    def event(ts: int, phase: int, late: bool = False) -> dict:
        found = {"id": next(next_id), "viewtime": ts, "userid": rng.choice(USERS), "pageid": rng.choice(PAGES),
                 "late": late}
        return found | {"delta": deltas.randint(*DELTAS[phase][found["userid"]])}

    out = []
    for p in range(3):
        batch = [event(T0 + p * 60_000 + rng.randrange(0, 60_000), p) for _ in range(120)]
        if p == 2:
            newest_before = max(e["viewtime"] for e in out[1])
            batch += [event(newest_before - rng.randrange(0, 2_000), p) for _ in range(10)]  # out of order, in time
            batch += [event(T0 + rng.randrange(0, 20_000), p, late=True) for _ in range(15)]  # windows long closed
        rng.shuffle(batch)
        out.append(batch)
    return out


def windows_of(ts: int, size: int, slide: int) -> list[int]:
    first = ts - ts % slide - (size - slide)
    return [start for start in range(first, ts + 1, slide) if start <= ts < start + size]


def windowed_reference(feed: list[list[dict]], size: int, slide: int, key: str, agg: dict) -> pd.DataFrame:
    """Spark's semantics: an event in phase p is dropped from a window that ended at or before the
    watermark of the earlier phases (their newest event time minus the delay)."""
    rows = []
    newest = None
    for batch in feed:
        watermark = newest - DELAY_MS if newest is not None else None
        for e in batch:
            for start in windows_of(e["viewtime"], size, slide):
                if watermark is None or start + size > watermark:
                    rows.append({**e, "window_start": start, "window_end": start + size})
                else:
                    assert e["late"], f"an event meant to be on time fell behind the watermark: {e}"
        newest = max([newest or 0] + [e["viewtime"] for e in batch])
    frame = pd.DataFrame(rows)
    return frame.groupby(["window_start", "window_end", key]).agg(**agg).reset_index()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_aggregations_windows_and_views_match_references(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    feed = phases()
    names = ["user_stats", "page_tumble", "user_hop", "user_pages", "page7_views", *HAVING]
    history: list[dict[str, dict]] = []
    for phase, batch in enumerate(feed):
        produce(broker, project, "pageviews", [{k: v for k, v in e.items() if k != "late"} for e in batch], "userid")
        for name in names:
            run(spark, project, name, tmp_path)
        history.append(_check_having(broker, project, [e for b in feed[:phase + 1] for e in b]))
    _check_having_history(history)
    everything = pd.DataFrame([e for batch in feed for e in batch])
    _check_user_stats(broker, project, everything)
    _check_windows(broker, project, feed)
    _check_views(project, everything)


def _check_having(broker, project, events: list[dict]) -> dict[str, dict]:
    """Each HAVING query's sink equals DuckDB's answer over `events` (the records so far); the answers."""
    tables = {"pageviews": "id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR, delta BIGINT, late BOOLEAN"}
    expected = {"user_having": duckdb_answer(tables, {"pageviews": events}, HAVING["user_having"], ("userid",)),
                "total_having": duckdb_answer(tables, {"pageviews": events}, HAVING["total_having"], ()),
                "window_having": duckdb_answer(tables, {"pageviews": events}, WINDOW_ORACLE,
                                               ("window_start", "window_end", "userid"))}
    content, _ = changelog_content(broker, project, "user_having")
    assert keyed_rows(content.values(), ("userid",)) == expected["user_having"]
    database = mv.database_path(project.root, project.state_path, project.environment)
    names, rows = mv.run_query(database, "SELECT n, net FROM total_having")
    assert keyed_rows([dict(zip(names, r, strict=False)) for r in rows], ()) == expected["total_having"]
    names, rows = mv.run_query(database, "SELECT window_start, window_end, userid, net FROM window_having")
    found = [dict(zip(names, r, strict=False)) | {"window_start": view_ms(r[0]), "window_end": view_ms(r[1])}
             for r in rows]
    assert keyed_rows(found, ("window_start", "window_end", "userid")) == expected["window_having"]
    return expected


def view_ms(text: str) -> int:
    """A timestamp of a SQLite view ('2023-11-14 22:13:20.000', UTC) in epoch ms."""
    return int(datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp() * 1000)


def _check_having_history(history: list[dict[str, dict]]) -> None:
    """The feed makes groups of each HAVING query pass, fall below and pass again, and groups end below it."""
    for name in HAVING:
        keys = set().union(*(answer[name] for answer in history))
        seen = {tuple(key in answer[name] for answer in history) for key in keys}
        assert (True, False, True) in seen, (name, seen)
        assert name == "total_having" or {(True, True, False), (True, False, False)} & seen, (name, seen)


def _check_user_stats(broker, project, events: pd.DataFrame) -> None:
    kept = events[events.pageid != "Page_7"]
    reference = kept.groupby("userid").agg(views=("id", "size"), pages=("pageid", "nunique"), id_sum=("id", "sum"),
                                           first_view=("viewtime", "min"), last_view=("viewtime", "max"),
                                           avg_id=("id", "mean"))
    expected = {u: {"userid": u, **{k: (float(v) if k == "avg_id" else int(v)) for k, v in row.items()}}
                for u, row in reference.iterrows()}
    actual = latest_by_key(broker, project, "user_stats")
    assert actual.keys() == expected.keys()
    for user, value in actual.items():
        assert value == pytest.approx(expected[user]), user


def _check_windows(broker, project, feed) -> None:
    tumble = windowed_reference(feed, 10_000, 10_000, "pageid", {"views": ("id", "size"), "max_id": ("id", "max")})
    expected = {(iso(r.window_start), iso(r.window_end), r.pageid): {"views": r.views, "max_id": r.max_id}
                for r in tumble.itertuples()}
    actual = {(v["window_start"], v["window_end"], v["pageid"]): {"views": v["views"], "max_id": v["max_id"]}
              for v in latest_by_key(broker, project, "page_tumble").values()}
    assert actual == expected
    hop = windowed_reference(feed, 20_000, 10_000, "userid", {"views": ("id", "size")})
    expected = {(iso(r.window_start), iso(r.window_end), r.userid): r.views for r in hop.itertuples()}
    actual = {(v["window_start"], v["window_end"], v["userid"]): v["views"]
              for v in latest_by_key(broker, project, "user_hop").values()}
    assert actual == expected
    assert sum(e["late"] for batch in feed for e in batch) == 15, "the feed lost its late events"


def _check_views(project, events: pd.DataFrame) -> None:
    database = mv.database_path(project.root, project.state_path, project.environment)
    reference = events.groupby(["userid", "pageid"]).agg(views=("id", "size"), last_view=("viewtime", "max"))
    expected = sorted((u, p, int(r.views), int(r.last_view)) for (u, p), r in reference.iterrows())
    _, rows = mv.run_query(database, "SELECT userid, pageid, views, last_view FROM user_pages ORDER BY 1, 2")
    assert rows == expected
    page7 = events[events.pageid == "Page_7"]
    _, rows = mv.run_query(database, "SELECT id, userid, viewtime FROM page7_views ORDER BY id")
    assert rows == sorted(zip(page7.id.astype(int), page7.userid, page7.viewtime.astype(int), strict=False))
