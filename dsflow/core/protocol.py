"""The store protocol: everything a store kind may provide, in one place.

A store kind is a folder under `dsflow/adapters/` registered in core/stores.py (`REGISTRY`, its capabilities). What
it provides is split into facets, one module of that folder each, each exposing one object; the classes below say
what each facet may hold. Every member is optional: a kind asked for a facet it lacks (no module), or for a member
its facet lacks, has no such rule or operation, and the asker takes the default its docstring says. A facet is
imported when first asked (`stores.facet(type, name)`), so no layer below the adapters imports one.

    facet               object     protocol          asked by
    settings.py         (models)   StoreSettings     the rules facet's `settings` (load/store_settings.py)
    rules.py            RULES      StoreRules        the loader (load/rules.py `rule`) and core/settings.py
    objects.py          OBJECTS    PhysicalObjects   plan, refresh, apply (adapters/objects.py)
    commands.py         COMMANDS   LogCommands,      `dsflow topic`, the server's tail (engine/topics.py);
                                   EntityCommands,   `dsflow entity` (engine/entities.py);
                                   ViewCommands      `dsflow query` over views kept in a store (engine/adhoc.py)
    spark.py            SPARK      SparkFacet        the spec translation and the query driver
                                                     (adapters/spark/facets.py)
    tables.py           TABLES     TableFormat       a table format with a folder of its own (adapters/tables/base.py)

Types of the layers above core (a Spark DataFrame, a query spec, an executor) are written `Any` here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from dsflow.errors import Diagnostic, Location

Report = Callable[[Diagnostic], None]
Where = Callable[[str], Location | None]


class StoreRules(Protocol):
    """The `rules` facet: what the loader asks a store kind (pure: no I/O, no SDK import at module level)."""

    partitions_key: str
    """Logs (Capability.LOGS): the WITH property giving a log's partitions (shards)."""
    sizing_keys: tuple[str, ...]
    """Logs: the WITH properties sizing its logs (another kind's are DSF-E110)."""
    config_prefix: str
    """Logs: the prefix of its log configs ('<prefix><config>' WITH properties are configs of the log)."""
    transactional_streams: bool
    """Logs: a stream sink may be 'exactly-once' (its writes are transactions recording the batch id); absent: it
    may not (DSF-E047)."""
    realtime_logs: bool
    """Logs: a query in Spark's real-time mode ('trigger' = 'realtime') may read and write them through Spark's own
    connector (adapters/spark/realtime.py); absent: it may not (DSF-E872)."""
    row_dead_letters: bool
    """Dead letters (Capability.DEAD_LETTERS): a query's DEAD LETTER expectations may send rows to its dead-letter
    log (absent: they may not, DSF-E864)."""
    merging_sinks: tuple[str, str]
    """Tables (Capability.MERGE): how DSF-E157 names a sink merging a changelog's deletes (what, where)."""
    view_props: set[str]
    """Views (Capability.VIEWS): the WITH properties placing a materialized view's table."""
    view_table_key: str
    """Views (and its kind's tables): the WITH property naming the table of a view or a CREATE TABLE ... AS SELECT,
    which a move may rename in place (core/moves.py `table_rename`)."""
    change_props: set[str]
    """Change streams (Capability.CHANGE_STREAM): the WITH properties a change stream takes."""
    slot_key: str
    publication_key: str
    """Change streams: the recorded options naming its replication slot and publication."""
    several_tables_hint: str
    """Change streams: the hint where one change stream of several tables cannot serve."""
    setting_names: tuple[tuple[str, str], ...]
    """(object, WITH property) rows it adds to core/settings.py (identity: they name where the data is)."""

    def settings(self, store_type: str) -> Any:
        """Its settings model (a load/store_settings.py StoreSettings class): the properties a store of the type
        requires and allows, and their types (DSF-E095). None (or no rule): its properties are not checked."""

    def store_diagnostics(self, name: str, store_type: str, bootstrap: str, properties: dict[str, str],
                          location: Location | None, where: Where) -> list[Diagnostic]:
        """Its own checks across its settings (`where(key)`: the property's location)."""

    def check_log_name(self, name: str, fqn: str, where: Location | None, report: Report) -> bool:
        """Whether a log may take this name (DSF-E206, DSF-E207)."""

    def check_dead_letter_topic(self, name: str, what: str, where: Location | None, report: Report) -> bool:
        """Whether a query's 'dlq.topic' may take this name."""

    def log_size(self, st: Any, fqn: str, store: Any, sources: list[Any], stores_: dict[str, Any],
                 report: Report) -> tuple[int, int]:
        """(partitions, replicas) of a relation's log; default: 'topic.partitions', 'topic.replicas' as declared."""

    def check_formats(self, st: Any, fqn: str, store: Any, value_format: str, report: Report) -> bool:
        """Whether its logs take the relation's formats (DSF-E114)."""

    def table_props(self, store_type: str) -> set[str]:
        """The WITH properties of a table in it (Capability.TABLES)."""

    def table_options(self, fqn: str, props: dict[str, str], store: Any, location: Location | None,
                      prop_location: Where, report: Report) -> tuple[str, dict[str, str]] | None:
        """(the table's name on its store, its options); default: its name, no options."""

    def check_table(self, store_type: str, relation: Any, report: Report) -> None:
        """Its table identifiers (DSF-E208)."""

    def check_grant(self, grant: Any, relation: Any) -> list[Diagnostic]:
        """What it says of a grant on a relation it keeps (a privilege it will not push down: a warning)."""

    def roles_named(self, properties: Mapping[str, str]) -> dict[str, str]:
        """The dsflow roles a store's settings name (a grant's pushdown mapping): {role: the setting naming it}."""

    def realtime_refusals(self, properties: dict[str, str]) -> list[str]:
        """Logs whose rules say `realtime_logs`: what in a store's settings Spark's own connector cannot do (each a
        DSF-E872 reason of a real-time query reading or writing it); none: it can."""

    def view_options(self, fqn: str, props: dict[str, str], store: Any, location: Location | None,
                     prop_location: Where, report: Report) -> tuple[str, dict[str, str]] | None:
        """(a materialized view's table name, its options) in it (Capability.VIEWS)."""

    def object_name(self, project: str, environment: str, fqn: str) -> str:
        """The name of a change stream's replication objects (slot, publication) (Capability.CHANGE_STREAM)."""

    def change_tables(self, options: Mapping[str, str]) -> list[str]:
        """The tables a change stream captures."""

    def captures_several(self, options: Mapping[str, str]) -> bool:
        """Whether a change stream captures several tables."""

    def change_stream_relation(self, fqn: str, kind: str, columns: Any, props: dict[str, str], store: Any,
                               slot_name: str, location: Location | None, prop_location: Where,
                               report: Report) -> Any:
        """The relation a change stream declared in it becomes (sql/cdc.py)."""


