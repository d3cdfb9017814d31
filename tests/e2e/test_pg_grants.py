"""Grants on materialized views and tables kept in PostgreSQL, pushed down as PostgreSQL roles and GRANT/REVOKE (the
session's server (tests/support/pgserver.py), the database of test_pg_views' module fixture).

apply is targeted at the roles and grants: it creates the views' and the table's tables (their ancestors) and no
query, so no Spark runs; the privilege check needs only the tables. Each check is `SET ROLE <mapped role>` in a
fresh psql session of the superuser, then a SELECT.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters.postgres import grants
from dsflow.adapters.postgres.grants import role_name
from dsflow.core.plan import Action, Change, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.safety import Allowance
from dsflow.core.state import State
from dsflow.engine.executors import Context, GrantExecutor
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, PAGEVIEWS, applied, make_project
from support.streaming import CONFIG
import test_pg_views
from test_pg_views import STORES, psql

pytestmark = pytest.mark.integration
pgdb = test_pg_views.pgdb  # the module's own database, created and dropped like test_pg_views'

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE MATERIALIZED VIEW user_counts WITH ('store' = 'pg') AS
  SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;
CREATE MATERIALIZED VIEW page_counts WITH ('store' = 'pg') AS
  SELECT pageid, COUNT(*) AS views FROM pageviews GROUP BY pageid;
CREATE TABLE user_totals WITH ('store' = 'pg') AS
  SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;
GRANT SELECT ON MATERIALIZED VIEW page_counts TO ROLE public;
"""

ROLES = """\
roles:
  - name: reader
    grants: [{privilege: SELECT, on: user_counts}]
  - name: analyst
    inherits: [reader]
  - name: other
    grants: [{privilege: ALL, on: page_counts}, {privilege: ALL, on: user_totals}]
"""


def as_role(database: str, role: str, statement: str) -> subprocess.CompletedProcess:
    sql = f'SET ROLE "{role}"; {statement}'
    return subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database, "-tA", "-v",
                           "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True, timeout=30)


def can_read(database: str, role: str, table: str) -> bool:
    out = as_role(database, role, f"SELECT COUNT(*) FROM {table}")
    if out.returncode == 0:
        return True
    assert "permission denied" in out.stderr, out.stderr
    return False


class Deployment:
    """A project whose views live in `pgdb`; apply/destroy targeted at its roles and grants (no query runs)."""

    def __init__(self, tmp_path: Path, database: str) -> None:
        self.name = f"grants{uuid.uuid4().hex[:6]}"
        config = CONFIG.format(prefix=f"{self.name}_").replace("name: streamtest", f"name: {self.name}")
        self.root = make_project(tmp_path, {"dsflow.yml": config, "stores/kafka.yml": STORES % database,
                                            "sql/all.sql": SQL, "roles.yml": ROLES})
        self.options = operations.Options(self.root, None, {"bootstrap": "127.0.0.1:9"})

    def role(self, name: str) -> str:
        return role_name(self.name, "dev", name)

    def plan(self, destroy: bool = False):
        loaded = operations.load(self.options)
        targets = frozenset() if destroy else frozenset(
            f"{kind}.{key}" for kind, key in
            [("role", r.name) for r in loaded.project.roles] + [("grant", g.key) for g in loaded.project.grants])
        return loaded, operations.plan(loaded, destroy=destroy, targets=targets)

    def apply(self, destroy: bool = False):
        loaded, plan = self.plan(destroy)
        result = operations.apply(loaded, plan, allowance=Allowance(everything=True))
        assert result.ok, result.failed
        return plan

    def edit(self, path: str, old: str, new: str) -> None:
        file = self.root / path
        text = file.read_text()
        assert old in text
        file.write_text(text.replace(old, new))


