"""Apply, destroy and refresh of materialized views kept in a postgresql store (the table: adapters/postgres/mv.py).

apply creates the table unless it exists and records whether dsflow created it (noted before acting, so an
interrupted apply still knows); destroy drops it only if dsflow created it; refresh reports a missing table
as drift, and the next apply creates it again.
"""

from __future__ import annotations

from typing import Any

from dsflow.errors import DsflowError

DB, SCHEMA, TABLE = "postgresql.db.name", "postgresql.schema.name", "postgresql.table.name"


def store_settings(project, name: str) -> dict[str, str]:
    store = project.store(name) if project is not None else None
    if store is None:
        raise DsflowError("DSF-E791", f"cannot reach the view's table: the postgresql store '{name}' is no longer in "
                          "the project", hint="put the store back for one apply or destroy, then remove it")
    return dict(store.properties)


def create_view_table(ctx, relation) -> dict[str, Any]:
    from dsflow.adapters.postgres import mv

    opts = relation.table_options
    settings = store_settings(ctx.project, relation.store)
    existed = ctx.resumed.get("table_existed")
    if existed is None:
        existed = mv.table_exists(settings, opts[DB], opts[SCHEMA], opts[TABLE])
        ctx.note({"table_existed": existed})
    created = mv.ensure_table(settings, opts[DB], opts[SCHEMA], opts[TABLE],
                              [(c.name, c.type) for c in relation.columns], relation.primary_key)
    return {"store": relation.store, "database": opts[DB], "schema": opts[SCHEMA], "table": opts[TABLE],
            "created_by_dsflow": created or not existed}


def rename_view_table(project, deployed, relation) -> None:
    """A move that renamed the view's table (same database and schema): renamed in place, rows kept."""
    from dsflow.adapters.postgres import mv

    out, opts = deployed.outputs, relation.table_options
    if out.get("table") in (None, opts[TABLE]) or out.get("schema") != opts[SCHEMA]:
        return
    mv.rename_table(store_settings(project, relation.store), opts[DB], opts[SCHEMA], out["table"], opts[TABLE])


def drop_view_table(project, deployed) -> None:
    from dsflow.adapters.postgres import mv

    if not deployed.outputs.get("created_by_dsflow"):
        return
    out = deployed.outputs
    mv.drop_table(store_settings(project, deployed.data.get("store", "")), out.get("database"), out["schema"],
                  out["table"])


def observe_view(project, deployed):
    """Refresh: drift when the view's table is gone (or the store cannot be reached)."""
    from dsflow.adapters.postgres import mv
    from dsflow.core.plan import Observation

    out = deployed.outputs
    try:
        exists = mv.table_exists(store_settings(project, deployed.data.get("store", "")), out.get("database"),
                                 out["schema"], out["table"])
    except DsflowError as err:
        return Observation(address=deployed.address, healthy=False, detail=err.message)
    if not exists:
        return Observation(address=deployed.address, healthy=False,
                           detail=f"table {out['schema']}.{out['table']} is missing")
    return Observation(address=deployed.address, healthy=True, detail="table exists")
