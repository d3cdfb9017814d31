"""Blue/green replays in the plan (issue 44, item 1): pure, from the example project and a State built in memory.
The apply side runs against Apache Kafka and Spark in tests/e2e/test_bluegreen.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dsflow.cli.render import plan_text
from dsflow.core.bluegreen import (PHASES, Deployment, compared, in_micro_batches, interrupted, phase_text, reached,
                                   redirected, redirects)
from dsflow.core.plan import Action, Observation, Observations, Plan, PlanOptions, make_plan
from dsflow.core.plan_schema import plan_from_json
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.errors import ProjectError
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, applied, copy_example

QUERY = "query.analytics.curated.pageviews_filtered"
SINK = "relation.analytics.curated.pageviews_filtered"
READER = "query.analytics.curated.filtered_ids"
HEAD = "CREATE STREAM curated.pageviews_filtered WITH ('topic.partitions' = 1"
READS_IT = "CREATE STREAM curated.filtered_ids AS SELECT id, pageid FROM curated.pageviews_filtered;\n"


@pytest.fixture()
def example(tmp_path) -> Path:
    root = copy_example(tmp_path)
    (root / "sql" / "readers.sql").write_text(READS_IT)
    return root


def plan_of(root: Path, state: State | None = None, **kwargs) -> Plan:
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return make_plan(project.name, project.environment, project_resources(project), state or State(),
                     PlanOptions(store_types={s.name: s.type for s in project.stores}, **kwargs))


def replay(root: Path, props: str = "") -> None:
    """The query asked to replay ('start.position' = 'earliest'), with more properties on its relation."""
    sql = root / "sql" / "pipelines.sql"
    sql.write_text(sql.read_text().replace(HEAD, f"{HEAD}, 'start.position' = 'earliest'{props}"))


def change_of(plan: Plan, address: str):
    return next(c for c in plan.changes if c.address == address)


def test_a_replay_asked_blue_green_names_its_new_log_readers_consumers_and_phases(example):
    state = applied(plan_of(example))
    replay(example)
    seen = Observations(consumer_groups={SINK: ["billing-app"]})
    plain = change_of(plan_of(example, state, observations=seen), QUERY)
    assert plain.category == "replay" and plain.blue_green is None
    plan = plan_of(example, state, observations=seen, blue_green=True, catch_up_seconds=90)
    change = change_of(plan, QUERY)
    assert change.action is Action.REPLACE and change.category == "replay"
    bg = change.blue_green
    assert bg is not None and bg.sink == SINK and bg.version == 2 and bg.catch_up_seconds == 90
    declared = change.after and state.resources[SINK].data["topic"]
    assert (bg.old_log, bg.new_log) == (declared, f"{declared}_v2")
    assert bg.readers == [READER] and bg.consumers == ["billing-app"]
    assert bg.phases == ["build", "catch_up", "compare", "switch", "keep_old"]
    assert change.effect is not None and change.effect.startswith("blue/green:")
    assert change_of(plan, READER).action is Action.NOOP, "a reader's switch is part of the query's change"
    assert plan_from_json(plan.model_dump_json(), "plan.json") == plan


def test_deploy_blue_green_on_the_relation_asks_for_it_without_the_flag(example):
    state = applied(plan_of(example))
    sql = example / "sql" / "pipelines.sql"
    declared = sql.read_text()
    replay(example, ", 'deploy' = 'blue_green'")
    plan = plan_of(example, state)
    assert change_of(plan, SINK).action is Action.UPDATE, "the property itself is metadata, in place"
    assert change_of(plan, QUERY).blue_green is None, "its relation changes in this plan: not blue/green yet"
    sql.write_text(declared.replace(HEAD, f"{HEAD}, 'deploy' = 'blue_green'"))
    state = applied(plan_of(example), state)
    replay(example)
    assert change_of(plan_of(example, state), QUERY).blue_green is not None


def test_what_is_not_a_replay_or_not_a_log_is_never_blue_green(example):
    state = applied(plan_of(example))
    sql = example / "sql" / "pipelines.sql"
    sql.write_text(sql.read_text().replace("WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'"))
    plan = plan_of(example, state, blue_green=True)
    assert change_of(plan, QUERY).category == "keep_checkpoint" and change_of(plan, QUERY).blue_green is None


def test_the_next_deployment_takes_the_next_version_after_a_switch_or_a_failure(example):
    state = applied(plan_of(example))
    sink = state.resources[SINK]
    topic = sink.data["topic"]
    moved = state.with_resource(sink.model_copy(update={"outputs": {"topic": f"{topic}_v2", "blue_green": {
        "version": 2, "previous": topic}}}))
    replay(example)
    bg = change_of(plan_of(example, moved, blue_green=True), QUERY).blue_green
    assert bg is not None and (bg.old_log, bg.new_log, bg.version) == (f"{topic}_v2", f"{topic}_v3", 3)
    failed = Deployment(query=QUERY, sink=SINK, version=3, old_log=f"{topic}_v2", new_log=f"{topic}_v3",
                        phase="failed", started_at="t", updated_at="t", error="DSF-E961: ...")
    bg = change_of(plan_of(example, moved.with_deployment(failed), blue_green=True), QUERY).blue_green
    assert bg is not None and bg.version == 4, "a failed attempt's log may still be being deleted"
    assert redirects(moved.resources) == {"analytics.curated.pageviews_filtered": f"{topic}_v2"}
    project = load_project(example, variables=EXAMPLE_VARIABLES)
    assert redirected(project, redirects(moved.resources)).relation(
        "analytics.curated.pageviews_filtered").topic == f"{topic}_v2"
    assert redirected(project, {}) is project


def test_a_wrong_deploy_value_is_an_error_at_its_line(example):
    replay(example, ", 'deploy' = 'purple'")
    with pytest.raises(ProjectError) as raised:
        load_project(example, variables=EXAMPLE_VARIABLES)
    assert "DSF-E032" in str(raised.value) and "'deploy' must be one of blue_green, in_place" in str(raised.value)


def test_a_cut_is_reached_by_every_partition_and_compare_counts_records_only_in_one_log():
    assert reached({"s": {"0": 7, "1": 9}}, {"s": {"0": 7, "1": 9}})
    assert not reached({"s": {"0": 7}}, {"s": {"0": 7, "1": 1}}) and not reached(None, {"s": {"0": 1}})
    assert compared([("a", "1"), ("b", "2"), ("b", "2")], [("a", "1"), ("b", "3")]) == {
        "old_records": 3, "new_records": 2, "only_old": 2, "only_new": 1}


def test_a_kept_old_version_is_removed_by_the_next_apply_or_once_its_retention_passed(example):
    state = applied(plan_of(example))
    topic = state.resources[SINK].data["topic"]
    switched = Deployment(query=QUERY, sink=SINK, version=2, old_log=topic, new_log=f"{topic}_v2", phase="keep_old",
                          started_at="2026-11-30T08:00:00+00:00", updated_at="2026-11-30T08:00:00+00:00",
                          kept={"log": topic, "checkpoint": "/cp/old", "store": "kafka_main", "kind": "stream",
                                "created_by_dsflow": "true"})
    state = state.with_deployment(switched)
    now = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
    plan = plan_of(example, state, now=now)
    assert [(r.query, r.log, r.checkpoint) for r in plan.retired] == [(QUERY, topic, "/cp/old")]
    assert plan.has_changes and not plan.actionable, "only the removal: apply runs it"
    assert f"  - old version of {QUERY}: log {topic} deleted, checkpoint removed" in plan_text(
        plan.model_dump(mode="json"))
    sql = example / "sql" / "pipelines.sql"
    sql.write_text(sql.read_text().replace(HEAD, f"{HEAD}, 'deploy.retention' = '2 hours'"))
    assert plan_of(example, state, now=now).retired == [], "kept 2 hours after the switch"
    assert [r.reason for r in plan_of(example, state, now=now + timedelta(hours=1)).retired] == [
        "'deploy.retention' passed (switched at 2026-11-30T08:00:00+00:00)"]
    assert len(plan_of(example, state, now=now, destroy=True).retired) == 1, "a destroy removes it in any case"
    assert plan_of(example, state, now=now, targets=frozenset({READER})).retired == []
    done = state.with_deployment(switched.model_copy(update={"kept": {}}))
    assert plan_of(example, done, now=now).retired == []


TABLES_STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: 127.0.0.1:9092
  - name: pg
    type: postgresql
    properties: {host: 127.0.0.1, port: 5432, user: postgres, database: shop}
  - name: lake
    type: filesystem
    properties: {path: lake}
"""
TABLES_SQL = """\
CREATE STREAM events (id BIGINT, v BIGINT) WITH ('value.format' = 'json');
CREATE TABLE scaled WITH ('store' = 'pg'{start}) AS SELECT id, v * 2 AS w FROM events;
CREATE MATERIALIZED VIEW totals WITH ('store' = 'pg'{start}) AS SELECT id % 5 AS g, SUM(v) AS s FROM events
  GROUP BY id % 5;
CREATE TABLE archived WITH ('store' = 'lake'{start}) AS SELECT id, v FROM events;
"""


