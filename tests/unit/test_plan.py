"""The dependency graph and the planner: pure, from resources and a State built in memory."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from dsflow.core.address import Address, Kind
from dsflow.core.graph import Graph
from dsflow.core.plan import PlanOptions, Action, Observation, Observations, Plan, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, applied, copy_example

FILTERED_QUERY = "query.analytics.curated.pageviews_filtered"
ENRICHED_QUERY = "query.analytics.curated.pageviews_enriched"
ENRICHED_RELATION = "relation.analytics.curated.pageviews_enriched"
PAGEVIEWS = "relation.analytics.public.pageviews"


def rel(name: str) -> Address:
    return Address(Kind.RELATION, name)


def query(name: str) -> Address:
    return Address(Kind.QUERY, name)


# --- graph --------------------------------------------------------------------------------------------


def test_graph_order_puts_dependencies_first_and_breaks_ties_by_kind_then_name():
    store, schema = Address(Kind.STORE, "k"), Address(Kind.SCHEMA, "db.s")
    graph = Graph.from_dependencies({
        query("q"): [rel("b"), rel("a")],
        rel("b"): [store, schema],
        rel("a"): [store, schema],
        schema: [Address(Kind.DATABASE, "db")],
        Address(Kind.DATABASE, "db"): [],
        store: [],
    })
    assert [str(a) for a in graph.order()] == [
        "store.k", "database.db", "schema.db.s", "relation.a", "relation.b", "query.q"]
    assert graph.cycles() == []
    assert graph.roots() == [Address(Kind.DATABASE, "db"), store]  # sorted by address text
    assert graph.dependencies(query("q")) == [rel("a"), rel("b")]
    assert graph.dependents(store) == [rel("a"), rel("b")]
    assert graph.descendants(schema) == {rel("a"), rel("b"), query("q")}
    assert graph.descendants(query("unknown")) == set()


def test_graph_ignores_dependencies_outside_it():
    graph = Graph.from_dependencies({rel("a"): [Address(Kind.STORE, "elsewhere")]})
    assert graph.nodes == [rel("a")]
    assert graph.edges() == []


def test_graph_cycles_are_found_and_order_refuses_them():
    graph = Graph.from_dependencies({rel("a"): [rel("c")], rel("b"): [rel("a")], rel("c"): [rel("b")],
                                     rel("d"): [rel("a")]})
    assert graph.cycles() == [[rel("a"), rel("b"), rel("c")]]
    with pytest.raises(nx.NetworkXUnfeasible):
        graph.order()


def test_address_round_trips_through_text():
    address = Address.parse("relation.analytics.public.pageviews")
    assert address == rel("analytics.public.pageviews")
    assert str(address) == "relation.analytics.public.pageviews"


# --- planning the example project ---------------------------------------------------------------------


@pytest.fixture()
def example(tmp_path) -> Path:
    return copy_example(tmp_path)


def plan_of(root: Path, state: State | None = None, **kwargs) -> Plan:
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return make_plan(project.name, project.environment, project_resources(project), state or State(),
                     PlanOptions(**kwargs))


def edit(root: Path, path: str, old: str, new: str) -> None:
    file = root / path
    text = file.read_text()
    assert old in text, f"{old!r} not in {path}"
    file.write_text(text.replace(old, new))


def actions(plan: Plan) -> dict[str, Action]:
    return {c.address: c.action for c in plan.actionable}


def test_plan_from_empty_state_creates_everything_in_dependency_order(example):
    plan = plan_of(example)
    assert {c.action for c in plan.changes} == {Action.CREATE}
    assert len(plan.changes) == 17
    assert plan.summary() == {"create": 17, "update": 0, "replace": 0, "delete": 0}
    assert (plan.state_lineage, plan.state_serial) == ("", 0)
    position = {c.address: i for i, c in enumerate(plan.changes)}
    for change in plan.changes:
        for dependency in change.depends_on:
            assert position[dependency] < position[change.address], (dependency, change.address)
    assert plan.changes[0].address == "store.kafka_main"


def test_second_plan_after_apply_is_all_noop(example):
    state = applied(plan_of(example))
    assert state.lineage and state.serial == 17
    again = plan_of(example, state)
    assert not again.has_changes
    assert {c.action for c in again.changes} == {Action.NOOP}
    assert (again.state_lineage, again.state_serial) == (state.lineage, 17)


def test_editing_a_where_clause_changes_exactly_that_query_and_keeps_its_checkpoint(example):
    state = applied(plan_of(example))
    edit(example, "sql/pipelines.sql", "WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'")
    plan = plan_of(example, state)
    assert actions(plan) == {FILTERED_QUERY: Action.UPDATE}
    [change] = plan.actionable
    assert change.reason == "select changed"
    assert change.category == "keep_checkpoint"
    assert "same checkpoint" in change.effect
    assert "'Page_2'" in change.before["select"] and "'Page_3'" in change.after["select"]


def test_a_restart_says_a_crash_may_write_the_last_batch_again_only_for_a_stream_sink(example):
    """Issue 39, item 5: a stream sink is at-least-once (a crash, or a batch still running when the stop's wait
    ends, is written again on restart); a changelog's records are upserts by key, so its plan promises no more."""
    (example / "sql" / "copies.sql").write_text(
        "CREATE CHANGELOG curated.users_copy WITH ('trigger.interval' = '5 seconds') AS SELECT * FROM users;\n")
    state = applied(plan_of(example))
    edit(example, "sql/copies.sql", "'5 seconds'", "'10 seconds'")
    edit(example, "sql/pipelines.sql", "CREATE STREAM curated.pageviews_enriched AS",
         "CREATE STREAM curated.pageviews_enriched WITH ('trigger.interval' = '10 seconds') AS")
    changes = {c.address: c for c in plan_of(example, state).actionable}
    stream, changelog = changes[ENRICHED_QUERY], changes["query.analytics.curated.users_copy"]
    assert stream.category == changelog.category == "in_place"
    assert stream.effect.endswith("; a crash, or a micro-batch still running 30 s after the stop, may write the "
                                  "last batch again")
    assert changelog.effect == "restarted on the same checkpoint; resumes from its committed offsets"


