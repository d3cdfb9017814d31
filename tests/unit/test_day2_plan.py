"""Changes asked for by name and paused queries, planned from a recorded state (core/forcing.py): `--replace` rebuilds a
query from the earliest offsets and says what it re-reads and which relations see the records again;
`--reset-checkpoint` starts it at its sources' end offsets, says what it skips and needs the data-loss
acknowledgement; a query `dsflow pause` stopped is neither drift nor restarted. Golden plans: tests/golden/categories/
forced_*.{txt,json,md}. The data behind each promise: tests/e2e/test_day2_verbs.py."""

from __future__ import annotations

import pytest

from dsflow.cli.render import plan_markdown, plan_text
from dsflow.core.categories import Category
from dsflow.core.observing import questions
from dsflow.core.plan import Action, Estimate, Observation, Observations, PlanOptions
from dsflow.core.resources import project_resources
from dsflow.core.safety import Allowance, check_data_loss
from dsflow.core.state import State
from dsflow.errors import DsflowError
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, applied, copy_example
from test_plan_categories import FILTERED, PIPELINES, check_all, edit, plan_of
from test_plan_golden import normalized

FILTERED_SINK = "relation.analytics.curated.pageviews_filtered"
COPY = "CREATE STREAM curated.filtered_copy AS SELECT id, pageid FROM curated.pageviews_filtered;\n"


@pytest.fixture()
def deployed(tmp_path) -> tuple:
    root = copy_example(tmp_path)
    return root, applied(plan_of(root, State()))


def _paused(state: State, address: str) -> State:
    entry = state.resources[address]
    return state.with_resource(entry.model_copy(update={"outputs": {**entry.outputs, "paused": True, "pid": None}}))


def test_replace_rebuilds_from_the_earliest_and_names_what_it_replays_and_duplicates(deployed):
    root, state = deployed
    estimate = Estimate(records=120_000, rate_per_second=2_000.0, seconds=60.0)
    plan = plan_of(root, state, replace=frozenset({FILTERED}),
                   observations=Observations(estimates={FILTERED: estimate}))
    [change] = plan.actionable
    assert (change.address, change.action, change.category, change.forced) == (
        FILTERED, Action.REPLACE, Category.REPLAY, "replace")
    assert change.estimate == estimate and change.duplicates == [FILTERED_SINK]
    assert change.reason == "replace asked for (--replace)" and plan.replace == [FILTERED]
    assert "sources re-read from the earliest offset" in (change.effect or "")
    assert "duplicates" in (change.effect or ""), "a stream sink keeps what it held: the replay writes it again"
    check_all("forced_replace", plan)


def test_the_duplicates_of_a_replace_follow_the_streams_downstream(tmp_path):
    root = copy_example(tmp_path)
    (root / "sql" / "copy.sql").write_text(COPY)
    state = applied(plan_of(root, State()))
    plan = plan_of(root, state, replace=frozenset({FILTERED}))
    [change] = plan.actionable
    assert change.duplicates == ["relation.analytics.curated.filtered_copy", FILTERED_SINK]
    assert change.estimate is None
    assert "replay: records to reprocess not counted" in plan_text(normalized(plan))


def test_replace_takes_the_edit_of_the_query_with_it(deployed):
    root, state = deployed
    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    plan = plan_of(root, state, replace=frozenset({FILTERED}))
    [change] = plan.actionable
    assert change.reason == "replace asked for (--replace); select changed"
    assert change.category is Category.REPLAY and "Page_3" in str(change.after)


def test_reset_checkpoint_says_what_it_skips_and_needs_the_data_loss_acknowledgement(deployed):
    root, state = deployed
    plan = plan_of(root, state, reset_checkpoint=frozenset({FILTERED}),
                   observations=Observations(skipped={FILTERED: 42}))
    [change] = plan.actionable
    assert (change.action, change.category, change.forced) == (Action.REPLACE, Category.RESET_CHECKPOINT,
                                                               "reset_checkpoint")
    assert change.skips is not None and change.skips.records == 42 and change.destroys is None
    assert "each source starts at its end offsets" in (change.effect or "") and plan.reset_checkpoint == [FILTERED]
    text = plan_text(normalized(plan))
    assert "SKIPS: ~42 records its sources hold past its last committed batch" in text
    assert "1 change(s) SKIP records." in text
    with pytest.raises(DsflowError) as refused:
        check_data_loss(plan, Allowance())
    assert refused.value.code == "DSF-E822" and "~42 records" in refused.value.message
    assert f"--allow-destroy {FILTERED}" in (refused.value.hint or "")
    check_data_loss(plan, Allowance(addresses=frozenset({FILTERED})))
    check_data_loss(plan, Allowance(everything=True))
    check_all("forced_reset_checkpoint", plan)


