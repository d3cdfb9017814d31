"""Expectations and the source error policy (issue 43, items 1 and 2) without Spark: parsing the CONSTRAINT clauses,
every diagnostic with its file:line:col, planning a rule change in place, the counts per micro-batch read from
progress, and the supervisor's metrics of them."""

from __future__ import annotations

from pathlib import Path

from dsflow.adapters.spark.expectations import METRICS, counts
from dsflow.adapters.spark.spec import ExpectationSpec
from dsflow.core.plan import Action, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.errors import Diagnostic, Location
from dsflow.load.project import check_project, load_project
from dsflow.sql.parse import parse_sql_file
from dsflow.runtime.metrics import registry
from support.projects import KAFKA_KINESIS_STORES, PAGEVIEWS, applied, make_project

QUERY = """\
CREATE STREAM clean WITH ('topic' = 'clean')
  CONSTRAINT has_user EXPECT (userid IS NOT NULL) ON VIOLATION DROP ROW
  CONSTRAINT recent EXPECT (viewtime > 0) ON VIOLATION {action}
  AS SELECT id, viewtime, userid FROM pageviews;
"""


def diagnostics(tmp_path: Path, pipelines: str, sources: str = PAGEVIEWS, **files: str) -> list[Diagnostic]:
    root = make_project(tmp_path, {"sql/sources.sql": sources, "sql/pipelines.sql": pipelines, **files})
    return check_project(root, variables={"kinesis": "http://127.0.0.1:1"}).diagnostics


def only(found: list[Diagnostic], code: str) -> Diagnostic:
    matching = [d for d in found if d.code == code]
    assert len(matching) == 1, "\n".join(str(d) for d in found)
    return matching[0]


# --- parsing ----------------------------------------------------------------------------------------------------

def test_clauses_between_with_and_as_are_taken_out_in_order() -> None:
    statements, problems = parse_sql_file(QUERY.format(action="DEAD LETTER") + """
INSERT INTO clean CONSTRAINT q EXPECT (id > 0) ON VIOLATION FAIL QUERY SELECT id, viewtime, userid FROM pageviews;
CREATE STREAM w WITH ('topic' = 'w') CONSTRAINT only EXPECT (x->y = 'a') ON VIOLATION WARN AS SELECT x FROM s;
""", "p.sql")
    assert problems == []
    found = [[(e.name, e.condition, e.action, e.location, e.condition_location) for e in s.extra["expectations"]]
             for s in statements]
    assert found == [
        [("has_user", "userid IS NOT NULL", "drop", Location("p.sql", 2, 3), Location("p.sql", 2, 31)),
         ("recent", "viewtime > 0", "dead_letter", Location("p.sql", 3, 3), Location("p.sql", 3, 29))],
        [("q", "id > 0", "fail", Location("p.sql", 6, 19), Location("p.sql", 6, 40))],
        [("only", "x->y = 'a'", "warn", Location("p.sql", 7, 38), Location("p.sql", 7, 62))],
    ]
    assert "CONSTRAINT" not in statements[0].select.sql()


def test_syntax_errors_name_the_place() -> None:
    cases = {
        "CREATE STREAM a CONSTRAINT c EXPECT (x > 0) ON VIOLATION WARN WITH ('topic' = 'a') AS SELECT x FROM s":
            ((1, 63), "come after WITH"),
        "CREATE STREAM a CONSTRAINT c EXPECT (x > 0) ON VIOLATION EXPLODE AS SELECT x FROM s": ((1, 58), "WARN, DROP"),
        "CREATE STREAM a CONSTRAINT c EXPECT x > 0 ON VIOLATION WARN AS SELECT x FROM s": ((1, 17), "EXPECT (cond"),
        "CREATE STREAM a CONSTRAINT c EXPECT () ON VIOLATION WARN AS SELECT x FROM s": ((1, 37), "parentheses"),
        "CREATE STREAM a CONSTRAINT c EXPECT (x > 0) WARN AS SELECT x FROM s": ((1, 43), "ON VIOLATION"),
    }
    for sql, ((line, col), words) in cases.items():
        statements, problems = parse_sql_file(sql, "p.sql")
        assert statements == [] and len(problems) == 1, sql
        assert problems[0].code == "DSF-E002" and words in problems[0].message, (sql, problems[0])
        assert problems[0].location == Location("p.sql", line, col), (sql, problems[0])


def test_a_column_named_constraint_in_the_select_is_left_alone() -> None:
    statements, problems = parse_sql_file("CREATE STREAM a AS SELECT `constraint` FROM s", "p.sql")
    assert problems == [] and "expectations" not in statements[0].extra


# --- validation -------------------------------------------------------------------------------------------------

