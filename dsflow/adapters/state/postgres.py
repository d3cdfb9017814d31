"""The PostgreSQL state backend: one row per (project, environment), locked by an advisory lock.

Tables (created if missing; `<table>` is `state.table`, default dsflow_state; its lock table drops a
trailing `_state` and adds `_locks`, so dsflow_state pairs with dsflow_locks):

    <table>(project, environment, lineage, serial, body jsonb, updated_at)   primary key (project, environment)
    <locks>(project, environment, lock_id, who, operation, created, pid, backend_pid, host, command)
    <keys>(project, environment, key)    the redaction key of the secret markers (dsflow_state: dsflow_keys)
    <events>(project, environment, time, id, object, kind, actor, detail jsonb)   the event log, insert only
                                         (dsflow_state: dsflow_events)

A write is one transaction. A compare-and-swap write first takes the row `FOR UPDATE`, compares serial
and lineage, then updates it; a concurrent writer waits on the row and then sees the new serial (DSF-E804).

The lock is a session-level `pg_try_advisory_lock` held on a connection of its own for as long as the
lock is held, plus a row in <locks> naming the holder so another process can say who holds it. If the
holder's process dies its session ends and PostgreSQL releases the lock by itself; a row left behind by
a dead session is ignored. A session-level advisory lock can only be released by its own session, so
`force_unlock` ends the holder's session with `pg_terminate_backend` (superuser, the same role, or
pg_signal_backend needed) and deletes the row.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsflow.adapters.state.base import (
    LockInfo,
    check_current,
    check_lineage,
    check_unlock,
    check_writable,
    locked_error,
    new_redaction_key,
    no_lineage_error,
    parse_redaction_key,
    stale_error,
)
from dsflow.core.events import Event
from dsflow.core.model import StateSettings
from dsflow.core.state import State
from dsflow.errors import DsflowError

_DDL = """
CREATE TABLE IF NOT EXISTS {state} (
    project text NOT NULL, environment text NOT NULL, lineage text NOT NULL DEFAULT '',
    serial bigint NOT NULL, body jsonb NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, environment));
CREATE TABLE IF NOT EXISTS {locks} (
    project text NOT NULL, environment text NOT NULL, lock_id text NOT NULL, who text NOT NULL,
    operation text NOT NULL, created double precision NOT NULL, pid integer NOT NULL,
    backend_pid integer NOT NULL, PRIMARY KEY (project, environment));
CREATE TABLE IF NOT EXISTS {keys} (
    project text NOT NULL, environment text NOT NULL, key text NOT NULL, PRIMARY KEY (project, environment));
CREATE TABLE IF NOT EXISTS {events} (
    project text NOT NULL, environment text NOT NULL, time text NOT NULL, id text NOT NULL, object text NOT NULL,
    kind text NOT NULL, actor text NOT NULL, detail jsonb NOT NULL, PRIMARY KEY (project, environment, time, id));
"""
_MIGRATE = """
ALTER TABLE {locks} ADD COLUMN IF NOT EXISTS host text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS command text NOT NULL DEFAULT '';
"""
"""Lock tables made before 2026-11-25 gain the holder's host and command (run only when `command` is missing:
ALTER TABLE takes an exclusive lock even when there is nothing to add)."""
_READ = "SELECT body FROM {state} WHERE project = %s AND environment = %s"
_HAS_COMMAND = "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'command' " \
               "AND NOT attisdropped"
_ADVISORY = "SELECT 1 FROM pg_locks p WHERE p.locktype = 'advisory' AND p.granted AND p.classid = %s " \
            "AND p.objid = %s AND p.objsubid = 1"
_HOLDER = """
SELECT l.lock_id, l.who, l.operation, l.created, l.pid, l.backend_pid, l.host, l.command FROM {locks} l
WHERE l.project = %s AND l.environment = %s AND EXISTS (""" + _ADVISORY + """ AND p.pid = l.backend_pid)
"""
_INSERT = "INSERT INTO {state} (project, environment, lineage, serial, body) VALUES (%s, %s, %s, %s, %s)"
_UPSERT = _INSERT + """
ON CONFLICT (project, environment) DO UPDATE
SET lineage = EXCLUDED.lineage, serial = EXCLUDED.serial, body = EXCLUDED.body, updated_at = now()
"""
_UPDATE = "UPDATE {state} SET lineage = %s, serial = %s, body = %s, updated_at = now() " \
          "WHERE project = %s AND environment = %s"
_CLAIM = """
INSERT INTO {locks} (project, environment, lock_id, who, operation, created, pid, backend_pid, host, command)
VALUES (%s, %s, %s, %s, %s, %s, %s, pg_backend_pid(), %s, %s)
ON CONFLICT (project, environment) DO UPDATE SET lock_id = EXCLUDED.lock_id, who = EXCLUDED.who,
    operation = EXCLUDED.operation, created = EXCLUDED.created, pid = EXCLUDED.pid, backend_pid = EXCLUDED.backend_pid,
    host = EXCLUDED.host, command = EXCLUDED.command