def test_the_refresh_is_asked_what_a_replace_replays_and_what_a_reset_skips(deployed):
    root, state = deployed
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    resources = project_resources(project)
    asked = questions(resources, state, PlanOptions(replace=frozenset({FILTERED})), counting=False)
    assert set(asked.replays) == {FILTERED} and asked.replays[FILTERED][1] is None
    asked = questions(resources, state, PlanOptions(reset_checkpoint=frozenset({FILTERED})))
    assert set(asked.skipping) == {FILTERED} and not asked.replays
    assert not questions(resources, state, PlanOptions()), "nothing changed: nothing to measure"


def test_a_paused_query_is_left_stopped_neither_drift_nor_a_restart(deployed):
    root, state = deployed
    state = _paused(state, FILTERED)
    dead = Observation(address=FILTERED, healthy=False, detail="query process is not running")
    plan = plan_of(root, state, observations=Observations(resources={FILTERED: dead}))
    assert not plan.actionable and plan.paused == [FILTERED]
    [change] = [c for c in plan.changes if c.address == FILTERED]
    assert change.action is Action.NOOP and not change.drift
    line = f"Paused, left stopped on their checkpoints ('dsflow resume' starts them): {FILTERED}."
    assert line in plan_text(normalized(plan)) and line in plan_markdown(normalized(plan))

    edit(root, PIPELINES, "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    plan = plan_of(root, state)
    [change] = [c for c in plan.changes if c.address == FILTERED]
    assert change.action is Action.NOOP and "its change waits for it (select changed)" in change.reason
    check_all("forced_paused", plan)

    plan = plan_of(root, state, reset_checkpoint=frozenset({FILTERED}))
    [change] = plan.actionable
    assert change.category is Category.RESET_CHECKPOINT, "a paused query can be reset: apply starts it"
    assert plan.paused == [], "it is not left stopped"


def test_the_supervisor_leaves_a_paused_query_alone(deployed):
    from dsflow.runtime.supervisor import supervised

    _, state = deployed
    assert FILTERED in {r.address for r in supervised(state)}
    assert FILTERED not in {r.address for r in supervised(_paused(state, FILTERED))}


def test_forced_addresses_must_be_deployed_queries_named_once(tmp_path):
    from click.testing import CliRunner

    from dsflow.cli import cli
    from dsflow.engine import operations

    root = copy_example(tmp_path)
    loaded = operations.load(operations.Options(root, None, EXAMPLE_VARIABLES))
    for forced, code, words in [
            (operations.Forced(replace=frozenset({FILTERED})), "DSF-E828", "is not a deployed query"),
            (operations.Forced(reset_checkpoint=frozenset({FILTERED_SINK})), "DSF-E828", "is not a deployed query"),
            (operations.Forced(replace=frozenset({"query.analytics.curated.pageviews_filterd"})), "DSF-E024",
             "--replace")]:
        with pytest.raises(DsflowError) as err:
            operations.plan(loaded, do_refresh=False, forced=forced)
        assert err.value.code == code and words in err.value.message, err.value.message
    destroying = CliRunner().invoke(cli, ["-C", str(root), "plan", "--no-refresh", "--destroy", "--replace", FILTERED])
    assert destroying.exit_code == 2 and "not taken with --destroy" in destroying.output
    bare = CliRunner().invoke(cli, ["-C", str(root), "plan", "--no-refresh", "--reset-checkpoint", "filtered"])
    assert bare.exit_code == 2 and "is not an address" in bare.output


def test_pause_and_resume_name_a_deployed_query(tmp_path):
    from click.testing import CliRunner

    from dsflow.cli import cli

    root = copy_example(tmp_path)
    for command in ("pause", "resume"):
        done = CliRunner().invoke(cli, ["-C", str(root), command, "pageviews_filtered"])
        assert isinstance(done.exception, DsflowError) and done.exception.code == "DSF-E828", done.output
        assert f"{FILTERED} is not a deployed query" in done.exception.message