def test_changing_trigger_interval_updates_in_place(example):
    state = applied(plan_of(example))
    edit(example, "sql/pipelines.sql", "CREATE STREAM curated.pageviews_enriched AS",
         "CREATE STREAM curated.pageviews_enriched WITH ('trigger.interval' = '10 seconds') AS")
    plan = plan_of(example, state)
    assert actions(plan) == {ENRICHED_QUERY: Action.UPDATE}
    [change] = plan.actionable
    assert change.reason == "trigger_interval changed (in place)"
    assert change.after_metadata["trigger_interval"] == "10 seconds"
    assert "same checkpoint" in change.effect


@pytest.mark.parametrize("old, new, setting", [
    ("'timestamp' = 'viewtime',", "'timestamp' = 'id',", "timestamp"),
    ("'timestamp' = 'viewtime',", "'timestamp' = 'viewtime', 'key.format' = 'string',", "key.format"),
    ("'timestamp' = 'viewtime',", "'timestamp' = 'viewtime', 'topic.gaps' = 'count',", "topic.gaps"),
])
def test_a_source_setting_a_running_query_applies_restarts_every_reader(example, old: str, new: str, setting: str):
    """key.format, the event-time column and 'topic.gaps' change what a running query does: its readers restart
    (on their checkpoints) with the relation's in-place update, never the relation alone."""
    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", old, new)
    plan = plan_of(example, state)
    found = actions(plan)
    assert {k: found[k] for k in (PAGEVIEWS, FILTERED_QUERY, ENRICHED_QUERY)} == \
        {PAGEVIEWS: Action.UPDATE, FILTERED_QUERY: Action.UPDATE, ENRICHED_QUERY: Action.UPDATE}
    assert set(found.values()) == {Action.UPDATE}, "an in-place setting replaced something"
    for change in plan.actionable:
        if change.address.startswith("query."):
            assert f"'{setting}' of relation analytics.public.pageviews" in change.reason  # and of sinks inheriting it
            assert change.reason.endswith(" changed (in place)")
            assert "same checkpoint" in change.effect


def test_adding_a_column_at_the_end_is_in_place_and_replaces_nothing(example):
    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", "  pageid VARCHAR\n", "  pageid VARCHAR,\n  referrer VARCHAR\n")
    plan = plan_of(example, state)
    assert actions(plan) == {PAGEVIEWS: Action.UPDATE}
    [change] = plan.actionable
    assert change.reason == "column(s) referrer added (in place, compatible under BACKWARD)"
    assert change.destroys is None and "its records kept" in change.effect


