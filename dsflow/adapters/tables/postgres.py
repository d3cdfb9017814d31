"""PostgreSQL tables as entities: list databases, schemas and tables, describe columns, print rows.

Paths follow DeltaStream's entity paths: `database`, `database.schema`, `database.schema.table`. The
connection comes from the postgresql store: a `dsn` (setting or property) or host/port/user/password/
database properties; another database of the same server is reached by overriding dbname.
"""

from __future__ import annotations

from typing import Any

from dsflow.errors import DsflowError


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


def _connect(store, database: str | None = None):
    import psycopg2

    dsn, keywords = store_dsn(store)
    if database:
        keywords["dbname"] = database
    try:
        return psycopg2.connect(dsn, **keywords)
    except psycopg2.Error as err:
        raise DsflowError("DSF-E756", f"cannot connect to the PostgreSQL store '{store.name}': {err}".strip(),
                          hint="check the store's dsn (or host, port, user, password, database)") from err


def _split(path: str, want: int) -> list[str]:
    parts = [p for p in path.split(".") if p]
    if len(parts) != want:
        raise DsflowError("DSF-E757", f"'{path}' is not a PostgreSQL table path database.schema.table",
                          hint="list what is there with 'dsflow entity list [database[.schema]] --store NAME'")
    return parts


def list_entities(store, path: str) -> list[str]:
    parts = [p for p in path.split(".") if p]
    if not parts:
        sql, args, database = "SELECT datname FROM pg_database WHERE NOT datistemplate ORDER BY 1", (), None
    elif len(parts) == 1:
        sql = ("SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT LIKE 'pg\\_%%' "
               "AND schema_name <> 'information_schema' ORDER BY 1")
        args, database = (), parts[0]
    else:
        sql = ("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
               "AND table_type IN ('BASE TABLE', 'VIEW', 'FOREIGN') ORDER BY 1")
        args, database = (parts[1],), parts[0]
    conn = _connect(store, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, args)
            return [r[0] for r in cursor.fetchall()]
    finally:
        conn.close()


def describe(store, path: str) -> dict[str, Any]:
    database, schema, table = _split(path, 3)
    conn = _connect(store, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                           "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, table))
            columns = cursor.fetchall()
            cursor.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                           "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary",
                           (f'"{schema}"."{table}"',))
            key = [r[0] for r in cursor.fetchall()]
    finally:
        conn.close()
    if not columns:
        raise DsflowError("DSF-E754", f"no PostgreSQL table {path}",
                          hint="list the schema's tables with 'dsflow entity list DATABASE.SCHEMA --store NAME'")
    return {"location": path, "format": "postgresql", "primary_key": key,
            "columns": [{"name": n, "type": t, "nullable": nullable == "YES"} for n, t, nullable in columns]}


def rows(store, path: str, limit: int) -> tuple[list[str], list[tuple]]:
    from psycopg2 import sql

    database, schema, table = _split(path, 3)
    conn = _connect(store, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql.SQL("SELECT * FROM {}.{} LIMIT %s").format(sql.Identifier(schema),
                                                                         sql.Identifier(table)), (limit,))
            return [d[0] for d in cursor.description], [tuple(r) for r in cursor.fetchall()]
    finally:
        conn.close()
