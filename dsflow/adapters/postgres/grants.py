"""Grants on materialized views and tables kept in a postgresql store, pushed down as PostgreSQL roles and
GRANT/REVOKE (a view's table and a CREATE TABLE ... AS SELECT's table alike: both are PostgreSQL tables).

    role_name     the PostgreSQL role of a dsflow role: `dsflow_<project>_<env>_<role>` (NOLOGIN), cut to 63 bytes
                  with a hash when longer; created roles carry a COMMENT naming the project, and only such roles
                  are ever dropped
    target        the table a grant pushes down to (SELECT or ALL on a PG-kept materialized view or table), or
                  None
    apply_grant   apply: the role, the roles that inherit it (GRANT parent TO child), then GRANT USAGE ON SCHEMA
                  and GRANT SELECT ON TABLE; idempotent
    revoke_grant  delete: REVOKE SELECT (and USAGE once the role holds nothing else in the schema); the role
                  stays while the dsflow role does (`SET ROLE` then gets "permission denied"); a built-in
                  role's (public, sysadmin, ...: no role resource) is dropped once it holds nothing here
    sync_role     a role created or whose inheritance changed: its memberships set again where it is pushed down
                  (after both, the logins of the users bound to the roles join them: adapters/postgres/logins.py)
    drop_role     a role gone from the project (or destroy): dropped, after its grants, where dsflow created it
    observe_grant refresh: a missing role or privilege (the table was re-created, someone revoked it) is drift

ALL on a view or table grants SELECT only, and INSERT is never pushed (DSF-E373, a load warning): their tables are
written by dsflow alone. Grants on stores, databases, schemas and topics are not pushed down (they stay in dsflow's
state, enforced by `dsflow serve`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from dsflow.errors import DsflowError

PUSHED = ("SELECT", "ALL")
KEY = "postgresql"
KEPT = ("materialized_view", "table")
"""The relation kinds whose table a postgresql store keeps (a view's snapshot, a CREATE TABLE ... AS SELECT's)."""


def role_name(project: str, environment: str, role: str) -> str:
    """A stable role name scoped to the project and environment, at most 63 bytes (PostgreSQL's limit)."""
    name = f"dsflow_{project}_{environment}_{role}"
    if len(name.encode()) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    cut = name.encode()[:52].decode(errors="ignore")
    return f"{cut}_{digest}"


def marker(project) -> str:
    return f"dsflow role of project {project.name}, environment {project.environment}"


def target(project, data: dict[str, Any] | None) -> dict[str, str] | None:
    """Where a grant pushes down: the store, database, schema and table of a PG-kept view or table, or None."""
    data = data or {}
    on = str(data.get("on", ""))
    if project is None or data.get("privilege") not in PUSHED or not on.startswith("relation."):
        return None
    relation = project.relation(on.split(".", 1)[1])
    if relation is None or relation.kind not in KEPT or not relation.store:
        return None
    store = project.store(relation.store)
    if store is None or store.type != "postgresql":
        return None
    from dsflow.adapters.postgres.views import DB, SCHEMA, TABLE

    opts = relation.table_options
    return {"store": store.name, "database": opts[DB], "schema": opts[SCHEMA], "table": opts[TABLE]}


def _inherits(project) -> dict[str, tuple[str, ...]]:
    """What each role inherits: the built-in roles' (orgadmin inherits sysadmin, ...) and the project's."""
    from dsflow.core.access import project_inherits

    return project_inherits(project)


def below(project, role: str) -> list[str]:
    """`role` and every role inheriting it, transitively; parents before children."""
    from dsflow.core.access import heirs

    return heirs(_inherits(project), role)


def pushed_roles(project, store: str) -> set[str]:
    """Every dsflow role that has a PostgreSQL role in `store`: the roles granted a view or table there, and their
    heirs."""
    roles: set[str] = set()
    for grant in project.grants:
        where = target(project, {"privilege": grant.privilege, "on": grant.on})
        if where is not None and where["store"] == store:
            roles |= set(below(project, grant.role))
    return roles


def _connect(project, where: dict[str, str]):
    from dsflow.adapters.postgres import admin
    from dsflow.adapters.postgres.views import store_settings

    return admin.connect(store_settings(project, where["store"]), where.get("database") or None)


def _sql_error(err: Exception, what: str) -> DsflowError:
    return DsflowError("DSF-E370", f"PostgreSQL refused {what}: {str(err).strip()}",
                       hint="the postgresql store's user needs CREATEROLE and the grant option on the table "
                       "(its owner has it); run apply again once fixed")


def apply_grant(ctx, address: str, data: dict[str, Any]) -> dict[str, Any]:
    """Create the mapped roles and GRANT USAGE ON SCHEMA + SELECT ON TABLE; the outputs let delete and refresh
    find them again without the project's grant."""
    import psycopg2
    from psycopg2 import sql

    project = ctx.project
    where = target(project, data)
    assert where is not None  # a grant is applied here only when it pushes down (target)
    names = below(project, data["role"])
    mapped = {n: role_name(project.name, project.environment, n) for n in names}
    conn = _connect(project, where)
    try:
        with conn.cursor() as cur:
            if not _exists(cur, where["schema"], where["table"]):
                raise DsflowError("DSF-E371", f"cannot push down {address}: table {where['schema']}."
                                  f"{where['table']} does not exist",
                                  hint="apply the view or table first (dsflow apply)")
            scope = pushed_roles(project, where["store"]) | set(names)
            for name in names:
                _sync(cur, project, name, scope)
            role, schema = sql.Identifier(mapped[data["role"]]), sql.Identifier(where["schema"])
            cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
            cur.execute(sql.SQL("GRANT SELECT ON TABLE {}.{} TO {}").format(schema, sql.Identifier(where["table"]),
                                                                           role))
    except psycopg2.Error as err:
        raise _sql_error(err, f"the grant {address}") from err
    finally:
        conn.close()
    builtin = [mapped[n] for n in names if n not in {r.name for r in project.roles}]
    return {KEY: {**where, "role": mapped[data["role"]], "roles": [mapped[n] for n in names],
                  **({"builtin": builtin} if builtin else {})}}


def _exists(cur, schema: str, table: str) -> bool:
    cur.execute("SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL", (schema, table))
    return bool(cur.fetchone()[0])


def _role_exists(cur, name: str) -> bool:
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
    return cur.fetchone() is not None


def _ensure_role(cur, project, name: str) -> None:
    from psycopg2 import sql

    if _role_exists(cur, name):
        return
    cur.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    cur.execute(sql.SQL("COMMENT ON ROLE {} IS {}").format(sql.Identifier(name), sql.Literal(marker(project))))


def _sync(cur, project, role: str, scope: set[str]) -> None:
    """Role `role` exists and is a member of exactly its parents within `scope` among the project's roles."""
    from psycopg2 import sql

    mapped = role_name(project.name, project.environment, role)
    _ensure_role(cur, project, mapped)
    wanted = {role_name(project.name, project.environment, p) for p in _inherits(project).get(role, ()) if p in scope}
    for parent in sorted(wanted):
        _ensure_role(cur, project, parent)
        cur.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(parent), sql.Identifier(mapped)))
    cur.execute("SELECT p.rolname FROM pg_auth_members m JOIN pg_roles p ON p.oid = m.roleid "
                "JOIN pg_roles c ON c.oid = m.member WHERE c.rolname = %s "
                "AND shobj_description(p.oid, 'pg_authid') = %s", (mapped, marker(project)))
    for (parent,) in cur.fetchall():
        if parent not in wanted:
            cur.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(parent), sql.Identifier(mapped)))


