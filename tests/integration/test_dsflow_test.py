"""`dsflow test` (issue 43, item 3) on the session's Spark, without a broker: tests kept in a project's tests/*.yml,
run through the CLI. Windows closing with the watermark, late records dropped, changelog upserts and deletes with
their retractions, a temporal join as of event time, expectations and dead letters; and a wrong expectation, which
must fail with its diff. The random changelog cases compare with a plain-Python replay."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from collections import Counter

import pytest
import yaml
from click.testing import CliRunner

from dsflow.cli import cli
from support.projects import EXAMPLE_PROJECT, make_project

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, ts BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 1);
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, uts BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json', 'timestamp' = 'uts', 'topic.partitions' = 1);

CREATE CHANGELOG page_tumble WITH ('watermark.delay' = '5 seconds') AS
  SELECT window_start, window_end, pageid, COUNT(*) AS views
  FROM TUMBLE(pageviews, SIZE 10 SECONDS) GROUP BY window_start, window_end, pageid;
CREATE CHANGELOG user_sessions WITH ('watermark.delay' = '5 seconds') AS
  SELECT window_start, window_end, userid, COUNT(*) AS n
  FROM SESSION(pageviews, GAP 5 SECONDS) GROUP BY window_start, window_end, userid;
CREATE CHANGELOG per_user AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
CREATE CHANGELOG per_name AS SELECT name, COUNT(*) AS n FROM users GROUP BY name;
CREATE STREAM enriched WITH ('watermark.delay' = '5 seconds') AS
  SELECT p.id, p.userid, u.name FROM pageviews p LEFT JOIN users u ON p.userid = u.userid;
CREATE STREAM checked
  CONSTRAINT positive EXPECT (id > 0) ON VIOLATION DROP ROW
  CONSTRAINT known EXPECT (pageid IN ('a', 'b')) ON VIOLATION DEAD LETTER
  AS SELECT id, pageid FROM pageviews;
"""

SESSION_OPEN = {"name": "session_still_open", "query": "user_sessions", "batches": [
    {"pageviews": [{"id": 1, "ts": 1000, "userid": "u1", "pageid": "a"},
                   {"id": 2, "ts": 3000, "userid": "u1", "pageid": "b"}],
     "watermark": "1970-01-01 00:00:00"}],
    "expect": {"state": []}}
SESSION_CLOSED = {"name": "session_closes_with_the_watermark", "query": "user_sessions", "batches": [
    *SESSION_OPEN["batches"],
    {"pageviews": [{"id": 3, "ts": 20000, "userid": "u2", "pageid": "a"}], "watermark": "1970-01-01 00:00:15"}],
    "expect": {"state": [{"userid": "u1", "n": 2, "window_start": "1970-01-01 00:00:01",
                          "window_end": "1970-01-01 00:00:08"}]}}
LATE = {"name": "late_records_dropped", "query": "page_tumble", "batches": [
    {"pageviews": [{"id": 1, "ts": 1000, "userid": "u1", "pageid": "a"},
                   {"id": 2, "ts": 12000, "userid": "u1", "pageid": "a"},
                   {"id": 3, "ts": 16000, "userid": "u2", "pageid": "a"}]},
    {"pageviews": [{"id": 4, "ts": 2000, "userid": "u3", "pageid": "a"},     # behind the watermark (11 s): dropped
                   {"id": 5, "ts": 15000, "userid": "u3", "pageid": "a"}]}],
    "expect": {"state": [{"window_start": "1970-01-01 00:00:00", "pageid": "a", "views": 1},
                         {"window_start": "1970-01-01 00:00:10", "pageid": "a", "views": 3}]}}
TEMPORAL = {"name": "temporal_join_as_of_event_time", "query": "enriched", "batches": [
    {"users": [{"userid": "u1", "name": "Ann", "uts": 1000}],
     "pageviews": [{"id": 1, "ts": 2000, "userid": "u1", "pageid": "a"}]},
    {"users": [{"userid": "u1", "name": "Bob", "uts": 5000}],
     "pageviews": [{"id": 2, "ts": 6000, "userid": "u1", "pageid": "a"},
                   {"id": 3, "ts": 7000, "userid": "u2", "pageid": "a"}]},
    {"pageviews": [{"id": 4, "ts": 30000, "userid": "u1", "pageid": "a"},   # moves the watermark past 1 to 3
                   {"id": 5, "ts": 1500, "userid": "u1", "pageid": "a"}]}],  # behind the watermark (2 s): dropped
    "expect": {"rows": [{"id": 1, "userid": "u1", "name": "Ann"}, {"id": 2, "userid": "u1", "name": "Bob"},
                        {"id": 3, "userid": "u2", "name": None}]}}
CHECKED = {"name": "expectations_and_dead_letters", "query": "checked", "inputs": {"pageviews": [
    {"id": 1, "ts": 1, "userid": "u", "pageid": "a"}, {"id": -2, "ts": 1, "userid": "u", "pageid": "a"},
    {"id": 3, "ts": 1, "userid": "u", "pageid": "zz"}, {"id": 4, "ts": 1, "userid": "u", "pageid": "b"}]},
    "expect": {"rows": [{"id": 1, "pageid": "a"}, {"id": 4, "pageid": "b"}],
               "dead_letters": [{"id": 3, "pageid": "zz", "_rule": "known"}],
               "expectations": {"positive": {"passed": 3, "failed": 1}, "known": {"passed": 3, "failed": 1}}}}


