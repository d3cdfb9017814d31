"""What apply does for a table relation: create the table (schema from the query's output columns)
unless it exists, register it in a Databricks catalog when one is configured, add the columns an in-place
update adds (ALTER TABLE ADD COLUMN), rename it after a move that renames it (a format that can), and on destroy
drop it only if dsflow created it."""

from __future__ import annotations

from typing import Any

from dsflow.adapters.tables import TableRef, added_columns, table_format, table_ref
from dsflow.core.address import Address
from dsflow.core.plan import Change
from dsflow.core.state import DeployedResource


class TableExecutor:
    """A lake or warehouse table written by CREATE TABLE ... AS SELECT."""

    def create(self, ctx, change: Change) -> dict[str, Any]:
        relation = ctx.project.relation(Address.parse(change.address).name)
        store = ctx.project.store(relation.store)
        ref = table_ref(ctx.project.root, store, relation)
        fmt = table_format(ref.format)
        reach_store(store.name, store.type, ref)
        existed = ctx.resumed.get("table_existed")
        if existed is None:
            existed = fmt.exists(ref)
            ctx.note({"table_existed": existed})
        fmt.create(ref, [(c.name, c.type) for c in relation.columns], list(relation.primary_key))
        outputs = {"table": ref.location, "format": ref.format, "store": store.name, "created_by_dsflow": not existed}
        if store.type == "databricks":
            from dsflow.adapters.tables import databricks

            outputs["catalog"] = databricks.register(ref)
        return outputs

    def update(self, ctx, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        """Renamed in place after a move that renames its table (a format that can: the plan said so), then the
        table ensured, and the columns the change adds added in place (its rows kept)."""
        if change.moved_from is not None:
            rename_moved(ctx, change, deployed)
        outputs = self.create(ctx, change)
        added = added_columns(change.before, change.after)
        if added:
            relation = ctx.project.relation(Address.parse(change.address).name)
            ref = table_ref(ctx.project.root, ctx.project.store(relation.store), relation)
            table_format(ref.format).add_columns(ref, added)
        outputs["created_by_dsflow"] = outputs["created_by_dsflow"] or deployed.outputs.get("created_by_dsflow", False)
        return outputs

    def delete(self, ctx, deployed: DeployedResource) -> None:
        if not deployed.outputs.get("created_by_dsflow"):
            return
        store = ctx.project.store(deployed.outputs.get("store", ""))
        settings = dict(store.properties) if store is not None else {}
        ref = TableRef(deployed.outputs["format"], deployed.outputs["table"], settings,
                       dict(deployed.data.get("table_options") or {}))
        if store is not None and store.type == "databricks":
            from dsflow.adapters.tables import databricks

            databricks.unregister(ref)
        table_format(ref.format).drop(ref)


def rename_moved(ctx, change: Change, deployed: DeployedResource) -> None:
    """A moved table whose place changed in a format that renames tables (RenamingFormat): renamed from where it was
    deployed to where the relation is now, rows kept. A move the plan keeps in place only when the table stays or
    only its name changes (core/moves.py); nothing to do when it stays, or once renamed (an apply run again)."""
    relation = ctx.project.relation(Address.parse(change.address).name)
    new = table_ref(ctx.project.root, ctx.project.store(relation.store), relation)
    fmt = table_format(new.format)
    was = deployed.outputs.get("table")
    if was in (None, new.location) or deployed.outputs.get("format") != new.format or not hasattr(fmt, "rename"):
        return
    fmt.rename(TableRef(new.format, was, new.settings, dict(deployed.data.get("table_options") or {})), new)


def reach_store(name: str, store_type: str, ref: TableRef) -> None:
    """A table on Azure Data Lake Storage: its container reachable with the store's credentials (DSF-E393), so a
    wrong account, key or endpoint is an error naming the store, not delta-rs' or adlfs' retries. A table kept in
    a catalog is where the store's `warehouse` is (a warehouse that is no URL, as a Snowflake one, is not Azure)."""
    location = ref.settings.get("warehouse") or ref.location
    from dsflow.adapters.tables import adls

    if adls.is_azure(location):
        adls.check_reachable(name, location, ref.settings)
