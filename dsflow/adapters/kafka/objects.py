"""Kafka's physical-object operations (adapters/objects.py): a topic's id, the records it holds, apply's topic
executor, and refresh's look at the topics of a broker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KafkaObjects:
    def __init__(self) -> None:
        from dsflow.adapters.kafka.grants import GrantExecutor

        self.grants = GrantExecutor()
        """Grants on its streams and changelogs, pushed down as Kafka ACLs where the store maps roles to principals
        (adapters/kafka/acls.py); it claims only those."""

    def identities(self, store: Any, names: list[str]) -> dict[str, str]:
        from dsflow.adapters.kafka.admin import topic_ids

        return topic_ids(store.bootstrap_servers, names, store.properties)

    def sizes(self, store: Any, names: list[str]) -> dict[str, int]:
        """The partitions of the named topics that exist, from one metadata request."""
        from dsflow.adapters.kafka.admin import partition_counts
        from dsflow.adapters.kafka.security import for_store

        with for_store(store.name, store.properties):
            counts = partition_counts(store.bootstrap_servers, store.properties)
        return {name: counts[name] for name in names if name in counts}

    def held_records(self, store: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                     since: str | None = None) -> int | None:
        from dsflow.adapters.kafka import client

        bootstrap = outputs.get("bootstrap") or store.bootstrap_servers
        topic = outputs.get("topic") or data.get("topic")
        if not bootstrap or not topic:
            return None
        client.assert_reachable(bootstrap)
        return held_records(client.client_config(bootstrap, store.properties), topic, since)

    def consumer_groups(self, store: Any, names: list[str]) -> dict[str, list[str]]:
        """topic -> the consumer groups registered on it (committed offsets or assigned members), dsflow's own left
        out: the readers outside the project that a change of its relation reaches."""
        from dsflow.adapters.kafka.admin import consumer_groups
        from dsflow.adapters.kafka.security import for_store

        with for_store(store.name, store.properties):
            return consumer_groups(store.bootstrap_servers, names, store.properties)

    def positions(self, store: Any, names: list[str]) -> dict[str, dict[str, tuple[int, int]]]:
        """topic -> partition -> (first offset held, true end offset), for each named topic that exists."""
        from dsflow.adapters.kafka import client

        client.assert_reachable(store.bootstrap_servers)
        found = {}
        with client.consumer(client.client_config(store.bootstrap_servers, store.properties)) as consumer:
            listed = client.partitions_of(consumer, names)
            for name in names:
                parts = listed.get(name) or client.topic_partitions(consumer, name)  # DSF-E708 for a missing one
                starts, ends = client.start_offsets(consumer, name, parts), client.end_offsets(consumer, name, parts)
                found[name] = {str(p): (starts.get(p, 0), ends[p]) for p in parts}
        return found

    def executor(self, data: Mapping[str, Any], outputs: Mapping[str, Any], store_type: str | None) -> Any:
        return executor(data, outputs, store_type)

    def observe(self, project: Any, deployed: Any, cache: dict[str, Any]) -> Any:
        return observe(project, deployed, cache)

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


class TopicExecutor:
    """A relation's Kafka topic: created with its partitions and configs, deleted only if dsflow created it."""

    def create(self, ctx: Any, change: Any) -> dict[str, Any]:
        from dsflow.adapters.kafka.admin import TopicSpec, describe_topic, ensure_topic
        from dsflow.adapters.kafka.security import for_store
        from dsflow.adapters.schemas import register_sink_schemas
        from dsflow.core.address import Address

        relation = ctx.project.relation(Address.parse(change.address).name)
        store = ctx.project.store(relation.store)
        partitions = (change.after or {}).get("partitions", relation.partitions)  # the plan's: an adopted topic's own
        spec = TopicSpec(relation.topic, partitions, relation.replicas, dict(relation.topic_configs))
        existed = ctx.resumed.get("topic_existed")
        with for_store(store.name, store.properties):
            if existed is None:
                existed = describe_topic(store.bootstrap_servers, relation.topic, store.properties) is not None
                ctx.note({"topic_existed": existed})
            created = ensure_topic(store.bootstrap_servers, spec, store.properties)
        evolving = bool(change.before) and change.before.get("columns") != (change.after or {}).get("columns")
        where = {} if "bootstrap_servers" in store.sensitive else {"bootstrap": store.bootstrap_servers}
        return {"topic": relation.topic, "store": store.name, **where,  # a secret address stays out of state
                "created_by_dsflow": created or not existed,
                **register_sink_schemas(ctx.project, relation, evolving)}

    def update(self, ctx: Any, change: Any, deployed: Any) -> dict[str, Any]:
        from dsflow.core.plan import grows_only

        if grows_only(deployed.data, change.after or {}):
            from dsflow.adapters.objects import grow

            grow(ctx.project, {**deployed.data, **deployed.outputs}, change.after["partitions"])
        outputs = self.create(ctx, change)
        outputs["created_by_dsflow"] = outputs["created_by_dsflow"] or deployed.outputs.get("created_by_dsflow", False)
        return outputs

    def delete(self, ctx: Any, deployed: Any) -> None:
        from dsflow.adapters.kafka.admin import delete_topic
        from dsflow.adapters.kafka.security import for_store

        if not deployed.outputs.get("created_by_dsflow"):
            return
        store = ctx.project.store(deployed.outputs.get("store", ""))
        extra = store.properties if store else None
        bootstrap = deployed.outputs.get("bootstrap") or (store.bootstrap_servers if store else "")
        with for_store(deployed.outputs.get("store", ""), extra):
            delete_topic(bootstrap, deployed.outputs["topic"], extra)