USERS = "relation.analytics.public.users"


def test_dropping_a_column_is_compatible_under_backward_and_updates_in_place(example):
    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", "  gender VARCHAR,\n", "")
    plan = plan_of(example, state)
    assert actions(plan) == {USERS: Action.UPDATE}
    [change] = plan.actionable
    assert change.reason == "column(s) gender dropped (in place, compatible under BACKWARD)"
    assert change.destroys is None and "topic kafka_main/users and its records kept" in change.effect


@pytest.mark.parametrize("rule, action, reason", [
    (None, Action.REPLACE, "column registertime retyped BIGINT -> INT: incompatible under BACKWARD "
                           "(forces replacement)"),
    ("FULL", Action.REPLACE, "column registertime retyped BIGINT -> INT: incompatible under FULL "
                             "(forces replacement)"),
    ("FORWARD", Action.UPDATE, "column(s) registertime retyped BIGINT -> INT (in place, compatible under FORWARD)"),
])
def test_a_retyped_column_is_in_place_or_replaces_as_the_relation_rule_says(example, rule, action, reason):
    """BIGINT -> INT narrows: a reader on the new schema cannot read old data (BACKWARD), one on the old schema
    reads new data (FORWARD)."""
    if rule:
        edit(example, "sql/sources.sql", "'topic' = 'users',",
             f"'topic' = 'users', 'value.schema.compatibility' = '{rule}',")
    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", "registertime BIGINT", "registertime INT")
    plan = plan_of(example, state)
    change = next(c for c in plan.actionable if c.address == USERS)
    assert (change.action, change.reason) == (action, reason)
    assert (change.destroys is not None) == (action is Action.REPLACE)
    assert (len(plan.actionable) == 1) == (action is Action.UPDATE), "an in-place change replaced a reader"


def test_changing_the_compatibility_rule_alone_is_an_in_place_update(example):
    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", "'topic' = 'users',",
         "'topic' = 'users', 'value.schema.compatibility' = 'full',")
    [change] = plan_of(example, state).actionable
    assert (change.address, change.action) == (USERS, Action.UPDATE)
    assert change.reason == "schema_compatibility changed (in place)"


def test_changing_source_columns_replaces_the_relation_and_everything_reading_it(example):
    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", "  userid VARCHAR,\n  pageid VARCHAR\n",
         "  pageid VARCHAR,\n  userid VARCHAR\n")  # not an addition at the end
    plan = plan_of(example, state)
    assert actions(plan) == {
        PAGEVIEWS: Action.REPLACE,
        FILTERED_QUERY: Action.REPLACE,
        ENRICHED_QUERY: Action.REPLACE,
        "datagen.pageviews_feed": Action.REPLACE,
    }
    by_address = {c.address: c for c in plan.changes}
    assert by_address[PAGEVIEWS].reason == "columns changed (forces replacement)", "a new order is no evolution"
    assert by_address[FILTERED_QUERY].reason == f"upstream {PAGEVIEWS} is replaced"
    order = [c.address for c in plan.actionable]
    assert order.index(PAGEVIEWS) < order.index(FILTERED_QUERY)
    assert order.index(PAGEVIEWS) < order.index(ENRICHED_QUERY)


def test_removing_a_relation_and_its_query_deletes_query_first(example):
    state = applied(plan_of(example))
    sql = example / "sql" / "pipelines.sql"
    text = sql.read_text()
    sql.write_text(text[: text.index("CREATE STREAM curated.pageviews_enriched")])
    plan = plan_of(example, state)
    assert [(c.address, c.action) for c in plan.actionable] == [
        (ENRICHED_QUERY, Action.DELETE), (ENRICHED_RELATION, Action.DELETE)]
    assert plan.actionable[0].before["sink"] == "analytics.curated.pageviews_enriched"
    assert plan.actionable[1].effect == "topic deleted if dsflow created it"
    assert plan.actionable[1].physical == "topic kafka_main/pageviews_enriched"
    assert plan.actionable[1].affected == [ENRICHED_QUERY], "a delete lists the queries it affects"
    assert plan.actionable[1].destroys is not None, "the topic dsflow created holds records: the plan says so"
    assert plan.changes[:2] == plan.actionable  # deletes come before every other change


