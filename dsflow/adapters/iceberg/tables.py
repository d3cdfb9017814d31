"""Iceberg tables through pyiceberg: the `iceberg` table format (adapters/tables/base.py `TableFormat`).

A table's location is `NAMESPACE.TABLE` in the store's catalog (adapters/iceberg/catalog.py). Streams append;
changelogs and aggregations (a primary key) are upserted on the key (pyiceberg's copy-on-write upsert). Each
micro-batch is one catalog commit whose snapshot(s) carry the summary properties `dsflow.app_id` (the query and
its checkpoint: the query id) and `dsflow.batch_id`: before writing, the table's snapshots are read, and a batch
whose id the table already holds for that app id is skipped, so a batch Spark replays after a crash between the
commit and its checkpoint is not written twice. One writer per table (dsflow runs one query per sink).
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.iceberg.catalog import catalog, identifier
from dsflow.adapters.tables.base import TableRef
from dsflow.errors import DsflowError

APP_ID = "dsflow.app_id"
BATCH_ID = "dsflow.batch_id"
CREATED = "dsflow.created"


def arrow_type(sql_type: str):
    """The Arrow type of a dsflow column type as Iceberg stores it (no 8- or 16-bit integers: int32)."""
    import pyarrow as pa

    from dsflow.adapters.tables.delta import arrow_type as lake_type

    found = lake_type(sql_type)
    return pa.int32() if found in (pa.int8(), pa.int16()) else found


def _table(ref: TableRef):
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog(ref.settings).load_table(identifier(ref.location))
    except NoSuchTableError as err:
        raise DsflowError("DSF-E234", f"no iceberg table {ref.location} in the store's catalog",
                          hint="'dsflow apply' creates it; list the catalog with 'dsflow entity list --store NAME'") \
            from err


def last_batch(table: Any, app_id: str) -> int | None:
    """The highest batch id the table's snapshots record for `app_id` (None: no batch of it yet)."""
    found = [int(s.summary[BATCH_ID]) for s in table.metadata.snapshots
             if s.summary is not None and s.summary.get(APP_ID) == app_id and s.summary.get(BATCH_ID)]
    return max(found) if found else None


class IcebergFormat:
    """The Apache Iceberg table format (pyiceberg, SQL catalog)."""

    def exists(self, ref: TableRef) -> bool:
        try:
            return catalog(ref.settings).table_exists(identifier(ref.location))
        except DsflowError:
            return False

    def create(self, ref: TableRef, columns: list[tuple[str, str]], key: list[str]) -> None:
        """Create the namespace and the table with the query's output columns unless it exists."""
        import pyarrow as pa

        store = catalog(ref.settings)
        namespace, _ = identifier(ref.location)
        schema = pa.schema([pa.field(name, arrow_type(type_)) for name, type_ in columns])
        try:
            store.create_namespace_if_not_exists(namespace)
            store.create_table_if_not_exists(
                identifier(ref.location), schema,
                properties={CREATED: "true", "comment": "written by dsflow" + (
                    f"; upserted on ({', '.join(key)})" if key else "")})
        except Exception as err:  # noqa: BLE001 - pyiceberg and SQLAlchemy raise several kinds
            raise DsflowError("DSF-E235", f"cannot create the iceberg table {ref.location}: {err}",
                              hint="check the store's warehouse, catalog_uri and credentials") from err

    def add_columns(self, ref: TableRef, columns: list[tuple[str, str]]) -> None:
        """Add the nullable columns the table lacks (one schema commit; no data file is rewritten)."""
        import pyarrow as pa

        table = _table(ref)
        present = set(table.schema().as_arrow().names)
        wanted = [(n, t) for n, t in columns if n not in present]
        if not wanted:
            return
        try:
            with table.update_schema() as update:
                update.union_by_name(pa.schema([pa.field(n, arrow_type(t)) for n, t in wanted]))
        except Exception as err:  # noqa: BLE001
            raise DsflowError("DSF-E236", f"cannot add column(s) {', '.join(n for n, _ in wanted)} to the iceberg "
                              f"table {ref.location}: {err}", hint="check the store's settings") from err

    def drop(self, ref: TableRef) -> None:
        """Drop the table from the catalog and delete its files."""
        store = catalog(ref.settings)
        if store.table_exists(identifier(ref.location)):
            store.purge_table(identifier(ref.location))

    def write_batch(self, ref: TableRef, data: Any, key: list[str], app_id: str, batch_id: int) -> bool:
        """One micro-batch as one commit; False if the table already holds this batch (a replay)."""
        from dsflow.adapters.tables.base import latest_per_key

        table = _table(ref)
        done = last_batch(table, app_id)
        if done is not None and done >= batch_id:
            return False
        schema = table.schema().as_arrow()
        data = data.select(schema.names).cast(schema)
        properties = {APP_ID: app_id, BATCH_ID: str(batch_id)}
        try:
            if key:
                table.upsert(latest_per_key(data, key), join_cols=list(key), snapshot_properties=properties)
            else:
                table.append(data, snapshot_properties=properties)
        except Exception as err:  # noqa: BLE001 - a commit conflict or an unreachable store
            raise DsflowError("DSF-E237", f"cannot write batch {batch_id} to the iceberg table {ref.location}: "
                              f"{err}", hint="the query retries the batch on restart; check the store") from err
        return True

    # entities

    def describe(self, ref: TableRef) -> dict[str, Any]:
        table = _table(ref)
        snapshot = table.current_snapshot()
        return {"location": ref.location, "format": "iceberg", "files_at": table.location(),
                "snapshot": snapshot.snapshot_id if snapshot else None, "snapshots": len(table.metadata.snapshots),
                "records": int(snapshot.summary.get("total-records", 0)) if snapshot and snapshot.summary else 0,
                "columns": [{"name": f.name, "type": str(f.field_type), "nullable": not f.required}
                            for f in table.schema().fields],
                "configuration": dict(table.properties)}

    def count_rows(self, ref: TableRef) -> int:
        return _table(ref).scan().count()

    def position(self, ref: TableRef) -> dict[str, int]:
        """Where a stream of the table's appended rows stands once it read every snapshot so far: the offset of
        the `dsflow_iceberg` source (reading.py), {"snapshot": the current snapshot's id} (-1: none yet)."""
        snapshot = _table(ref).current_snapshot()
        return {"snapshot": snapshot.snapshot_id if snapshot is not None else -1}

    def rows(self, ref: TableRef, limit: int) -> tuple[list[str], list[tuple]]:
        data = _table(ref).scan(limit=limit).to_arrow()
        columns = data.column_names
        return columns, list(zip(*(data.column(i).to_pylist() for i in range(data.num_columns)), strict=True))

    def list_entities(self, settings: dict[str, str], path: str) -> list[str]:
        """Namespaces (no path) or the tables of a namespace, as NAMESPACE.TABLE."""
        store = catalog(settings)
        if not path.strip("."):
            return sorted(".".join(n) for n in store.list_namespaces())
        return sorted(".".join(t) for t in store.list_tables(path.strip(".")))


TABLES = IcebergFormat
"""The `tables` facet (core/stores.py): the table format of the kinds whose tables are Iceberg tables."""
