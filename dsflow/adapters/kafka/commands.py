"""Kafka's topic commands (the `commands` facet, core/stores.py): `dsflow topic ...`, the server's tail, the dead
letters of `dsflow status`, the dev broker and the data generator's producer.

A target is dsflow/engine/topics.py's `Target` (store_type, name, bootstrap, settings, relation, store, registry).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

MESSAGE_BYTES = 1_000_000
"""librdkafka's default `message.max.bytes`, which a store's properties may raise."""


class KafkaCommands:
    size_options = ("partitions", "replicas")
    """The sizes `dsflow topic create` takes for a topic of this kind."""
    size_hint = "use --partitions N --replicas N"

    def errors(self, store: str, settings: Any) -> AbstractContextManager:
        """A client error of the block names the store (DSF-E255 when a secured store's TLS or SASL failed)."""
        from contextlib import nullcontext

        from dsflow.adapters.kafka.security import for_store

        return for_store(store, settings) if store else nullcontext()

    def list_names(self, store: Any) -> list[str]:
        from dsflow.adapters.kafka.admin import list_topics

        return list_topics(store.bootstrap_servers, dict(store.properties))

    def describe(self, target: Any) -> dict[str, Any] | None:
        from dsflow.adapters.kafka.admin import describe_topic

        spec = describe_topic(target.bootstrap, target.name, target.settings)
        return None if spec is None else {"store": target.store, "type": target.store_type, "topic": spec.name,
                                          "partitions": spec.partitions, "replicas": spec.replicas}

    def create(self, target: Any, sizes: dict[str, int | None]) -> bool:
        from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

        configs = dict(target.relation.topic_configs) if target.relation else {}
        spec = TopicSpec(target.name, sizes.get("partitions") or _size(target, "partitions"),
                         sizes.get("replicas") or _size(target, "replicas"), configs)
        return ensure_topic(target.bootstrap, spec, target.settings)

    def delete(self, target: Any) -> bool:
        from dsflow.adapters.kafka.admin import delete_topic

        return delete_topic(target.bootstrap, target.name, target.settings)

    def record_limit(self, target: Any) -> tuple[int, str]:
        """The largest record in bytes, and how to raise it (the hint of DSF-E715)."""
        limit = str(target.settings.get("message.max.bytes", MESSAGE_BYTES))
        return (int(limit) if limit.isdigit() else MESSAGE_BYTES,
                "split the record; for Kafka, a store property message.max.bytes (and the topic's "
                "max.message.bytes) can raise the limit")

    def produce(self, target: Any, lines: list[str], key_field: str | None) -> int:
        """Produce checked JSON lines; DSF-E705 when the client refuses a record."""
        from confluent_kafka import KafkaException

        from dsflow.adapters.kafka.client import produce_json_lines
        from dsflow.errors import DsflowError

        try:
            return produce_json_lines(target.bootstrap, target.name, lines, key_field=key_field,
                                      extra=target.settings)
        except KafkaException as err:  # the client refused a record (a size the broker's or topic's limit is below)
            raise DsflowError("DSF-E705", f"records were not delivered to topic '{target.name}': {err.args[0]}",
                              hint="check the record sizes against the topic's max.message.bytes") from err

    def read(self, target: Any, from_beginning: bool, limit: int | None, timeout: float, raw: bool,
             stop: Any = None, on_start: Any = None) -> tuple[Iterator[dict[str, Any]], bool]:
        """The topic's records, and False: they are decoded by the caller (a registry relation's as bytes)."""
        from dsflow.adapters.kafka.client import print_records

        binary = not raw and target.relation is not None and _uses_registry(target.relation)
        found = print_records(target.bootstrap, target.name, from_beginning=from_beginning, limit=limit,
                              timeout=timeout, extra=target.settings, convert=_binary_record if binary else None,
                              stop=stop, on_start=on_start)
        return found, False

    def dead_letter_topic(self, project: Any, query: Any) -> str | None:
        return project.dlq_topic(query)

    def dead_letter_count(self, store: Any, topic: str) -> int | None:
        from dsflow.adapters.kafka.deadletters import dead_letter_count

        return dead_letter_count(store.client_config(), topic)

    def dev_broker(self) -> Any:
        """The embedded development broker (`dsflow dev up|down|status`): start, stop and read."""
        from dsflow.adapters.kafka import devbroker

        return devbroker

    def dev_registry(self) -> Any:
        """The development schema registry (`dsflow dev up --registry`): start, stop and read."""
        from dsflow.adapters.kafka import devregistry

        return devregistry

    def producer(self, bootstrap: str, topic: str, config: Mapping[str, str] | None,
                 flush_interval: float) -> JsonProducer:
        """A producer of JSON records to `topic` for a data generator (dsflow/datagen/__init__.py)."""
        return JsonProducer(bootstrap, topic, config, flush_interval)


def _size(target: Any, attribute: str) -> int:
    return getattr(target.relation, attribute) if target.relation is not None else 1


def _uses_registry(relation: Any) -> bool:
    from dsflow.core.formats import REGISTRY_FORMATS

    return relation.value_format in REGISTRY_FORMATS or relation.key_format in REGISTRY_FORMATS


def _binary_record(message: Any) -> dict[str, Any]:
    """A consumed message as record_dict makes it, but key and value as bytes (decoded by the caller)."""
    from dsflow.adapters.kafka.client import record_dict

    return {**record_dict(message), "key": message.key(), "value": message.value()}


class JsonProducer:
    """A producer that remembers the first delivery error and raises it as DSF-E711."""

    def __init__(self, bootstrap: str, topic: str, config: Mapping[str, str] | None, flush_interval: float):
        from confluent_kafka import Producer

        from dsflow.adapters.kafka.client import LOG, auth_watch, connected, error_cb
        from dsflow.adapters.kafka.msk import librdkafka_config

        watch = auth_watch(config or {})
        settings = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                    "message.timeout.ms": 60_000, **librdkafka_config(config or {}), "logger": LOG,  # LOG scrubs
                    **error_cb(watch)}
        self.producer = connected(Producer(settings), bootstrap, watch)  # TLS/SASL failures at once
        self.topic = topic
        self.error: str | None = None
        self.flush_interval = flush_interval
        self.last_flush = time.monotonic()

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None and self.error is None:
            self.error = str(err)

    def send(self, key: str | None, record: dict) -> None:
        value = json.dumps(record, separators=(",", ":")).encode()
        while True:
            try:
                self.producer.produce(self.topic, value, key.encode() if key is not None else None,
                                      on_delivery=self._on_delivery)
                break
            except BufferError:  # local queue full: wait for deliveries
                self.poll(0.1)
        self.poll(0)

    def poll(self, timeout: float = 0) -> None:
        self.producer.poll(timeout)
        self.check()

    def maybe_flush(self, timeout: float) -> None:
        if time.monotonic() - self.last_flush >= self.flush_interval:
            self.flush(timeout)

    def flush(self, timeout: float) -> None:
        from dsflow.errors import DsflowError

        left = self.producer.flush(timeout)
        self.last_flush = time.monotonic()
        self.check()
        if left:
            raise DsflowError("DSF-E711", f"{left} record(s) to topic {self.topic!r} not delivered in {timeout:.0f}s",
                              hint="check that the broker is up and reachable")

    def check(self) -> None:
        from dsflow.errors import DsflowError

        if self.error is not None:
            raise DsflowError("DSF-E711", f"delivery to topic {self.topic!r} failed: {self.error}",
                              hint="check that the broker is up and the topic exists")


COMMANDS = KafkaCommands()
