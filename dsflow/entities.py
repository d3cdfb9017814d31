"""`dsflow entity`: what a table store holds (Delta tables, PostgreSQL, Snowflake and Iceberg tables).

A PATH is read in the store's own terms: for a Delta store (s3, filesystem, adls, databricks) a table's path under
the store's root; for postgresql `database[.schema[.table]]`; for snowflake `DB[.SCHEMA[.TABLE]]`; for a table
format that lists its own entities (`list_entities`, adapters/tables FORMATS: iceberg) its own path
(iceberg: `[NAMESPACE[.TABLE]]`). A table
relation of the project may be named instead of a path (its store and location are used).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsflow.core.model import Project, Store
from dsflow.errors import DsflowError

DELTA_STORES = {"s3", "filesystem", "adls", "databricks"}


@dataclass(frozen=True)
class Target:
    store: Store
    path: str


def resolve(project: Project, path: str, store_name: str | None) -> Target:
    """The store and path meant: --store, or a table relation named by PATH."""
    if store_name:
        store = project.store(store_name)
        if store is None:
            raise DsflowError("DSF-E021", f"no store '{store_name}' in the project",
                              hint="see the stores in the project's YAML files")
        return Target(store, path)
    relation = next((r for r in project.relations if r.kind == "table" and path
                     and (r.fqn == path or r.fqn.endswith("." + path))), None)
    if relation is None:
        raise DsflowError("DSF-E758", f"'{path}' is not a table of the project; name a store",
                          hint="pass --store NAME (an s3, filesystem, adls, databricks, snowflake, iceberg or postgresql "
                               "store)")
    store = project.store(relation.store)
    location = relation.table_options.get("delta.path", relation.topic) if store.type in DELTA_STORES \
        else relation.topic
    return Target(store, location)


def list_entities(project: Project, target: Target) -> list[str]:
    store = target.store
    if store.type in DELTA_STORES:
        from dsflow.adapters.tables import delta_root
        from dsflow.adapters.tables.delta import list_tables

        return list_tables(delta_root(project.root, store.type, dict(store.properties)), dict(store.properties),
                           target.path)
    if store.type == "snowflake":
        from dsflow.adapters.tables.snowflake import list_entities as snowflake_list

        return snowflake_list(dict(store.properties), target.path)
    if store.type == "postgresql":
        from dsflow.adapters.tables import postgres

        return postgres.list_entities(store, target.path)
    fmt = _format(store)
    if fmt is not None and hasattr(fmt, "list_entities"):
        return fmt.list_entities(dict(store.properties), target.path)
    raise _no_entities(store)


def _format(store: Store):
    """The table format of a store that holds tables, None for others."""
    from dsflow.adapters.tables import STORE_FORMATS, table_format

    return table_format(STORE_FORMATS[store.type]) if store.type in STORE_FORMATS else None


def describe_entity(project: Project, target: Target) -> dict[str, Any]:
    store = target.store
    if store.type == "postgresql":
        from dsflow.adapters.tables import postgres

        return postgres.describe(store, target.path)
    ref, fmt = _table(project, target)
    return fmt.describe(ref)


def entity_rows(project: Project, target: Target, limit: int) -> tuple[list[str], list[tuple]]:
    store = target.store
    if store.type == "postgresql":
        from dsflow.adapters.tables import postgres

        return postgres.rows(store, target.path, limit)
    ref, fmt = _table(project, target)
    return fmt.rows(ref, limit)


def _table(project: Project, target: Target):
    from dsflow.adapters.tables import STORE_FORMATS, TableRef, delta_root, table_format

    store = target.store
    fmt_name = STORE_FORMATS.get(store.type)
    if fmt_name is None:
        raise _no_entities(store)
    settings = dict(store.properties)
    if fmt_name == "snowflake":
        parts = [p.upper() for p in target.path.split(".") if p]
        if len(parts) != 3:
            raise DsflowError("DSF-E757", f"'{target.path}' is not a Snowflake table path DB.SCHEMA.TABLE",
                              hint="list what is there with 'dsflow entity list [DB[.SCHEMA]] --store NAME'")
        return TableRef(fmt_name, ".".join(parts), settings), table_format(fmt_name)
    if fmt_name != "delta":  # a name in the store's catalog (iceberg NAMESPACE.TABLE): the format checks it
        return TableRef(fmt_name, target.path.strip("."), settings), table_format(fmt_name)
    path = target.path.strip("/")
    location = path if "://" in path or path.startswith("/") else \
        delta_root(project.root, store.type, settings).rstrip("/") + "/" + path
    fmt = table_format(fmt_name)
    ref = TableRef(fmt_name, location, settings)
    if not fmt.exists(ref):
        raise DsflowError("DSF-E754", f"no Delta table at {location}",
                          hint=f"list the store's tables with 'dsflow entity list --store {store.name}'")
    return ref, fmt


def _no_entities(store: Store) -> DsflowError:
    return DsflowError("DSF-E759", f"the {store.type} store '{store.name}' has no entities to browse",
                       hint="entities are tables of s3, filesystem, adls, databricks, snowflake, iceberg and "
                            "postgresql stores; for topics use 'dsflow topic'")
