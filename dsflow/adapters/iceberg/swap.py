"""Iceberg's side of a blue/green deployment of a query writing a table (the `swap` facet, core/stores.py
Capability.SWAP; engine/bluegreen_tables.py walks it).

The new version writes `NAMESPACE.<table>_v<N>` beside the production table, in the same catalog. Readers switch
in ONE transaction of the catalog database (pyiceberg's SQL catalog keeps a row per table naming its current
metadata file): production is renamed to `<table>_v<N-1>` (kept) and the new table to the production name, both
UPDATEs committed together, each checked to have renamed exactly one table. A reader resolving the name before the
commit loads the old table's metadata, after it the new one's: never a missing or half-renamed table. No data or
metadata file is touched; a reader holding a loaded table object keeps reading the snapshot it loaded (the kept
table's) until it loads the name again. An Iceberg view names the table in its SQL text, so it reads the new table.
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.iceberg.catalog import catalog
from dsflow.errors import DsflowError

Place = tuple[str | None, str, str]
"""(None: a catalog has no database, namespace, table)."""
TABLE = "iceberg.table.name"
NAMESPACE = "iceberg.namespace.name"


def place(relation: Any) -> Place:
    opts = relation.table_options
    return None, opts[NAMESPACE], opts[TABLE]


def versioned(relation: Any, table: str) -> Any:
    """The relation writing `NAMESPACE.table` instead of its own table."""
    namespace = relation.table_options[NAMESPACE]
    return relation.model_copy(update={"topic": f"{namespace}.{table}",
                                       "table_options": {**relation.table_options, TABLE: table}})


def refusal(settings: dict[str, str], where: Place) -> str | None:
    """Nothing in a SQL catalog holds a table by identity: a rename is always followed."""
    return None


def exists(settings: dict[str, str], where: Place) -> bool:
    """Whether the catalog holds a table by that name."""
    _, namespace, table = where
    return bool(catalog(settings).table_exists((namespace, table)))


def rows(settings: dict[str, str], where: Place) -> list[tuple]:
    """Every row of a table, its columns in name order."""
    _, namespace, table = where
    data = catalog(settings).load_table((namespace, table)).scan().to_arrow()
    names = sorted(data.column_names)
    return list(zip(*(data.column(n).to_pylist() for n in names), strict=True)) if data.num_rows else []


def swap(settings: dict[str, str], where: Place, new: str, kept: str) -> list[str]:
    """One catalog transaction: production -> `kept`, `new` -> production. Nothing changes if either rename
    fails (DSF-E965). No view to re-point: the list is empty."""
    from sqlalchemy import update
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session
    from pyiceberg.catalog.sql import IcebergTables

    _, namespace, table = where
    store = catalog(settings)
    with Session(store.engine) as session:
        try:
            for old, to in ((table, kept), (new, table)):
                renamed = session.execute(update(IcebergTables).where(
                    IcebergTables.catalog_name == store.name, IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == old).values(table_name=to))
                if renamed.rowcount != 1:  # type: ignore[attr-defined]
                    raise DsflowError("DSF-E965", f"the catalog swap of {namespace}.{table} found no table "
                                      f"{namespace}.{old}; nothing was renamed", hint=REFUSED_HINT)
            session.commit()
        except SQLAlchemyError as err:
            session.rollback()
            raise DsflowError("DSF-E965", f"the catalog swap of {namespace}.{table} failed and was rolled back: "
                              f"{err}", hint=REFUSED_HINT) from err
        except BaseException:
            session.rollback()
            raise
    return []


REFUSED_HINT = "check that the catalog holds both tables, or apply without --blue-green"


def drop(settings: dict[str, str], where: Place) -> None:
    """A table dropped from the catalog, its files deleted."""
    _, namespace, table = where
    store = catalog(settings)
    if store.table_exists((namespace, table)):
        store.purge_table((namespace, table))


class IcebergSwap:
    """The `swap` facet: blue/green of an Iceberg table in one catalog transaction of renames."""

    REFUSED_HINT = REFUSED_HINT
    place = staticmethod(place)
    versioned = staticmethod(versioned)
    refusal = staticmethod(refusal)
    exists = staticmethod(exists)
    rows = staticmethod(rows)
    swap = staticmethod(swap)
    drop = staticmethod(drop)


SWAP = IcebergSwap()