"""
_SESSION = "SELECT p.pid, coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local') " \
           "FROM pg_locks p LEFT JOIN pg_stat_activity a ON a.pid = p.pid WHERE p.locktype = 'advisory' " \
           "AND p.granted AND p.classid = %s AND p.objid = %s AND p.objsubid = 1"
HOLDER_WAIT = 2.0
"""Seconds a refused lock waits for the holder's row: the holder writes it right after taking the lock."""


def locks_table(table: str) -> str:
    """The lock table paired with a state table: dsflow_state -> dsflow_locks, other -> other_locks."""
    return table.removesuffix("_state") + "_locks" if table.endswith("_state") else table + "_locks"


def keys_table(table: str) -> str:
    """The redaction key table paired with a state table: dsflow_state -> dsflow_keys, other -> other_keys."""
    return table.removesuffix("_state") + "_keys" if table.endswith("_state") else table + "_keys"


def events_table(table: str) -> str:
    """The event log table paired with a state table: dsflow_state -> dsflow_events, other -> other_events."""
    return table.removesuffix("_state") + "_events" if table.endswith("_state") else table + "_events"


def _key(*parts: str) -> int:
    """A signed 64-bit advisory lock key."""
    digest = hashlib.blake2b(":".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresStateBackend:
    """State of one project environment as a row of a PostgreSQL table."""

    def __init__(self, dsn: str, table: str, project: str, environment: str):
        from psycopg2 import sql

        self._dsn = dsn
        self.table = table
        self.project = project
        self.environment = environment
        self._names = {"state": sql.Identifier(*table.split(".")),
                       "locks": sql.Identifier(*locks_table(table).split(".")),
                       "keys": sql.Identifier(*keys_table(table).split(".")),
                       "events": sql.Identifier(*events_table(table).split("."))}
        self.lock_key = _key("dsflow", table, project, environment)
        self._conn: Any = None

    def _dsn_parts(self) -> dict[str, str] | None:
        from psycopg2.extensions import parse_dsn

        try:
            return parse_dsn(self._dsn)
        except Exception:  # noqa: BLE001 - a malformed DSN
            return None

    @property
    def where(self) -> str:
        info = self._dsn_parts() or {}
        server = f"{info.get('host', 'localhost')}/{info.get('dbname', '')}"
        return f"{self.table}[{self.project}/{self.environment}] on {server}"

    def _sql(self, template: str) -> Any:
        from psycopg2 import sql

        return sql.SQL(template).format(**self._names)

    def _connect(self) -> Any:
        import psycopg2

        try:
            return psycopg2.connect(self._dsn, connect_timeout=10, application_name="dsflow")
        except psycopg2.Error as err:
            raise self._unreachable(err) from err

    def _unreachable(self, err: Exception) -> DsflowError:
        """DSF-E805, never echoing the DSN or its password (libpq quotes a malformed DSN in its error)."""
        parts = self._dsn_parts()
        if parts is None:
            detail = "state.dsn is not a valid libpq connection string or URL"
        else:
            detail = str(err).strip().replace(self._dsn, "<dsn>")
            if parts.get("password"):
                detail = detail.replace(parts["password"], "***")
        return DsflowError("DSF-E805", f"state backend {self.where} failed: {detail}",
                           hint="check state.dsn (host, database, user, password) and that the server is up")

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            import psycopg2

            conn = self._connect()
            try:
                with conn, conn.cursor() as cur:
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_key("dsflow-ddl"),))
                    cur.execute(self._sql(_DDL))
                    cur.execute(_HAS_COMMAND, (self._names["locks"].as_string(conn),))
                    if cur.fetchone() is None:
                        cur.execute(self._sql(_MIGRATE))
            except psycopg2.Error as err:
                conn.close()
                raise self._unreachable(err) from err
            self._conn = conn
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor in one transaction, committed at the end, rolled back on error."""
        import psycopg2

        conn = self._connection()
        try:
            with conn, conn.cursor() as cur:
                yield cur
        except psycopg2.OperationalError as err:
            conn.close()
            raise self._unreachable(err) from err
        except psycopg2.Error as err:
            raise self._unreachable(err) from err

    def read(self) -> State:
        with self._transaction() as cur:
            cur.execute(self._sql(_READ), (self.project, self.environment))
            row = cur.fetchone()
        return self._state_of(row)

    def peek(self) -> State:
        """The stored state, read in a read-only transaction that creates nothing: where the state table does not
        exist yet, an empty State (validate reads the state this way)."""
        import psycopg2

        conn = self._connect()
        try:
            conn.set_session(readonly=True)
            with conn, conn.cursor() as cur:
                cur.execute("SELECT to_regclass(%s)", (self._names["state"].as_string(conn),))
                present = cur.fetchone()[0] is not None
                row = None
                if present:
                    cur.execute(self._sql(_READ), (self.project, self.environment))
                    row = cur.fetchone()
        except psycopg2.Error as err:
            raise self._unreachable(err) from err
        finally:
            conn.close()
        return self._state_of(row)

    def _state_of(self, row: tuple | None) -> State:
        if row is None:
            return State(environment=self.environment)
        try:
            state = State.model_validate(row[0])
        except ValueError as err:
            raise DsflowError("DSF-E801", f"state row {self.where} is unreadable: {err}",
                              hint="restore it from a database backup") from err
        return check_lineage(state, self.where)

    def redaction_key(self) -> bytes:
        key = (self.project, self.environment)
        with self._transaction() as cur:
            cur.execute(self._sql("INSERT INTO {keys} (project, environment, key) VALUES (%s, %s, %s) "
                                  "ON CONFLICT DO NOTHING"), (*key, new_redaction_key()))
            cur.execute(self._sql("SELECT key FROM {keys} WHERE project = %s AND environment = %s"), key)
            row = cur.fetchone()
        return parse_redaction_key(row[0].strip() if row else "", f"of {self.where}")

    def append_events(self, events: list[Event]) -> None:
        if not events:
            return
        from psycopg2.extras import Json

        rows = [(self.project, self.environment, e.time, e.id, e.object, e.kind, e.actor, Json(e.detail))
                for e in events]
        with self._transaction() as cur:
            cur.executemany(self._sql("INSERT INTO {events} (project, environment, time, id, object, kind, actor, "
                                      "detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"), rows)

    def read_events(self, since: str | None = None) -> list[Event]:
        with self._transaction() as cur:
            cur.execute(self._sql("SELECT time, id, object, kind, actor, detail FROM {events} WHERE project = %s "
                                  "AND environment = %s AND time COLLATE \"C\" > %s ORDER BY time COLLATE \"C\", id"),
                        (self.project, self.environment, since or ""))
            rows = cur.fetchall()
        return [Event(time=r[0], id=r[1], environment=self.environment, object=r[2], kind=r[3], actor=r[4],
                      detail=r[5]) for r in rows]

    def write(self, state: State, *, expected_serial: int | None = None) -> None:
        check_writable(state, self.where)
        key = (self.project, self.environment)
        values = (state.lineage, state.serial, state.model_dump_json())
        with self._transaction() as cur:
            if expected_serial is None:
                cur.execute(self._sql(_UPSERT), (*key, *values))
                return
            cur.execute(self._sql("SELECT serial, lineage FROM {state} WHERE project = %s AND environment = %s "
                                  "FOR UPDATE"), key)
            stored = cur.fetchone()
            if stored is not None and not stored[1]:
                raise no_lineage_error(self.where)  # a row without a lineage is refused, never overwritten
            check_current(stored, state, expected_serial, self.where)
            if stored is not None:
                cur.execute(self._sql(_UPDATE), (*values, *key))
                return
            cur.execute(self._sql(_INSERT + " ON CONFLICT DO NOTHING"), (*key, *values))
            if cur.rowcount == 0:
                raise stale_error(self.where, "another writer stored the first state at the same time")

    @contextmanager
    def lock(self, operation: str) -> Iterator[LockInfo]:
        self._connection()  # the tables exist before the lock connection uses them
        info = LockInfo.new(operation)
        conn = self._connect()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (self.lock_key,))
                if not cur.fetchone()[0]:
                    raise locked_error(self._waited_holder(), self._session_holding())
                cur.execute(self._sql(_CLAIM), (self.project, self.environment, info.id, info.who, info.operation,
                                                info.created, info.pid, info.host, info.command))
            yield info
        finally:
            self._release(conn, info)

    def _release(self, conn: Any, info: LockInfo) -> None:
        import psycopg2

        try:
            with conn.cursor() as cur:
                cur.execute(self._sql("DELETE FROM {locks} WHERE project = %s AND environment = %s AND lock_id = %s"),
                            (self.project, self.environment, info.id))
                cur.execute("SELECT pg_advisory_unlock_all()")
        except psycopg2.Error:
            pass  # the session was ended by a force-unlock: the lock went with it
        finally:
            conn.close()

    def _advisory_ids(self) -> tuple[int, int]:
        """pg_locks shows a bigint advisory key as classid (high 32 bits) and objid (low 32 bits)."""
        unsigned = self.lock_key & 0xFFFFFFFFFFFFFFFF
        return unsigned >> 32, unsigned & 0xFFFFFFFF

    def _holder(self) -> tuple[LockInfo, int] | None:
        """The holder and its backend pid, if a live session holds the lock and recorded itself."""
        with self._transaction() as cur:
            cur.execute(self._sql(_HOLDER), (self.project, self.environment, *self._advisory_ids()))
            row = cur.fetchone()
        if row is None:
            return None
        return LockInfo(id=row[0], who=row[1], operation=row[2], created=row[3], pid=row[4], host=row[6],
                        command=row[7]), row[5]

    def _waited_holder(self) -> LockInfo | None:
        """The holder, waiting up to HOLDER_WAIT seconds for it to record itself (it takes the advisory lock,
        then writes its row: a refusal in between would otherwise find no details)."""
        deadline = time.monotonic() + HOLDER_WAIT
        while True:
            holder = self.lock_holder()
            if holder is not None or time.monotonic() >= deadline or not self._advisory_held():
                return holder
            time.sleep(0.05)

    def _session_holding(self) -> str:
        """The PostgreSQL session holding the advisory lock without a dsflow record (not a dsflow process, or one
        stopped between taking the lock and recording itself), for the DSF-E802 message."""
        with self._transaction() as cur:
            cur.execute(_SESSION, self._advisory_ids())
            row = cur.fetchone()
        if row is None:
            return f"advisory lock {self.lock_key}, released since"
        return (f"PostgreSQL session {row[0]} ({row[1] or 'no application name'}, from {row[2]}) holds advisory lock "
                f"{self.lock_key}; end it with SELECT pg_terminate_backend({row[0]}) if it is stuck")

    def lock_holder(self) -> LockInfo | None:
        holder = self._holder()
        return holder[0] if holder else None

    def force_unlock(self, lock_id: str) -> None:
        holder = self._holder()
        check_unlock(holder[0] if holder else None, lock_id)
        assert holder is not None  # check_unlock: there is a lock
        backend_pid = holder[1]
        try:
            with self._transaction() as cur:
                cur.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))
                cur.execute(self._sql("DELETE FROM {locks} WHERE project = %s AND environment = %s AND lock_id = %s"),
                            (self.project, self.environment, lock_id))
        except DsflowError as err:
            raise DsflowError("DSF-E806", f"could not end the lock holder's session (backend pid {backend_pid}): "
                              f"{err.message}", hint="a superuser, the same role or a member of pg_signal_backend "
                              f"can run: SELECT pg_terminate_backend({backend_pid})") from err
        deadline = time.monotonic() + 5
        while self._advisory_held() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _advisory_held(self) -> bool:
        with self._transaction() as cur:
            cur.execute(_ADVISORY, self._advisory_ids())
            return cur.fetchone() is not None


def from_settings(settings: StateSettings, root: Path, environment: str) -> PostgresStateBackend:
    if settings.dsn is None:
        raise DsflowError("DSF-E805", "the postgres state backend needs state.dsn", hint="set it in dsflow.yml")
    return PostgresStateBackend(settings.dsn.get_secret_value(), settings.table, settings.project, environment)
