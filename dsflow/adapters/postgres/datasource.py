"""PostgreSQL change events as a Spark Python data source, `dsflow_postgres_cdc` (streaming reads only).

    spark.readStream.format("dsflow_postgres_cdc")
        .option("database", "shop").option("schema", "public").option("table", "orders")
        .option("slot", "dsflow_...").option("publication", "dsflow_...")
        .option("spool.dir", "<checkpoint>/cdc/orders").option("pg.host", "127.0.0.1").load()

Options: database, slot, publication and spool.dir are required, and the tables: schema and table, or
tables (a comma-separated list of schema.table); key.fields (JSON [[column, field]]: a changelog made of
the stream is keyed by these `after` fields, checked to be the primary key); fields (JSON: declared before/after
field -> Spark type, checked against the columns' types, changes.py); pg.<setting> are the
store's connection settings (host, port, user, password, dbname, sslmode, dsn); starting.position
earliest (default: a snapshot first) or latest (only changes); starting.offsets a carried offset (JSON);
max.events.per.batch (default 100000). Rows: key, value (the event JSON, see changes.py), timestamp
(commit time).

One partition. The offset is {"lsn": end LSN of the last transaction delivered, "snapshot": 0|1, and
while the stream has not passed the snapshot's WAL position, the snapshot filter}. The driver-side
reader holds the replication connection: latestOffset receives whole transactions and writes them to a
spool file under spool.dir named by its LSN range, so a batch read again after a restart reads the same
events; the read task only reads spool files. commit(end) runs after Spark has committed the batch (the
sink has written it): only then is the slot acknowledged up to end (send_feedback flush_lsn), and the
spool files up to end are deleted. A restart therefore resumes at the last committed batch: at-least-once
into the sink, nothing lost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from dsflow.adapters.spark.gate import ReaderGate, admitted, gated_query
from dsflow.adapters.continuity import check_continues
from dsflow.adapters.postgres.changes import CdcSource, ChangeReader, Event, SnapshotFilter, flush_lsn, take_snapshot
from dsflow.errors import DsflowError

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType()),
                     StructField("timestamp", TimestampType())])
CHUNK_ROWS = 10_000
SNAPSHOT_FILE = "snapshot.jsonl"
PG_PREFIX = "pg."
REQUIRED = ("database", "slot", "publication", "spool.dir")
POLL_SECONDS = 5.0
TARGET_SECONDS = 30.0


@dataclass(frozen=True)
class CdcOptions:
    source: CdcSource
    spool: str
    starting_position: str = "earliest"
    starting_offsets: dict[str, int] | None = None
    max_events: int = 100_000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> CdcOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        missing = [k for k in REQUIRED if not opts.get(k)]
        if missing:
            raise DsflowError("DSF-E746", f"dsflow_postgres_cdc: missing option(s) {', '.join(missing)}")
        position = opts.get("starting.position", "earliest").lower()
        if position not in ("earliest", "latest"):
            raise DsflowError("DSF-E746", f"dsflow_postgres_cdc: starting.position is '{position}'",
                              hint="earliest (snapshot, then changes) or latest (changes only)")
        carried = json.loads(opts["starting.offsets"]) if opts.get("starting.offsets") else None
        settings = {k[len(PG_PREFIX):]: v for k, v in opts.items() if k.startswith(PG_PREFIX)}
        source = CdcSource(settings, opts["database"], _tables(opts), opts["slot"], opts["publication"],
                           json.loads(opts.get("fields") or "{}"),
                           tuple(f for _, f in json.loads(opts.get("key.fields") or "[]")))
        return cls(source, opts["spool.dir"], position, carried, int(opts.get("max.events.per.batch", 100_000)))


def _tables(opts: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """(schema, table) pairs from `tables` ('public.a,test.b') or from `schema` and `table`."""
    if opts.get("tables"):
        pairs = [tuple(e.strip().split(".", 1)) for e in opts["tables"].split(",")]
        if all(len(p) == 2 and all(p) for p in pairs):
            return tuple((schema, table) for schema, table in pairs)
    elif opts.get("schema") and opts.get("table"):
        return ((opts["schema"], opts["table"]),)
    raise DsflowError("DSF-E746", "dsflow_postgres_cdc: give schema and table, or tables = 'schema.table,...'")


class PostgresCdcDataSource(DataSource):
    """Change events of PostgreSQL tables (one slot), under the name `dsflow_postgres_cdc`."""

    @classmethod
    def name(cls) -> str:
        return "dsflow_postgres_cdc"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> PostgresCdcStreamReader:
        return PostgresCdcStreamReader(CdcOptions.parse(self.options), gated_query(self.options))


@dataclass(frozen=True)
class CdcRange(InputPartition):
    """One read task: the events of the batch (start, end] from the spool."""

    spool: str
    start: dict = field(default_factory=dict)
    end: dict = field(default_factory=dict)


def _lsn(offset: Mapping) -> int:
    return int(offset.get("lsn", 0))


def _spool_files(spool: Path) -> list[tuple[int, int, Path]]:
    out = []
    for path in spool.glob("*_*.jsonl"):
        low, _, high = path.stem.partition("_")
        out.append((int(low, 16), int(high, 16), path))
    return sorted(out)


def _write_atomically(path: Path, lines: Iterator[str] | list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.writelines(lines)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


class PostgresCdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver-side reader: snapshot and replication connection, spool files, acknowledgements."""

    def __init__(self, options: CdcOptions, gate: ReaderGate | None = None) -> None:
        self.options = options
        self.gate = gate
        self._reader: ChangeReader | None = None
        self._target: int | None = None
        self._planned: tuple[dict, dict] | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reader": None}

    @property
    def spool(self) -> Path:
        path = Path(self.options.spool)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def initialOffset(self) -> dict:
        if self.options.starting_offsets:
            return {"snapshot": 1, **{k: int(v) for k, v in self.options.starting_offsets.items()}}
        return {"lsn": 0, "snapshot": 1 if self.options.starting_position == "latest" else 0}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = flush_lsn(self.options.source)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return admitted(self.gate, start, self._latest(start))

    def _latest(self, start: dict) -> dict:
        if not int(start.get("snapshot", 0)):
            return self._snapshot(start)
        snapshot = SnapshotFilter.from_offset(start)
        reader = self._poll(snapshot)
        begin = _lsn(start)
        ready = [e for e in reader.ready if e.end_lsn > begin]
        events = [e for e in ready if self._target is None or e.end_lsn <= self._target]
        if not events:
            reader.ready = ready
            return start
        end_lsn = events[-1].end_lsn
        reader.ready = [e for e in ready if e.end_lsn > end_lsn]
        for low, _, path in _spool_files(self.spool):
            if low >= begin:  # left by a run that stopped before Spark planned it: never part of a batch
                path.unlink(missing_ok=True)
        _write_atomically(self.spool / f"{begin:016x}_{end_lsn:016x}.jsonl", [e.line() for e in events])
        end = {"lsn": end_lsn, "snapshot": 1}
        if snapshot is not None and end_lsn < snapshot.until:
            end.update(snapshot.offset())
        return end

    def _snapshot(self, start: dict) -> dict:
        path = self.spool / SNAPSHOT_FILE
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            snapshot = take_snapshot(self.options.source, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        return {"lsn": _lsn(start), "snapshot": 1, **snapshot.offset()}

    def _poll(self, snapshot: SnapshotFilter | None) -> ChangeReader:
        import psycopg2

        wait = TARGET_SECONDS if self._target is not None else POLL_SECONDS
        for attempt in range(2):
            reader = self._open()
            try:
                reader.poll(snapshot, wait, self.options.max_events, self._target)
                return reader
            except psycopg2.Error:  # the server dropped the connection (e.g. wal_sender_timeout): resume
                self.stop()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _open(self) -> ChangeReader:
        if self._reader is None:
            reader = ChangeReader(self.options.source)
            reader.open()
            self._reader = reader
        return self._reader

    def partitions(self, start: dict, end: dict) -> list[CdcRange]:
        self._planned = check_continues(self._planned, start, end, f"replication slot '{self.options.source.slot}'")
        return [CdcRange(str(self.spool), dict(start), dict(end))]

    # Spark hands read() the partitions that partitions() made: a CdcRange, never another InputPartition
    def read(self, partition: CdcRange) -> Iterator[Any]:  # type: ignore[override]
        return read_events(partition)

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at `end`: acknowledge the slot up to it and drop its spool files."""
        lsn = _lsn(end)
        if lsn > 0:
            self._open().ack(lsn)
        for _, high, path in _spool_files(self.spool):
            if high <= lsn:
                path.unlink(missing_ok=True)
        if int(end.get("snapshot", 0)):
            (self.spool / SNAPSHOT_FILE).unlink(missing_ok=True)

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def read_events(task: CdcRange) -> Iterator[Any]:
    """The batch's events as Arrow RecordBatches (key, value, timestamp)."""
    spool = Path(task.spool)
    low, high = _lsn(task.start), _lsn(task.end)
    lines: list[Event] = []
    if int(task.end.get("snapshot", 0)) and not int(task.start.get("snapshot", 0)):
        with open(spool / SNAPSHOT_FILE, encoding="utf-8") as f:
            for line in f:
                lines.append(Event.parse(line))
                if len(lines) >= CHUNK_ROWS:
                    yield _batch(lines)
                    lines = []
    for _file_low, _file_high, path in _covering_files(spool, low, high):
        with open(path, encoding="utf-8") as f:
            for line in f:
                event = Event.parse(line)
                if low < event.end_lsn <= high:
                    lines.append(event)
                if len(lines) >= CHUNK_ROWS:
                    yield _batch(lines)
                    lines = []
    if lines:
        yield _batch(lines)


def _covering_files(spool: Path, low: int, high: int) -> list[tuple[int, int, Path]]:
    """The spool files holding the events of LSNs (low, high], which must chain from low to high without a hole
    (latestOffset writes one file per planned batch and replaces unplanned ones); DSF-E709 otherwise: the batch
    fails rather than commit LSNs whose events were not read."""
    files = [f for f in _spool_files(spool) if f[1] > low and f[0] < high]
    reached, hole_end = low, high
    for file_low, file_high, _ in files:
        if file_low > reached:
            hole_end = file_low
            break
        reached = max(reached, file_high)
    if reached < high:
        raise DsflowError("DSF-E709", f"the change events of LSNs {reached:X}-{hole_end:X} are missing from the spool "
                          f"{spool} (the batch covers {low:X}-{high:X})",
                          hint="the spool folder was changed under the query; restart it from a new checkpoint")
    return files


def _batch(events: list[Event]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([
        pa.array([e.key for e in events], pa.string()),
        pa.array([e.value for e in events], pa.string()),
        pa.array([e.commit_ms * 1000 for e in events], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ], names=["key", "value", "timestamp"])
