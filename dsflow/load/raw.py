"""Raw YAML shapes ("unparsed"): exactly what users write, checked field by field.

`extra="forbid"` makes a typo in a key an error with its location.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from dsflow.core.backends import SETTINGS, problems
from dsflow.core.access import ACCESS_NAME
from dsflow.core.model import RuntimeSettings, StoreType

ENVIRONMENT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
"""An environment's name: it names files (`<env>.json` state, the load cache), so no `/`, `..` or control
characters."""


def checked_folder(value: str | None) -> str | None:
    """A folder setting (state.path, runtime.checkpoint_root): not empty, and no NUL or other control character,
    which no file system path may hold."""
    if value is not None and (not value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value)):
        raise ValueError("a folder must be a non-empty path without control characters (NUL, newline, ...)")
    return value


def checked_object_name(value: str) -> str:
    """A database or schema name: part of every relation's `db.schema.name`, so no `.`, not empty or blank, and no
    control character."""
    if not value.strip() or "." in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("a database or schema name must not be empty or hold a '.' or a control character")
    return value


ObjectName = Annotated[str, AfterValidator(checked_object_name)]


class Raw(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class RawDefaults(Raw):
    """Names that unqualified SQL identifiers resolve against."""

    database: ObjectName = Field("default", description="database for unqualified relation names")
    schema_: ObjectName = Field("public", alias="schema", description="schema for unqualified relation names")
    store: str | None = Field(None, description="store for relations that name none")
    view_store: str | None = Field(None, description="store (one that holds views) for materialized views that "
                                                     "name none; unset: SQLite")


class RawState(Raw):
    """Where the deployed state is kept (docs/state.md). bucket, prefix, endpoint_url, region and dsn may use
    {{ env_var('NAME') }} and {{ var('name') }}."""

    backend: str = Field("local", description="local file, S3 object or PostgreSQL table (core/backends.py)")
    path: str = Field(".dsflow", description="local folder for state (local backend), run files and checkpoints")
    bucket: str | None = Field(None, description="s3: the bucket; state is the object <prefix>/<env>.json")
    prefix: str | None = Field(None, description="s3: key prefix (default: the project name)")
    endpoint_url: str | None = Field(None, description="s3: endpoint of an S3-compatible store (MinIO, moto)")
    region: str | None = Field(None, description="s3: the bucket's region")
    dsn: str | None = Field(None, description="postgres: libpq DSN; put the password in {{ env_var('NAME') }}")
    table: str | None = Field(None, pattern=r"^([A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*$",
                              description="postgres: state table, [schema.]name (default dsflow_state)")

    _path = field_validator("path")(checked_folder)

    @model_validator(mode="after")
    def _settings_match_backend(self) -> RawState:
        found = problems(self.backend, {key for key in SETTINGS if getattr(self, key) is not None})
        if found:
            raise ValueError("; ".join(found))
        return self


def _runtime_default(name: str) -> Any:
    """The default of a runtime setting: the model's (core/model.py RuntimeSettings), its one place."""
    return RuntimeSettings.model_fields[name].default


class RawRuntime(Raw):
    """Spark settings for continuous queries."""

    spark_master: str = _runtime_default("spark_master")
    spark_conf: dict[str, str] = Field(default_factory=dict)
    trigger_interval: str = _runtime_default("trigger_interval")
    trigger: Literal["micro-batch", "realtime"] = Field(_runtime_default("trigger"), description="the queries' "
                                                        "trigger unless one sets 'trigger' (docs/project.md)")
    delivery_guarantee: Literal["at-least-once", "exactly-once"] = Field(
        _runtime_default("delivery_guarantee"), description="the queries' 'delivery.guarantee' unless one sets it "
        "(docs/project.md)")
    checkpoint_root: str | None = Field(None, description="default: <state path>/checkpoints")
    isolation: Literal["shared", "query"] = Field(_runtime_default("isolation"), description="query: one Spark "
                                                  "driver per query; shared: queries share long-running Spark "
                                                  "applications (docs/runtime.md)")
    queries_per_app: int = Field(_runtime_default("queries_per_app"), ge=1,
                                 description="shared: at most this many queries per Spark application")
    batches_at_once: int | None = Field(_runtime_default("batches_at_once"), ge=0, description="shared: at most this "
                                        "many of an application's queries run a micro-batch at once (0: no bound; "
                                        "default 2 per core)")
    standby: bool = Field(_runtime_default("standby"), description="the runtime supervisor keeps a warm standby "
                          "driver for restarts of query-isolation queries on a local master (docs/runtime.md)")
    async_checkpoint: bool = Field(_runtime_default("async_checkpoint"), description="stateless queries into a broker "
                                   "write their checkpoint in the background, next to the next micro-batch "
                                   "(docs/project.md)")

    _checkpoint_root = field_validator("checkpoint_root")(checked_folder)


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

    @field_validator("environments")
    @classmethod
    def _environment_names(cls, value: dict[str, RawEnvironment]) -> dict[str, RawEnvironment]:
        for name in value:
            if not isinstance(name, str) or not ENVIRONMENT_NAME.fullmatch(name):
                raise ValueError(f"environment name {name!r} must be letters, digits, '_', '.' or '-' (at most 100, "
                                 "not starting with '.' or '-'): it names the state file")
        return value


