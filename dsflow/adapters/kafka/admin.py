"""Kafka topics through the AdminClient: describe, ensure (create), delete, list.

Every call checks first that the broker accepts connections (a dead broker is DSF-E702
at once, not after librdkafka's retries) and waits at most `TIMEOUT` seconds per request; a client of a store
with TLS or SASL first asks for metadata, which ends at its first TLS or SASL failure (client.py's `connected`).

Topic configs are written on create but not read back: tansu answers DescribeConfigs
with nothing, so `describe_topic` reports `configs={}`. A deleted topic is waited for until the broker stops
listing it (Apache Kafka deletes asynchronously).

Error codes: DSF-E701 the topic exists with another partition count; DSF-E702 the broker
cannot be reached; DSF-E703 the broker refused a request.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsflow.adapters.kafka.client import (LOG, assert_reachable, auth_watch, client_config, connected, error_cb,
                                          request_failed)
from dsflow.adapters.kafka.msk import librdkafka_config
from dsflow.errors import DsflowError

TIMEOUT = 10.0
"""Seconds to wait for one admin request."""
DELETE_WAIT = 30.0
"""Seconds a deleted topic may stay listed before delete_topic returns anyway."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic as dsflow declares or finds it."""

    name: str
    partitions: int = 1
    replicas: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    """Topic-level configs such as cleanup.policy; empty when read back from a broker."""


def describe_topic(bootstrap: str, name: str, extra: Mapping[str, str] | None = None) -> TopicSpec | None:
    """The topic's partition and replica counts from metadata, or None if it does not exist."""
    topic = _metadata(_admin(bootstrap, extra), bootstrap).topics.get(name)
    if topic is None or topic.error is not None or not topic.partitions:
        return None
    first = topic.partitions[min(topic.partitions)]
    return TopicSpec(name=name, partitions=len(topic.partitions), replicas=max(1, len(first.replicas)))


def ensure_topic(bootstrap: str, spec: TopicSpec, extra: Mapping[str, str] | None = None) -> bool:
    """Create the topic; True if this call created it, False if it already existed alike.

    An existing topic with another partition count is DSF-E701: Kafka cannot shrink a
    topic and growing one reshuffles keys, so dsflow does neither silently.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap, extra)
    new = NewTopic(spec.name, spec.partitions, spec.replicas, config=dict(spec.configs))
    future = admin.create_topics([new], request_timeout=TIMEOUT)[spec.name]
    try:
        future.result(timeout=TIMEOUT + 5)
        return True
    except KafkaException as exc:
        if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise request_failed(bootstrap, f"creating topic '{spec.name}'", exc) from exc
    found = describe_topic(bootstrap, spec.name, extra)
    if found is not None and found.partitions != spec.partitions:
        raise _partition_mismatch(spec, found)
    return False


def _partition_mismatch(spec: TopicSpec, found: TopicSpec) -> DsflowError:
    return DsflowError(
        "DSF-E701",
        f"Kafka topic '{spec.name}' exists with {found.partitions} partition(s), declared with {spec.partitions}",
        hint=f"declare partitions: {found.partitions}, or delete the topic (its data is lost) so it can be recreated",
    )


def add_partitions(bootstrap: str, name: str, total: int, extra: Mapping[str, str] | None = None,
                   validate_only: bool = False) -> bool:
    """Raise the topic's partition count to `total` in place (Kafka CreatePartitions); with `validate_only` the
    broker only checks it could. False when the broker has no CreatePartitions (tansu 0.6: UNSUPPORTED_FEATURE)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    admin = _admin(bootstrap, extra)
    future = admin.create_partitions([NewPartitions(name, total)], request_timeout=TIMEOUT,
                                     validate_only=validate_only)[name]
    try:
        future.result(timeout=TIMEOUT + 5)
        return True
    except KafkaException as exc:
        if exc.args[0].name() in ("_UNSUPPORTED_FEATURE", "UNSUPPORTED_VERSION", "INVALID_REQUEST"):
            return False
        raise request_failed(bootstrap, f"adding partitions to topic '{name}' ({total} in all)", exc) from exc


def delete_topic(bootstrap: str, name: str, extra: Mapping[str, str] | None = None) -> bool:
    """Delete the topic; True if it existed. Returns once the broker no longer lists it: Apache Kafka deletes
    asynchronously, and creating the name again before then fails ("marked for deletion")."""
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap, extra)  # keep a reference: a collected client cancels its futures
    future = admin.delete_topics([name], request_timeout=TIMEOUT)[name]
    try:
        future.result(timeout=TIMEOUT + 5)
    except KafkaException as exc:
        if exc.args[0].name() == "UNKNOWN_TOPIC_OR_PART":
            return False
        raise request_failed(bootstrap, f"deleting topic '{name}'", exc) from exc
    _wait_until_gone(admin, bootstrap, name)
    return True


