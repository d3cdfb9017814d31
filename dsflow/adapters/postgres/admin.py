"""Slots and publications of CDC streams: creating them (apply), dropping them (destroy), observing them.

A CDC stream owns one publication (FOR TABLE each of its tables) and one logical replication slot (pgoutput)
in the tables' database, both named by sql/cdc.py:object_name. apply sets the publication's tables to the
stream's (ALTER PUBLICATION ... SET TABLE when the list changed); refresh reports a difference as drift.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from dsflow.errors import DsflowError

CONN_KEYS = ("dsn", "host", "port", "user", "username", "password", "database", "dbname", "sslmode")


def store_dsn(store) -> tuple[str, dict[str, str]]:
    """A libpq DSN and keyword overrides from a postgresql store, whatever shape its settings take."""
    props = dict(getattr(store, "properties", {}) or {})
    dsn = getattr(store, "dsn", None) or props.get("dsn") or ""
    dsn = dsn.get_secret_value() if hasattr(dsn, "get_secret_value") else dsn
    keywords = {}
    for key, target in (("host", "host"), ("port", "port"), ("user", "user"), ("username", "user"),
                        ("password", "password"), ("database", "dbname"), ("dbname", "dbname"),
                        ("sslmode", "sslmode")):
        value = getattr(store, key, None) or props.get(key)
        if value:
            keywords[target] = str(value.get_secret_value() if hasattr(value, "get_secret_value") else value)
    return dsn, keywords


def connect_kwargs(settings: dict[str, str], database: str | None = None) -> tuple[str, dict[str, str]]:
    """A libpq DSN and keywords from a postgresql store's settings, for `database` if given."""
    from dsflow.adapters.postgres.values import SESSION_OPTIONS

    dsn, keywords = store_dsn(SimpleNamespace(properties={k: v for k, v in settings.items() if k in CONN_KEYS}))
    if database:
        keywords["dbname"] = database
    keywords["options"] = SESSION_OPTIONS
    keywords.setdefault("connect_timeout", "10")
    return dsn, keywords


def connect(settings: dict[str, str], database: str | None = None, replication: bool = False):
    import psycopg2
    import psycopg2.extras

    dsn, keywords = connect_kwargs(settings, database)
    factory = psycopg2.extras.LogicalReplicationConnection if replication else None
    try:
        conn = psycopg2.connect(dsn, connection_factory=factory, **keywords)
    except psycopg2.Error as err:
        raise DsflowError("DSF-E740", f"cannot connect to PostgreSQL database '{keywords.get('dbname', '')}': "
                          f"{str(err).strip()}", hint="check the postgresql store's host, port, user, password "
                          "and the stream's 'postgresql.db.name'") from err
    if not replication:
        conn.autocommit = True
    return conn


def _one(conn, sql: str, args: tuple = ()) -> Any:
    with conn.cursor() as cursor:
        cursor.execute(sql, args)
        row = cursor.fetchone()
    return row[0] if row else None