class RawStore(Raw):
    """A store: a connection to a streaming system."""

    name: str
    type: StoreType
    bootstrap_servers: str | None = Field(None, description="a broker's host:port[,host:port] (required by its kind)")
    properties: dict[str, str | int | float | bool] = Field(default_factory=dict)
    description: str = ""
    schema_registry: str | None = Field(None, description="name of a schema registry (schema_registries)")
    owner: AccessName | None = Field(None, description="the role owning the store (default: sysadmin)")


class RawSchemaRegistry(Raw):
    """A Confluent Schema Registry (REST API). username/password: HTTP basic auth, the password from env_var()."""

    name: str
    url: str = Field(pattern=r"^https?://", description="http(s)://host:port")
    username: str | None = Field(None, description="basic auth user or API key")
    password: str | None = Field(None, description="basic auth password or API secret: {{ env_var('NAME') }}")
    description: str = ""


def checked_access_name(value: str) -> str:
    """A role or user name: it is part of addresses (`role.<name>`, `binding.<name>`, grant keys), so letters,
    digits, '_', '-', '@' and '.' after the first character only."""
    if not ACCESS_NAME.fullmatch(value):
        raise ValueError("a role or user name must start with a letter, digit or '_' and hold only letters, digits, "
                         "'_', '-', '.' and '@' (at most 100)")
    return value


AccessName = Annotated[str, AfterValidator(checked_access_name)]


class RawSchema(Raw):
    """A schema written as a mapping, to declare its owner."""

    name: ObjectName
    owner: AccessName | None = Field(None, description="the role owning the schema (default: sysadmin)")


UNION_TAGS = ("<schema name>", "<schema mapping>")
"""The tags of SchemaEntry's branches: pydantic puts them in an error's location; load/objects.py drops them."""
SchemaEntry = Annotated[Union[Annotated[ObjectName, Tag(UNION_TAGS[0])], Annotated[RawSchema, Tag(UNION_TAGS[1])]],
                        Discriminator(lambda v: UNION_TAGS[1] if isinstance(v, dict) else UNION_TAGS[0])]
"""A schema: its name, or {name, owner} (one branch checked, so one error per wrong entry)."""


class RawDatabase(Raw):
    """A database and its schemas (names, or {name, owner} mappings)."""

    name: ObjectName
    # mypy infers list[str] for the lambda, not list[SchemaEntry] (which a name is)
    schemas: list[SchemaEntry] = Field(default_factory=lambda: ["public"])  # type: ignore[arg-type]
    description: str = ""
    owner: AccessName | None = Field(None, description="the role owning the database (default: sysadmin)")


class RawGrant(Raw):
    """`privilege` on `on`: an address (relation.db.schema.name, database.db, query.q, ...), a bare relation name,
    or `organization`. Which privileges apply to which objects: docs/access.md."""

    privilege: str = Field(description="USAGE, CREATE, SELECT, INSERT, MANAGE, CREATE_STORE, CREATE_DATABASE, "
                                       "CREATE_ROLE, MANAGE_GRANTS, MANAGE_USERS or ALL (any case)")
    on: str


class RawRole(Raw):
    """A role with the roles it inherits from and its grants."""

    name: AccessName
    inherits: list[str] = Field(default_factory=list)
    grants: list[RawGrant] = Field(default_factory=list)


class RawUser(Raw):
    """A user and the roles bound to it (the identity itself lives in the server's identity store)."""

    name: AccessName
    roles: list[str] = Field(default_factory=list)
    login_password: str | None = Field(None, description="the password of the user's login where a store makes "
                                       "logins of users (grants pushed down); always from env_var()")


class RawDatagen(Raw):
    """A generator that feeds a relation's topic."""

    name: str
    relation: str
    generator: str = "columns"
    rate: float = 1.0
    count: int | None = None
    seed: int = 0


class RawMove(Raw):
    """A `moved:` entry: a deployed relation or query now declared at another address (docs/project.md)."""

    from_: str = Field(alias="from", description="the address it was deployed at, e.g. relation.db.schema.name")
    to: str = Field(description="the address it has in the project now")


class RawRemoval(Raw):
    """A `removed:` entry: a deployed relation or query dsflow stops managing, without deleting it (docs/project.md)."""

    address: str = Field(description="the address it was deployed at, e.g. relation.db.schema.name")
    keep_running: bool = Field(False, description="a query: true leaves it running, false (the default) stops it on "
                               "its checkpoint; a relation's topic, stream or table is always kept")


class RawImport(Raw):
    """An `import:` entry: an existing log or table a declared relation names, or a running query, taken into the
    state as it is."""

    to: str = Field(description="the declared relation or query, e.g. relation.db.schema.name, schema.name or "
                                "query.db.schema.name")
    id: str | None = Field(None, description="the log's name on its store (a topic, a stream) or the table's "
                           "([DATABASE.]SCHEMA.TABLE): what the declaration names when left out, and it must be that; "
                           "a running query's run folder (required)")


class RawObjectsFile(Raw):
    """Any YAML file other than dsflow.yml."""

    moved: list[RawMove] = Field(default_factory=list)
    removed: list[RawRemoval] = Field(default_factory=list)
    imports: list[RawImport] = Field(default_factory=list, alias="import")

    stores: list[RawStore] = Field(default_factory=list)
    schema_registries: list[RawSchemaRegistry] = Field(default_factory=list)
    databases: list[RawDatabase] = Field(default_factory=list)
    roles: list[RawRole] = Field(default_factory=list)
    users: list[RawUser] = Field(default_factory=list)
    datagen: list[RawDatagen] = Field(default_factory=list)
