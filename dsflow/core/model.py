"""Resolved project models: what the loader produces and the planner consumes.

Every declared object carries the Location it came from. Models are frozen.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr

from dsflow.core.stores import known_store_type
from dsflow.errors import Location

StoreType = Annotated[str, AfterValidator(known_store_type)]
"""A store type the registry knows (a model field's type). Here, not in core/stores.py, so that the registry stays
free of pydantic: Spark's Python processes import it (the lake readers), and pydantic cost each ~8 MB."""


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True)


class Column(Frozen):
    """A relation column."""

    name: str
    type: str = Field(description="SQL type in the DeltaStream dialect, e.g. BIGINT, VARCHAR")
    nullable: bool = True


class Store(Frozen):
    """A store: a system holding streams and changelogs (a broker), tables, views or change streams. Its `type`
    is a kind of the store registry (core/stores.py), which says what it can hold; its settings (bucket, path,
    account, ...) are in `properties`; see docs/project.md."""

    name: str
    type: StoreType
    bootstrap_servers: str = Field("", description="a broker's host:port[,host:port]; empty for other stores")
    properties: dict[str, str] = Field(default_factory=dict, description="extra client configuration")
    sensitive: frozenset[str] = Field(default_factory=frozenset,
                                      description="property keys (and 'bootstrap_servers') whose values hold secrets")
    description: str = ""
    schema_registry: str | None = Field(None, description="name of the schema registry that avro and protobuf "
                                                          "relations of this store use (Capability.REGISTRY)")
    owner: str | None = Field(None, description="the role owning it (declared); None: the default owner, sysadmin")
    location: Location | None = None

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.properties}


class SchemaRegistry(Frozen):
    """A Confluent Schema Registry (REST API), attached to stores by name."""

    name: str
    url: str = Field(description="http(s)://host:port of the registry")
    username: str = Field("", description="basic auth user (or API key); empty: no auth")
    password: str = Field("", description="basic auth password (or API secret); always from env_var()")
    sensitive: frozenset[str] = Field(default_factory=frozenset, description="keys ('url', 'username', "
                                      "'password') whose values hold secrets")
    description: str = ""
    location: Location | None = None

    def client_config(self) -> dict[str, str]:
        """Settings for the adapters (schema.registry.* options of the data sources)."""
        config = {"schema.registry.url": self.url}
        if self.username or self.password:
            config["schema.registry.basic.auth.user"] = self.username
            config["schema.registry.basic.auth.password"] = self.password
        return config

    def secret_values(self) -> set[str]:
        return {getattr(self, key) for key in self.sensitive if getattr(self, key)}


class Database(Frozen):
    """A namespace of schemas."""

    name: str
    description: str = ""
    owner: str | None = Field(None, description="the role owning it (declared); None: the default owner, sysadmin")
    location: Location | None = None


class Schema(Frozen):
    """A namespace of relations inside a database."""

    database: str
    name: str
    owner: str | None = Field(None, description="the role owning it (declared); None: the default owner, sysadmin")
    location: Location | None = None

    @property
    def fqn(self) -> str:
        return f"{self.database}.{self.name}"


