"""What a query driver needs to run one continuous query: frozen, JSON-serializable."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from dsflow.errors import DsflowError

DRIVER_MODULE = "dsflow.adapters.spark.driver"


def driver_identity(run_dir: str | Path | None):
    """The identity of the process running the query whose spec is `run_dir`/spec.json (adapters/process.py): a
    cold driver or a standby that took the query over. Without a run directory (a state from before 2025), only a
    command line naming the driver module tells."""
    from dsflow.adapters.process import Identity

    folder = Path(run_dir) if run_dir else None
    legacy = (DRIVER_MODULE, str(folder / "spec.json")) if folder is not None else (DRIVER_MODULE,)
    return Identity(folder, "driver", legacy)


def misfit(master: str, conf: dict[str, str], spec_master: str, spec_conf: dict[str, str]) -> str | None:
    """Why a spec cannot run in a session already built for this master and conf (a warm standby's, a driver's
    parked between two versions), or None."""
    if spec_master != master:
        return f"its Spark master {spec_master} is not {master}, the one this session runs on"
    if dict(spec_conf) != dict(conf):
        return "its Spark conf is not the one this session was built with"
    return None


ENV_REF = "@env:"
"""A client setting written '@env:NAME' takes its value from the driver's environment (secrets stay off disk)."""

LOG = "kafka"
"""The kind of a source or sink whose spec names none: specs written before kinds existed read a Kafka topic."""
RECORD_TIMESTAMP = "__kafka_ts"
SOURCE_TIMESTAMP = "__source_ts"
"""A real-time query's result column: its source record's timestamp, written as a header (core/latency.py)."""
"""The source view's column of each record's own timestamp (the fallback event time). Its name is kept as first
written: it is a column of the queries' Spark plans and of their checkpointed state."""


def _sink_kind(value: str) -> str:
    from dsflow.adapters.spark.facets import sink_kind

    return sink_kind(value)


class SourceSpec(BaseModel):
    """One source (a log, a table, a change stream) read into a temporary view."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view: str
    topic: str
    client_config: dict[str, str]
    schema_ddl: str = Field(description="Spark DDL of the JSON value, e.g. 'id BIGINT, name STRING'")
    starting_position: str = "earliest"
    starting_offsets: dict[str, int | str] | None = Field(None, description="carried from a previous version "
                                                          "(offsets per partition, or positions per shard)")
    starting_timestamp: int | None = Field(None, description="epoch ms to replay from")
    ending_offsets: dict[str, int] | None = Field(None, description="offsets per partition read no further than (a "
                                                  "blue/green deployment's run to a cut: core/bluegreen.py)")
    ending_offsets_file: str | None = Field(None, description="a JSON file of offsets per topic that, once "
                                            "written, replaces ending_offsets (the bound moved to the cut while the "
                                            "query runs)")
    event_time: str | None = Field(None, description="Spark SQL giving the event time (column __ts); "
                                                     "None: the source needs no event time")
    watermark_delay: str | None = Field(None, description="watermark on __ts, e.g. '5000 milliseconds'")
    window: list[str] | None = Field(None, description="[size, slide] of window(__ts) as column __window")
    session_gap: str | None = Field(None, description="the gap of session_window(__ts) as column __window")
    kind: str = Field(LOG, description="the data source, one a store's spark facet reads (adapters/spark/facets.py; "
                                       "client_config holds the store's connection settings)")
    options: dict[str, str] = Field(default_factory=dict, description="the data source's own options (a change "
                                    "stream: database, tables, slot, publication; a table: its location)")
    gaps: Literal["fail", "count"] = Field("fail", description="a log: what a read does with offsets the broker "
                                           "holds no record for (Relation.read_gaps)")
    changelog_key: dict[str, str] = Field(default_factory=dict, description="a changelog: its primary key "
                                          "columns and Spark types; a null value (tombstone) is a delete of the key")
    lookup: bool = Field(False, description="read as a bounded table at every micro-batch (a processing-time "
                         "temporal join: adapters/spark/lookup.py)")
    value_format: str = Field("json", description="json (from_json on the JVM, or parsed by the reader into __value "
                              "when formats.value_layout says so) or a format the reader decodes into __value "
                              "(avro, string, long, int, double, bytes)")
    value_columns: list[list[str]] = Field(default_factory=list, description="[name, SQL type] of the value")
    registry: dict[str, str] = Field(default_factory=dict, description="schema.registry.* settings (avro)")
    dlq_topic: str | None = Field(None, description="dead-letter topic for records that do not decode")
    key_format: str | None = Field(None, description="long, int, double: binary keys, read as decimal text; "
                                   "avro, protobuf: Confluent wire-format keys, read as text")
    keep_position: bool = Field(False, description="the view keeps each record's partition and offset (__partition, "
                                "__offset): a query's DEAD LETTER expectations name them")
    keep_timestamp: bool = Field(False, description="the view keeps each record's timestamp (__kafka_ts) without "
                                 "an event time: a real-time query carries it to its sink (core/latency.py)")
    on_error: Literal["TERMINATE", "IGNORE", "IGNORE_AND_LOG"] | None = Field(
        None, description="'source.deserialization.error.handling': a record that does not decode stops the query, "
        "is skipped and counted, or goes to dlq_topic; None: dlq_topic when set")


class ExpectationSpec(BaseModel):
    """One expectation of the query (core/model.py Expectation), its condition in Spark SQL over the result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    condition: str = Field(description="Spark SQL over the query's result columns; TRUE passes")
    action: Literal["warn", "drop", "dead_letter", "fail"]


