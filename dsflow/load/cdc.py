"""CDC streams: `CREATE STREAM ... WITH ('store' = <a postgresql store>, 'postgresql.db.name' = ...)`.

A stream in a postgresql store is the change stream of one table ('postgresql.schema.name' and
'postgresql.table.name') or of several tables of one database ('postgresql.cdc.table.list' =
'public.customers,test.users', DeltaStream's property: one slot and one publication for all of them).
Its columns are the fields of a change event (DeltaStream's CDC shape; adapters/postgres/changes.py
makes them):

    op      VARCHAR   c (insert), u (update), d (delete), r (read by the initial snapshot)
    ts_ms   BIGINT    when dsflow read the change (epoch ms)
    before  STRUCT<the table's columns>   the row before an update or delete (null for c and r)
    after   STRUCT<the table's columns>   the row after an insert, update or snapshot read (null for d)
    source  STRUCT<db, schema, table, lsn, commit_lsn, txid, ts_ms, snapshot>   (also named `system`)

before/after fields are read by name: a field the row lacks (another table's column, a dropped column)
is null. before/after may also be VARCHAR: the row's JSON text.

Only these names are allowed; declare the ones you need. The slot and the publication are named from
the project, the environment and the relation (adapters/postgres/admin.py) and shown in plans.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import Column, Relation
from dsflow.errors import Diagnostic, Location

CDC_PROPS = {"store", "value.format", "timestamp", "postgresql.db.name", "postgresql.schema.name",
             "postgresql.table.name", "postgresql.cdc.table.list", "owner"}
TABLE_KEYS = ("postgresql.db.name", "postgresql.schema.name", "postgresql.table.name")
TABLE_LIST = "postgresql.cdc.table.list"
EVENT_FIELDS = {"op": "VARCHAR", "ts_ms": "BIGINT", "before": "STRUCT", "after": "STRUCT", "source": "STRUCT",
                "system": "STRUCT"}
SOURCE_FIELDS = {"db", "schema", "table", "lsn", "commit_lsn", "txid", "ts_ms", "snapshot"}
SLOT_KEY, PUBLICATION_KEY = "postgresql.slot.name", "postgresql.publication.name"

Report = Callable[[Diagnostic], None]
MAX_NAME = 63


def object_name(project: str, environment: str, relation_fqn: str) -> str:
    """The slot and publication name of a CDC relation: `dsflow_<project>_<env>_<database>_<schema>_<name>`,
    lower-case, cut to PostgreSQL's 63 characters with a hash suffix when longer; the same on every plan."""
    raw = "_".join(("dsflow", project, environment, *relation_fqn.split(".")))
    name = re.sub(r"[^a-z0-9_]+", "_", raw.lower())
    if len(name) > MAX_NAME:
        name = name[:MAX_NAME - 9] + "_" + hashlib.sha256(raw.encode()).hexdigest()[:8]
    return name


def struct_fields(type_text: str) -> list[str] | None:
    """The field names of a STRUCT<...> type, or None if it is not a STRUCT."""
    try:
        built = exp.DataType.build(type_text)
    except Exception:  # noqa: BLE001 - an unparsable type is reported by the caller as not a STRUCT
        return None
    if not built.is_type(exp.DataType.Type.STRUCT):
        return None
    return [f.name for f in built.expressions]


