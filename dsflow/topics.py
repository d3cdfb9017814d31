"""Topics across streaming stores for `dsflow topic ...`: Kafka topics and Kinesis streams behind one shape.

    target = resolve(project, "pageviews", store=None)   # a relation name -> its store and topic
    topics.describe(target) / create / delete / produce / records

A name that is a relation's resolves to that relation's topic (or stream) in the relation's store;
anything else is a topic name in --store (default: the project's default store).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dsflow.core.model import Project, Relation, Store
from dsflow.errors import DsflowError

STREAMING = ("kafka", "kinesis")


@dataclass(frozen=True)
class Target:
    """A topic or stream in one store, with the relation it backs if there is one."""

    store_type: str
    name: str
    bootstrap: str = ""
    settings: dict[str, str] = field(default_factory=dict)
    relation: Relation | None = None
    store: str = ""
    registry: dict[str, str] = field(default_factory=dict, repr=False)
    """The store's schema registry settings (schema.registry.*), for a relation's avro or protobuf values."""


def streaming_store(project: Project, name: str | None) -> Store:
    store_name = name or project.default_store
    store = project.store(store_name) if store_name else None
    if store is None:
        raise DsflowError("DSF-E021", f"no store '{store_name}' in the project",
                          hint=f"pass --store NAME; stores: {', '.join(s.name for s in project.stores) or 'none'}")
    if store.type not in STREAMING:
        raise DsflowError("DSF-E767", f"the {store.type} store '{store.name}' has no topics",
                          hint="topic commands work on kafka and kinesis stores; see 'dsflow entity' for tables")
    return store


def resolve(project: Project, name: str, store: str | None = None) -> Target:
    """The topic NAME means: a relation's topic (in its store unless --store says otherwise), else a topic."""
    relation = next((r for r in project.relations if r.kind in ("stream", "changelog") and
                     (r.fqn == name or r.fqn.endswith("." + name))), None)
    chosen = streaming_store(project, store or (relation.store if relation else None))
    if relation is not None and relation.store != chosen.name:
        relation = None
    registry = project.schema_registry(chosen.schema_registry)
    return Target(chosen.type, relation.topic if relation else name, chosen.bootstrap_servers,
                  dict(chosen.properties), relation, chosen.name, registry.client_config() if registry else {})


@contextmanager
def store_errors(store: str, store_type: str, settings: Mapping[str, str]) -> Iterator[None]:
    """A Kafka client error of the block names the store (adapters/kafka/security.py: DSF-E255 when a secured
    store's TLS or SASL failed); other stores' errors pass as they are."""
    if store_type != "kafka" or not store:
        yield
        return
    from dsflow.adapters.kafka.security import for_store

    with for_store(store, settings):
        yield


def kafka_target(bootstrap: str, name: str) -> Target:
    return Target("kafka", name, bootstrap)


def list_names(target_store: Store) -> list[str]:
    if target_store.type == "kinesis":
        from dsflow.adapters.kinesis.admin import list_streams

        return list_streams(dict(target_store.properties))
    from dsflow.adapters.kafka.admin import list_topics

    return list_topics(target_store.bootstrap_servers, dict(target_store.properties))


def describe(target: Target) -> dict[str, Any] | None:
    """What the store says about the topic (None if it does not exist)."""
    if target.store_type == "kinesis":
        from dsflow.adapters.kinesis.admin import describe_stream

        info = describe_stream(target.settings, target.name)
        return None if info is None else {"store": target.store, "type": "kinesis", "stream": info.name,
                                          "status": info.status, "shards": info.open_shards,
                                          "shard_ids": list(info.shards), "retention_hours": info.retention_hours}
    from dsflow.adapters.kafka.admin import describe_topic

    spec = describe_topic(target.bootstrap, target.name, target.settings)
    return None if spec is None else {"store": target.store, "type": "kafka", "topic": spec.name,
                                      "partitions": spec.partitions, "replicas": spec.replicas}