def test_a_postgres_table_or_view_switches_by_renames_and_a_delta_table_moves_to_its_new_path(tmp_path):
    from support.projects import make_project
    from support.streaming import CONFIG

    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix="t_"), "stores/kafka.yml": TABLES_STORES,
                                   "sql/all.sql": TABLES_SQL.format(start="")})
    state = applied(plan_of(root))
    (root / "sql" / "all.sql").write_text(TABLES_SQL.format(start=", 'start.position' = 'earliest'"))
    plan = plan_of(root, state, blue_green=True)
    table = change_of(plan, "query.analytics.public.scaled").blue_green
    assert table is not None and (table.old_log, table.new_log, table.kept_as) == (
        "shop.public.scaled", "shop.public.scaled_v2", "shop.public.scaled_v1")
    view = change_of(plan, "query.analytics.public.totals").blue_green
    assert view is not None and (view.old_log, view.new_log, view.kept_as) == ("totals", "totals_v2", "totals_v1")
    lake = change_of(plan, "query.analytics.public.archived").blue_green
    assert lake is not None and (lake.old_log, lake.new_log, lake.kept_as, lake.relocate) == (
        "archived", "archived_v2", None, True), "a Delta path has no catalog: the relation moves to the new path"
    text = plan_text(plan.model_dump(mode="json"))
    assert "switch: the relation's table moves to archived_v2 in one state write" in text
    assert "switch: one transaction of renames: shop.public.scaled -> shop.public.scaled_v1, shop.public.scaled_v2 " \
        "-> shop.public.scaled; views over shop.public.scaled defined again on the new table" in text
    assert plan_from_json(plan.model_dump_json(), "plan.json") == plan
    switched = state.with_resource(state.resources["relation.analytics.public.scaled"].model_copy(
        update={"outputs": {**state.resources["relation.analytics.public.scaled"].outputs,
                            "blue_green": {"version": 2, "previous": "shop.public.scaled_v1"}}}))
    again = change_of(plan_of(root, switched, blue_green=True), "query.analytics.public.scaled").blue_green
    assert again is not None and (again.old_log, again.new_log, again.kept_as) == (
        "shop.public.scaled", "shop.public.scaled_v3", "shop.public.scaled_v2"), "production keeps its name"
    assert redirects(switched.resources) == {}, "nothing reads a table by a moved name"


