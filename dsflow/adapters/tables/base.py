"""What every table format shares: `TableRef` (where one table is), the `TableFormat` protocol, the store types
that hold tables, and helpers of writers (app ids, the last row per key). The formats (delta.py, snowflake.py)
import this module; the package (`__init__`) names them by format.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dsflow.core import stores
from dsflow.errors import DsflowError



@dataclass(frozen=True)
class TableRef:
    """One table: its format, where it is (a Delta URI or DB.SCHEMA.TABLE) and the store's settings."""

    format: str
    location: str
    settings: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)


class TableFormat(Protocol):
    def exists(self, ref: TableRef) -> bool: ...

    def create(self, ref: TableRef, columns: list[tuple[str, str]], key: list[str]) -> None: ...

    def add_columns(self, ref: TableRef, columns: list[tuple[str, str]]) -> None: ...

    def drop(self, ref: TableRef) -> None: ...

    def count_rows(self, ref: TableRef) -> int: ...

    def write_batch(self, ref: TableRef, data: Any, key: list[str], app_id: str, batch_id: int) -> bool: ...


class RenamingFormat(TableFormat, Protocol):
    """A format that can rename a table in place (a store kind's `tables` facet with `rename`): a move that changes
    only the table's name (the plan decides: core/moves.py `table_rename`) keeps its rows and its batch ledger."""

    def rename(self, old: TableRef, new: TableRef) -> None: ...


class PositionedFormat(TableFormat, Protocol):
    """A format whose tables a query reads as a stream (core/stores.py Capability.TABLE_SOURCE) and that says where
    such a reader stands once it read every commit so far: its stream source's offset ({"version": v},
    {"snapshot": id}). A blue/green deployment moves the table's readers by it (engine/bluegreen_lake.py)."""

    def position(self, ref: TableRef) -> dict[str, int]: ...


def delta_root(project_root: str | Path, store_type: str, settings: dict[str, str]) -> str:
    """Where a Delta store keeps its tables: s3://bucket/prefix, abfss://container@account.../prefix (adls) or a
    local folder (relative to the project)."""
    if store_type == "adls":
        from dsflow.adapters.tables.lakepaths import adls_root

        return adls_root(settings)
    if settings.get("bucket"):
        prefix = settings.get("prefix", "").strip("/")
        return f"s3://{settings['bucket']}" + (f"/{prefix}" if prefix else "")
    path = Path(settings.get("path", "."))
    return str(path if path.is_absolute() else (Path(project_root) / path).resolve())


def table_ref(project_root: str | Path, store, relation) -> TableRef:
    """The TableRef of a table relation in its store."""
    fmt = stores.table_format_of(store.type)
    if fmt is None:
        raise DsflowError("DSF-E750", f"store '{store.name}' ({store.type}) holds no tables")
    settings = dict(store.properties)
    if fmt != "delta":  # a name in the store's catalog or account (DB.SCHEMA.TABLE, NAMESPACE.TABLE)
        return TableRef(fmt, relation.topic, settings, dict(relation.table_options))
    path = relation.table_options.get("delta.path", relation.topic)
    if "://" in path or Path(path).is_absolute():
        location = path
    else:
        location = delta_root(project_root, store.type, settings).rstrip("/") + "/" + path.strip("/")
    return TableRef(fmt, location, settings, dict(relation.table_options))


def added_columns(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The (name, type) columns a change of a table relation adds (the plan keeps a table in place only when
    columns are appended): ALTER TABLE ADD COLUMN, rows written before read them as NULL."""
    if not before or not after:
        return []
    known = {name for name, _ in before.get("columns", [])}
    return [(name, type_) for name, type_ in after.get("columns", []) if name not in known]


def app_id(query: str, checkpoint: str) -> str:
    """The id a query's writes carry in the table: batch ids restart with each new checkpoint."""
    return "dsflow-" + hashlib.sha256(f"{query}\n{checkpoint}".encode()).hexdigest()[:16]


def latest_per_key(table, key: list[str]):
    """The last row of each key in an Arrow table (rows of one key arrive in order within a batch)."""
    import pyarrow as pa

    if not key or table.num_rows == 0:
        return table
    indexed = table.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    last = indexed.group_by(key, use_threads=False).aggregate([("__row", "max")])
    return table.take(sorted(last.column("__row_max").to_pylist()))