def revoke_grant(project, outputs: dict[str, Any]) -> None:
    """REVOKE what apply granted (a missing role or table is fine), then drop the roles left holding nothing."""
    import psycopg2
    from psycopg2 import sql

    where = outputs[KEY]
    conn = _connect(project, where)
    try:
        with conn.cursor() as cur:
            role, schema = where["role"], sql.Identifier(where["schema"])
            if _role_exists(cur, role) and _exists(cur, where["schema"], where["table"]):
                cur.execute(sql.SQL("REVOKE SELECT ON TABLE {}.{} FROM {}").format(
                    schema, sql.Identifier(where["table"]), sql.Identifier(role)))
            if _role_exists(cur, role) and not _holds_in_schema(cur, role, where["schema"]):
                cur.execute(sql.SQL("REVOKE USAGE ON SCHEMA {} FROM {}").format(schema, sql.Identifier(role)))
            for name in where.get("builtin") or ():  # no role resource drops these: the last grant does
                if _role_exists(cur, name) and _ours(cur, project, name) and not _holds_any(cur, name):
                    _drop(cur, name, strict=False)
    except psycopg2.Error as err:
        raise _sql_error(err, f"the revoke of {where.get('role')}'s SELECT on {where.get('table')}") from err
    finally:
        conn.close()


def _holds_in_schema(cur, role: str, schema: str) -> bool:
    cur.execute("SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, "
                "aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee WHERE n.nspname = %s AND r.rolname = %s)",
                (schema, role))
    return bool(cur.fetchone()[0])


