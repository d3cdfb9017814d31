"""Apply and destroy for CDC streams: the slot and publication of a stream in a postgresql store."""

from __future__ import annotations

from typing import Any

from dsflow.core.address import Address
from dsflow.errors import DsflowError

SLOT_KEY = "postgresql.slot.name"


def is_cdc(data: dict[str, Any] | None) -> bool:
    return bool(((data or {}).get("table_options") or {}).get(SLOT_KEY))


def _store_settings(project, name: str, slot: str) -> dict[str, str]:
    store = project.store(name) if project is not None else None
    if store is None:
        raise DsflowError("DSF-E742", f"cannot reach the slot '{slot}': the postgresql store '{name}' is no longer "
                          "in the project", hint="put the store back for one apply or destroy, then remove it")
    return dict(store.properties)


class CdcExecutor:
    """Creates the publication and slot (idempotently: drift repair creates what is missing); drops both."""

    def create(self, ctx, change) -> dict[str, Any]:
        from dsflow.adapters.postgres import admin
        from dsflow.sql.cdc import cdc_tables, image_types

        relation = ctx.project.relation(Address.parse(change.address).name)
        opts = relation.table_options
        settings = _store_settings(ctx.project, relation.store, opts[SLOT_KEY])
        done = admin.ensure(settings, opts["postgresql.db.name"], cdc_tables(opts), opts[SLOT_KEY],
                            image_types(relation))
        return {"store": relation.store, "slot": done["slot"], "publication": done["publication"],
                "database": done["database"]}

    def update(self, ctx, change, deployed) -> dict[str, Any]:
        return self.create(ctx, change)

    def delete(self, ctx, deployed) -> None:
        from dsflow.adapters.postgres import admin

        opts = deployed.data.get("table_options") or {}
        settings = _store_settings(ctx.project, deployed.data.get("store", ""), opts[SLOT_KEY])
        admin.drop(settings, opts["postgresql.db.name"], opts[SLOT_KEY])


def observe(project, deployed):
    """Refresh: drift when the slot or the publication is gone."""
    from dsflow.adapters.postgres import admin
    from dsflow.core.plan import Observation
    from dsflow.sql.cdc import cdc_tables

    opts = deployed.data.get("table_options") or {}
    try:
        settings = _store_settings(project, deployed.data.get("store", ""), opts[SLOT_KEY])
        missing = admin.observe(settings, opts["postgresql.db.name"], opts[SLOT_KEY], cdc_tables(opts))
    except DsflowError as err:
        return Observation(address=deployed.address, healthy=False, detail=err.message)
    if missing:
        return Observation(address=deployed.address, healthy=False, detail=missing)
    return Observation(address=deployed.address, healthy=True, detail="slot and publication exist")


class ViewTableExecutor:
    """A materialized view's snapshot table kept in a postgresql store (adapters/postgres/views.py); deleting it
    drops the table only if dsflow created it."""

    def create(self, ctx, change) -> dict[str, Any]:
        from dsflow.adapters.postgres.views import create_view_table

        return create_view_table(ctx, ctx.project.relation(Address.parse(change.address).name))

    def update(self, ctx, change, deployed) -> dict[str, Any]:
        """Renamed in place after a move, then ensured; the columns the change adds added (rows kept, NULL)."""
        from dsflow.adapters.postgres import mv
        from dsflow.adapters.postgres.views import rename_view_table, store_settings
        from dsflow.adapters.tables import added_columns

        if change.moved_from is not None and deployed.data.get("store"):
            rename_view_table(ctx.project, deployed, ctx.project.relation(Address.parse(change.address).name))
        outputs = self.create(ctx, change)
        added = added_columns(change.before, change.after)
        if added:
            settings = store_settings(ctx.project, outputs["store"])
            mv.add_columns(settings, outputs.get("database"), outputs["schema"], outputs["table"], added)
        outputs["created_by_dsflow"] = outputs["created_by_dsflow"] or deployed.outputs.get("created_by_dsflow", False)
        return outputs

    def delete(self, ctx, deployed) -> None:
        from dsflow.adapters.postgres.views import drop_view_table

        return drop_view_table(ctx.project, deployed)


class GrantExecutor:
    """A grant: SELECT (or ALL) on a view or table kept in a postgresql store is pushed down as a PostgreSQL GRANT
    (adapters/postgres/grants.py); every other grant is recorded only."""

    def create(self, ctx, change) -> dict[str, Any]:
        from dsflow.adapters.postgres import grants

        from dsflow.adapters.postgres.logins import join_logins

        if grants.target(ctx.project, change.after) is None:
            return {}
        outputs = grants.apply_grant(ctx, change.address, change.after)
        join_logins(ctx.project, grants.below(ctx.project, change.after["role"]), [outputs[grants.KEY]["store"]])
        return outputs

    def update(self, ctx, change, deployed) -> dict[str, Any]:
        outputs = self.create(ctx, change)
        return outputs if outputs else dict(deployed.outputs)

    def delete(self, ctx, deployed) -> None:
        from dsflow.adapters.postgres import grants

        if deployed.outputs.get(grants.KEY):
            grants.revoke_grant(ctx.project, deployed.outputs)


class LoginExecutor:
    """A user binding: where grants are pushed down to PostgreSQL, the user's login and its memberships
    (adapters/postgres/logins.py); recorded only elsewhere."""

    def create(self, ctx, change) -> dict[str, Any]:
        from dsflow.adapters.postgres import logins

        return logins.apply_login(ctx.project, _binding(ctx.project, change.address))

    def update(self, ctx, change, deployed) -> dict[str, Any]:
        from dsflow.adapters.postgres import logins

        recorded = ((deployed.outputs.get(logins.KEY) or {}).get("stores") or {}).keys()
        return logins.apply_login(ctx.project, _binding(ctx.project, change.address), recorded)

    def delete(self, ctx, deployed) -> None:
        from dsflow.adapters.postgres import logins

        logins.drop_login(ctx.project, Address.parse(deployed.address).name, dict(deployed.outputs))


def _binding(project, address: str):
    name = Address.parse(address).name
    return next(b for b in project.bindings if b.user == name)


class RoleExecutor:
    """A role: where grants are pushed down to PostgreSQL, its mapped role's memberships follow its `inherits`."""

    def create(self, ctx, change, recorded: tuple[str, ...] = ()) -> dict[str, Any]:
        from dsflow.adapters.postgres import grants

        from dsflow.adapters.postgres.logins import join_logins

        stores = sorted(set(grants.pushed_stores(ctx.project)) | set(recorded))
        done = grants.sync_role(ctx.project, Address.parse(change.address).name, stores) if stores else []
        join_logins(ctx.project, [Address.parse(change.address).name], done)
        return {"postgresql_stores": done} if done else {}

    def update(self, ctx, change, deployed) -> dict[str, Any]:
        return self.create(ctx, change, tuple(deployed.outputs.get("postgresql_stores") or ()))

    def replace(self, ctx, change, deployed) -> dict[str, Any]:
        return self.update(ctx, change, deployed)

    def delete(self, ctx, deployed) -> None:
        from dsflow.adapters.postgres import grants

        stores = set(grants.kept_stores(ctx.project)) | set(deployed.outputs.get("postgresql_stores") or ())
        if stores:
            grants.drop_role(ctx.project, Address.parse(deployed.address).name, sorted(stores))
