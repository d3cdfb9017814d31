"""The store protocol's physical-object operations (the `objects` facet, core/stores.py), asked by store type.

What a store kind can tell about the object a relation lives in (a topic, a stream, a table):

    identities     the object's identity now: a log deleted and created again under the same name is another
                   log, and offsets read from one mean nothing on the other (a topic's id; a stream's ARN and
                   creation time)
    held_records   the records it holds now: what a plan that deletes or empties it destroys (`DESTROYS ~N`),
                   and what a replay from the earliest position re-reads
    can_grow/grow  whether more partitions (shards) can be added in place, keeping the records, and doing it

A store kind that cannot tell one of these returns None ({} for identities): the plan then says 'not counted',
and offsets are carried on the names alone. The planner, refresh and apply ask this module, never a store type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from dsflow.core import stores
from dsflow.errors import DsflowError


class PhysicalObjects(Protocol):
    """One store kind's physical-object operations (implemented in adapters/<store>/objects.py)."""

    def identities(self, store: Any, names: list[str]) -> dict[str, str]:
        """name -> identity now, for the named objects that exist; {} where the store gives none."""

    def held_records(self, store: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                     since: str | None = None) -> int | None:
        """Records the deployed object holds now (from epoch ms `since` when given); None if not countable."""

    def can_grow(self, store: Any, name: str, total: int) -> bool:
        """Whether the object can take `total` partitions (shards) in place, keeping its records."""

    def grow(self, store: Any, name: str, total: int) -> None:
        """Raise the object's partitions (shards) to `total` in place."""


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
    objects_for(store.type).grow(store, data["topic"], total)


def every_objects(first: str | None = None) -> list[Any]:
    """The `objects` facet of every store kind (once per package): the kind of store type `first` first, then in
    registry order but the first kind holding logs last (asked for a relation whose store type is unknown, as
    one deleted with its store, it takes the logs that no other kind recognises by what it recorded)."""
    default = stores.kinds_that(stores.Capability.LOGS)[0]
    ordered = sorted(stores.REGISTRY.values(), key=lambda kind: (kind.type != first, kind.type == default))
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
    grants, roles); None if no kind does."""
    return next((found for objects in every_objects() if (found := getattr(objects, name, None)) is not None), None)