class Relation(Frozen):
    """A stream (append-only events) or changelog (events keyed by a primary key) backed by a topic,
    or a materialized view: a snapshot table (SQLite) kept up to date by its query,
    or a table (CREATE TABLE ... AS SELECT) in a lake or warehouse store."""

    fqn: str = Field(description="database.schema.name")
    kind: Literal["stream", "changelog", "materialized_view", "table"]
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    store: str
    topic: str = Field(description="the topic (the log's name on its store); for a view or table, its table name")
    value_format: Literal["json", "avro", "protobuf", "string", "long", "int", "double", "bytes"] = "json"
    key_format: str | None = None
    value_subject: str | None = Field(None, description="avro/protobuf: the registry subject of the value schema "
                                                        "(<topic>-value unless 'value.subject' says otherwise)")
    timestamp: str | None = None
    topic_gaps: Literal["fail", "count"] | None = Field(None, description="'topic.gaps': what a read does with "
                                                        "offsets the broker holds no record for (compaction, "
                                                        "transaction markers); None: count for changelogs and "
                                                        "compacted topics, fail otherwise (read_gaps)")
    partitions: int = Field(1, description="the log's partitions ('topic.partitions'; shards: 'topic.shards')")
    replicas: int = 1
    inferred_size: tuple[str, ...] = Field((), description="the sizes (partitions, replicas) its WITH clause "
                                           "does not declare: taken from its source (a query's relation) or the "
                                           "default 1, and, when its topic exists already, the topic's own (the "
                                           "plan adopts it as it is); fixed once deployed, so a later change of "
                                           "the source's size does not replace it")
    topic_configs: dict[str, str] = Field(default_factory=dict)
    table_options: dict[str, str] = Field(default_factory=dict, description="kind 'table': where the table is "
                                          "(its store kind's WITH properties; see docs/project.md)")
    defined_by_query: str | None = Field(None, description="fqn of the CSAS query that defines it")
    prevent_destroy: bool = Field(False, description="'lifecycle.prevent_destroy' = 'true': no plan may delete or "
                                                     "replace its topic or table (like Terraform's lifecycle)")
    schema_compatibility: str | None = Field(None, description="'value.schema.compatibility': the rule its columns "
                                             "evolve by (BACKWARD when unset; core/evolution.py)")
    deploy: str | None = Field(None, description="'deploy': 'blue_green' carries out a replay of the query writing "
                               "it beside the deployed version (core/bluegreen.py); None or 'in_place': in place")
    deploy_retention_ms: int | None = Field(None, description="'deploy.retention': how long a blue/green "
                                            "deployment's old version is kept after the switch; None: until the "
                                            "next apply")
    contract: bool = Field(False, description="'contract' = 'enforced': the query writing it produces exactly its "
                           "declared columns and types, and a breaking change to what is deployed is refused "
                           "(core/contracts.py)")
    version: int | None = Field(None, description="'version': the version of its model it is (dbt's model versions): "
                                "version N >= 2 is named <model>_v<N> and deployed beside the earlier ones")
    owner: str | None = Field(None, description="the role owning it (declared); None: the default owner, sysadmin")
    location: Location | None = None

    @property
    def name(self) -> str:
        return self.fqn.rsplit(".", 1)[-1]

    def column(self, name: str) -> Column | None:
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)

    @property
    def read_gaps(self) -> Literal["fail", "count"]:
        """'count' where a topic may hold offsets without records by design (a changelog, a compacted topic, or
        'topic.gaps' = 'count'); 'fail': such an offset fails the read."""
        if self.topic_gaps is not None:
            return self.topic_gaps
        compacted = "compact" in self.topic_configs.get("cleanup.policy", "")
        return "count" if self.kind == "changelog" or compacted else "fail"


class Source(Frozen):
    """One relation read by a query, with the alias it has in the SELECT."""

    relation: str
    alias: str
    starting_position: Literal["earliest", "latest"] = "earliest"
    position: Literal["earliest", "latest"] | None = Field(None, description="the source's own 'starting.position' "
                                                           "(FROM rel WITH (...)), overriding the query's")
    timestamp: str | None = Field(None, description="the source's own 'timestamp' column, overriding the relation's")
    lookup: bool = Field(False, description="read as a bounded table: each micro-batch joins its newest version (a "
                         "processing-time temporal join, `FOR SYSTEM_TIME AS OF PROCTIME()`: sql/proctime.py)")


class Window(Frozen):
    """A window table function over one source: TUMBLE (advance = size), HOP, or SESSION (size is its gap)."""

    kind: Literal["tumble", "hop", "session"]
    source: str = Field(description="alias of the windowed source in the SELECT")
    size: str = Field(description="a duration, e.g. '10 seconds'; SESSION: the gap that closes a session")
    advance: str | None = Field(None, description="HOP only: how often a window starts")
    processing_time: bool = Field(False, description="windowed by processing time (`PROCTIME()`, sql/proctime.py): "
                                  "each row's time is the start of the micro-batch that reads it")