def executor(data: Mapping[str, Any], outputs: Mapping[str, Any], store_type: str | None) -> TopicExecutor | None:
    """A stream's or changelog's topic in a kafka store; without a store type (a relation deleted: its store may be
    gone from the project), any log no other kind recognised (this kind is asked last)."""
    if data.get("kind") in ("stream", "changelog") and store_type in ("kafka", None):
        return TopicExecutor()
    return None


def observe(project: Any, deployed: Any, cache: dict[str, Any]) -> Any:
    """Refresh: drift when a relation's topic is missing or has other partitions than declared, or a pushed-down
    grant's ACL is; None for what is no topic of a known broker (`cache`: the topics of each broker asked, or why it
    could not be)."""
    from dsflow.core.address import Address, Kind

    kind = Address.parse(deployed.address).kind
    if kind is Kind.GRANT:
        from dsflow.adapters.kafka.grants import observe_grant

        return observe_grant(project, deployed)
    if kind is not Kind.RELATION:
        return None
    store = project.store(deployed.outputs.get("store", "")) if project is not None else None
    return _observe_topic(deployed, cache, dict(store.properties) if store is not None else None,
                          _store_bootstrap(store, deployed))


def _store_bootstrap(store: Any, deployed: Any) -> str | None:
    """The store's bootstrap address: a topic whose address came from env_var() records none in the state."""
    recorded_topic = deployed.outputs.get("topic") and "created_by_dsflow" in deployed.outputs
    return store.bootstrap_servers if recorded_topic and store is not None and store.type == "kafka" else None


def _unreachable(err: Any, store: str, extra: dict[str, str], bootstrap: str) -> str:
    """Why a store's topics could not be listed: a secured store's failed TLS or SASL says so (DSF-E255)."""
    from dsflow.adapters.kafka.security import store_error

    named = store_error(err, store, extra) if store else err
    return f"{named.code}: {named.message}" if named.code == "DSF-E255" else f"broker {bootstrap} is unreachable"


def _observe_topic(deployed: Any, cache: dict[str, Any], extra: dict[str, str] | None = None,
                   fallback: str | None = None) -> Any:
    from dsflow.adapters.kafka.admin import partition_counts
    from dsflow.core.plan import Observation
    from dsflow.core.secrets import scrub
    from dsflow.errors import DsflowError

    bootstrap = deployed.outputs.get("bootstrap") or fallback
    if not bootstrap:
        return None
    if bootstrap not in cache:
        try:
            cache[bootstrap] = partition_counts(bootstrap, extra)
        except DsflowError as err:  # kept as why: the same for every topic of the broker
            cache[bootstrap] = _unreachable(err, deployed.outputs.get("store", ""), extra or {}, bootstrap)
    topics = cache[bootstrap]
    if not isinstance(topics, dict):
        return Observation(address=deployed.address, healthy=False, detail=scrub(str(topics)))
    topic = deployed.outputs.get("topic")
    if topic not in topics:
        return Observation(address=deployed.address, healthy=False, detail="topic is missing")
    expected = deployed.data.get("partitions")
    if expected and topics[topic] != expected:
        return Observation(address=deployed.address, healthy=False,
                           detail=f"topic has {topics[topic]} partitions, the project declares {expected}")
    return Observation(address=deployed.address, healthy=True, detail="topic exists")


OBJECTS = KafkaObjects()
