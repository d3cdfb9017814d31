"""`dsflow entity`: what a table store holds (lake, warehouse and database tables).

A PATH is read in the store's own terms, as its kind's `commands` facet says (core/stores.py; `entity_paths`
for the help): a table's path under a lake store's root, `database[.schema[.table]]` in a database,
`[NAMESPACE[.TABLE]]` in a catalog. A table relation of the project may be named instead of a path (its store
and location are used).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsflow.core import stores
from dsflow.core.model import Project, Store
from dsflow.errors import DsflowError


@dataclass(frozen=True)
class Target:
    store: Store
    path: str


def entity_types() -> list[str]:
    """The store types `dsflow entity` browses: those whose `commands` facet lists entities."""
    return [t for t in stores.REGISTRY if hasattr(stores.facet(t, "commands"), "list_entities")]


def _commands(store: Store) -> Any:
    """The store's entity commands; DSF-E759 for a store kind that has no entities."""
    found = stores.facet(store.type, "commands")
    if not hasattr(found, "list_entities"):
        types = entity_types()
        raise DsflowError("DSF-E759", f"the {store.type} store '{store.name}' has no entities to browse",
                          hint=f"entities are tables of {', '.join(types[:-1])} and {types[-1]} stores; for topics "
                               "use 'dsflow topic'")
    return found


def resolve(project: Project, path: str, store_name: str | None) -> Target:
    """The store and path meant: --store, or a table relation named by PATH."""
    if store_name:
        store = project.store(store_name)
        if store is None:
            raise DsflowError("DSF-E021", f"no store '{store_name}' in the project",
                              hint="see the stores in the project's YAML files")
        return Target(store, path)
    relation = next((r for r in project.relations if r.kind == "table" and path
                     and (r.fqn == path or r.fqn.endswith("." + path))), None)
    if relation is None:
        raise DsflowError("DSF-E758", f"'{path}' is not a table of the project; name a store",
                          hint=f"pass --store NAME (a {stores.listing(entity_types())} store)")
    store = project.store(relation.store)
    assert store is not None  # a loaded project's relations name its stores
    return Target(store, _commands(store).entity_location(relation, store))


def list_entities(project: Project, target: Target) -> list[str]:
    return _commands(target.store).list_entities(project, target.store, target.path)


def describe_entity(project: Project, target: Target) -> dict[str, Any]:
    return _commands(target.store).describe_entity(project, target.store, target.path)


def entity_rows(project: Project, target: Target, limit: int) -> tuple[list[str], list[tuple]]:
    return _commands(target.store).entity_rows(project, target.store, target.path, limit)
