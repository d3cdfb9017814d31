"""Blue/green of a query writing a lake table: the parts engine/bluegreen.py asks besides those of
a swapped table (engine/bluegreen_tables.py) and a log's.

A table kept at a path (a store with core/stores.py Capability.RELOCATE) has no catalog to
rename in: its new version writes the path `<path>_v<N>` (the plan's `relocate`), and at the switch the relation's
recorded location moves there in the one state write that records the deployment, as a log's does. The old path is
kept, as the old log is.

A query of the project reading the table as a stream (a table source) cannot be moved to the new table at an
equivalent position (the two tables' versions or snapshots do not correspond): such a deployment is refused
(DSF-E965) before anything is built.
"""

from __future__ import annotations

from typing import Any

from dsflow.core import stores
from dsflow.core.address import Address
from dsflow.core.bluegreen import BlueGreen, compared
from dsflow.errors import DsflowError


def check_readers(project: Any, plan: BlueGreen) -> None:
    """DSF-E965 when queries of the project read the lake table as a stream."""
    relation = project.relation(Address.parse(plan.sink).name)
    store = project.store(relation.store) if relation is not None else None
    if not plan.readers or store is None or not stores.can(store, stores.Capability.TABLE_SOURCE):
        return
    raise DsflowError("DSF-E965", f"{plan.sink}: {', '.join(plan.readers)} read(s) its table as a stream; a reader "
                      "cannot be moved to the new version's table at the same position",
                      hint="apply without --blue-green (the readers then replay the rebuilt table)")


def _rows(project: Any, relation_fqn: str) -> list[tuple]:
    from dsflow.adapters.tables import table_format, table_ref

    relation = project.relation(relation_fqn)
    ref = table_ref(project.root, project.store(relation.store), relation)
    fmt: Any = table_format(ref.format)  # every format reads its rows (TableFormat names what writers need)
    if not fmt.exists(ref):
        return []
    columns, found = fmt.rows(ref, max(1, fmt.count_rows(ref)))
    order = sorted(range(len(columns)), key=lambda i: columns[i])
    return [tuple(row[i] for i in order) for row in found]


def compare(old_project: Any, new_project: Any, plan: BlueGreen) -> dict[str, int]:
    """The old and new tables' rows at the cut, compared as multisets."""
    name = Address.parse(plan.sink).name
    return compared(_rows(old_project, name), _rows(new_project, name))


def kept(sink_outputs: dict[str, Any]) -> dict[str, str]:
    """What a relocated deployment keeps of the old table besides its path: where it is and its format (what a
    later apply deletes, if dsflow created it)."""
    return {"location": str(sink_outputs.get("table", "")), "format": str(sink_outputs.get("format", ""))}
