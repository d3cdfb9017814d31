"""Kinesis streams as a Spark Python data source, `dsflow_kinesis`, on boto3.

    spark.readStream.format("dsflow_kinesis").option("stream", "pageviews")
        .option("kinesis.endpoint", "http://127.0.0.1:4567").option("kinesis.region", "us-east-1").load()

Options: stream (required); starting.position earliest (default) | latest; starting.timestamp epoch ms
(a replay); starting.offsets JSON {shard id: position} carried from an older query version;
max.records.per.batch; kinesis.<setting> the store's settings (client.py).

Rows: key (the partition key), value (the data as UTF-8), stream, shard, sequence, timestamp (the
approximate arrival time): the same key/value/timestamp columns as every log's data source. Value formats
(decoding.py, with dsflow/formats/): value.format json (default) | avro | protobuf | string | long |
int | double | bytes, value.columns JSON [[name, SQL type], ...], schema.registry.* (avro, protobuf).
Every format but json replaces `value` by a struct column `__value` of the columns. A record that does not
decode goes to the dead-letter stream dlq.topic (dlq.query names the query) or, without one, fails the
task with DSF-E773 naming the stream, shard and sequence number.

Offsets are {shard id: position}, one entry per shard, with a position of (offsets.py)
    "trim"          nothing read yet: from the shard's first record (TRIM_HORIZON)
    "at:<ms>"       nothing read yet: from the first record that arrived at or after <ms> (AT_TIMESTAMP)
    "after:<seq>"   read up to and including sequence number <seq>
    "closed"        a closed shard (a parent of a split or merge) read to its end
so the checkpoint holds sequence numbers. Resharding: a child shard is read only once the batch
before has drained every parent still listed (parents first, per key order is kept).

Finding the end of a micro-batch needs reading (Kinesis has no "end offset" call): the driver-side
reader reads the new records in latestOffset and hands them to the batch's partitions (one per shard)
instead of reading them twice. A batch planned again after a restart (its records are no longer in
memory) is read from Kinesis between the same sequence numbers, so it holds the same records.

Writing takes `value` (and optional `key`, the partition key; without one, a hash of the value; for a
value.format other than json, `value` is a struct serialized like any log sink's: value.schema,
value.subject, schema.registry.*) and sends PutRecords batches of up to 500 records, retrying throttled or failed
records with backoff (at-least-once, like the other log sinks).
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark.sql.datasource import (
    DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from dsflow.adapters.spark.gate import ReaderGate, admitted, gated_query
from dsflow.adapters.continuity import check_continues
from dsflow.adapters.kinesis import client as kc
from dsflow.adapters.kinesis.offsets import Record, eligible, initial_positions, read_shard, replay_range
from dsflow.adapters.kinesis.writing import put_batches
from dsflow.core.secrets import register
from dsflow.errors import DsflowError, unchained
from dsflow.formats.arrow import VALUE_COLUMN, spark_struct_ddl
from dsflow.formats.decoding import Decoding
from dsflow.formats.serializers import value_serializer

SCHEMA = StructType([
    StructField("key", StringType()), StructField("value", StringType()), StructField("stream", StringType()),
    StructField("shard", StringType()), StructField("sequence", StringType()),
    StructField("timestamp", TimestampType()),
])
DEFAULT_BATCH_RECORDS = 100_000
"""Records one micro-batch takes at most (over all shards) unless max.records.per.batch says otherwise."""


@dataclass(frozen=True)
class KinesisOptions:
    """The data source options, parsed and checked once."""

    stream: str
    settings: dict[str, str] = field(default_factory=dict, repr=False)
    starting_position: str = "earliest"
    starting_timestamp: int | None = None
    starting_offsets: dict[str, str] | None = None
    max_records: int = DEFAULT_BATCH_RECORDS
    decoding: Decoding = field(default_factory=Decoding, repr=False)
    """value.format, value.columns, schema.registry.*, dlq.topic (a Kinesis stream), dlq.query."""
    value_schema: str | None = None
    """Writing avro or protobuf: the schema (value.schema) registered under value.subject."""
    value_subject: str | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """The values of the options named by `secret.options`: scrubbed from the log lines of every process that makes
    clients with `settings` (tasks run in other processes than the driver that parsed the options)."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KinesisOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        stream = opts.get("stream", "").strip()
        if not stream:
            raise DsflowError("DSF-E762", "dsflow_kinesis: option 'stream' is required", hint='.option("stream", ...)')
        start = opts.get("starting.position", "earliest").strip().lower()
        if start not in ("earliest", "latest"):
            raise DsflowError("DSF-E762",
                              f"dsflow_kinesis: starting.position is '{start}'; expected earliest or latest")
        offsets = json.loads(opts["starting.offsets"]) if opts.get("starting.offsets") else None
        return cls(stream=stream, settings=kc.settings_of(opts), starting_position=start,
                   starting_timestamp=int(opts["starting.timestamp"]) if opts.get("starting.timestamp") else None,
                   starting_offsets={str(k): str(v) for k, v in offsets.items()} if offsets else None,
                   max_records=int(opts.get("max.records.per.batch") or DEFAULT_BATCH_RECORDS),
                   decoding=_decoding(opts), value_schema=opts.get("value.schema") or None,
                   value_subject=opts.get("value.subject") or None,
                   secrets=tuple(opts[k] for k in opts.get("secret.options", "").lower().split(",") if k in opts))


