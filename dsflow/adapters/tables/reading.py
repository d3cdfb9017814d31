"""Delta tables as a Spark Python data source, `dsflow_delta`: a table read as the stream of its appended rows.

    spark.readStream.format("dsflow_delta").option("path", "/lake/orders")
        .option("value.columns", '[["id", "BIGINT"], ["item", "VARCHAR"]]').load()

Options: path (a folder or s3:// URI, required); value.columns JSON [[name, SQL type], ...] (required);
starting.position earliest (default: every row, from version 0) | latest (rows committed after the query first
starts); starting.offsets JSON {"version": n} carried from an older query version; skip.change.commits
true | false (default false); max.versions.per.batch; store.<setting> the store's settings (delta.storage_options).

The offset is {"version": v}: every commit up to and including table version v has been read (-1: none). A
micro-batch reads the commit files (_delta_log/<version>.json) after its start up to its end; each added data
file (an `add` action that changes data) is one read task, so a batch planned again after a restart reads
the same immutable files: the source is exactly replayable. As Delta's own streaming source does:

    a commit that removes data (DELETE, UPDATE, MERGE, overwrite, a `remove` with dataChange) is not an append:
        the query fails with DSF-E380 naming the table and version, after the appends before it were read;
        skip.change.commits (Delta's skipChangeCommits) skips such commits whole, their added rows too
    a commit that changes no data (OPTIMIZE, dataChange false) is skipped
    a commit file no longer in the log (cleaned up) fails with DSF-E383

Rows: key (null), timestamp (the commit's time), version, and `__value`, the struct of value.columns; a column
missing from a file (added later) is null, a partition column comes from the add action's partition values.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from dsflow.adapters.spark.gate import ReaderGate, admitted, gated_query
from dsflow.adapters.continuity import check_continues
from dsflow.errors import DsflowError
from dsflow.formats.arrow import VALUE_COLUMN, arrow_type, spark_struct_ddl

DEFAULT_VERSIONS_PER_BATCH = 1_000
CHUNK_ROWS = 10_000
STORE_PREFIX = "store."


@dataclass(frozen=True)
class DeltaOptions:
    """The data source options, parsed and checked once."""

    path: str
    columns: tuple[tuple[str, str], ...]
    settings: dict[str, str] = field(default_factory=dict, repr=False)
    starting_position: str = "earliest"
    starting_version: int | None = None
    skip_change_commits: bool = False
    max_versions: int = DEFAULT_VERSIONS_PER_BATCH

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> DeltaOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        path, columns = opts.get("path", "").strip(), json.loads(opts.get("value.columns") or "[]")
        if not path or not columns:
            raise DsflowError("DSF-E384", "dsflow_delta: options 'path' and 'value.columns' are required",
                              hint='.option("path", ...).option("value.columns", \'[["id", "BIGINT"]]\')')
        start = opts.get("starting.position", "earliest").strip().lower()
        if start not in ("earliest", "latest"):
            raise DsflowError("DSF-E384", f"dsflow_delta: starting.position is '{start}'; expected earliest or latest")
        carried = json.loads(opts["starting.offsets"]) if opts.get("starting.offsets") else None
        return cls(path=path, columns=tuple((str(n), str(t)) for n, t in columns),
                   settings={k[len(STORE_PREFIX):]: v for k, v in opts.items() if k.startswith(STORE_PREFIX)},
                   starting_position=start, starting_version=int(carried["version"]) if carried else None,
                   skip_change_commits=opts.get("skip.change.commits", "false").strip().lower() == "true",
                   max_versions=int(opts.get("max.versions.per.batch") or DEFAULT_VERSIONS_PER_BATCH))

    def storage_options(self) -> dict[str, str] | None:
        from dsflow.adapters.tables.base import TableRef
        from dsflow.adapters.tables.delta import storage_options

        return storage_options(TableRef("delta", self.path, dict(self.settings)))


class DeltaDataSource(DataSource):
    """Read a Delta table's appended rows under the name `dsflow_delta`."""

    @classmethod
    def name(cls) -> str:
        return "dsflow_delta"

    def schema(self) -> str:
        columns = DeltaOptions.parse(self.options).columns
        return "key STRING, timestamp TIMESTAMP, version BIGINT, " + spark_struct_ddl(list(columns))

    def streamReader(self, schema: Any) -> DeltaStreamReader:
        return DeltaStreamReader(DeltaOptions.parse(self.options), gated_query(self.options))


@dataclass(frozen=True)
class Commit:
    """What one table version did: the data files it appended, or why it is not an append."""

    version: int
    timestamp_ms: int
    files: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...]
    """(path relative to the table, partition values) of each data file the commit added."""
    change: str | None = None
    """The operation of a commit that removed data (not an append), else None."""


