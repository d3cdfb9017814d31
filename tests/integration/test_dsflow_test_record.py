"""`dsflow test --record QUERY` (issue 43, item 3) on Apache Kafka and the session's Spark: a test of a query made from
what its source holds in the environment. The recorded inputs must be the records the topic holds (the first N,
in offset order), the expected output what a plain-Python reading of the query makes of them (a filter's rows, a
count's state by key), `dsflow test` must pass on the file, and fail on it once the query's SQL changes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dsflow.cli import cli
from support.streaming import produce, streaming_project

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 1);
CREATE STREAM even_views AS SELECT id, userid FROM pageviews WHERE id % {modulo} = 0;
CREATE CHANGELOG per_user AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
"""


def _dsflow(root, broker, *args):
    return CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "test", *args])


def test_a_recorded_test_holds_the_topics_first_records_and_what_the_query_makes_of_them(spark, tmp_path, broker):
    project = streaming_project(tmp_path, broker, SQL.format(modulo=2))  # its topics created
    root = Path(project.root)
    events = [{"id": i, "ts": 1_700_000_000_000 + i * 1_000, "userid": f"u{i % 4}", "pageid": f"p{i % 3}"}
              for i in range(40)]
    produce(broker, project, "pageviews", events)
    first = events[:25]

    done = _dsflow(root, broker, "--record", "even_views", "--limit", "25")
    assert done.exit_code == 0, done.output
    assert "Recorded tests/recorded_even_views.yml: 25 input record(s), 13 expected row(s)." in done.output
    test = yaml.safe_load((root / "tests" / "recorded_even_views.yml").read_text())["tests"][0]
    assert test["query"] == "analytics.public.even_views"
    assert list(test["inputs"].values()) == [first]
    assert test["expect"] == {"rows": [{"id": e["id"], "userid": e["userid"]} for e in first if e["id"] % 2 == 0]}

    done = _dsflow(root, broker, "--record", "per_user", "--limit", "25", "--name", "users_counted")
    assert done.exit_code == 0, done.output
    test = yaml.safe_load((root / "tests" / "users_counted.yml").read_text())["tests"][0]
    counted = Counter(e["userid"] for e in first)
    assert sorted(test["expect"]["state"], key=lambda r: r["userid"]) == \
        [{"userid": u, "n": n} for u, n in sorted(counted.items())]

    again = _dsflow(root, broker, "--record", "per_user", "--name", "users_counted")
    assert getattr(again.exception, "code", None) == "DSF-E888"  # the file exists: nothing overwritten

    assert _dsflow(root, broker).exit_code == 0
    (root / "sql" / "all.sql").write_text(SQL.format(modulo=3))  # the query changes: its recorded test fails
    changed = _dsflow(root, broker, "recorded_even_views")
    assert changed.exit_code == 1 and "FAIL" in changed.output and "recorded_even_views" in changed.output
    assert _dsflow(root, broker, "users_counted").exit_code == 0
