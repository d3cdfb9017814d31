"""PostgreSQL tables written by CREATE TABLE ... AS SELECT: the `postgresql` table format (adapters/tables/base.py
`TableFormat`), the `tables` facet of the postgresql store kind (core/stores.py).

A table is written the way a materialized view's table is (mv.py, whose functions this module calls): created with
the query's columns and a PRIMARY KEY on its key, each micro-batch one transaction of COPY into a temporary table,
then a plain INSERT (a stream: appended) or INSERT ... ON CONFLICT (key) DO UPDATE (a changelog, an aggregation:
upserted, the last row of a key in the batch winning), the keys whose last row is a delete (__keep false: a
tombstone, a row that stops matching WHERE, a group left empty) deleted, and the batch id in the ledger
`dsflow_mv_batches` of the table's schema for (table, the writer's app id). A batch the ledger already holds is a
replay after a crash and is skipped: exactly once per batch.

A table's location is `DATABASE.SCHEMA.TABLE`, or `SCHEMA.TABLE` in the database the store connects to; its
table options (adapters/postgres/rules.py) name the three parts.

As a view's table, it is renamed in place by a move that changes only its name (`rename`), observed by refresh
(a missing table is drift: adapters/tables/objects.py `observe_table`), and SELECT grants on it are pushed down
(grants.py).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from dsflow.adapters.postgres import mv
from dsflow.adapters.postgres.rules import DB, SCHEMA, TABLE
from dsflow.adapters.tables.base import TableRef, latest_per_key

KEEP = "__keep"


def place(ref: TableRef) -> tuple[str | None, str, str]:
    """(database or None for the store's, schema, table) of a table: its options, else its location."""
    if ref.options.get(TABLE):
        return ref.options.get(DB) or None, ref.options.get(SCHEMA) or "public", ref.options[TABLE]
    parts = ref.location.split(".")
    return (parts[0] or None, parts[1], parts[2]) if len(parts) == 3 else \
        cast(tuple[None, str, str], (None, *parts[-2:]))  # a location is [database.]schema.table


def split_batch(data: Any, key: list[str]) -> tuple[list[str], list[tuple], list[tuple]]:
    """(columns, rows to write, keys to delete) of a micro-batch (an Arrow table): the last row of each key, and
    a row whose __keep is false deleting its key instead of being written."""
    data = latest_per_key(data, key)
    keep = data.column(KEEP).to_pylist() if KEEP in data.column_names else None
    if keep is not None:
        data = data.drop_columns([KEEP])
    rows = list(zip(*(column.to_pylist() for column in data.columns), strict=True)) if data.num_rows else []
    if keep is None:
        return data.column_names, rows, []
    positions = [data.column_names.index(k) for k in key]
    deletes = ([tuple(row[i] for i in positions) for row, kept in zip(rows, keep, strict=False) if not kept]
               if key else [])
    return data.column_names, [row for row, kept in zip(rows, keep, strict=False) if kept], deletes


class PostgresTables:
    """The PostgreSQL table format."""

    def exists(self, ref: TableRef) -> bool:
        return mv.table_exists(ref.settings, *place(ref))

    def create(self, ref: TableRef, columns: list[tuple[str, str]], key: list[str]) -> None:
        """The table (and the schema's ledger) unless it exists: dsflow creates tables, never schemas."""
        mv.ensure_table(ref.settings, *place(ref), columns, key)

    def add_columns(self, ref: TableRef, columns: list[tuple[str, str]]) -> None:
        mv.add_columns(ref.settings, *place(ref), columns)

    def drop(self, ref: TableRef) -> None:
        mv.drop_table(ref.settings, *place(ref))

    def rename(self, old: TableRef, new: TableRef) -> None:
        """ALTER TABLE ... RENAME TO (RenamingFormat), rows kept and the ledger's rows following it; only within
        one database and schema (the plan renames nothing else: core/moves.py `table_rename`)."""
        (database, schema, table), (new_database, new_schema, renamed) = place(old), place(new)
        if (database, schema) == (new_database, new_schema) and table != renamed:
            mv.rename_table(new.settings, database, schema, table, renamed)

    def write_batch(self, ref: TableRef, data: Any, key: list[str], app_id: str, batch_id: int) -> bool:
        """One micro-batch in one transaction; False if the ledger holds this batch (a replay)."""
        database, schema, table = place(ref)
        columns, rows, deletes = split_batch(data, key)
        return mv.write_batch(ref.settings, database, schema, table, columns, key, rows, app_id, batch_id,
                              deletes=deletes)

    # entities

    def describe(self, ref: TableRef) -> dict[str, Any]:
        from dsflow.adapters.postgres import commands

        return commands.describe(_store(ref), _path(ref))

    def count_rows(self, ref: TableRef) -> int:
        database, schema, table = place(ref)
        _, found = mv.run_query(ref.settings, database, f"SELECT COUNT(*) FROM {mv.qualified(schema, table)}")
        return int(found[0][0])

    def rows(self, ref: TableRef, limit: int) -> tuple[list[str], list[tuple]]:
        from dsflow.adapters.postgres import commands

        return commands.rows(_store(ref), _path(ref), limit)


def _store(ref: TableRef) -> Any:
    return SimpleNamespace(name=ref.location, properties=dict(ref.settings))


def _path(ref: TableRef) -> str:
    database, schema, table = place(ref)
    return ".".join(p for p in (database, schema, table) if p)


TABLES = PostgresTables
"""The `tables` facet (core/stores.py): the table format of the postgresql store kind."""
