"""The entity commands of lake and warehouse table stores (the `commands` facet, core/stores.py): what
`dsflow entity list|describe|print` browses in a Delta store (s3, filesystem, adls, databricks: a table's path
under the store's root), a Snowflake store (`DB[.SCHEMA[.TABLE]]`), or, through its table format's own
`list_entities`, a store whose format keeps a catalog (a name in it).
"""

from __future__ import annotations

from typing import Any

from dsflow.errors import DsflowError


class TableCommands:
    entity_paths = {"Delta": "a folder under the store's root", "Snowflake": "[DB[.SCHEMA]]"}
    """How `dsflow entity list` reads PATH, per table format (for its help)."""

    def entity_location(self, relation: Any, store: Any) -> str:
        """Where a table relation of the store is, as an entity PATH."""
        if _format_name(store) == "delta":
            return relation.table_options.get("delta.path", relation.topic)
        return relation.topic

    def list_entities(self, project: Any, store: Any, path: str) -> list[str]:
        from dsflow.adapters.tables import delta_root

        settings = dict(store.properties)
        name = _format_name(store)
        if name == "delta":
            from dsflow.adapters.tables.delta import list_tables

            return list_tables(delta_root(project.root, store.type, settings), settings, path)
        if name == "snowflake":
            from dsflow.adapters.tables.snowflake import list_entities

            return list_entities(settings, path)
        return _format(store).list_entities(settings, path)

    def describe_entity(self, project: Any, store: Any, path: str) -> dict[str, Any]:
        ref, fmt = _table(project, store, path)
        return fmt.describe(ref)

    def entity_rows(self, project: Any, store: Any, path: str, limit: int) -> tuple[list[str], list[tuple]]:
        ref, fmt = _table(project, store, path)
        return fmt.rows(ref, limit)


def _format_name(store: Any) -> str:
    from dsflow.adapters.tables import store_format

    return store_format(store.type)


def _format(store: Any):
    from dsflow.adapters.tables import table_format

    return table_format(_format_name(store))


def _table(project: Any, store: Any, path: str):
    """The table PATH of the store and its format: DSF-E757 for a Snowflake path that is not DB.SCHEMA.TABLE,
    DSF-E754 when no Delta table is there."""
    from dsflow.adapters.tables import TableRef, delta_root, table_format

    fmt_name = _format_name(store)
    settings = dict(store.properties)
    if fmt_name == "snowflake":
        parts = [p.upper() for p in path.split(".") if p]
        if len(parts) != 3:
            raise DsflowError("DSF-E757", f"'{path}' is not a Snowflake table path DB.SCHEMA.TABLE",
                              hint="list what is there with 'dsflow entity list [DB[.SCHEMA]] --store NAME'")
        return TableRef(fmt_name, ".".join(parts), settings), table_format(fmt_name)
    if fmt_name != "delta":  # a name in the store's catalog (NAMESPACE.TABLE): the format checks it
        return TableRef(fmt_name, path.strip("."), settings), table_format(fmt_name)
    path = path.strip("/")
    location = path if "://" in path or path.startswith("/") else \
        delta_root(project.root, store.type, settings).rstrip("/") + "/" + path
    fmt = table_format(fmt_name)
    ref = TableRef(fmt_name, location, settings)
    if not fmt.exists(ref):
        raise DsflowError("DSF-E754", f"no Delta table at {location}",
                          hint=f"list the store's tables with 'dsflow entity list --store {store.name}'")
    return ref, fmt


COMMANDS = TableCommands()
