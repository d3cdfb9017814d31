"""Topics across streaming stores for `dsflow topic ...`: every store kind's logs (topics, streams) behind one
shape, each kind's operations asked of its `commands` facet (core/stores.py).

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

from dsflow.core import stores
from dsflow.core.protocol import LogCommands
from dsflow.core.model import Project, Relation, Store
from dsflow.errors import DsflowError

STREAMING = tuple(stores.kinds_that(stores.Capability.LOGS))
"""The store types whose streams and changelogs are logs (topics, streams): those `dsflow topic` works on."""


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


def commands(store_type: str) -> LogCommands | None:
    """The `commands` facet of a store type (core/stores.py): how its topics are listed, read, written."""
    return stores.facet(store_type, "commands")


def log_commands(store_type: str) -> LogCommands:
    """`commands` of a store type that holds topics (STREAMING): every one of them has it."""
    facet = commands(store_type)
    assert facet is not None, f"store type '{store_type}' has no commands facet"
    return facet


def log_stores_text() -> str:
    """The store types that hold topics ('a, b and c'), for a message."""
    return " and ".join([", ".join(STREAMING[:-1]), STREAMING[-1]]) if len(STREAMING) > 1 else STREAMING[0]


def streaming_store(project: Project, name: str | None) -> Store:
    store_name = name or project.default_store
    store = project.store(store_name) if store_name else None
    if store is None:
        raise DsflowError("DSF-E021", f"no store '{store_name}' in the project",
                          hint=f"pass --store NAME; stores: {', '.join(s.name for s in project.stores) or 'none'}")
    if store.type not in STREAMING:
        raise DsflowError("DSF-E767", f"the {store.type} store '{store.name}' has no topics",
                          hint=f"topic commands work on {log_stores_text()} stores; see 'dsflow entity' for tables")
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
    """A store client's error of the block names the store (DSF-E255 when a secured store's TLS or SASL failed),
    as its `commands` facet says."""
    facet = commands(store_type)
    if facet is None:
        yield
        return
    with facet.errors(store, settings):
        yield


def broker_type() -> str:
    """The store type a bare broker address (`--bootstrap`) is of."""
    return stores.kinds_that(stores.Capability.BROKER)[0]


def broker_target(bootstrap: str, name: str) -> Target:
    """Topic NAME of the broker at `bootstrap` (`--bootstrap`, instead of a project store)."""
    return Target(broker_type(), name, bootstrap)


def list_names(target_store: Store) -> list[str]:
    return log_commands(target_store.type).list_names(target_store)


def describe(target: Target) -> dict[str, Any] | None:
    """What the store says about the topic (None if it does not exist)."""
    return log_commands(target.store_type).describe(target)


def size_kind(option: str) -> stores.StoreKind | None:
    """The log store kind whose `dsflow topic create` takes --OPTION (partitions, replicas, shards)."""
    return next((stores.kind(t) for t in STREAMING if option in log_commands(t).size_options), None)


def create(target: Target, partitions: int | None, replicas: int | None, shards: int | None) -> bool:
    """Create the topic (sizes default to the relation's); True if created, False if it existed. DSF-E768 for a
    size option of another store kind."""
    facet = log_commands(target.store_type)
    sizes = {"partitions": partitions, "replicas": replicas, "shards": shards}
    foreign = [name for name, value in sizes.items() if value and name not in facet.size_options]
    other = size_kind(foreign[0]) if foreign else None
    if other is not None:
        theirs = log_commands(other.type).size_options
        options = " and ".join(f"--{name}" for name in theirs)
        raise DsflowError("DSF-E768", f"{options} {'are' if len(theirs) > 1 else 'is'} for {other.title} "
                          f"{other.log_noun}s", hint=facet.size_hint)
    return facet.create(target, sizes)


def delete(target: Target) -> bool:
    return log_commands(target.store_type).delete(target)


def produce(target: Target, lines: Iterable[str | bytes], key_field: str | None) -> int:
    """Produce JSON lines (text, or bytes as read from a file: they must be UTF-8). Every line is checked before
    anything is sent: not UTF-8 is DSF-E706, longer than one record may be DSF-E715, each naming the line."""
    facet = log_commands(target.store_type)
    limit, hint = facet.record_limit(target)
    return facet.produce(target, input_lines(lines, limit, hint), key_field)


def input_lines(lines: Iterable[str | bytes], limit: int, hint: str = "split the record") -> list[str]:
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
                              hint=hint)
        out.append(line)
    return out


def records(target: Target, from_beginning: bool, limit: int | None, timeout: float,
            raw: bool = False, stop: Any = None, on_start: Any = None) -> Iterator[dict[str, Any]]:
    """The topic's records as dicts; unless `raw`, a relation's value is decoded with its formats. A read that
    ends on `stop` (a threading.Event: `dsflow serve`'s tail) calls `on_start()` once it is positioned (every
    record produced after that is read)."""
    found, done = log_commands(target.store_type).read(target, from_beginning, limit, timeout, raw, stop, on_start)
    if done:
        yield from found
        return
    for record in found:
        yield record if raw or target.relation is None else decoded(record, target.relation, target.registry)


def decoded(record: dict[str, Any], relation: Relation, registry: dict[str, str] | None = None) -> dict[str, Any]:
    """The record with its value parsed as the relation's value.format (json, avro, protobuf: a key or value read
    as bytes) and an avro or protobuf key as its text (as a query sees it); what does not decode says why in
    `error`."""
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
    """A record read as bytes: key and value decoded with the schema registry, anything else as text."""
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
