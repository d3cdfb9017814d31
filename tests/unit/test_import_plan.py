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
    ("import:\n  - to: query.analytics.curated.nothing_here\n    id: .dsflow/run/queries/x\n", "DSF-E866"),
    ("import:\n  - to: query.analytics.curated.pageviews_filtered\n", "DSF-E867"),
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


USER_VIEWS = "relation.analytics.public.user_views"
PG_STORE = """\
stores:
  - name: pg
    type: postgresql
    properties: {host: 127.0.0.1, port: 5432, user: postgres, database: shop}
"""
PG_TABLE = """\
CREATE TABLE user_views WITH ('store' = 'pg', 'postgresql.table.name' = 'user_views') AS
  SELECT userid, COUNT(*) AS views, MAX(viewtime) AS last_seen FROM pageviews GROUP BY userid;
"""


def _table(columns: list[tuple[str, str]], refused: str | None = None) -> Observations:
    seen = Observation(address=USER_VIEWS, healthy=True, detail="postgresql table exists",
                       columns=[list(c) for c in columns], refused=refused)
    return Observations(resources={USER_VIEWS: seen})


@pytest.fixture()
def table_not_yet_imported(tmp_path) -> tuple[Path, State]:
    """The example with a PostgreSQL table written by a CTAS, deployed but for the table, which an `import:` entry
    adopts."""
    root = copy_example(tmp_path)
    (root / "stores" / "pg.yml").write_text(PG_STORE)
    (root / "sql" / "tables.sql").write_text(PG_TABLE)
    state = applied(plan_with_imports(root, State()))
    (root / "import.yml").write_text("import:\n  - to: user_views\n    id: public.user_views\n")
    return root, state.without(USER_VIEWS)


ALL = [("userid", "text"), ("views", "bigint"), ("last_seen", "bigint")]


def test_an_imported_table_with_the_declared_columns_is_only_recorded(table_not_yet_imported):
    root, state = table_not_yet_imported
    plan = plan_with_imports(root, state, observations=_table(ALL))
    [change] = [c for c in plan.actionable if c.address == USER_VIEWS]
    assert (change.action, change.imported) == (Action.NOOP, "shop.public.user_views")
    assert "exists with columns userid text, views bigint, last_seen bigint); matches" in change.reason
    assert "its rows kept" in (change.effect or "")
    state = applied(plan, state)
    assert not [c for c in plan_with_imports(root, state, observations=_table(ALL)).actionable
                if c.address == USER_VIEWS]


def test_an_imported_table_lacking_the_last_declared_columns_gains_them_in_place(table_not_yet_imported):
    root, state = table_not_yet_imported
    plan = plan_with_imports(root, state, observations=_table(ALL[:1] + [("views", "numeric"), ("extra", "text")]))
    [change] = [c for c in plan.actionable if c.address == USER_VIEWS]
    assert (change.action, change.imported) == (Action.UPDATE, "shop.public.user_views")
    assert [c[0] for c in change.before["columns"]] == ["userid", "views"]
    assert [c[0] for c in change.after["columns"]] == ["userid", "views", "last_seen"]
    assert "column(s) last_seen added (in place: ALTER TABLE ADD COLUMN)" in change.reason, change.reason


@pytest.mark.parametrize(("columns", "refused", "why"), [
    ([("userid", "text"), ("last_seen", "bigint")], None, "lacks the declared column(s) views before others"),
    (ALL, "column views is text", "column views is text"),
])
def test_an_imported_table_that_cannot_take_the_rows_is_refused(table_not_yet_imported, columns, refused, why):
    from dsflow.core.imports import refusals
    from dsflow.core.resources import project_resources

    root, state = table_not_yet_imported
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    wanted = {str(r.address): r for r in project_resources(project)}
    found = refusals({USER_VIEWS: "shop.public.user_views"}, wanted, state, _table(columns, refused))
    assert why in found[USER_VIEWS]


def test_the_refresh_is_asked_about_an_imported_table(table_not_yet_imported):
    root, state = table_not_yet_imported
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    asked = questions(project_resources(project), state, PlanOptions(imports={USER_VIEWS: "shop.public.user_views"}))
    assert asked.adopting == (USER_VIEWS,) and USER_VIEWS not in asked.growing


@pytest.mark.parametrize(("entry", "code"), [
    ("import:\n  - to: user_views\n    id: public.other\n", "DSF-E867"),
    ("import:\n  - to: user_views\n    id: shop.public.user_views\n", None),
])
def test_a_table_import_names_its_table_with_or_without_the_database(tmp_path, entry, code):
    root = copy_example(tmp_path)
    (root / "stores" / "pg.yml").write_text(PG_STORE)
    (root / "sql" / "tables.sql").write_text(PG_TABLE)
    (root / "import.yml").write_text(entry)
    if code is None:
        assert [i.id for i in load_project(root, variables=EXAMPLE_VARIABLES).imports] == ["shop.public.user_views"]
        return
    with pytest.raises(DsflowError) as raised:
        load_project(root, variables=EXAMPLE_VARIABLES)
    assert [d.code for d in raised.value.diagnostics] == [code]


