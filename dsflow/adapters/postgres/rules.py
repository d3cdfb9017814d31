"""The load rules of a PostgreSQL store (the `rules` facet, core/stores.py): its connection settings, where a
materialized view's table or a CREATE TABLE ... AS SELECT's table is, and the change streams (CDC) of its tables.

    CREATE MATERIALIZED VIEW v WITH ('store' = 'pg', 'postgresql.db.name' = 'serving',
        'postgresql.schema.name' = 'public', 'postgresql.table.name' = 'user_counts') AS SELECT ...
    CREATE TABLE t WITH ('store' = 'pg', 'postgresql.table.name' = 'orders_mirror') AS SELECT ...

A view's or a table's table is in the store's database (its `database`/`dbname` property, else the connection's
default) unless 'postgresql.db.name' names another, in schema `public` unless 'postgresql.schema.name' says
otherwise, named like the relation unless 'postgresql.table.name' says otherwise. A table's name on the store
(its topic) is DATABASE.SCHEMA.TABLE, or SCHEMA.TABLE when the database is the connection's default.

A stream in a postgresql store is the change stream of one table ('postgresql.schema.name' and
'postgresql.table.name') or of several tables of one database ('postgresql.cdc.table.list' =
'public.customers,test.users', DeltaStream's property: one slot and one publication for all of them); its
columns are the fields of a change event (sql/cdc.py). The slot and the publication are named from the
project, the environment and the relation (`object_name`) and shown in plans.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any, Literal, cast

from dsflow.adapters.postgres.settings import PostgresSettings
from dsflow.core.model import Column, Relation
from dsflow.errors import Diagnostic, Location, Severity

Report = Callable[[Diagnostic], None]
Where = Callable[[str], Location | None]

DB, SCHEMA, TABLE = "postgresql.db.name", "postgresql.schema.name", "postgresql.table.name"
TABLE_KEYS = (DB, SCHEMA, TABLE)
TABLE_LIST = "postgresql.cdc.table.list"
SLOT_KEY, PUBLICATION_KEY = "postgresql.slot.name", "postgresql.publication.name"
CHANGE_PROPS = {"store", "value.format", "timestamp", DB, SCHEMA, TABLE, TABLE_LIST, "owner"}
MAX_IDENTIFIER = 63


class PostgresRules:
    """The `rules` facet of a PostgreSQL store."""

    view_props = {DB, SCHEMA, TABLE}
    view_table_key = TABLE  # a view's or a table's: a move renaming only it is ALTER TABLE ... RENAME TO
    change_props = CHANGE_PROPS
    slot_key, publication_key = SLOT_KEY, PUBLICATION_KEY
    several_tables_hint = f"make one change stream per table ('{TABLE}') and one changelog of each"
    merging_sinks = ("a PostgreSQL table sink", "a postgresql store")

    setting_names = (*(("cdc", k) for k in (DB, SCHEMA, TABLE, TABLE_LIST)),
                     *(("materialized_view", k) for k in (DB, SCHEMA, TABLE)),
                     *(("table", k) for k in (DB, SCHEMA, TABLE)))
    """(object, WITH property) of each setting that names the table of a change stream, a view or a table
    (core/settings.py classes them: identity)."""

    def settings(self, store_type: str) -> type[PostgresSettings]:
        return PostgresSettings

    def view_options(self, fqn: str, props: dict[str, str], store: Any, location: Location | None,
                     prop_location: Where, report: Report) -> tuple[str, dict[str, str]] | None:
        """(the view's table name, its table options); DSF-E142 for a name longer than PostgreSQL's 63."""
        options = _table_place(fqn, props, store)
        for key in (SCHEMA, TABLE):
            if len(options[key]) > MAX_IDENTIFIER:
                report(Diagnostic("DSF-E142", f"'{key}' of '{fqn}' is longer than PostgreSQL's 63 characters",
                                  prop_location(key) or location, hint="choose a shorter name"))
                return None
        return options[TABLE], options

    def table_props(self, store_type: str) -> set[str]:
        return set(TABLE_KEYS)

    def table_options(self, fqn: str, props: dict[str, str], store: Any, location: Location | None,
                      prop_location: Where, report: Report) -> tuple[str, dict[str, str]]:
        """(the table's name on the store: [DATABASE.]SCHEMA.TABLE, its table options: the three parts)."""
        options = _table_place(fqn, props, store)
        return ".".join(options[k] for k in TABLE_KEYS if options[k]), options

    def check_table(self, store_type: str, relation: Any, report: Report) -> None:
        """DSF-E208: a database, schema or table name PostgreSQL would cut (longer than 63 bytes) or that the
        table's name on the store cannot hold (empty, a '.', a control character)."""
        options = relation.table_options or {}
        for key in TABLE_KEYS:
            name = options.get(key, "")
            problem = _name_problem(name) if name or key != DB else None
            if problem:
                report(Diagnostic("DSF-E208", f"the PostgreSQL name {name!r} ('{key}') of table '{relation.fqn}' is "
                                  f"not valid: {problem}", relation.location,
                                  hint="use 1-63 bytes without '.' or control characters"))

    def check_grant(self, grant: Any, relation: Relation) -> list[Diagnostic]:
        """DSF-E373 (a warning): INSERT on a relation kept here is not pushed down as a PostgreSQL INSERT grant
        (adapters/postgres/grants.py pushes SELECT only)."""
        if grant.privilege != "INSERT":
            return []
        if relation.kind in ("materialized_view", "table"):
            what = "view's table" if relation.kind == "materialized_view" else "table"
            why = (f"dsflow alone writes the {what} (from its query): rows inserted by a PostgreSQL role would be "
                   "overwritten, or kept though no input produced them")
        else:
            why = "the stream's tables belong to the application dsflow reads their changes from"
        return [Diagnostic("DSF-E373", f"INSERT on '{relation.fqn}' is not pushed down to PostgreSQL: {why}; "
                           "it is recorded and enforced by `dsflow serve` only", grant.location,
                           hint="grant SELECT to read the table in PostgreSQL; write into a view or table through "
                           "its query's inputs (INSERT INTO a stream it reads)", severity=Severity.WARNING)]

    def object_name(self, project: str, environment: str, relation_fqn: str) -> str:
        """The slot and publication name of a CDC relation: `dsflow_<project>_<env>_<database>_<schema>_<name>`,
        lower-case, cut to PostgreSQL's 63 characters with a hash suffix when longer; the same on every plan."""
        raw = "_".join(("dsflow", project, environment, *relation_fqn.split(".")))
        name = re.sub(r"[^a-z0-9_]+", "_", raw.lower())
        if len(name) > MAX_IDENTIFIER:
            name = name[:MAX_IDENTIFIER - 9] + "_" + hashlib.sha256(raw.encode()).hexdigest()[:8]
        return name

    def change_tables(self, options: dict[str, str]) -> list[tuple[str, str]]:
        """The (schema, table) pairs a CDC relation's table_options capture: its list, or its one table."""
        if options.get(TABLE_LIST):
            return cast(list[tuple[str, str]], [tuple(e.split(".", 1)) for e in options[TABLE_LIST].split(",")])
        return [(options[SCHEMA], options[TABLE])]

    def captures_several(self, options: dict[str, str]) -> bool:
        return bool(options.get(TABLE_LIST))

    def change_stream_relation(self, fqn: str, kind: str, columns: tuple[Column, ...], props: dict[str, str],
                               store: str, slot_name: str, location: Location | None, prop_location: Where,
                               report: Report) -> Relation | None:
        """The relation of a CDC stream, after checking its properties and columns (DSF-E085, DSF-E086)."""
        from dsflow.sql.cdc import check_event_columns

        ok = _check_props(fqn, props, store, location, prop_location, report)
        tables = _table_list(fqn, props, location, prop_location, report)
        missing = [k for k in (TABLE_KEYS[:1] if tables else TABLE_KEYS) if not props.get(k)]
        if tables is False:
            ok = False
        elif missing:
            report(Diagnostic("DSF-E085", f"the CDC stream '{fqn}' needs {', '.join(repr(m) for m in missing)}",
                              location, hint=f"name the table: '{DB}' = 'shop', '{SCHEMA}' = 'public', "
                                             f"'{TABLE}' = 'orders'"))
            ok = False
        if props.get("value.format", "json").lower() != "json":
            report(Diagnostic("DSF-E085", f"CDC stream '{fqn}' has value.format '{props['value.format']}'",
                              prop_location("value.format") or location, hint="change events are json"))
            ok = False
        if kind != "stream":
            report(Diagnostic("DSF-E086", f"'{fqn}' reads a PostgreSQL table's changes, so it is a stream",
                              location, hint="use CREATE STREAM"))
            ok = False
        ok = check_event_columns(fqn, columns, location, report) and ok
        if not ok:
            return None
        if tables:
            database, listed = props[DB], ",".join(f"{s}.{t}" for s, t in tables)
            options = {DB: database, TABLE_LIST: listed, SLOT_KEY: slot_name, PUBLICATION_KEY: slot_name}
            topic = f"{database}.{listed}"
        else:
            database, schema, table = (props[k] for k in TABLE_KEYS)
            options = {DB: database, SCHEMA: schema, TABLE: table, SLOT_KEY: slot_name, PUBLICATION_KEY: slot_name}
            topic = f"{database}.{schema}.{table}"
        return Relation(fqn=fqn, kind="stream", columns=columns, store=store, topic=topic,
                        timestamp=props.get("timestamp"), table_options=options, location=location)


def _table_place(fqn: str, props: dict[str, str], store: Any) -> dict[str, str]:
    """The database ("": the connection's), schema and table of a view's or a table's table."""
    return {DB: props.get(DB) or store.properties.get("database") or store.properties.get("dbname") or "",
            SCHEMA: props.get(SCHEMA) or "public", TABLE: props.get(TABLE) or fqn.rsplit(".", 1)[-1]}


def _name_problem(name: str) -> str | None:
    """Why a PostgreSQL name cannot name a table's part (None: it can)."""
    if not name.strip():
        return "it is empty"
    if len(name.encode()) > MAX_IDENTIFIER:
        return f"it is {len(name.encode())} bytes long (PostgreSQL keeps {MAX_IDENTIFIER})"
    if "." in name or re.search(r"[\x00-\x1f\x7f]", name):
        return "it holds a '.' or a control character"
    return None


def _check_props(fqn: str, props: dict[str, str], store: str, location: Location | None, prop_location: Where,
                 report: Report) -> bool:
    ok = True
    for key in sorted(set(props) - CHANGE_PROPS):
        report(Diagnostic("DSF-E085", f"'{key}' is not a property of the CDC stream '{fqn}'",
                          prop_location(key) or location,
                          hint=f"a stream in the postgresql store '{store}' takes {', '.join(sorted(CHANGE_PROPS))}"))
        ok = False
    return ok


def _table_list(fqn: str, props: dict[str, str], location: Location | None, prop_location: Where,
                report: Report) -> list[tuple[str, str]] | None | Literal[False]:
    """The tables of 'postgresql.cdc.table.list' (schema.table, comma-separated); None without it, False if wrong."""
    if TABLE_LIST not in props:
        return None
    where = prop_location(TABLE_LIST) or location
    entries = [e.strip() for e in props[TABLE_LIST].split(",")]
    bad = [e for e in entries if len(e.split(".")) != 2 or not all(e.split("."))]
    problem = None
    if bad or not entries:
        problem = f"'{TABLE_LIST}' of '{fqn}' has {', '.join(repr(b) for b in bad) or 'no table'}: not schema.table"
    elif len(set(entries)) != len(entries):
        problem = f"'{TABLE_LIST}' of '{fqn}' names a table twice"
    elif props.get(SCHEMA) or props.get(TABLE):
        problem = f"'{fqn}' has both '{TABLE_LIST}' and '{SCHEMA}'/'{TABLE}'"
    if problem:
        report(Diagnostic("DSF-E085", problem, where, hint=f"e.g. '{TABLE_LIST}' = 'public.customers,test.users' "
                          f"with '{DB}'; one table: '{SCHEMA}' and '{TABLE}'"))
        return False
    return cast(list[tuple[str, str]], [tuple(e.split(".")) for e in entries])  # each checked: schema.table


RULES = PostgresRules()