class PhysicalObjects(Protocol):
    """The `objects` facet: the physical object a relation lives in (a topic, a stream, a table).

    A kind that cannot tell one of these returns None ({} for identities): the plan then says 'not counted', and
    offsets are carried on the names alone.
    """

    grants: Any
    roles: Any
    logins: Any
    """The executors of grants, roles and user bindings (its logins) the store enforces itself
    (adapters/objects.py `pushed_down`). Where several kinds offer one, an executor with `claims(project, data,
    outputs)` takes the changes it claims (grants on its stores' logs pushed down as ACLs, say)."""

    def identities(self, store: Any, names: list[str]) -> dict[str, str]:
        """name -> identity now, for the named objects that exist: a log deleted and created again under the same
        name is another log (a topic's id; a stream's ARN and creation time); {} where the store gives none."""

    def sizes(self, store: Any, names: list[str]) -> dict[str, int]:
        """name -> partitions (open shards) now, for the named logs that exist: refresh's look at the logs of
        relations not yet deployed (a log that exists is adopted as it is: core/plan.py)."""

    def held_records(self, store: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                     since: str | None = None) -> int | None:
        """Records the deployed object holds now (from epoch ms `since` when given): what a plan that deletes or
        empties it destroys (`DESTROYS ~N`); None if not countable."""

    def positions(self, store: Any, names: list[str]) -> dict[str, dict[str, tuple[int, int]]]:
        """name -> partition -> (first offset held, end offset), for the named logs that exist: where a reset
        checkpoint starts and what it skips (core/forcing.py); absent where the store cannot say."""

    def consumer_groups(self, store: Any, names: list[str]) -> dict[str, list[str]]:
        """name -> the consumer groups outside the project registered on the named log (committed offsets, assigned
        members), sorted; a log no group reads is absent. Optional: refresh asks a kind that offers it (plan's
        `consumers`)."""

    def tables_seen(self, store: Any, relation: Any) -> tuple[list[list[str]] | None, str | None]:
        """An existing table an import adopts (Capability.IMPORT_TABLES), read from the store's catalog: (its
        columns [name, type] in order, or None when it does not exist; why it cannot take the relation's rows as it
        is, or None)."""

    def can_grow(self, store: Any, name: str, total: int) -> bool:
        """Whether the object can take `total` partitions (shards) in place, keeping its records."""

    def grow(self, store: Any, name: str, total: int) -> None:
        """Raise the object's partitions (shards) to `total` in place."""

    def executor(self, data: Mapping[str, Any], outputs: Mapping[str, Any], store_type: str | None) -> Any:
        """Apply's executor (create, update, delete) of a relation it recognises by its data, recorded outputs and
        store type (None: not known); None for one it does not."""

    def observe(self, project: Any, deployed: Any, cache: dict[str, Any]) -> Any:
        """Refresh's observation of a deployed object it recognises (drift); None otherwise."""