class SinkSpec(BaseModel):
    """Where a query writes: a log (topic, stream), a table, a materialized view's table, or the terminal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = Field(description="the topic or stream, the table's location, or the view's table")
    client_config: dict[str, str]
    columns: list[str]
    kind: Annotated[str, AfterValidator(_sink_kind)] = Field(LOG, description="the writer, one a store's spark "
                                                             "facet writes (adapters/spark/facets.py), or console")
    output_mode: Literal["append", "update"] = "append"
    key_columns: list[str] = Field(default_factory=list, description="a log: the key is made of these columns "
                                   "(else the source key is carried); a view or table: upsert on them (else append)")
    database: str | None = Field(None, description="the file of a view kept by dsflow")
    options: dict[str, str] = Field(default_factory=dict, description="a table or a view in a store: the table's "
                                    "options (topic is its location or name; client_config the store's settings)")
    value_format: str = Field("json", description="a log: json (to_json on the JVM), or a format the writer "
                              "serializes the value struct in (avro, string, long, int, double, bytes)")
    value_schema: str | None = Field(None, description="avro: the schema registered under value_subject")
    value_subject: str | None = None
    registry: dict[str, str] = Field(default_factory=dict, description="schema.registry.* settings (avro)")
    key_format: str | None = Field(None, description="long, int, double: keys written as binary numbers; avro, "
                                   "protobuf: Confluent wire-format keys of key_schema")
    key_schema: str | None = Field(None, description="avro/protobuf keys: the schema registered under key_subject")
    key_subject: str | None = None
    exactly_once: bool = Field(False, description="a Kafka stream written with 'delivery.guarantee' = "
                               "'exactly-once': each task's records in a transaction with the batch id "
                               "(adapters/kafka/transactions.py)")
    declared_at: str | None = Field(None, description="where the query is declared (file:line), for errors")


class TemporalSpec(BaseModel):
    """A stream joined with a changelog as of each stream record's event time (adapters/spark/temporal.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view: str = Field(description="the joined view: __key and one struct column per side, named by its alias")
    stream_view: str
    changelog_view: str
    stream_alias: str
    changelog_alias: str
    side: Literal["inner", "left"]
    stream_keys: list[str]
    changelog_keys: list[str]
    stream_ddl: str
    changelog_ddl: str


