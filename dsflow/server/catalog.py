"""The caller's view of one project environment: stores, databases, schemas, relations, queries and lineage.

Pure: the caller passes the loaded project, the deployed state and the status entries in. What exists is what is
DEPLOYED (the state); the project model fills in what a deployed record does not hold. `full_catalog` builds the
whole catalog once; `visible` filters it for one user with the access model's `can_see`.

    inputs = Inputs(loaded.project, state, operations.status(loaded, with_dead_letters=False))
    catalog_for(inputs, access, user).to_json()       # GET /catalog
    lineage_for(inputs, access, user).model_dump()    # GET /lineage
    full_catalog(inputs).relation(address)            # None -> 404; not access.can_see(...) -> 403 with
    denial(access, user, address)                     #   this message (names the missing privilege)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.access import AccessModel, Privilege, records_of
from dsflow.core.address import Address, Kind
from dsflow.core.model import Project
from dsflow.core.state import DeployedResource, State


class Visibility(Protocol):
    """What the catalog needs of dsflow.core.access.AccessModel."""

    def can_see(self, user: str, address: str) -> bool: ...


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CatalogStore(_Out):
    """A deployed store; its settings (which may hold secrets) are not shown."""

    address: str
    name: str
    type: str
    description: str = ""
    schema_registry: str | None = None
    owner: str = Field("sysadmin", description="the owner role: declared, else the owner of the namespace it "
                                               "lives in, else sysadmin")


class CatalogDatabase(_Out):
    """A deployed database."""

    address: str
    name: str
    description: str = ""
    owner: str = "sysadmin"


class CatalogSchema(_Out):
    """A deployed schema: `name` is database.schema."""

    address: str
    name: str
    database: str
    owner: str = "sysadmin"


class CatalogColumn(_Out):
    """A relation column."""

    name: str
    type: str


class CatalogRelation(_Out):
    """A deployed relation with its columns and formats."""

    address: str
    name: str
    fqn: str
    kind: str
    database: str
    schema_: str = Field(alias="schema", serialization_alias="schema")
    store: str
    topic: str
    columns: list[CatalogColumn]
    key_format: str | None = None
    value_format: str | None = None
    primary_key: list[str] = Field(default_factory=list)
    owner: str = "sysadmin"

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class CatalogQuery(_Out):
    """A deployed continuous query with its SQL, sink, sources and state (from the status entries)."""

    address: str
    name: str
    sql: str
    sink: str
    sources: list[str]
    state: str = Field("unknown", description="running, stopped, failed, restarting, ...; 'unknown' without status")
    status: dict[str, Any] | None = Field(None, description="the query's `dsflow status --json` entry")
    owner: str = "sysadmin"


class Catalog(_Out):
    """Everything a caller may see of the deployed environment."""

    stores: list[CatalogStore] = Field(default_factory=list)
    databases: list[CatalogDatabase] = Field(default_factory=list)
    schemas: list[CatalogSchema] = Field(default_factory=list)
    relations: list[CatalogRelation] = Field(default_factory=list)
    queries: list[CatalogQuery] = Field(default_factory=list)

    def relation(self, address: str) -> CatalogRelation | None:
        wanted = _relation_address(address)
        return next((r for r in self.relations if r.address == wanted), None)

    def query(self, name: str) -> CatalogQuery | None:
        wanted = name if name.startswith("query.") else f"query.{name}"
        return next((q for q in self.queries if q.address == wanted), None)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class LineageNode(_Out):
    """A relation or a query in the lineage graph."""

    id: str = Field(description="the address")
    kind: str
    label: str
    state: str | None = Field(None, description="queries: the state from the status entries")


class LineageEdge(_Out):
    """Data flows from `source` to `target` (a relation into a query, a query into its sink)."""

    source: str
    target: str


class Lineage(_Out):
    """The data flow between deployed relations and queries."""

    nodes: list[LineageNode] = Field(default_factory=list)
    edges: list[LineageEdge] = Field(default_factory=list)


@dataclass(frozen=True)
class Inputs:
    """What the catalog is built from: no I/O happens here."""

    project: Project
    state: State
    statuses: list[dict[str, Any]] = field(default_factory=list)

    def deployed(self, kind: Kind) -> list[DeployedResource]:
        return [r for a, r in sorted(self.state.resources.items()) if a.startswith(f"{kind.value}.")]

    @cached_property
    def owners(self) -> AccessModel:
        """The access model of the deployed records: whose each object is (declared, else its namespace's owner's,
        else sysadmin's)."""
        return AccessModel.from_records(records_of(self.state.resources.values()))

    def status_of(self, address: str) -> dict[str, Any] | None:
        return next((e for e in self.statuses if e.get("address") == address), None)


def full_catalog(inputs: Inputs) -> Catalog:
    """Every deployed store, database, schema, relation and query, unfiltered."""
    return Catalog(
        stores=[_store(inputs, r) for r in inputs.deployed(Kind.STORE)],
        databases=[_database(inputs, r) for r in inputs.deployed(Kind.DATABASE)],
        schemas=[_schema(inputs, r) for r in inputs.deployed(Kind.SCHEMA)],
        relations=[_relation(inputs, r) for r in inputs.deployed(Kind.RELATION)],
        queries=[_query(inputs, r) for r in inputs.deployed(Kind.QUERY)],
    )


def visible(catalog: Catalog, access: Visibility, user: str) -> Catalog:
    """The part of `catalog` that `user` may see."""
    def keep(items: Iterable[Any]) -> list[Any]:
        return [i for i in items if access.can_see(user, i.address)]

    return Catalog(stores=keep(catalog.stores), databases=keep(catalog.databases), schemas=keep(catalog.schemas),
                   relations=keep(catalog.relations), queries=keep(catalog.queries))


def catalog_for(inputs: Inputs, access: Visibility, user: str) -> Catalog:
    """The caller's catalog: `full_catalog` filtered by `can_see`."""
    return visible(full_catalog(inputs), access, user)


def lineage(catalog: Catalog) -> Lineage:
    """Relations and queries of `catalog` and the edges between them (both ends in the catalog)."""
    nodes = [LineageNode(id=r.address, kind=r.kind, label=r.fqn) for r in catalog.relations]
    nodes += [LineageNode(id=q.address, kind="query", label=q.name, state=q.state) for q in catalog.queries]
    ids = {n.id for n in nodes}
    edges: list[LineageEdge] = []
    for q in catalog.queries:
        pairs = [(_relation_address(s), q.address) for s in q.sources] + [(q.address, _relation_address(q.sink))]
        edges += [LineageEdge(source=s, target=t) for s, t in dict.fromkeys(pairs) if s in ids and t in ids]
    return Lineage(nodes=nodes, edges=edges)


def lineage_for(inputs: Inputs, access: Visibility, user: str) -> Lineage:
    return lineage(catalog_for(inputs, access, user))


def visible_status(statuses: Iterable[dict[str, Any]], access: Visibility, user: str) -> list[dict[str, Any]]:
    """The status entries (queries, generators) of objects `user` may see."""
    return [e for e in statuses if access.can_see(user, str(e.get("address", "")))]


DESCRIBE_PRIVILEGE = {Kind.STORE: "USAGE", Kind.DATABASE: "USAGE", Kind.SCHEMA: "USAGE", Kind.RELATION: "SELECT",
                      Kind.QUERY: "MANAGE"}
"""The privilege a refusal to show an object names (what reading it most plainly needs)."""


def denial(access: AccessModel, user: str, address: str) -> str:
    """Why `user` may not see `address`: the access model's message for the object's DESCRIBE_PRIVILEGE."""
    kind = Address.parse(address).kind
    decision = access.check(user, Privilege(DESCRIBE_PRIVILEGE.get(kind, "USAGE")), address)
    if not decision.allowed and decision.message:
        return str(decision.message)
    return f"user '{user}' may not see {address}"


def _relation_address(name: str) -> str:
    return name if name.startswith("relation.") else f"relation.{name}"


def _owner(inputs: Inputs, resource: DeployedResource) -> str:
    return inputs.owners.owner_of(resource.address)


def _store(inputs: Inputs, resource: DeployedResource) -> CatalogStore:
    name = Address.parse(resource.address).name
    declared = inputs.project.store(name)
    registry = resource.metadata.get("schema_registry") or (declared.schema_registry if declared else None)
    return CatalogStore(address=resource.address, name=name, type=str(resource.data.get("type", "")),
                        description=str(resource.metadata.get("description", "")), schema_registry=registry,
                        owner=_owner(inputs, resource))


def _database(inputs: Inputs, resource: DeployedResource) -> CatalogDatabase:
    name = Address.parse(resource.address).name
    return CatalogDatabase(address=resource.address, name=name, owner=_owner(inputs, resource),
                           description=str(resource.metadata.get("description", "")))


def _schema(inputs: Inputs, resource: DeployedResource) -> CatalogSchema:
    name = Address.parse(resource.address).name
    return CatalogSchema(address=resource.address, name=name, database=name.split(".", 1)[0],
                         owner=_owner(inputs, resource))


def _relation(inputs: Inputs, resource: DeployedResource) -> CatalogRelation:
    fqn = Address.parse(resource.address).name
    database, schema, name = (fqn.split(".") + ["", ""])[:3]
    data, declared = resource.data, inputs.project.relation(fqn)
    columns = [CatalogColumn(name=c[0], type=c[1]) for c in data.get("columns", [])]
    if not columns and declared is not None:
        columns = [CatalogColumn(name=c.name, type=c.type) for c in declared.columns]
    key_format = resource.metadata.get("key_format", declared.key_format if declared else None)
    return CatalogRelation(
        address=resource.address, name=name, fqn=fqn, kind=str(data.get("kind", "")), database=database,
        schema_=schema, store=str(data.get("store") or ""), topic=str(data.get("topic") or ""), columns=columns,
        key_format=key_format, value_format=data.get("value_format"),
        primary_key=list(data.get("primary_key", [])), owner=_owner(inputs, resource))


def _query(inputs: Inputs, resource: DeployedResource) -> CatalogQuery:
    name = Address.parse(resource.address).name
    data = resource.data
    declared = next((q for q in inputs.project.queries if q.fqn == name), None)
    sources = [s[0] if isinstance(s, list) else str(s) for s in data.get("sources", [])]
    sql = data.get("select") or (declared.select_sql if declared else "")
    status = inputs.status_of(resource.address)
    return CatalogQuery(address=resource.address, name=name, sql=str(sql), sink=str(data.get("sink", "")),
                        sources=list(dict.fromkeys(sources)), state=str((status or {}).get("state", "unknown")),
                        status=status, owner=_owner(inputs, resource))
