"""Array subscripts count from 1 as in DeltaStream (`arr[1]` is the first element) and give NULL out of range,
on real Spark: the translated SELECT over a static view, then the seed tutorial's interval join with
`u.interests[1] AS top_interest` end to end on the real broker, checked against a plain-Python reference.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from dsflow.adapters.spark.translate import KEY_COLUMN, spark_select, view_name
from dsflow.load.project import load_project
from support.projects import make_project
from support.streaming import produce, records, run, streaming_project

pytestmark = pytest.mark.integration

ARRAYS = """\
CREATE STREAM users (userid VARCHAR, n INT, interests ARRAY<VARCHAR>, scores MAP<VARCHAR, BIGINT>)
  WITH ('value.format' = 'json');
CREATE STREAM picks AS SELECT u.userid, u.interests[1] AS first, u.interests[2] AS second, u.interests[u.n] AS nth,
  u.interests[0] AS zeroth, ELEMENT_AT(u.interests, 3) AS third, u.scores['a'] AS a FROM users u;
"""

ROWS = [  # userid, n, interests, scores
    ("one", 1, ["News"], {"a": 1}),
    ("three", 3, ["Travel", "Game", "Sport"], {"b": 2}),
    ("far", 9, ["Travel", "Game"], {}),
    ("empty", -1, [], None),
    ("none", None, None, None),
]


def at(values: list | None, index: int | None):
    """DeltaStream's subscript: 1-based, NULL out of range or for a NULL array or index."""
    if values is None or index is None or not 1 <= index <= len(values):
        return None
    return values[index - 1]


def test_subscripts_count_from_one_and_are_null_out_of_range(tmp_path, spark):
    project = load_project(make_project(tmp_path, {"sql/all.sql": ARRAYS}))
    query = project.queries[0]
    spark.createDataFrame(
        [(*row, row[0]) for row in ROWS],
        f"userid STRING, n INT, interests ARRAY<STRING>, scores MAP<STRING, BIGINT>, {KEY_COLUMN} STRING",
    ).createOrReplaceTempView(view_name(0, query))
    got = {r["userid"]: r.asDict() for r in spark.sql(spark_select(query, project)).collect()}
    expected = {userid: {"userid": userid, "first": at(values, 1), "second": at(values, 2), "nth": at(values, n),
                         "zeroth": None, "third": at(values, 3), "a": (scores or {}).get("a"), KEY_COLUMN: userid}
                for userid, n, values, scores in ROWS}
    assert got == expected
    assert got["one"]["first"] == "News" and got["three"]["second"] == "Game"  # not Spark's 0-based answer


TUTORIAL = """\
CREATE STREAM pageviews (viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 2);
CREATE STREAM users (registertime BIGINT, userid VARCHAR, regionid VARCHAR, gender VARCHAR,
  interests ARRAY<VARCHAR>, contactinfo STRUCT<phone VARCHAR, city VARCHAR>)
  WITH ('value.format' = 'json', 'timestamp' = 'registertime', 'topic.partitions' = 2);

CREATE STREAM csas_enriched_pv AS
SELECT
  p.userid AS pvid,
  u.gender,
  u.interests[1] AS top_interest,
  u.regionid
FROM pageviews p
JOIN users u WITHIN 5 MINUTES ON u.userid = p.userid;
"""
T0 = 1_700_000_000_000
WITHIN_MS = 5 * 60_000
INTERESTS = [[], ["News"], ["Travel", "Game"], ["Sport", "Movies", "News"], None]


def tutorial_feed(seed: int = 5) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    users = [{"registertime": T0 + rng.randrange(20 * 60_000), "userid": f"User_{i % 7}", "regionid": f"R{i % 3}",
              "gender": rng.choice(["F", "M"]), "interests": INTERESTS[i % len(INTERESTS)],
              "contactinfo": {"phone": "555", "city": "Oslo"}} for i in range(30)]
    views = [{"viewtime": T0 + rng.randrange(20 * 60_000), "userid": f"User_{rng.randrange(8)}",
              "pageid": f"Page_{i}"} for i in range(80)]
    return views, users


def tutorial_reference(views: list[dict], users: list[dict]) -> Counter:
    return Counter((v["userid"], u["gender"], at(u["interests"], 1), u["regionid"])
                   for v in views for u in users
                   if v["userid"] == u["userid"] and abs(v["viewtime"] - u["registertime"]) <= WITHIN_MS)


def test_seed_tutorial_interval_join_selects_the_first_interest(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, TUTORIAL)
    views, users = tutorial_feed()
    produce(broker, project, "pageviews", views, "userid")
    produce(broker, project, "users", users, "userid")
    run(spark, project, "csas_enriched_pv", tmp_path)
    rows = [json.loads(r["value"]) for r in records(broker, project, "csas_enriched_pv")]
    actual = Counter((r["pvid"], r["gender"], r.get("top_interest"), r["regionid"]) for r in rows)
    expected = tutorial_reference(views, users)
    assert sum(expected.values()) > 20
    assert {k[2] for k in expected} >= {None, "News", "Travel", "Sport"}  # empty, 1- and longer arrays, and NULL
    assert actual == expected