def test_granted_views_only_and_inheritance_and_revoke_and_destroy(tmp_path, pgdb) -> None:
    deployment = Deployment(tmp_path, pgdb)
    reader, analyst, other = (deployment.role(n) for n in ("reader", "analyst", "other"))
    deployment.apply()
    assert psql(pgdb, f"SELECT rolcanlogin FROM pg_roles WHERE rolname = '{reader}'") == "f"  # NOLOGIN
    assert can_read(pgdb, reader, "user_counts") and not can_read(pgdb, reader, "page_counts")
    assert can_read(pgdb, analyst, "user_counts") and not can_read(pgdb, analyst, "page_counts")  # inherited
    assert can_read(pgdb, other, "page_counts") and not can_read(pgdb, other, "user_counts")  # ALL -> SELECT
    assert can_read(pgdb, other, "user_totals")  # a table (CREATE TABLE ... AS SELECT) as a view's table
    assert not can_read(pgdb, reader, "user_totals") and not can_read(pgdb, analyst, "user_totals")
    for table, values in (("page_counts", "('p', 1)"), ("user_totals", "('u', 1)")):  # read-only: ALL is SELECT
        assert as_role(pgdb, other, f"INSERT INTO {table} VALUES {values}").returncode != 0
    public = deployment.role("public")  # a built-in role (no role resource), granted in SQL
    assert can_read(pgdb, public, "page_counts") and not can_read(pgdb, public, "user_counts")

    _, again = deployment.plan()
    assert not again.has_changes, again.actionable  # refresh finds every grant in place
    loaded = operations.load(deployment.options)
    address = "grant.reader.select.relation.analytics.public.user_counts"
    recorded = loaded.workspace.state_backend().read().resources[address].outputs
    assert recorded["postgresql"]["roles"] == [reader, analyst] and recorded["postgresql"]["table"] == "user_counts"
    on_table = loaded.workspace.state_backend().read().resources[
        "grant.other.all.relation.analytics.public.user_totals"].outputs["postgresql"]
    assert (on_table["schema"], on_table["table"], on_table["roles"]) == ("public", "user_totals", [other])
    change = Change(address=address, action=Action.CREATE, reason="again", after=dict(
        role="reader", privilege="SELECT", on="relation.analytics.public.user_counts"))
    ctx = Context(project=loaded.project, workspace=loaded.workspace)
    assert GrantExecutor().create(ctx, change) == recorded  # an interrupted apply runs it again: idempotent

    assert grants.below(loaded.project, "sysadmin") == ["sysadmin", "orgadmin"]  # orgadmin inherits sysadmin

    deployment.edit("roles.yml", "    grants: [{privilege: SELECT, on: user_counts}]\n", "")
    deployment.edit("roles.yml", ", {privilege: ALL, on: user_totals}", "")
    plan = deployment.apply()
    assert [c.action for c in plan.actionable if c.address.startswith("grant.")] == [Action.DELETE] * 2
    assert not can_read(pgdb, reader, "user_counts") and not can_read(pgdb, analyst, "user_counts")
    assert can_read(pgdb, other, "page_counts") and not can_read(pgdb, other, "user_totals")  # revoked

    psql(pgdb, f'GRANT SELECT ON page_counts TO "{reader}"')  # granted by hand: PostgreSQL refuses to drop it
    loaded, plan = deployment.plan(destroy=True)
    result = operations.apply(loaded, plan)
    assert not result.ok and result.failed[0].address == "role.reader" and result.failed[1].code == "DSF-E372"
    assert reader in result.failed[1].message
    psql(pgdb, f'REVOKE SELECT ON page_counts FROM "{reader}"')
    deployment.apply(destroy=True)  # the interrupted destroy, run again, converges
    assert psql(pgdb, f"SELECT COUNT(*) FROM pg_roles WHERE rolname LIKE 'dsflow\\_{deployment.name}\\_%'") == "0"
    assert psql(pgdb, "SELECT to_regclass('user_counts') IS NULL AND to_regclass('page_counts') IS NULL "
                      "AND to_regclass('user_totals') IS NULL") == "t"
    grants.revoke_grant(loaded.project, recorded)  # a destroy run again: role and table gone, nothing to revoke


