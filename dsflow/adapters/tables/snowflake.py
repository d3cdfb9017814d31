"""Snowflake tables through snowflake-connector-python (tested against fakesnow's server).

A micro-batch is one transaction: rows appended (or, with a primary key, the batch's keys deleted and
their latest rows inserted, except a changelog's deletes: rows whose __keep is false) plus a row in the
ledger table DSFLOW_BATCHES of the same schema, naming the table, the writer's app id and the batch id.
A batch the ledger already holds is skipped, so a replay after a crash writes nothing twice. dsflow creates
tables, never databases or schemas.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from dsflow.adapters.tables.base import TableRef, latest_per_key
from dsflow.errors import DsflowError

LEDGER = "DSFLOW_BATCHES"
_TYPES = [(r"^BIGINT|^LONG|^INT|^SMALLINT|^TINYINT", "NUMBER(38,0)"), (r"^DOUBLE|^FLOAT|^REAL", "FLOAT"),
          (r"^BOOL", "BOOLEAN"), (r"^DATE$", "DATE"), (r"^TIMESTAMP", "TIMESTAMP_NTZ"),
          (r"^BINARY|^BYTES|^VARBINARY", "BINARY")]
_CONNECT_KEYS = ("account", "user", "password", "warehouse", "role", "host", "protocol", "authenticator", "token")


def snowflake_type(sql_type: str) -> str:
    upper = sql_type.strip().upper()
    if upper.startswith(("DECIMAL", "NUMERIC")):
        found = re.search(r"\((\d+)\s*,\s*(\d+)\)", upper)
        return f"NUMBER({found.group(1)},{found.group(2)})" if found else "NUMBER(38,18)"
    return next((t for pattern, t in _TYPES if re.match(pattern, upper)), "VARCHAR")


def connect(settings: dict[str, str]):
    """A connection from a snowflake store's settings (host/port/protocol point at a non-default endpoint)."""
    import snowflake.connector

    params: dict[str, Any] = {k: settings[k] for k in _CONNECT_KEYS if settings.get(k)}
    if settings.get("port"):
        params["port"] = int(settings["port"])
    params["session_parameters"] = {"CLIENT_OUT_OF_BAND_TELEMETRY_ENABLED": False}
    try:
        return snowflake.connector.connect(**params)
    except Exception as err:  # noqa: BLE001 - the connector raises many kinds
        raise DsflowError("DSF-E753", f"cannot connect to Snowflake account '{settings.get('account')}': {err}",
                          hint="check the store's account, user and password (or host and port)") from err


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _parts(ref: TableRef) -> tuple[str, str, str]:
    database, schema, table = ref.location.split(".")
    return database, schema, table


def _qualified(database: str, schema: str, table: str) -> str:
    return ".".join(quote(p) for p in (database, schema, table))