def test_a_deployment_an_apply_was_killed_in_is_resumed_or_rolled_back_and_the_plan_says_which(example):
    from dsflow.core.state import PendingChange

    state = applied(plan_of(example))
    replay(example)
    first = change_of(plan_of(example, state, blue_green=True), QUERY)

    def killed(phase: str, data_hash: str | None) -> State:
        intent = {"blue_green": {"phase": phase, "version": 2, "new_log": first.blue_green.new_log},
                  "blue_green_run": {"plan": first.blue_green.model_dump(mode="json"), "run_dir": "r",
                                     "checkpoint": "c", "data_hash": data_hash, "log": None}}
        return state.with_pending(PendingChange(address=QUERY, action="replace", intent=intent))

    resumed = change_of(plan_of(example, killed("catch_up", first.data_hash), blue_green=True), QUERY).blue_green
    assert resumed is not None and resumed.version == 2 and resumed.interrupted.action == "resume"
    text = plan_text(plan_of(example, killed("catch_up", first.data_hash), blue_green=True).model_dump(mode="json"))
    assert "interrupted: an apply was killed during the blue/green deployment v2 (catch_up): it resumes" in text
    for phase, data_hash in (("compare", first.data_hash), ("catch_up", "other sql")):
        back = change_of(plan_of(example, killed(phase, data_hash), blue_green=True), QUERY).blue_green
        assert back.interrupted.action == "roll back" and back.version == 3, "a rolled back version is not taken"
    refused = change_of(plan_of(example, killed("switch", first.data_hash), blue_green=True), QUERY).blue_green
    assert refused.interrupted.action == "refuse"
    assert "DSF-E966" in plan_text(plan_of(example, killed("switch", first.data_hash), blue_green=True).model_dump(
        mode="json"))
    plain = change_of(plan_of(example, killed("compare", first.data_hash)), QUERY)
    assert plain.blue_green is None and "rolled back first" in plain.effect
    assert "deployed version started again" in plain.effect
    assert change_of(plan_of(example, state, blue_green=True), QUERY).blue_green.interrupted is None


