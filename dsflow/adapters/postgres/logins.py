"""dsflow users as PostgreSQL logins: members of the mapped roles of their bound roles (adapters/postgres/grants.py).

    login_name    a user's login: the dsflow user name itself (cut to 63 bytes with a hash when longer), so the
                  user connects as themselves
    sync_login    the login exists (CREATE ROLE ... LOGIN, with a COMMENT naming the project) and is a member of
                  exactly the mapped roles of its dsflow roles that are pushed down; a role that already existed
                  (not made by dsflow) is adopted: memberships only, its password and attributes untouched
    unbind        its memberships in the project's mapped roles revoked; the login dropped where dsflow made it
                  for this project and environment and it is left a member of nothing
    observe_login refresh: a missing login or membership is drift

The password: `login_password` from env_var() (YAML `users:`), sent as a SCRAM-SHA-256 verifier computed here
(libpq's PQencryptPasswordConn), never in clear; without one, the login has no password (PASSWORD NULL) and only
the server's own authentication (peer, cert, ldap, trust) can let it in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from dsflow.adapters.postgres.grants import _connect, _role_exists, _sql_error, _sync, marker, \
    pushed_roles, pushed_stores, role_name
from dsflow.errors import DsflowError

KEY = "postgresql"


def login_name(user: str) -> str:
    """The user's name; names longer than PostgreSQL's 63 bytes are cut and end with a hash of the full name."""
    if len(user.encode()) <= 63:
        return user
    return f"{user.encode()[:52].decode(errors='ignore')}_{hashlib.sha256(user.encode()).hexdigest()[:10]}"


def login_marker(project) -> str:
    return f"dsflow login of project {project.name}, environment {project.environment}"


def _comment(cur, name: str) -> str | None:
    cur.execute("SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s", (name,))
    row = cur.fetchone()
    return row[0] if row else None


def _password(cur, name: str, password: str | None):
    """The PASSWORD clause's value: a SCRAM-SHA-256 verifier of `password`, or NULL."""
    from psycopg2 import sql
    from psycopg2.extensions import encrypt_password

    if not password:
        return sql.SQL("NULL")
    return sql.Literal(encrypt_password(password, name, cur.connection, "scram-sha-256"))


def _ensure_login(cur, project, name: str, password: str | None) -> bool:
    """The login exists; True if dsflow made it (then its password is set), False if it was adopted."""
    from psycopg2 import sql

    ident = sql.Identifier(name)
    if not _role_exists(cur, name):
        cur.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(ident, _password(cur, name, password)))
        cur.execute(sql.SQL("COMMENT ON ROLE {} IS {}").format(ident, sql.Literal(login_marker(project))))
        return True
    if _comment(cur, name) == login_marker(project):
        cur.execute(sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(ident, _password(cur, name, password)))
        return True
    if password:
        raise DsflowError("DSF-E375", f"the PostgreSQL role {name} exists and dsflow did not make it: dsflow does "
                          "not set the password of a role it does not own",
                          hint=f"remove login_password of user '{name}' (the role is then used as it is, and only "
                          "its memberships are managed), or drop the role and apply again")
    return False


def _memberships(cur, project, name: str) -> list[str]:
    """The project's mapped roles `name` is a member of."""
    cur.execute("SELECT p.rolname FROM pg_auth_members m JOIN pg_roles p ON p.oid = m.roleid "
                "JOIN pg_roles c ON c.oid = m.member WHERE c.rolname = %s "
                "AND shobj_description(p.oid, 'pg_authid') = %s ORDER BY 1", (name, marker(project)))
    return [row[0] for row in cur.fetchall()]


def _wanted(project, binding, scope: set[str]) -> list[str]:
    return sorted(role_name(project.name, project.environment, r) for r in binding.roles if r in scope)


def sync_login(cur, project, binding, scope: set[str]) -> dict[str, Any] | None:
    """The login of `binding`'s user is a member of exactly the mapped roles of its roles within `scope`; with
    none, it is unbound. Returns what was done ({login, roles, created}) or None."""
    from psycopg2 import sql

    wanted = _wanted(project, binding, scope)
    name = login_name(binding.user)
    if not wanted:
        unbind(cur, project, name)
        return None
    created = _ensure_login(cur, project, name, binding.login_password)
    for role in (r for r in binding.roles if r in scope):
        _sync(cur, project, role, scope)
    for role in wanted:
        cur.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(name)))
    for role in _memberships(cur, project, name):
        if role not in wanted:
            cur.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(role), sql.Identifier(name)))
    return {"login": name, "roles": wanted, "created": created}


