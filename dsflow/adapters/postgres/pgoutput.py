"""A decoder of PostgreSQL's pgoutput logical replication protocol, version 1.

Each XLogData payload is one message; `decode` turns it into a small frozen record. Tuple values are
kept as pgoutput sends them (text, or None for NULL, or UNCHANGED for a TOASTed value not rewritten by
an update); values.py turns text into JSON by the column's type OID.
See https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dsflow.errors import DsflowError

PG_EPOCH_MS = 946_684_800_000
"""2000-01-01 in Unix milliseconds: pgoutput timestamps are microseconds since then."""

UNCHANGED = object()
"""An unchanged TOASTed value ('u'): the update did not rewrite it and pgoutput does not send it."""


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    key: bool


@dataclass(frozen=True)
class Relation:
    oid: int
    schema: str
    table: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_ms: int
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ms: int


@dataclass(frozen=True)
class Change:
    """An insert ('c'), update ('u') or delete ('d'): old is the replica identity or full old row, or None."""

    op: str
    relation_oid: int
    old: tuple | None
    new: tuple | None


@dataclass(frozen=True)
class Truncate:
    relation_oids: tuple[int, ...]


@dataclass(frozen=True)
class Ignored:
    """Origin, Type and logical decoding messages: nothing for the change stream."""

    kind: str


class _Buffer:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        text = self.data[self.pos:end].decode()
        self.pos = end + 1
        return text

    def tuple_data(self) -> tuple:
        count = self.take("!h")
        values: list = []
        for _ in range(count):
            kind = self.data[self.pos:self.pos + 1]
            self.pos += 1
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            elif kind in (b"t", b"b"):
                size = self.take("!i")
                raw = self.data[self.pos:self.pos + size]
                self.pos += size
                values.append(raw.decode() if kind == b"t" else raw)
            else:
                raise DsflowError("DSF-E743", f"pgoutput: unknown tuple value kind {kind!r}")
        return tuple(values)


def _ms(micros: int) -> int:
    return PG_EPOCH_MS + micros // 1000


def decode(payload: bytes):
    """One pgoutput message as Begin, Commit, Relation, Change, Truncate or Ignored."""
    buf = _Buffer(payload)
    tag = buf.take("!c")
    if tag == b"B":
        final_lsn, micros, xid = buf.take("!QqI")
        return Begin(final_lsn, _ms(micros), xid)
    if tag == b"C":
        _, commit_lsn, end_lsn, micros = buf.take("!BQQq")
        return Commit(commit_lsn, end_lsn, _ms(micros))
    if tag == b"R":
        return _relation(buf)
    if tag == b"I":
        oid = buf.take("!I")
        buf.take("!c")  # 'N'
        return Change("c", oid, None, buf.tuple_data())
    if tag == b"U":
        oid = buf.take("!I")
        marker = buf.take("!c")
        old = None
        if marker in (b"K", b"O"):
            old = buf.tuple_data()
            marker = buf.take("!c")
        return Change("u", oid, old, buf.tuple_data())
    if tag == b"D":
        oid = buf.take("!I")
        buf.take("!c")  # 'K' or 'O'
        return Change("d", oid, buf.tuple_data(), None)
    if tag == b"T":
        count, _options = buf.take("!IB")
        return Truncate(tuple(buf.take("!I") for _ in range(count)))
    if tag in (b"O", b"Y", b"M"):
        return Ignored(tag.decode())
    raise DsflowError("DSF-E743", f"pgoutput: unknown message type {tag!r}",
                      hint="dsflow decodes pgoutput protocol version 1 (PostgreSQL 10 or later)")


def _relation(buf: _Buffer) -> Relation:
    oid = buf.take("!I")
    schema, table = buf.string(), buf.string()
    identity = chr(buf.take("!B"))
    count = buf.take("!h")
    columns = []
    for _ in range(count):
        flags = buf.take("!B")
        name = buf.string()
        type_oid, _typmod = buf.take("!Ii")
        columns.append(Column(name, type_oid, bool(flags & 1)))
    return Relation(oid, schema, table, identity, tuple(columns))


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL writes it: 0/16B3748."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)