def test_a_lake_table_read_as_a_stream_by_a_query_of_the_project_moves_its_readers_unless_its_format_cannot_say(
        tmp_path, monkeypatch):
    from dsflow.adapters.tables.delta import DeltaFormat
    from dsflow.core.bluegreen import Interrupted, interrupted_text, phase_text
    from dsflow.engine.bluegreen_lake import check_readers
    from dsflow.errors import DsflowError
    from support.projects import make_project
    from support.streaming import CONFIG

    reader = "CREATE STREAM archived_copy AS SELECT id, v FROM archived;\n"
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix="t_"), "stores/kafka.yml": TABLES_STORES,
                                   "sql/all.sql": TABLES_SQL.format(start="") + reader})
    state = applied(plan_of(root))
    (root / "sql" / "all.sql").write_text(TABLES_SQL.format(start=", 'start.position' = 'earliest'") + reader)
    lake = change_of(plan_of(root, state, blue_green=True), "query.analytics.public.archived").blue_green
    assert lake is not None and lake.readers == ["query.analytics.public.archived_copy"]
    check_readers(load_project(root, variables=EXAMPLE_VARIABLES), lake)  # Delta says a reader's position
    switch = next(p for p in phase_text(lake) if p.startswith("switch:"))
    assert "readers (query.analytics.public.archived_copy) read archived to its end, then restart on " \
           "archived_v2 right after its version (snapshot) at the cut" in switch
    forward = interrupted_text(Interrupted(version=2, phase="switch", action="roll forward"), lake)
    assert "readers not yet on archived_v2 are switched as the switch does" in forward
    monkeypatch.delattr(DeltaFormat, "position")  # a format that cannot say where a reader stands
    with pytest.raises(DsflowError) as err:
        check_readers(load_project(root, variables=EXAMPLE_VARIABLES), lake)
    assert err.value.code == "DSF-E965" and "archived_copy" in err.value.message
    check_readers(load_project(root, variables=EXAMPLE_VARIABLES), lake.model_copy(update={"readers": []}))
    from dsflow.engine.bluegreen_lake import reached

    assert reached({"t": {"version": 7}}, {"t": {"version": 6}}) and not reached({"t": {"version": 5}}, {"t": {
        "version": 6}}), "a table version is reached at or past it"
    assert not reached({"t": {"snapshot": 9}}, {"t": {"snapshot": 4}}), "snapshot ids are not ordered: only equal"
    assert reached({"t": {"snapshot": 4}}, {"t": {"snapshot": 4}}) and reached(None, {"t": {"snapshot": -1}})
    assert not reached(None, {"t": {"version": 0}})
    asking = TABLES_SQL.replace("'store' = 'lake'", "'store' = 'lake', 'deploy' = 'blue_green'")
    (root / "sql" / "all.sql").write_text(asking.format(start=""))
    state = applied(plan_of(root), state)
    (root / "sql" / "all.sql").write_text(asking.format(start=", 'start.position' = 'earliest'"))
    asked = change_of(plan_of(root, state), "query.analytics.public.archived").blue_green
    assert asked is not None and asked.relocate, "'deploy' = 'blue_green' on the table asks for it"


