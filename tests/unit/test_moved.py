"""`moved:` entries (Terraform's moved blocks) and the moves they plan: pure, from projects loaded from files and a
State built in memory. What a move does to records, offsets, checkpoints and rows: tests/e2e/test_moved_data.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsflow.core.categories import Category
from dsflow.core.moves import table_rename
from dsflow.core.plan import Action, Plan, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import LedgerEntry, State
from dsflow.errors import Location, ProjectError
from dsflow.load.project import check_project, load_project
from dsflow.cli.render import plan_text
from support.projects import REPO, applied, make_project

STORE_TYPES = {"kafka_main": "kafka"}
DATABASES = "databases:\n  - name: analytics\n    schemas: [public, archive]\n"
SQL = """\
CREATE STREAM {events} (id BIGINT, name VARCHAR) WITH ('topic' = '{topic}', 'value.format' = 'json');
CREATE STREAM {copied} WITH ('topic' = 'copied') AS SELECT id FROM {events};
"""


def _sql(events: str = "events", topic: str = "events", copied: str = "copied") -> str:
    return SQL.format(events=events, topic=topic, copied=copied)


def _plan(tmp_path: Path, sql: str, state: State, moved: str = "") -> Plan:
    root = make_project(tmp_path, {"db.yml": DATABASES + moved, "sql/all.sql": sql})
    project = load_project(root)
    options = PlanOptions(store_types=STORE_TYPES, moves={m.to_address: m.from_address for m in project.moves})
    return make_plan(project.name, "dev", project_resources(project), state, options)


def _deployed(tmp_path: Path, sql: str) -> State:
    state = applied(_plan(tmp_path, sql, State()))
    entry = LedgerEntry(query="query.analytics.public.copied", version="v1", checkpoint="/cp/copied/v1",
                        started_at="2026-11-25T10:00:00+00:00")
    return state.with_ledger([entry])


def _changes(plan: Plan) -> dict[str, tuple[str, str | None]]:
    return {c.address: (c.action.value, c.moved_from) for c in plan.actionable}


def test_a_declared_move_across_schemas_updates_the_new_address_and_keeps_the_readers_checkpoint(tmp_path):
    state = _deployed(tmp_path, _sql())
    moved = "moved:\n  - from: relation.analytics.public.events\n    to: analytics.archive.events\n"
    plan = _plan(tmp_path, _sql(events="archive.events"), state, moved)
    assert _changes(plan) == {"relation.analytics.archive.events": ("update", "relation.analytics.public.events"),
                              "query.analytics.public.copied": ("update", None)}
    change = {c.address: c for c in plan.actionable}
    assert change["relation.analytics.archive.events"].reason.startswith("moved from relation.analytics.public.events")
    assert change["relation.analytics.archive.events"].physical == "kafka topic kafka_main/events"
    assert change["query.analytics.public.copied"].category is Category.KEEP_CHECKPOINT
    assert not plan.destroying
    after = applied(plan, state)
    assert "relation.analytics.public.events" not in after.resources
    assert _plan(tmp_path, _sql(events="archive.events"), after, moved).actionable == [], \
        "a moved entry whose 'from' is no longer deployed plans nothing (it can stay in the project)"


def test_a_move_whose_definition_changed_shows_the_move_with_the_change(tmp_path):
    state = _deployed(tmp_path, _sql())
    moved = "moved:\n  - from: analytics.public.events\n    to: archive.events\n"
    plan = _plan(tmp_path, _sql(events="archive.events", topic="events_v2"), state, moved)
    change = {c.address: c for c in plan.actionable}
    relation = change["relation.analytics.archive.events"]
    assert (relation.action, relation.moved_from) == (Action.REPLACE, "relation.analytics.public.events")
    assert relation.reason == "moved from relation.analytics.public.events; topic changed (forces replacement)"
    assert relation.destroys is not None and relation.destroys.object == "kafka topic kafka_main/events", \
        "a topic cannot be renamed: the old one is destroyed, and the plan says so"
    assert change["query.analytics.public.copied"].category is Category.REPLAY
    assert "relation.analytics.public.events" not in change


def test_a_relation_renamed_with_its_query_moves_both_and_the_query_keeps_its_checkpoint(tmp_path):
    state = _deployed(tmp_path, _sql())
    moved = "moved:\n  - from: relation.analytics.public.copied\n    to: relation.analytics.public.copied_v2\n"
    plan = _plan(tmp_path, _sql(copied="copied_v2"), state, moved)
    assert _changes(plan) == {
        "relation.analytics.public.copied_v2": ("update", "relation.analytics.public.copied"),
        "query.analytics.public.copied_v2": ("update", "query.analytics.public.copied")}
    query = next(c for c in plan.actionable if c.address == "query.analytics.public.copied_v2")
    assert query.category is Category.IN_PLACE and "same checkpoint" in query.effect
    after = applied(plan, state)
    assert [e.query for e in after.ledger] == ["query.analytics.public.copied_v2"], "the versions follow the query"
    assert after.resources["query.analytics.public.copied_v2"].address == "query.analytics.public.copied_v2"


def test_a_query_moved_on_its_own(tmp_path):
    state = _deployed(tmp_path, _sql())
    moved = ("moved:\n  - from: relation.analytics.public.copied\n    to: relation.analytics.public.copied_v2\n"
             "  - from: query.analytics.public.copied\n    to: query.analytics.public.copied_v2\n")
    plan = _plan(tmp_path, _sql(copied="copied_v2"), state, moved)
    assert _changes(plan)["query.analytics.public.copied_v2"] == ("update", "query.analytics.public.copied")


def test_a_rename_onto_the_same_topic_is_found_without_a_moved_entry(tmp_path):
    state = _deployed(tmp_path, _sql())
    plan = _plan(tmp_path, _sql(events="events_raw"), state)
    assert _changes(plan) == {"relation.analytics.public.events_raw": ("update", "relation.analytics.public.events"),
                              "query.analytics.public.copied": ("update", None)}


@pytest.mark.parametrize("entries, code, line, text", [
    ("  - {from: store.kafka_main, to: relation.analytics.public.events}\n", "DSF-E850", 1,
     "'from: store.kafka_main' is not the address of a relation or a query"),
    ("  - {from: old, to: relation.analytics.public.nowhere}\n", "DSF-E851", 1,
     "'to: relation.analytics.public.nowhere' is not declared"),
    ("  - {from: old, to: events}\n  - {from: copied, to: events}\n", "DSF-E852", 2,
     "'from: relation.analytics.public.copied' is still declared"),
    ("  - {from: old, to: events}\n  - {from: older, to: old}\n", "DSF-E853", 1, "a chain or a cycle"),
    ("  - {from: old, to: events}\n  - {from: older, to: events}\n", "DSF-E854", 2,
     "two entries have 'to: relation.analytics.public.events'"),
    ("  - {from: query.analytics.public.old, to: relation.analytics.public.events}\n", "DSF-E855", 1,
     "different kinds"),
])
def test_moved_entries_are_checked_with_their_file_and_line(tmp_path, entries, code, line, text):
    root = make_project(tmp_path, {"db.yml": DATABASES, "sql/all.sql": _sql(),
                                   "moves.yml": "# refactorings\nmoved:\n" + entries})
    found = [d for d in check_project(root).diagnostics if d.code == code]
    assert len(found) == 1, "\n".join(str(d) for d in check_project(root).diagnostics)
    assert found[0].location == Location("moves.yml", line + 2, 5) and text in found[0].message, found[0]
    with pytest.raises(ProjectError):
        load_project(root)


def test_every_link_of_a_cycle_is_refused(tmp_path):
    root = make_project(tmp_path, {"db.yml": DATABASES, "sql/all.sql": _sql(events="b"),
                                   "moves.yml": "moved:\n  - {from: a, to: b}\n  - {from: b, to: a}\n"})
    found = check_project(root).diagnostics
    assert [(d.code, d.location.line) for d in found if d.code == "DSF-E853"] == [("DSF-E853", 2), ("DSF-E853", 3)]


MOVED_EVENTS = "moved:\n  - from: relation.analytics.public.events\n    to: analytics.archive.events\n"


@pytest.mark.parametrize("sql, moved", [
    (_sql(events="archive.events"), MOVED_EVENTS),
    (_sql(copied="copied_v2"), "moved:\n  - {from: copied, to: copied_v2}\n"),
    (_sql(events="archive.events", topic="events_v2"), MOVED_EVENTS),
])
def test_the_moves_shown_in_docs_plan_md_are_real(tmp_path, sql, moved):
    plan = _plan(tmp_path, sql, _deployed(tmp_path, _sql()), moved)
    body = plan_text(json.loads(plan.model_dump_json())).split("\n\n", 1)[1].split("\nPlan:")[0].rstrip()
    assert f"```\n{body}\n```" in (REPO / "docs" / "plan.md").read_text(), "copy the new plan text into docs/plan.md"


@pytest.mark.parametrize("kind", ["materialized_view", "table"])
def test_only_a_view_or_table_renamed_in_its_schema_is_renamed_in_place(kind):
    before = {"kind": kind, "store": "pg", "topic": "a",
              "table_options": {"postgresql.db.name": "d", "postgresql.schema.name": "s", "postgresql.table.name": "a"}}
    renamed = {**before, "topic": "b", "table_options": {**before["table_options"], "postgresql.table.name": "b"}}
    other_schema = {**renamed, "table_options": {**renamed["table_options"], "postgresql.schema.name": "t"}}
    assert table_rename(before, renamed, {"pg": "postgresql"}) == ("a", "b")
    assert table_rename(before, other_schema, {"pg": "postgresql"}) is None
    assert table_rename(before, {**renamed, "columns": [["x", "BIGINT"]]}, {"pg": "postgresql"}) is None
    assert table_rename({**before, "kind": "stream"}, {**renamed, "kind": "stream"}, {"pg": "kafka"}) is None
    delta = {"kind": kind, "store": "lake", "topic": "a", "table_options": {"delta.path": "a"}}
    assert table_rename(delta, {**delta, "topic": "b", "table_options": {"delta.path": "b"}},
                        {"lake": "filesystem"}) is None  # a Delta table is not renamed: a move of it is a replace