def test_destroy_deletes_everything_dependents_first(example):
    state = applied(plan_of(example))
    plan = plan_of(example, state, destroy=True)
    assert {c.action for c in plan.changes} == {Action.DELETE}
    assert {c.address for c in plan.changes} == set(state.resources)
    position = {c.address: i for i, c in enumerate(plan.changes)}
    for change in plan.changes:
        for dependency in change.depends_on:
            assert position[change.address] < position[dependency], (change.address, dependency)
    assert plan.changes[-1].address in ("store.kafka_main", "database.analytics")
    assert not plan_of(example, applied(plan, state), destroy=True).has_changes


def test_unhealthy_observation_is_drift_and_updates_in_place(example):
    state = applied(plan_of(example))
    seen = {FILTERED_QUERY: Observation(address=FILTERED_QUERY, healthy=False, detail="driver process not running"),
            ENRICHED_QUERY: Observation(address=ENRICHED_QUERY, healthy=True)}
    plan = plan_of(example, state, observations=Observations(resources=seen))
    assert actions(plan) == {FILTERED_QUERY: Action.UPDATE}
    [change] = plan.actionable
    assert change.drift is True
    assert change.reason == "drift: driver process not running"
    assert "resumes from its committed offsets" in change.effect


def test_plan_json_round_trips(example):
    plan = plan_of(example)
    assert Plan.model_validate_json(plan.model_dump_json()) == plan


def test_lowering_a_topics_partitions_is_a_clear_error(example):
    from dsflow.core.safety import check_partitions
    from dsflow.errors import DsflowError

    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", "'topic.partitions' = 2,", "'topic.partitions' = 1,")
    with pytest.raises(DsflowError) as lowered:
        check_partitions(plan_of(example, state))
    assert lowered.value.code == "DSF-E825" and "relation.analytics.public.pageviews (2 -> 1)" in str(lowered.value)
    edit(example, "sql/sources.sql", "'topic.partitions' = 1,", "'topic.partitions' = 3,")
    check_partitions(plan_of(example, state))  # raising is planned (a replacement on the embedded broker)


def test_a_changelog_key_format_change_replaces_it(example):
    """A stream's key.format is in place (its readers restart: tests/unit/test_settings.py); a changelog's keys identify
    its rows, so another key encoding replaces it (rows under the old keys would never be superseded)."""
    state = applied(plan_of(example))
    edit(example, "sql/sources.sql", "'topic' = 'users',", "'topic' = 'users', 'key.format' = 'string',")
    plan = plan_of(example, state)
    assert actions(plan) == {USERS: Action.REPLACE, "datagen.users_feed": Action.REPLACE}
    change = next(c for c in plan.actionable if c.address == USERS)
    assert "'key.format' of a changelog changed" in change.reason and change.destroys is not None


def test_raising_a_sources_partitions_keeps_the_topics_sized_from_it(example):
    # defect 3 of issue 20: a topic sized from its source keeps the size it was created with; only the source changes
    state = applied(plan_of(example))
    enriched = rel("analytics.curated.pageviews_enriched")
    assert state.resources[str(enriched)].data["partitions"] == 2  # inferred from pageviews at creation
    edit(example, "sql/sources.sql", "'topic.partitions' = 2,", "'topic.partitions' = 4,")
    plan = plan_of(example, state)
    assert actions(plan)[str(rel("analytics.public.pageviews"))] is Action.REPLACE  # no CreatePartitions here
    assert str(enriched) not in actions(plan)
    assert [c for c in plan.changes if c.address == str(enriched)][0].after["partitions"] == 2


def test_a_replaced_topic_sized_from_its_source_takes_the_size_the_source_has_now(example):
    state = applied(plan_of(example))
    enriched = str(rel("analytics.curated.pageviews_enriched"))
    edit(example, "sql/sources.sql", "'topic.partitions' = 2,", "'topic.partitions' = 4,")
    state = applied(plan_of(example, state), state)
    edit(example, "sql/pipelines.sql", "UPPER(userid) AS user_upper,", "LENGTH(userid) AS user_upper,")
    [change] = [c for c in plan_of(example, state).changes if c.address == enriched]
    assert change.action is Action.REPLACE and change.before["partitions"] == 2 and change.after["partitions"] == 4