class LogCommands(Protocol):
    """The `commands` facet of a log store kind (`dsflow topic ...`); `target` is an engine/topics.py Target."""

    size_options: tuple[str, ...]
    """The sizes `dsflow topic create` takes (--partitions, --replicas; --shards)."""
    size_hint: str
    """How its logs are sized: the hint of DSF-E768."""

    def errors(self, store: str, settings: Any) -> AbstractContextManager:
        """A context in which a client error names the store."""

    def list_names(self, store: Any) -> list[str]: ...

    def describe(self, target: Any) -> dict[str, Any] | None: ...

    def create(self, target: Any, sizes: dict[str, int | None]) -> bool: ...

    def delete(self, target: Any) -> bool: ...

    def record_limit(self, target: Any) -> tuple[int, str]:
        """The largest record in bytes, and how to raise it (the hint of DSF-E715)."""

    def produce(self, target: Any, lines: list[str], key_field: str | None) -> int: ...

    def read(self, target: Any, from_beginning: bool, limit: int | None, timeout: float, raw: bool,
             stop: Any = None, on_start: Any = None) -> tuple[Iterator[dict[str, Any]], bool]:
        """The records, and whether they are decoded already (else `decoded` decodes a relation's). Without `stop`
        the read ends after `timeout` idle seconds; with it (a tail), when it is set, calling `on_start()` once
        positioned (every record produced after that is read)."""

    def dead_letter_topic(self, project: Any, query: Any) -> str | None: ...

    def dead_letter_count(self, store: Any, topic: str) -> int | None: ...

    def dev_broker(self) -> Any:
        """Capability.BROKER: the embedded development broker (`dsflow dev up|down|status`)."""

    def dev_registry(self) -> Any:
        """Capability.BROKER: the development schema registry (`dsflow dev up --registry`): start, stop and read."""

    def producer(self, bootstrap: str, topic: str, config: Mapping[str, str] | None, flush_interval: float) -> Any:
        """Capability.BROKER: a producer of JSON records for a data generator (dsflow/datagen/__init__.py)."""


class EntityCommands(Protocol):
    """The `commands` facet of a table store kind (`dsflow entity ...`): a PATH in the store's own terms (a path
    under a lake root, database[.schema[.table]], NAMESPACE[.TABLE]); `entity_paths` names them for the help."""

    entity_paths: dict[str, str]
    """What a PATH is, by the name of the table format or system (for the help)."""

    def entity_location(self, relation: Any, store: Any) -> str:
        """The PATH of a table relation of the project."""

    def list_entities(self, project: Any, store: Any, path: str) -> list[str]: ...

    def describe_entity(self, project: Any, store: Any, path: str) -> dict[str, Any]: ...

    def entity_rows(self, project: Any, store: Any, path: str, limit: int) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of a table, at most `limit` rows."""


class ViewCommands(Protocol):
    """The `commands` facet of a store keeping materialized views (Capability.VIEWS): `dsflow query` over them."""

    def view_place(self, relation: Any) -> tuple[str, str | None]:
        """The database and schema of a view kept in the store."""

    def query_views(self, project: Any, store: str, database: str, select: Any) -> tuple[list[str], list[tuple]]:
        """Run a SELECT (a sqlglot expression) over the store's view tables, read-only: column names and rows."""