def _value(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


class SnowflakeFormat:
    """The Snowflake table format."""

    def exists(self, ref: TableRef) -> bool:
        database, schema, table = _parts(ref)
        with connect(ref.settings) as conn:
            found = conn.cursor().execute(
                f"SELECT COUNT(*) FROM {quote(database)}.INFORMATION_SCHEMA.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table)).fetchone()
        return bool(found and found[0])

    def create(self, ref: TableRef, columns: list[tuple[str, str]], key: list[str]) -> None:
        database, schema, table = _parts(ref)
        cols = [f"{quote(name.upper())} {snowflake_type(type_)}" for name, type_ in columns]
        if key:
            cols.append(f"PRIMARY KEY ({', '.join(quote(k.upper()) for k in key)})")
        with connect(ref.settings) as conn:
            cursor = conn.cursor()
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {_qualified(database, schema, table)} ({', '.join(cols)})")
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {_qualified(database, schema, LEDGER)} "
                           "(TABLE_NAME VARCHAR, APP_ID VARCHAR, BATCH_ID NUMBER(38,0))")

    def add_columns(self, ref: TableRef, columns: list[tuple[str, str]]) -> None:
        """ALTER TABLE ADD COLUMN for each column the table lacks (nullable: rows written before read NULL)."""
        database, schema, table = _parts(ref)
        with connect(ref.settings) as conn:
            cursor = conn.cursor()
            for name, type_ in columns:
                cursor.execute(f"ALTER TABLE {_qualified(database, schema, table)} ADD COLUMN IF NOT EXISTS "
                               f"{quote(name.upper())} {snowflake_type(type_)}")

    def drop(self, ref: TableRef) -> None:
        database, schema, table = _parts(ref)
        with connect(ref.settings) as conn:
            cursor = conn.cursor()
            cursor.execute(f"DROP TABLE IF EXISTS {_qualified(database, schema, table)}")
            cursor.execute(f"DELETE FROM {_qualified(database, schema, LEDGER)} WHERE TABLE_NAME = %s", (table,))

    def write_batch(self, ref: TableRef, data: Any, key: list[str], app_id: str, batch_id: int) -> bool:
        """One micro-batch in one transaction; False if the ledger holds this batch (a replay)."""
        database, schema, table = _parts(ref)
        target, ledger = _qualified(database, schema, table), _qualified(database, schema, LEDGER)
        data = latest_per_key(data, key)
        keep = data.column("__keep").to_pylist() if "__keep" in data.column_names else None
        if keep is not None:  # a changelog's rows: __keep false deletes the key (deleted below, not inserted)
            data = data.drop_columns(["__keep"])
        names = data.column_names
        every = [tuple(_value(v) for v in row) for row in zip(*(c.to_pylist() for c in data.columns), strict=True)]
        rows = every if keep is None else [row for row, kept in zip(every, keep, strict=False) if kept]
        with connect(ref.settings) as conn:
            cursor = conn.cursor()
            cursor.execute("BEGIN")
            try:
                done = cursor.execute(f"SELECT MAX(BATCH_ID) FROM {ledger} WHERE TABLE_NAME = %s AND APP_ID = %s",
                                      (table, app_id)).fetchone()
                if done and done[0] is not None and int(done[0]) >= batch_id:
                    cursor.execute("ROLLBACK")
                    return False
                if key and every:
                    positions = [names.index(k) for k in key]
                    where = " AND ".join(f"{quote(k.upper())} = %s" for k in key)
                    cursor.executemany(f"DELETE FROM {target} WHERE {where}",
                                       [tuple(row[i] for i in positions) for row in every])
                if rows:
                    marks = ", ".join("%s" for _ in names)
                    cursor.executemany(f"INSERT INTO {target} ({', '.join(quote(n.upper()) for n in names)}) "
                                       f"VALUES ({marks})", rows)
                cursor.execute(f"DELETE FROM {ledger} WHERE TABLE_NAME = %s AND APP_ID = %s", (table, app_id))
                cursor.execute(f"INSERT INTO {ledger} (TABLE_NAME, APP_ID, BATCH_ID) VALUES (%s, %s, %s)",
                               (table, app_id, batch_id))
                cursor.execute("COMMIT")
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
        return True

    # entities

    def describe(self, ref: TableRef) -> dict[str, Any]:
        database, schema, table = _parts(ref)
        with connect(ref.settings) as conn:
            rows = conn.cursor().execute(
                f"SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE FROM {quote(database)}.INFORMATION_SCHEMA.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table)).fetchall()
        if not rows:
            raise DsflowError("DSF-E754", f"no Snowflake table {ref.location}",
                              hint="list the schema's tables with 'dsflow entity list DB.SCHEMA --store NAME'")
        return {"location": ref.location, "format": "snowflake",
                "columns": [{"name": n, "type": t, "nullable": nullable == "YES"} for n, t, nullable in rows]}

    def count_rows(self, ref: TableRef) -> int:
        with connect(ref.settings) as conn:
            return int(conn.cursor().execute(f"SELECT COUNT(*) FROM {_qualified(*_parts(ref))}").fetchone()[0])

    def rows(self, ref: TableRef, limit: int) -> tuple[list[str], list[tuple]]:
        with connect(ref.settings) as conn:
            cursor = conn.cursor().execute(f"SELECT * FROM {_qualified(*_parts(ref))} LIMIT {int(limit)}")
            return [d[0] for d in cursor.description], [tuple(r) for r in cursor.fetchall()]


def list_entities(settings: dict[str, str], path: str) -> list[str]:
    """Databases (no path), schemas of a database (DB) or tables of a schema (DB.SCHEMA)."""
    parts = [p.upper() for p in path.split(".") if p]
    with connect(settings) as conn:
        cursor = conn.cursor()
        if not parts:
            cursor.execute("SHOW DATABASES")
            column = [d[0].lower() for d in cursor.description].index("name")
            names = sorted(r[column] for r in cursor.fetchall())
        elif len(parts) == 1:
            names = [r[0] for r in cursor.execute(
                f"SELECT SCHEMA_NAME FROM {quote(parts[0])}.INFORMATION_SCHEMA.SCHEMATA ORDER BY 1").fetchall()]
        else:
            names = [r[0] for r in cursor.execute(
                f"SELECT TABLE_NAME FROM {quote(parts[0])}.INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = %s "
                "ORDER BY 1", (parts[1],)).fetchall()]
    return [n for n in names if n != LEDGER]