class TemporalJoin(Frozen):
    """A stream joined with a changelog: each stream record meets the changelog's row for its key as of the
    record's event time (adapters/spark/temporal.py)."""

    stream: str = Field(description="alias of the stream (the left side) in the SELECT")
    changelog: str = Field(description="alias of the changelog (the right side)")
    side: Literal["inner", "left"] = "inner"
    stream_keys: tuple[str, ...] = Field(description="stream columns equal to the changelog's key columns, in order")
    changelog_keys: tuple[str, ...] = Field(description="the changelog's primary key columns, in order")


class IntervalJoin(Frozen):
    """A stream joined WITHIN a time bound after the first interval join of a chain (sql/join_chain.py): its
    records join the rows so far whose event time, the first stream's, is at most `within` apart from theirs."""

    stream: str = Field(description="alias of the joined stream in the SELECT")
    side: Literal["inner", "left"] = "inner"
    within: str = Field(description="how far apart its event time and the first stream's may be, e.g. '1 minutes'")


class RegularJoin(Frozen):
    """A stream joined INNER on an equality without WITHIN (a regular join, sql/join_chain.py): every pair of records
    with equal keys is joined whenever either arrives, so Spark keeps every record of both sides in its state, for
    ever (the state grows without bound: DSF-W001)."""

    stream: str = Field(description="alias of the joined stream (the right side) in the SELECT")
    location: Location | None = None


class ChangelogJoin(Frozen):
    """Two changelogs joined on equalities of their columns (adapters/spark/changelog_join.py): the result is a
    changelog whose rows are upserted and deleted as rows of either side change."""

    left: str = Field(description="alias of the left changelog in the SELECT")
    right: str = Field(description="alias of the right changelog")
    side: Literal["inner", "left", "full"] = "inner"
    left_keys: tuple[str, ...] = Field(description="left columns of the ON equalities, in order")
    right_keys: tuple[str, ...] = Field(description="right columns equal to left_keys, in order")
    keyed_by_left: bool = Field(description="the result is keyed by the left's primary key (ON covers the right's "
                                            "whole primary key, INNER or LEFT); else by both sides' primary keys")
    left_key: tuple[str, ...] = Field(description="output columns that are the left's primary key columns")
    right_key: tuple[str, ...] = Field((), description="output columns that are the right's primary key columns "
                                       "(only when not keyed_by_left)")
    streams: bool = Field(False, description="both sides are streams (a regular join that is aggregated or ranked in "
                          "the same query, sql/keyed_join.py): each record is a row keyed by its place (partition, "
                          "offset), never updated nor deleted")


class ChainedChangelogJoin(Frozen):
    """A changelog joined after a join of two changelogs (sql/changelog_join.py): the rows so far (the left, keyed
    by the previous join's output key) joined with one more changelog, as ChangelogJoin joins two."""

    changelog: str = Field(description="alias of the joined changelog (the right side)")
    side: Literal["inner", "left", "full"] = "inner"
    left_relations: tuple[str, ...] = Field(description="per ON equality, the alias of the earlier relation")
    left_keys: tuple[str, ...] = Field(description="per ON equality, the column of that earlier relation")
    right_keys: tuple[str, ...] = Field(description="the changelog's columns equal to left_keys, in order")
    keyed_by_left: bool = Field(description="the result keeps the rows' key (ON covers the changelog's whole "
                                            "primary key, INNER or LEFT); else the key grows by the changelog's")
    right_key: tuple[str, ...] = Field((), description="output columns that are the changelog's primary key "
                                       "columns (only when not keyed_by_left and not aggregated)")


