"""Per-source `WITH ('starting.position' = ..., 'timestamp' = ...)` inside FROM/JOIN: loading (and DSF-E133),
and on real Spark and a real broker: a source starting at 'latest' skips what was there before the query
started, and a source's own 'timestamp' column decides its windows instead of the relation's.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from dsflow.load.project import check_project, load_project
from support.projects import make_project
from support.streaming import latest_by_key, produce, records, run, streaming_project

T0 = 1_700_000_000_000
SQL = """\
CREATE STREAM clicks (id BIGINT, ts BIGINT, alt BIGINT, userid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts');
CREATE STREAM pageviews (id BIGINT, userid VARCHAR) WITH ('value.format' = 'json');

CREATE STREAM new_clicks AS SELECT c.id FROM clicks WITH ('starting.position' = 'latest') AS c;
CREATE CHANGELOG alt_windows AS
  SELECT window_start, window_end, COUNT(*) AS n FROM TUMBLE(clicks WITH ('timestamp' = 'alt'), SIZE 10 SECONDS)
  GROUP BY window_start, window_end;
"""


def test_source_options_load_into_the_sources_and_the_fingerprint(tmp_path):
    project = load_project(make_project(tmp_path, {"sql/all.sql": SQL}))
    queries = {q.fqn.rsplit(".", 1)[-1]: q for q in project.queries}
    [source] = queries["new_clicks"].sources
    assert (source.position, source.starting_position, source.timestamp) == ("latest", "latest", None)
    [source] = queries["alt_windows"].sources
    assert (source.position, source.starting_position, source.timestamp) == (None, "earliest", "alt")
    assert "WITH ('starting.position' = 'latest') AS `c`" in queries["new_clicks"].select_sql


def test_e133_bad_source_options(tmp_path):
    bad = ("CREATE STREAM a AS SELECT id FROM clicks WITH ('starting.position' = 'middle');\n"
           "CREATE STREAM b AS SELECT id FROM clicks WITH ('timestamp' = 'nope');\n"
           "CREATE STREAM c AS SELECT id FROM clicks WITH ('start' = 'latest');\n")
    source = SQL.split("\n\n")[0]
    found = check_project(make_project(tmp_path, {"sql/all.sql": source, "sql/bad.sql": bad})).diagnostics
    assert [(d.code, d.location.file, d.location.line, d.location.col) for d in found] == [
        ("DSF-E133", "sql/bad.sql", 1, 48), ("DSF-E133", "sql/bad.sql", 2, 48), ("DSF-E133", "sql/bad.sql", 3, 48)]
    assert "unknown source property 'start' (known: starting.position, timestamp)" == found[2].message


@pytest.mark.integration
def test_latest_source_and_source_timestamp_on_spark(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, SQL)
    before = [{"id": i, "ts": T0, "alt": T0 + i * 3_000, "userid": "a"} for i in range(10)]
    produce(broker, project, "clicks", before, "userid")
    run(spark, project, "new_clicks", tmp_path)  # starts at the end: the records above are not read
    after = [{"id": i, "ts": T0, "alt": T0 + i * 3_000, "userid": "b"} for i in range(10, 25)]
    produce(broker, project, "clicks", after, "userid")
    run(spark, project, "new_clicks", tmp_path)
    run(spark, project, "alt_windows", tmp_path)
    assert Counter(json.loads(r["value"])["id"] for r in records(broker, project, "new_clicks")) == Counter(
        e["id"] for e in after)
    expected = Counter(e["alt"] - e["alt"] % 10_000 for e in before + after)
    assert len(expected) > 1  # by 'ts' everything would fall in one window
    windows = {v["window_start"]: v["n"] for v in latest_by_key(broker, project, "alt_windows").values()}
    from datetime import datetime, timezone

    assert {int(datetime.fromisoformat(k).replace(tzinfo=timezone.utc).timestamp() * 1000): n
            for k, n in windows.items()} == dict(expected)


PARTITIONED = SQL.split("\n\n")[0] + """
CREATE STREAM by_user WITH ('topic.partitions' = 3) AS SELECT id, UPPER(userid) AS who FROM clicks PARTITION BY who;
INSERT INTO by_user SELECT id + 1000 AS id, id % 5 AS who FROM pageviews WHERE id % 2 = 0 PARTITION BY who;
"""
"""`INSERT INTO` a second source's rows into the same stream, keyed alike (each key in one partition); its `who`, a
BIGINT into the VARCHAR column, is written as Spark's store assignment writes it: the string "3", not the number."""


def test_e134_partition_by_checks(tmp_path):
    bad = ("CREATE STREAM a AS SELECT id FROM clicks PARTITION BY userid;\n"
           "CREATE CHANGELOG b AS SELECT userid, COUNT(*) AS n FROM clicks GROUP BY userid PARTITION BY userid;\n")
    found = check_project(make_project(tmp_path, {"sql/all.sql": PARTITIONED, "sql/bad.sql": bad})).diagnostics
    assert [(d.code, d.location.file, d.location.line, d.location.col) for d in found] == [
        ("DSF-E134", "sql/bad.sql", 1, 55), ("DSF-E134", "sql/bad.sql", 2, 93)]


@pytest.mark.integration
def test_partition_by_keys_the_sink_records(tmp_path, broker, spark):
    project = streaming_project(tmp_path, broker, PARTITIONED)
    query = next(q for q in project.queries if q.fqn.endswith(".by_user"))
    insert = next(q for q in project.queries if q.fqn != query.fqn)
    assert query.key_columns == insert.key_columns == ("who",) and insert.sink == query.sink
    clicks = [{"id": i, "ts": T0 + i, "alt": 0, "userid": f"user{i % 7}"} for i in range(60)]
    views = [{"id": i, "userid": f"user{i % 5}"} for i in range(40)]
    produce(broker, project, "clicks", clicks)  # no key at all: records land anywhere
    produce(broker, project, "pageviews", views)
    run(spark, project, "by_user", tmp_path)
    run(spark, project, insert.fqn.rsplit(".", 1)[-1], tmp_path)
    out = records(broker, project, "by_user")
    assert sorted((r["key"], json.loads(r["value"])["id"]) for r in out) == sorted(
        [(c["userid"].upper(), c["id"]) for c in clicks] + [(str(v["id"] % 5), v["id"] + 1000) for v in views
                                                            if v["id"] % 2 == 0])
    written = {json.loads(r["value"])["id"]: json.loads(r["value"])["who"] for r in out}
    assert all(written[v["id"] + 1000] == str(v["id"] % 5) for v in views if v["id"] % 2 == 0)  # "3", not 3
    assert [(c.name, c.type) for c in insert.output_columns] == [("id", "BIGINT"), ("who", "VARCHAR")]
    partitions: dict[str, set[int]] = {}
    for r in out:
        partitions.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(p) == 1 for p in partitions.values())  # one key, one partition
    assert len({p for ps in partitions.values() for p in ps}) > 1
