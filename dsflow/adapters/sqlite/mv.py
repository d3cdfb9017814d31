"""Materialized view snapshots in SQLite (WAL): one table per view in one file per environment.

Writers apply a whole micro-batch in one transaction, so readers see batches whole; WAL lets readers
read while the writer writes. A ledger table records the last batch applied per (view, checkpoint),
so a batch replayed after a crash is skipped: the snapshot is exactly-once, append or upsert.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dsflow.errors import DsflowError

LEDGER = "__dsflow_batches"
BUSY_TIMEOUT_MS = 30_000
SQLITE_TYPES = [(re.compile(r"^(BIG)?INT|^SMALLINT|^TINYINT|^BOOLEAN"), "INTEGER"),
                (re.compile(r"^DOUBLE|^FLOAT|^REAL"), "REAL"), (re.compile(r"^DECIMAL"), "NUMERIC")]


def database_path(root: str | Path, state_path: str, environment: str) -> Path:
    """Where an environment's view snapshots live: <project>/<state.path>/mv/<env>.sqlite."""
    return Path(root) / state_path / "mv" / f"{environment}.sqlite"


def connect(path: str | Path, readonly: bool = False) -> sqlite3.Connection:
    path = Path(path)
    if readonly:
        if not path.exists():
            raise DsflowError("DSF-E721", f"no materialized view snapshot at {path}",
                              hint="run 'dsflow apply' to create the views first")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    return conn


def sqlite_type(sql_type: str) -> str:
    upper = sql_type.upper()
    return next((t for pattern, t in SQLITE_TYPES if pattern.search(upper)), "TEXT")


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def ensure_table(path: str | Path, table: str, columns: Sequence[tuple[str, str]], key: Sequence[str]) -> None:
    """Create the view's table (and the batch ledger) unless they exist."""
    cols = [f"{quote(name)} {sqlite_type(type_)}" for name, type_ in columns]
    if key:
        cols.append(f"PRIMARY KEY ({', '.join(quote(k) for k in key)})")
    conn = connect(path)
    try:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(table)} ({', '.join(cols)})")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {LEDGER} (view TEXT, checkpoint TEXT, batch_id INTEGER, "
                     "PRIMARY KEY (view, checkpoint))")
    finally:
        conn.close()


def add_columns(path: str | Path, table: str, columns: Sequence[tuple[str, str]]) -> None:
    """ALTER TABLE ADD COLUMN for each column the view's table lacks (rows kept; NULL in them)."""
    conn = connect(path)
    try:
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({quote(table)})")}
        for name, type_ in columns:
            if name not in present:
                conn.execute(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(name)} {sqlite_type(type_)}")
    finally:
        conn.close()


def drop_table(path: str | Path, table: str) -> None:
    if not Path(path).exists():
        return
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"DROP TABLE IF EXISTS {quote(table)}")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (LEDGER,)).fetchone():
            conn.execute(f"DELETE FROM {LEDGER} WHERE view = ?", (table,))
        conn.execute("COMMIT")
    finally:
        conn.close()


def sqlite_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if value.tzinfo \
            else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (list, dict)):
        import json

        return json.dumps(value, default=str)
    return value


def write_batch(path: str | Path, table: str, columns: Sequence[str], key: Sequence[str],
                rows: Iterable[Sequence[Any]], checkpoint: str, batch_id: int,
                deletes: Iterable[Sequence[Any]] = (), replace: bool = False) -> bool:
    """Apply one micro-batch in one transaction; False if this batch was applied before (a replay).

    `deletes` are key values (in `key` order) whose rows are deleted; a key is in `rows` or in `deletes`,
    not both (frames.split_deletes keeps the last change of each key). A row replaces the one of its key, NULL
    key values matching (`IS`): the row's key is deleted first, then the row inserted. `replace`: rows, if any,
    replace the table's (a view without key, of an aggregate without GROUP BY); a delete of its key () empties it
    (HAVING stopped matching)."""
    rows, deletes = list(rows), list(deletes)
    names = ", ".join(quote(c) for c in columns)
    marks = ", ".join("?" for _ in columns)
    sql = f"INSERT INTO {quote(table)} ({names}) VALUES ({marks})"
    if key:
        updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in columns if c not in key) or None
        conflict = ", ".join(quote(k) for k in key)
        sql += f" ON CONFLICT ({conflict}) DO " + (f"UPDATE SET {updates}" if updates else "NOTHING")
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        done = conn.execute(f"SELECT batch_id FROM {LEDGER} WHERE view = ? AND checkpoint = ?",
                            (table, checkpoint)).fetchone()
        if done is not None and done[0] >= batch_id:
            conn.execute("ROLLBACK")
            return False
        if replace and (rows or deletes):
            conn.execute(f"DELETE FROM {quote(table)}")
        if key:  # a key column may be NULL (a FULL join's missing side, a NULL group): SQLite's key keeps NULLs apart
            match = " AND ".join(f"{quote(k)} IS ?" for k in key)
            positions = [list(columns).index(k) for k in key]
            conn.executemany(f"DELETE FROM {quote(table)} WHERE {match}",
                             [[sqlite_value(row[i]) for i in positions] for row in rows] +
                             [[sqlite_value(v) for v in k] for k in deletes])
        conn.executemany(sql, ([sqlite_value(v) for v in row] for row in rows))
        conn.execute(f"INSERT INTO {LEDGER} (view, checkpoint, batch_id) VALUES (?, ?, ?) "
                     "ON CONFLICT (view, checkpoint) DO UPDATE SET batch_id = excluded.batch_id",
                     (table, checkpoint, batch_id))
        conn.execute("COMMIT")
        return True
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def run_query(path: str | Path, sql: str) -> tuple[list[str], list[tuple]]:
    """A read-only query on the snapshot: column names and rows."""
    conn = connect(path, readonly=True)
    try:
        cursor = conn.execute(sql)
        return [d[0] for d in cursor.description or []], cursor.fetchall()
    except sqlite3.Error as err:
        raise DsflowError("DSF-E722", f"query failed on the view snapshot: {err}",
                          hint="dsflow query runs SQLite SQL over materialized views") from err
    finally:
        conn.close()