def test_replaced_or_recreated_view_gets_its_grants_again(tmp_path, pgdb) -> None:
    deployment = Deployment(tmp_path, pgdb)
    reader, analyst = deployment.role("reader"), deployment.role("analyst")
    deployment.apply()
    try:
        # the view's key changes: its table is dropped and created again; the grant on it is replaced after it
        deployment.edit("sql/all.sql", "SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid",
                        "SELECT userid, pageid, COUNT(*) AS views FROM pageviews GROUP BY userid, pageid")
        plan = deployment.apply()
        order = [(c.address, c.action) for c in plan.actionable]
        view = "relation.analytics.public.user_counts"
        grant = f"grant.reader.select.{view}"
        assert (view, Action.REPLACE) in order and (grant, Action.REPLACE) in order, order
        assert order.index((view, Action.REPLACE)) < order.index((grant, Action.REPLACE))
        assert psql(pgdb, "SELECT COUNT(*) FROM information_schema.columns WHERE table_name = 'user_counts'") == "3"
        assert can_read(pgdb, reader, "user_counts") and can_read(pgdb, analyst, "user_counts")

        # drift: the tables (a view's, a table's) dropped behind dsflow's back (and re-created by the next apply),
        # a privilege revoked
        psql(pgdb, "DROP TABLE user_counts; DROP TABLE user_totals")
        psql(pgdb, f'REVOKE SELECT ON page_counts FROM "{deployment.role("other")}"')
        _, plan = deployment.plan()
        drift = sorted((c.address, c.action) for c in plan.actionable)
        table = "relation.analytics.public.user_totals"
        assert drift == [("grant.other.all.relation.analytics.public.page_counts", Action.UPDATE),
                         (f"grant.other.all.{table}", Action.UPDATE), (grant, Action.UPDATE),
                         (view, Action.UPDATE), (table, Action.UPDATE)], drift
        deployment.apply()
        assert can_read(pgdb, reader, "user_counts") and can_read(pgdb, deployment.role("other"), "page_counts")
        assert can_read(pgdb, deployment.role("other"), "user_totals")  # the table created again, granted again

        # inheritance removed: the analyst's mapped role leaves the reader's
        deployment.edit("roles.yml", "    inherits: [reader]\n", "")
        deployment.apply()
        assert can_read(pgdb, reader, "user_counts") and not can_read(pgdb, analyst, "user_counts")
    finally:
        deployment.apply(destroy=True)
    assert psql(pgdb, f"SELECT COUNT(*) FROM pg_roles WHERE rolname LIKE 'dsflow\\_{deployment.name}\\_%'") == "0"


def test_role_names_are_scoped_and_fit_postgresql() -> None:
    assert role_name("shop", "prod", "analyst") == "dsflow_shop_prod_analyst"
    long = role_name("p" * 40, "production", "r" * 40)
    assert len(long.encode()) <= 63 and long != role_name("p" * 40, "production", "r" * 39 + "s")
    assert role_name("p" * 40, "production", "r" * 40) == long


def test_a_grant_is_replaced_after_the_relation_it_is_on(tmp_path) -> None:
    """The plan alone (any store): a relation replaced replaces the grants on it, after it; others stay."""
    root = make_project(tmp_path, {"sql/s.sql": PAGEVIEWS, "roles.yml": """\
        roles:
          - name: reader
            grants: [{privilege: SELECT, on: pageviews}, {privilege: USAGE, on: database.analytics}]
        """})

    def plan(state: State):
        project = load_project(root, variables=EXAMPLE_VARIABLES)
        return make_plan(project.name, project.environment, project_resources(project), state)

    state = applied(plan(State()))
    (root / "sql/s.sql").write_text(PAGEVIEWS.replace("'topic' = 'pageviews'", "'topic' = 'pageviews2'"))
    changes = [(c.address, c.action) for c in plan(state).actionable]
    assert changes == [("relation.analytics.public.pageviews", Action.REPLACE),
                       ("grant.reader.select.relation.analytics.public.pageviews", Action.REPLACE)], changes
