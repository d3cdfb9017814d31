"""Store settings and CREATE TABLE ... AS SELECT: the settings a store needs and where a table lives.

A store keeps its settings in `properties`; what it requires and allows, and its own checks of them, are its
kind's `rules` facet (load/rules.py): `settings(type)`, its pydantic model (load/store_settings.py), and
`store_diagnostics`, its checks across settings.
A table goes to a store that can hold tables (Capability.TABLES); the WITH properties it takes and the object
it names there (`table_props`, `table_options`) are its store kind's rules too.
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core import stores
from dsflow.core.model import Column, Relation, Store
from dsflow.errors import Diagnostic, Location
from dsflow.load.rules import rule
from dsflow.load.store_settings import StoreSettings, settings_diagnostics
from dsflow.core.suggest import did_you_mean

Report = Callable[[Diagnostic], None]


def _store_settings() -> dict[str, type[StoreSettings]]:
    found = {}
    for type_ in stores.REGISTRY:
        settings = rule(type_, "settings")
        if settings is not None and settings(type_) is not None:
            found[type_] = settings(type_)
    return found


def _table_props() -> set[str]:
    found = {"store"}
    for type_ in stores.kinds_that(stores.Capability.TABLES):
        found |= _own_table_props(type_)
    return found


def _own_table_props(store_type: str) -> set[str]:
    """The WITH properties a table in a store of `store_type` takes besides 'store' (none without the rule)."""
    props = rule(store_type, "table_props")
    return set(props(store_type)) if props is not None else set()


STORE_SETTINGS: dict[str, type[StoreSettings]] = _store_settings()
"""Store type -> its settings model (load/store_settings.py), from each kind's rules (a kind without: not checked)."""
TABLE_PROPS = _table_props()
"""Every WITH property a CREATE TABLE takes, in any table store."""


def store_settings_diagnostics(name: str, type_: str, bootstrap: str, properties: dict[str, str],
                               location: Location | None,
                               where: Callable[[str], Location | None] | None = None) -> list[Diagnostic]:
    """A store's properties: those its kind requires and allows (DSF-E095), then its kind's own checks."""
    where = where or (lambda key: location)
    out = _required_allowed(name, type_, bootstrap, properties, location, where)
    own = rule(type_, "store_diagnostics")
    if own is not None:
        out += own(name, type_, bootstrap, properties, location, where)
    return out


def _required_allowed(name: str, type_: str, bootstrap: str, properties: dict[str, str],
                      location: Location | None, where: Callable[[str], Location | None]) -> list[Diagnostic]:
    if type_ not in STORE_SETTINGS:
        return []
    out = []
    if bootstrap:
        out.append(Diagnostic("DSF-E095", f"bootstrap_servers is not a setting of the {type_} store '{name}'",
                              location, hint="remove it; see docs/project.md (Table stores)"))
    return out + settings_diagnostics(STORE_SETTINGS[type_], name, type_, properties, location, where)


def table_relation(fqn: str, columns: tuple[Column, ...], primary_key: tuple[str, ...], props: dict[str, str],
                   stores_: dict[str, Store], default_store: str | None, location: Location | None,
                   prop_location: Callable[[str], Location | None], report: Report) -> Relation | None:
    """The relation a CREATE TABLE ... AS SELECT writes: a table in a store that holds tables."""
    store_name = props.get("store") or default_store
    store = stores_.get(store_name or "")
    where = prop_location("store") or location
    if store is None:
        report(Diagnostic("DSF-E021", f"unknown store '{store_name}' for '{fqn}'", where,
                          hint=did_you_mean(store_name or "", stores_), subject=f"store.{store_name}"))
        return None
    if not stores.can(store, stores.Capability.TABLES):
        report(Diagnostic("DSF-E096", f"table '{fqn}' is in the {store.type} store '{store.name}'", where,
                          hint=f"CREATE TABLE ... AS SELECT writes to an "
                               f"{stores.listing(stores.kinds_that(stores.Capability.TABLES))} store: name one "
                               "with 'store' = '...'"))
        return None
    allowed = {"store"} | _own_table_props(store.type)
    for key in sorted(set(props) - allowed):
        if key in TABLE_PROPS:
            report(Diagnostic("DSF-E097", f"'{key}' does not apply to the {store.type} store '{store.name}'",
                              prop_location(key) or location, hint=f"allowed here: {', '.join(sorted(allowed))}"))
    place = rule(store.type, "table_options")
    placed = place(fqn, props, store, location, prop_location, report) if place is not None \
        else (fqn.rsplit(".", 1)[-1], {})
    if placed is None:
        return None
    topic, options = placed
    return Relation(fqn=fqn, kind="table", columns=columns, primary_key=primary_key, store=store.name, topic=topic,
                    table_options=options, location=location)


def check_not_read(sources, relations: dict[str, Relation], stores_: dict[str, Store], location: Location | None,
                   report: Report) -> None:
    """A query reads a table of a store with Capability.TABLE_SOURCE as the stream of its appended rows; other
    tables are sinks only, and a table a query merges into (a key) has no appends to follow."""
    for source in sources:
        relation = relations.get(source.relation)
        if relation is None or relation.kind != "table":
            continue
        if not stores.can(stores_.get(relation.store), stores.Capability.TABLE_SOURCE):
            report(Diagnostic("DSF-E099", f"'{relation.fqn}' is a table in the store '{relation.store}'; queries "
                              "cannot read tables", location,
                              hint="read the stream or changelog the table is written from instead"))
        elif relation.defined_by_query and relation.primary_key:
            report(Diagnostic("DSF-E382", f"'{relation.fqn}' is merged into on ({', '.join(relation.primary_key)}) by "
                              "its query, so its commits are not appends a query can read as a stream", location,
                              hint="read the changelog or stream it is written from, or read an append-only table"))
