"""Kafka topics as a Spark Python data source, `dsflow_kafka`, on confluent-kafka.

    spark.readStream.format("dsflow_kafka")
        .option("bootstrap.servers", "127.0.0.1:9092").option("topic", "orders").load()

Options (keys are case-insensitive):

    bootstrap.servers      required
    topic                  required
    starting.position      earliest (default) | latest; used only when a query has no checkpoint
    starting.offsets       JSON {"<partition>": offset}: start there (offsets carried from an older
                           query version); partitions not named start at starting.position
    starting.timestamp     epoch ms: start at the first record at or after it (a replay)
    ending.offsets         JSON {"<partition>": offset}: a streaming read goes no further (a blue/green deployment's
                           run to a cut, core/bluegreen.py); partitions not named are not capped
    ends.at.read           true: a batch read finds each partition's first and end offsets when its task runs, not
                           when Spark plans the read (which a streaming query does once: a table it joins is
                           read again, whole, at every micro-batch: adapters/spark/lookup.py)
    max.records.per.batch  optional cap on records per micro-batch (offset-based)
    stall.timeout.seconds  fail a read task that makes no progress this long (default 60)
    gaps                   fail (default) | count: what a read does with offsets the broker confirms it holds no
                           record for (ranges.py): fail the micro-batch (DSF-E709), or count them (compacted
                           topics, transaction markers) in `gap.log`
    gap.log                a file that counted gaps are appended to as JSON lines (dsflow status reads it)
    deserialization.errors TERMINATE | IGNORE | IGNORE_AND_LOG: a record that does not decode stops the read
                           (DSF-E779), is skipped and counted in `skip.log`, or goes to `dlq.topic` (formats/decoding.py
                           `set_aside`); default: IGNORE_AND_LOG with a dlq.topic, else TERMINATE
    skip.log               a file the counts of skipped records are appended to as JSON lines (dsflow status reads it)
    kafka.<setting>        passed to librdkafka without the prefix, e.g. kafka.security.protocol
    secret.options         comma-separated names of the options above whose values are secrets: scrubbed
                           from the tasks' log lines (core/secrets.py)
    transaction.ledger     writing (batch writer) exactly-once: each task writes its records and the batch id in one
                           Kafka transaction of this ledger and skips a batch the ledger holds (transactions.py)
    transaction.batch      with transaction.ledger: the micro-batch id
    run.id                 writing (stream writer): the query run's id, set once at its start: the write tasks'
                           producers are kept across its micro-batches (pool.py); without it a producer lasts one batch

Reading yields key, value, topic, partition, offset, timestamp (see SCHEMA). Offsets are
{"<partition>": next offset}; a partition missing from the start offset is read from 0.
Records are read with assign() only: no consumer group, nothing committed to Kafka; the
Spark checkpoint is the only record of progress.

Writing takes a `value` column (STRING or BINARY), optional `key` (STRING or BINARY) and
optional `partition` (INT); other columns are ignored, and a `topic` column never picks
the target: the `topic` option does. The sink is at-least-once: a task retried or a query
restarted after a failure can write the same records again; but with `transaction.ledger` (an exactly-once
query's foreachBatch) a batch written again is skipped.

Writing lives in writing.py. Nothing here holds a Kafka client when pickled: clients are made where they are used.
"""

from __future__ import annotations

import json
import time
import uuid

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

from dsflow.adapters.continuity import check_continues
from dsflow.adapters.kafka import client, pool
from dsflow.adapters.kafka.deadletters import DeadLetters
from dsflow.adapters.kafka.options import KafkaOptions, moved_ending_offsets
from dsflow.adapters.spark.gate import ReaderGate, admitted, gated_query
from dsflow.core.secrets import register
from dsflow.adapters.kafka.writing import KafkaBatchWriter, KafkaStreamWriter, check_write_schema
from dsflow.errors import DsflowError, unchained
from dsflow.formats.arrow import VALUE_COLUMN, spark_struct_ddl, value_struct
from dsflow.formats.decoding import BOTH, TEXT, Decoding, decode_records, set_aside
from dsflow.formats.primitives import NUMERIC_KEYS, key_texts

