"""`import:` entries and `dsflow import` (core/imports.py, load/removals.py): an existing log a declared stream names
is taken into the state as it is, seen by the refresh; the plan says "imported" and then compares the declaration
with it by the usual rules. Golden plans: tests/golden/categories/import*.{txt,json,md}. Against a real broker:
tests/integration/test_forget_topic.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsflow.cli.render import plan_text
from dsflow.core.observing import questions
from dsflow.core.plan import Action, Observation, Observations, PlanOptions
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.errors import DsflowError
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, applied, copy_example, plan_from_files
from test_plan_categories import check_all
from test_plan_golden import normalized

PAGEVIEWS = "relation.analytics.public.pageviews"


plan_with_imports = plan_from_files


def _seen(size: int) -> Observations:
    return Observations(resources={PAGEVIEWS: Observation(address=PAGEVIEWS, healthy=True, size=size,
                                                          detail=f"topic exists with {size} partitions")})


@pytest.fixture()
def not_yet_imported(tmp_path) -> tuple[Path, State]:
    """The example deployed but for the pageviews topic, which an `import:` entry adopts."""
    root = copy_example(tmp_path)
    state = applied(plan_with_imports(root, State()))
    (root / "import.yml").write_text("import:\n  - to: pageviews\n    id: pageviews\n")
    return root, state.without(PAGEVIEWS)


def test_an_import_that_matches_its_declaration_is_only_recorded(not_yet_imported):
    root, state = not_yet_imported
    plan = plan_with_imports(root, state, observations=_seen(2))
    [change] = plan.actionable
    assert (change.address, change.action, change.imported) == (PAGEVIEWS, Action.NOOP, "pageviews")
    assert change.before is not None and change.before["partitions"] == 2 and plan.has_changes
    assert "taken into the state as it is" in (change.effect or "")
    assert plan.summary() == {"create": 0, "update": 0, "replace": 0, "delete": 0, "import": 1}
    assert "Plan: 1 to import, 0 to create" in plan_text(normalized(plan))
    check_all("import", plan)


def test_an_import_whose_log_has_fewer_partitions_grows_it_in_place(not_yet_imported):
    root, state = not_yet_imported
    plan = plan_with_imports(root, state, observations=_seen(1).model_copy(update={"growable": [PAGEVIEWS]}))
    [change] = [c for c in plan.actionable if c.address == PAGEVIEWS]
    assert (change.action, change.imported) == (Action.UPDATE, "pageviews")
    assert "partitions raised 1 -> 2 (in place" in change.reason and change.reason.startswith("imported (")
    check_all("import_grown", plan)


def test_an_import_whose_log_cannot_take_the_declaration_in_place_is_replaced_by_the_usual_rules(not_yet_imported):
    root, state = not_yet_imported
    plan = plan_with_imports(root, state, observations=_seen(4))
    [change] = [c for c in plan.actionable if c.address == PAGEVIEWS]
    assert (change.action, change.imported) == (Action.REPLACE, "pageviews")
    assert change.destroys is None, "dsflow did not create it: it never deletes it"


def test_the_refresh_is_asked_whether_an_imported_log_can_grow(not_yet_imported):
    root, state = not_yet_imported
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    asked = questions(project_resources(project), state, PlanOptions(imports={PAGEVIEWS: "pageviews"}))
    assert asked.growing[PAGEVIEWS][1] == 2


def test_an_import_of_what_is_deployed_already_plans_nothing(not_yet_imported, tmp_path):
    root, state = not_yet_imported
    state = applied(plan_with_imports(root, state, observations=_seen(2)), state)
    assert PAGEVIEWS in state.resources
    assert not plan_with_imports(root, state, observations=_seen(2)).actionable


@pytest.mark.parametrize(("entries", "code"), [
    ("import:\n  - to: nothing_here\n", "DSF-E866"),
    ("import:\n  - to: query.analytics.curated.pageviews_filtered\n", "DSF-E866"),
    ("import:\n  - to: pageviews\n    id: other_topic\n", "DSF-E867"),
    ("import:\n  - to: pageviews\n  - to: public.pageviews\n", "DSF-E867"),
])
def test_an_import_entry_that_is_not_one_is_refused_with_its_line(tmp_path, entries, code):
    root = copy_example(tmp_path)
    (root / "import.yml").write_text(entries)
    with pytest.raises(DsflowError) as raised:
        load_project(root, variables=EXAMPLE_VARIABLES)
    found = [d for d in raised.value.diagnostics if d.code == code]
    assert found and found[0].location is not None and found[0].location.file.endswith("import.yml")


def test_an_import_needs_what_a_create_needs(not_yet_imported):
    from dsflow.core.access import change_requirements

    root, state = not_yet_imported
    [change] = plan_with_imports(root, state, observations=_seen(2)).actionable
    needs = change_requirements(change.model_dump(mode="json"))
    assert needs and all(privilege.value != "OWNERSHIP" for privilege, _ in needs)
    assert ("store.kafka_main" in [on for _, on in needs])
