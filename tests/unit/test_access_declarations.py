"""Roles, grants, revokes, user bindings and owners declared in a project: models, resources, diagnostics, plans.

Pure: projects are small {filename: content} folders (tests/support/projects.py); plans are made against a State
built in
memory, as tests/unit/test_settings.py does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsflow.core.address import Address, Kind
from dsflow.core.plan import Action, Plan, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import DeployedResource, State
from dsflow.errors import Diagnostic, Location, Severity
from dsflow.engine.executors import run_change
from dsflow.load.project import check_project, load_project
from dsflow.cli.render import plan_text
from support.projects import PAGEVIEWS, applied, make_project

SOURCES = {"sql/sources.sql": PAGEVIEWS}
ROLES = """\
roles:
  - name: analyst
    inherits: [public]
    grants:
      - privilege: SELECT
        on: pageviews
      - privilege: usage
        on: database.analytics
  - name: engineer
    inherits: [analyst]
users:
  - name: alice
    roles: [analyst]
"""
BASE = {**SOURCES, "security/roles.yml": ROLES}
PV = "relation.analytics.public.pageviews"


def load(tmp_path: Path, files: dict[str, str | None]):
    return load_project(make_project(tmp_path, files))


def diagnostics(tmp_path: Path, files: dict[str, str | None]) -> list[Diagnostic]:
    return check_project(make_project(tmp_path, files)).diagnostics


def only(found: list[Diagnostic], code: str) -> Diagnostic:
    matching = [d for d in found if d.code == code]
    assert len(matching) == 1, "\n".join(str(d) for d in found)
    return matching[0]


def plan_of(root: Path, state: State) -> Plan:
    project = load_project(root)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions())


def deployed_then_edited(tmp_path: Path, before: dict[str, str | None], after: dict[str, str | None]) -> Plan:
    """The plan of `after` against the state an apply of `before` leaves."""
    state = applied(plan_of(make_project(tmp_path / "before", before), State()))
    return plan_of(make_project(tmp_path / "after", after), state)


def actions(plan: Plan) -> list[tuple[str, Action]]:
    return [(c.address, c.action) for c in plan.actionable]


# --- models and resources ------------------------------------------------------------------------------------


def test_yaml_roles_grants_and_users_become_models_and_resources(tmp_path):
    project = load(tmp_path, BASE)
    assert [(r.name, r.inherits) for r in project.roles] == [("analyst", ("public",)), ("engineer", ("analyst",))]
    assert [(g.role, g.privilege, g.on) for g in project.grants] == [
        ("analyst", "SELECT", PV), ("analyst", "USAGE", "database.analytics")]
    assert [(b.user, b.roles) for b in project.bindings] == [("alice", ("analyst",))]
    resources = {str(r.address): r for r in project_resources(project)}
    binding = resources["binding.alice"]
    assert binding.data == {"user": "alice", "roles": ["analyst"]}
    assert binding.depends_on == (Address(Kind.ROLE, "analyst"),)
    assert resources["role.analyst"].depends_on == ()  # public is built in: no resource to depend on
    grant = resources[f"grant.analyst.select.{PV}"]
    assert grant.data == {"role": "analyst", "privilege": "SELECT", "on": PV}
    assert set(grant.depends_on) == {Address(Kind.ROLE, "analyst"), Address.parse(PV)}


def test_binding_is_created_after_its_roles_and_before_grants(tmp_path):
    kinds = list(Kind)
    assert kinds.index(Kind.ROLE) < kinds.index(Kind.BINDING) < kinds.index(Kind.GRANT)
    plan = plan_of(make_project(tmp_path, BASE), State())
    order = [c.address for c in plan.changes]
    assert order.index("role.analyst") < order.index("binding.alice")


def test_organization_and_query_privileges_and_builtin_roles(tmp_path):
    roles = """\
    roles:
      - name: ops
        inherits: [sysadmin]
        grants:
          - privilege: CREATE_STORE
            on: organization
          - privilege: MANAGE
            on: query.copy
          - privilege: ALL
            on: store.kafka_main
    users:
      - name: root
        roles: [orgadmin, ops]
    """
    files = {"sql/sources.sql": PAGEVIEWS + "CREATE STREAM copy AS SELECT * FROM pageviews;\n",
             "security/roles.yml": roles}
    project = load(tmp_path, files)
    assert {(g.privilege, g.on) for g in project.grants} == {
        ("CREATE_STORE", "organization"), ("MANAGE", "query.analytics.public.copy"), ("ALL", "store.kafka_main")}
    resources = {str(r.address): r for r in project_resources(project)}
    assert resources["grant.ops.create_store.organization"].depends_on == (Address(Kind.ROLE, "ops"),)
    assert resources["binding.root"].data == {"user": "root", "roles": ["ops", "orgadmin"]}
    assert resources["binding.root"].depends_on == (Address(Kind.ROLE, "ops"),)


def test_grants_to_a_builtin_role_depend_on_the_object_only(tmp_path):
    roles = "roles: []\n"
    sql = "GRANT SELECT ON STREAM pageviews TO ROLE public;\n"
    project = load(tmp_path, {**SOURCES, "security/roles.yml": roles, "sql/zz_grants.sql": sql})
    resources = {str(r.address): r for r in project_resources(project)}
    assert resources[f"grant.public.select.{PV}"].depends_on == (Address.parse(PV),)


# --- SQL statements ------------------------------------------------------------------------------------------


def test_sql_grant_revoke_and_role_statements_apply_in_file_order(tmp_path):
    sql_a = """\
    CREATE ROLE writer WITH ('inherits' = 'analyst, public');
    GRANT INSERT, SELECT ON STREAM pageviews TO ROLE writer;
    GRANT USAGE, CREATE ON SCHEMA public TO ROLE writer;
    GRANT ROLE writer TO USER bob;
    GRANT ROLE analyst TO USER "carol@example.com";
    """
    sql_b = """\
    REVOKE SELECT ON RELATION analytics.public.pageviews FROM ROLE analyst;
    REVOKE CREATE ON SCHEMA analytics.public FROM ROLE writer;
    REVOKE ROLE analyst FROM USER alice;
    GRANT CREATE_DATABASE ON ORGANIZATION TO ROLE writer;
    """
    project = load(tmp_path, {**BASE, "sql/a_access.sql": sql_a, "sql/b_revoke.sql": sql_b})
    assert ("writer", ("analyst", "public")) in [(r.name, r.inherits) for r in project.roles]
    assert {(g.role, g.privilege, g.on) for g in project.grants} == {
        ("analyst", "USAGE", "database.analytics"), ("writer", "INSERT", PV), ("writer", "SELECT", PV),
        ("writer", "USAGE", "schema.analytics.public"), ("writer", "CREATE_DATABASE", "organization")}
    assert {b.user: b.roles for b in project.bindings} == {
        "alice": (), "bob": ("writer",), "carol@example.com": ("analyst",)}


def test_sql_grants_on_queries_stores_databases_and_the_organization(tmp_path):
    sql = """\
    GRANT MANAGE ON QUERY copy TO ROLE analyst;
    GRANT USAGE ON STORE kafka_main TO ROLE analyst;
    GRANT ALL PRIVILEGES ON DATABASE analytics TO ROLE engineer;
    GRANT CREATE_ROLE, MANAGE_GRANTS ON ORGANIZATION acme TO ROLE engineer;
    """
    project = load(tmp_path, {**BASE, "sql/sources.sql": COPY, "sql/zz.sql": sql})
    assert {(g.role, g.privilege, g.on) for g in project.grants} - {
        ("analyst", "SELECT", PV), ("analyst", "USAGE", "database.analytics")} == {
        ("analyst", "MANAGE", "query.analytics.public.copy"), ("analyst", "USAGE", "store.kafka_main"),
        ("engineer", "ALL", "database.analytics"), ("engineer", "CREATE_ROLE", "organization"),
        ("engineer", "MANAGE_GRANTS", "organization")}


def test_a_warm_load_from_the_load_cache_keeps_every_access_statement(tmp_path):
    sql = COPY + "GRANT INSERT ON STREAM pageviews TO ROLE analyst;\nGRANT ROLE engineer TO USER erin;\n"
    root = make_project(tmp_path, {**BASE, "sql/sources.sql": sql})
    cold, warm = load_project(root), load_project(root)
    assert (root / ".dsflow" / "cache").is_dir()
    assert warm == cold and f"analyst.insert.{PV}" in [g.key for g in warm.grants]


def test_a_revoke_before_its_grant_is_a_warning_naming_file_and_line(tmp_path):
    files = {**BASE, "sql/a_revoke.sql": "\nREVOKE INSERT ON STREAM pageviews FROM ROLE analyst;\n",
             "sql/b_grant.sql": "GRANT INSERT ON STREAM pageviews TO ROLE analyst;\n"}
    result = check_project(make_project(tmp_path, files))
    d = only(result.diagnostics, "DSF-E304")
    assert d.severity is Severity.WARNING and d.location == Location("sql/a_revoke.sql", 2, 8)
    assert "REVOKE INSERT ON relation.analytics.public.pageviews FROM ROLE analyst" in d.message
    assert "path order" in d.hint
    assert result.project is not None  # a warning: the grant of the later file stands
    assert ("analyst", "INSERT", PV) in {(g.role, g.privilege, g.on) for g in result.project.grants}


def test_revoke_all_removes_every_grant_of_the_role_on_the_object(tmp_path):
    sql = "GRANT INSERT ON STREAM pageviews TO ROLE analyst;\nREVOKE ALL ON STREAM pageviews FROM ROLE analyst;\n"
    project = load(tmp_path, {**BASE, "sql/zz.sql": sql})
    assert [(g.privilege, g.on) for g in project.grants] == [("USAGE", "database.analytics")]


def test_revoke_role_not_bound_is_a_warning(tmp_path):
    d = only(diagnostics(tmp_path, {**BASE, "sql/zz.sql": "REVOKE ROLE engineer FROM USER alice;\n"}), "DSF-E305")
    assert d.severity is Severity.WARNING and d.location == Location("sql/zz.sql", 1, 1)


@pytest.mark.parametrize("sql, message, col, form", [
    ("GRANT SELECT ON STREAM TO ROLE analyst", "expected a name, found 'TO'", 24, "GRANT <privilege>"),
    ("GRANT SELECT ON FOO pageviews TO ROLE analyst", "unknown object type 'FOO'", 17, "GRANT <privilege>"),
    ("REVOKE SELECT ON STREAM pageviews TO ROLE analyst", "expected FROM, found 'TO'", 35, "REVOKE <privilege>"),
    ("GRANT ROLE analyst TO bob", "expected USER, found 'bob'", 23, "GRANT ROLE <role> TO USER <user>"),
    ("CREATE ROLE r WITH ('parent' = 'x')", "unknown property 'parent' of CREATE ROLE (only 'inherits')", 21,
     "CREATE ROLE <name>"),
    ("REVOKE ROLE a.b FROM USER bob", "'a.b' is no role or user name", 15, "REVOKE ROLE <role> FROM USER <user>"),
    ("GRANT", "the statement ends too early", 1, "GRANT <privilege>"),
])
def test_e303_malformed_access_statement(tmp_path, sql, message, col, form):
    d = only(diagnostics(tmp_path, {**BASE, "sql/zz.sql": sql + ";\n"}), "DSF-E303")
    assert message in d.message and d.location == Location("sql/zz.sql", 1, col)
    assert d.hint.startswith(form)


def test_access_statements_do_not_disturb_other_statements_in_the_file(tmp_path):
    sql = PAGEVIEWS + "GRANT SELECT ON STREAM pageviews TO ROLE analyst;\n" \
        "CREATE STREAM copy AS SELECT * FROM pageviews;\n"
    project = load(tmp_path, {"sql/sources.sql": sql, "security/roles.yml": "roles:\n  - name: analyst\n"})
    assert [q.fqn for q in project.queries] == ["analytics.public.copy"]
    assert [g.key for g in project.grants] == [f"analyst.select.{PV}"]


# --- diagnostics ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("privilege, on, message, hint", [
    ("SELECT", "database.analytics", "privilege SELECT does not apply to database 'analytics'",
     "privileges of a database: USAGE, CREATE, ALL"),
    ("CREATE", "pageviews", "privilege CREATE does not apply to relation 'analytics.public.pageviews'",
     "privileges of a relation: SELECT, INSERT, ALL"),
    ("USAGE", "organization", "privilege USAGE does not apply to the organization",
     "privileges of the organization: CREATE_STORE, CREATE_DATABASE, CREATE_ROLE, MANAGE_GRANTS, MANAGE_USERS, ALL"),
    ("DROP", "store.kafka_main", "unknown privilege 'DROP'", "privileges of a store: USAGE, ALL"),
])
def test_e300_privilege_not_valid_for_the_object_type(tmp_path, privilege, on, message, hint):
    roles = f"roles:\n  - name: analyst\n    grants:\n      - privilege: {privilege}\n        on: {on}\n"
    d = only(diagnostics(tmp_path, {**SOURCES, "security/roles.yml": roles}), "DSF-E300")
    assert d.message == message and d.hint == hint
    assert d.location == Location("security/roles.yml", 4, 9)


def test_e300_in_sql_points_at_the_privilege(tmp_path):
    sql = "GRANT SELECT, MANAGE ON STREAM pageviews TO ROLE analyst;\n"
    d = only(diagnostics(tmp_path, {**BASE, "sql/zz.sql": sql}), "DSF-E300")
    assert d.location == Location("sql/zz.sql", 1, 15) and "MANAGE" in d.message


@pytest.mark.parametrize("roles", [
    "roles:\n  - name: sysadmin\n",
    "roles:\n  - name: a\n",  # CREATE ROLE public in SQL below
])
def test_e301_builtin_roles_cannot_be_redefined(tmp_path, roles):
    sql = "CREATE ROLE public;\n" if roles.endswith("a\n") else "\n"
    d = only(diagnostics(tmp_path, {**SOURCES, "security/roles.yml": roles, "sql/zz.sql": sql}), "DSF-E301")
    assert "is built in and cannot be redefined" in d.message and "orgadmin" in d.hint


def test_e302_unknown_role_in_a_binding_and_in_sql(tmp_path):
    roles = ROLES.replace("roles: [analyst]", "roles: [analyts]")
    sql = "GRANT SELECT ON STREAM pageviews TO ROLE enginer;\nGRANT ROLE analst TO USER bob;\n"
    found = [d for d in diagnostics(tmp_path, {**SOURCES, "security/roles.yml": roles, "sql/zz.sql": sql})
             if d.code == "DSF-E302"]
    assert [(d.location, d.message, d.hint) for d in found] == [
        (Location("security/roles.yml", 12, 5), "user 'alice' names unknown role 'analyts'",
         "did you mean 'analyst'?"),
        (Location("sql/zz.sql", 1, 1), "GRANT names unknown role 'enginer'", "did you mean 'engineer'?"),
        (Location("sql/zz.sql", 2, 1), "GRANT ROLE names unknown role 'analst'", "did you mean 'analyst'?")]


def test_e071_and_e307_sql_objects(tmp_path):
    sql = "GRANT SELECT ON STREAM pagevews TO ROLE analyst;\nGRANT SELECT ON CHANGELOG pageviews TO ROLE analyst;\n" \
        "REVOKE MANAGE ON QUERY nothing FROM ROLE analyst;\n"
    found = diagnostics(tmp_path, {**BASE, "sql/zz.sql": sql})
    kind = only(found, "DSF-E307")
    unknown = [(d.message, d.location) for d in found if d.code == "DSF-E071"]
    assert unknown == [("grant on unknown stream 'pagevews'", Location("sql/zz.sql", 1, 24)),
                       ("revoke on unknown query 'nothing'", Location("sql/zz.sql", 3, 24))]
    assert kind.message == "'pageviews' is a stream, not a changelog" and "ON STREAM pageviews" in kind.hint


def test_e306_owner_names_an_unknown_role(tmp_path):
    stores = "stores:\n  - name: kafka_main\n    type: kafka\n    bootstrap_servers: a:1\n    owner: analsyt\n"
    sql = PAGEVIEWS.replace("'timestamp' = 'viewtime'", "'timestamp' = 'viewtime', 'owner' = 'nobody'")
    found = [d for d in diagnostics(tmp_path, {"sql/sources.sql": sql, "security/roles.yml": ROLES,
                                               "stores/kafka.yml": stores}) if d.code == "DSF-E306"]
    assert [(d.message, d.location.file, d.hint) for d in found] == [
        ("stream 'analytics.public.pageviews' is owned by unknown role 'nobody'", "sql/sources.sql",
         "known: analyst, engineer, orgadmin, public, securityadmin, sysadmin, useradmin"),
        ("store 'kafka_main' is owned by unknown role 'analsyt'", "stores/kafka.yml", "did you mean 'analyst'?")]


def test_duplicate_users_and_roles_across_yaml_and_sql(tmp_path):
    users = "users:\n  - name: alice\n    roles: []\n"
    found = diagnostics(tmp_path, {**BASE, "security/more.yml": users, "sql/zz.sql": "CREATE ROLE analyst;\n"})
    assert sorted(d.message for d in found if d.code == "DSF-E020") == [
        "role 'analyst' is defined twice", "user 'alice' is defined twice"]


def test_bad_role_and_user_names_are_yaml_errors(tmp_path):
    found = diagnostics(tmp_path, {**SOURCES, "security/roles.yml": "users:\n  - name: 'a b'\n"})
    assert only(found, "DSF-E012").location == Location("security/roles.yml", 2, 11)


# --- owners --------------------------------------------------------------------------------------------------


def test_owner_is_in_metadata_only_when_declared(tmp_path):
    databases = "databases:\n  - name: analytics\n    owner: analyst\n    schemas: [public, {name: curated, " \
                "owner: engineer}]\n"
    sql = PAGEVIEWS + "CREATE STREAM copy WITH ('owner' = 'engineer') AS SELECT * FROM pageviews;\n"
    project = load(tmp_path, {**BASE, "sql/sources.sql": sql, "databases.yml": databases})
    resources = {str(r.address): r for r in project_resources(project)}
    assert resources["database.analytics"].metadata == {"description": "", "owner": "analyst"}
    assert resources["schema.analytics.curated"].metadata == {"owner": "engineer"}
    assert resources["schema.analytics.public"].metadata == {}
    assert "owner" not in resources[PV].metadata and "owner" not in resources["store.kafka_main"].metadata
    assert resources["relation.analytics.public.copy"].metadata["owner"] == "engineer"
    assert resources["query.analytics.public.copy"].metadata["owner"] == "engineer"
    assert all("owner" not in r.data for r in resources.values())


COPY = PAGEVIEWS + "CREATE STREAM copy AS SELECT * FROM pageviews;\n"


def test_an_owner_change_is_an_in_place_update_that_restarts_nothing(tmp_path):
    owned = COPY.replace("CREATE STREAM copy AS", "CREATE STREAM copy WITH ('owner' = 'engineer') AS")
    plan = deployed_then_edited(tmp_path, {**BASE, "sql/sources.sql": COPY}, {**BASE, "sql/sources.sql": owned})
    assert sorted(actions(plan)) == [("query.analytics.public.copy", Action.UPDATE),
                                     ("relation.analytics.public.copy", Action.UPDATE)]
    for change in plan.actionable:
        assert change.reason == "owner changed (in place)" and "keeps running" in change.effect
        assert change.category is None and change.after_metadata["owner"] == "engineer"
    query = next(c for c in plan.actionable if c.address.startswith("query."))
    before = {k: v for k, v in query.after_metadata.items() if k != "owner"}
    deployed = DeployedResource(address=query.address, depends_on=query.depends_on, data_hash=query.data_hash,
                                metadata_hash="old", data=query.before, metadata=before,
                                outputs={"pid": 4242, "checkpoint": "/nowhere"})
    # the real apply step: with only the owner changed no executor runs (no context is needed), outputs are kept
    assert run_change(None, query, deployed) == {"pid": 4242, "checkpoint": "/nowhere"}


def test_a_store_owner_change_updates_the_store_only(tmp_path):
    stores = "stores:\n  - name: kafka_main\n    type: kafka\n    bootstrap_servers: a:1\n"
    plan = deployed_then_edited(tmp_path, {**BASE, "sql/sources.sql": COPY, "stores/kafka.yml": stores},
                                {**BASE, "sql/sources.sql": COPY, "stores/kafka.yml": stores + "    owner: analyst\n"})
    assert actions(plan) == [("store.kafka_main", Action.UPDATE)]


# --- plans ---------------------------------------------------------------------------------------------------


def test_adding_and_removing_a_grant_plans_a_create_and_a_delete(tmp_path):
    edited = ROLES.replace("  - name: engineer\n", "  - name: engineer\n    grants:\n      - privilege: INSERT\n"
                                                    "        on: pageviews\n")
    edited = edited.replace("      - privilege: usage\n        on: database.analytics\n", "")
    plan = deployed_then_edited(tmp_path, BASE, {**SOURCES, "security/roles.yml": edited})
    assert sorted(actions(plan)) == [("grant.analyst.usage.database.analytics", Action.DELETE),
                                     (f"grant.engineer.insert.{PV}", Action.CREATE)]
    text = plan_text(json.loads(plan.model_dump_json()))
    assert f"+ grant.engineer.insert.{PV}" in text and "- grant.analyst.usage.database.analytics" in text


def test_a_sql_revoke_deletes_a_deployed_grant(tmp_path):
    plan = deployed_then_edited(tmp_path, BASE, {**BASE, "sql/zz_revoke.sql":
                                                 "REVOKE SELECT ON STREAM pageviews FROM ROLE analyst;\n"})
    assert actions(plan) == [(f"grant.analyst.select.{PV}", Action.DELETE)]


def test_a_binding_change_is_an_in_place_update(tmp_path):
    plan = deployed_then_edited(tmp_path, BASE, {**BASE, "sql/zz.sql": "GRANT ROLE engineer TO USER alice;\n"})
    assert actions(plan) == [("binding.alice", Action.UPDATE)]
    change = plan.actionable[0]
    assert change.before == {"user": "alice", "roles": ["analyst"]}
    assert change.after == {"user": "alice", "roles": ["analyst", "engineer"]}
    assert "~ binding.alice" in plan_text(json.loads(plan.model_dump_json()))


def test_a_project_without_access_declarations_plans_as_before(tmp_path):
    resources = project_resources(load(tmp_path, SOURCES))
    assert not any(r.address.kind in (Kind.BINDING, Kind.GRANT, Kind.ROLE) for r in resources)
    assert all("owner" not in r.metadata for r in resources)


# --- the seam with the evaluator (dsflow/core/access.py) ----------------------------------------------------


def test_the_loader_and_the_evaluator_agree_on_privileges_and_builtin_roles():
    from dsflow.core import access
    from dsflow.core.model import BUILTIN_ROLES, PRIVILEGES

    assert {kind: set(names) - {"ALL"} for kind, names in PRIVILEGES.items()} == \
        {kind: {p.value for p in held} for kind, held in access.APPLICABLE.items()}
    assert set(BUILTIN_ROLES) == set(access.BUILTIN_ROLES)


def test_declared_access_evaluates_as_declared(tmp_path):
    """The resources a project yields are what the server's model is built from (data and metadata merged)."""
    from dsflow.core.access import AccessModel

    sql = COPY.replace("CREATE STREAM copy AS", "CREATE STREAM copy WITH ('owner' = 'engineer') AS") + \
        "GRANT USAGE ON SCHEMA public TO ROLE analyst;\nGRANT ROLE engineer TO USER dave;\n"
    project = load(tmp_path, {**BASE, "sql/sources.sql": sql})
    model = AccessModel.from_records((str(r.address), {**r.data, **r.metadata}) for r in project_resources(project))
    assert model.roles_of("alice") == {"analyst", "public"}
    assert model.roles_of("dave") == {"engineer", "analyst", "public"}
    assert model.check("alice", "SELECT", PV).allowed
    denied = model.check("alice", "SELECT", "relation.analytics.public.copy")
    assert not denied.allowed and "lacks SELECT on relation.analytics.public.copy" in denied.message
    assert model.owner_of("query.analytics.public.copy") == "engineer"
    assert model.check("dave", "MANAGE", "query.analytics.public.copy").allowed