def _decoding(opts: Mapping[str, str]) -> Decoding:
    from dsflow.core.formats import VALUE_FORMATS

    decoding = Decoding.parse({**opts, "key.format": ""})  # partition keys are text: no binary key formats
    if decoding.value_format not in VALUE_FORMATS:
        raise DsflowError("DSF-E762", f"dsflow_kinesis: value.format is '{decoding.value_format}'; expected one of "
                          f"{', '.join(VALUE_FORMATS)}")
    return decoding


class KinesisDataSource(DataSource):
    """Read and write Kinesis streams under the name `dsflow_kinesis`."""

    @classmethod
    def name(cls) -> str:
        return "dsflow_kinesis"

    def schema(self) -> StructType | str:
        decoding = _decoding({str(k).lower(): str(v) for k, v in self.options.items()})
        if not decoding.decoded:
            return SCHEMA
        return ("key STRING, stream STRING, shard STRING, sequence STRING, timestamp TIMESTAMP, "
                + spark_struct_ddl(list(decoding.columns)))

    def streamReader(self, schema: StructType) -> KinesisStreamReader:
        return KinesisStreamReader(KinesisOptions.parse(self.options), gated_query(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KinesisStreamWriter:
        return KinesisStreamWriter(KinesisOptions.parse(self.options), _checked(schema))

    def writer(self, schema: StructType, overwrite: bool) -> KinesisBatchWriter:
        return KinesisBatchWriter(KinesisOptions.parse(self.options), _checked(schema))


def no_secret_in_errors(stream: str) -> AbstractContextManager:
    """Errors leave the data source scrubbed and unchained (errors.unchained): an SDK error becomes DSF-E760."""
    return unchained(lambda err: DsflowError(
        "DSF-E760", f"a Kinesis request for stream '{stream}' failed: {type(err).__name__}: {err}",
        hint="check the kinesis store's endpoint, region and credentials"))


@dataclass(frozen=True)
class ShardRange(InputPartition):
    """One read task: the records of one shard after `start` up to `end` (offset positions)."""

    stream: str
    shard: str
    start: str
    end: str
    settings: dict[str, str] = field(repr=False)
    records: tuple[Record, ...] | None = field(default=None, repr=False)
    """The records the driver read to find `end`; None: read them from Kinesis (a batch planned again)."""
    decoding: Decoding = field(default_factory=Decoding, repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and records are found on the driver; tasks turn them into Arrow batches."""

    def __init__(self, options: KinesisOptions, gate: ReaderGate | None = None) -> None:
        self.options = options
        self.gate = gate
        self._client: Any = None
        self._fetched: dict[tuple[str, str, str], tuple[Record, ...]] = {}
        self._cutoff_ms: int | None = None
        self._planned: tuple[dict, dict] | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None, "_fetched": {}}

    def client(self) -> Any:
        if self._client is None:
            register(self.options.secrets)
            self._client = kc.new_client(self.options.settings)
        return self._client

    def _shards(self) -> list[dict[str, Any]]:
        try:
            return kc.list_shards(self.client(), self.options.stream)
        except Exception as err:  # noqa: BLE001 - a missing stream or endpoint becomes one clear error
            raise DsflowError(
                "DSF-E763", f"cannot list the shards of Kinesis stream '{self.options.stream}': {err}",
                hint="check that the stream exists (dsflow apply creates it) and the store settings") from err

    def initialOffset(self) -> dict:
        o = self.options
        with no_secret_in_errors(o.stream):
            return initial_positions(self._shards(), o.starting_position, o.starting_timestamp, o.starting_offsets,
                                     now_ms=int(time.time() * 1000))

    def prepareForTriggerAvailableNow(self) -> None:
        """An availableNow run takes the records that arrived before now; later ones wait for the next run."""
        self._cutoff_ms = int(time.time() * 1000)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        with no_secret_in_errors(self.options.stream):
            end = self._latest(start, limit)
        return admitted(self.gate, start, end)

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        shards = self._shards()
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_records
        end = {s["ShardId"]: start.get(s["ShardId"], "trim") for s in shards}
        end.update({k: v for k, v in start.items() if k not in end})  # expired shards keep their last position
        self._fetched = {}
        for shard in eligible(shards, start):
            shard_id = shard["ShardId"]
            if budget <= 0 or end[shard_id] == "closed":
                continue
            records, position = read_shard(self.client(), self.options.stream, shard_id, end[shard_id],
                                           budget, self._cutoff_ms)
            if position != end[shard_id]:
                self._fetched[(shard_id, end[shard_id], position)] = tuple(records)
                end[shard_id] = position
            budget -= len(records)
        return end

    def partitions(self, start: dict, end: dict) -> list[ShardRange]:
        self._planned = check_continues(self._planned, start, end, f"Kinesis stream '{self.options.stream}'")
        ranges = []
        for shard_id, stop in end.items():
            begin = start.get(shard_id, "trim")
            if begin == stop:
                continue
            records = self._fetched.pop((shard_id, begin, stop), None)
            if records is not None and not records:
                continue
            ranges.append(ShardRange(self.options.stream, shard_id, begin, stop, self.options.settings, records,
                                     self.options.decoding, self.options.secrets))
        return ranges

    # Spark hands read() the partitions that partitions() made: a ShardRange, never another InputPartition
    def read(self, partition: ShardRange) -> Iterator[Any]:  # type: ignore[override]
        register(partition.secrets)
        with no_secret_in_errors(partition.stream):
            records: tuple[Record, ...] | list[Record] | None = partition.records
            if records is None:
                records = replay_range(kc.new_client(partition.settings), partition.stream, partition.shard,
                                       partition.start, partition.end)
            yield from decoded_batches(records, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in the Spark checkpoint."""

    def stop(self) -> None:
        self._client = None


CHUNK_ROWS = 10_000


def decoded_batches(records: tuple[Record, ...] | list[Record], partition: ShardRange) -> Iterator[Any]:
    """The records as Arrow batches in chunks, decoded by the value format. Records that do not decode go to
    the dead-letter stream before the task ends, or stop it (DSF-E773) when there is none."""
    from dsflow.adapters.kinesis.decoding import DeadLetterStream, KinesisMessage, decode_records, undecodable
    from dsflow.formats.decoding import set_aside

    decoding = partition.decoding
    dead = DeadLetterStream(partition.settings, decoding) if decoding.dlq_topic else None
    for i in range(0, len(records), CHUNK_ROWS):
        chunk = records[i:i + CHUNK_ROWS]
        keep, values, bad = decode_records(chunk, partition.stream, partition.shard, decoding)
        bad = set_aside(bad, decoding, partial(_undecodable, partition, chunk))
        if bad and dead is None:  # IGNORE_AND_LOG without a dead-letter stream
            index, error = bad[0]
            raise undecodable(partition.stream, partition.shard, chunk[index], error)
        if dead is not None:
            dead.send([KinesisMessage(r, partition.stream, partition.shard) for r in chunk], bad)
        if keep:
            kept = chunk if len(keep) == len(chunk) else [chunk[j] for j in keep]
            yield to_record_batch(kept, partition.stream, partition.shard, values)


def _undecodable(partition: ShardRange, chunk: Any, index: int, error: str) -> Exception:
    """The error stopping the query at record `index` of `chunk` (TERMINATE, or no dead-letter stream)."""
    from dsflow.adapters.kinesis.decoding import undecodable

    return undecodable(partition.stream, partition.shard, chunk[index], error)


def to_record_batch(records: tuple[Record, ...] | list[Record], stream: str, shard: str, values: Any = None) -> Any:
    """Records as an Arrow RecordBatch matching SCHEMA; with decoded `values` (a struct array), the `value`
    text column is left out and `values` comes last as `__value`."""
    import pyarrow as pa

    count = len(records)
    columns = [
        pa.array([r.key for r in records], pa.string()),
        None if values is not None else pa.array([r.data.decode("utf-8", "replace") for r in records], pa.string()),
        pa.repeat(pa.scalar(stream, pa.string()), count),
        pa.repeat(pa.scalar(shard, pa.string()), count),
        pa.array([r.sequence for r in records], pa.string()),
        pa.array([r.arrival_ms * 1000 for r in records], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ]
    names = [f.name for f in SCHEMA.fields]
    if values is None:
        return pa.RecordBatch.from_arrays(columns, names=names)
    return pa.RecordBatch.from_arrays([c for c in columns if c is not None] + [values],
                                      names=[n for n in names if n != "value"] + [VALUE_COLUMN])


# --- writing ----------------------------------------------------------------------------------


@dataclass
class KinesisCommit(WriterCommitMessage):
    records: int


def _checked(schema: StructType) -> StructType:
    names = {f.name.lower() for f in schema.fields}
    if "value" not in names:
        raise DsflowError("DSF-E762", f"writing to Kinesis needs a 'value' column; got {', '.join(names) or 'none'}",
                          hint="select your payload AS value (and the partition key AS key)")
    return schema


def _serializer(options: KinesisOptions) -> Any:
    """The value format's serializer of `value` structs (None for json: the value is text already)."""
    return value_serializer(options.decoding.value_format, options.stream, options.decoding.registry,
                            options.value_schema, options.value_subject)


class KinesisStreamWriter(DataSourceStreamArrowWriter):
    """Each task puts its rows (retrying throttled ones) before reporting success: at-least-once."""

    def __init__(self, options: KinesisOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> KinesisCommit:
        register(self.options.secrets)
        with no_secret_in_errors(self.options.stream):
            return KinesisCommit(put_batches(kc.new_client(self.options.settings), self.options.stream, iterator,
                                             _serializer(self.options)))

    def commit(self, messages: list, batchId: int) -> None:
        """Nothing to do: the records were put by the tasks."""

    def abort(self, messages: list, batchId: int) -> None:
        """Nothing can be undone: records put stay (at-least-once)."""


class KinesisBatchWriter(DataSourceArrowWriter):
    """df.write.format("dsflow_kinesis").mode("append") (an aggregation's updates through foreachBatch)."""

    def __init__(self, options: KinesisOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> KinesisCommit:
        register(self.options.secrets)
        with no_secret_in_errors(self.options.stream):
            return KinesisCommit(put_batches(kc.new_client(self.options.settings), self.options.stream, iterator,
                                             _serializer(self.options)))