def _wait_until_gone(admin: Any, bootstrap: str, name: str) -> None:
    deadline = time.monotonic() + DELETE_WAIT
    while name in _metadata(admin, bootstrap).topics and time.monotonic() < deadline:
        time.sleep(0.1)


def list_topics(bootstrap: str, extra: Mapping[str, str] | None = None) -> list[str]:
    """Sorted names of the broker's topics, without internal ones (starting with "__")."""
    metadata = _metadata(_admin(bootstrap, extra), bootstrap)
    return sorted(name for name in metadata.topics if not name.startswith("__"))


def partition_counts(bootstrap: str, extra: Mapping[str, str] | None = None) -> dict[str, int]:
    """Every topic's partition count, from one metadata request."""
    metadata = _metadata(_admin(bootstrap, extra), bootstrap)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if not name.startswith("__")}


def _admin(bootstrap: str, extra: Mapping[str, str] | None) -> Any:
    from confluent_kafka.admin import AdminClient

    assert_reachable(bootstrap)
    watch = auth_watch(extra or {})
    config: dict[str, Any] = {**librdkafka_config(client_config(bootstrap, extra)), "logger": LOG,
                              **error_cb(watch)}
    return connected(AdminClient(config), bootstrap, watch)


def _metadata(admin: Any, bootstrap: str) -> Any:
    """All topics' metadata. Never names a topic: tansu auto-creates topics named in a request."""
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(timeout=TIMEOUT)
    except KafkaException as exc:
        raise request_failed(bootstrap, "listing topics", exc) from exc


def topic_ids(bootstrap: str, topics: list[str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The broker's id of each named topic that exists (a topic deleted and created again under the same name gets a
    new id: offsets recorded on the old one mean nothing on the new). Topics the broker does not list, or a broker
    that gives no ids, are left out. Only existing topics are described: naming a missing one creates it on tansu."""
    from confluent_kafka import KafkaException, TopicCollection

    admin = _admin(bootstrap, extra)
    present = [t for t in dict.fromkeys(topics) if t in _metadata(admin, bootstrap).topics]
    if not present:
        return {}
    try:
        futures = admin.describe_topics(TopicCollection(present), request_timeout=TIMEOUT)
        described = {name: future.result() for name, future in futures.items()}
    except KafkaException as exc:
        LOG.info("topic ids not available from %s: %s", bootstrap, exc)
        return {}
    return {name: str(d.topic_id) for name, d in described.items() if d.topic_id is not None}


OWN_GROUPS = ("dsflow.", "dsflow-")
"""Consumer groups of dsflow's own clients: the ledgers of exactly-once writers (transactions.py, `dsflow.<query>.`),
which commit an offset on the topic they write, and readers that never commit (`dsflow-reader`)."""


def consumer_groups(bootstrap: str, topics: list[str], extra: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """topic -> the sorted ids of the consumer groups registered on it: a committed offset on one of its partitions,
    or a member assigned one. dsflow's own groups (OWN_GROUPS) are left out; topics no group reads are absent."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    admin = _admin(bootstrap, extra)
    try:
        listed = admin.list_consumer_groups(request_timeout=TIMEOUT).result()
    except KafkaException as exc:
        raise request_failed(bootstrap, "listing consumer groups", exc) from exc
    groups = sorted(g.group_id for g in listed.valid if not g.group_id.startswith(OWN_GROUPS))
    wanted = set(topics)
    found: dict[str, set[str]] = {t: set() for t in topics}
    if not groups:
        return {}
    for group, future in admin.describe_consumer_groups(groups, request_timeout=TIMEOUT).items():
        try:
            members = future.result().members
        except KafkaException:
            continue
        for member in members:
            for part in (member.assignment.topic_partitions if member.assignment else []):
                if part.topic in wanted:
                    found[part.topic].add(group)
    for group in groups:  # one group per OffsetFetch request (the client takes one at a time)
        for future in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                        request_timeout=TIMEOUT).values():
            try:
                parts = future.result().topic_partitions or []
            except KafkaException:
                continue
            for part in parts:
                if part.topic in wanted and part.offset >= 0:
                    found[part.topic].add(group)
    return {topic: sorted(ids) for topic, ids in found.items() if ids}
