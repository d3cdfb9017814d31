"""An existing PostgreSQL table an `import:` entry adopts (core/imports.py), read from the catalog at refresh: its
columns and types (`format_type`, as psql shows them), and whether it can take the rows the relation's query writes
as it is (mv.py writes them by column name: COPY into a temporary table made from the table, then INSERT, or
INSERT ... ON CONFLICT (key) for a relation with a key).

It cannot when it is not a table (a view, a sequence), a declared column it has is of a type the declared one is not
written as, nor widens into (BIGINT into bigint or numeric, VARCHAR into text or varchar without a length, ...), a
key is declared and no unique index or primary key is on exactly its columns (ON CONFLICT needs one), or a column
the relation does not declare is NOT NULL without a default (every row written would be refused). Declared columns
the table lacks are not refused here: the plan adds them in place when they are the declaration's last
(core/imports.py `refusal`).
"""

from __future__ import annotations

import re
from typing import Any

from dsflow.adapters.postgres import mv
from dsflow.adapters.postgres.tables import place
from dsflow.adapters.tables.base import TableRef

CATALOG_NAMES = {
    "BIGINT": "bigint", "INTEGER": "integer", "SMALLINT": "smallint", "BOOLEAN": "boolean", "REAL": "real",
    "DOUBLE PRECISION": "double precision", "DATE": "date", "TIMESTAMPTZ": "timestamp with time zone",
    "TIMESTAMP": "timestamp without time zone", "BYTEA": "bytea", "JSONB": "jsonb", "TEXT": "text",
    "NUMERIC": "numeric",
}
"""mv.pg_type's column types, as the catalog (format_type) names them."""

WIDER = {
    "smallint": {"integer", "bigint", "numeric", "real", "double precision"},
    "integer": {"bigint", "numeric", "double precision"},
    "bigint": {"numeric"},
    "real": {"double precision"},
    "text": {"character varying"},
    "jsonb": {"json"},
}
"""A type the declared one is written as -> the catalog types that take its values too (never a narrower one)."""

_COLUMNS = ("SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum")
_UNIQUE = ("SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
           "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisunique "
           "AND i.indpred IS NULL AND i.indexprs IS NULL GROUP BY i.indexrelid")


def table_seen(store: Any, relation: Any) -> tuple[list[list[str]] | None, str | None]:
    """(the table's columns [name, type] in order, or None if there is no such table; why it cannot take the
    relation's rows as it is, or None)."""
    database, schema, table = place(TableRef("postgresql", relation.topic, dict(store.properties),
                                             dict(relation.table_options or {})))
    name = mv.qualified(schema, table)
    conn = mv.connect(dict(store.properties), database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(%s)", (name,))
            found = cur.fetchone()
            if found is None:
                return None, None
            cur.execute(_COLUMNS, (name,))
            columns = cur.fetchall()
            cur.execute(_UNIQUE, (name,))
            unique = [set(row[0]) for row in cur.fetchall()]
    finally:
        conn.close()
    seen = [[column, type_] for column, type_, _, _ in columns]
    if found[0] not in ("r", "p"):
        return seen, f"{schema}.{table} is not a table (pg_class relkind '{found[0]}')"
    problems = _type_problems(relation.columns, seen) + _key_problems(relation.primary_key, unique)
    problems += _required_problems(relation.columns, columns)
    return seen, "; ".join(problems) or None


def catalog_type(sql_type: str) -> str:
    """The catalog name of the column type a declared type is written as ('numeric(10,2)', 'bigint', ...)."""
    written = mv.pg_type(sql_type)
    numeric = re.fullmatch(r"NUMERIC\((\d+),\s*(\d+)\)", written)
    if numeric:
        return f"numeric({numeric.group(1)},{numeric.group(2)})"
    return CATALOG_NAMES.get(written, written.lower())


def fits(declared: str, existing: str) -> bool:
    """Whether a column of catalog type `existing` takes the values of the declared type."""
    wanted = catalog_type(declared)
    if existing == wanted or existing in WIDER.get(wanted, set()):
        return True
    return wanted.startswith("numeric(") and existing == "numeric"


def _type_problems(declared: Any, seen: list[list[str]]) -> list[str]:
    types = dict((name, type_) for name, type_ in seen)
    return [f"column {c.name} is {types[c.name]}, and the declared {c.type} is written as {catalog_type(c.type)}"
            for c in declared if c.name in types and not fits(c.type, types[c.name])]


def _key_problems(key: Any, unique: list[set[str]]) -> list[str]:
    if not key or set(key) in unique:
        return []
    return [f"no primary key or unique index on exactly ({', '.join(key)}), the declared key its rows are upserted "
            "on (ON CONFLICT)"]


def _required_problems(declared: Any, columns: list[tuple]) -> list[str]:
    names = {c.name for c in declared}
    required = [name for name, _, not_null, has_default in columns if not_null and not has_default
                and name not in names]
    return [f"column {name} is NOT NULL without a default and not declared, so no row written could be inserted"
            for name in required]
