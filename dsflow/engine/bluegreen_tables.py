"""Blue/green of a query writing a table (or a materialized view's table) in a store that swaps tables (core/stores.py
Capability.SWAP, its `swap` facet): the parts engine/bluegreen.py asks of it when the plan froze a `kept_as`.

The new version writes the table `<table>_v<N>` (the relation with that name: `beside`); production keeps its name.
At the switch one transaction of renames gives the new table the production name and keeps the old one as
`kept_as`; the new version then resumes on its checkpoint writing the production name (its batch ledger followed the
rename). A shape the store cannot swap (DSF-E965) is refused before anything is built.
"""

from __future__ import annotations

from typing import Any

from dsflow.core import stores
from dsflow.core.address import Address
from dsflow.core.bluegreen import BlueGreen, compared
from dsflow.errors import DsflowError


def is_table(plan: BlueGreen) -> bool:
    return plan.kept_as is not None


def _name(location: str) -> str:
    return location.rsplit(".", 1)[-1]


def _facet(project: Any, plan: BlueGreen) -> tuple[Any, Any, dict[str, str]]:
    """(the store's swap facet, the production relation, the store's settings)."""
    relation = project.relation(Address.parse(plan.sink).name)
    store = project.store(relation.store) if relation is not None else None
    facet = stores.facet(store.type, "swap") if store is not None else None
    if facet is None or store is None:
        raise DsflowError("DSF-E965", f"{plan.sink} is not a table in a store that swaps tables (it or its store "
                          "left the project)", hint="apply without --blue-green")
    return facet, relation, dict(store.properties)


def beside(project: Any, plan: BlueGreen) -> Any:
    """The project whose sink relation writes the new version's table."""
    facet, relation, _ = _facet(project, plan)
    moved = facet.versioned(relation, _name(plan.new_log))
    return project.model_copy(update={"relations": tuple(moved if r.fqn == relation.fqn else r
                                                         for r in project.relations)})


def check(project: Any, plan: BlueGreen) -> None:
    """DSF-E965 when the production table has dependents that cannot follow a rename."""
    facet, relation, settings = _facet(project, plan)
    refused = facet.refusal(settings, facet.place(relation))
    if refused:
        raise DsflowError("DSF-E965", f"{plan.sink}: its table cannot be swapped in one transaction of renames: "
                          f"{refused}", hint=getattr(facet, "REFUSED_HINT", "apply without --blue-green"))


def drop_new(project: Any, plan: BlueGreen, created: bool) -> None:
    """The new version's table dropped (a failed deployment) if this deployment created it."""
    facet, relation, settings = _facet(project, plan)
    if created:
        facet.drop(settings, facet.place(facet.versioned(relation, _name(plan.new_log))))


def compare(project: Any, plan: BlueGreen) -> dict[str, int]:
    """Both tables' rows at the cut, compared as multisets."""
    facet, relation, settings = _facet(project, plan)
    old = facet.rows(settings, facet.place(relation))
    new = facet.rows(settings, facet.place(facet.versioned(relation, _name(plan.new_log))))
    return compared(old, new)


def swap(project: Any, plan: BlueGreen) -> list[str]:
    """The transaction of renames; the views it defined again on the new table."""
    facet, relation, settings = _facet(project, plan)
    assert plan.kept_as is not None  # a table's deployment
    return list(facet.swap(settings, facet.place(relation), _name(plan.new_log), _name(plan.kept_as)))


def swapped(project: Any, plan: BlueGreen) -> bool:
    """Whether the transaction of renames committed, from the catalog: the kept name is there and the new
    version's is not (committed), or the other way round (not); DSF-E966 when the catalog shows neither."""
    facet, relation, settings = _facet(project, plan)
    assert plan.kept_as is not None  # a table's deployment
    kept_, new = (facet.exists(settings, facet.place(facet.versioned(relation, _name(name))))
                  for name in (plan.kept_as, plan.new_log))
    if kept_ != new:
        return kept_
    raise DsflowError("DSF-E966", f"{plan.sink}: the catalog holds {'both' if new else 'neither'} of "
                      f"{plan.kept_as} and {plan.new_log}, so whether the transaction of renames committed cannot be "
                      "told; nothing was touched", hint="look at the tables, rename them by hand to one of the two "
                      "outcomes, and apply again (docs/plan.md, 'An apply killed during a deployment')")


def kept(project: Any, plan: BlueGreen, sink_outputs: dict[str, Any]) -> dict[str, str]:
    """What the deployment keeps of the old version's table: where it is now, and whether dsflow made it."""
    facet, relation, _ = _facet(project, plan)
    assert plan.kept_as is not None  # a table's deployment
    database, schema, table = facet.place(facet.versioned(relation, _name(plan.kept_as)))
    return {"log": plan.kept_as, "store": relation.store, "kind": relation.kind, "database": database or "",
            "schema": schema, "table": table,
            "created_by_dsflow": str(bool(sink_outputs.get("created_by_dsflow", True))).lower()}


def retire(project: Any, kept_: dict[str, str]) -> None:
    """A kept old table dropped (only if dsflow created it)."""
    store = project.store(kept_.get("store", "")) if project is not None else None
    facet = stores.facet(store.type, "swap") if store is not None else None
    if facet is None or store is None or kept_.get("created_by_dsflow") != "true":
        return
    facet.drop(dict(store.properties), (kept_.get("database") or None, kept_["schema"], kept_["table"]))
