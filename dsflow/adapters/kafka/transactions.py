"""Exactly-once writes of a stream sink on Apache Kafka: each write task's records of a micro-batch in one Kafka
transaction that also records the batch id, so a batch written again after a crash is skipped.

    ledger        'dsflow.<query>.<checkpoint id>': one per query checkpoint (Spark's query id, kept in the
                  checkpoint); a new checkpoint (carried offsets, a replay) starts a new ledger, as its batch ids
                  start at 0 again
    task k        transactional.id and consumer group '<ledger>.<k>' (k: the write task's partition id)
    a batch       init_transactions (fences the task's earlier writer and aborts its open transaction), then the
                  group's committed offset of (sink topic, partition 0) is the next batch id to write: a batch
                  below it is skipped; otherwise begin, produce, send_offsets_to_transaction(batch id + 1),
                  commit. The records and the batch id are committed together or not at all.

Why per task: a micro-batch's tasks run in several Python workers, each with its own producer; a transaction
belongs to one producer. A replayed batch maps the same rows to the same tasks: Spark re-plans it from the
checkpoint's offset log (the same offset ranges, one read task per topic partition, datasource.py
`plan_ranges`), and the query is recomputed from the same state. Readers see the records with
`isolation.level=read_committed` (librdkafka's default, set explicitly in client.py); every transaction leaves a
control record in each partition it wrote, an offset without a record, which dsflow's readers of the topic count
as a gap (translate.py `source_specs`). Spark's async progress tracking is off for such a query: a batch must be
re-planned from the offset log exactly as it first ran.

A broker that does not isolate transactions (tansu, `dsflow dev up`'s default: read_committed consumers see
aborted records) would make this a lie: `check_isolates` refuses it (DSF-E870) before the query starts.

Error codes raised here:

    DSF-E870  the sink's broker does not isolate transactions
    DSF-E871  a transaction of a write task failed (its records are not visible; the micro-batch fails)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dsflow.adapters.kafka import client
from dsflow.errors import DsflowError

TIMEOUT = 60.0
"""Seconds each transactional request (init, send offsets, commit, abort) may take."""

TRANSACTION_TIMEOUT_MS = 60_000
"""transaction.timeout.ms: the broker aborts a writer's open transaction this long after it began (a writer killed
and not restarted on the same checkpoint); until then it holds back read_committed readers of its partitions."""

DESCRIBE_TRANSACTIONS = 65
"""The API key of DescribeTransactions (Apache Kafka 3.0 and later); tansu does not offer it."""

ProduceAll = Callable[[Any, Any, Iterator[Any]], int]


def ledger_name(query: str, checkpoint_id: str) -> str:
    """The ledger of a query's checkpoint: the prefix of its tasks' transactional ids and consumer groups."""
    return f"dsflow.{query}.{checkpoint_id}"


def check_isolates(bootstrap: str, config: Mapping[str, str], query: str, where: str | None) -> None:
    """DSF-E870 unless the broker isolates transactions. A plaintext broker is asked its API versions: Apache Kafka
    offers DescribeTransactions, tansu does not. A TLS or SASL store is taken to be Apache Kafka (tansu has neither)."""
    from dsflow.adapters.kafka.grants import api_versions
    from dsflow.adapters.kafka.security import secured

    if secured(dict(config)):
        return
    client.assert_reachable(bootstrap)
    if DESCRIBE_TRANSACTIONS in api_versions(bootstrap):
        return
    raise DsflowError(
        "DSF-E870", f"{where + ': ' if where else ''}'delivery.guarantee' = 'exactly-once' of '{query}' needs a broker "
        f"that isolates transactions, and the one at {bootstrap} does not offer DescribeTransactions (the embedded "
        "broker, tansu: read_committed consumers see aborted records there)",
        hint="run Apache Kafka (`dsflow dev up --broker kafka`), or remove the property: the stream sink is then "
             "at-least-once")


def write_task(options: Any, batches: Iterator[Any], task: int, produce_all: ProduceAll) -> int:
    """Write one task's records of micro-batch `options.batch_id` in one transaction with the batch id; 0 when the
    ledger says this task committed the batch already (a replay). Returns the records written."""
    from confluent_kafka import KafkaException

    name = f"{options.ledger}.{task}"
    try:
        return _write(options, batches, name, produce_all)
    except KafkaException as err:
        raise DsflowError("DSF-E871", f"the transaction '{name}' writing micro-batch {options.batch_id} to topic "
                          f"'{options.topic}' failed: {err}; none of its records are visible",
                          hint="the micro-batch fails and runs again when the query restarts; check the broker "
                               "(transaction.state.log.* settings) and the writer's ACLs (TransactionalId WRITE, "
                               "Group READ)") from None


def _write(options: Any, batches: Iterator[Any], name: str, produce_all: ProduceAll) -> int:
    errors = client.DeliveryErrors()
    config = options.config
    producer = client.new_producer({**config, "transactional.id": name,
                                    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}, errors)
    with client.consumer({**config, "group.id": name, "isolation.level": "read_committed"}) as ledger:
        producer.init_transactions(TIMEOUT)  # fences this task's earlier writer, aborting its open transaction
        if next_batch(ledger, options.topic) > options.batch_id:
            return 0
        producer.begin_transaction()
        try:
            count = produce_all(producer, options, batches)
            producer.send_offsets_to_transaction([_ledger_entry(options.topic, options.batch_id + 1)],
                                                 ledger.consumer_group_metadata(), TIMEOUT)
            producer.commit_transaction(TIMEOUT)
        except BaseException:
            _abort(producer)
            raise
        if errors:
            raise DsflowError("DSF-E705", f"{len(errors)} record(s) not delivered to topic '{options.topic}': "
                              f"{errors[0]}")
        return count


def next_batch(ledger: Any, topic: str) -> int:
    """The next batch id the ledger's group expects: its committed offset of (topic, 0), 0 when none."""
    [entry] = ledger.committed([_ledger_entry(topic, 0)], timeout=TIMEOUT)
    if entry.error is not None:
        raise DsflowError("DSF-E871", f"reading the ledger of topic '{topic}' failed: {entry.error}")
    return max(entry.offset, 0)


def _ledger_entry(topic: str, offset: int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0, offset)


def _abort(producer: Any) -> None:
    """Abort the open transaction, best effort: a fenced or failed producer's transaction is aborted by the broker
    (by the next init_transactions of its id, or after transaction.timeout.ms)."""
    from confluent_kafka import KafkaException

    try:
        producer.abort_transaction(TIMEOUT)
    except KafkaException:
        client.LOG.warning("aborting a transaction failed; the broker aborts it", exc_info=True)
