"""How plan, refresh and apply ask the store kinds' `objects` facets (core/protocol.py PhysicalObjects), by store
type: a relation's object identity now, the records it holds (`DESTROYS ~N`), in-place growth, apply's executor and
refresh's observation. The planner, refresh and apply ask this module, never a store type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dsflow.core import stores
from dsflow.core.protocol import PhysicalObjects
from dsflow.errors import DsflowError


def objects_for(store_type: str) -> PhysicalObjects | None:
    """The `objects` facet of the store type's kind (core/stores.py); None if it has none."""
    return stores.facet(store_type, "objects")


def identities(project: Any, names: Iterable[str]) -> dict[str, str]:
    """The identity now of each named object of the project's relations (topics, streams), asked of the store of
    the relation that names it; one request per store."""
    wanted = set(names)
    by_store: dict[str, list[str]] = {}
    for relation in project.relations:
        if relation.topic in wanted and project.store(relation.store) is not None:
            by_store.setdefault(relation.store, []).append(relation.topic)
    found: dict[str, str] = {}
    for name, named in by_store.items():
        store = project.store(name)
        objects = objects_for(store.type)
        if objects is not None:
            found.update(objects.identities(store, sorted(set(named))))
    return found


def log_sizes(project: Any, relations: Iterable[Any]) -> dict[str, int | None]:
    """For each relation (by fqn) whose store kind can tell, its log's size now: partitions (open shards), None when
    the log does not exist. One call per store; a relation of a store that cannot be reached is left out (the plan
    then cannot say whether its log exists)."""
    by_store: dict[str, list[Any]] = {}
    for relation in relations:
        by_store.setdefault(relation.store, []).append(relation)
    found: dict[str, int | None] = {}
    for name, named in by_store.items():
        store = project.store(name)
        objects = objects_for(store.type) if store is not None else None
        if objects is None or not hasattr(objects, "sizes"):
            continue
        try:
            sizes = objects.sizes(store, sorted({r.topic for r in named}))
        except DsflowError:
            continue
        found.update({r.fqn: sizes.get(r.topic) for r in named})
    return found


