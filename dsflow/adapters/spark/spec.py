"""What a query driver needs to run one continuous query: frozen, JSON-serializable."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ENV_REF = "@env:"
"""A client setting written '@env:NAME' takes its value from the driver's environment (secrets stay off disk)."""


class SourceSpec(BaseModel):
    """One Kafka topic read into a temporary view."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view: str
    topic: str
    client_config: dict[str, str]
    schema_ddl: str = Field(description="Spark DDL of the JSON value, e.g. 'id BIGINT, name STRING'")
    starting_position: str = "earliest"
    starting_offsets: dict[str, int] | None = Field(None, description="carried from a previous version")
    starting_timestamp: int | None = Field(None, description="epoch ms to replay from")
    event_time: str | None = Field(None, description="Spark SQL giving the event time (column __ts); "
                                                     "None: the source needs no event time")
    watermark_delay: str | None = Field(None, description="watermark on __ts, e.g. '5000 milliseconds'")
    window: list[str] | None = Field(None, description="[size, slide] of window(__ts) as column __window")
    kind: str = Field("kafka", description="the data source: kafka, or postgres_cdc (a table's change events; "
                                           "client_config holds the store's connection settings)")
    options: dict[str, str] = Field(default_factory=dict, description="postgres_cdc: database, schema, table, "
                                    "slot, publication")


class SinkSpec(BaseModel):
    """Where a query writes: a Kafka topic, a materialized view's SQLite table, or the terminal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = Field(description="the Kafka topic, or the view's table")
    client_config: dict[str, str]
    columns: list[str]
    kind: Literal["kafka", "sqlite", "console", "delta", "snowflake"] = "kafka"
    output_mode: Literal["append", "update"] = "append"
    key_columns: list[str] = Field(default_factory=list, description="Kafka: the key is made of these columns "
                                   "(else the source key is carried); SQLite: upsert on them (else append)")
    database: str | None = Field(None, description="SQLite file of a view")
    options: dict[str, str] = Field(default_factory=dict, description="delta, snowflake: the table's options "
                                    "(topic is its location; client_config the store's settings)")


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