def create(target: Target, partitions: int | None, replicas: int | None, shards: int | None) -> bool:
    """Create the topic (sizes default to the relation's); True if created, False if it existed."""
    if target.store_type == "kinesis":
        if partitions or replicas:
            raise DsflowError("DSF-E768", "--partitions and --replicas are for Kafka topics",
                              hint="a Kinesis stream is sized with --shards N")
        from dsflow.adapters.kinesis.admin import ensure_stream

        return ensure_stream(target.settings, target.name, shards or _size(target, "partitions"))
    if shards:
        raise DsflowError("DSF-E768", "--shards is for Kinesis streams", hint="use --partitions N --replicas N")
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

    configs = dict(target.relation.topic_configs) if target.relation else {}
    spec = TopicSpec(target.name, partitions or _size(target, "partitions"), replicas or _size(target, "replicas"),
                     configs)
    return ensure_topic(target.bootstrap, spec, target.settings)


def _size(target: Target, attribute: str) -> int:
    return getattr(target.relation, attribute) if target.relation is not None else 1


def delete(target: Target) -> bool:
    if target.store_type == "kinesis":
        from dsflow.adapters.kinesis.admin import delete_stream

        return delete_stream(target.settings, target.name)
    from dsflow.adapters.kafka.admin import delete_topic

    return delete_topic(target.bootstrap, target.name, target.settings)


KINESIS_RECORD_BYTES = 1_048_576
"""The largest Kinesis record: data and partition key together (1 MiB)."""
KAFKA_MESSAGE_BYTES = 1_000_000
"""librdkafka's default `message.max.bytes`, which a store's properties may raise."""


def produce(target: Target, lines: Iterable[str | bytes], key_field: str | None) -> int:
    """Produce JSON lines (text, or bytes as read from a file: they must be UTF-8). Every line is checked before
    anything is sent: not UTF-8 is DSF-E706, longer than one record may be DSF-E715, each naming the line."""
    if target.store_type == "kinesis":  # a relation's stream: the lines' columns in its value format
        from dsflow.adapters.kinesis.records import put_json_lines, relation_codec

        checked = _checked_lines(input_lines(lines, KINESIS_RECORD_BYTES))
        return put_json_lines(target.settings, target.name, checked, key_field=key_field,
                              codec=relation_codec(target.relation, target.registry))
    from confluent_kafka import KafkaException

    from dsflow.adapters.kafka.client import produce_json_lines

    limit = str(target.settings.get("message.max.bytes", KAFKA_MESSAGE_BYTES))
    limit = int(limit) if limit.isdigit() else KAFKA_MESSAGE_BYTES
    checked = input_lines(lines, limit)
    try:
        return produce_json_lines(target.bootstrap, target.name, checked, key_field=key_field, extra=target.settings)
    except KafkaException as err:  # the client refused a record (a size the broker's or topic's limit is below)
        raise DsflowError("DSF-E705", f"records were not delivered to topic '{target.name}': {err.args[0]}",
                          hint="check the record sizes against the topic's max.message.bytes") from err