FILTERED = "query.analytics.curated.pageviews_filtered"


def _query_plan(root: Path, state: State, seen: Observations):
    from dsflow.core.plan import make_plan

    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return make_plan(project.name, project.environment, project_resources(project), state,
                     PlanOptions(imports={FILTERED: "/run/q"}, observations=seen,
                                 store_types={s.name: s.type for s in project.stores}))


def _driver(entry, data: dict | None = None, declared: bool = True) -> Observations:
    """What the refresh sees of the driver in /run/q: the version it runs and the declaration it started from."""
    from dsflow.core.resources import fingerprint

    data = data or entry.data
    outputs = {"pid": 4242, "version": fingerprint(data), "checkpoint": "/ck/v1", "run_dir": "/run/q",
               "topics": ["pageviews"]}
    running: dict = {"outputs": outputs}
    if declared:
        running |= {"address": FILTERED, "data_hash": fingerprint(data), "metadata_hash": entry.metadata_hash,
                    "data": data, "metadata": entry.metadata}
    detail = f"driver pid 4242 runs version {outputs['version'][:12]} on checkpoint /ck/v1"
    return Observations(resources={FILTERED: Observation(address=FILTERED, healthy=True, detail=detail,
                                                         running=running)})


@pytest.fixture()
def query_lost(tmp_path) -> tuple[Path, State, object]:
    """The example deployed, then its state without the filter query's entry (an older copy put back)."""
    root = copy_example(tmp_path)
    state = applied(plan_with_imports(root, State()))
    return root, state.without(FILTERED), state.resources[FILTERED]


def test_a_running_query_of_the_declared_version_is_only_recorded(query_lost):
    root, state, entry = query_lost
    plan = _query_plan(root, state, _driver(entry))
    [change] = plan.actionable
    assert (change.address, change.action, change.imported) == (FILTERED, Action.NOOP, "/run/q")
    assert change.reason.startswith("imported (driver pid 4242 runs version") and "untouched" in (change.effect or "")
    asked = questions(project_resources(load_project(root, variables=EXAMPLE_VARIABLES)), state,
                      PlanOptions(imports={FILTERED: "/run/q"}))
    assert asked.running == {FILTERED: "/run/q"}


def test_a_member_of_a_shared_application_is_only_recorded_with_its_application(query_lost):
    root, state, entry = query_lost
    seen = _driver(entry)
    observed = seen.resources[FILTERED]
    app = {"app": "app-2", "app_dir": "/run/apps/app-2", "app_query": FILTERED.removeprefix("query.")}
    running = {**observed.running, "outputs": {**observed.running["outputs"], **app}}
    detail = "the shared application app-2, host pid 4242, runs version v on checkpoint /ck/v1"
    seen = Observations(resources={FILTERED: observed.model_copy(update={"running": running, "detail": detail})})
    plan = _query_plan(root, state, seen)
    [change] = plan.actionable
    assert (change.action, change.imported) == (Action.NOOP, "/run/q")
    assert change.reason.startswith("imported (the shared application app-2, host pid 4242, runs version")
    assert change.effect == ("taken into the state as it is: nothing restarted (it and the other queries of its "
                             "shared application app-2 run on), offsets kept on its checkpoint")


def test_a_running_query_of_another_version_is_planned_by_the_usual_categories(query_lost):
    from dsflow.core.categories import Category

    root, state, entry = query_lost
    older = {**entry.data, "select": entry.data["select"] + " WHERE TRUE"}  # what the driver was started from
    [change] = _query_plan(root, state, _driver(entry, older)).actionable
    assert (change.action, change.imported, change.category) == (Action.UPDATE, "/run/q", Category.KEEP_CHECKPOINT)
    assert change.before == older and change.after == entry.data


def test_a_running_query_whose_declaration_is_not_recorded_is_refused(query_lost):
    from dsflow.core.imports import refusals

    root, state, entry = query_lost
    seen = _driver(entry, {**entry.data, "select": "SELECT 1"}, declared=False)
    seen = seen.model_copy(update={"resources": {FILTERED: seen.resources[FILTERED].model_copy(
        update={"refused": "/run/q does not record the declaration"})}})
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    wanted = {str(r.address): r for r in project_resources(project)}
    assert refusals({FILTERED: "/run/q"}, wanted, state, seen) == {FILTERED: "/run/q does not record the declaration"}
