"""Change events of PostgreSQL tables: an initial snapshot, then the transactions of a replication slot.

An event is one JSON value, DeltaStream's (Debezium's) CDC shape:

    {"op": "c" | "u" | "d" | "r", "ts_ms": <when dsflow read it>,
     "before": {...} | null, "after": {...} | null,
     "source": {"db", "schema", "table", "lsn", "commit_lsn", "txid", "ts_ms": <commit time>, "snapshot"}}

("system" repeats "source", under DeltaStream's other name for it). The key is the primary key: its
value as text for one column, a JSON object for several, none without a primary key. One slot may carry
several tables (its publication lists them); source.schema and source.table tell them apart.

Schema changes while a query runs: pgoutput sends a new Relation message after an ALTER TABLE, and each
change is decoded with the Relation in force when it was received. Rows are JSON objects read by field
name, so a new column is ignored unless declared and a dropped one reads as null. A column whose new type
no longer fits its declared type (values.fits) stops the query with DSF-E747 naming the table, the column
and the change's LSN, before that transaction is delivered or acknowledged.

Consistency of the snapshot with the slot: the slot exists before the snapshot is taken (apply creates
it), so every transaction committed after the slot was created is in the slot. The snapshot runs in a
REPEATABLE READ transaction and records its snapshot (xmin, xmax, in-progress xids) and the WAL flush
position at that moment. Streaming then starts at the slot and skips exactly the transactions the
snapshot already saw (visible in it, by PostgreSQL's own visibility rule on their xid); after the
recorded WAL position no transaction can have been seen by the snapshot, and the filter is dropped.
So every change is delivered once: in the snapshot or as an event.
"""

from __future__ import annotations

import json
import select
import time
from dataclasses import dataclass, field
from typing import Any

from dsflow.adapters.postgres import admin, pgoutput
from dsflow.adapters.postgres.values import fits, row_json, type_name
from dsflow.errors import DsflowError

FETCH_ROWS = 10_000


@dataclass(frozen=True)
class CdcSource:
    """Where the changes come from: store settings, the table, and the slot and publication."""

    settings: dict[str, str] = field(repr=False)
    database: str
    tables: tuple[tuple[str, str], ...]  # (schema, table) pairs, all in the publication
    slot: str
    publication: str
    fields: dict[str, str] = field(default_factory=dict)  # declared before/after fields -> Spark type
    key_fields: tuple[str, ...] = ()  # a changelog made of the stream: the fields it is keyed by (DSF-E182)

    def check_key(self, schema: str, table: str, primary_key: list[str]) -> None:
        """DSF-E182 if a changelog made of this stream is keyed by fields that are not the table's primary key."""
        if self.key_fields and sorted(f.lower() for f in self.key_fields) != sorted(k.lower() for k in primary_key):
            raise DsflowError("DSF-E182", f"the changelog made of the changes of {schema}.{table} is keyed by "
                              f"{', '.join(self.key_fields)}, but the table's primary key is "
                              f"{', '.join(primary_key) or 'missing'}",
                              hint="name the table's primary key columns in the changelog's PRIMARY KEY (selected "
                                   "as `after`->column); a table without a primary key cannot be a changelog")

    def check_types(self, schema: str, table: str, columns: dict[str, int], where: str) -> None:
        """DSF-E747 if a declared field is a column whose type no longer fits its declared type."""
        for name, declared in self.fields.items():
            oid = columns.get(name)
            if oid is not None and not fits(oid, declared):
                raise DsflowError("DSF-E747", f"column {name} of {schema}.{table} is {type_name(oid)} {where}, which "
                                  f"does not fit the declared {declared}",
                                  hint="declare the field with a type that reads it (VARCHAR reads any value) "
                                       "or change the column back; the query resumes at this change")


@dataclass(frozen=True)
class Event:
    end_lsn: int  # the transaction's commit end: a batch (start, end] holds the events with start < end_lsn <= end
    commit_ms: int
    key: str | None
    value: str

    def line(self) -> str:
        return f"{self.end_lsn}\t{self.commit_ms}\t{json.dumps(self.key)}\t{self.value}\n"

    @staticmethod
    def parse(line: str) -> Event:
        end, commit, key, value = line.rstrip("\n").split("\t", 3)
        return Event(int(end), int(commit), json.loads(key), value)


