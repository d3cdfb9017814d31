"""tansu, the dev broker, can report a partition's low watermark past records it still holds.

Seen after several producers wrote a new partition at once: low watermark 1 or 2 where offsets 0 and 1 read back
(about one racing topic in fifteen on this machine). A reader that started at the reported watermark skipped those
records silently: a query's first run from 'earliest', `dsflow topic print --from-beginning`, the records a plan says
it destroys, and the tests' own read-back (a flaky test_sql_aggregations: the first window results written to one
partition of the sink were never read). `client.start_offsets` checks a watermark above 0 by reading from offset 0.
These tests make such a topic on the real broker, then check every reader against the records produced.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from dsflow.adapters.kafka import client
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

pytestmark = pytest.mark.integration

PARTITIONS, PRODUCERS, ROUNDS = 8, 8, 3
ATTEMPTS = 400


def _race(broker: str, topic: str, producers: list) -> list[str]:
    """Every producer writes one record to every partition of a new topic, at once, ROUNDS times; the values."""
    start = threading.Barrier(len(producers))
    values: list[list[str]] = [[] for _ in producers]

    def work(k: int) -> None:
        producer, errors = producers[k]
        start.wait()
        for round_ in range(ROUNDS):
            for partition in range(PARTITIONS):
                value = json.dumps({"producer": k, "round": round_, "partition": partition})
                client.produce_one(producer, topic, value, None, partition)
                values[k].append(value)
            client.flush_or_raise(producer, topic, PARTITIONS, errors)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(producers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [v for per_producer in values for v in per_producer]


@pytest.fixture(scope="module")
def misreported(broker: str) -> tuple[str, dict[int, int], list[str]]:
    """A topic with a partition whose reported low watermark is above 0 while offset 0 reads back; its records."""
    producers = []
    for _ in range(PRODUCERS):
        errors = client.DeliveryErrors()
        producers.append((client.new_producer({**client.client_config(broker), "linger.ms": 0}, errors), errors))
    for _ in range(ATTEMPTS):
        topic = f"lowwm-{uuid.uuid4().hex[:8]}"
        ensure_topic(broker, TopicSpec(topic, partitions=PARTITIONS))
        for producer, _ in producers:
            producer.list_topics(topic, timeout=10)
        values = _race(broker, topic, producers)
        with client.consumer(client.client_config(broker)) as c:
            lows = {p: low for p, (low, _) in client.watermarks(c, topic, range(PARTITIONS)).items() if low > 0}
        if lows:
            return topic, lows, values
    pytest.fail(f"tansu reported every low watermark right in {ATTEMPTS} racing topics: if it no longer misreports, "
                "client.start_offsets' check (and this test) can go")


def test_start_offsets_find_the_records_before_a_misreported_low_watermark(broker, misreported) -> None:
    topic, lows, values = misreported
    with client.consumer(client.client_config(broker)) as c:
        assert client.start_offsets(c, topic, range(PARTITIONS)) == dict.fromkeys(range(PARTITIONS), 0), lows
        assert client.start_offsets(c, topic, range(PARTITIONS)) == dict.fromkeys(range(PARTITIONS), 0)  # reusable


def test_reading_the_topic_from_the_beginning_gets_every_record(broker, misreported) -> None:
    topic, _, values = misreported
    read = [r["value"] for r in client.read_to_end(broker, topic)]
    assert sorted(read) == sorted(values)
    printed = [r["value"] for r in client.print_records(broker, topic, limit=len(values), timeout=10)]
    assert sorted(printed) == sorted(values)


def test_a_query_first_run_from_earliest_reads_every_record(broker, misreported, spark, tmp_path) -> None:
    """The Spark source's initial offsets (earliest): one availableNow run into a memory table."""
    topic, _, values = misreported
    name = f"lowwm_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("dsflow_kafka").option("bootstrap.servers", broker).option("topic", topic)
             .load().select("value").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the availableNow run did not finish"
    assert query.exception() is None
    read = [row.value for row in spark.sql(f"SELECT value FROM {name}").collect()]
    assert sorted(read) == sorted(values)
