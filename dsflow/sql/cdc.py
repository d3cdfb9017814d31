"""CDC streams: a stream in a store that can give its tables' changes (Capability.CHANGE_STREAM).

Which tables it captures, its WITH properties and its slot's name are the store kind's rules (core/stores.py,
the `rules` facet: `change_stream_relation`, `change_props`, `change_tables`, `object_name`). Its columns are the
fields of a change event (DeltaStream's CDC shape), checked here for every such store:

    op      VARCHAR   c (insert), u (update), d (delete), r (read by the initial snapshot)
    ts_ms   BIGINT    when dsflow read the change (epoch ms)
    before  STRUCT<the table's columns>   the row before an update or delete (null for c and r)
    after   STRUCT<the table's columns>   the row after an insert, update or snapshot read (null for d)
    source  STRUCT<db, schema, table, lsn, commit_lsn, txid, ts_ms, snapshot>   (also named `system`)

before/after fields are read by name: a field the row lacks (another table's column, a dropped column)
is null. before/after may also be VARCHAR: the row's JSON text. Only these names are allowed; declare the ones
you need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsflow.core import stores
from dsflow.core.model import Column, Relation
from dsflow.errors import Diagnostic, Location

EVENT_FIELDS = {"op": "VARCHAR", "ts_ms": "BIGINT", "before": "STRUCT", "after": "STRUCT", "source": "STRUCT",
                "system": "STRUCT"}
SOURCE_FIELDS = {"db", "schema", "table", "lsn", "commit_lsn", "txid", "ts_ms", "snapshot"}


def _change_kind() -> stores.StoreKind:
    """The store kind whose tables' changes are read as streams (the first with Capability.CHANGE_STREAM)."""
    return stores.REGISTRY[stores.kinds_that(stores.Capability.CHANGE_STREAM)[0]]


def _rules() -> Any:
    return _change_kind().facet("rules")


Report = Callable[[Diagnostic], None]


def struct_fields(type_text: str) -> list[str] | None:
    """The field names of a STRUCT<...> type, or None if it is not a STRUCT."""
    from sqlglot import exp  # imported when used: a warm load of a project without change streams needs no sqlglot

    try:
        built = exp.DataType.build(type_text)
    except Exception:  # noqa: BLE001 - an unparsable type is reported by the caller as not a STRUCT
        return None
    if not built.is_type(exp.DataType.Type.STRUCT):
        return None
    return [f.name for f in built.expressions]


def check_event_columns(fqn: str, columns: tuple[Column, ...], location: Location | None, report: Report) -> bool:
    """The columns of a CDC stream are fields of a change event (DSF-E086)."""
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
            assert fields is not None  # a STRUCT (EVENT_FIELDS), checked above
            images[name] = [f.lower() for f in fields]
        elif name in ("source", "system"):
            assert fields is not None  # a STRUCT (EVENT_FIELDS), checked above
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
    from sqlglot import exp

    from dsflow.sql.dialect import SPARK

    for name in ("after", "before"):
        column = relation.column(name)
        if column is not None and struct_fields(column.type) is not None:
            built = exp.DataType.build(column.type)
            return {f.name: f.args["kind"].sql(dialect=SPARK) for f in built.expressions}
    return {}


# --- a change stream made a changelog: CREATE CHANGELOG t (PRIMARY KEY (id)) AS SELECT `after`->id AS id ... -------

KEY_FIELDS = "key.fields"
"""The CDC source option naming the changelog's key: JSON [[output column, `after` field], ...] (driver and reader)."""
CHANGELOG_EXAMPLE = ("CREATE CHANGELOG orders_now (PRIMARY KEY (id)) AS SELECT `after`->id AS id, "
                     "`after`->amount AS amount FROM orders_cdc")


def is_cdc(relation: Relation) -> bool:
    """A change stream (its table options name a replication slot)."""
    return SLOT_KEY in relation.table_options


def image_key_fields(select_sql: str, primary_key: tuple[str, ...]) -> list[tuple[str, str]] | str:
    """The `after` field each key column of a changelog made from a change stream projects, in key order:
    [(output column, field)], or why not (a key column that is not a plain `after`->field)."""
    from sqlglot import exp

    from dsflow.sql.parse import parse_one_select

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
                          "names no primary key", location,
                          hint=f"name the {_change_kind().title} table's primary key, selected "
                          f"from `after`: {CHANGELOG_EXAMPLE}"))
        return False
    if _rules().captures_several(source.table_options):
        report(Diagnostic("DSF-E183", f"the changelog '{fqn}' reads '{source.fqn}', the changes of several tables: "
                          "their keys would collide in one changelog", location, hint=_rules().several_tables_hint))
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


# --- what the change-stream store kind's rules say, under the names the drivers and executors import ----------------

CDC_PROPS: set[str] = _rules().change_props
"""The WITH properties of a CDC stream."""
SLOT_KEY: str = _rules().slot_key
PUBLICATION_KEY: str = _rules().publication_key


def object_name(project: str, environment: str, relation_fqn: str) -> str:
    """The slot and publication name of a CDC relation (the same on every plan)."""
    return _rules().object_name(project, environment, relation_fqn)


def cdc_tables(options: dict[str, str]) -> list[tuple[str, str]]:
    """The (schema, table) pairs a CDC relation's table_options capture: its list, or its one table."""
    return _rules().change_tables(options)
