"""Raw YAML shapes ("unparsed"): exactly what users write, checked field by field.

`extra="forbid"` makes a typo in a key an error with its location.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Raw(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RawDefaults(Raw):
    """Names that unqualified SQL identifiers resolve against."""

    database: str = Field("default", description="database for unqualified relation names")
    schema_: str = Field("public", alias="schema", description="schema for unqualified relation names")
    store: str | None = Field(None, description="store for relations that name none")


class RawState(Raw):
    """Where the deployed state is kept."""

    backend: Literal["local"] = "local"
    path: str = ".dsflow"


class RawRuntime(Raw):
    """Spark settings for continuous queries."""

    spark_master: str = "local[2]"
    spark_conf: dict[str, str] = Field(default_factory=dict)
    trigger_interval: str = "1 second"
    checkpoint_root: str | None = None


class RawEnvironment(Raw):
    """Per-environment values."""

    vars: dict[str, Any] = Field(default_factory=dict)
    topic_prefix: str = Field("", description="prepended to every topic name, so environments can share a broker")


class RawProjectConfig(Raw):
    """dsflow.yml."""

    name: str
    version: int = 1
    default: RawDefaults = Field(default_factory=RawDefaults)
    state: RawState = Field(default_factory=RawState)
    runtime: RawRuntime = Field(default_factory=RawRuntime)
    default_environment: str = "dev"
    environments: dict[str, RawEnvironment] = Field(default_factory=lambda: {"dev": RawEnvironment()})


class RawStore(Raw):
    """A store: a connection to a streaming system."""

    name: str
    type: Literal["kafka"]
    bootstrap_servers: str = Field(description="host:port[,host:port]")
    properties: dict[str, str | int | float | bool] = Field(default_factory=dict)
    description: str = ""


class RawDatabase(Raw):
    """A database and its schemas."""

    name: str
    schemas: list[str] = Field(default_factory=lambda: ["public"])
    description: str = ""


class RawGrant(Raw):
    """`privilege` on `on` (an address such as relation.db.schema.name or a bare relation name)."""

    privilege: Literal["USAGE", "SELECT", "INSERT", "CREATE", "ALL", "usage", "select", "insert", "create", "all"]
    on: str


class RawRole(Raw):
    """A role with the roles it inherits from and its grants."""

    name: str
    inherits: list[str] = Field(default_factory=list)
    grants: list[RawGrant] = Field(default_factory=list)


class RawDatagen(Raw):
    """A generator that feeds a relation's topic."""

    name: str
    relation: str
    generator: str = "columns"
    rate: float = 1.0
    count: int | None = None
    seed: int = 0


class RawObjectsFile(Raw):
    """Any YAML file other than dsflow.yml."""

    stores: list[RawStore] = Field(default_factory=list)
    databases: list[RawDatabase] = Field(default_factory=list)
    roles: list[RawRole] = Field(default_factory=list)
    datagen: list[RawDatagen] = Field(default_factory=list)
