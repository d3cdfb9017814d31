"""Enforced contracts (issue 43 item 4): the query writing a contracted relation produces exactly its declared
columns and types; a breaking change to a deployed contracted relation fails validate and plan unless it comes as
a new version beside the old one; plan lists the readers a relation change reaches.

Pure: projects are {filename: content} folders, state is a local file; nothing talks to a broker or Spark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.cli import cli
from dsflow.cli.render import plan_text
from dsflow.core.contracts import Break, breaks, model_of, same_type
from dsflow.core.plan import Action, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.engine.contracts import contract_diagnostics
from dsflow.errors import Diagnostic, Location, ProjectError
from dsflow.load.project import check_project, load_project
from support.projects import PAGEVIEWS, applied, make_project

SOURCES = {"sql/sources.sql": PAGEVIEWS}
CONTRACTED = """\
CREATE STREAM views (userid VARCHAR, viewtime BIGINT, pageid VARCHAR) WITH ('contract' = 'enforced') AS
  SELECT userid, viewtime, pageid FROM pageviews;
CREATE STREAM readers AS SELECT userid FROM views;
"""


def diagnostics(tmp_path: Path, sql: str) -> list[Diagnostic]:
    return check_project(make_project(tmp_path, {**SOURCES, "sql/q.sql": sql})).diagnostics


def only(found: list[Diagnostic], code: str) -> Diagnostic:
    matching = [d for d in found if d.code == code]
    assert len(matching) == 1, "\n".join(str(d) for d in found)
    return matching[0]


# --- the query writing a contracted relation -------------------------------------------------------------------


def test_a_query_that_produces_the_contract_in_another_order_and_with_type_aliases_is_valid(tmp_path):
    sql = ("CREATE STREAM v (viewtime BIGINT, userid STRING) WITH ('contract' = 'enforced') AS\n"
           "  SELECT userid, viewtime FROM pageviews;\n")
    result = check_project(make_project(tmp_path, {**SOURCES, "sql/q.sql": sql}))
    assert result.diagnostics == []
    relation = result.project.relation("analytics.public.v")
    assert relation.contract and relation.version is None
    assert [(c.name, c.type) for c in relation.columns] == [("userid", "VARCHAR"), ("viewtime", "BIGINT")]


def test_e891_a_contract_on_as_select_needs_the_column_list(tmp_path):
    d = only(diagnostics(tmp_path, "CREATE STREAM v WITH ('contract' = 'enforced') AS SELECT userid FROM pageviews;"),
             "DSF-E891")
    assert d.location == Location("sql/q.sql", 1, 15)
    assert "declares no columns" in d.message and "CREATE STREAM v (userid VARCHAR) WITH ('contract'" in d.hint


def test_e892_e893_each_missing_extra_and_retyped_column_at_its_place(tmp_path):
    sql = ("CREATE STREAM v (userid VARCHAR, viewtime INT, referrer VARCHAR) WITH ('contract' = 'enforced') AS\n"
           "  SELECT viewtime,\n"
           "         userid, pageid FROM pageviews;\n")
    found = diagnostics(tmp_path, sql)
    assert sorted(d.code for d in found) == ["DSF-E892", "DSF-E892", "DSF-E893"]
    missing, extra = [d for d in found if d.code == "DSF-E892"]
    assert missing.location == Location("sql/q.sql", 1, 48) and "'referrer' VARCHAR" in missing.message
    assert extra.location == Location("sql/q.sql", 3, 18) and "'pageid' VARCHAR" in extra.message
    retyped = only(found, "DSF-E893")
    assert retyped.location == Location("sql/q.sql", 2, 10)
    assert "'viewtime' as BIGINT, but the contract says INT" in retyped.message


def test_e893_insert_into_a_contracted_stream_checks_the_types(tmp_path):
    sql = ("CREATE STREAM s (a BIGINT, b VARCHAR) WITH ('contract' = 'enforced', 'value.format' = 'json');\n"
           "INSERT INTO s SELECT id AS a, viewtime AS b FROM pageviews;\n"
           "INSERT INTO s SELECT id AS a, userid AS b FROM pageviews;\n")
    d = only(diagnostics(tmp_path, sql), "DSF-E893")
    assert d.location == Location("sql/q.sql", 2, 31)
    assert "'b' as BIGINT, but the contract says VARCHAR" in d.message


def test_an_uncontracted_insert_keeps_its_types_unchecked(tmp_path):
    sql = ("CREATE STREAM s (a BIGINT, b VARCHAR) WITH ('value.format' = 'json');\n"
           "INSERT INTO s SELECT id AS a, viewtime AS b FROM pageviews;\n")
    assert diagnostics(tmp_path, sql) == []


def test_e894_the_declared_key_is_the_contracts(tmp_path):
    sql = ("CREATE CHANGELOG c (userid VARCHAR, n BIGINT, PRIMARY KEY (n)) WITH ('contract' = 'enforced') AS\n"
           "  SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;\n")
    d = only(diagnostics(tmp_path, sql), "DSF-E894")
    assert "declares PRIMARY KEY (n) but its query is keyed by (userid)" in d.message
    assert diagnostics(tmp_path, sql.replace("PRIMARY KEY (n)", "PRIMARY KEY (userid)")) == []


def test_e890_contract_and_version_values(tmp_path):
    found = diagnostics(tmp_path, "CREATE STREAM s (a BIGINT) WITH ('contract' = 'yes', 'version' = 'two', "
                                  "'value.format' = 'json');")
    assert [d.code for d in found] == ["DSF-E890", "DSF-E890"]
    assert found[0].location == Location("sql/q.sql", 1, 34) and "'enforced' or 'none'" in found[0].message


def test_e895_a_version_is_named_model_vN_and_given_once(tmp_path):
    d = only(diagnostics(tmp_path, "CREATE STREAM s (a BIGINT) WITH ('version' = '3', 'value.format' = 'json');"),
             "DSF-E895")
    assert "does not end with _v3" in d.message and "s_v3" in d.hint
    twice = ("CREATE STREAM s (a BIGINT) WITH ('version' = '1', 'value.format' = 'json');\n"
             "CREATE STREAM s_v1 (a BIGINT) WITH ('version' = '1', 'value.format' = 'json');\n")
    d = only(diagnostics(tmp_path, twice), "DSF-E895")
    assert d.message == "'analytics.public.s_v1' and 'analytics.public.s' are both version 1 of 'analytics.public.s'"
    assert d.location == Location("sql/q.sql", 2, 15)
    ok = ("CREATE STREAM s (a BIGINT) WITH ('version' = '1', 'value.format' = 'json');\n"
          "CREATE STREAM s_v2 (a BIGINT) WITH ('version' = 'v2', 'value.format' = 'json');\n")
    assert diagnostics(tmp_path, ok) == []


# --- breaking changes, pure ------------------------------------------------------------------------------------


STREAM = {"kind": "stream", "primary_key": [], "columns": [["id", "INT"], ["name", "VARCHAR"]]}


@pytest.mark.parametrize("columns, expected", [
    ([["id", "INT"], ["name", "VARCHAR"], ["extra", "DOUBLE"]], []),  # added
    ([["id", "BIGINT"], ["name", "VARCHAR"]], []),  # widened
    ([["name", "STRING"], ["ID", "integer"]], []),  # aliases, case, order
    ([["id", "INT"]], [("DSF-E896", "name", "column 'name' dropped or renamed")]),
    ([["id", "INT"], ["full_name", "VARCHAR"]], [("DSF-E896", "name", "column 'name' dropped or renamed")]),
    ([["id", "SMALLINT"], ["name", "VARCHAR"]], [("DSF-E897", "id", "column 'id' narrowed INT -> SMALLINT")]),
    ([["id", "VARCHAR"], ["name", "VARCHAR"]], [("DSF-E897", "id", "column 'id' retyped INT -> VARCHAR")]),
])
def test_what_breaks_a_contract_column_by_column(columns, expected):
    found = breaks("relation.a.b.s", STREAM, {**STREAM, "columns": columns})
    assert [(b.code, b.column, b.message) for b in found] == expected


def test_a_changed_key_or_kind_breaks_a_contract():
    changelog = {**STREAM, "kind": "changelog", "primary_key": ["id"]}
    assert breaks("relation.a.b.s", changelog, {**changelog, "primary_key": ["id", "name"]}) == [
        Break("relation.a.b.s", "DSF-E898", None, "its key changed (id) -> (id, name)")]
    assert [b.message for b in breaks("relation.a.b.s", changelog, STREAM)] == [
        "its kind changed changelog -> stream", "its key changed (id) -> ()"]


def test_type_sameness_and_version_names():
    assert same_type("DECIMAL(10,2)", "decimal(10, 2)") and same_type("ARRAY<STRING>", "ARRAY<VARCHAR>")
    assert not same_type("INT", "BIGINT") and not same_type("DECIMAL(10, 2)", "DECIMAL(12, 2)")
    assert model_of("orders_v2") == ("orders", 2) and model_of("orders") == ("orders", None)
    assert model_of("orders_v0") == ("orders_v0", None)


# --- against the deployed state: validate and plan --------------------------------------------------------------


def deployed(tmp_path: Path, sql: str) -> tuple[Path, State]:
    """A project applied as written (its state recorded by the local backend), to be edited."""
    root = make_project(tmp_path, {**SOURCES, "sql/q.sql": sql})
    project = load_project(root)
    state = applied(make_plan(project.name, project.environment, project_resources(project), State()))
    from dsflow.engine.workspace import Workspace

    Workspace.of(project).state_backend().write(state, expected_serial=0)
    return root, state


def test_dropping_a_deployed_contract_column_fails_validate_and_plan_naming_it(tmp_path):
    root, _ = deployed(tmp_path, CONTRACTED)
    (root / "sql/q.sql").write_text(CONTRACTED.replace(", pageid VARCHAR", "").replace(", pageid FROM", " FROM"))
    assert check_project(root).diagnostics == []  # the project alone is valid: the break is against the state
    result = CliRunner().invoke(cli, ["-C", str(root), "validate", "--json"])
    assert result.exit_code == 1, result.output
    [found] = json.loads(result.output)["diagnostics"]
    assert (found["code"], found["file"], found["line"], found["col"]) == ("DSF-E896", "sql/q.sql", 1, 15)
    assert "column 'pageid' dropped or renamed" in found["message"]
    assert "views_v2" in found["hint"] and "'version' = '2'" in found["hint"]
    planned = CliRunner().invoke(cli, ["-C", str(root), "plan", "--no-refresh"])
    assert isinstance(planned.exception, ProjectError), planned.output
    assert [(d.code, d.location) for d in planned.exception.diagnostics] == [
        ("DSF-E896", Location("sql/q.sql", 1, 15))]
    assert "column 'pageid' dropped or renamed" in planned.exception.diagnostics[0].message


def test_validate_compares_with_a_saved_state_as_dbt_state_does(tmp_path):
    root, _ = deployed(tmp_path, CONTRACTED)
    shown = CliRunner().invoke(cli, ["-C", str(root), "state", "show"])
    assert shown.exit_code == 0, shown.output
    saved = tmp_path / "prod-state.json"
    saved.write_text(shown.output)
    for written in (root / ".dsflow" / "state").glob("*.json*"):
        written.unlink()  # this checkout has deployed nothing: only the saved state knows the contract
    (root / "sql/q.sql").write_text(CONTRACTED.replace(", pageid VARCHAR", "").replace(", pageid FROM", " FROM"))
    assert CliRunner().invoke(cli, ["-C", str(root), "validate"]).exit_code == 0
    result = CliRunner().invoke(cli, ["-C", str(root), "validate", "--json", "--state", str(saved)])
    assert result.exit_code == 1, result.output
    [found] = json.loads(result.output)["diagnostics"]
    assert (found["code"], found["file"], found["line"]) == ("DSF-E896", "sql/q.sql", 1)
    saved.write_text("{not json")
    result = CliRunner().invoke(cli, ["-C", str(root), "validate", "--json", "--state", str(saved)])
    assert result.exit_code == 0, result.output
    [warned] = json.loads(result.output)["diagnostics"]
    assert (warned["code"], warned["severity"]) == ("DSF-E801", "warning")
    assert "not compared" in warned["message"] and "prod-state.json" in warned["message"]


def test_a_narrowed_column_of_a_declared_contracted_stream_fails_plan(tmp_path):
    sql = "CREATE STREAM s (a BIGINT, b VARCHAR) WITH ('contract' = 'enforced', 'value.format' = 'json');\n"
    root, state = deployed(tmp_path, sql)
    (root / "sql/q.sql").write_text(sql.replace("a BIGINT", "a INT"))
    project = load_project(root)
    [found] = contract_diagnostics(project, project_resources(project), state)
    assert found.code == "DSF-E897" and "column 'a' narrowed BIGINT -> INT" in found.message
    assert found.location == Location("sql/q.sql", 1, 15)
    (root / "sql/q.sql").write_text(sql.replace("b VARCHAR", "b VARCHAR, c DOUBLE"))  # adding breaks nothing
    project = load_project(root)
    assert contract_diagnostics(project, project_resources(project), state) == []


def test_without_a_deployed_contract_the_same_change_is_not_refused(tmp_path):
    sql = "CREATE STREAM s (a BIGINT, b VARCHAR) WITH ('value.format' = 'json');\n"
    root, state = deployed(tmp_path, sql)
    (root / "sql/q.sql").write_text(sql.replace("a BIGINT, ", "").replace("'value.format'",
                                                                           "'contract' = 'enforced', 'value.format'"))
    project = load_project(root)
    assert contract_diagnostics(project, project_resources(project), state) == []


def test_the_breaking_change_as_a_new_version_beside_the_old_one_plans(tmp_path):
    root, state = deployed(tmp_path, CONTRACTED)
    v2 = ("CREATE STREAM views_v2 (userid VARCHAR, viewtime BIGINT) WITH ('contract' = 'enforced', 'version' = '2') "
          "AS\n  SELECT userid, viewtime FROM pageviews;\n")
    (root / "sql/q.sql").write_text(CONTRACTED + v2)
    project = load_project(root)
    resources = project_resources(project)
    assert contract_diagnostics(project, resources, state) == []
    plan = make_plan(project.name, project.environment, resources, state)
    created = next(c for c in plan.changes if c.address == "relation.analytics.public.views_v2")
    assert created.action is Action.CREATE
    assert created.reason == ("not yet deployed; a new version of views, beside views (both run until the old one "
                              "leaves the project)")
    state = applied(plan, state)
    (root / "sql/q.sql").write_text(v2 + "CREATE STREAM readers AS SELECT userid FROM views_v2;\n")
    project = load_project(root)
    resources = project_resources(project)
    assert contract_diagnostics(project, resources, state) == []  # the old version leaves: no break
    plan = make_plan(project.name, project.environment, resources, state)
    gone = next(c for c in plan.changes if c.address == "relation.analytics.public.views")
    assert gone.action is Action.DELETE and gone.reason == "no longer in the project; an old version of views; " \
                                                           "views_v2 stays"


def test_plan_lists_the_readers_a_relation_change_reaches(tmp_path):
    root, state = deployed(tmp_path, CONTRACTED + "CREATE STREAM further AS SELECT userid FROM readers;\n"
                                                  "CREATE STREAM unrelated AS SELECT id FROM pageviews;\n")
    (root / "sql/sources.sql").write_text(PAGEVIEWS.replace("pageid VARCHAR", "pageid VARCHAR,\n  referrer VARCHAR"))
    project = load_project(root)
    plan = make_plan(project.name, project.environment, project_resources(project), state,
                     PlanOptions(store_types={"kafka_main": "kafka"}))
    change = next(c for c in plan.changes if c.address == "relation.analytics.public.pageviews")
    assert change.action is Action.UPDATE
    assert change.affected == ["query.analytics.public.unrelated", "query.analytics.public.views"]
    (root / "sql/q.sql").write_text(CONTRACTED.replace("viewtime BIGINT", "viewtime BIGINT, id BIGINT")
                                    .replace("viewtime, pageid", "viewtime, id, pageid")
                                    + "CREATE STREAM further AS SELECT userid FROM readers;\n")
    project = load_project(root)
    plan = make_plan(project.name, project.environment, project_resources(project), state)
    change = next(c for c in plan.changes if c.address == "relation.analytics.public.views")
    assert change.action is Action.UPDATE and "id added" in change.reason
    assert change.affected == ["query.analytics.public.readers"]  # its reader; `further` reads what that writes
    assert "affects: query.analytics.public.readers" in " ".join(plan_text(plan.model_dump(mode="json")).split())


def test_what_target_does_not_reach_or_exclude_leaves_breaks_nothing(tmp_path):
    from dsflow.engine.contracts import check_contracts

    sql = "CREATE STREAM s (a BIGINT, b VARCHAR) WITH ('contract' = 'enforced', 'value.format' = 'json');\n"
    root, state = deployed(tmp_path, sql + "CREATE STREAM t AS SELECT a, b FROM s;\n")
    (root / "sql/q.sql").write_text(sql.replace("b VARCHAR", "b BIGINT") + "CREATE STREAM t AS SELECT a FROM s;\n")
    project = load_project(root)
    resources = project_resources(project)
    with pytest.raises(ProjectError) as refused:
        check_contracts(project, resources, state)
    assert [d.code for d in refused.value.diagnostics] == ["DSF-E897"]
    with pytest.raises(ProjectError):
        check_contracts(project, resources, state, targets=frozenset({"query.analytics.public.t"}))  # t reads s
    check_contracts(project, resources, state, targets=frozenset({"relation.analytics.public.pageviews"}))
    check_contracts(project, resources, state, excludes=frozenset({"relation.analytics.public.s"}))
    check_contracts(project, resources, state, excludes=frozenset({"store.kafka_main"}))  # s is downstream of it
