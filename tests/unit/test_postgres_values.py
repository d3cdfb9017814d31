"""Pure pieces of the PostgreSQL CDC source: pgoutput values as JSON, the snapshot filter, the decoder."""

from __future__ import annotations

import json
import struct

from dsflow.adapters.postgres import pgoutput
from dsflow.adapters.postgres.changes import SnapshotFilter
from dsflow.adapters.postgres.values import fragment, iso_timestamp, row_json
from dsflow.sql.cdc import object_name


def test_values_become_the_json_spark_reads() -> None:
    assert fragment("12345678901234567890.123456789", 1700) == "12345678901234567890.123456789"
    assert fragment("NaN", 1700) == "null" and fragment("Infinity", 701) == "null"
    assert fragment("t", 16) == "true" and fragment("false", 16) == "false"
    assert fragment('{"a": [1, 2]}', 3802) == '{"a": [1, 2]}'
    assert fragment("2024-05-01 10:00:00.5+00", 1184) == '"2024-05-01T10:00:00.5+00:00"'
    assert iso_timestamp("2024-05-01 10:00:00+05:30") == "2024-05-01T10:00:00+05:30"
    assert fragment('{1,NULL,3}', 1007) == "[1,null,3]"
    assert json.loads(fragment('{{"a b","c\\"d"},{NULL,"NULL"}}', 1009)) == [["a b", 'c"d'], [None, "NULL"]]
    assert fragment(None, 25) == "null" and fragment(pgoutput.UNCHANGED, 25) == "null"
    assert json.loads(row_json(["id", "note"], ("1", 'say "hi"'), [20, 25])) == {"id": 1, "note": 'say "hi"'}


def test_the_snapshot_filter_follows_postgres_visibility() -> None:
    snap = SnapshotFilter(until=1000, xmin=100, xmax=110, xip=(103, 107))
    assert snap.saw(99, 500) and snap.saw(105, 500)  # finished before the snapshot
    assert not snap.saw(103, 500) and not snap.saw(110, 500)  # running, or started after
    assert not snap.saw(99, 1001)  # past the snapshot's WAL position nothing was seen
    assert SnapshotFilter.from_offset({"lsn": 5, "snapshot": 1, **snap.offset()}) == snap
    wrapped = SnapshotFilter(until=1000, xmin=0xFFFFFFF0, xmax=5, xip=())
    assert wrapped.saw(0xFFFFFFF5, 10) and wrapped.saw(2, 10) and not wrapped.saw(6, 10)


def test_the_decoder_reads_relation_insert_and_commit() -> None:
    relation = (b"R" + struct.pack("!I", 16384) + b"public\0orders\0" + b"f" + struct.pack("!h", 2)
                + b"\x01id\0" + struct.pack("!Ii", 20, -1) + b"\x00note\0" + struct.pack("!Ii", 25, -1))
    decoded = pgoutput.decode(relation)
    assert decoded.table == "orders" and [c.name for c in decoded.columns] == ["id", "note"]
    insert = b"I" + struct.pack("!I", 16384) + b"N" + struct.pack("!h", 2) + b"t" + struct.pack("!i", 1) + b"7n"
    assert pgoutput.decode(insert) == pgoutput.Change("c", 16384, None, ("7", None))
    commit = b"C" + struct.pack("!BQQq", 0, 0x10, 0x20, 1_000_000)
    assert pgoutput.decode(commit) == pgoutput.Commit(0x10, 0x20, pgoutput.PG_EPOCH_MS + 1000)
    assert pgoutput.parse_lsn(pgoutput.lsn_text(0x1_0000_00AB)) == 0x1_0000_00AB


def test_slot_names_fit_postgres() -> None:
    name = object_name("My-Proj", "dev", "analytics.public.orders_cdc")
    assert name == "dsflow_my_proj_dev_analytics_public_orders_cdc"
    long = object_name("p" * 40, "production", "analytics.public." + "x" * 40)
    assert len(long) == 63 and long == object_name("p" * 40, "production", "analytics.public." + "x" * 40)