def table_columns(conn, schema: str, table: str) -> dict[str, int]:
    """Column name -> type OID of a table; {} if there is no such table."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT a.attname, a.atttypid FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                       "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
                       "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (schema, table))
        return {name: oid for name, oid in cursor.fetchall()}


def primary_key(conn, schema: str, table: str) -> list[str]:
    with conn.cursor() as cursor:
        cursor.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                       "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
                       "ORDER BY array_position(i.indkey, a.attnum)", (_qualified(schema, table),))
        return [r[0] for r in cursor.fetchall()]


def _qualified(schema: str, table: str) -> str:
    return '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'


def check_source(conn, tables: list[tuple[str, str]], fields: dict[str, str] | list[str]) -> None:
    """DSF-E741 unless logical replication is on, every table exists, and each field the stream declares is a
    column (of its one table; of at least one of several tables) of a type that fits the declared type."""
    from dsflow.adapters.postgres.values import fits, type_name

    if _one(conn, "SHOW wal_level") != "logical":
        raise DsflowError("DSF-E741", "PostgreSQL runs with wal_level other than 'logical': CDC needs logical "
                          "replication", hint="ALTER SYSTEM SET wal_level = logical; then restart the server")
    declared = fields if isinstance(fields, dict) else {f: "STRING" for f in fields}
    found: set[str] = set()
    for schema, table in tables:
        columns = table_columns(conn, schema, table)
        if not columns:
            raise DsflowError("DSF-E741", f"no PostgreSQL table {schema}.{table} in database "
                              f"'{conn.get_dsn_parameters().get('dbname')}'",
                              hint="check 'postgresql.db.name' and the stream's tables")
        missing = [f for f in declared if f not in columns]
        if missing and len(tables) == 1:
            raise DsflowError("DSF-E741", f"the before/after fields {', '.join(missing)} are not columns of "
                              f"{schema}.{table} (it has {', '.join(columns)})",
                              hint="declare the table's columns in the stream's before and after STRUCTs")
        for name, type_ in declared.items():
            if name in columns and not fits(columns[name], type_):
                raise DsflowError("DSF-E741", f"column {name} of {schema}.{table} is {type_name(columns[name])}, "
                                  f"which does not fit the declared {type_}",
                                  hint="declare the field with a type that reads it (VARCHAR reads any value)")
        found |= set(columns)
    unknown = [f for f in declared if f not in found]
    if unknown:
        raise DsflowError("DSF-E741", f"the before/after fields {', '.join(unknown)} are columns of none of "
                          f"{', '.join(f'{s}.{t}' for s, t in tables)}",
                          hint="declare columns of the listed tables in the stream's before and after STRUCTs")


def publication_tables(conn, name: str) -> set[tuple[str, str]] | None:
    """The (schema, table) pairs of a publication; None if there is no such publication."""
    if not _one(conn, "SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)):
        return None
    with conn.cursor() as cursor:
        cursor.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,))
        return {(s, t) for s, t in cursor.fetchall()}


def ensure(settings: dict[str, str], database: str, tables: list[tuple[str, str]], name: str,
           fields: dict[str, str] | list[str]) -> dict[str, Any]:
    """Create the publication (or set its tables) and the slot if missing; returns what exists and what changed."""
    from psycopg2 import sql

    conn = connect(settings, database)
    try:
        check_source(conn, tables, fields)
        created = []
        listed = sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(s), sql.Identifier(t)) for s, t in tables)
        current = publication_tables(conn, name)
        if current is None:
            with conn.cursor() as cursor:
                cursor.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(name), listed))
            created.append("publication")
        elif current != set(tables):
            with conn.cursor() as cursor:
                cursor.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(sql.Identifier(name), listed))
            created.append("publication tables")
        if not slot_exists(conn, name):
            _one(conn, "SELECT lsn FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
            created.append("slot")
        return {"slot": name, "publication": name, "database": database, "created": created}
    finally:
        conn.close()


def slot_exists(conn, name: str) -> bool:
    return bool(_one(conn, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,)))


def drop(settings: dict[str, str], database: str, name: str, wait_seconds: float = 30.0) -> None:
    """Drop the slot (waiting for a stopping query to release it) and the publication; missing ones are fine."""
    import psycopg2
    from psycopg2 import sql

    conn = connect(settings, database)
    try:
        deadline = time.monotonic() + wait_seconds
        while slot_exists(conn, name):
            try:
                _one(conn, "SELECT pg_drop_replication_slot(%s)", (name,))
            except psycopg2.errors.ObjectInUse as err:
                if time.monotonic() > deadline:
                    raise DsflowError("DSF-E742", f"replication slot '{name}' is still in use",
                                      hint="stop the query reading it (dsflow destroy stops queries first), "
                                           "then run destroy again") from err
                time.sleep(0.5)
        with conn.cursor() as cursor:
            cursor.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))
    finally:
        conn.close()


def observe(settings: dict[str, str], database: str, name: str,
            tables: list[tuple[str, str]] | None = None) -> str | None:
    """None if the slot and publication (with `tables`, if given) exist, else what differs (refresh: drift)."""
    conn = connect(settings, database)
    try:
        missing = []
        if not slot_exists(conn, name):
            missing.append(f"replication slot {name} is missing")
        current = publication_tables(conn, name)
        if current is None:
            missing.append(f"publication {name} is missing")
        elif tables is not None and current != set(tables):
            missing.append(f"publication {name} has tables {', '.join(sorted(f'{s}.{t}' for s, t in current))}"
                           f" instead of {', '.join(f'{s}.{t}' for s, t in tables)}")
        return "; ".join(missing) or None
    finally:
        conn.close()
