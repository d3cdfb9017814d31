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
        from dsflow.load.cdc import cdc_tables, image_types

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
    from dsflow.load.cdc import cdc_tables

    opts = deployed.data.get("table_options") or {}
    try:
        settings = _store_settings(project, deployed.data.get("store", ""), opts[SLOT_KEY])
        missing = admin.observe(settings, opts["postgresql.db.name"], opts[SLOT_KEY], cdc_tables(opts))
    except DsflowError as err:
        return Observation(address=deployed.address, healthy=False, detail=err.message)
    if missing:
        return Observation(address=deployed.address, healthy=False, detail=missing)
    return Observation(address=deployed.address, healthy=True, detail="slot and publication exist")