@dataclass(frozen=True)
class DataFile(InputPartition):
    """One read task: the rows of one data file a commit added."""

    options: DeltaOptions
    version: int
    timestamp_ms: int
    path: str
    partition_values: tuple[tuple[str, str | None], ...]


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Versions are found and commit files read on the driver; tasks read the data files."""

    def __init__(self, options: DeltaOptions, gate: ReaderGate | None = None) -> None:
        self.options = options
        self.gate = gate
        self._table: Any = None
        self._cutoff: int | None = None
        self._planned: tuple[dict, dict] | None = None
        self._commits: dict[int, Commit] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_table": None, "_commits": {}}

    def _latest_version(self) -> int:
        from deltalake import DeltaTable

        try:
            if self._table is None:
                self._table = DeltaTable(self.options.path, storage_options=self.options.storage_options())
            else:
                self._table.update_incremental()
            return self._table.version()
        except Exception as err:  # noqa: BLE001 - delta-rs raises several kinds for a missing or unreadable table
            raise DsflowError("DSF-E383", f"cannot read the Delta table at {self.options.path}: {err}",
                              hint="check that the table exists (dsflow apply creates a declared table) and the "
                                   "store's settings") from err

    def initialOffset(self) -> dict:
        if self.options.starting_version is not None:
            return {"version": self.options.starting_version}
        return {"version": self._latest_version() if self.options.starting_position == "latest" else -1}

    def prepareForTriggerAvailableNow(self) -> None:
        """An availableNow run takes the versions committed before now; later ones wait for the next run."""
        self._cutoff = self._latest_version()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The last version to read: up to the newest (at most max.versions.per.batch), stopping before a commit
        that is not an append, which fails the query once every version before it has been read."""
        first = int(start["version"]) + 1
        newest = self._cutoff if self._cutoff is not None else self._latest_version()
        end = first - 1
        for version in range(first, min(newest, first - 1 + self.options.max_versions) + 1):
            commit = self._commit(version)
            if commit.change is not None and not self.options.skip_change_commits:
                if end >= first:
                    break
                raise not_an_append(self.options.path, commit)
            end = version
        return admitted(self.gate, start, {"version": end})

    def _commit(self, version: int) -> Commit:
        if version not in self._commits:
            self._commits[version] = read_commit(self.options, version)
        return self._commits[version]

    def partitions(self, start: dict, end: dict) -> list[DataFile]:
        self._planned = check_continues(self._planned, start, end, f"Delta table {self.options.path}")
        tasks = []
        for version in range(int(start["version"]) + 1, int(end["version"]) + 1):
            commit = self._commits.pop(version, None) or read_commit(self.options, version)
            if commit.change is not None and not self.options.skip_change_commits:
                raise not_an_append(self.options.path, commit)
            if commit.change is None:
                tasks += [DataFile(self.options, version, commit.timestamp_ms, path, values)
                          for path, values in commit.files]
        return tasks

    # Spark hands read() the partitions that partitions() made: a DataFile, never another InputPartition
    def read(self, partition: DataFile) -> Iterator[Any]:  # type: ignore[override]
        yield from file_batches(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in the Spark checkpoint."""

    def stop(self) -> None:
        self._table = None


def not_an_append(path: str, commit: Commit) -> DsflowError:
    return DsflowError("DSF-E380", f"version {commit.version} of the Delta table at {path} is a {commit.change}, not "
                       "an append: a query reads a table as the stream of its appended rows",
                       hint="only append to a table that queries read (a DELETE, UPDATE, MERGE or overwrite stops "
                            "them here); to go on past this version, restart the query with 'start.position' = "
                            "'latest'")


def read_commit(options: DeltaOptions, version: int) -> Commit:
    """The actions of one version's commit file: its added data files, or the operation that removed data."""
    from deltalake.fs import DeltaStorageHandler

    name = f"_delta_log/{version:020d}.json"
    try:
        handler = DeltaStorageHandler(options.path, options.storage_options())
        text = handler.open_input_file(name).read().decode("utf-8")
    except Exception as err:  # noqa: BLE001 - a missing file or an unreachable store
        raise DsflowError("DSF-E383", f"cannot read version {version} of the Delta table at {options.path} "
                          f"({name}): {err}", hint="the log was cleaned up past the query's position, or the "
                          "store is unreachable: restart the query from 'start.position' = 'latest'") from err
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    info: dict = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    removes = [a["remove"] for a in actions if "remove" in a and a["remove"].get("dataChange", True)]
    adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
    change = None
    if removes or any(a.get("deletionVector") for a in adds):
        change = str(info.get("operation") or "change").upper()
    files = tuple((_relative(options.path, a["path"]), tuple(sorted((a.get("partitionValues") or {}).items())))
                  for a in adds)
    return Commit(version, int(info.get("timestamp") or 0), files, change)


def _relative(table: str, path: str) -> str:
    path = unquote(path)
    if "://" not in path and not path.startswith("/"):
        return path
    root = table.rstrip("/") + "/"
    if path.startswith(root):
        return path[len(root):]
    raise DsflowError("DSF-E383", f"the Delta table at {table} names a data file outside it: {path}",
                      hint="a shallow clone's files are not read; read the table they belong to")


def file_batches(part: DataFile) -> Iterator[Any]:
    """The data file's rows as Arrow batches: key, timestamp, version, __value."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake.fs import DeltaStorageHandler

    handler = DeltaStorageHandler(part.options.path, part.options.storage_options())
    data = pq.read_table(handler.open_input_file(part.path))
    present = {name.lower(): name for name in data.column_names}
    partitions = {k.lower(): v for k, v in part.partition_values}
    arrays = []
    for name, sql_type in part.options.columns:
        target = arrow_type(sql_type)
        if name.lower() in present:
            arrays.append(data.column(present[name.lower()]).cast(target).combine_chunks())
        elif name.lower() in partitions:
            arrays.append(pa.array([partitions[name.lower()]] * data.num_rows, pa.string()).cast(target))
        else:
            arrays.append(pa.nulls(data.num_rows, target))
    value = pa.StructArray.from_arrays(arrays, fields=[pa.field(n, a.type) for (n, _), a in
                                                       zip(part.options.columns, arrays, strict=True)])
    count = data.num_rows
    batch = pa.RecordBatch.from_arrays(
        [pa.nulls(count, pa.string()),
         pa.array([part.timestamp_ms * 1000] * count, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
         pa.array([part.version] * count, pa.int64()), value],
        names=["key", "timestamp", "version", VALUE_COLUMN])
    for first in range(0, count, CHUNK_ROWS):
        yield batch.slice(first, CHUNK_ROWS)
