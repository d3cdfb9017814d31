"""Materialized views: where the snapshot lives, from the view's WITH properties.

    CREATE MATERIALIZED VIEW v AS SELECT ...                                  SQLite (the embedded default),
                                                                             or dsflow.yml's default.view_store
    CREATE MATERIALIZED VIEW v WITH ('store' = 'pg') AS SELECT ...           a table in a postgresql store
    CREATE MATERIALIZED VIEW v WITH ('store' = 'pg', 'postgresql.db.name' = 'serving',
        'postgresql.schema.name' = 'public', 'postgresql.table.name' = 'user_counts') AS SELECT ...

A PostgreSQL view's table is in the store's database (its `database`/`dbname` property, else the
connection's default) unless 'postgresql.db.name' names another, in schema `public` unless
'postgresql.schema.name' says otherwise, named like the view unless 'postgresql.table.name' says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core.model import Column, Relation, Store
from dsflow.errors import Diagnostic, Location
from dsflow.load.suggest import did_you_mean

DB, SCHEMA, TABLE = "postgresql.db.name", "postgresql.schema.name", "postgresql.table.name"
VIEW_PROPS = {"store", DB, SCHEMA, TABLE}
SQLITE = "sqlite"
MAX_IDENTIFIER = 63

Report = Callable[[Diagnostic], None]


def view_relation(fqn: str, columns: tuple[Column, ...], primary_key: tuple[str, ...], props: dict[str, str],
                  stores: dict[str, Store], location: Location | None,
                  prop_location: Callable[[str], Location | None], report: Report,
                  default_store: str | None = None) -> Relation | None:
    """The relation of a materialized view, with its PostgreSQL table if 'store' (or dsflow.yml's
    default.view_store) names a postgresql store."""
    name = fqn.rsplit(".", 1)[-1]
    store_name = props.get("store") or default_store
    origin = "" if props.get("store") else " (default.view_store in dsflow.yml)"
    if store_name == SQLITE and SQLITE not in stores:  # 'store' = 'sqlite' keeps a view in SQLite despite a default
        store_name = None
    pg_props = sorted(k for k in (DB, SCHEMA, TABLE) if k in props)
    if store_name is None:
        for key in pg_props:
            report(Diagnostic("DSF-E141", f"'{key}' needs a postgresql 'store' on the materialized view '{fqn}'",
                              prop_location(key) or location,
                              hint="add 'store' = '<a postgresql store>', or remove it to keep the view in SQLite"))
        if pg_props:
            return None
        return Relation(fqn=fqn, kind="materialized_view", columns=columns, primary_key=primary_key, store="",
                        topic=name, location=location)
    store = stores.get(store_name)
    if store is None:
        report(Diagnostic("DSF-E021", f"unknown store '{store_name}'{origin} for '{fqn}'",
                          prop_location("store") or location, hint=did_you_mean(store_name, stores)))
        return None
    if store.type != "postgresql":
        report(Diagnostic("DSF-E140", f"the materialized view '{fqn}' cannot be kept in the {store.type} store "
                          f"'{store_name}'{origin}", prop_location("store") or location,
                          hint="a view's snapshot lives in SQLite (no 'store') or in a postgresql store"))
        return None
    options = {DB: props.get(DB) or store.properties.get("database") or store.properties.get("dbname") or "",
               SCHEMA: props.get(SCHEMA) or "public", TABLE: props.get(TABLE) or name}
    for key in (SCHEMA, TABLE):
        if len(options[key]) > MAX_IDENTIFIER:
            report(Diagnostic("DSF-E142", f"'{key}' of '{fqn}' is longer than PostgreSQL's 63 characters",
                              prop_location(key) or location, hint="choose a shorter name"))
            return None
    return Relation(fqn=fqn, kind="materialized_view", columns=columns, primary_key=primary_key, store=store_name,
                    topic=options[TABLE], table_options=options, location=location)


def check_views_not_read(sources, relations: dict[str, Relation], location: Location | None, report: Report) -> None:
    """A materialized view is a snapshot, not a stream of changes: a continuous query cannot read one."""
    for source in sources:
        relation = relations.get(source.relation)
        if relation is not None and relation.kind == "materialized_view":
            report(Diagnostic("DSF-E144", f"'{relation.fqn}' is a materialized view; continuous queries cannot "
                              "read views", location, hint="read the stream or changelog the view is made from, "
                              "or query the view with 'dsflow query'"))