def _holds_any(cur, role: str) -> bool:
    cur.execute("SELECT EXISTS (SELECT 1 FROM pg_class c, aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee "
                "WHERE r.rolname = %s) OR EXISTS (SELECT 1 FROM pg_namespace n, aclexplode(n.nspacl) a "
                "JOIN pg_roles r ON r.oid = a.grantee WHERE r.rolname = %s)", (role, role))
    return bool(cur.fetchone()[0])


def _ours(cur, project, role: str) -> bool:
    cur.execute("SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s", (role,))
    row = cur.fetchone()
    return row is not None and row[0] == marker(project)


def _drop(cur, role: str, strict: bool = True) -> None:
    """DROP ROLE; PostgreSQL refuses while the role still holds privileges (in another database, say): an error,
    or (not strict) the role is kept."""
    import psycopg2
    from psycopg2 import sql

    try:
        cur.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    except psycopg2.errors.DependentObjectsStillExist as err:
        if not strict:
            return
        raise DsflowError("DSF-E372", f"cannot drop the PostgreSQL role {role}: {str(err).strip()}",
                          hint=f"revoke what {role} still holds (REVOKE ... FROM \"{role}\"), then run the command "
                          "again") from err


def sync_role(project, role: str, stores: Iterable[str]) -> list[str]:
    """A role created or replaced (its inheritance changed): where it is pushed down, its memberships are set
    again; where it no longer is, its memberships are revoked."""
    import psycopg2

    done = []
    for store in stores:
        scope = pushed_roles(project, store)
        conn = _connect(project, _database_of(project, store))
        try:
            with conn.cursor() as cur:
                if role in scope:
                    _sync(cur, project, role, scope)
                    done.append(store)
                    continue
                name = role_name(project.name, project.environment, role)
                if _role_exists(cur, name) and _ours(cur, project, name):
                    _sync(cur, project, role, set())
        except psycopg2.Error as err:
            raise _sql_error(err, f"the role {role}'s memberships") from err
        finally:
            conn.close()
    return done


def drop_role(project, role: str, stores: Iterable[str]) -> None:
    """A role gone from the project: its PostgreSQL role is dropped (its grants went first) where dsflow made it."""
    import psycopg2

    name = role_name(project.name, project.environment, role)
    for store in stores:
        conn = _connect(project, _database_of(project, store))
        try:
            with conn.cursor() as cur:
                if _role_exists(cur, name) and _ours(cur, project, name):
                    _drop(cur, name)
        except psycopg2.Error as err:
            raise _sql_error(err, f"dropping the role {name}") from err
        finally:
            conn.close()


def _database_of(project, store: str) -> dict[str, str]:
    """The database of a store's granted views and tables (the store's own database when it has none)."""
    for grant in project.grants:
        where = target(project, {"privilege": grant.privilege, "on": grant.on})
        if where is not None and where["store"] == store:
            return where
    return {"store": store}


def kept_stores(project) -> list[str]:
    """The postgresql stores keeping a materialized view or a table of the project: where a role may have been
    pushed."""
    stores = {r.store for r in project.relations if r.kind in KEPT and r.store}
    return sorted(s for s in stores if (store := project.store(s)) is not None and store.type == "postgresql")


def pushed_stores(project) -> list[str]:
    """The postgresql stores holding a view or table some grant of the project pushes down to."""
    stores = {w["store"] for g in project.grants
              if (w := target(project, {"privilege": g.privilege, "on": g.on})) is not None}
    return sorted(stores)


def observe_grant(project, deployed):
    """Refresh: drift when a mapped role is missing or lacks SELECT on the table (directly or inherited)."""
    import psycopg2
    from dsflow.core.plan import Observation

    where = deployed.outputs[KEY]
    try:
        conn = _connect(project, where)
    except DsflowError as err:
        return Observation(address=deployed.address, healthy=False, detail=err.message)
    try:
        with conn.cursor() as cur:
            detail = _missing(cur, where)
    except psycopg2.Error as err:
        detail = str(err).strip()
    finally:
        conn.close()
    return Observation(address=deployed.address, healthy=detail is None, detail=detail or "granted")


def _missing(cur, where: dict[str, Any]) -> str | None:
    table = f"{where['schema']}.{where['table']}"
    if not _exists(cur, where["schema"], where["table"]):
        return f"table {table} is missing"
    for name in where.get("roles") or [where["role"]]:
        if not _role_exists(cur, name):
            return f"role {name} is missing"
        cur.execute("SELECT has_table_privilege(%s, format('%%I.%%I', %s::text, %s::text), 'SELECT') AND "
                    "has_schema_privilege(%s, %s, 'USAGE')", (name, where["schema"], where["table"], name,
                                                               where["schema"]))
        if not cur.fetchone()[0]:
            return f"role {name} lacks SELECT on {table}"
    return None
