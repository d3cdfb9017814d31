"""Helpers for format and dead-letter tests: a project whose Kafka store has the test schema registry,
producing with confluent-kafka's own serializers, and reading sinks and dead-letter topics back."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from conftest import REGISTRY_AUTH
from dsflow.adapters.kafka import client
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.core.model import Project
from dsflow.load.project import load_project
from support.projects import make_project
from support.streaming import CONFIG

STORES = """\
schema_registries:
  - name: sr
    url: "{{ var('registry') }}"
    username: %s
    password: "{{ env_var('SR_PASSWORD') }}"
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
    schema_registry: sr
""" % REGISTRY_AUTH[0]

ENVIRON = {"SR_PASSWORD": REGISTRY_AUTH[1]}


def registry_conf(url: str) -> dict[str, str]:
    return {"url": url, "basic.auth.user.info": f"{REGISTRY_AUTH[0]}:{REGISTRY_AUTH[1]}"}


def new_prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}_"


def write_project(tmp_path: Path, sql: str, prefix: str) -> Path:
    return make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "stores/kafka.yml": STORES,
                                   "sql/all.sql": sql})


def registry_project(tmp_path: Path, broker: str, registry: str, sql: str, prefix: str | None = None) -> Project:
    """Load the project (topics created) with the registry store."""
    root = write_project(tmp_path, sql, prefix or new_prefix())
    project = load_project(root, variables={"bootstrap": broker, "registry": registry}, environ=ENVIRON)
    for relation in project.relations:
        ensure_topic(broker, TopicSpec(relation.topic, relation.partitions, 1, {}))
    return project


def produce_raw(broker: str, topic: str, values: list[bytes | None], keys: list[str | bytes] | None = None) -> None:
    errors = client.DeliveryErrors()
    producer = client.new_producer(client.client_config(broker), errors)
    for i, value in enumerate(values):
        key = keys[i] if keys else str(i)
        producer.produce(topic, value, key.encode() if isinstance(key, str) else key)
    client.flush_or_raise(producer, topic, len(values), errors)


def avro_values(registry: str, topic: str, schema: str, records: list[dict]) -> list[bytes]:
    """Records serialized by confluent-kafka's AvroSerializer (registering the schema under <topic>-value)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient(registry_conf(registry)), schema)
    context = SerializationContext(topic, MessageField.VALUE)
    return [serializer(r, context) for r in records]


def raw_records(broker: str, topic: str) -> list[Any]:
    """Every message of the topic (confluent_kafka Message objects), in partition/offset order."""
    return client.read_to_end(broker, topic, convert=lambda message: message)


def avro_decode(registry: str, topic: str, messages: list[Any]) -> list[dict]:
    """Values decoded by confluent-kafka's AvroDeserializer (the writer schema from the registry by id)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = AvroDeserializer(SchemaRegistryClient(registry_conf(registry)))
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(m.value(), context) for m in messages]