@dataclass(frozen=True)
class SnapshotFilter:
    """The snapshot's view of transactions: a streamed transaction it already saw is skipped."""

    until: int
    xmin: int
    xmax: int
    xip: tuple[int, ...]

    def saw(self, xid: int, end_lsn: int) -> bool:
        if end_lsn > self.until:
            return False
        if _precedes(xid, self.xmin):
            return True
        return _precedes(xid, self.xmax) and xid not in self.xip

    def offset(self) -> dict[str, int]:
        return {"until": self.until, "xmin": self.xmin, "xmax": self.xmax,
                **{f"xip.{i}": x for i, x in enumerate(self.xip)}}

    @staticmethod
    def from_offset(offset: dict) -> SnapshotFilter | None:
        if "until" not in offset:
            return None
        xip = tuple(int(v) for k, v in sorted(offset.items(), key=lambda kv: kv[0]) if k.startswith("xip."))
        return SnapshotFilter(int(offset["until"]), int(offset["xmin"]), int(offset["xmax"]), xip)


def _precedes(a: int, b: int) -> bool:
    """PostgreSQL's TransactionIdPrecedes on 32-bit xids (wraparound-aware)."""
    diff = (a - b) & 0xFFFFFFFF
    return diff >= 0x80000000


def _key(names: list[str], values: tuple | None, types: list[int], key_columns: list[str]) -> str | None:
    if not key_columns or values is None:
        return None
    by_name = dict(zip(names, zip(values, types, strict=False), strict=False))
    if any(k not in by_name for k in key_columns):
        return None
    if len(key_columns) == 1:
        value = by_name[key_columns[0]][0]
        return value if isinstance(value, str) else None
    return row_json(key_columns, tuple(by_name[k][0] for k in key_columns), [by_name[k][1] for k in key_columns])


def event_value(op: str, before: str | None, after: str | None, source: dict) -> str:
    meta = json.dumps(source)
    return (f'{{"op":"{op}","ts_ms":{int(time.time() * 1000)},"before":{before or "null"},'
            f'"after":{after or "null"},"source":{meta},"system":{meta}}}')


def take_snapshot(src: CdcSource, out) -> SnapshotFilter:
    """Write the table's rows (op 'r') to `out` as event lines; returns the snapshot's filter."""
    conn = admin.connect(src.settings, src.database)
    conn.autocommit = False
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cursor:  # the first statement fixes the snapshot; the flush LSN is read after it
            cursor.execute("SELECT pg_current_snapshot()::text, pg_current_wal_flush_lsn()::text, "
                           "(extract(epoch from now()) * 1000)::bigint")
            snap, lsn_text, now_ms = cursor.fetchone()
        lsn = pgoutput.parse_lsn(lsn_text)
        for schema, table in src.tables:
            _snapshot_table(conn, src, schema, table, lsn, now_ms, out)
        conn.rollback()
    finally:
        conn.close()
    xmin, xmax, xip = snap.split(":")
    mask = 0xFFFFFFFF
    return SnapshotFilter(lsn, int(xmin) & mask, int(xmax) & mask,
                          tuple(sorted(int(x) & mask for x in xip.split(",") if x)))


def _snapshot_table(conn, src: CdcSource, schema: str, table: str, lsn: int, now_ms: int, out) -> None:
    """One table's rows as op 'r' events, in the snapshot's transaction."""
    from psycopg2 import sql

    columns = admin.table_columns(conn, schema, table)
    src.check_types(schema, table, columns, f"in the snapshot at LSN {pgoutput.lsn_text(lsn)}")
    key_columns = admin.primary_key(conn, schema, table)
    src.check_key(schema, table, key_columns)
    names, types = list(columns), list(columns.values())
    source = {"db": src.database, "schema": schema, "table": table, "lsn": lsn, "commit_lsn": lsn,
              "txid": None, "ts_ms": now_ms, "snapshot": True}
    with conn.cursor(name="dsflow_snapshot") as cursor:
        cursor.itersize = FETCH_ROWS
        cursor.execute(sql.SQL("SELECT {} FROM {}.{}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names),
            sql.Identifier(schema), sql.Identifier(table)))
        for row in cursor:
            out.write(Event(0, now_ms, _key(names, row, types, key_columns),
                            event_value("r", None, row_json(names, row, types), source)).line())


@dataclass
class _Txn:
    begin: pgoutput.Begin
    events: list = field(default_factory=list)


