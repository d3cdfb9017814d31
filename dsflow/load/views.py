"""Materialized views: where the snapshot lives, from the view's WITH properties.

    CREATE MATERIALIZED VIEW v AS SELECT ...                                  SQLite (the embedded default),
                                                                             or dsflow.yml's default.view_store
    CREATE MATERIALIZED VIEW v WITH ('store' = 'pg') AS SELECT ...           a table in a store that can hold
                                                                             views (Capability.VIEWS)

The WITH properties naming the view's table there, and the table they name, are the store kind's rules
(load/rules.py: `view_props`, `view_options`).
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core import stores as registry
from dsflow.core.model import Column, Relation, Store
from dsflow.errors import Diagnostic, Location
from dsflow.load.rules import rule
from dsflow.core.suggest import did_you_mean

SQLITE = "sqlite"
VIEW_STORES = registry.kinds_that(registry.Capability.VIEWS)
"""The store types a view's snapshot may live in (besides SQLite)."""
STORE_VIEW_PROPS: set[str] = {p for t in VIEW_STORES for p in rule(t, "view_props") or ()}
"""The WITH properties that place a view's table in such a store."""
VIEW_PROPS = {"store"} | STORE_VIEW_PROPS

Report = Callable[[Diagnostic], None]


def view_relation(fqn: str, columns: tuple[Column, ...], primary_key: tuple[str, ...], props: dict[str, str],
                  stores: dict[str, Store], location: Location | None,
                  prop_location: Callable[[str], Location | None], report: Report,
                  default_store: str | None = None) -> Relation | None:
    """The relation of a materialized view, with its table if 'store' (or dsflow.yml's default.view_store) names a
    store that can hold views."""
    name = fqn.rsplit(".", 1)[-1]
    store_name = props.get("store") or default_store
    origin = "" if props.get("store") else " (default.view_store in dsflow.yml)"
    if store_name == SQLITE and SQLITE not in stores:  # 'store' = 'sqlite' keeps a view in SQLite despite a default
        store_name = None
    placing = sorted(k for k in STORE_VIEW_PROPS if k in props)
    if store_name is None:
        kinds = registry.listing(VIEW_STORES)
        for key in placing:
            report(Diagnostic("DSF-E141", f"'{key}' needs a {kinds} 'store' on the materialized view '{fqn}'",
                              prop_location(key) or location,
                              hint=f"add 'store' = '<a {kinds} store>', or remove it to keep the view in SQLite"))
        if placing:
            return None
        return Relation(fqn=fqn, kind="materialized_view", columns=columns, primary_key=primary_key, store="",
                        topic=name, location=location)
    store = stores.get(store_name)
    if store is None:
        report(Diagnostic("DSF-E021", f"unknown store '{store_name}'{origin} for '{fqn}'",
                          prop_location("store") or location, hint=did_you_mean(store_name, stores),
                          subject=f"store.{store_name}"))
        return None
    if not registry.can(store, registry.Capability.VIEWS):
        report(Diagnostic("DSF-E140", f"the materialized view '{fqn}' cannot be kept in the {store.type} store "
                          f"'{store_name}'{origin}", prop_location("store") or location,
                          hint=f"a view's snapshot lives in SQLite (no 'store') or in a "
                               f"{registry.listing(VIEW_STORES)} store"))
        return None
    place = rule(store.type, "view_options")
    placed = place(fqn, props, store, location, prop_location, report) if place is not None else (name, {})
    if placed is None:
        return None
    topic, options = placed
    return Relation(fqn=fqn, kind="materialized_view", columns=columns, primary_key=primary_key, store=store_name,
                    topic=topic, table_options=options, location=location)


def check_views_not_read(sources, relations: dict[str, Relation], location: Location | None, report: Report) -> None:
    """A materialized view is a snapshot, not a stream of changes: a continuous query cannot read one."""
    for source in sources:
        relation = relations.get(source.relation)
        if relation is not None and relation.kind == "materialized_view":
            report(Diagnostic("DSF-E144", f"'{relation.fqn}' is a materialized view; continuous queries cannot "
                              "read views", location, hint="read the stream or changelog the view is made from, "
                              "or query the view with 'dsflow query'"))
