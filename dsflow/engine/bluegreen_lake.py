"""Blue/green of a query writing a lake table: the parts engine/bluegreen.py asks besides those of
a swapped table (engine/bluegreen_tables.py) and a log's.

A table kept at a path (a store with core/stores.py Capability.RELOCATE) has no catalog to
rename in: its new version writes the path `<path>_v<N>` (the plan's `relocate`), and at the switch the relation's
recorded location moves there in the one state write that records the deployment, as a log's does. The old path is
kept, as the old log is.

A query of the project reading the table as a stream (a table source) is moved as a log's reader is, with a table's
position in place of a log's offsets: the offset of the format's stream source ({"version": v} for a table whose
commits are numbered, {"snapshot": id} for one whose snapshots have ids), read with the format's `position`. The
deployed version is stopped at the cut and the new version run to it, so neither table changes while the switch
reads them: the reader reads the old table to its position then (`ends` of the old table, `reached`), is stopped,
and starts in a new checkpoint on the new table (the new path; for a swapped table the production name once the
catalog's renames gave it to the new table) right after the new table's position at the cut: it reads only what
the new version writes after the cut. A swapped table's reader is stopped before the renames (its running source
would otherwise find another table's snapshots under the name it reads). A store whose table format cannot say a
position is refused (DSF-E965) before anything is built; the formats of the lake stores today all can.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsflow.core import stores
from dsflow.core.address import Address
from dsflow.core.bluegreen import BlueGreen, compared
from dsflow.errors import DsflowError


def check_readers(project: Any, plan: BlueGreen) -> None:
    """DSF-E965 when queries of the project read the lake table as a stream and its format cannot say where a
    reader stands (a stream position)."""
    relation = project.relation(Address.parse(plan.sink).name)
    store = project.store(relation.store) if relation is not None else None
    if not plan.readers or store is None or not stores.can(store, stores.Capability.TABLE_SOURCE):
        return
    if hasattr(_format(project, relation), "position"):
        return
    raise DsflowError("DSF-E965", f"{plan.sink}: {', '.join(plan.readers)} read(s) its table as a stream, and its "
                      "table format cannot say a reader's position in it: a reader cannot be moved to the new "
                      "version's table at the cut",
                      hint="apply without --blue-green (the readers then replay the rebuilt table)")


def moves_readers(project: Any, plan: BlueGreen) -> bool:
    """The deployment's readers read a lake table (positions, not a log's offsets)."""
    relation = project.relation(Address.parse(plan.sink).name)
    store = project.store(relation.store) if relation is not None else None
    return bool(plan.readers) and stores.can(store, stores.Capability.TABLE_SOURCE)


def ends(project: Any, reading: Any, plan: BlueGreen) -> dict[str, dict[str, int]]:
    """The position now of the sink's table in `project` (the old one, or the new version's), keyed by the name
    the readers know it by in `reading` (the project they run in)."""
    sink = Address.parse(plan.sink).name
    relation = project.relation(sink)
    assert relation is not None  # the plan's sink is the project's relation
    ref = _ref(project, relation)
    return {reading.relation(sink).topic: dict(_format(project, relation).position(ref))}


def reached(committed: Mapping[str, Mapping[str, Any]] | None, target: Mapping[str, Mapping[str, int]]) -> bool:
    """A reader's checkpoint committed the tables' positions `target`: a table version at or past it, a snapshot
    the same (ids are not ordered). A reader that committed nothing has reached a table without a
    snapshot."""
    for log, position in target.items():
        found = (committed or {}).get(log, {})
        if "version" in position and int(found.get("version", -1)) < int(position["version"]):
            return False
        if "snapshot" in position and int(found.get("snapshot", -1)) != int(position["snapshot"]):
            return False
    return True


def _ref(project: Any, relation: Any) -> Any:
    from dsflow.adapters.tables import table_ref

    return table_ref(project.root, project.store(relation.store), relation)


def _format(project: Any, relation: Any) -> Any:
    from dsflow.adapters.tables import table_format

    return table_format(_ref(project, relation).format)


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
