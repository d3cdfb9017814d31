"""`dsflow query` over the read-only system tables: sys.events, sys.queries and sys.relations (engine/eventlog.py
gives their rows), loaded into an in-memory SQLite database attached as `sys` and queried there."""

from __future__ import annotations

import sqlite3
from typing import Any

from dsflow.core.events import system_tables
from dsflow.errors import DsflowError


def query(backend: Any, select: Any, visible: Any = None) -> tuple[list[str], list[tuple]]:
    """A SELECT (engine/adhoc.system_select) over the system tables of the environment `backend` stores (its state
    and event log), showing only the objects `visible(address)` lets through when given."""
    tables = system_tables(backend.read(), backend.read_events(), visible)
    return run(tables, select.sql(dialect="sqlite"))


def run(tables: dict[str, tuple[tuple[str, ...], list[tuple]]], sql: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of `sql` (SQLite SQL) over `tables` (name -> columns, rows) in schema `sys`."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("ATTACH DATABASE ':memory:' AS sys")
        for name, (columns, rows) in tables.items():
            conn.execute(f'CREATE TABLE sys."{name}" ({", ".join(f"{_quoted(c)}" for c in columns)})')
            conn.executemany(f'INSERT INTO sys."{name}" VALUES ({", ".join("?" * len(columns))})',
                             [tuple(_cell(v) for v in row) for row in rows])
        conn.execute("PRAGMA query_only = ON")
        cursor = conn.execute(sql)
        return [d[0] for d in cursor.description or []], cursor.fetchall()
    except sqlite3.Error as err:
        raise DsflowError("DSF-E722", f"query failed on the system tables: {err}",
                          hint="dsflow query runs SQLite SQL over sys.events, sys.queries and sys.relations") from err
    finally:
        conn.close()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _cell(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value
