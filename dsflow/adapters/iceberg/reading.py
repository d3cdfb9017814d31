"""Iceberg tables as a Spark Python data source, `dsflow_iceberg`: a table read as the stream of its appended rows.

    spark.readStream.format("dsflow_iceberg").option("table", "public.orders")
        .option("value.columns", '[["id", "BIGINT"]]').option("store.warehouse", "/lake/ice").load()

Options: table (NAMESPACE.TABLE in the store's catalog) and value.columns (required); starting.position earliest
(default: from the table's first snapshot) | latest; starting.offsets JSON {"snapshot": id} carried;
store.<setting> the store's settings (catalog.py).

The offset is {"snapshot": id}: every snapshot up to and including it (in the current snapshot's ancestry) has
been read (-1: none). A micro-batch walks the ancestry from its end back to its start and reads, per snapshot, the
data files its manifests mark ADDED by that snapshot: each file is one read task (pyiceberg's ArrowScan, so columns
are matched by field id). As for Delta tables (adapters/tables/reading.py): a `replace` snapshot (compaction) is
skipped; an `overwrite` or `delete` snapshot stops the query with DSF-E385 naming the table and snapshot, after the
appends before it; a start snapshot no longer in the ancestry (expired, rolled back) is DSF-E386.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from dsflow.adapters.spark.gate import ReaderGate, admitted, gated_query
from dsflow.adapters.continuity import check_continues
from dsflow.errors import DsflowError
from dsflow.formats.arrow import VALUE_COLUMN, arrow_type, spark_struct_ddl

STORE_PREFIX = "store."
CHUNK_ROWS = 10_000


@dataclass(frozen=True)
class IcebergOptions:
    table: str
    columns: tuple[tuple[str, str], ...]
    settings: dict[str, str] = field(default_factory=dict, repr=False)
    starting_position: str = "earliest"
    starting_snapshot: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> IcebergOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        table, columns = opts.get("table", "").strip(), json.loads(opts.get("value.columns") or "[]")
        start = opts.get("starting.position", "earliest").strip().lower()
        if not table or not columns or start not in ("earliest", "latest"):
            raise DsflowError("DSF-E384", "dsflow_iceberg: options 'table' and 'value.columns' are required, and "
                              f"starting.position is earliest or latest (got '{start}')")
        carried = json.loads(opts["starting.offsets"]) if opts.get("starting.offsets") else None
        return cls(table, tuple((str(n), str(t)) for n, t in columns),
                   {k[len(STORE_PREFIX):]: v for k, v in opts.items() if k.startswith(STORE_PREFIX)}, start,
                   int(carried["snapshot"]) if carried else None)

    def load(self) -> Any:
        from dsflow.adapters.iceberg.catalog import catalog, identifier

        try:
            return catalog(self.settings).load_table(identifier(self.table))
        except DsflowError:
            raise
        except Exception as err:  # noqa: BLE001 - pyiceberg raises several kinds
            raise DsflowError("DSF-E383", f"cannot read the iceberg table {self.table}: {err}",
                              hint="check that the table exists and the store's settings") from err


class IcebergDataSource(DataSource):
    """Read an Iceberg table's appended rows under the name `dsflow_iceberg`."""

    @classmethod
    def name(cls) -> str:
        return "dsflow_iceberg"

    def schema(self) -> str:
        return "key STRING, timestamp TIMESTAMP, " + spark_struct_ddl(list(IcebergOptions.parse(self.options).columns))

    def streamReader(self, schema: Any) -> IcebergStreamReader:
        return IcebergStreamReader(IcebergOptions.parse(self.options), gated_query(self.options))


@dataclass(frozen=True)
class AddedFile(InputPartition):
    options: IcebergOptions
    snapshot: int
    timestamp_ms: int
    path: str


class IcebergStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Snapshots are walked on the driver; tasks read the added data files."""

    def __init__(self, options: IcebergOptions, gate: ReaderGate | None = None) -> None:
        self.options = options
        self.gate = gate
        self._cutoff: int | None = None
        self._planned: tuple[dict, dict] | None = None

    def _current(self, table: Any = None) -> int:
        """The current snapshot of `table` (one load of the table's metadata), or of the table loaded now."""
        snapshot = (table if table is not None else self.options.load()).current_snapshot()
        return snapshot.snapshot_id if snapshot else -1

    def initialOffset(self) -> dict:
        if self.options.starting_snapshot is not None:
            return {"snapshot": self.options.starting_snapshot}
        return {"snapshot": self._current() if self.options.starting_position == "latest" else -1}

    def prepareForTriggerAvailableNow(self) -> None:
        self._cutoff = self._current()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The newest snapshot, or the last append before an overwrite/delete (which fails once reached)."""
        table = self.options.load()  # the newest snapshot from this same load: a second load may hold a later one
        newest = self._cutoff if self._cutoff is not None else self._current(table)
        end = int(start["snapshot"])
        for snapshot in _after(table, int(start["snapshot"]), newest, self.options.table):
            if _operation(snapshot) in ("overwrite", "delete"):
                if end != int(start["snapshot"]):
                    break
                raise not_an_append(self.options.table, snapshot)
            end = snapshot.snapshot_id
        return admitted(self.gate, start, {"snapshot": end})

    def partitions(self, start: dict, end: dict) -> list[AddedFile]:
        self._planned = check_continues(self._planned, start, end, f"iceberg table {self.options.table}")
        table = self.options.load()
        tasks = []
        for snapshot in _after(table, int(start["snapshot"]), int(end["snapshot"]), self.options.table):
            if _operation(snapshot) in ("overwrite", "delete"):
                raise not_an_append(self.options.table, snapshot)
            if _operation(snapshot) == "append":
                tasks += [AddedFile(self.options, snapshot.snapshot_id, snapshot.timestamp_ms, path)
                          for path in _added_files(table, snapshot)]
        return tasks

    # Spark hands read() the partitions that partitions() made: an AddedFile, never another InputPartition
    def read(self, partition: AddedFile) -> Iterator[Any]:  # type: ignore[override]
        yield from file_batches(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in the Spark checkpoint."""


def _operation(snapshot: Any) -> str:
    operation = snapshot.summary.operation if snapshot.summary is not None else "append"
    return str(getattr(operation, "value", operation)).lower()


def _after(table: Any, start: int, end: int, name: str) -> list[Any]:
    """The snapshots after `start` up to `end`, oldest first (`end`'s ancestry)."""
    if end == start or end == -1:
        return []
    chain = []
    snapshot = table.snapshot_by_id(end)
    while snapshot is not None and snapshot.snapshot_id != start:
        chain.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    if start != -1 and snapshot is None:
        raise DsflowError("DSF-E386", f"snapshot {start} of the iceberg table {name}, where the query stands, is not "
                          f"an ancestor of snapshot {end} (expired or rolled back)",
                          hint="restart the query with 'start.position' = 'latest'")
    return chain[::-1]


def _added_files(table: Any, snapshot: Any) -> list[str]:
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    paths = []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED and entry.data_file.content == DataFileContent.DATA:
                paths.append(entry.data_file.file_path)
    return sorted(paths)


def not_an_append(table: str, snapshot: Any) -> DsflowError:
    return DsflowError("DSF-E385", f"snapshot {snapshot.snapshot_id} of the iceberg table {table} is an "
                       f"{_operation(snapshot)}, not an append: a query reads a table as the stream of its "
                       "appended rows",
                       hint="only append to a table that queries read; to go on past it, restart the query with "
                            "'start.position' = 'latest'")


def file_batches(part: AddedFile) -> Iterator[Any]:
    """The data file's rows (read by pyiceberg, columns by field id) as key, timestamp, __value batches."""
    import pyarrow as pa
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    table = part.options.load()
    snapshot = table.snapshot_by_id(part.snapshot)
    entry = next(e.data_file for m in snapshot.manifests(table.io) if m.added_snapshot_id == part.snapshot
                 for e in m.fetch_manifest_entry(table.io, discard_deleted=True) if e.data_file.file_path == part.path)
    data = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table([FileScanTask(entry)])
    present = {name.lower(): name for name in data.column_names}
    arrays = [data.column(present[n.lower()]).cast(arrow_type(t)).combine_chunks() if n.lower() in present
              else pa.nulls(data.num_rows, arrow_type(t)) for n, t in part.options.columns]
    value = pa.StructArray.from_arrays(arrays, fields=[pa.field(n, a.type) for (n, _), a in
                                                       zip(part.options.columns, arrays, strict=True)])
    count = data.num_rows
    batch = pa.RecordBatch.from_arrays(
        [pa.nulls(count, pa.string()),
         pa.array([part.timestamp_ms * 1000] * count, pa.int64()).cast(pa.timestamp("us", tz="UTC")), value],
        names=["key", "timestamp", VALUE_COLUMN])
    for first in range(0, count, CHUNK_ROWS):
        yield batch.slice(first, CHUNK_ROWS)