def cdc_relation(fqn: str, kind: str, columns: tuple[Column, ...], props: dict[str, str], store: str,
                 slot_name: str, location: Location | None, prop_location: Callable[[str], Location | None],
                 report: Report) -> Relation | None:
    """The relation of a CDC stream, after checking its properties and columns (DSF-E085, DSF-E086)."""
    ok = True
    for key in sorted(set(props) - CDC_PROPS):
        report(Diagnostic("DSF-E085", f"'{key}' is not a property of the CDC stream '{fqn}'",
                          prop_location(key) or location,
                          hint=f"a stream in the postgresql store '{store}' takes {', '.join(sorted(CDC_PROPS))}"))
        ok = False
    tables = _table_list(fqn, props, location, prop_location, report)
    missing = [k for k in (TABLE_KEYS[:1] if tables else TABLE_KEYS) if not props.get(k)]
    if tables is False:
        ok = False
    elif missing:
        report(Diagnostic("DSF-E085", f"the CDC stream '{fqn}' needs {', '.join(repr(m) for m in missing)}",
                          location, hint="name the table: 'postgresql.db.name' = 'shop', "
                                         "'postgresql.schema.name' = 'public', 'postgresql.table.name' = 'orders'"))
        ok = False
    if props.get("value.format", "json").lower() != "json":
        report(Diagnostic("DSF-E085", f"CDC stream '{fqn}' has value.format '{props['value.format']}'",
                          prop_location("value.format") or location, hint="change events are json"))
        ok = False
    if kind != "stream":
        report(Diagnostic("DSF-E086", f"'{fqn}' reads a PostgreSQL table's changes, so it is a stream",
                          location, hint="use CREATE STREAM"))
        ok = False
    ok = _check_columns(fqn, columns, location, report) and ok
    if not ok:
        return None
    if tables:
        database, listed = props[TABLE_KEYS[0]], ",".join(f"{s}.{t}" for s, t in tables)
        options = {"postgresql.db.name": database, TABLE_LIST: listed, SLOT_KEY: slot_name, PUBLICATION_KEY: slot_name}
        topic = f"{database}.{listed}"
    else:
        database, schema, table = (props[k] for k in TABLE_KEYS)
        options = {"postgresql.db.name": database, "postgresql.schema.name": schema,
                   "postgresql.table.name": table, SLOT_KEY: slot_name, PUBLICATION_KEY: slot_name}
        topic = f"{database}.{schema}.{table}"
    return Relation(fqn=fqn, kind="stream", columns=columns, store=store, topic=topic,
                    timestamp=props.get("timestamp"), table_options=options, location=location)


def _table_list(fqn: str, props: dict[str, str], location: Location | None,
                prop_location: Callable[[str], Location | None], report: Report) -> list[tuple[str, str]] | None | bool:
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
    elif props.get(TABLE_KEYS[1]) or props.get(TABLE_KEYS[2]):
        problem = f"'{fqn}' has both '{TABLE_LIST}' and 'postgresql.schema.name'/'postgresql.table.name'"
    if problem:
        report(Diagnostic("DSF-E085", problem, where, hint=f"e.g. '{TABLE_LIST}' = 'public.customers,test.users' "
                          "with 'postgresql.db.name'; one table: 'postgresql.schema.name' and 'postgresql.table.name'"))
        return False
    return [tuple(e.split(".")) for e in entries]


def cdc_tables(options: dict[str, str]) -> list[tuple[str, str]]:
    """The (schema, table) pairs a CDC relation's table_options capture: its list, or its one table."""
    if options.get(TABLE_LIST):
        return [tuple(e.split(".", 1)) for e in options[TABLE_LIST].split(",")]
    return [(options[TABLE_KEYS[1]], options[TABLE_KEYS[2]])]


def _check_columns(fqn: str, columns: tuple[Column, ...], location: Location | None, report: Report) -> bool:
    ok = True
    images: dict[str, list[str]] = {}
    for column in columns:
        name = column.name.lower()
        expected = EVENT_FIELDS.get(name)
        if expected is None:
            report(Diagnostic("DSF-E086", f"column '{column.name}' of the CDC stream '{fqn}' is not a field of a "
                              "change event", location,
                              hint="declare op, ts_ms, before, after, source (or system); the table's columns go "
                                   "inside before and after: `before` STRUCT<id BIGINT, ...>"))
            ok = False
            continue
        fields = struct_fields(column.type)
        if name in ("before", "after") and fields is None and column.type.upper() in ("VARCHAR", "STRING", "TEXT"):
            images[name] = []  # the row's JSON text
        elif expected == "STRUCT" and fields is None:
            report(Diagnostic("DSF-E086", f"column '{column.name}' of the CDC stream '{fqn}' must be a STRUCT, "
                              f"not {column.type}", location, hint=f"e.g. `{name}` STRUCT<id BIGINT, name VARCHAR>"
                              + (" (or VARCHAR: the row's JSON text)" if name in ("before", "after") else "")))
            ok = False
        elif name in ("before", "after"):
            images[name] = [f.lower() for f in fields]
        elif name in ("source", "system"):
            unknown = sorted({f.lower() for f in fields} - SOURCE_FIELDS)
            if unknown:
                report(Diagnostic("DSF-E086", f"'{column.name}' of '{fqn}' has unknown field(s) {', '.join(unknown)}",
                                  location, hint=f"its fields are {', '.join(sorted(SOURCE_FIELDS))}"))
                ok = False
    if not images:
        report(Diagnostic("DSF-E086", f"the CDC stream '{fqn}' declares neither `before` nor `after`", location,
                          hint="declare `after` STRUCT<the table's columns> (and `before` for updates and deletes)"))
        ok = False
    elif len(images) == 2 and images["before"] != images["after"]:
        report(Diagnostic("DSF-E086", f"`before` and `after` of '{fqn}' declare different fields", location,
                          hint="both are the table's row: declare the same fields in the same order"))
        ok = False
    return ok


