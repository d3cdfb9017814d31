"""One golden plan (text, JSON, markdown) per change category, from edits to the example project.

Regenerate after an intended change with:  DSFLOW_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_plan_categories.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsflow.core.plan import Action, Estimate, Observation, Observations, Plan, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import LedgerEntry, State
from dsflow.load.project import load_project
from dsflow.cli.render import plan_markdown
from support.projects import EXAMPLE_VARIABLES, applied, copy_example
from test_plan_golden import check_golden, normalized

FILTERED = "query.analytics.curated.pageviews_filtered"
ENRICHED = "query.analytics.curated.pageviews_enriched"
PIPELINES = "sql/pipelines.sql"
FILTER_HEAD = "CREATE STREAM curated.pageviews_filtered WITH ('topic.partitions' = 1) AS"


def plan_of(root: Path, state: State, **options) -> Plan:
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions(**options))


def edit(root: Path, path: str, old: str, new: str) -> None:
    target = root / path
    text = target.read_text()
    assert old in text, old
    target.write_text(text.replace(old, new))


def check_all(stem: str, plan: Plan) -> None:
    data = normalized(plan)
    from dsflow.cli.render import plan_text

    check_golden(f"categories/{stem}.json", json.dumps(data, indent=2) + "\n")
    check_golden(f"categories/{stem}.txt", plan_text(data) + "\n")
    check_golden(f"categories/{stem}.md", plan_markdown(data) + "\n")


@pytest.fixture()
def deployed(tmp_path) -> tuple[Path, State]:
    root = copy_example(tmp_path)
    return root, applied(plan_of(root, State()))


def categories(plan: Plan) -> dict[str, tuple[str, str | None]]:
    return {c.address: (c.action.value, c.category.value if c.category else None) for c in plan.actionable}


def test_in_place(deployed):
    root, state = deployed
    edit(root, PIPELINES, FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'trigger.interval' = '5 seconds')"))
    plan = plan_of(root, state)
    assert categories(plan) == {FILTERED: ("update", "in_place")}
    check_all("in_place", plan)


def test_keep_checkpoint(deployed):
    root, state = deployed
    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_2' AND userid <> 'User_1'")
    plan = plan_of(root, state)
    assert categories(plan) == {FILTERED: ("update", "keep_checkpoint")}
    check_all("keep_checkpoint", plan)


def test_carry_offsets_by_override(deployed):
    root, state = deployed
    edit(root, PIPELINES, FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'start.position' = 'carry')"))
    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    plan = plan_of(root, state)
    assert categories(plan) == {FILTERED: ("replace", "carry_offsets")}
    assert plan.actionable[0].override == "carry"
    check_all("carry_offsets", plan)


def test_carry_offsets_when_sources_change(deployed):
    root, state = deployed
    edit(root, PIPELINES, "FROM analytics.public.pageviews\nWHERE userid IS NOT NULL",
         "FROM curated.pageviews_filtered\nWHERE userid IS NOT NULL")
    edit(root, PIPELINES, "CREATE STREAM curated.pageviews_enriched AS",
         "CREATE STREAM curated.pageviews_enriched WITH ('topic.partitions' = 2) AS")
    plan = plan_of(root, state)
    assert categories(plan) == {ENRICHED: ("replace", "carry_offsets")}
    assert "sources" in plan.actionable[0].reason


def test_replay_with_estimate(deployed):
    root, state = deployed
    edit(root, PIPELINES, FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'start.position' = 'earliest')"))
    estimate = Estimate(records=120_000, rate_per_second=2_000.0, seconds=60.0)
    plan = plan_of(root, state, observations=Observations(estimates={FILTERED: estimate}))
    assert categories(plan) == {FILTERED: ("replace", "replay")}
    assert plan.actionable[0].estimate == estimate
    check_all("replay", plan)


def test_blue_green_replay(deployed):
    """Issue 44, item 1: a replay asked for blue/green names its new log, its readers, the consumer groups that must
    move, and every phase (core/bluegreen.py; apply: tests/e2e/test_bluegreen.py)."""
    root, _ = deployed
    (root / "sql" / "readers.sql").write_text(
        "CREATE STREAM curated.filtered_ids AS SELECT id, pageid FROM curated.pageviews_filtered;\n")
    state = applied(plan_of(root, State()))
    edit(root, PIPELINES, FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'start.position' = 'earliest')"))
    seen = Observations(estimates={FILTERED: Estimate(records=120_000, rate_per_second=2_000.0, seconds=60.0)},
                        consumer_groups={"relation.analytics.curated.pageviews_filtered": ["billing-app"]})
    plan = plan_of(root, state, observations=seen, blue_green=True, catch_up_seconds=300,
                   store_types={"kafka_main": "kafka"})
    assert categories(plan) == {FILTERED: ("replace", "replay")}
    assert plan.actionable[0].blue_green is not None
    check_all("blue_green", plan)


def test_replay_from_a_timestamp(deployed):
    root, state = deployed
    edit(root, PIPELINES, FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'start.position' = '1700000000000')"))
    plan = plan_of(root, state)
    [change] = plan.actionable
    assert (change.category.value, change.override) == ("replay", "1700000000000")
    assert "timestamp 1700000000000" in change.effect


def test_replace_relation_lists_downstream_queries(deployed):
    root, state = deployed
    edit(root, "sql/sources.sql", "  userid VARCHAR,\n  pageid VARCHAR\n",
         "  pageid VARCHAR,\n  userid VARCHAR\n")  # not an addition at the end
    plan = plan_of(root, state)
    relation = next(c for c in plan.actionable if c.address == "relation.analytics.public.pageviews")
    assert (relation.action, relation.category.value) == (Action.REPLACE, "replace_relation")
    assert relation.affected == [ENRICHED, FILTERED]
    assert categories(plan)[FILTERED] == ("replace", "replay")
    assert categories(plan)[ENRICHED] == ("replace", "replay")
    check_all("replace_relation", plan)


def test_rollback_is_named(deployed):
    root, state = deployed
    first = state.resources[FILTERED]
    ledger = [LedgerEntry(query=FILTERED, version=first.data_hash, checkpoint="/c/1", started_at="t0",
                          stopped_at="t1")]
    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    state = applied(plan_of(root, state), state).with_ledger(ledger)
    edit(root, PIPELINES, "WHERE pageid <> 'Page_3'", "WHERE pageid <> 'Page_2'")
    plan = plan_of(root, state)
    [change] = plan.actionable
    assert change.rollback_of == first.data_hash and change.category.value == "keep_checkpoint"
    assert change.reason.startswith(f"rollback to version {first.data_hash}")


def test_drift_restarts_in_place(deployed):
    root, state = deployed
    plan = plan_of(root, state, observations=Observations(resources={
        FILTERED: Observation(address=FILTERED, healthy=False, detail="query process is not running")}))
    [change] = plan.actionable
    assert (change.action, change.category.value, change.drift) == (Action.UPDATE, "in_place", True)
    check_all("drift", plan)


def test_target_limits_the_plan_to_the_target_and_its_dependencies(tmp_path):
    root = copy_example(tmp_path)
    plan = plan_of(root, State(), targets=frozenset({FILTERED}))
    assert {c.address for c in plan.actionable} == {
        FILTERED, "relation.analytics.curated.pageviews_filtered", "relation.analytics.public.pageviews",
        "store.kafka_main", "database.analytics", "schema.analytics.curated", "schema.analytics.public"}


def test_refresh_only_lists_drift_and_nothing_else(deployed):
    root, state = deployed
    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    plan = plan_of(root, state, refresh_only=True, observations=Observations(resources={
        ENRICHED: Observation(address=ENRICHED, healthy=False, detail="query process is not running")}))
    assert [(c.address, c.action) for c in plan.actionable] == [(ENRICHED, Action.REFRESH)]
    assert plan.mode == "refresh-only"


def test_destroy_with_a_target_removes_everything_that_depends_on_it(deployed):
    root, state = deployed
    plan = plan_of(root, state, destroy=True, targets=frozenset({"relation.analytics.public.pageviews"}))
    deleted = {c.address for c in plan.actionable}
    assert deleted == {"relation.analytics.public.pageviews", FILTERED, ENRICHED, "datagen.pageviews_feed"}
    assert [c.address for c in plan.actionable][-1] == "relation.analytics.public.pageviews"


def test_destroy_with_a_target_follows_dependents_through_others(deployed):
    root, state = deployed
    plan = plan_of(root, state, destroy=True, targets=frozenset({"store.kafka_main"}))
    deleted = {c.address for c in plan.actionable}
    assert {a for a in state.resources if a.startswith(("relation.", "query.", "datagen."))} <= deleted
    assert "store.kafka_main" in deleted and "database.analytics" not in deleted  # what it depends on stays
    assert any(a.startswith("query.") for a in deleted)  # a query depends on the store only through its relations


def test_destroy_target_is_described_one_way(deployed):
    """`destroy --help`, docs/cli.md and docs/concepts.md say what the tests above check (issue 40)."""
    from click.testing import CliRunner

    from dsflow.cli import DESTROY_TARGET_HELP, cli
    from support.projects import REPO

    assert DESTROY_TARGET_HELP.startswith("delete only ADDRESS and every deployed resource that depends on it, "
                                          "directly or through others")
    shown = " ".join(CliRunner().invoke(cli, ["destroy", "--help"], terminal_width=400).output.split())
    assert DESTROY_TARGET_HELP in shown
    assert f"| `--target ADDRESS` | {DESTROY_TARGET_HELP} |" in (REPO / "docs" / "cli.md").read_text()
    concepts = " ".join((REPO / "docs" / "concepts.md").read_text().split())
    assert "With `destroy`, it deletes only the targets and every deployed resource that depends on them, " \
           "directly or through others" in concepts


def test_unknown_target_is_an_error(tmp_path):
    from dsflow.engine import operations
    from dsflow.errors import DsflowError

    root = copy_example(tmp_path)
    loaded = operations.load(operations.Options(root, None, EXAMPLE_VARIABLES))
    with pytest.raises(DsflowError) as err:
        operations.plan(loaded, targets=frozenset({"query.analytics.curated.pageviews_filterd"}))
    assert err.value.code == "DSF-E024" and "pageviews_filtered" in err.value.hint


def test_exclude_leaves_the_address_and_everything_downstream_as_deployed(deployed):
    """`--exclude` (OpenTofu's -exclude): both queries edited, the filtered one excluded; it and what reads it are
    neither changed nor deleted, the other query's change is planned."""
    root, state = deployed
    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    edit(root, PIPELINES, "THEN 'top' ELSE", "THEN 'first' ELSE")
    whole = plan_of(root, state)
    assert {FILTERED, ENRICHED} <= {c.address for c in whole.actionable}
    plan = plan_of(root, state, excludes=frozenset({FILTERED}))
    assert plan.excluded == [FILTERED], "nothing depends on the query (its sink relation is what it depends on)"
    assert not {c.address for c in plan.changes} & set(plan.excluded), "an excluded resource is not in the plan"
    assert ENRICHED in {c.address for c in plan.actionable}
    assert not [c for c in plan.actionable if c.action is Action.DELETE]
    from dsflow.cli.render import plan_text

    assert f"Excluded, left as deployed: {', '.join(plan.excluded)}." in plan_text(normalized(plan))
    assert f"Excluded, left as deployed: {', '.join(plan.excluded)}." in plan_markdown(normalized(plan))


def test_exclude_of_a_source_leaves_every_reader_out(deployed):
    root, state = deployed
    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    plan = plan_of(root, state, excludes=frozenset({"relation.analytics.public.pageviews"}))
    assert {FILTERED, ENRICHED, "relation.analytics.public.pageviews"} <= set(plan.excluded)
    assert not plan.actionable


def test_exclude_and_target_together_or_with_destroy_are_refused_and_an_unknown_exclude_is_an_error(tmp_path):
    from click.testing import CliRunner

    from dsflow.cli import cli
    from dsflow.engine import operations
    from dsflow.errors import DsflowError

    root = copy_example(tmp_path)
    both = CliRunner().invoke(cli, ["-C", str(root), "plan", "--no-refresh", "--target", FILTERED,
                                    "--exclude", ENRICHED])
    assert both.exit_code == 2 and "--exclude and --target cannot be used together" in both.output
    destroying = CliRunner().invoke(cli, ["-C", str(root), "plan", "--no-refresh", "--destroy", "--exclude", ENRICHED])
    assert destroying.exit_code == 2 and "--exclude is not taken with --destroy" in destroying.output
    loaded = operations.load(operations.Options(root, None, EXAMPLE_VARIABLES))
    with pytest.raises(DsflowError) as err:
        operations.plan(loaded, excludes=frozenset({"query.analytics.curated.pageviews_filterd"}))
    assert err.value.code == "DSF-E024" and "--exclude" in err.value.message and "pageviews_filtered" in err.value.hint