class SparkFacet(Protocol):
    """The `spark` facet: one store kind's side of the query driver."""

    kinds: tuple[str, ...]
    """The spec kinds (SourceSpec.kind, SinkSpec.kind) it reads or writes."""
    async_checkpoint: bool
    """Its sink tolerates replays the way Spark's own log sink does (Spark's async progress tracking)."""

    def source_fields(self, project: Any, query: Any, store: Any, relation: Any) -> dict[str, Any]:
        """The store-specific fields of the SourceSpec reading `relation` (kind, client_config, options, format)."""

    def sink_spec(self, project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
        """The SinkSpec of a query writing `relation`."""

    def data_sources(self) -> list[type]:
        """The Spark Python data sources its reads and writes go through (registered in every session)."""

    def stream(self, spark: Any, spec: Any, source: Any) -> Any:
        """The streaming DataFrame of one source (rows key, value or __value, timestamp, ...)."""

    def client_option(self, setting: str) -> str:
        """The data source option a client setting is passed as (named in `secret.options`)."""

    def value_layout(self, source: Any) -> str:
        """How the source's values reach Spark (formats/decoding.py: TEXT, STRUCT or BOTH)."""

    def sink_rows(self, result: Any, sink: Any) -> Any:
        """The rows its sink writes, made from the query's result (a log: key and value)."""

    def start(self, spec: Any, frame: Any, trigger: dict[str, Any], options: dict[str, str]) -> Any:
        """Start the streaming query writing `frame` into the sink; `options`: the driver's own writer options
        (Spark's async progress tracking, only when the facet says `async_checkpoint`)."""

    def table(self, spark: Any, spec: Any, source: Any) -> Any:
        """Stores whose kind says Capability.WHOLE_READ: the source's log read whole as a batch, each task finding its
        offsets when it runs, so the plan Spark makes once reads the log as it is at every micro-batch (a
        processing-time join's changelog: adapters/spark/lookup.py)."""

    def realtime_conf(self) -> dict[str, str]:
        """Logs whose rules say `realtime_logs`: the Spark session conf real-time mode needs (its connector's jars)."""

    def realtime_stream(self, spark: Any, spec: Any, source: Any) -> Any:
        """Real-time mode: the source read by Spark's own connector (key and value as text, partition, offset,
        timestamp), from its carried offsets or starting position."""

    def realtime_start(self, spec: Any, frame: Any, trigger: dict[str, Any]) -> Any:
        """Real-time mode: start the query writing `frame`'s (key, value) rows through Spark's own connector."""

    def latency_probe(self, sink: Any) -> Any:
        """Real-time mode: what reads the latency of the records the sink received (`fields()` gives
        core/latency.py's record_latency_*, `close()` ends it)."""

    def ensure_table(self, sink: Any, columns: list[tuple[str, str]]) -> None:
        """A view sink (Capability.VIEWS): create the view's table if apply has not."""

    def write_batch(self, sink: Any, rows: list[tuple], deletes: list[tuple], replace: dict[str, bool],
                    checkpoint: str, batch_id: int) -> None:
        """A view sink: upsert and delete one micro-batch's rows in one transaction, once per batch id."""

    def send_rows(self, config: dict[str, str], topic: str, records: list) -> None:
        """Dead letters (its rules' `row_dead_letters`): send (key, value, headers) records, rows failing a query's
        DEAD LETTER expectations, to the dead-letter log `topic` with the source's client `config`, delivered before
        it returns (adapters/spark/expectations.py)."""

    def lag_reader(self) -> Any | None:
        """An object measuring how far a query is behind one of its sources: `unit` ('records', 'millis' or
        'wal_bytes': adapters/spark/lag.py), `behind(source_spec, offsets read up to)` giving {partition: amount}
        ({} before anything was read), and `close()` freeing its clients; None if the store's lag is not measured."""