def consumer_groups(project: Any, relations: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """relation address -> the consumer groups registered on its log, for each relation (address -> deployed data)
    whose store kind can tell. One call per store; a store that cannot be reached, or that cannot list
    groups, is left out."""
    by_store: dict[str, dict[str, str]] = {}
    for address, data in relations.items():
        if data.get("topic"):
            by_store.setdefault(data.get("store") or "", {})[address] = data["topic"]
    found: dict[str, list[str]] = {}
    for name, topics in sorted(by_store.items()):
        store = project.store(name)
        objects = objects_for(store.type) if store is not None else None
        if objects is None or not hasattr(objects, "consumer_groups"):
            continue
        try:
            groups = objects.consumer_groups(store, sorted(set(topics.values())))
        except DsflowError:
            continue
        found.update({address: groups[topic] for address, topic in topics.items() if topic in groups})
    return found


def existing_tables(project: Any, relations: Iterable[Any]) -> dict[str, tuple[list[list[str]] | None, str | None]]:
    """For each table relation (by fqn) whose store kind can read its catalog (`tables_seen`, Capability.IMPORT_TABLES):
    (its columns [name, type] as the catalog has them, or None when it does not exist; why it cannot take the
    relation's rows as it is, or None). A store that cannot be reached: (None, its message)."""
    found: dict[str, tuple[list[list[str]] | None, str | None]] = {}
    for relation in relations:
        store = project.store(relation.store)
        objects = objects_for(store.type) if store is not None else None
        if objects is None or not hasattr(objects, "tables_seen"):
            continue
        try:
            found[relation.fqn] = objects.tables_seen(store, relation)
        except DsflowError as err:
            found[relation.fqn] = (None, f"cannot look at the table: {err.message}")
    return found


def positions(project: Any, names: Iterable[str]) -> dict[str, dict[str, tuple[int, int]]] | None:
    """For each named log of the project's relations: partition -> (first offset held, end offset) now, asked of
    the store of the relation that names it (a `positions` facet, one call per store); None when one of them cannot
    tell (a store kind without offsets, or one that cannot be reached)."""
    wanted = set(names)
    by_store: dict[str, set[str]] = {}
    for relation in project.relations:
        if relation.topic in wanted and project.store(relation.store) is not None:
            by_store.setdefault(relation.store, set()).add(relation.topic)
    if set().union(*by_store.values()) != wanted:
        return None
    found: dict[str, dict[str, tuple[int, int]]] = {}
    for name, named in by_store.items():
        store = project.store(name)
        objects = objects_for(store.type)
        if objects is None or not hasattr(objects, "positions"):
            return None
        try:
            found.update(objects.positions(store, sorted(named)))
        except DsflowError:
            return None
    return found if set(found) == wanted else None


def end_offsets(project: Any, names: list[str]) -> dict[str, dict[str, int]] | None:
    """Each named log's end offset per partition now (where a reset checkpoint starts: engine/executors.py); None
    when a store cannot say."""
    now = positions(project, names) if names else None
    return None if now is None else {t: {p: end for p, (_, end) in parts.items()} for t, parts in now.items()}


def held_records(project: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                 since: str | None = None) -> int | None:
    """Records a deployed relation's object holds now, asked of its store; None when the store is gone from the
    project, cannot count, or cannot be reached."""
    store = project.store(outputs.get("store") or data.get("store") or "") if project is not None else None
    objects = objects_for(store.type) if store is not None else None
    if objects is None:
        return None
    try:
        return objects.held_records(store, outputs, data, since)
    except DsflowError:
        return None


def can_grow(project: Any, data: Mapping[str, Any], total: int) -> bool:
    """Whether the store of a relation (its deployed data) can give its object `total` partitions in place; False
    when the store kind cannot, the store is gone from the project, or it cannot be reached."""
    store = project.store(data.get("store") or "")
    objects = objects_for(store.type) if store is not None else None
    if objects is None or not hasattr(objects, "can_grow"):
        return False
    try:
        return objects.can_grow(store, data["topic"], total)
    except DsflowError:
        return False


def grow(project: Any, data: Mapping[str, Any], total: int) -> None:
    store = project.store(data["store"])
    objects = objects_for(store.type)
    assert objects is not None  # grown only where can_grow said it can
    objects.grow(store, data["topic"], total)


def every_objects(first: str | None = None) -> list[Any]:
    """The `objects` facet of every store kind (once per package): the kind of store type `first` first, then in
    registry order but a kind with `legacy_logs` last (asked for a relation whose store type is unknown, as one
    deleted with its store, it takes the logs that no other kind recognises by what it recorded)."""
    ordered = sorted(stores.REGISTRY.values(), key=lambda kind: (kind.type != first, kind.legacy_logs))
    found: dict[str, Any] = {}
    for kind in ordered:
        if kind.package not in found:
            found[kind.package] = kind.facet("objects")
    return [objects for objects in found.values() if objects is not None]


def executor(data: Mapping[str, Any] | None, outputs: Mapping[str, Any] | None, store_type: str | None) -> Any:
    """Apply's executor of a relation (create, update, delete), asked of the store kinds' `objects` facets: the
    first that recognises it by its data, recorded outputs and store type (None: not known); None if none does."""
    for objects in every_objects(store_type):
        found = objects.executor(data or {}, outputs or {}, store_type) if hasattr(objects, "executor") else None
        if found is not None:
            return found
    return None


def local_views() -> Any:
    """Apply's executor of a materialized view without a store (core/stores.py LOCAL_VIEWS: its `objects` facet)."""
    objects = stores.local_views("objects")
    assert objects is not None  # dsflow's own views have an `objects` facet
    return objects.executor({"kind": "materialized_view"}, {}, None)


def observe(project: Any, deployed: Any, cache: dict[str, Any]) -> Any:
    """Refresh's observation of a deployed object (a topic, stream, slot, view table, grant), asked of the store
    kinds' `objects` facets; None when no kind observes it. `cache` is shared by the calls of one refresh."""
    for objects in every_objects():
        found = objects.observe(project, deployed, cache) if hasattr(objects, "observe") else None
        if found is not None:
            return found
    return None


def pushed_down(name: str) -> Any:
    """The executor a store kind offers for grants or roles it enforces itself (`objects` facet attribute `name`:
    grants, roles, logins); None if no kind does. Where several kinds offer one, each change goes to the first
    that `claims` it, else to the first without `claims` (Claimed)."""
    found = [executor for objects in every_objects() if (executor := getattr(objects, name, None)) is not None]
    return Claimed(tuple(found)) if len(found) > 1 else (found[0] if found else None)


class Claimed:
    """The executors several store kinds offer for one resource kind: an executor with `claims(project, data,
    outputs)` carries out the changes it claims (a grant on its store's objects, or one it pushed down); the
    others go to the first executor without `claims`, or are recorded only."""

    def __init__(self, executors: tuple[Any, ...]) -> None:
        self.executors = executors

    def pick(self, project: Any, data: Any, outputs: Any) -> Any:
        for executor in self.executors:
            if hasattr(executor, "claims") and executor.claims(project, data, outputs):
                return executor
        return next((e for e in self.executors if not hasattr(e, "claims")), None)

    def create(self, ctx: Any, change: Any) -> dict[str, Any]:
        executor = self.pick(ctx.project, change.after, {})
        return executor.create(ctx, change) if executor is not None else {}

    def update(self, ctx: Any, change: Any, deployed: Any) -> dict[str, Any]:
        executor = self.pick(ctx.project, change.after, deployed.outputs)
        return executor.update(ctx, change, deployed) if executor is not None else dict(deployed.outputs)

    def replace(self, ctx: Any, change: Any, deployed: Any) -> dict[str, Any]:
        self.delete(ctx, deployed)
        return self.create(ctx, change)

    def delete(self, ctx: Any, deployed: Any) -> Any:
        executor = self.pick(ctx.project, deployed.data, deployed.outputs)
        return executor.delete(ctx, deployed) if executor is not None else None
