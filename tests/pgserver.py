"""The test PostgreSQL on 127.0.0.1:5432 (trust auth): its connection settings and one-statement queries."""

from __future__ import annotations

from dsflow.adapters.postgres import admin

SERVER = {"host": "127.0.0.1", "port": "5432", "user": "postgres"}


def sql(database: str, statement: str, args: tuple = ()) -> list[tuple]:
    """Run one statement in `database` (committed); its rows, or [] for a statement without any."""
    conn = admin.connect(SERVER, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute(statement, args)
            return cursor.fetchall() if cursor.description else []
    finally:
        conn.close()