class TopN(Frozen):
    """ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) over one stream, filtered to its first `limit` rows per
    partition (sql/topn.py; on Spark adapters/spark/topn.py): a changelog keyed by the partition columns and, for
    limit > 1, the rank column. select_sql holds the ROW_NUMBER window as the projection named `rank_column`, or
    HIDDEN_RANK when the rank is not selected."""

    limit: int = Field(description="how many rows per partition: rn <= limit")
    partition: tuple[str, ...] = Field(description="the output columns that are the PARTITION BY columns")
    rank_column: str | None = Field(None, description="the output column holding the rank; None: not selected")

    @property
    def key(self) -> tuple[str, ...]:
        """The result's primary key: the partition columns, and the rank column when there is more than one row."""
        return self.partition + ((self.rank_column,) if self.limit > 1 and self.rank_column else ())


class OverWindow(Frozen):
    """Aggregates OVER (PARTITION BY ... ORDER BY <event time> ROWS|RANGE BETWEEN ... PRECEDING AND CURRENT ROW) over
    one stream (sql/over.py; on Spark adapters/spark/over.py): one output row per input row, in event-time order
    once the watermark passes it. select_sql holds each aggregate's window as the projection it names."""

    partition: tuple[str, ...] = Field(description="the PARTITION BY columns of the source; () for one partition")
    order: str = Field(description="the ORDER BY column: the source's event time")
    frame: Literal["rows", "range"] = Field(description="ROWS: the current row and `preceding` rows before it; "
                                                        "RANGE: the rows whose time is at most `preceding` ms "
                                                        "before the current row's (its peers included)")
    preceding: int = Field(description="ROWS: how many rows before the current one; RANGE: milliseconds")


HIDDEN_RANK = "__rank"
"""The name of the ROW_NUMBER projection in a top-N query's select_sql when the SELECT does not select the rank."""


class Nested(Frozen):
    """A subquery in FROM or JOIN (or a CTE) that aggregates a window, read by the query's SELECT as the table
    `name` (sql/nested.py): its own SELECT over real relations, run in the same Spark query (one checkpoint)."""

    alias: str = Field(description="its alias in the query's SELECT")
    name: str = Field(description="the fqn of the table the query's SELECT reads in its place")
    select_sql: str = Field(description="its normalized SELECT, over fully qualified relations")
    sources: tuple[Source, ...] = Field(description="the relations it reads (also in the query's sources), in order")
    output_columns: tuple[Column, ...]
    window: Window = Field(description="the window it aggregates")
    key_columns: tuple[str, ...] = Field(description="its GROUP BY columns, by output name")
    window_columns: tuple[str, str] = Field(description="its output columns holding window_start and window_end")
    nested: tuple[Nested, ...] = Field((), description="the windowed aggregation it groups by its window, when it "
                                       "reads one (a subquery in a subquery); its window is then that one's")
    stream_bound: tuple[int, int] | None = Field(None, description="joined with a stream: the stream's event time "
                                                 "lies between its window's end plus these milliseconds (lower, "
                                                 "upper), by the query's conditions (sql/window_bound.py)")


class Stacked(Frozen):
    """A subquery in FROM that aggregates without a window (a GROUP BY, with retractions), read by the query's own
    GROUP BY as the changelog `name` keyed by its groups (sql/stacked.py; Nexmark q4's AVG of MAX): both
    aggregations run in the same Spark query, the outer one retracting the inner one's old rows as they change."""

    alias: str = Field(description="its alias in the query's SELECT")
    name: str = Field(description="the fqn of the changelog the query's SELECT reads in its place")
    select_sql: str = Field(description="its normalized SELECT, over fully qualified relations")
    sources: tuple[Source, ...] = Field(description="the relations it reads (the query's sources, in order)")
    output_columns: tuple[Column, ...]
    key_columns: tuple[str, ...] = Field(description="its GROUP BY columns, by output name: the changelog's key")
    changelog_join: ChangelogJoin | None = Field(None, description="the join it aggregates, if any")


