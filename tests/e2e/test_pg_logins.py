"""dsflow users as PostgreSQL logins, and INSERT grants that are not pushed down (the real server on
the session's server (tests/support/pgserver.py), trust auth: any password is accepted, so the tests connect as the
login
itself and check what it may read, and check the stored SCRAM verifier against the password independently).

The project of test_pg_grants (views user_counts and page_counts and the table user_totals in PostgreSQL; reader
SELECT user_counts, analyst inherits reader, other ALL page_counts and user_totals) with `users:` added; apply is
targeted at roles, bindings and grants, so no query runs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import uuid

import pytest

from dsflow.adapters.postgres.logins import login_name
from dsflow.core.plan import Action
from dsflow.core.safety import Allowance
from dsflow.engine import operations
from dsflow.errors import Severity
from dsflow.load.project import check_project
from support.projects import make_project
import test_pg_grants
import test_pg_views
from test_pg_views import psql

pytestmark = pytest.mark.integration
pgdb = test_pg_views.pgdb  # the module's own database, created and dropped like test_pg_views'

PASSWORD_ENV = "DSFLOW_TEST_LOGIN_PASSWORD"


class Deployment(test_pg_grants.Deployment):
    """test_pg_grants' deployment, its plans also targeted at the user bindings."""

    def plan(self, destroy: bool = False):
        loaded = operations.load(self.options)
        targets = frozenset() if destroy else frozenset(
            [f"role.{r.name}" for r in loaded.project.roles] + [f"grant.{g.key}" for g in loaded.project.grants]
            + [f"binding.{b.user}" for b in loaded.project.bindings])
        return loaded, operations.plan(loaded, destroy=destroy, targets=targets)

    def users(self, text: str) -> None:
        (self.root / "users.yml").write_text(text)


def as_login(database: str, login: str, statement: str) -> subprocess.CompletedProcess:
    """A session opened as `login` itself (trust auth lets any login in without its password)."""
    return subprocess.run(["psql", "-h", "127.0.0.1", "-U", login, "-d", database, "-tA", "-v", "ON_ERROR_STOP=1",
                           "-c", statement], capture_output=True, text=True, timeout=30)


def can(database: str, login: str, statement: str) -> bool:
    out = as_login(database, login, statement)
    if out.returncode == 0:
        return True
    assert "permission denied" in out.stderr, out.stderr
    return False


def reads(database: str, login: str, table: str) -> bool:
    return can(database, login, f"SELECT COUNT(*) FROM {table}")


def scram_matches(verifier: str, password: str) -> bool:
    """RFC 5802/7677 by hand: the verifier `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` is of
    `password` (ASCII, so SASLprep leaves it as it is)."""
    method, rest = verifier.split("$", 1)
    params, keys = rest.split("$")
    iterations, salt = params.split(":")
    stored, server = (base64.b64decode(k) for k in keys.split(":"))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    return method == "SCRAM-SHA-256" and hashlib.sha256(client_key).digest() == stored \
        and hmac.new(salted, b"Server Key", hashlib.sha256).digest() == server


def role_row(database: str, login: str) -> str:
    return psql(database, "SELECT rolcanlogin::text || ' ' || coalesce(rolpassword, '-') FROM pg_authid "
                          f"WHERE rolname = '{login}'")