def test_a_deployment_killed_in_its_switch_rolls_forward_and_one_whose_sql_reverted_is_still_rolled_back(example):
    from dsflow.core.bluegreen import Interrupted, interrupted_text
    from dsflow.core.state import PendingChange

    sql = example / "sql" / "pipelines.sql"
    declared = sql.read_text()
    state = applied(plan_of(example))
    replay(example)
    first = change_of(plan_of(example, state, blue_green=True), QUERY)

    def killed(phase: str, data_hash: str | None, switch: bool = True) -> State:
        intent = {"blue_green": {"phase": phase, "version": 2, "new_log": first.blue_green.new_log},
                  "blue_green_run": {"plan": first.blue_green.model_dump(mode="json"), "run_dir": "r",
                                     "checkpoint": "c", "data_hash": data_hash, "log": None},
                  **({"blue_green_switch": {"record": {}, "stopped": {}, "new_ends": {}, "read_from": {}}}
                     if switch else {})}
        return state.with_pending(PendingChange(address=QUERY, action="replace", intent=intent))

    dead = Observations(resources={READER: Observation(address=READER, healthy=False, detail="driver not running")})
    plan = plan_of(example, killed("switch", first.data_hash), observations=dead)  # without --blue-green, too
    assert change_of(plan, READER).action is Action.NOOP, "its stopped driver is the roll forward's to start"
    assert change_of(plan, READER).reason == f"drift: driver not running: left to the roll forward of {QUERY}"
    assert change_of(plan_of(example, state, observations=dead), READER).drift, "a drift repair otherwise"
    forward = change_of(plan, QUERY).blue_green
    assert forward is not None and forward.interrupted == Interrupted(version=2, phase="switch", action="roll forward")
    assert forward.model_copy(update={"interrupted": None}) == first.blue_green, "the deployment as it was frozen"
    text = plan_text(plan.model_dump(mode="json"))
    assert (f"interrupted: an apply was killed during the blue/green deployment v2 (switch): it rolls forward: "
            f"readers not yet on {forward.new_log} are switched as the switch does") in text
    assert plan_from_json(plan.model_dump_json(), "plan.json") == plan
    for state_, why in ((killed("switch", "other sql"), "the SQL changed since"),
                        (killed("switch", first.data_hash, switch=False), "nothing noted to finish it from")):
        assert change_of(plan_of(example, state_, blue_green=True), QUERY).blue_green.interrupted.action == "refuse", \
            why

    sql.write_text(declared)  # reverted: the query has no change of its own
    assert change_of(plan_of(example, state), QUERY).action is Action.NOOP
    reverted = plan_of(example, killed("catch_up", first.data_hash))
    change = change_of(reverted, QUERY)
    assert change.action is Action.REFRESH and change in reverted.actionable and reverted.has_changes
    assert change.effect.endswith("it is rolled back first: its new version stopped, its log deleted, its "
                                  "checkpoint removed")
    assert reverted.summary()["refresh"] == 1
    assert f"! {QUERY}" in plan_text(reverted.model_dump(mode="json"))
    assert "0 to delete, 1 interrupted deployment(s) to roll back." in plan_text(reverted.model_dump(mode="json"))
    assert "deployed version started again" in change_of(plan_of(example, killed("compare", None)), QUERY).effect
    assert "DSF-E966" in change_of(plan_of(example, killed("switch", first.data_hash)), QUERY).effect

    table = first.blue_green.model_copy(update={"kept_as": "t_v1", "old_log": "t", "new_log": "t_v2"})
    assert "the catalog says whether its transaction of renames committed (t_v2 named t, t kept as t_v1); if not, " \
        "the renames are done now" in interrupted_text(Interrupted(version=2, phase="switch",
                                                                   action="roll forward"), table)