class Expectation(Frozen):
    """A data-quality rule on the rows a query writes: `CONSTRAINT name EXPECT (condition) ON VIOLATION action`.
    A row passes when the condition is TRUE; FALSE or NULL is a violation. Every rule counts the rows that pass
    and fail it in each micro-batch; a row a changelog query deletes is not checked."""

    name: str
    condition: str = Field(description="the boolean condition over the query's result columns, in DeltaStream SQL")
    action: Literal["warn", "drop", "dead_letter", "fail"] = Field(
        description="warn: counted and written; drop: not written; dead_letter: sent to the query's dead-letter topic "
        "with the rule's name and why, not written; fail: the query stops before the micro-batch commits")
    location: Location | None = None


DESERIALIZATION_ERRORS = ("TERMINATE", "IGNORE", "IGNORE_AND_LOG")
"""'source.deserialization.error.handling': a source record that does not decode stops the query, is skipped and
counted, or is sent to the dead-letter topic (dsflow's default where a store keeps dead letters)."""


class Query(Frozen):
    """A continuous query: CREATE STREAM/CHANGELOG/MATERIALIZED VIEW AS SELECT or INSERT INTO ... SELECT."""

    fqn: str
    statement: Literal["csas", "ctas", "insert", "mv", "table"]
    sink: str = Field(description="fqn of the relation written to")
    sources: tuple[Source, ...]
    select_sql: str = Field(description="normalized SELECT with fully qualified relation names")
    output_columns: tuple[Column, ...]
    trigger_interval: str = "1 second"
    trigger: Literal["micro-batch", "realtime"] = Field(
        "micro-batch", description="'trigger': micro-batches every trigger_interval, or Spark's real-time mode "
        "(records processed as they arrive; trigger_interval is then its checkpoint interval; the sink at-least-once)")
    spark_conf: dict[str, str] = Field(default_factory=dict)
    start_position: str = Field("auto", description="override of the change category: auto, checkpoint, carry, "
                                                    "earliest or an epoch-ms timestamp")
    stateful: bool = False
    output_mode: Literal["append", "update"] = Field(
        "append", description="append: every result row once; update: the new value of each changed key")
    key_columns: tuple[str, ...] = Field((), description="output columns forming the sink key; () carries the "
                                                         "source record's key")
    window: Window | None = None
    join_within: str | None = Field(None, description="interval join: how far apart joined events may be")
    watermark_delay: str = Field("5 seconds", description="how late an event may arrive (windows and joins)")
    delivery_guarantee: Literal["at-least-once", "exactly-once"] = "at-least-once"
    deletes: Literal["none", "emit", "drop"] = Field(
        "none", description="a changelog read row by row: 'emit' passes a tombstone, or a row that stops "
        "matching WHERE, on as a delete of its key (changelog and view sinks); 'drop' skips tombstones (streams)")
    temporal_join: TemporalJoin | None = None
    changelog_join: ChangelogJoin | None = None
    join_chain: tuple[IntervalJoin | TemporalJoin | ChainedChangelogJoin, ...] = Field(
        (), description="the joins after the first join, in order, each of the result so far with one more relation: "
        "interval joins of streams (after an interval join only), then temporal joins of changelogs; after a join "
        "of two changelogs (changelog_join), joins of more changelogs")
    top_n: TopN | None = Field(None, description="ROW_NUMBER top-N or deduplication per key (sql/topn.py)")
    over: OverWindow | None = Field(None, description="bounded OVER aggregates, one row per input row (sql/over.py)")
    regular_joins: tuple[RegularJoin, ...] = Field(
        (), description="joins of streams without WITHIN, in order (INNER, on an equality; no event time, no "
        "watermark): Spark keeps every row of their inputs in state, for ever")
    dlq_topic: str | None = Field(None, description="'dlq.topic': the dead-letter topic for malformed source "
                                                    "records (prefixed); None: <topic_prefix><query name>-dlq")
    expectations: tuple[Expectation, ...] = Field((), description="CONSTRAINT ... EXPECT rules, in written order")
    deserialization_errors: Literal["TERMINATE", "IGNORE", "IGNORE_AND_LOG"] | None = Field(
        None, description="'source.deserialization.error.handling'; None: dead letters where the source's store "
                          "keeps them (IGNORE_AND_LOG), else the query stops")
    isolation: Literal["shared", "query"] | None = Field(
        None, description="'runtime.isolation': where it runs, overriding the project's runtime.isolation; None: as "
                          "that says")
    owner: str | None = Field(None, description="the role owning it (declared); None: the default owner, sysadmin")
    functions: tuple[str, ...] = Field((), description="the names of the user-defined functions its SELECT calls")
    views: tuple[str, ...] = Field((), description="the fqns of the views (CREATE VIEW) its SELECT reads, inlined "
                                   "into select_sql (sql/views.py)")
    nested: tuple[Nested, ...] = Field((), description="the windowed aggregations its SELECT reads as subqueries, in "
                                       "order; their sources are the query's, in the same order")
    stacked: Stacked | None = Field(None, description="the aggregation its GROUP BY reads as a subquery "
                                    "(sql/stacked.py); its sources are the query's")
    location: Location | None = None


