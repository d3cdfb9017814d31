"""Writing Kafka topics for the `dsflow_kafka` data source (datasource.py): Arrow batches to confluent-kafka.

Writing takes a `value` column (STRING, BINARY or a struct for registry formats), optional `key` and optional
`partition`; the `topic` option picks the target. At-least-once: a retried task or a restarted query can write
the same records again; but with `transaction.ledger` (an exactly-once query's foreachBatch, adapters/kafka/spark.py)
each task writes in one transaction that records the batch id, and a batch written already is skipped
(transactions.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructType

from dsflow.adapters.kafka import client, pool
from dsflow.adapters.kafka.options import KafkaOptions
from dsflow.errors import DsflowError, unchained
from dsflow.formats.serializers import key_encoder, value_serializer


@dataclass
class KafkaCommit(WriterCommitMessage):
    """What one write task delivered."""

    records: int


_WRITE_COLUMNS = {
    "value": (StringType, BinaryType, StructType),
    "key": (StringType, BinaryType),
    "partition": (IntegerType, LongType),
}


def check_write_schema(schema: StructType) -> StructType:
    """DSF-E707 unless there is a `value` column and key/value/partition have usable types."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise DsflowError(
            "DSF-E707", f"writing to Kafka needs a 'value' column; got {', '.join(types) or 'none'}",
            hint="select your payload AS value (e.g. to_json(struct(*)) AS value)",
        )
    for name, allowed in _WRITE_COLUMNS.items():
        if name in types and not isinstance(types[name], allowed):
            raise DsflowError(
                "DSF-E707", f"column '{name}' is {types[name].simpleString()}; expected "
                + " or ".join(t().simpleString() for t in allowed),
                hint=f"cast it, e.g. CAST({name} AS {allowed[0]().simpleString()})",
            )
    return schema


def produce_batches(options: KafkaOptions, batches: Iterator[Any]) -> int:
    """Produce every row of the Arrow batches to the topic, flush, and return the count.

    The per-row work is one `produce` call in a tight loop (no helper call per row); a full
    local queue is the exception path: serve deliveries and retry that row.
    """
    with unchained(lambda err: DsflowError("DSF-E705", f"writing to topic '{options.topic}' failed: "
                                           f"{type(err).__name__}: {err}")):
        return _produce_batches(options, batches)


def _produce_batches(options: KafkaOptions, batches: Iterator[Any]) -> int:
    pair = pool.producer(options.config, options.run)  # kept across micro-batches in the reused worker (pool.py)
    producer, errors = pair
    ok = False
    try:
        count = _produce_all(producer, options, batches)
        client.flush_or_raise(producer, options.topic, count, errors)
        ok = True
    finally:
        pool.release_producer(options.config, pair, ok, options.run)
    return count


def _produce_all(producer: Any, options: KafkaOptions, batches: Iterator[Any]) -> int:
    serialize = value_serializer(options.decoding.value_format, options.topic, options.decoding.registry,
                                 options.value_schema, options.value_subject)
    encode_keys = key_encoder(options.decoding.key_format, options.topic, options.decoding.registry,
                              options.key_schema, options.key_subject)
    count = 0
    for batch in batches:
        values, keys, partitions = _write_columns(batch)
        if serialize is not None:
            values = serialize(values)
        if encode_keys is not None:
            keys = encode_keys(list(keys))
        if partitions is None:
            _produce_rows(producer, options.topic, zip(values, keys, strict=False))
        else:
            for value, key, part in zip(values, keys, partitions, strict=False):
                client.produce_one(producer, options.topic, value, key, part)
        count += batch.num_rows
        producer.poll(0)
    return count


def _produce_rows(producer: Any, topic: str, rows: Iterator[tuple]) -> None:
    produce = producer.produce
    for value, key in rows:
        try:
            produce(topic, value, key)
        except BufferError:
            client.produce_one(producer, topic, value, key)


def _write_columns(batch: Any) -> tuple:
    """(values, keys, partitions) of a batch: keys None per row when absent, partitions None when absent."""
    names = {n.lower(): i for i, n in enumerate(batch.schema.names)}

    def column(name: str) -> Any:
        return batch.column(names[name]).to_pylist() if name in names else repeat(None, batch.num_rows)

    partitions = column("partition") if "partition" in names else None
    return column("value"), column("key"), partitions


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch task produces its rows and flushes before reporting success.

    commit and abort do nothing: records are visible as soon as they are delivered, so a
    failed and retried batch can leave duplicates (at-least-once), never gaps.
    """

    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> KafkaCommit:
        return KafkaCommit(produce_batches(self.options, iterator))

    def commit(self, messages: list, batchId: int) -> None:
        """Nothing to do: the records were delivered by the tasks."""

    def abort(self, messages: list, batchId: int) -> None:
        """Nothing can be undone: delivered records stay (at-least-once)."""


class KafkaBatchWriter(DataSourceArrowWriter):
    """df.write.format("dsflow_kafka").mode("append"): same delivery as the stream writer, or, with a
    `transaction.ledger`, each task's records in one transaction with the batch id (transactions.py)."""

    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> KafkaCommit:
        if self.options.ledger is None:
            return KafkaCommit(produce_batches(self.options, iterator))
        return KafkaCommit(produce_in_transaction(self.options, iterator))


def produce_in_transaction(options: KafkaOptions, batches: Iterator[Any]) -> int:
    """This task's records of batch `options.batch_id` in one transaction with the batch id (0 for a batch the
    ledger holds already)."""
    from pyspark import TaskContext

    from dsflow.adapters.kafka.transactions import write_task

    context = TaskContext.get()
    if context is None:
        raise DsflowError("DSF-E707", "dsflow_kafka: 'transaction.ledger' is for the write tasks of a micro-batch")
    with unchained(lambda err: DsflowError("DSF-E705", f"writing to topic '{options.topic}' failed: "
                                           f"{type(err).__name__}: {err}")):
        return write_task(options, batches, context.partitionId(), _produce_all)