def test_real_time_mode_a_new_version_is_built_in_micro_batches_and_a_deployed_one_moves_to_them_first(example):
    """The plan's effect and phases say what apply does (engine/bluegreen.py; tests/e2e/test_realtime_switch.py runs
    both)."""
    state = applied(plan_of(example))
    sql = example / "sql" / "pipelines.sql"
    declared = sql.read_text()
    realtime = ", 'trigger' = 'realtime', 'trigger.interval' = '5 seconds'"
    replay(example, realtime)
    into = change_of(plan_of(example, state, blue_green=True), QUERY)
    assert into.blue_green is not None and into.effect is not None
    assert into.effect.endswith("built, caught up and cut in micro-batches (real-time mode cannot stop at given "
                                "offsets), it resumes in real-time mode at the cut, its offsets carried")
    sql.write_text(declared.replace(HEAD, f"{HEAD}{realtime}"))
    state = applied(plan_of(example), state)
    assert state.resources[QUERY].data["trigger"] == "realtime"
    assert into.blue_green.phases == list(PHASES) and "nothing read twice or skipped" in into.effect
    sql.write_text(declared)
    replay(example)  # out of real-time mode
    moved = change_of(plan_of(example, state, blue_green=True), QUERY)
    assert moved.blue_green is not None and moved.blue_green.phases == ["micro_batches", *PHASES]
    old = moved.blue_green.old_log
    assert moved.effect is not None and moved.effect.endswith(
        "once it caught up, nothing skipped; the deployed version first moves to micro-batches (real-time mode "
        "cannot stop at given offsets): restarted on a new checkpoint, its offsets carried from its last real-time "
        f"checkpoint, so what it wrote after that checkpoint may be written again to {old} and read twice by its "
        "readers (at-least-once)")
    assert phase_text(moved.blue_green)[0].startswith("micro batches: the deployed version, in real-time mode, "
                                                      "restarted in micro-batches on a new checkpoint")
    assert len(phase_text(moved.blue_green)) == len(phase_text(into.blue_green)) + 1
    killed = {"blue_green": {"phase": "micro_batches", "version": 2, "new_log": "x_v2"}, "blue_green_run": None,
              "blue_green_micro_batches": {"checkpoint": "/cp", "stopped": {"stop_offsets": None}}}
    assert interrupted(killed, moved.data_hash, True) is None, "killed in or after the move: nothing to roll back"
    sql.write_text(declared)
    replay(example, realtime)  # from real-time mode into it again
    both = change_of(plan_of(example, state, blue_green=True), QUERY)
    assert both.blue_green is not None and both.blue_green.phases == ["micro_batches", *PHASES]
    assert both.effect is not None and "(at-least-once); in real-time mode: built, caught up and cut" in both.effect

    project = load_project(example, variables=EXAMPLE_VARIABLES)
    built = {q.fqn: q.trigger for q in in_micro_batches(project, QUERY.split(".", 1)[1]).queries}
    assert built == {q.fqn: q.trigger for q in project.queries} | {QUERY.split(".", 1)[1]: "micro-batch"}
    assert next(q for q in project.queries if f"query.{q.fqn}" == QUERY).trigger == "realtime", "left as it is"