def image_fields(relation: Relation) -> list[str]:
    """The table columns a CDC relation declares in `after` (or `before`)."""
    return list(image_types(relation))


def image_types(relation: Relation) -> dict[str, str]:
    """The table columns a CDC relation declares in `after` (or `before`), with their Spark types; {} for VARCHAR."""
    for name in ("after", "before"):
        column = relation.column(name)
        if column is not None and struct_fields(column.type) is not None:
            built = exp.DataType.build(column.type)
            return {f.name: f.args["kind"].sql(dialect="spark") for f in built.expressions}
    return {}


# --- a change stream made a changelog: CREATE CHANGELOG t (PRIMARY KEY (id)) AS SELECT `after`->id AS id ... -------

KEY_FIELDS = "key.fields"
"""The CDC source option naming the changelog's key: JSON [[output column, `after` field], ...] (driver and reader)."""
CHANGELOG_EXAMPLE = ("CREATE CHANGELOG orders_now (PRIMARY KEY (id)) AS SELECT `after`->id AS id, "
                     "`after`->amount AS amount FROM orders_cdc")


def is_cdc(relation: Relation) -> bool:
    """A PostgreSQL change stream (its table options name a replication slot)."""
    return SLOT_KEY in relation.table_options


def image_key_fields(select_sql: str, primary_key: tuple[str, ...]) -> list[tuple[str, str]] | str:
    """The `after` field each key column of a changelog made from a change stream projects, in key order:
    [(output column, field)], or why not (a key column that is not a plain `after`->field)."""
    from dsflow.load.sql import parse_one_select

    projected = {p.alias_or_name.lower(): p.unalias() for p in parse_one_select(select_sql).selects}
    found = []
    for key in primary_key:
        node = projected.get(key.lower())
        if not (isinstance(node, exp.Dot) and isinstance(node.this, exp.Column)
                and node.this.name.lower() == "after" and isinstance(node.expression, exp.Identifier)):
            return f"the key column '{key}' is not an `after` field as it is (`after`->{key} AS {key})"
        found.append((key, node.expression.name))
    return found


def check_cdc_changelog(fqn: str, source: Relation, primary_key: tuple[str, ...], select_sql: str,
                        location: Location | None, report: Report) -> bool:
    """A changelog made from a change stream is keyed by the table's primary key, which it must name
    (DSF-E180) as plain `after` fields (DSF-E181) of one table (DSF-E183); the reader checks the table (DSF-E182)."""
    if not primary_key:
        report(Diagnostic("DSF-E180", f"the changelog '{fqn}' is made from the change stream '{source.fqn}' but "
                          "names no primary key", location, hint="name the PostgreSQL table's primary key, selected "
                          f"from `after`: {CHANGELOG_EXAMPLE}"))
        return False
    if source.table_options.get(TABLE_LIST):
        report(Diagnostic("DSF-E183", f"the changelog '{fqn}' reads '{source.fqn}', the changes of several tables: "
                          "their keys would collide in one changelog", location,
                          hint="make one change stream per table ('postgresql.table.name') and one changelog of each"))
        return False
    fields = image_key_fields(select_sql, primary_key)
    image = source.column("after")
    if isinstance(fields, str) or image is None or struct_fields(image.type) is None:
        report(Diagnostic("DSF-E181", f"the changelog '{fqn}' cannot find its key in the change events of "
                          f"'{source.fqn}': " + (fields if isinstance(fields, str) else
                                                 "`after` is not declared as a STRUCT of the table's columns"),
                          location,
                          hint=f"declare `after` STRUCT<...> and select the key as it is: {CHANGELOG_EXAMPLE}"))
        return False
    return True
