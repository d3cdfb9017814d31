"""Materialized view snapshots in PostgreSQL: one table per view, written one transaction per micro-batch (a
CREATE TABLE ... AS SELECT's table is written by the same functions: tables.py).

    ensure_table   apply: CREATE TABLE (columns from the query's output types, PRIMARY KEY on the view's key)
                   and the batch ledger `dsflow_mv_batches` in the same schema; says whether it created it
    add_columns    apply of columns added in place: ALTER TABLE ... ADD COLUMN (rows kept, NULL in them)
    drop_table     destroy: DROP TABLE and the view's ledger rows
    rename_table   apply of a move that renames the table: ALTER TABLE ... RENAME TO, ledger rows follow
    table_exists   refresh: a missing table is drift
    write_batch    one micro-batch: COPY into a temporary table, then INSERT ... ON CONFLICT (key) DO UPDATE
                   (upsert; the last row of a key in the batch wins) or a plain INSERT (append), the
                   deleted keys of a changelog's tombstones, and the batch id in the ledger, all in one
                   transaction. A batch whose id the ledger already holds
                   for (view, checkpoint) is a replay after a crash and is skipped: exactly once per batch.
    run_query      `dsflow query`: a read-only transaction

Readers never block the writer and never see half a batch: PostgreSQL's MVCC shows each reader the
table as of the last committed batch, and the writer takes no lock a reader holds.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from sqlglot import exp

from dsflow.errors import DsflowError

LEDGER = "dsflow_mv_batches"
STAGE = "__dsflow_batch"
ORDINAL = "__dsflow_ord"
_TYPES = {
    "BIGINT": "BIGINT", "INT": "INTEGER", "SMALLINT": "SMALLINT", "TINYINT": "SMALLINT", "BOOLEAN": "BOOLEAN",
    "DOUBLE": "DOUBLE PRECISION", "FLOAT": "REAL", "DATE": "DATE", "TIMESTAMP": "TIMESTAMPTZ",
    "TIMESTAMPTZ": "TIMESTAMPTZ", "TIMESTAMPLTZ": "TIMESTAMPTZ", "TIMESTAMPNTZ": "TIMESTAMP", "BINARY": "BYTEA",
    "VARBINARY": "BYTEA", "STRUCT": "JSONB", "ARRAY": "JSONB", "MAP": "JSONB",
}


def pg_type(sql_type: str) -> str:
    """The PostgreSQL column type of a dsflow/Spark type: exact numbers stay exact, nested types are JSONB."""
    try:
        built = exp.DataType.build(sql_type, dialect="spark")
    except Exception:  # noqa: BLE001 - an unknown type is kept as text
        return "TEXT"
    name = built.this.name
    if name == "DECIMAL":
        params = [p.sql() for p in built.expressions]
        return f"NUMERIC({', '.join(params)})" if params else "NUMERIC"
    return _TYPES.get(name, "TEXT")


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}"


def connect(settings: dict[str, str], database: str | None):
    from dsflow.adapters.postgres import admin

    return admin.connect(settings, database or None)


def ensure_table(settings: dict[str, str], database: str | None, schema: str, table: str,
                 columns: Sequence[tuple[str, str]], key: Sequence[str]) -> bool:
    """Create the view's table and the ledger unless they exist; True if this call created the table."""
    cols = [f"{quote(name)} {pg_type(type_)}" for name, type_ in columns]
    conn = connect(settings, database)
    if key:
        cols.append(key_constraint(key, conn.server_version))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (qualified(schema, table),))
            existed = cur.fetchone()[0] is not None
            cur.execute(f"CREATE TABLE IF NOT EXISTS {qualified(schema, table)} ({', '.join(cols)})")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {qualified(schema, LEDGER)} (view TEXT NOT NULL, "
                        "checkpoint TEXT NOT NULL, batch_id BIGINT NOT NULL, applied_at TIMESTAMPTZ NOT NULL "
                        "DEFAULT now(), PRIMARY KEY (view, checkpoint))")
        return not existed
    finally:
        conn.close()


NULLS_NOT_DISTINCT_SINCE = 150000
"""PostgreSQL 15 added UNIQUE NULLS NOT DISTINCT: a key that may hold NULLs (a FULL join's missing side, a NULL
group) and still names one row."""


def key_constraint(key: Sequence[str], server_version: int) -> str:
    """The table's key: UNIQUE NULLS NOT DISTINCT on PostgreSQL 15 and later (ON CONFLICT finds a row whose key
    holds NULLs), else PRIMARY KEY (NULL keys refused, DSF-E792)."""
    names = ", ".join(quote(k) for k in key)
    return f"UNIQUE NULLS NOT DISTINCT ({names})" if server_version >= NULLS_NOT_DISTINCT_SINCE \
        else f"PRIMARY KEY ({names})"