SCHEMA = StructType([
    StructField("key", StringType()),
    StructField("value", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
])
"""Rows read from Kafka; timestamp is the record timestamp (ms since the epoch)."""

RUN_OPTION = "run.id"
"""A streaming write's run: set once per query start, it keeps the sink's producers across micro-batches."""

AT_READ = -1
"""A task's end offset to be found when it runs (`ends.at.read`)."""

CHUNK_ROWS = 10_000
"""Rows per Arrow RecordBatch produced by a read task."""

QUICK_SETTLE_S = 0.02
"""Between micro-batches, how long the end-offset probe reads on (see client.end_offsets): this runs
before every batch, so it bounds latency; an end found short is completed by the next batch."""

QUICK_QUIET_S = 0.0
"""Between micro-batches, the probe's wait for more records once each partition showed its last batch: none, it
takes only what is local already (a consume that waits takes its whole wait on a busy topic, every batch)."""

class KafkaDataSource(DataSource):
    """Read and write Kafka topics, batch or streaming, under the name `dsflow_kafka`."""

    @classmethod
    def name(cls) -> str:
        return "dsflow_kafka"

    def schema(self) -> StructType | str:
        decoding = Decoding.parse({str(k).lower(): str(v) for k, v in self.options.items()})
        layout = decoding.layout  # the source view reads the same layout (formats.value_layout)
        if layout == TEXT:
            return SCHEMA
        return ("key STRING, " + ("value STRING, " if layout == BOTH else "")
                + "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
                + spark_struct_ddl(list(decoding.columns)))

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(KafkaOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(replace(KafkaOptions.parse(self.options), run=uuid.uuid4().hex),
                                 gated_query(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        if overwrite:
            raise DsflowError("DSF-E707", "dsflow_kafka cannot overwrite a topic", hint='use .mode("append")')
        return KafkaBatchWriter(KafkaOptions.parse(self.options), check_write_schema(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(replace(KafkaOptions.parse(self.options), run=write_run(self.options)),
                                 check_write_schema(schema))


def write_run(options: Mapping[str, str]) -> str:
    """The run a streaming write's pooled producers belong to (pool.py): its `run.id` option, which the query's start
    sets once (adapters/kafka/spark.py), else a new id. Spark plans a Python sink's write again at every
    micro-batch (`streamWriter` each time), so without the option no producer outlives its batch."""
    given = {str(k).lower(): str(v) for k, v in options.items()}.get(RUN_OPTION, "").strip()
    return given or uuid.uuid4().hex


# --- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One read task: offsets start <= offset < end of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int
    config: dict[str, Any] = field(repr=False)  # may hold credentials: kept out of Spark logs
    stall_timeout: float = client.STALL_TIMEOUT
    decoding: Decoding = field(default_factory=Decoding, repr=False)
    run: str = ""
    allow_gaps: bool = False
    gap_log: str | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Secret values among `config` (the `secret.options`): scrubbed from this task's process's log lines."""


def read_range_arrow(task: KafkaRange) -> Iterator[Any]:
    """The task's records as Arrow RecordBatches of up to CHUNK_ROWS rows."""
    register(task.secrets)
    with unchained_kafka(task.topic):
        yield from _read_range(task)


def _read_range(task: KafkaRange) -> Iterator[Any]:
    consumer = pool.consumer(task.config, task.run)  # kept across micro-batches in the reused worker (pool.py)
    dead = DeadLetters(task.config, task.decoding)
    value_type = value_struct(task.decoding.columns) if task.decoding.layout == BOTH else None
    ok = False
    try:
        if task.end == AT_READ:  # `ends.at.read`: the partition as it is now
            start = client.start_offsets(consumer, task.topic, [task.partition])[task.partition]
            end = client.end_offsets(consumer, task.topic, [task.partition])[task.partition]
            task = replace(task, start=start, end=end)
        chunks = client.read_range(consumer, task.topic, task.partition, task.start, task.end, CHUNK_ROWS,
                                   task.stall_timeout, task.allow_gaps, _gap_logger(task.gap_log))
        for messages in chunks:
            if not task.decoding.decoded and not task.decoding.dlq_topic and not task.decoding.decodes_keys:
                yield to_record_batch(messages, task.topic)
                continue
            keep, values, keys, bad = decode_records(messages, task.decoding)
            dead.send(messages, set_aside(bad, task.decoding, _undecodable(task, messages)))
            if keep:
                kept = messages if len(keep) == len(messages) else [messages[i] for i in keep]
                yield to_record_batch(kept, task.topic, values, task.decoding.key_format, keys, value_type)
        dead.close()  # before the task reports success: dead letters are delivered before the batch commits
        ok = True
    finally:
        pool.release_consumer(task.config, consumer, ok, task.run)


def _undecodable(task: KafkaRange, messages: list) -> Any:
    """DSF-E779 for the record at an index of `messages` ('source.deserialization.error.handling' = TERMINATE, or a
    read without a dead-letter topic)."""
    def error(index: int, why: str) -> DsflowError:
        policy = "is TERMINATE" if task.decoding.on_error else "is not set and it has no dead-letter topic"
        return DsflowError("DSF-E779", f"the record of topic '{task.topic}', partition {task.partition}, offset "
                           f"{messages[index].offset()} does not decode ({why[:500]}) and the query's "
                           f"'source.deserialization.error.handling' {policy}",
                           hint="fix or remove the record, or set the property to IGNORE_AND_LOG (dead letters) or "
                                "IGNORE (skipped and counted)")
    return error


def _gap_logger(path: str | None) -> Any:
    """An `on_gap` that appends each counted gap to `path` as a JSON line (None: nothing recorded)."""
    if path is None:
        return None

    def record(topic: str, partition: int, start: int, end: int) -> None:
        line = json.dumps({"topic": topic, "partition": partition, "start": start, "end": end, "at": time.time()})
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")

    return record


def to_record_batch(messages: list, topic: str, values: Any = None, key_format: str | None = None,
                    keys: list | None = None, value_type: Any = None) -> Any:
    """Consumed messages as a RecordBatch matching SCHEMA; with decoded `values` (a struct array), the
    `value` text column is left out and `values` comes last as `__value`; with decoded `keys` (texts of
    avro/protobuf keys), those are the key column. With `value_type` (the `__value` type of a JSON source
    in the layout "both"), both columns are there: `values` and a null text column, or, when `values` is
    None (records left to from_json), the text and null structs.

    Column-wise, with `map` over the Message accessors instead of per-row Python frames; keys and
    values go in as bytes and are checked as UTF-8 by Arrow in one pass. A batch with invalid
    UTF-8 falls back to decoding row by row (invalid bytes become U+FFFD).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from confluent_kafka import Message

    count = len(messages)
    text = values is None or value_type is not None
    stamps = pa.array(list(map(_timestamp_ms, messages)), pa.int64())
    stamps = pc.if_else(pc.less(stamps, 0), pa.scalar(None, pa.int64()), pc.multiply(stamps, 1000))
    partition = messages[0].partition() if count else 0
    columns = [
        pa.array(keys, pa.string()) if keys is not None
        else pa.array(key_texts(list(map(Message.key, messages)), key_format), pa.string())
        if key_format in NUMERIC_KEYS else _text_column(list(map(Message.key, messages))),
        (_text_column(list(map(Message.value, messages))) if values is None else pa.nulls(count, pa.string()))
        if text else None,
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count)
        if all(m == partition for m in map(Message.partition, messages))
        else pa.array(list(map(Message.partition, messages)), pa.int32()),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        stamps.cast(pa.timestamp("us", tz="UTC")),
    ]
    if values is None and value_type is None:
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())
    names = [n for n in arrow_schema().names if text or n != "value"] + [VALUE_COLUMN]
    struct = values if values is not None else pa.nulls(count, value_type)
    return pa.RecordBatch.from_arrays([c for c in columns if c is not None] + [struct], names=names)


def _timestamp_ms(message: Any) -> int:
    return message.timestamp()[1]


def _text_column(raw: list) -> Any:
    """Keys or values (bytes or None) as an Arrow string column; invalid UTF-8 becomes U+FFFD."""
    import pyarrow as pa

    try:
        return pa.array(raw, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([client.decode(r) for r in raw], pa.string())


def arrow_schema() -> Any:
    """SCHEMA in Arrow, as Spark expects it back from read()."""
    import pyarrow as pa

    return pa.schema([
        ("key", pa.string()), ("value", pa.string()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ])


def plan_ranges(options: KafkaOptions, start: Mapping[str, int], end: Mapping[str, int]) -> list[KafkaRange]:
    """One task per partition with records between the two offsets."""
    return [
        KafkaRange(options.topic, int(p), int(start.get(p, 0)), int(stop), options.config, options.stall_timeout,
                   options.decoding, options.run, options.allow_gaps, options.gap_log, options.secret_values)
        for p, stop in end.items()
        if int(start.get(p, 0)) < int(stop)
    ]


def as_offset(positions: Mapping[int, int]) -> dict[str, int]:
    """{partition: offset} as a JSON-able Spark offset, keys in partition order."""
    return {str(p): int(positions[p]) for p in sorted(positions)}


def unchained_kafka(topic: str) -> AbstractContextManager:
    """Errors leave the data source scrubbed and unchained (errors.unchained): a client error becomes DSF-E703."""
    return unchained(lambda err: DsflowError("DSF-E703", f"a Kafka request for topic '{topic}' failed: "
                                             f"{type(err).__name__}: {err}"))


class _ConsumerHolder:
    """One lazily made Consumer, dropped when pickled and closed by `close()`."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._consumer: Any = None
        self._tracker = client.EndTracker()
        self._partitions = client.RecentPartitions()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_consumer": None, "_tracker": client.EndTracker(),
                "_partitions": client.RecentPartitions()}

    def consumer(self) -> Any:
        if self._consumer is None:
            config = self.options.config  # registers its secrets in this process before any error can name them
            client.assert_reachable(self.options.bootstrap)
            self._consumer = client.new_consumer(config)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def end_offsets(self, quick: bool = False) -> dict[int, int]:
        """True ends; `quick` (between micro-batches) may answer short of them on a busy partition:
        the rest comes with the next batch (`client.EndTracker`)."""
        with unchained_kafka(self.options.topic):
            c = self.consumer()
            if not quick:
                return client.end_offsets(c, self.options.topic, client.topic_partitions(c, self.options.topic))
            topic = self.options.topic
            from_kept_list = self._partitions.holds(topic)
            try:
                return self._tracker.ends(c, topic, self._partitions.get(c, topic), QUICK_SETTLE_S, QUICK_QUIET_S)
            except DsflowError:
                if not from_kept_list:  # the broker's own answer failed (down, topic gone): no second wait
                    raise
                self._partitions.forget(topic)  # the list kept may be stale (a deleted topic): read it again, once
                return self._tracker.ends(c, topic, self._partitions.get(c, topic), QUICK_SETTLE_S, QUICK_QUIET_S)

    def start_offsets(self) -> dict[int, int]:
        with unchained_kafka(self.options.topic):
            c = self.consumer()
            return client.start_offsets(c, self.options.topic, client.topic_partitions(c, self.options.topic))

    def offsets_at(self, timestamp_ms: int) -> dict[int, int]:
        """The first offset at or after `timestamp_ms` per partition; the end where there is none."""
        from confluent_kafka import TopicPartition

        with unchained_kafka(self.options.topic):
            c = self.consumer()
            parts = client.topic_partitions(c, self.options.topic)
            found = c.offsets_for_times([TopicPartition(self.options.topic, p, timestamp_ms) for p in parts],
                                        timeout=client.REQUEST_TIMEOUT)
        ends = None
        result = {}
        for tp in found:
            if tp.offset < 0:
                ends = ends or self.end_offsets()
                result[tp.partition] = ends[tp.partition]
            else:
                result[tp.partition] = tp.offset
        return result


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offset ranges; the driver-side reader keeps one Consumer for offsets."""

    def __init__(self, options: KafkaOptions, gate: ReaderGate | None = None) -> None:
        self.options = options
        self.gate = gate
        self._offsets = _ConsumerHolder(options)
        self._target: dict[int, int] | None = None
        self._planned: tuple[dict, dict] | None = None

    def initialOffset(self) -> dict:
        if self.options.starting_timestamp is not None:
            return as_offset(self._offsets.offsets_at(self.options.starting_timestamp))
        if self.options.starting_position == "latest":
            positions = self._offsets.end_offsets()
        else:
            positions = self._offsets.start_offsets()
        carried = self.options.starting_offsets or {}
        return as_offset({p: carried.get(p, off) for p, off in positions.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_batch:
            return ReadMaxRows(self.options.max_records_per_batch)
        return super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an availableNow run: records arriving later wait for the next run."""
        self._target = self._offsets.end_offsets()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        available = self._target if self._target is not None else self._offsets.end_offsets(quick=True)
        begin = {p: int(start.get(str(p), 0)) for p in available}
        until = moved_ending_offsets(self.options) or self.options.ending_offsets or {}
        end = {p: max(begin[p], min(available[p], until.get(p, available[p]))) for p in available}
        if isinstance(limit, ReadMaxRows):
            end = cap_rows(begin, end, limit.max_rows)
        kept = {int(p): int(v) for p, v in start.items() if int(p) not in end}
        return admitted(self.gate, start, as_offset({**kept, **end}))

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        self._planned = check_ranges(self._planned, start, end, self.options.topic)
        return plan_ranges(self.options, start, end)

    # Spark hands read() the partitions that partitions() made: a KafkaRange, never another InputPartition
    def read(self, partition: KafkaRange) -> Iterator[Any]:  # type: ignore[override]
        return read_range_arrow(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in the Spark checkpoint, not in Kafka."""

    def stop(self) -> None:
        self._offsets.close()


def check_ranges(previous: tuple[dict, dict] | None, start: dict, end: dict, topic: str) -> tuple[dict, dict]:
    """continuity.check_continues, and no partition's end before its start (DSF-E709)."""
    backwards = sorted(p for p in end if p in start and int(end[p]) < int(start[p]))
    if backwards:
        raise DsflowError("DSF-E709", f"micro-batch offsets of topic '{topic}' go backwards: " + ", ".join(
            f"partition {p}: start {start[p]}, end {end[p]}" for p in backwards))
    return check_continues(previous, start, end, f"topic '{topic}'")


def cap_rows(begin: dict[int, int], end: dict[int, int], max_rows: int) -> dict[int, int]:
    """Lower `end` so that at most max_rows offsets are covered, shared fairly across partitions."""
    budget = max_rows
    capped = dict(end)
    pending = sorted(end, key=lambda p: (end[p] - begin[p], p))
    for i, p in enumerate(pending):
        take = min(end[p] - begin[p], budget // (len(pending) - i))
        capped[p] = begin[p] + take
        budget -= take
    return capped


class KafkaBatchReader(DataSourceReader):
    """A one-off read of everything in the topic (earliest to the true end)."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options

    def partitions(self) -> list[KafkaRange]:
        holder = _ConsumerHolder(self.options)
        try:
            if self.options.ends_at_read:  # offsets found by each task (AT_READ)
                parts = {str(p): AT_READ for p in client.topic_partitions(holder.consumer(), self.options.topic)}
                return plan_ranges(self.options, {p: AT_READ - 1 for p in parts}, parts)
            start, end = holder.start_offsets(), holder.end_offsets()
        finally:
            holder.close()
        return plan_ranges(self.options, as_offset(start), as_offset(end))

    # Spark hands read() the partitions that partitions() made: a KafkaRange, never another InputPartition
    def read(self, partition: KafkaRange) -> Iterator[Any]:  # type: ignore[override]
        return read_range_arrow(partition)