class View(Frozen):
    """A view: CREATE VIEW name AS SELECT ... (not materialized). Nothing is deployed for it: each query that reads
    it has its SELECT inlined (sql/views.py), so a change to it changes those queries."""

    fqn: str
    select_sql: str = Field(description="its SELECT as written")
    sources: tuple[str, ...] = Field(description="the fqns of the relations and views it reads")
    location: Location | None = None


class Function(Frozen):
    """A user-defined scalar function: CREATE FUNCTION name(params) RETURNS type LANGUAGE PYTHON AS 'module:function'.
    The module is a Python file of the project (load/functions.py); Spark runs it as a pandas UDF."""

    name: str = Field(description="its name in SQL, in lower case")
    parameters: tuple[Column, ...] = Field(description="the declared parameters, in order")
    returns: str = Field(description="the declared SQL result type")
    module: str = Field(description="the dotted module name, resolved from the project root")
    function: str = Field(description="the function's name in its module")
    path: str = Field(description="the module's file, relative to the project root")
    source_hash: str = Field(description="sha256 of the module file's bytes (first 16 hex digits)")
    location: Location | None = None

    @property
    def identity(self) -> dict[str, object]:
        """What a query calling it runs with: its signature, where it is and its code's hash."""
        return {"parameters": [[c.name, c.type] for c in self.parameters], "returns": self.returns,
                "target": f"{self.module}:{self.function}", "source_hash": self.source_hash}


class Datagen(Frozen):
    """A background generator feeding a relation's topic with synthetic records."""

    name: str
    relation: str
    generator: str
    rate: float = 1.0
    count: int | None = None
    seed: int = 0
    location: Location | None = None


ORGANIZATION = "organization"
"""The `on` of a grant of an organization privilege (CREATE_STORE, ...): the organization itself."""

PRIVILEGES: dict[str, tuple[str, ...]] = {
    "organization": ("CREATE_STORE", "CREATE_DATABASE", "CREATE_ROLE", "MANAGE_GRANTS", "MANAGE_USERS", "ALL"),
    "database": ("USAGE", "CREATE", "ALL"),
    "schema": ("USAGE", "CREATE", "ALL"),
    "store": ("USAGE", "ALL"),
    "relation": ("SELECT", "INSERT", "ALL"),
    "query": ("MANAGE", "ALL"),
}
"""The privileges that can be granted on each type of object (docs/access.md); ALL means every one of them."""

BUILTIN_ROLES = ("orgadmin", "sysadmin", "securityadmin", "useradmin", "public")
"""Roles every organization has: they can be inherited, granted privileges and bound to users, not redefined."""