def add_columns(settings: dict[str, str], database: str | None, schema: str, table: str,
                columns: Sequence[tuple[str, str]]) -> None:
    """ALTER TABLE ADD COLUMN IF NOT EXISTS for each column (rows kept; rows written before read NULL); a retry
    after an interrupted apply converges."""
    conn = connect(settings, database)
    try:
        with conn.cursor() as cur:
            for name, type_ in columns:
                cur.execute(f"ALTER TABLE {qualified(schema, table)} ADD COLUMN IF NOT EXISTS {quote(name)} "
                            f"{pg_type(type_)}")
    finally:
        conn.close()


def table_exists(settings: dict[str, str], database: str | None, schema: str, table: str) -> bool:
    conn = connect(settings, database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (qualified(schema, table),))
            return cur.fetchone()[0] is not None
    finally:
        conn.close()


def drop_table(settings: dict[str, str], database: str | None, schema: str, table: str) -> None:
    """Drop the view's table and forget its batches (one transaction)."""
    conn = connect(settings, database)
    try:
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {qualified(schema, table)}")
            cur.execute("SELECT to_regclass(%s)", (qualified(schema, LEDGER),))
            if cur.fetchone()[0] is not None:
                cur.execute(f"DELETE FROM {qualified(schema, LEDGER)} WHERE view = %s", (table,))
        conn.commit()
    finally:
        conn.close()


def rename_table(settings: dict[str, str], database: str | None, schema: str, old: str, new: str) -> None:
    """ALTER TABLE ... RENAME TO, its batches in the ledger following it (one transaction): rows kept, and a
    batch replayed after the rename is still skipped. Nothing to do once renamed (an apply run again)."""
    conn = connect(settings, database)
    try:
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s), to_regclass(%s), to_regclass(%s)",
                        (qualified(schema, old), qualified(schema, new), qualified(schema, LEDGER)))
            found, taken, ledger = cur.fetchone()
            if found is not None and taken is None:
                cur.execute(f"ALTER TABLE {qualified(schema, old)} RENAME TO {quote(new)}")
                if ledger is not None:
                    cur.execute(f"UPDATE {qualified(schema, LEDGER)} SET view = %s WHERE view = %s", (new, old))
        conn.commit()
    finally:
        conn.close()


def copy_text(value: Any) -> str:
    """One value in COPY's text format (NULL is \\N; backslash, tab, newline and return escaped)."""
    if value is None:
        return r"\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return ("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else repr(value)
    if isinstance(value, (int, decimal.Decimal)):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return "\\\\x" + bytes(value).hex()
    text = value if isinstance(value, str) else json.dumps(_jsonable(value), default=str)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _jsonable(value: Any) -> Any:
    """Nested values for JSONB: Arrow gives a MAP as a list of (key, value) tuples, made an object here."""
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _jsonable(v) for k, v in value}
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _stage_text(rows: Iterable[Sequence[Any]], key_index: Sequence[int], view: str,
                key: Sequence[str]) -> tuple[io.StringIO, int]:
    buffer = io.StringIO()
    count = 0
    for ordinal, row in enumerate(rows):
        for i in key_index:
            if row[i] is None:
                raise DsflowError("DSF-E792", f"a row of the PostgreSQL table '{view}' (a view's or a table's) has "
                                  f"a null key column '{key[key_index.index(i)]}': PostgreSQL primary keys cannot "
                                  "be null (before PostgreSQL 15)", hint="filter it out (WHERE col IS NOT NULL) or "
                                  "replace it (COALESCE(col, '')) in the SELECT, or use PostgreSQL 15 or later")
        buffer.write("\t".join([str(ordinal), *(copy_text(v) for v in row)]) + "\n")
        count += 1
    buffer.seek(0)
    return buffer, count


def _merge_sql(schema: str, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    names = ", ".join(quote(c) for c in columns)
    target = qualified(schema, table)
    if not key:
        return f"INSERT INTO {target} ({names}) SELECT {names} FROM {STAGE} ORDER BY {ORDINAL}"
    keys = ", ".join(quote(k) for k in key)
    updates = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in columns if c not in key)
    action = f"UPDATE SET {updates}" if updates else "NOTHING"
    return (f"INSERT INTO {target} ({names}) SELECT DISTINCT ON ({keys}) {names} FROM {STAGE} "
            f"ORDER BY {keys}, {ORDINAL} DESC ON CONFLICT ({keys}) DO {action}")