class ChangelogStepSpec(BaseModel):
    """One more changelog joined after a join of changelogs (adapters/spark/changelog_join.py): the rows so far,
    keyed by their output key, are the left side."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    right_view: str
    right_alias: str
    side: Literal["inner", "left", "full"]
    keyed_by_left: bool = Field(description="output rows keep the rows' output key, else [that key, the right's]")
    left_relations: list[str] = Field(description="per ON column of the rows so far, the alias of its relation")
    left_keys: list[str] = Field(description="the rows' ON columns (fields of the struct column left_relations[i])")
    right_keys: list[str] = Field(description="the changelog's ON columns, equal to left_keys in order")
    right_pk: list[str]
    right_ddl: str


class ChangelogJoinSpec(BaseModel):
    """Two changelogs joined (adapters/spark/changelog_join.py): the two stateful stages read the two source views
    and make the view `view` (one struct column per side, named by its alias, __alive and __okey); each of `steps`
    joins one more changelog to those rows with two more stages, the last making `view`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view: str
    left_view: str
    right_view: str
    left_alias: str
    right_alias: str
    side: Literal["inner", "left", "full"]
    keyed_by_left: bool = Field(description="output rows are keyed by the left's primary key, else by both sides'")
    left_keys: list[str] = Field(description="the left's ON columns")
    right_keys: list[str] = Field(description="the right's ON columns, equal to left_keys in order")
    left_pk: list[str]
    right_pk: list[str]
    streams: bool = Field(False, description="both sides are streams: left_pk and right_pk are their records' place "
                          "(__partition, __offset), and no record is deleted")
    left_ddl: str
    right_ddl: str
    steps: list[ChangelogStepSpec] = Field(default_factory=list)


class ChainStepSpec(BaseModel):
    """One temporal join of a chain (adapters/spark/join_chain.py): the rows so far joined with one changelog."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    changelog_view: str
    changelog_alias: str
    side: Literal["inner", "left"]
    key_alias: str = Field(description="the earlier relation whose columns are equated with the changelog's key")
    stream_keys: list[str] = Field(description="its columns, in the order of changelog_keys")
    changelog_keys: list[str]
    changelog_ddl: str
    chained: bool = Field(description="its rows come from an earlier join (not late: joined as they arrive or when "
                                      "the watermark reaches them); else from the stream's view (late rows dropped)")


class JoinChainSpec(BaseModel):
    """A join of more than two relations (adapters/spark/join_chain.py): the first join's rows (`first_sql`: __key,
    __ts and one struct column per relation, named by its alias), then each step's temporal join, make `view`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view: str
    first_sql: str
    steps: list[ChainStepSpec]
    horizon_ms: int = Field(0, description="how far behind the watermark a joined row from an interval join may be: "
                                           "changelog versions are kept that far back")


class RetractSpec(BaseModel):
    """An aggregation of a changelog, with retractions (adapters/spark/retract.py): select_sql gives one row per
    source change (__pk, __offset, __keep, __g0.., __a0..); the two stateful stages make the view `view`
    (__g0.., __r0.., __keep) that post_sql reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view: str
    groups: int = Field(description="how many GROUP BY items (__g0..)")
    aggregates: list[str] = Field(description="per __r<i>: count_star, count, count_distinct, sum, avg, min, max")
    post_sql: str = Field(description="the query's projections (and HAVING, into __keep) over `view`")


class StackedSpec(BaseModel):
    """An aggregating subquery read by the query's GROUP BY (adapters/spark/stacked.py): select_sql gives its
    per-change rows (over the joined view of `changelog_join`, if any), `retract` aggregates them, and its result
    becomes the changelog view `view` (its columns, __offset, __deleted) that the query's own stages read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view: str
    select_sql: str
    retract: RetractSpec
    changelog_join: ChangelogJoinSpec | None = None


class TopNSpec(BaseModel):
    """A ROW_NUMBER top-N per key (adapters/spark/topn.py): select_sql gives one row per source record (__p, __o,
    __part, __off, the output columns but the rank); the stateful stage ranks them per __p and makes the result
    (the output columns, the rank at its place, __keep)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: int
    columns: list[str] = Field(description="the output columns, the rank (if selected) among them")
    rank_column: str | None = Field(description="the output column holding the rank; None: not selected")
    changelog: bool = Field(False, description="the source is a changelog: rows are ranked with their updates and "
                                               "deletes (two stages), ties by primary key")
    descending: list[bool] = Field(description="per ORDER BY item")
    nulls_first: list[bool] = Field(description="per ORDER BY item")


class OverSpec(BaseModel):
    """Bounded OVER aggregates (adapters/spark/over.py): select_sql gives one row per source record (__p, __ts,
    __part, __off, __a<i> and __f<i> per aggregate, the other output columns); the stateful stage writes each once
    the watermark passes it, with its aggregates."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    frame: Literal["rows", "range"]
    preceding: int = Field(description="ROWS: rows before the current one; RANGE: milliseconds before its time")
    aggregates: list[dict[str, str]] = Field(description="per __a<i>: function (sum, avg, min, max, count, "
                                             "count_star, count_distinct) and type (its column's Spark type)")
    columns: list[tuple[str, int | None]] = Field(description="the output columns in order: (name, the index of its "
                                                  "aggregate, or None for a column of the per-record SELECT)")