PrivilegeName = Literal["USAGE", "SELECT", "INSERT", "CREATE", "MANAGE", "CREATE_STORE", "CREATE_DATABASE",
                        "CREATE_ROLE", "MANAGE_GRANTS", "MANAGE_USERS", "ALL"]


def object_type(address: str) -> str:
    """The type of object a grant's `on` names: 'organization', or the kind of its address ('relation', ...)."""
    return ORGANIZATION if address == ORGANIZATION else address.partition(".")[0]


class Role(Frozen):
    """A role that privileges are granted to."""

    name: str
    inherits: tuple[str, ...] = ()
    location: Location | None = None


class Grant(Frozen):
    """A privilege on an object, granted to a role."""

    role: str
    privilege: PrivilegeName
    on: str = Field(description="address of the object, e.g. relation.db.schema.name, or 'organization'")
    location: Location | None = None

    @property
    def key(self) -> str:
        return f"{self.role}.{self.privilege.lower()}.{self.on}"


class Binding(Frozen):
    """A user and the roles bound to it (YAML `users:`, SQL GRANT ROLE ... TO USER)."""

    user: str
    roles: tuple[str, ...] = Field((), description="the roles bound to the user, sorted")
    login_password: str | None = Field(None, repr=False, description="the password of the user's login where grants "
                                       "are pushed down to a store with logins (YAML, from env_var()); None: none")
    location: Location | None = None


class Move(Frozen):
    """A `moved:` entry: a deployed resource now declared at another address (like Terraform's moved blocks)."""

    from_address: str = Field(description="the address it had, e.g. relation.default.public.pageviews")
    to_address: str = Field(description="the address it has in the project now")
    location: Location | None = None


class Removal(Frozen):
    """A `removed:` entry: a deployed resource dsflow forgets without deleting it (like Terraform's removed blocks)."""

    address: str = Field(description="the address it was deployed at, e.g. query.default.public.pageviews_copy")
    keep_running: bool = Field(False, description="a query: left running (true) or stopped on its checkpoint")
    location: Location | None = None


class Import(Frozen):
    """An `import:` entry (like Terraform's import blocks): an existing log, table or running query taken into the
    state as it is."""

    address: str = Field(description="the declared stream, changelog, table or query, e.g. "
                                     "relation.default.public.pageviews")
    id: str = Field(description="the log's name on its store (the declaration's topic or stream), the table's "
                    "(DATABASE.SCHEMA.TABLE), or a running query's run folder (its driver's spec.json)")
    location: Location | None = None


class RuntimeSettings(Frozen):
    """Where and how continuous queries run."""

    spark_master: str = "local[2]"
    spark_conf: dict[str, str] = Field(default_factory=dict)
    trigger_interval: str = "1 second"
    trigger: Literal["micro-batch", "realtime"] = Field("micro-batch", description="the queries' trigger unless one "
                                                        "sets 'trigger': micro-batch or realtime (Spark's real-time "
                                                        "mode)")
    delivery_guarantee: Literal["at-least-once", "exactly-once"] = Field(
        "at-least-once", description="the queries' 'delivery.guarantee' unless one sets it; exactly-once applies where "
        "the sink can have it (a stream in a store with transactions; changelogs, views, tables)")
    checkpoint_root: str = ".dsflow/checkpoints"
    async_checkpoint: bool = Field(False, description="stateless queries into a broker write their checkpoint in the "
                                                      "background, next to the next micro-batch")
    isolation: Literal["shared", "query"] = Field("query", description="query: one Spark driver process per query; "
                                                  "shared: queries share long-running Spark applications")
    queries_per_app: int = Field(10, description="shared: at most this many queries per Spark application")
    batches_at_once: int | None = Field(None, description="shared: at most this many of an application's queries "
                                        "run a micro-batch at once (0: no bound; None: 2 per core of the host)")
    standby: bool = Field(True, description="the runtime supervisor keeps a warm standby driver (JVM and Spark session "
                                            "started) that becomes the next dead query-isolation query's driver; kept "
                                            "only while a query runs in its own driver on a local master")


