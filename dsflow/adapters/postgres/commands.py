"""PostgreSQL's entity and view-query commands (the `commands` facet, core/stores.py): `dsflow entity` lists
databases, schemas and tables, describes columns and prints rows; `dsflow query` runs SQL over the views a
postgresql store keeps.

Paths follow DeltaStream's entity paths: `database`, `database.schema`, `database.schema.table` (a table also as
`schema.table`, in the store's database). The connection comes from the postgresql store: a `dsn` (setting or
property) or host/port/user/password/database properties; another database of the same server is reached by
overriding dbname.
"""

from __future__ import annotations

from typing import Any

from dsflow.errors import DsflowError


def _connect(store, database: str | None = None):
    import psycopg2

    from dsflow.adapters.postgres.admin import store_dsn

    dsn, keywords = store_dsn(store)
    if database:
        keywords["dbname"] = database
    try:
        return psycopg2.connect(dsn, **keywords)
    except psycopg2.Error as err:
        raise DsflowError("DSF-E756", f"cannot connect to the PostgreSQL store '{store.name}': {err}".strip(),
                          hint="check the store's dsn (or host, port, user, password, database)") from err


def _split(path: str) -> tuple[str | None, str, str]:
    """(database, schema, table) of a table path; database None (the store's) for `schema.table`."""
    parts = [p for p in path.split(".") if p]
    if len(parts) not in (2, 3):
        raise DsflowError("DSF-E757", f"'{path}' is not a PostgreSQL table path [database.]schema.table",
                          hint="list what is there with 'dsflow entity list [database[.schema]] --store NAME'")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else (None, parts[0], parts[1])


def list_entities(store, path: str) -> list[str]:
    parts = [p for p in path.split(".") if p]
    args: tuple[str, ...]
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
    database, schema, table = _split(path)
    conn = _connect(store, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                           "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, table))
            columns = cursor.fetchall()
            # the primary key, else the first unique index (dsflow keys its tables UNIQUE NULLS NOT DISTINCT)
            cursor.execute("SELECT array_agg(a.attname ORDER BY array_position(i.indkey, a.attnum)) FROM pg_index i "
                           "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                           "WHERE i.indrelid = to_regclass(%s) AND i.indisunique GROUP BY i.indexrelid, "
                           "i.indisprimary ORDER BY i.indisprimary DESC, i.indexrelid LIMIT 1",
                           (f'"{schema}"."{table}"',))
            found = cursor.fetchone()
            key = list(found[0]) if found else []
    finally:
        conn.close()
    if not columns:
        raise DsflowError("DSF-E754", f"no PostgreSQL table {path}",
                          hint="list the schema's tables with 'dsflow entity list DATABASE.SCHEMA --store NAME'")
    return {"location": path, "format": "postgresql", "primary_key": key,
            "columns": [{"name": n, "type": t, "nullable": nullable == "YES"} for n, t, nullable in columns]}


def rows(store, path: str, limit: int) -> tuple[list[str], list[tuple]]:
    from psycopg2 import sql

    database, schema, table = _split(path)
    conn = _connect(store, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql.SQL("SELECT * FROM {}.{} LIMIT %s").format(sql.Identifier(schema),
                                                                         sql.Identifier(table)), (limit,))
            return [d[0] for d in cursor.description], [tuple(r) for r in cursor.fetchall()]
    finally:
        conn.close()


class PostgresCommands:
    entity_paths = {"PostgreSQL": "[database[.schema]]"}
    """How `dsflow entity list` reads PATH (for its help)."""

    def entity_location(self, relation: Any, store: Any) -> str:
        return relation.topic

    def list_entities(self, project: Any, store: Any, path: str) -> list[str]:
        return list_entities(store, path)

    def describe_entity(self, project: Any, store: Any, path: str) -> dict[str, Any]:
        return describe(store, path)

    def entity_rows(self, project: Any, store: Any, path: str, limit: int) -> tuple[list[str], list[tuple]]:
        return rows(store, path, limit)

    def view_place(self, relation: Any) -> tuple[str, str | None]:
        """The database and schema of a view kept in the store (where `dsflow query` finds its table)."""
        options = relation.table_options
        return options.get("postgresql.db.name", ""), options.get("postgresql.schema.name")

    def query_views(self, project: Any, store: str, database: str, select: Any) -> tuple[list[str], list[tuple]]:
        """Run a SELECT (a sqlglot expression) over the store's view tables, read-only: column names and rows."""
        from dsflow.adapters.postgres import mv
        from dsflow.adapters.postgres.views import store_settings

        return mv.run_query(store_settings(project, store), database or None, select.sql(dialect="postgres"))


COMMANDS = PostgresCommands()
