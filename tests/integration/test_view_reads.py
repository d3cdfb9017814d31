"""A SQLite materialized view read by plain clients (the sqlite3 module and the sqlite3 CLI) while a real
Spark query writes it: every read is the aggregate of a prefix of the input, never half a micro-batch,
and the final snapshot equals a pandas reference.
"""

from __future__ import annotations

import csv
import io
import sqlite3
import subprocess
import threading
import time

import pandas as pd
import pytest
from click.testing import CliRunner

from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from dsflow.adapters.sqlite import mv
from dsflow.cli import cli
from support.streaming import produce, streaming_project
from support.waiting import wait_for

pytestmark = pytest.mark.integration

N = 3_000
SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);

CREATE MATERIALIZED VIEW user_counts AS
  SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum, MAX(id) AS max_id FROM pageviews GROUP BY userid;
"""
TOTALS = "SELECT COALESCE(SUM(views), 0), COALESCE(SUM(id_sum), 0), COALESCE(MAX(max_id), -1) FROM user_counts"


def _reader(database, stop: threading.Event, seen: list[tuple[int, int, int]]) -> None:
    """Reads as fast as it can with its own connection; each read is one consistent snapshot."""
    while not stop.is_set():
        try:
            conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
            try:
                seen.append(tuple(int(v) for v in conn.execute(TOTALS).fetchone()))
            finally:
                conn.close()
        except sqlite3.OperationalError:  # the file or table does not exist yet
            pass
        time.sleep(0.02)


def test_sqlite_view_is_read_whole_batches_while_written(tmp_path, spark, broker) -> None:
    project = streaming_project(tmp_path, broker, SQL)
    query = project.queries[0]
    spec = query_spec(project, query, "test", str(tmp_path / "ck"), str(tmp_path / "status.json"))
    database = spec.sink.database
    events = [{"id": i, "viewtime": i, "userid": f"User_{(i * 7919) % 17}", "pageid": "p"} for i in range(N)]
    stop, seen = threading.Event(), []
    reader = threading.Thread(target=_reader, args=(database, stop, seen), daemon=True)
    running = start_query(spark, spec)
    reader.start()
    cli_reads = []
    try:
        for first in range(0, N, N // 4):  # one partition: the topic holds the ids in order
            produce(broker, project, "pageviews", events[first:first + N // 4], "userid")
            wait_for(lambda first=first: seen and seen[-1][0] > first, 120, f"the view to pass id {first}")
            out = subprocess.run(["sqlite3", database, TOTALS], capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            cli_reads.append(tuple(int(v) for v in out.stdout.strip().split("|")))
        wait_for(lambda: seen[-1][0] == N, 120, "every event in the view")
    finally:
        stop.set()
        reader.join(timeout=30)
        running.stop()
    bad = [(k, s, m) for k, s, m in seen + cli_reads if s != k * (k - 1) // 2 or m != k - 1]
    assert not bad, f"a reader saw half a batch: {bad[:5]}"
    assert len({k for k, _, _ in seen if 0 < k < N}) >= 2, "no read happened while the query wrote"

    frame = pd.DataFrame(events).groupby("userid").agg(views=("id", "size"), id_sum=("id", "sum"),
                                                        max_id=("id", "max"))
    expected = {u: (int(r.views), int(r.id_sum), int(r.max_id)) for u, r in frame.iterrows()}
    _, rows = mv.run_query(database, "SELECT userid, views, id_sum, max_id FROM user_counts")
    assert {r[0]: tuple(r[1:]) for r in rows} == expected

    base = ["-C", project.root, "--var", f"bootstrap={broker}", "query",
            "SELECT userid, views FROM user_counts WHERE views > 176 ORDER BY userid"]
    want = [[u, str(v[0])] for u, v in sorted(expected.items()) if v[0] > 176]
    assert want, "the filter keeps nothing; nothing tested"
    shown = CliRunner().invoke(cli, [*base, "--csv"])
    assert shown.exit_code == 0 and list(csv.reader(io.StringIO(shown.output))) == [["userid", "views"], *want]
    shown = CliRunner().invoke(cli, base)
    assert shown.exit_code == 0 and f"{len(want)} row(s)" in shown.output
    assert all(u in shown.output for u, _ in want)
