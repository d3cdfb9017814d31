"""Lake and warehouse tables' physical-object operations (adapters/objects.py): the rows a deployed table holds, and
apply's table executor. Tables have no identity to compare (no query reads them by offsets)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class TableObjects:
    def identities(self, store: Any, names: list[str]) -> dict[str, str]:
        return {}

    def held_records(self, store: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                     since: str | None = None) -> int | None:
        from dsflow.adapters.tables import TableRef, table_format

        if since or not outputs.get("table") or not outputs.get("format"):
            return None
        ref = TableRef(outputs["format"], outputs["table"], dict(store.properties),
                       dict(data.get("table_options") or {}))
        fmt = table_format(ref.format)
        return fmt.count_rows(ref) if fmt.exists(ref) else 0

    def executor(self, data: Mapping[str, Any], outputs: Mapping[str, Any], store_type: str | None) -> Any:
        """A table relation: its table, created by CREATE TABLE ... AS SELECT (adapters/tables/executor.py)."""
        from dsflow.adapters.tables.executor import TableExecutor

        return TableExecutor() if data.get("kind") == "table" else None


OBJECTS = TableObjects()
