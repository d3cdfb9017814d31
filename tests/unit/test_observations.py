"""Observe once, plan once (issue 41, item 1): what a refresh asks is derived from the project and the state alone
(core/observing.py), and the planner is a pure function of (project, state, observations). Recorded observations are
replayed into the planner here without any broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsflow.core.observing import questions
from dsflow.core.plan import Action, Observations, Plan, PlanOptions, make_plan
from dsflow.core.plan_schema import plan_from_json
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, applied, copy_example

PAGEVIEWS = "relation.analytics.public.pageviews"
USERS = "relation.analytics.public.users"
FILTERED = "query.analytics.curated.pageviews_filtered"
ENRICHED = "query.analytics.curated.pageviews_enriched"
FILTERED_RELATION = "relation.analytics.curated.pageviews_filtered"
FILTER_HEAD = "CREATE STREAM curated.pageviews_filtered WITH ('topic.partitions' = 1) AS"
KINDS = {"kafka_main": "kafka"}

# What a refresh of the example project recorded (trimmed): the source topic can grow in place, a replay of the
# filtering query would re-read 120,000 records, the source topic holds 5,000.
RECORDED = """{
  "refreshed": true,
  "observed_at": "2026-11-29T12:00:00+00:00",
  "resources": {
    "query.analytics.curated.pageviews_filtered": {"address": "query.analytics.curated.pageviews_filtered",
                                                   "healthy": true, "detail": "running", "size": null}
  },
  "log_sizes": {"relation.analytics.public.pageviews": 2},
  "growable": ["relation.analytics.public.pageviews"],
  "estimates": {"query.analytics.curated.pageviews_filtered": {"records": 120000, "rate_per_second": 2000.0,
                                                               "seconds": 60.0}},
  "record_counts": {"relation.analytics.public.pageviews": 5000},
  "foreign_logs": {},
  "schema_refusals": {}
}"""


@pytest.fixture()
def deployed(tmp_path) -> tuple[Path, State]:
    root = copy_example(tmp_path)
    return root, applied(plan_of(root, State()))


def plan_of(root: Path, state: State, observations: Observations | None = None, **options) -> Plan:
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return make_plan(project.name, project.environment, project_resources(project), state,
                     PlanOptions(observations=observations or Observations(), store_types=KINDS, **options))


def asked(root: Path, state: State, counting: bool = True, **options):
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return questions(project_resources(project), state, PlanOptions(**options), counting)


def edit(root: Path, path: str, old: str, new: str) -> None:
    file = root / path
    assert old in file.read_text()
    file.write_text(file.read_text().replace(old, new))


def test_recorded_observations_round_trip_through_json():
    recorded = Observations.model_validate_json(RECORDED)
    assert Observations.model_validate_json(recorded.model_dump_json()) == recorded
    assert recorded.growable == [PAGEVIEWS] and recorded.estimates[FILTERED].records == 120_000


def test_a_recorded_observation_decides_growth_in_place_and_shows_the_replay_estimate(deployed):
    root, state = deployed
    edit(root, "sql/sources.sql", "'topic.partitions' = 2,", "'topic.partitions' = 4,")
    edit(root, "sql/pipelines.sql", FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'start.position' = 'earliest')"))
    recorded = Observations.model_validate_json(RECORDED)
    plan = plan_of(root, state, recorded)
    changes = {c.address: c for c in plan.actionable}
    assert changes[PAGEVIEWS].action is Action.UPDATE  # grown in place, as the store said it can
    assert changes[PAGEVIEWS].reason == "partitions raised 2 -> 4 (in place: partitions added)"
    assert changes[FILTERED].category.value == "replay"
    assert changes[FILTERED].estimate == recorded.estimates[FILTERED]  # its source is kept: the estimate holds
    assert ENRICHED not in changes, "a grown source replaces nothing that reads it"
    assert plan.observations == recorded, "the plan carries what it was made from"
    saved = plan_from_json(plan.model_dump_json(), "plan.json")
    assert saved.observations == recorded and saved == plan


def test_without_growth_the_source_is_rebuilt_and_no_estimate_is_shown(deployed):
    """The same facts but a store that cannot grow the topic: it is replaced, so what a replay re-reads is not known
    yet (the topic is rebuilt first), and the estimate measured on the old topic is not shown."""
    root, state = deployed
    edit(root, "sql/sources.sql", "'topic.partitions' = 2,", "'topic.partitions' = 4,")
    edit(root, "sql/pipelines.sql", FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'start.position' = 'earliest')"))
    recorded = Observations.model_validate_json(RECORDED).model_copy(update={"growable": []})
    changes = {c.address: c for c in plan_of(root, state, recorded).actionable}
    assert changes[PAGEVIEWS].action is Action.REPLACE
    assert changes[PAGEVIEWS].destroys.records == 5000  # the record count the refresh took
    assert changes[FILTERED].category.value == "replay" and changes[FILTERED].estimate is None


def test_a_destroy_shows_the_recorded_record_counts(deployed):
    root, state = deployed
    recorded = Observations(record_counts={PAGEVIEWS: 5000})
    changes = {c.address: c for c in plan_of(root, state, recorded, destroy=True).actionable}
    assert changes[PAGEVIEWS].action is Action.DELETE and changes[PAGEVIEWS].destroys.records == 5000
    assert changes[USERS].destroys.records is None  # not counted: the plan says so rather than guess


def test_questions_of_an_unchanged_project_are_none(deployed):
    root, state = deployed
    assert not asked(root, state)
    assert not asked(root, State()), "nothing deployed: nothing to measure"


def test_questions_cover_growth_replays_and_counts_downstream_of_a_change(deployed):
    root, state = deployed
    edit(root, "sql/sources.sql", "'topic.partitions' = 2,", "'topic.partitions' = 4,")
    found = asked(root, state)
    assert {k: total for k, (_, total) in found.growing.items()} == {PAGEVIEWS: 4}
    assert found.growing[PAGEVIEWS][0]["partitions"] == 2  # the deployed data: the store is asked about its topic
    assert set(found.replays) == {FILTERED, ENRICHED}  # everything reading it may replay if it is replaced
    assert {since for _, since in found.replays.values()} == {None}
    assert PAGEVIEWS in found.counted and USERS not in found.counted
    assert not found.carried, "no query recorded its source logs' identities"
    bare = asked(root, state, counting=False)  # --no-refresh: replay estimates only
    assert set(bare.replays) == {FILTERED, ENRICHED} and not bare.counted and not bare.carried


def test_questions_take_a_replays_start_and_count_what_leaves_the_project(deployed):
    root, state = deployed
    edit(root, "sql/pipelines.sql", FILTER_HEAD, FILTER_HEAD.replace("= 1)", "= 1, 'start.position' = '1700')"))
    found = asked(root, state)
    assert found.replays[FILTERED][1] == "1700"
    assert set(found.replays) == {FILTERED}
    everything = asked(root, state, destroy=True)
    assert PAGEVIEWS in everything.counted and FILTERED_RELATION in everything.counted
    assert not everything.replays and not everything.growing
    logs = {"main/pageviews": "id-1"}
    entry = state.resources[FILTERED].model_copy(update={"outputs": {"logs": logs}})
    carried = asked(root, state.model_copy(update={"resources": {**state.resources, FILTERED: entry}}))
    assert set(carried.carried) == {FILTERED}