class StateSettings(Frozen):
    """Where the deployed state is kept: one backend and its settings (see docs/state.md)."""

    backend: str = Field("local", description="a name in core/backends.py's registry")
    path: str = Field(".dsflow", description="local folder for run files and checkpoints; local state lives "
                                             "in <path>/state/<env>.json")
    project: str = Field("", description="the project's name: it keys the state in a shared table, and is the "
                                         "default s3 prefix")
    bucket: str | None = Field(None, description="s3: the bucket holding <prefix>/<env>.json")
    prefix: str = Field("", description="s3: key prefix; empty means the project name")
    endpoint_url: str | None = Field(None, description="s3: a non-AWS endpoint such as MinIO or moto")
    region: str | None = Field(None, description="s3: the bucket's region")
    dsn: SecretStr | None = Field(None, description="postgres: libpq connection string; may hold a password")
    table: str = Field("dsflow_state", description="postgres: the state table, [schema.]name")


class Project(Frozen):
    """A whole resolved project for one environment."""

    name: str
    root: str
    environment: str
    default_database: str
    default_schema: str
    default_store: str | None
    state_path: str
    state: StateSettings = Field(default_factory=StateSettings)
    runtime: RuntimeSettings
    stores: tuple[Store, ...] = ()
    schema_registries: tuple[SchemaRegistry, ...] = ()
    topic_prefix: str = Field("", description="the environment's topic_prefix")
    databases: tuple[Database, ...] = ()
    schemas: tuple[Schema, ...] = ()
    relations: tuple[Relation, ...] = ()
    queries: tuple[Query, ...] = ()
    functions: tuple[Function, ...] = Field((), description="the CREATE FUNCTION declarations")
    views: tuple[View, ...] = Field((), description="the CREATE VIEW declarations")
    datagens: tuple[Datagen, ...] = ()
    roles: tuple[Role, ...] = ()
    grants: tuple[Grant, ...] = ()
    bindings: tuple[Binding, ...] = Field((), description="users and their roles")
    moves: tuple[Move, ...] = Field((), description="the `moved:` entries of the project's YAML files")
    removals: tuple[Removal, ...] = Field((), description="the `removed:` entries of the project's YAML files")
    imports: tuple[Import, ...] = Field((), description="the `import:` entries of the project's YAML files")

    @cached_property
    def relation_index(self) -> tuple[tuple[Relation, ...], dict[str, Relation]]:
        """The relations by fqn (the first of a name wins), with the tuple it was built from.

        Cached on the instance (a `cached_property` is no pydantic field, so equality, `model_dump`
        and the JSON are unchanged). `model_copy` copies the cache along, so `relation` checks
        that it was built from this instance's `relations` tuple and rebuilds it if not.
        """
        index: dict[str, Relation] = {}
        for r in self.relations:
            index.setdefault(r.fqn, r)
        return self.relations, index

    def relation(self, fqn: str) -> Relation | None:
        """The relation named `fqn`: a dict lookup (a linear scan made planning O(n^2) at 10,000 relations)."""
        built_from, index = self.relation_index
        if built_from is not self.relations:  # a model_copy(update={"relations": ...}) carried a stale cache
            del self.__dict__["relation_index"]
            built_from, index = self.relation_index
        return index.get(fqn)

    def store(self, name: str) -> Store | None:
        return next((s for s in self.stores if s.name == name), None)

    def schema_registry(self, name: str | None) -> SchemaRegistry | None:
        return next((r for r in self.schema_registries if r.name == name), None) if name else None

    def dlq_topic(self, query: Query) -> str:
        """Where malformed source records of `query` go: 'dlq.topic', else <topic_prefix><query name>-dlq."""
        return query.dlq_topic or f"{self.topic_prefix}{query.fqn.rsplit('.', 1)[-1]}-dlq"
