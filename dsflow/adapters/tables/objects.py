"""Lake and warehouse tables' physical-object operations (adapters/objects.py): the rows a deployed table holds,
apply's table executor, and refresh's look at a table (`observe_table`: for a store kind whose `objects` facet
observes its tables; the lake and warehouse kinds here observe none). Tables have no identity to compare (no query reads
them by offsets)."""

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


def observe_table(project: Any, deployed: Any) -> Any:
    """Refresh of a deployed table, for a store kind that observes its tables: drift when the table is
    missing (the next apply creates it again, empty), or its store is gone from the project or cannot be reached."""
    from dsflow.adapters.tables import TableRef, table_format
    from dsflow.core.plan import Observation
    from dsflow.errors import DsflowError

    out = deployed.outputs
    store = project.store(out.get("store", "")) if project is not None else None
    if store is None:
        return Observation(address=deployed.address, healthy=False,
                           detail=f"cannot reach the table: the store '{out.get('store', '')}' is no longer in the "
                                  "project")
    ref = TableRef(out["format"], out["table"], dict(store.properties), dict(deployed.data.get("table_options") or {}))
    try:
        exists = table_format(ref.format).exists(ref)
    except DsflowError as err:
        return Observation(address=deployed.address, healthy=False, detail=err.message)
    if not exists:
        return Observation(address=deployed.address, healthy=False, detail=f"table {ref.location} is missing")
    return Observation(address=deployed.address, healthy=True, detail="table exists")


OBJECTS = TableObjects()
