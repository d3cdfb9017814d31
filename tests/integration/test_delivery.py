"""Delivery guarantees on real Spark and a real broker: a micro-batch written but not committed in the
checkpoint (what a crash between the sink write and the commit leaves) is run again on restart.

- a stream sink gets that batch twice: at-least-once, no loss (why 'exactly-once' is DSF-E047 there);
- a changelog sink also gets its records twice, but they are upserts by key: the last value per key still
  equals the pandas reference (effectively exactly-once);
- a materialized view skips the replayed batch (its ledger): its rows equal the reference exactly.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from dsflow.adapters.sqlite import mv
from support.streaming import latest_by_key, produce, records, run, streaming_project

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 2);

CREATE STREAM page1 AS SELECT id, userid FROM pageviews WHERE pageid = 'Page_1';

CREATE CHANGELOG user_counts WITH ('delivery.guarantee' = 'exactly-once') AS
  SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum FROM pageviews GROUP BY userid;

CREATE MATERIALIZED VIEW page_rows WITH ('delivery.guarantee' = 'exactly-once') AS
  SELECT id, pageid FROM pageviews WHERE pageid <> 'Page_1';
"""
NAMES = ("page1", "user_counts", "page_rows")


def _uncommit_last_batch(checkpoint: Path) -> int:
    """Forget the last batch's commit, as if the driver died after the sink wrote it; returns its id."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def _events(first: int, count: int) -> list[dict]:
    return [{"id": i, "viewtime": i, "userid": f"User_{i % 7}", "pageid": f"Page_{i % 3}"}
            for i in range(first, first + count)]


def test_replayed_batch_duplicates_a_stream_but_not_a_changelog_or_view_result(tmp_path, spark, broker) -> None:
    project = streaming_project(tmp_path, broker, SQL)
    first = _events(0, 300)
    produce(broker, project, "pageviews", first, "userid")
    for name in NAMES:
        run(spark, project, name, tmp_path)
    written_once = Counter(json.loads(r["value"])["id"] for r in records(broker, project, "page1"))
    assert written_once and set(written_once.values()) == {1}
    for name in NAMES:
        _uncommit_last_batch(tmp_path / "checkpoints" / name)
    later = _events(300, 150)
    produce(broker, project, "pageviews", later, "userid")
    for name in NAMES:
        run(spark, project, name, tmp_path)
    events = first + later

    ids = Counter(json.loads(r["value"])["id"] for r in records(broker, project, "page1"))
    assert set(ids) == {e["id"] for e in events if e["pageid"] == "Page_1"}, "a stream sink lost records"
    assert {i for i, n in ids.items() if n == 2} == set(written_once), "the replayed batch was not written twice"

    frame = pd.DataFrame(events).groupby("userid").agg(views=("id", "size"), id_sum=("id", "sum"))
    expected = {u: {"userid": u, "views": int(r.views), "id_sum": int(r.id_sum)} for u, r in frame.iterrows()}
    assert latest_by_key(broker, project, "user_counts") == expected

    database = mv.database_path(project.root, project.state_path, project.environment)
    _, rows = mv.run_query(database, "SELECT id, pageid FROM page_rows")
    assert sorted(rows) == sorted((e["id"], e["pageid"]) for e in events if e["pageid"] != "Page_1")