def test_users_become_logins_that_read_what_their_roles_were_granted(tmp_path, pgdb, monkeypatch) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv(PASSWORD_ENV, password)
    deployment = Deployment(tmp_path, pgdb)
    ann, bob = f"ann_{deployment.name}", f"bob.{deployment.name}@example.com"  # a user name may hold '.' and '@'
    deployment.users(f"""\
users:
  - name: {ann}
    roles: [analyst]
    login_password: "{{{{ env_var('{PASSWORD_ENV}') }}}}"
  - name: "{bob}"
    roles: [other]
""")
    try:
        loaded, plan = deployment.plan()
        creates = {c.address for c in plan.actionable if c.action is Action.CREATE}
        assert {f"binding.{ann}", f"binding.{bob}"} <= creates
        assert password not in json.dumps(plan.model_dump(mode="json"))
        result = operations.apply(loaded, plan, allowance=Allowance(everything=True))
        assert result.ok, result.failed

        can_login, verifier = role_row(pgdb, ann).split(" ")
        assert can_login == "true" and scram_matches(verifier, password) and not scram_matches(verifier, "x")
        assert role_row(pgdb, login_name(bob)) == "true -"  # no password: only the server's own auth lets it in
        assert reads(pgdb, ann, "user_counts") and not reads(pgdb, ann, "page_counts")  # analyst inherits reader
        assert reads(pgdb, bob, "page_counts") and not reads(pgdb, bob, "user_counts")
        assert reads(pgdb, bob, "user_totals") and not reads(pgdb, ann, "user_totals")  # a table, as a view
        assert not can(pgdb, bob, "INSERT INTO page_counts VALUES ('p', 1)")  # ALL grants SELECT only
        written = b"".join(p.read_bytes() for p in deployment.root.rglob("*") if p.is_file())  # state included
        assert password.encode() not in written

        _, again = deployment.plan()
        assert not again.has_changes, again.actionable  # refresh finds the logins and memberships in place

        psql(pgdb, f'REVOKE "{deployment.role("other")}" FROM "{bob}"')  # drift: a membership revoked by hand
        _, drift = deployment.plan()
        assert [(c.address, c.action) for c in drift.actionable] == [(f"binding.{bob}", Action.UPDATE)]
        assert "not a member" in drift.actionable[0].reason
        deployment.apply()
        assert reads(pgdb, bob, "page_counts")

        monkeypatch.setenv(PASSWORD_ENV, password + "2")  # a new password: the binding is updated in place
        deployment.edit("users.yml", "roles: [analyst]", "roles: [other]")
        plan = deployment.apply()
        assert [(c.address, c.action) for c in plan.actionable] == [(f"binding.{ann}", Action.UPDATE)]
        assert scram_matches(role_row(pgdb, ann).split(" ")[1], password + "2")
        assert reads(pgdb, ann, "page_counts") and not reads(pgdb, ann, "user_counts")  # the binding moved

        deployment.users(f"users:\n  - name: {ann}\n    roles: [other]\n    login_password: "
                         f"\"{{{{ env_var('{PASSWORD_ENV}') }}}}\"\n")
        plan = deployment.apply()  # bob left the project: its login is dropped
        assert [(c.address, c.action) for c in plan.actionable] == [(f"binding.{bob}", Action.DELETE)]
        assert psql(pgdb, f"SELECT COUNT(*) FROM pg_roles WHERE rolname = '{bob}'") == "0"
        assert reads(pgdb, ann, "page_counts")
    finally:
        deployment.apply(destroy=True)
    assert psql(pgdb, f"SELECT COUNT(*) FROM pg_roles WHERE rolname IN ('{ann}', '{bob}') "
                      f"OR rolname LIKE 'dsflow\\_{deployment.name}\\_%'") == "0"


def test_an_existing_role_is_adopted_never_altered_and_kept_on_destroy(tmp_path, pgdb, monkeypatch) -> None:
    deployment = Deployment(tmp_path, pgdb)
    carl = f"carl_{deployment.name}"
    psql(pgdb, f'CREATE ROLE "{carl}" LOGIN PASSWORD \'theirs\'')
    try:
        before = role_row(pgdb, carl)
        deployment.users(f"users:\n  - name: {carl}\n    roles: [reader]\n")
        deployment.apply()
        assert role_row(pgdb, carl) == before  # password and attributes untouched
        assert reads(pgdb, carl, "user_counts") and not reads(pgdb, carl, "page_counts")

        monkeypatch.setenv(PASSWORD_ENV, "secret-one")
        deployment.users(f"users:\n  - name: {carl}\n    roles: [reader]\n    login_password: "
                         f"\"{{{{ env_var('{PASSWORD_ENV}') }}}}\"\n")
        loaded, plan = deployment.plan()
        result = operations.apply(loaded, plan, allowance=Allowance(everything=True))
        assert not result.ok and any(getattr(f, "code", "") == "DSF-E375" and carl in f.message
                                     for f in result.failed), result.failed
        assert role_row(pgdb, carl) == before
        deployment.users(f"users:\n  - name: {carl}\n    roles: [reader]\n")
        deployment.apply(destroy=True)
        assert role_row(pgdb, carl) == before  # not dsflow's: kept, its memberships revoked
        assert psql(pgdb, f"SELECT COUNT(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member "
                          f"WHERE r.rolname = '{carl}'") == "0"
    finally:
        psql(pgdb, f'DROP ROLE IF EXISTS "{carl}"')
        deployment.apply(destroy=True)