def write_batch(settings: dict[str, str], database: str | None, schema: str, table: str, columns: Sequence[str],
                key: Sequence[str], rows: Iterable[Sequence[Any]], checkpoint: str, batch_id: int,
                deletes: Iterable[Sequence[Any]] = (), replace: bool = False) -> bool:
    """Apply one micro-batch in one transaction; False if the ledger shows it was applied before (a replay).

    `deletes` are key values (in `key` order) whose rows are deleted (a changelog's tombstones); a key is in
    `rows` or in `deletes`, not both. `replace`: rows, if any, replace the table's (a view without key, of an
    aggregate without GROUP BY); a delete of its key () empties it (HAVING stopped matching)."""
    rows, deletes = list(rows), list(deletes)
    conn = connect(settings, database)
    try:
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute(f"SELECT batch_id FROM {qualified(schema, LEDGER)} WHERE view = %s AND checkpoint = %s "
                        "FOR UPDATE", (table, checkpoint))
            done = cur.fetchone()
            if done is not None and done[0] >= batch_id:
                conn.rollback()
                return False
            if replace and (rows or deletes):
                cur.execute(f"DELETE FROM {qualified(schema, table)}")
            _merge_rows(cur, schema, table, columns, key, rows, _null_keys(cur, schema, table, key))
            _delete_keys(cur, schema, table, key, deletes)
            cur.execute(f"INSERT INTO {qualified(schema, LEDGER)} (view, checkpoint, batch_id) VALUES (%s, %s, %s) "
                        "ON CONFLICT (view, checkpoint) DO UPDATE SET batch_id = EXCLUDED.batch_id, "
                        "applied_at = now()", (table, checkpoint, batch_id))
        conn.commit()
        return True
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


def _null_keys(cur, schema: str, table: str, key: Sequence[str]) -> bool:
    """Whether the table's key columns take NULLs (a key made UNIQUE NULLS NOT DISTINCT; not a PRIMARY KEY, as
    before PostgreSQL 15 or in a table an earlier dsflow made)."""
    if not key:
        return False
    cur.execute("SELECT bool_or(attnotnull) FROM pg_attribute WHERE attrelid = %s::regclass AND attname = ANY(%s)",
                (qualified(schema, table), list(key)))
    return not cur.fetchone()[0]


def _merge_rows(cur, schema: str, table: str, columns: Sequence[str], key: Sequence[str],
                rows: Iterable[Sequence[Any]], null_keys: bool) -> None:
    """COPY the rows into a temporary table, then upsert (or append) them into the view's table."""
    key_index = [] if null_keys else [list(columns).index(k) for k in key]
    buffer, count = _stage_text(rows, key_index, f"{schema}.{table}", key)
    if not count:
        return
    names = ", ".join(quote(c) for c in columns)
    cur.execute(f"CREATE TEMP TABLE {STAGE} ON COMMIT DROP AS SELECT 0::BIGINT AS {ORDINAL}, {names} "
                f"FROM {qualified(schema, table)} WITH NO DATA")
    cur.copy_expert(f"COPY {STAGE} ({ORDINAL}, {names}) FROM STDIN", buffer)
    cur.execute(_merge_sql(schema, table, columns, key))


def _delete_keys(cur, schema: str, table: str, key: Sequence[str], deletes: Iterable[Sequence[Any]]) -> None:
    """COPY the deleted keys into a temporary table, then delete their rows."""
    text = "".join("\t".join(copy_text(v) for v in values) + "\n" for values in deletes)
    if not text or not key:
        return
    names = ", ".join(quote(k) for k in key)
    cur.execute(f"CREATE TEMP TABLE {STAGE}_deletes ON COMMIT DROP AS SELECT {names} "
                f"FROM {qualified(schema, table)} WITH NO DATA")
    cur.copy_expert(f"COPY {STAGE}_deletes ({names}) FROM STDIN", io.StringIO(text))
    match = " AND ".join(f"t.{quote(k)} IS NOT DISTINCT FROM d.{quote(k)}" for k in key)
    cur.execute(f"DELETE FROM {qualified(schema, table)} t USING {STAGE}_deletes d WHERE {match}")


def run_query(settings: dict[str, str], database: str | None, sql: str) -> tuple[list[str], list[tuple]]:
    """A read-only query on the views' tables: column names and rows."""
    import psycopg2

    conn = connect(settings, database)
    try:
        conn.autocommit = False
        conn.set_session(readonly=True)
        with conn.cursor() as cur:
            cur.execute(sql)
            return [d[0] for d in cur.description or []], cur.fetchall()
    except psycopg2.Error as err:
        raise DsflowError("DSF-E790", f"query failed on the PostgreSQL view store: {str(err).strip()}",
                          hint="dsflow query runs PostgreSQL SQL over the views' tables") from err
    finally:
        conn.rollback()
        conn.close()