def input_lines(lines: Iterable[str | bytes], limit: int) -> list[str]:
    """Each line as text: DSF-E706 for one that is not UTF-8, DSF-E715 for one longer than `limit` bytes."""
    out = []
    for number, line in enumerate(lines, start=1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DsflowError("DSF-E706", f"line {number} is not UTF-8 text (byte {err.start + 1} is "
                                  f"0x{line[err.start]:02x}): nothing was produced",
                                  hint="give JSON lines in UTF-8; binary data is not JSON") from None
        size = len(line.strip().encode("utf-8", "surrogatepass"))
        if size > limit:
            raise DsflowError("DSF-E715", f"line {number} is {size:,} bytes, more than one record may hold "
                              f"({limit:,} bytes): nothing was produced",
                              hint="split the record; for Kafka, a store property message.max.bytes (and the "
                                   "topic's max.message.bytes) can raise the limit")
        out.append(line)
    return out


def _checked_lines(lines: Iterable[str]) -> list[str]:
    """Every line must be a JSON object before anything is put (as for Kafka, DSF-E706 names the line)."""
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if not ok:
            raise DsflowError("DSF-E706", f"line {number} is not a JSON object: {line.strip()[:80]}",
                              hint="give one JSON object per line")
        out.append(line)
    return out


def records(target: Target, from_beginning: bool, limit: int | None, timeout: float,
            raw: bool = False, stop: Any = None, on_start: Any = None) -> Iterator[dict[str, Any]]:
    """The topic's records as dicts; unless `raw`, a relation's value is decoded with its format (json). A Kafka
    read also ends once `stop` (a threading.Event: `dsflow serve`'s tail) is set, and calls `on_start()` once it
    is positioned (every record produced after that is read); a Kinesis read ends at `timeout`."""
    if target.store_type == "kinesis":  # a relation's values are decoded by its format unless `raw`
        from dsflow.adapters.kinesis.records import read_records, relation_codec

        codec = None if raw else relation_codec(target.relation, target.registry)
        found = read_records(target.settings, target.name, from_beginning, limit, timeout, codec)
        if codec is not None:
            yield from found
            return
    else:
        from dsflow.adapters.kafka.client import print_records

        binary = not raw and target.relation is not None and _uses_registry(target.relation)
        found = print_records(target.bootstrap, target.name, from_beginning=from_beginning, limit=limit,
                              timeout=timeout, extra=target.settings, convert=_binary_record if binary else None,
                              stop=stop, on_start=on_start)
    for record in found:
        yield record if raw or target.relation is None else decoded(record, target.relation, target.registry)


def _uses_registry(relation: Relation) -> bool:
    from dsflow.core.formats import REGISTRY_FORMATS

    return relation.value_format in REGISTRY_FORMATS or relation.key_format in REGISTRY_FORMATS


def _binary_record(message: Any) -> dict[str, Any]:
    """A consumed message as record_dict makes it, but key and value as bytes (decoded by `decoded`)."""
    from dsflow.adapters.kafka.client import record_dict

    return {**record_dict(message), "key": message.key(), "value": message.value()}


def decoded(record: dict[str, Any], relation: Relation, registry: dict[str, str] | None = None) -> dict[str, Any]:
    """The record with its value parsed as the relation's value.format (json; Kafka: avro, protobuf) and an avro
    or protobuf key as its text (as a query sees it); what does not decode says why in `error`."""
    if isinstance(record.get("key"), bytes) or isinstance(record.get("value"), bytes):
        return _registry_decoded(record, relation, registry or {})
    if relation.value_format != "json":
        return record  # other formats are printed as text
    try:
        value = json.loads(record["value"]) if record.get("value") is not None else None
    except ValueError as err:
        return {**record, "error": f"not {relation.value_format}: {err}"}
    return {**record, "value": value}


def _registry_decoded(record: dict[str, Any], relation: Relation, registry: dict[str, str]) -> dict[str, Any]:
    """A Kafka record read as bytes: key and value decoded with the schema registry, anything else as text."""
    from dsflow.formats import keys
    from dsflow.formats.avro import avro_record
    from dsflow.formats.protobuf import decode

    out, errors = dict(record), []
    key, value = record.get("key"), record.get("value")
    if key is not None and relation.key_format in ("avro", "protobuf"):
        texts, bad = keys.key_texts([key], relation.key_format, registry)
        out["key"] = texts[0] if not bad else _text(key)
        errors += [error for _, error in bad]
    elif isinstance(key, bytes):
        out["key"] = _text(key)
    if value is not None and relation.value_format in ("avro", "protobuf"):
        row, error = avro_record(value, registry) if relation.value_format == "avro" else decode(value, registry, None)
        out["value"] = row if error is None else _text(value)
        errors += [] if error is None else [f"value: {error}"]
    elif isinstance(value, bytes):
        out["value"] = _text(value)
        if relation.value_format == "json":
            return decoded({**out, "error": "; ".join(errors)} if errors else out, relation)
    return {**out, "error": "; ".join(errors)} if errors else out


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")