def test_a_stream_grows_in_place_where_its_store_can_add_partitions(example):
    # a pure test of the plan's decision: whether the store can grow the topic is asked of the live broker in
    # refresh (engine/refresh.py observe); the embedded broker cannot (tests/e2e/test_data_loss.py), so there it is
    # a replacement
    state = applied(plan_of(example))
    source = str(rel("analytics.public.pageviews"))
    edit(example, "sql/sources.sql", "'topic.partitions' = 2,", "'topic.partitions' = 4,")
    plan = plan_of(example, state, observations=Observations(growable=[source]), store_types={"kafka_main": "kafka"})
    assert actions(plan) == {source: Action.UPDATE}, "the topic is kept: nothing reading it is replaced or replays"
    [change] = plan.actionable
    assert change.reason == "partitions raised 2 -> 4 (in place: partitions added)"
    assert change.effect.startswith("kafka topic kafka_main/pageviews and its records kept")
    assert change.destroys is None


def test_a_changelog_is_replaced_even_where_partitions_could_be_added(example):
    state = applied(plan_of(example))
    users = str(rel("analytics.public.users"))
    edit(example, "sql/sources.sql", "'topic.partitions' = 1\n", "'topic.partitions' = 3\n")
    plan = plan_of(example, state, observations=Observations(growable=[users]))
    assert actions(plan)[users] is Action.REPLACE  # its keys would move partitions: older rows could outlive newer


def test_a_new_relation_over_a_log_that_exists_is_adopted_with_its_size(example):
    """Issue 40, item 3, the planner's part (against live logs: tests/e2e/test_existing_logs.py): a refresh saw the logs
    of relations not yet deployed. An undeclared size is the log's own, kept once deployed (also when the relation
    is replaced: dsflow never deletes a log it adopted); a declared size that differs is a conflict; a log that does
    not exist is created with its size; without a refresh the plan cannot say."""
    from dsflow.core.plan import size_conflicts
    from dsflow.core.state import DeployedResource

    edit(example, "sql/sources.sql", "'value.format' = 'json',\n  'topic.partitions' = 1", "'value.format' = 'json'")
    seen = {USERS: Observation(address=USERS, healthy=True, detail="kafka topic kafka_main/users exists with 3 "
                               "partitions", size=3),
            PAGEVIEWS: Observation(address=PAGEVIEWS, healthy=True, detail="kafka topic kafka_main/pageviews does "
                                   "not exist")}
    kinds = {"kafka_main": "kafka"}
    plan = plan_of(example, observations=Observations(resources=seen), store_types=kinds)
    changes = {c.address: c for c in plan.changes}
    assert (changes[USERS].action, changes[USERS].after["partitions"]) == (Action.CREATE, 3)
    assert changes[USERS].effect.startswith("topic adopted as it is (3 partitions): its records are kept")
    assert changes[USERS].physical == "kafka topic kafka_main/users"
    assert changes[USERS].observed == seen[USERS].detail
    assert changes[PAGEVIEWS].effect == "topic created with 2 partitions"
    assert size_conflicts(plan, seen) == []
    unseen = {c.address: c for c in plan_of(example).changes}[USERS]
    assert (unseen.effect, unseen.after["partitions"]) == ("topic created unless it already exists", 1)  # no refresh

    state = applied(plan)
    assert actions(plan_of(example, state)) == {}  # planned again: the adopted size is kept, nothing replaced
    adopted = state.resources[USERS].model_copy(update={"outputs": {"created_by_dsflow": False}})
    state = state.with_resource(adopted)
    edit(example, "sql/sources.sql", "PRIMARY KEY (userid)", "PRIMARY KEY (userid, regionid)")
    [replaced] = [c for c in plan_of(example, state).actionable if c.address == USERS]
    assert replaced.action is Action.REPLACE and replaced.after["partitions"] == 3  # the adopted log is kept
    state = state.with_resource(DeployedResource(**{**adopted.model_dump(), "outputs": {}}))
    [replaced] = [c for c in plan_of(example, state).actionable if c.address == USERS]
    assert replaced.after["partitions"] == 1  # a log dsflow created is deleted: the new one takes the size now

    differs = {PAGEVIEWS: Observation(address=PAGEVIEWS, healthy=True, detail="exists", size=3)}
    conflicts = size_conflicts(plan_of(example, observations=Observations(resources=differs)))
    assert [c.address for c in conflicts] == [PAGEVIEWS]
