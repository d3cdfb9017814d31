"""The store protocol: what a store kind provides, and the one registry from store type to its implementation.

A store kind is one folder under `dsflow/adapters/` (a package). What it provides is split into facets, one module
each in that folder, each exposing one object (settings, rules, objects, commands, spark; tables for a table format
with a folder of its own): core/protocol.py says what each may hold, in one place.

What a kind can do at all is declared in its `StoreKind` here (`capabilities`): code elsewhere asks
`kind(type).can(Capability.X)` and reports what is missing with `kinds_that(Capability.X)`, never
`if store.type == ...`. A facet a kind lacks (no module) is a capability it does not have.

The registry names module paths, not modules: a facet is imported when first asked, so the loader (a lower
layer than adapters) asks the registry without importing any adapter, and an SDK is loaded only by the store
that needs it. Adding a store is one folder plus one entry here (docs/architecture.md, "Adding a store").
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from typing import Any


class Capability(str, Enum):
    """Something a store kind can hold or do."""

    LOGS = "logs"                      # streams and changelogs live in it as logs (topics, streams)
    GROW = "grow"                      # a log's partitions (shards) can be raised in place
    TABLES = "tables"                  # CREATE TABLE ... AS SELECT writes tables in it
    TABLE_SOURCE = "table_source"      # a query can read its tables as the stream of their appended rows
    MERGE = "merge"                    # a table with a primary key is merged into (upserts and deletes)
    VIEWS = "views"                    # materialized views can live in it
    CHANGE_STREAM = "change_stream"    # its tables' changes can be read as a stream (CDC)
    IMPORT_TABLES = "import_tables"    # an existing table can be imported (`import:`): its columns read from the
                                       # catalog, the plan made against them (`objects` facet `tables_seen`)
    DEAD_LETTERS = "dead_letters"      # a query reading it can send undecodable records to a dead-letter log
    REGISTRY = "registry"              # its relations may use a schema registry (Avro, Protobuf)
    BROKER = "broker"                  # a broker named by its bootstrap address alone: `--bootstrap`, `dsflow dev
                                       # up` (an embedded one) and data generators (`dsflow datagen`) write to it
    WHOLE_READ = "whole_read"          # a query can read a changelog of it whole at every micro-batch (a
                                       # processing-time temporal join: sql/proctime.py)
    SWAP = "swap"                      # a blue/green deployment's new table replaces the production one in one
                                       # transaction of renames (its `swap` facet: engine/bluegreen_tables.py)
    RELOCATE = "relocate"              # a blue/green deployment's new table, at a path of its own, becomes the
                                       # relation's table in one state write (path-based tables: no catalog)


@dataclass(frozen=True)
class StoreKind:
    """One store type: its implementation's package, its name in messages, and what it can hold and do."""

    type: str
    package: str
    title: str
    capabilities: frozenset[Capability] = field(default_factory=frozenset)
    log_noun: str = "topic"
    size_noun: str = "partition"
    """What a log of the kind is sized in, in words (a Kafka topic's partitions, a Kinesis stream's shards)."""
    description: str = ""
    table_format: str = ""
    """The table format its tables are written in (delta, snowflake, iceberg, postgresql; "" for a kind without
    tables); the kind whose package implements a format exposes it as its `tables` facet (a TableFormat class)."""
    legacy_logs: bool = False
    """Its `objects` facet is asked last, and takes the deployed logs no other kind recognises: states written before
    relations recorded their store type name only a topic (one kind, the first dsflow had, claims those)."""

    def can(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def facet(self, name: str) -> Any | None:
        """The facet object (`rules`, `objects`, `commands`, `spark`) of this kind; None if it has none."""
        return _facet(self.package, name)


@cache
def _facet(package: str, name: str) -> Any | None:
    try:
        module = importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as missing:
        if missing.name != f"{package}.{name}":
            raise
        return None
    return getattr(module, name.upper(), None)


_C = Capability
_TABLES = frozenset({_C.TABLES, _C.TABLE_SOURCE, _C.MERGE})

REGISTRY: dict[str, StoreKind] = {kind.type: kind for kind in (
    StoreKind("kafka", "dsflow.adapters.kafka", "Kafka",
              frozenset({_C.LOGS, _C.GROW, _C.DEAD_LETTERS, _C.REGISTRY, _C.BROKER, _C.WHOLE_READ}), log_noun="topic",
              description="a Kafka-protocol broker: streams and changelogs as topics", legacy_logs=True),
    StoreKind("kinesis", "dsflow.adapters.kinesis", "Kinesis",
              frozenset({_C.LOGS, _C.GROW, _C.DEAD_LETTERS, _C.REGISTRY}), log_noun="stream", size_noun="shard",
              description="Amazon Kinesis Data Streams: streams and changelogs as Kinesis streams (shards)"),
    StoreKind("postgresql", "dsflow.adapters.postgres", "PostgreSQL",
              frozenset({_C.VIEWS, _C.CHANGE_STREAM, _C.TABLES, _C.MERGE, _C.IMPORT_TABLES, _C.SWAP}),
              log_noun="table",
              description="a PostgreSQL database: materialized views, tables written by CREATE TABLE ... AS SELECT, "
                          "and change streams of its tables", table_format="postgresql"),
    StoreKind("s3", "dsflow.adapters.tables", "S3", _TABLES | {_C.RELOCATE}, log_noun="table",
              description="Delta Lake tables in an S3 bucket", table_format="delta"),
    StoreKind("filesystem", "dsflow.adapters.tables", "filesystem", _TABLES | {_C.RELOCATE}, log_noun="table",
              description="Delta Lake tables in a local folder", table_format="delta"),
    StoreKind("adls", "dsflow.adapters.tables", "ADLS", frozenset({_C.TABLES, _C.TABLE_SOURCE, _C.RELOCATE}),
              log_noun="table",
              description="Delta Lake tables in Azure Data Lake Storage Gen2 / Blob storage", table_format="delta"),
    StoreKind("databricks", "dsflow.adapters.tables", "Databricks", _TABLES, log_noun="table",
              description="Delta Lake tables registered in a Databricks (Unity Catalog) catalog", table_format="delta"),
    StoreKind("snowflake", "dsflow.adapters.tables", "Snowflake", frozenset({_C.TABLES, _C.MERGE}),
              log_noun="table", description="Snowflake tables", table_format="snowflake"),
    StoreKind("iceberg", "dsflow.adapters.iceberg", "Iceberg", frozenset({_C.TABLES, _C.TABLE_SOURCE, _C.SWAP}),
              log_noun="table", description="Apache Iceberg tables through a SQL catalog", table_format="iceberg"),
)}
"""Store type -> its kind. The one place that lists the store types dsflow knows."""


def kind(store_type: str) -> StoreKind | None:
    return REGISTRY.get(store_type)


def kinds_that(capability: Capability) -> list[str]:
    """The store types that have `capability`, for an error's hint ("... writes to an s3, ... store")."""
    return [t for t, k in REGISTRY.items() if k.can(capability)]


def can(store: Any, capability: Capability) -> bool:
    """Whether a store (anything with a `type`; None: no) has `capability`."""
    found = kind(getattr(store, "type", None) or "")
    return found is not None and found.can(capability)


def table_format_of(store_type: str) -> str | None:
    """The table format of a store type's tables; None if it holds none."""
    found = kind(store_type)
    return found.table_format or None if found is not None else None


def format_home(table_format: str) -> StoreKind | None:
    """The first kind (in registry order) whose tables are in `table_format`: its package implements the format."""
    return next((k for k in REGISTRY.values() if k.table_format == table_format), None)


def facet(store_type: str, name: str) -> Any | None:
    found = kind(store_type)
    return found.facet(name) if found is not None else None


LOCAL_VIEWS = "dsflow.adapters.sqlite"
"""The package of the materialized views dsflow keeps itself (a view declared without a store: a snapshot table in
the environment's SQLite file beside the state). Not a store type users name; it has the facets a store kind has
(`objects`: apply's executor, `commands`: `dsflow query`, `spark`: the driver's writer)."""


def local_views(name: str) -> Any | None:
    """The facet `name` of the views without a store (LOCAL_VIEWS); None if it has none."""
    return _facet(LOCAL_VIEWS, name)


def listing(types: list[str]) -> str:
    """'s3, filesystem or iceberg': store types listed for a message."""
    return types[0] if len(types) == 1 else f"{', '.join(types[:-1])} or {types[-1]}"


def known_store_type(value: str) -> str:
    """A store's `type`: one the registry knows."""
    if value not in REGISTRY:
        close = difflib.get_close_matches(value, REGISTRY, n=1)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown store type {value!r}{guess}: one of {', '.join(REGISTRY)}")
    return value