def unbind(cur, project, name: str) -> None:
    """Revoke the login's memberships in the project's roles; drop it if dsflow made it here and nothing else
    holds it (DSF-E376 when it owns objects or holds privileges)."""
    import psycopg2
    from psycopg2 import sql

    if not _role_exists(cur, name):
        return
    for role in _memberships(cur, project, name):
        cur.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(role), sql.Identifier(name)))
    cur.execute("SELECT COUNT(*) FROM pg_auth_members m JOIN pg_roles c ON c.oid = m.member WHERE c.rolname = %s",
                (name,))
    others = cur.fetchone()[0]
    if others or _comment(cur, name) != login_marker(project):
        return  # adopted, or a member of another project's roles: kept
    try:
        cur.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
    except psycopg2.errors.DependentObjectsStillExist as err:
        raise DsflowError("DSF-E376", f"cannot drop the PostgreSQL login {name}: {str(err).strip()}",
                          hint=f"the login owns objects or holds privileges of its own: REASSIGN OWNED BY \"{name}\" "
                          f"TO another role and DROP OWNED BY \"{name}\" (in each database), then run the command "
                          "again") from err


def apply_login(project, binding, recorded: Iterable[str] = ()) -> dict[str, Any]:
    """Create or update: in every postgresql store where grants are pushed down (and those recorded before), the
    user's login and its memberships. The outputs: {postgresql: {login, stores: {store: [roles]}}}."""
    import psycopg2

    done: dict[str, list[str]] = {}
    recorded = set(recorded)
    for store in sorted(set(pushed_stores(project)) | recorded):
        if not _wanted(project, binding, pushed_roles(project, store)) and store not in recorded:
            continue  # none of its roles is pushed down there: no login (and no connection)
        if project.store(store) is None:
            continue  # recorded in a store that left the project: nothing to connect to
        conn = _connect(project, {"store": store})
        try:
            with conn.cursor() as cur:
                found = sync_login(cur, project, binding, pushed_roles(project, store))
        except psycopg2.Error as err:
            raise _sql_error(err, f"the login of user {binding.user}") from err
        finally:
            conn.close()
        if found is not None:
            done[store] = found["roles"]
    return {KEY: {"login": login_name(binding.user), "stores": done}} if done else {}


def join_logins(project, roles: Iterable[str], stores: Iterable[str]) -> None:
    """After a grant or a role is pushed down to `stores`: the logins of the users bound to any of `roles` are
    synced there, so a binding applied before its role was pushed down joins it."""
    import psycopg2

    roles = set(roles)
    bindings = [b for b in project.bindings if roles & set(b.roles)]
    for store in sorted(set(stores)) if bindings else ():
        conn = _connect(project, {"store": store})
        try:
            with conn.cursor() as cur:
                for binding in bindings:
                    sync_login(cur, project, binding, pushed_roles(project, store))
        except psycopg2.Error as err:
            raise _sql_error(err, "the logins of the users bound to " + ", ".join(sorted(roles))) from err
        finally:
            conn.close()


def drop_login(project, user: str, outputs: dict[str, Any]) -> None:
    """Delete (the user or its binding left the project, or destroy): unbound in every store it was made in, and
    every store grants are pushed down to (a grant applied later may have made it join a role there)."""
    import psycopg2

    where = outputs.get(KEY) or {"login": login_name(user)}
    for store in sorted(set(where.get("stores") or ()) | set(pushed_stores(project))):
        if project.store(store) is None:
            continue  # the store left the project: nothing to connect to
        conn = _connect(project, {"store": store})
        try:
            with conn.cursor() as cur:
                unbind(cur, project, where["login"])
        except psycopg2.Error as err:
            raise _sql_error(err, f"removing the login {where['login']}") from err
        finally:
            conn.close()


def observe_login(project, deployed):
    """Refresh: drift when the login is missing, cannot log in, or lacks a recorded membership."""
    import psycopg2
    from dsflow.core.plan import Observation

    where = deployed.outputs[KEY]
    details = []
    for store, roles in sorted((where.get("stores") or {}).items()):
        try:
            conn = _connect(project, {"store": store})
        except DsflowError as err:
            return Observation(address=deployed.address, healthy=False, detail=err.message)
        try:
            with conn.cursor() as cur:
                details.append(_missing(cur, where["login"], roles))
        except psycopg2.Error as err:
            details.append(str(err).strip())
        finally:
            conn.close()
    detail = next((d for d in details if d), None)
    return Observation(address=deployed.address, healthy=detail is None, detail=detail or "login in place")


def _missing(cur, name: str, roles: list[str]) -> str | None:
    if not _role_exists(cur, name):
        return f"login {name} is missing"
    for role in roles:
        if not _role_exists(cur, role):
            return f"role {role} is missing"
        cur.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", (name, role))
        if not cur.fetchone()[0]:
            return f"login {name} is not a member of {role}"
    return None
