"""The dead-letter topic of a Kafka source: records that do not decode (formats/decoding.py), sent with their key
and value as they were and headers naming the error and the source topic, partition and offset. Nothing is
dropped: a record is in the result or in the dead-letter topic (at-least-once: a retried task sends its dead
letters again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from dsflow.adapters.kafka import client
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.errors import DsflowError
from dsflow.formats.arrow import Bad
from dsflow.formats.decoding import Decoding

HEADER_ERROR, HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET, HEADER_QUERY = (
    "dsflow.error", "dsflow.source.topic", "dsflow.source.partition", "dsflow.source.offset", "dsflow.query")


class DeadLetters:
    """Sends records that did not decode to the dead-letter topic; `close()` flushes (DSF-E772 on failure)."""

    def __init__(self, config: Mapping[str, Any], decoding: Decoding) -> None:
        self.config = dict(config)
        self.decoding = decoding
        self.count = 0
        self._producer: Any = None
        self._errors: Any = None

    @property
    def _topic(self) -> str:
        return cast(str, self.decoding.dlq_topic)  # records are set aside only when the query has one

    def send(self, messages: list, bad: Bad) -> None:
        if not bad:
            return
        if self._producer is None:
            self._open()
        for index, error in bad:
            m = messages[index]
            headers = [(HEADER_ERROR, error[:2000]), (HEADER_TOPIC, m.topic()), (HEADER_PARTITION, str(m.partition())),
                       (HEADER_OFFSET, str(m.offset())), (HEADER_QUERY, self.decoding.query)]
            while True:
                try:
                    self._producer.produce(self.decoding.dlq_topic, m.value(), m.key(), headers=headers)
                    break
                except BufferError:
                    self._producer.poll(0.1)
            self.count += 1
        self._producer.poll(0)

    def _open(self) -> None:
        bootstrap = self.config.get("bootstrap.servers", "")
        extra = {k: str(v) for k, v in self.config.items() if k != "bootstrap.servers"}
        ensure_topic(bootstrap, TopicSpec(self._topic, 1), extra)
        self._errors = client.DeliveryErrors()
        self._producer = client.new_producer(self.config, self._errors)

    def close(self) -> None:
        if self._producer is None:
            return
        try:
            client.flush_or_raise(self._producer, self._topic, self.count, self._errors)
        except DsflowError as err:
            raise DsflowError("DSF-E772", f"dead letters of query {self.decoding.query} not delivered: "
                              f"{err.message}", hint="check the dead-letter topic and the broker") from err


def send_records(config: Mapping[str, Any], topic: str, records: list[tuple[bytes | None, bytes, list]]) -> None:
    """Send (key, value, headers) records to the dead-letter topic (created with one partition if missing) and
    wait until they are delivered (DSF-E772 if not): rows failing a query's DEAD LETTER expectations."""
    if not records:
        return
    config = dict(config)
    extra = {k: str(v) for k, v in config.items() if k != "bootstrap.servers"}
    ensure_topic(config.get("bootstrap.servers", ""), TopicSpec(topic, 1), extra)
    errors = client.DeliveryErrors()
    producer = client.new_producer(config, errors)
    for key, value, headers in records:
        client.produce_one(producer, topic, value, key, headers=headers)
    try:
        client.flush_or_raise(producer, topic, len(records), errors)
    except DsflowError as err:
        raise DsflowError("DSF-E772", f"dead letters not delivered to '{topic}': {err.message}",
                          hint="check the dead-letter topic and the broker") from err


def dead_letter_count(config: Mapping[str, Any], topic: str) -> int | None:
    """Records in the dead-letter topic (end minus start offsets); None if it does not exist."""
    with client.consumer(config) as c:
        try:
            parts = client.topic_partitions(c, topic, timeout=5.0)
        except DsflowError:
            return None
        if not parts:
            return None
        starts = client.start_offsets(c, topic, parts, first_wait=0.5)  # a status call: waits as briefly as the ends
        ends = client.end_offsets(c, topic, parts, first_wait=0.5)
        return sum(max(0, ends[p] - starts[p]) for p in parts)
