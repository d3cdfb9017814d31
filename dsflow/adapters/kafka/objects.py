"""Kafka's physical-object operations (adapters/objects.py): a topic's id, and the records it holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KafkaObjects:
    def identities(self, store: Any, names: list[str]) -> dict[str, str]:
        from dsflow.adapters.kafka.admin import topic_ids

        return topic_ids(store.bootstrap_servers, names, store.properties)

    def held_records(self, store: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                     since: str | None = None) -> int | None:
        from dsflow.adapters.kafka import client

        bootstrap = outputs.get("bootstrap") or store.bootstrap_servers
        topic = outputs.get("topic") or data.get("topic")
        if not bootstrap or not topic:
            return None
        client.assert_reachable(bootstrap)
        return held_records(client.client_config(bootstrap, store.properties), topic, since)


    def can_grow(self, store: Any, name: str, total: int) -> bool:
        from dsflow.adapters.kafka.admin import add_partitions

        return add_partitions(store.bootstrap_servers, name, total, store.properties, validate_only=True)

    def grow(self, store: Any, name: str, total: int) -> None:
        from dsflow.adapters.kafka.admin import add_partitions, describe_topic
        from dsflow.errors import DsflowError

        found = describe_topic(store.bootstrap_servers, name, store.properties)
        if found is not None and found.partitions >= total:  # an interrupted apply grew it already
            return
        if not add_partitions(store.bootstrap_servers, name, total, store.properties):
            raise DsflowError("DSF-E826", f"the broker of store '{store.name}' cannot add partitions to topic "
                              f"'{name}' (no CreatePartitions)", hint="plan again: the plan then replaces the topic, "
                              "and says what that destroys")


def held_records(config: dict, topic: str, since: str | None = None) -> int:
    """Records of `topic` from the first held (or those at epoch ms `since`) to the true end offsets."""
    from confluent_kafka import TopicPartition

    from dsflow.adapters.kafka import client

    with client.consumer(config) as consumer:
        parts = client.topic_partitions(consumer, topic)
        ends = client.end_offsets(consumer, topic, parts)
        if since and since.isdigit():
            found = consumer.offsets_for_times([TopicPartition(topic, p, int(since)) for p in parts],
                                               timeout=client.REQUEST_TIMEOUT)
            starts = {tp.partition: (tp.offset if tp.offset >= 0 else ends[tp.partition]) for tp in found}
        else:
            starts = client.start_offsets(consumer, topic, parts)
    return sum(max(0, ends[p] - starts.get(p, 0)) for p in parts)


OBJECTS = KafkaObjects()