def test_a_valid_query_gets_its_rules(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"sql/sources.sql": PAGEVIEWS, "sql/pipelines.sql": QUERY.format(
        action="DEAD LETTER").replace("AS SELECT", "AS SELECT UPPER(pageid) AS page,")})
    query = next(q for q in load_project(root).queries if q.fqn == "analytics.public.clean")
    assert [(e.name, e.condition, e.action) for e in query.expectations] == [
        ("has_user", "NOT userid IS NULL", "drop"), ("recent", "viewtime > 0", "dead_letter")]


def test_e860_a_rule_name_twice(tmp_path: Path) -> None:
    sql = QUERY.format(action="WARN").replace("CONSTRAINT recent", "CONSTRAINT HAS_USER")
    d = only(diagnostics(tmp_path, sql), "DSF-E860")
    assert d.location == Location("sql/pipelines.sql", 3, 3)
    assert "first declared at sql/pipelines.sql:2:3" in (d.hint or "")


def test_e861_unknown_column_at_its_place(tmp_path: Path) -> None:
    sql = QUERY.format(action="WARN").replace("(viewtime > 0)", "(viewtime > 0 AND pageid = 'x')")
    d = only(diagnostics(tmp_path, sql), "DSF-E861")
    assert d.location == Location("sql/pipelines.sql", 3, 46)
    assert "'pageid'" in d.message and d.hint == "known: id, userid, viewtime"
    typo = only(diagnostics(tmp_path, QUERY.format(action="WARN").replace("(viewtime >", "(viewtme >")), "DSF-E861")
    assert typo.hint == "did you mean 'viewtime'?"


def test_e862_not_a_boolean_and_type_errors_keep_their_codes(tmp_path: Path) -> None:
    d = only(diagnostics(tmp_path, QUERY.format(action="WARN").replace("(viewtime > 0)", "(viewtime + 1)")),
             "DSF-E862")
    assert d.location == Location("sql/pipelines.sql", 3, 29) and "'viewtime + 1' is NUMBER" in d.message
    found = diagnostics(tmp_path, QUERY.format(action="WARN").replace("(viewtime > 0)", "(NOT viewtime)"))
    assert [x.code for x in found] == ["DSF-E405"]


def test_e863_a_rule_reads_one_row(tmp_path: Path) -> None:
    d = only(diagnostics(tmp_path, QUERY.format(action="WARN").replace("(viewtime > 0)", "(COUNT(*) > 0)")),
             "DSF-E863")
    assert d.location == Location("sql/pipelines.sql", 3, 29)


def test_e864_dead_letter_without_a_dead_letter_topic(tmp_path: Path) -> None:
    sources = "CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR) WITH ('store' = " \
              "'kinesis_store', 'value.format' = 'json', 'topic.shards' = 1);\n"
    sql = QUERY.format(action="DEAD LETTER").replace("'topic' = 'clean'", "'topic' = 'clean', 'store' = "
                                                     "'kafka_store', 'topic.partitions' = 1, 'topic.replicas' = 1")
    d = only(diagnostics(tmp_path, sql, sources, **{"stores/kafka.yml": KAFKA_KINESIS_STORES}), "DSF-E864")
    assert d.location == Location("sql/pipelines.sql", 3, 3)


def test_e865_a_declared_relation_has_no_rows_to_check(tmp_path: Path) -> None:
    sql = "CREATE STREAM other (id BIGINT) WITH ('value.format' = 'json')\n" \
          "  CONSTRAINT c EXPECT (id > 0) ON VIOLATION WARN;\n"
    d = only(diagnostics(tmp_path, sql), "DSF-E865")
    assert d.location == Location("sql/pipelines.sql", 2, 3)


def test_the_source_error_policy_is_checked(tmp_path: Path) -> None:
    sql = "CREATE STREAM c WITH ('source.deserialization.error.handling' = 'skip') AS SELECT id FROM pageviews;"
    d = only(diagnostics(tmp_path, sql), "DSF-E032")
    assert d.location == Location("sql/pipelines.sql", 1, 23)
    root = make_project(tmp_path / "ok", {"sql/sources.sql": PAGEVIEWS, "sql/pipelines.sql": sql.replace(
        "'skip'", "'ignore'")})
    query = next(q for q in load_project(root).queries if q.fqn == "analytics.public.c")
    assert query.deserialization_errors == "IGNORE"


# --- planning ---------------------------------------------------------------------------------------------------

def _plan(tmp_path: Path, pipelines: str, state: State):
    root = make_project(tmp_path, {"sql/sources.sql": PAGEVIEWS, "sql/pipelines.sql": pipelines})
    project = load_project(root)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions())