class FunctionSpec(BaseModel):
    """A user-defined function the query calls (adapters/spark/udfs.py registers it before the SELECT is planned)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    path: str = Field(description="the module's file, absolute")
    module: str
    function: str
    parameters: list[str] = Field(description="the parameters' SQL types (each argument is cast to it)")
    returns: str = Field(description="the SQL result type")
    source_hash: str


class QuerySpec(BaseModel):
    """A continuous query ready to run in a Spark driver."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str
    master: str
    spark_conf: dict[str, str] = Field(default_factory=dict)
    checkpoint: str
    status_path: str
    trigger_interval: str
    sources: list[SourceSpec]
    sink: SinkSpec
    select_sql: str = Field(description="Spark SQL over the source views, with a __key column carried through")
    temporal: TemporalSpec | None = None
    retract: RetractSpec | None = None
    changelog_join: ChangelogJoinSpec | None = None
    chain: JoinChainSpec | None = None
    top_n: TopNSpec | None = None
    over: OverSpec | None = None
    stacked: StackedSpec | None = None
    expectations: list[ExpectationSpec] = Field(default_factory=list, description="checked on every result row "
                                                "(adapters/spark/expectations.py)")
    functions: list[FunctionSpec] = Field(default_factory=list, description="the user-defined functions it calls")
    realtime: bool = Field(False, description="Spark's real-time mode ('trigger' = 'realtime'): sources and sink "
                           "through Spark's own connector, trigger_interval its checkpoint interval "
                           "(adapters/spark/realtime.py)")
    async_checkpoint: bool = Field(False, description="write the checkpoint's offset and commit logs in the background "
                                                      "(Spark's async progress tracking; stateless sinks that tolerate "
                                                      "replays only)")


def secret_refs(spec: QuerySpec) -> dict[tuple[int, str, str], str]:
    """Where the spec names a secret: {(part, field, setting): NAME} for each '@env:NAME' value, part 0..n-1 its
    sources in order and n its sink, field 'client_config' or 'registry'."""
    return {place: value[len(ENV_REF):] for place, value in _settings(spec).items() if value.startswith(ENV_REF)}


def restart_env(recorded: QuerySpec, fresh: QuerySpec | None, stores: list[str], query: str) -> dict[str, str]:
    """The environment a driver restarted on its `recorded` spec needs: each secret the recorded spec names, with
    the value the project gives now at the same place in `fresh` (the query's spec made again from the project,
    secrets in clear; None when the query left the project files). `stores` names the store of each part (its
    sources', then its sink's). DSF-E275 naming the store and the setting when the project no longer gives one, so
    a driver never starts without it (it would connect with an empty password)."""
    now = _settings(fresh) if fresh is not None else {}
    env: dict[str, str] = {}
    missing: list[str] = []
    for (part, field, key), name in sorted(secret_refs(recorded).items()):
        value = now.get((part, field, key))
        if value is not None and not value.startswith(ENV_REF):
            env[name] = value
            continue
        store = f"store '{stores[part]}' " if part < len(stores) else ""
        missing.append(f"{store}{'schema registry ' if field == 'registry' else ''}setting {key}")
    if missing:
        why = ("its store's settings changed since the query was applied" if fresh is not None
               else "the query is no longer in the project files")
        raise DsflowError("DSF-E275", f"query {query} cannot be restarted on its recorded spec: the project as loaded "
                          f"now gives no value for {', '.join(missing)}, a secret never written to disk ({why})",
                          hint="apply the project again (`dsflow apply`): it starts or stops the query with the "
                               "settings as they are now")
    return env


def _settings(spec: QuerySpec) -> dict[tuple[int, str, str], str]:
    parts = [*spec.sources, spec.sink]
    return {(index, field, key): value for index, part in enumerate(parts)
            for field in ("client_config", "registry") for key, value in getattr(part, field).items()}