def project_with(tmp_path, tests: list[dict]):
    return make_project(tmp_path, {"sql/all.sql": SQL, "tests/cases.yml": yaml.safe_dump({"tests": tests},
                                                                                        sort_keys=False)})


def dsflow_test(root, *args: str):
    return CliRunner().invoke(cli, ["-C", str(root), "test", *args], catch_exceptions=False)


def test_the_issue_cases_pass_and_a_wrong_expectation_fails_with_its_diff(spark, tmp_path) -> None:
    wrong = {**LATE, "name": "late_counted_wrongly",
             "expect": {"state": [{"window_start": "1970-01-01 00:00:00", "window_end": "1970-01-01 00:00:10",
                                   "pageid": "a", "views": 2},
                                  {"window_start": "1970-01-01 00:00:10", "window_end": "1970-01-01 00:00:20",
                                   "pageid": "a", "views": 3}]}}
    root = project_with(tmp_path, [SESSION_OPEN, SESSION_CLOSED, LATE, TEMPORAL, CHECKED, wrong])
    junit = tmp_path / "junit.xml"
    result = dsflow_test(root, "--junit-xml", str(junit))
    assert result.exit_code == 1, result.output
    out = result.output
    for name in ("session_still_open", "session_closes_with_the_watermark", "late_records_dropped",
                 "temporal_join_as_of_event_time", "expectations_and_dead_letters"):
        assert f"PASS {name} " in out, out
    assert "FAIL late_counted_wrongly" in out
    at = out.index('key {"window_start": "1970-01-01 00:00:00", "window_end": "1970-01-01 00:00:10", "pageid": "a"}')
    assert out[at:].splitlines()[1:3] == [  # the diff of the one key that differs, under it
        '      - missing    {"pageid": "a", "views": 2, "window_end": "1970-01-01 00:00:10", '
        '"window_start": "1970-01-01 00:00:00"}',
        '      + unexpected {"pageid": "a", "views": 1, "window_end": "1970-01-01 00:00:10", '
        '"window_start": "1970-01-01 00:00:00"}']
    assert out.count("key {") == 1
    assert "5 passed, 1 failed" in out
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "1", "0")
    failed = {case.get("name") for case in suite if case.find("failure") is not None}
    assert failed == {"late_counted_wrongly"}


def random_changes(seed: int) -> tuple[list[dict], dict[str, int], dict[str, int]]:
    """Arrival batches of pageviews and user changes (upserts, deletes), and the reference: views per user, users
    per name after the last change (a plain-Python replay)."""
    rng = random.Random(seed)
    batches, views, names = [], Counter(), {}
    for b in range(4):
        pageviews = [{"id": b * 100 + i, "ts": 1000 * i, "userid": rng.choice("uvw"), "pageid": "a"}
                     for i in range(rng.randrange(0, 6))]
        users = []
        for _ in range(rng.randrange(1, 5)):
            user = rng.choice(["u1", "u2", "u3", "u4"])
            if rng.random() < 0.3:
                users.append({"userid": user, "_delete": True})
                names.pop(user, None)
            else:
                name = rng.choice(["ann", "bob", "cy"])
                users.append({"userid": user, "name": name, "uts": b})
                names[user] = name
        views.update(v["userid"] for v in pageviews)
        batches.append({"pageviews": pageviews, "users": users})
    return batches, dict(views), dict(Counter(names.values()))


@pytest.mark.parametrize("seed", [7])
def test_changelog_upserts_and_deletes_match_a_python_replay(spark, tmp_path, seed: int) -> None:
    batches, views, per_name = random_changes(seed)
    tests = [{"name": "views_per_user", "query": "per_user",
              "batches": [{"pageviews": b["pageviews"]} for b in batches],
              "expect": {"state": [{"userid": u, "n": n} for u, n in views.items()]}},
             {"name": "users_per_name_with_retractions", "query": "per_name",
              "batches": [{"users": b["users"]} for b in batches],
              "expect": {"state": [{"name": k, "n": n} for k, n in per_name.items()]}}]
    assert any(u.get("_delete") for b in batches for u in b["users"]), "the seed makes no delete"
    result = dsflow_test(project_with(tmp_path, tests))
    assert result.exit_code == 0, result.output
    assert "2 passed, 0 failed" in result.output


def test_the_example_project_tests_pass_through_the_cli(spark, tmp_path) -> None:
    result = dsflow_test(EXAMPLE_PROJECT)
    assert result.exit_code == 0, result.output
    assert "2 passed, 0 failed" in result.output


def test_a_project_made_by_init_has_a_test_that_passes(spark, tmp_path) -> None:
    folder = tmp_path / "new"
    assert CliRunner().invoke(cli, ["init", str(folder)]).exit_code == 0
    assert (folder / "tests" / "queries.yml").is_file()
    result = dsflow_test(folder)
    assert result.exit_code == 0, result.output
    assert "PASS big_events_keeps_amounts_over_50" in result.output and "1 passed, 0 failed" in result.output