class ChangeReader:
    """The slot's transactions on one replication connection (pgoutput), as events of whole transactions."""

    def __init__(self, src: CdcSource) -> None:
        self.src = src
        self.conn: Any = None  # psycopg2's replication connection and cursor, once open
        self.cursor: Any = None
        self.relations: dict[int, pgoutput.Relation] = {}
        self.key_columns: dict[tuple[str, str], list[str]] = {}
        self.checked: set[pgoutput.Relation] = set()  # relations whose column types were checked
        self.txn: _Txn | None = None
        self.ready: list[Event] = []
        self.position = 0  # end LSN of the last whole transaction received

    def open(self) -> None:
        meta = admin.connect(self.src.settings, self.src.database)
        try:
            self.key_columns = {(s, t): admin.primary_key(meta, s, t) for s, t in self.src.tables}
            for (schema, table), key in self.key_columns.items():
                self.src.check_key(schema, table, key)
            if not admin.slot_exists(meta, self.src.slot):
                raise DsflowError("DSF-E745", f"replication slot '{self.src.slot}' does not exist",
                                  hint="run dsflow apply: it creates the slot and the publication of a CDC stream")
        finally:
            meta.close()
        self.conn = admin.connect(self.src.settings, self.src.database, replication=True)
        self.cursor = self.conn.cursor()
        self.cursor.start_replication(slot_name=self.src.slot, decode=False, start_lsn=0,
                                      options={"proto_version": "1", "publication_names": self.src.publication})
        self.txn, self.ready = None, []

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            finally:
                self.conn, self.cursor = None, None

    def ack(self, lsn: int) -> None:
        """Tell the server everything up to `lsn` is safely written (the slot's confirmed_flush_lsn)."""
        if self.cursor is not None and lsn > 0:
            self.cursor.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)

    def poll(self, snapshot: SnapshotFilter | None, wait_seconds: float, max_events: int,
             target: int | None = None) -> None:
        """Receive messages into `ready`: until idle (or caught up with `target`), or `max_events` are ready."""
        deadline = time.monotonic() + wait_seconds
        last_reply = 0.0
        while len(self.ready) < max_events:
            msg = self.cursor.read_message()
            if msg is not None:
                self._handle(pgoutput.decode(msg.payload), msg.data_start, snapshot)
                if target is not None and self.txn is not None and self.txn.begin.final_lsn >= target:
                    return
                continue
            if target is None and self.txn is None:
                return
            if target is not None and self.txn is None and max(self.position, self.cursor.wal_end) >= target:
                return
            if time.monotonic() > deadline:
                return
            if target is not None and time.monotonic() - last_reply > 0.5:
                self.cursor.send_feedback(reply=True)
                last_reply = time.monotonic()
            select.select([self.conn], [], [], 0.2)

    def _handle(self, message, lsn: int, snapshot: SnapshotFilter | None) -> None:
        if isinstance(message, pgoutput.Begin):
            self.txn = _Txn(message)
        elif isinstance(message, pgoutput.Relation):
            self.relations[message.oid] = message
        elif isinstance(message, pgoutput.Change) and self.txn is not None:
            self.txn.events.append((message, lsn, self.relations.get(message.relation_oid)))
        elif isinstance(message, pgoutput.Truncate):
            self._truncated(message)
        elif isinstance(message, pgoutput.Commit) and self.txn is not None:
            txn, self.txn = self.txn, None
            self.position = message.end_lsn
            if snapshot is not None and snapshot.saw(txn.begin.xid, message.end_lsn):
                return
            self.ready += [self._event(change, change_lsn, rel, txn.begin, message)
                           for change, change_lsn, rel in txn.events if self._ours(rel)]

    def _ours(self, rel: pgoutput.Relation | None) -> bool:
        return rel is not None and (rel.schema, rel.table) in self.key_columns

    def _truncated(self, message: pgoutput.Truncate) -> None:
        ours = [self.relations[oid] for oid in message.relation_oids if self._ours(self.relations.get(oid))]
        if ours:
            raise DsflowError("DSF-E744", f"{ours[0].schema}.{ours[0].table} was truncated; a truncate has no "
                              "row events, so the change stream cannot represent it",
                              hint="replace the query reading this stream with 'start.position' = 'earliest': "
                                   "it takes a new snapshot")

    def _event(self, change: pgoutput.Change, lsn: int, rel: pgoutput.Relation, begin: pgoutput.Begin,
               commit: pgoutput.Commit) -> Event:
        names = [c.name for c in rel.columns]
        types = [c.type_oid for c in rel.columns]
        if rel not in self.checked:
            self.src.check_types(rel.schema, rel.table, dict(zip(names, types, strict=True)),
                                 f"at LSN {pgoutput.lsn_text(lsn)}")
            self.checked.add(rel)
        before = row_json(names, change.old, types) if change.old is not None else None
        after = row_json(names, change.new, types) if change.new is not None else None
        source = {"db": self.src.database, "schema": rel.schema, "table": rel.table, "lsn": lsn,
                  "commit_lsn": commit.commit_lsn, "txid": begin.xid, "ts_ms": commit.commit_ms, "snapshot": False}
        key = _key(names, change.new if change.new is not None else change.old, types,
                   self.key_columns[(rel.schema, rel.table)])
        return Event(commit.end_lsn, commit.commit_ms, key, event_value(change.op, before, after, source))


def flush_lsn(src: CdcSource) -> int:
    """The server's WAL flush position now: an availableNow run reads the slot up to it."""
    conn = admin.connect(src.settings, src.database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_flush_lsn()::text")
            return pgoutput.parse_lsn(cursor.fetchone()[0])
    finally:
        conn.close()