def test_adding_changing_and_dropping_a_rule_keeps_the_checkpoint(tmp_path: Path) -> None:
    plain = "CREATE STREAM clean WITH ('topic' = 'clean') AS SELECT id, viewtime, userid FROM pageviews;\n"
    state = applied(_plan(tmp_path / "a", plain, State()))
    steps = [(QUERY.format(action="WARN"), "expectations (added 'has_user', added 'recent') changed (in place)"),
             (QUERY.format(action="FAIL QUERY"), "expectations (changed 'recent') changed (in place)"),
             (plain, "expectations (dropped 'has_user', dropped 'recent') changed (in place)")]
    for index, (sql, reason) in enumerate(steps):
        plan = _plan(tmp_path / f"b{index}", sql, state)
        [change] = plan.actionable
        assert change.address == "query.analytics.public.clean" and change.action is Action.UPDATE
        assert change.category is not None and change.category.value == "in_place"
        assert change.reason == reason and change.effect.startswith("restarted on the same checkpoint")
        state = applied(plan, state)


# --- counts and metrics -----------------------------------------------------------------------------------------

RULES = [ExpectationSpec(name="positive", condition="amount > 0", action="drop"),
         ExpectationSpec(name="known", condition="region IS NOT NULL", action="warn")]


def test_counts_add_each_micro_batch_once() -> None:
    progress = [{"batchId": 0, "observedMetrics": {METRICS: {"passed0": 3, "failed0": 1, "passed1": 4, "failed1": 0}}},
                {"batchId": 1, "observedMetrics": {METRICS: {"passed0": 2, "failed0": 2, "passed1": 3, "failed1": 1}}}]
    totals: dict = {}
    last = counts(progress, RULES, totals, None)
    assert last == 1 and counts(progress, RULES, totals, last) == 1  # seen batches are not counted again
    assert totals == {"positive": {"action": "drop", "passed": 5, "failed": 3, "last_batch_passed": 2,
                                   "last_batch_failed": 2},
                      "known": {"action": "warn", "passed": 7, "failed": 1, "last_batch_passed": 3,
                                "last_batch_failed": 1}}


def test_metrics_show_the_counts_and_the_skipped_records() -> None:
    from prometheus_client import generate_latest

    entry = {"address": "query.analytics.public.clean", "state": "running", "skipped_records": 4,
             "expectations": {"positive": {"action": "drop", "passed": 5, "failed": 3, "last_batch_passed": 2,
                                           "last_batch_failed": 2}}}
    text = generate_latest(registry(lambda: [entry])).decode()
    assert 'dsflow_query_expectation_rows_total{action="drop",expectation="positive",' \
           'query="analytics.public.clean",result="failed"} 3.0' in text
    assert 'dsflow_query_expectation_last_batch_rows{expectation="positive",query="analytics.public.clean",' \
           'result="passed"} 2.0' in text
    assert 'dsflow_query_skipped_records_total{query="analytics.public.clean"} 4.0' in text


def test_status_shows_failed_rows_per_rule_and_skipped_records() -> None:
    from dsflow.cli.render import expectations_cell

    entry = {"expectations": {"positive": {"action": "drop", "passed": 7, "failed": 3},
                              "known": {"action": "warn", "passed": 10, "failed": 0}}, "skipped_records": 2}
    assert expectations_cell(entry) == "positive 3/10, known 0/10, 2 skipped"
    assert expectations_cell({}) == "-"


def test_the_status_file_carries_the_totals_of_the_batches_seen(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from dsflow.adapters.spark.driver import ExpectationTotals, progress_status
    from dsflow.adapters.spark.spec import QuerySpec, SinkSpec

    spec = QuerySpec(name="q", version="v", master="local[1]", checkpoint=str(tmp_path / "c"),
                     status_path=str(tmp_path / "status.json"), trigger_interval="1 second", sources=[],
                     sink=SinkSpec(topic="t", client_config={}, columns=["amount"]), select_sql="SELECT 1",
                     expectations=RULES)
    totals = ExpectationTotals(spec)
    batch = {"batchId": 0, "observedMetrics": {METRICS: {"passed0": 1, "failed0": 2, "passed1": 3, "failed1": 0}}}
    query = SimpleNamespace(lastProgress=batch, recentProgress=[batch], runId="r")
    assert progress_status(spec, None, "starting", totals)["expectations"] == {
        "positive": {"action": "drop", "passed": 0, "failed": 0}, "known": {"action": "warn", "passed": 0, "failed": 0}}
    for _ in range(2):  # the same batch seen twice is counted once
        found = progress_status(spec, query, "running", totals)["expectations"]
    assert found["positive"] == {"action": "drop", "passed": 1, "failed": 2, "last_batch_passed": 1,
                                 "last_batch_failed": 2}