def test_a_login_that_owns_objects_is_not_dropped_until_they_are_gone(tmp_path, pgdb) -> None:
    deployment = Deployment(tmp_path, pgdb)
    dora = f"dora_{deployment.name}"
    deployment.users(f"users:\n  - name: {dora}\n    roles: [reader]\n")
    deployment.apply()
    psql(pgdb, f'GRANT CREATE ON SCHEMA public TO "{dora}"')
    assert as_login(pgdb, dora, f"CREATE TABLE {dora}_own (x int)").returncode == 0
    loaded, plan = deployment.plan(destroy=True)
    result = operations.apply(loaded, plan)
    assert not result.ok and any(getattr(f, "code", "") == "DSF-E376" and dora in f.message
                                  for f in result.failed), result.failed
    psql(pgdb, f'DROP TABLE {dora}_own; REVOKE CREATE ON SCHEMA public FROM "{dora}"')
    deployment.apply(destroy=True)  # run again, it converges
    assert psql(pgdb, f"SELECT COUNT(*) FROM pg_roles WHERE rolname = '{dora}' "
                      f"OR rolname LIKE 'dsflow\\_{deployment.name}\\_%'") == "0"


def test_insert_is_not_pushed_down_and_says_so(tmp_path, pgdb) -> None:
    deployment = Deployment(tmp_path, pgdb)
    erin = f"erin_{deployment.name}"
    (deployment.root / "writer.yml").write_text(
        "roles:\n  - name: writer\n    grants: [{privilege: INSERT, on: user_counts}, {privilege: INSERT, on: "
        "user_totals}]\n")
    deployment.users(f"users:\n  - name: {erin}\n    roles: [reader, writer]\n")
    warnings = [d for d in check_project(deployment.root, variables={"bootstrap": "127.0.0.1:9"}).diagnostics
                if d.code == "DSF-E373"]
    assert len(warnings) == 2 and {w.severity for w in warnings} == {Severity.WARNING}
    view, table = sorted(warnings, key=lambda w: w.message)
    assert "analytics.public.user_counts" in view.message and view.location.file == "writer.yml"
    assert "dsflow alone writes the view's table" in view.message
    assert "analytics.public.user_totals" in table.message and "dsflow alone writes the table" in table.message
    try:
        deployment.apply()
        loaded = operations.load(deployment.options)
        recorded = loaded.workspace.state_backend().read().resources
        for name in ("user_counts", "user_totals"):  # recorded only
            assert recorded[f"grant.writer.insert.relation.analytics.public.{name}"].outputs == {}
        assert psql(pgdb, f"SELECT COUNT(*) FROM pg_roles WHERE rolname = '{deployment.role('writer')}'") == "0"
        assert reads(pgdb, erin, "user_counts")  # SELECT through reader
        for table, values in (("user_counts", "('u', 1)"), ("page_counts", "('p', 1)"), ("user_totals", "('u', 1)")):
            assert not can(pgdb, erin, f"INSERT INTO {table} VALUES {values}")
        other = deployment.role("other")  # ALL on page_counts: SELECT only
        assert psql(pgdb, f"SELECT has_table_privilege('{other}', 'page_counts', 'SELECT')::text || "
                          f"has_table_privilege('{other}', 'page_counts', 'INSERT')::text") == "truefalse"
    finally:
        deployment.apply(destroy=True)


def test_a_login_password_in_clear_text_is_refused(tmp_path) -> None:
    root = make_project(tmp_path, {"users.yml": """\
        users:
          - name: ann
            roles: [public]
            login_password: hunter2
        """})
    found = [d for d in check_project(root).diagnostics if d.code == "DSF-E374"]
    assert len(found) == 1 and found[0].severity is Severity.ERROR and "ann" in found[0].message
    assert "hunter2" not in found[0].message and "ANN_LOGIN_PASSWORD" in found[0].hint
