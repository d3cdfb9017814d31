"""Exactly-once stream sinks on Apache Kafka (adapters/kafka/transactions.py), checked on the data with
read_committed reads:

- a micro-batch written again (a replay after a crash) is skipped by every task; the at-least-once writer, given
  the same batch twice, writes it twice (what the ledger prevents);
- a killed writer's open transaction is aborted by the next writer of its task (init_transactions fences it): its
  records are never visible, and readers are not held back;
- dsflow's reader counts the transaction markers as gaps ('topic.gaps' = 'count', which such a stream gets);
- tansu, which does not isolate transactions, is refused (DSF-E870); Apache Kafka is not.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from types import SimpleNamespace

import pytest

from dsflow.adapters.kafka import client
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.spark import batch_writer, transactional_writer
from dsflow.adapters.kafka.transactions import check_isolates, ledger_name
from dsflow.adapters.spark.spec import SinkSpec
from dsflow.errors import DsflowError
from support.brokers import kafka_only

pytestmark = [pytest.mark.integration, kafka_only]


def _sink(broker: str, partitions: int = 2) -> SimpleNamespace:
    topic = f"txn_{uuid.uuid4().hex[:8]}"
    ensure_topic(broker, TopicSpec(topic, partitions, 1, {}))
    sink = SinkSpec(topic=topic, client_config={"bootstrap.servers": broker}, columns=["id"], exactly_once=True)
    return SimpleNamespace(name="analytics.public.copied", sink=sink)


def _rows(spark, first: int, count: int, tasks: int):
    return spark.range(first, first + count, numPartitions=tasks).selectExpr(
        "to_json(named_struct('id', id)) AS value")


def _ids(broker: str, topic: str) -> Counter:
    return Counter(json.loads(r["value"])["id"] for r in client.read_to_end(broker, topic, allow_gaps=True))


def test_a_batch_written_again_is_skipped_and_the_next_one_written(spark, broker):
    spec = _sink(broker)
    write = transactional_writer(spec, lambda: "checkpoint-1")
    write(_rows(spark, 0, 100, 2), 0)
    write(_rows(spark, 0, 100, 2), 0)  # the replay of batch 0 after a crash
    write(_rows(spark, 100, 50, 2), 1)
    write(_rows(spark, 0, 100, 2), 0)  # an older batch is skipped too
    again = transactional_writer(spec, lambda: "checkpoint-2")  # a new checkpoint: its own ledger, from batch 0
    again(_rows(spark, 150, 10, 2), 0)
    assert _ids(broker, spec.sink.topic) == Counter(range(160))

    plain = _sink(broker)  # the control: at-least-once writes a batch written again twice
    batch_writer(plain)(_rows(spark, 0, 100, 2), 0)
    batch_writer(plain)(_rows(spark, 0, 100, 2), 0)
    assert set(_ids(broker, plain.sink.topic).values()) == {2}


def test_a_killed_writers_open_transaction_is_aborted_by_the_next_writer(spark, broker):
    spec = _sink(broker, partitions=1)
    errors = client.DeliveryErrors()
    zombie = client.new_producer({"bootstrap.servers": broker,
                                  "transactional.id": f"{ledger_name(spec.name, 'c')}.0"}, errors)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(1000, 1005):
        zombie.produce(spec.sink.topic, json.dumps({"id": i}))
    assert zombie.flush(30) == 0 and not errors  # in the log, never committed: a driver killed here
    transactional_writer(spec, lambda: "c")(_rows(spark, 0, 20, 1), 0)
    assert _ids(broker, spec.sink.topic) == Counter(range(20))

    read = (spark.read.format("dsflow_kafka").option("bootstrap.servers", broker)
            .option("topic", spec.sink.topic).option("gaps", "count").load())
    assert sorted(json.loads(r.value)["id"] for r in read.collect()) == list(range(20))


def test_only_a_broker_that_isolates_transactions_is_taken(broker, tansu_broker):
    check_isolates(broker, {"bootstrap.servers": broker}, "analytics.public.copied", None)
    with pytest.raises(DsflowError) as raised:
        check_isolates(tansu_broker.bootstrap, {}, "analytics.public.copied", "sql/q.sql:3")
    assert raised.value.code == "DSF-E870"
    assert raised.value.message.startswith("sql/q.sql:3: 'delivery.guarantee' = 'exactly-once' of "
                                           "'analytics.public.copied' needs a broker that isolates transactions")
    assert "dsflow dev up --broker kafka" in (raised.value.hint or "")
