"""GraphQL (strawberry) over the same catalog and status as the REST API, read only, with the same authorization.

The HTTP layer authenticates (401 before a query runs); the context getter H-Server passes to `router` returns a
`GraphQLContext` (or a dict with the same keys). Lists are filtered by what the caller may see; asking for one
object the caller may not see is a GraphQL error whose message names the missing privilege (REST's 403), with
`extensions.code` set to a stable DSF code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import MaskErrors, MaxAliasesLimiter, MaxTokensLimiter, QueryDepthLimiter
from strawberry.scalars import JSON
from strawberry.types import Info

from dsflow.core.secrets import scrub
from dsflow.server import catalog as cat

FORBIDDEN = "DSF-E350"
NOT_FOUND = "DSF-E351"
UNAUTHENTICATED = "DSF-E352"
BAD_REQUEST = "DSF-E353"


@dataclass
class GraphQLContext:
    """Who is asking and what they ask about: `inputs` is built lazily, once per request."""

    user: str | None
    access: Any
    inputs: Callable[[], cat.Inputs]
    events: Callable[[str | None, str | None], list[Any]] | None = None
    """(since, object) -> the event log's core.events.Event list, unfiltered by access (None: no log served)."""
    _catalog: cat.Catalog | None = None
    _inputs: cat.Inputs | None = None

    def loaded_inputs(self) -> cat.Inputs:
        if self._inputs is None:
            self._inputs = self.inputs()
        return self._inputs

    def full(self) -> cat.Catalog:
        if self._catalog is None:
            self._catalog = cat.full_catalog(self.loaded_inputs())
        return self._catalog


def _as_context(base: Any) -> GraphQLContext:
    if isinstance(base, GraphQLContext):
        return base
    if isinstance(base, dict) and isinstance(base.get("_graphql"), GraphQLContext):
        return base["_graphql"]
    base = base if isinstance(base, dict) else {}
    return GraphQLContext(user=base.get("user"), access=base.get("access"), inputs=_as_callable(base.get("inputs")),
                          events=base.get("events"))


def _context(info: Info) -> tuple[GraphQLContext, str]:
    """The caller's context and user name; an error when the HTTP layer let an anonymous request through."""
    context = _as_context(info.context)
    if isinstance(info.context, dict):
        info.context["_graphql"] = context  # once per request, so the catalog is built once
    if not context.user or context.access is None:
        raise GraphQLError("authentication required: send 'Authorization: Bearer <token>'",
                           extensions={"code": UNAUTHENTICATED})
    return context, context.user


def _as_callable(inputs: Any) -> Callable[[], cat.Inputs]:
    return inputs if callable(inputs) else (lambda: inputs)


def _visible(info: Info) -> tuple[cat.Catalog, GraphQLContext, str]:
    context, user = _context(info)
    return cat.visible(context.full(), context.access, user), context, user


def _forbidden(context: GraphQLContext, user: str, address: str) -> GraphQLError:
    return GraphQLError(scrub(cat.denial(context.access, user, address)), extensions={"code": FORBIDDEN})


def _not_found(what: str) -> GraphQLError:
    return GraphQLError(f"no deployed {what}", extensions={"code": NOT_FOUND})


@strawberry.type(description="A deployed store (its settings are not shown)")
class Store:
    address: str
    name: str
    type: str
    description: str
    schema_registry: str | None
    owner: str


@strawberry.type(description="A deployed database")
class Database:
    address: str
    name: str
    description: str
    owner: str


@strawberry.type(description="A deployed schema; name is database.schema")
class Schema:
    address: str
    name: str
    database: str
    owner: str


@strawberry.type(description="One entry of the environment's event log (`dsflow events`)")
class Event:
    time: str
    id: str
    environment: str
    object: str
    kind: str
    actor: str
    detail: JSON


@strawberry.type(description="A relation column")
class Column:
    name: str
    type: str


@strawberry.type(description="A deployed stream, changelog, materialized view or table")
class Relation:
    address: str
    name: str
    fqn: str
    kind: str
    database: str
    schema: str
    store: str
    topic: str
    columns: list[Column]
    key_format: str | None
    value_format: str | None
    primary_key: list[str]
    owner: str


@strawberry.type(name="ContinuousQuery", description="A deployed continuous query")
class ContinuousQuery:
    address: str
    name: str
    sql: str
    sink: str
    sources: list[str]
    state: str
    status: JSON | None
    owner: str

    @strawberry.field(description="the relation the query writes to (an error if the caller may not see it)")
    def sink_relation(self, info: Info) -> Relation | None:
        return _relation(info, self.sink)

    @strawberry.field(description="the relations the query reads (an error if the caller may not see one)")
    def source_relations(self, info: Info) -> list[Relation] | None:
        return [_relation(info, s) for s in self.sources]


@strawberry.type(description="A relation or a query in the lineage graph")
class LineageNode:
    id: str
    kind: str
    label: str
    state: str | None


@strawberry.type(description="Data flows from source to target")
class LineageEdge:
    source: str
    target: str


@strawberry.type(description="The data flow between the relations and queries the caller may see")
class Lineage:
    nodes: list[LineageNode]
    edges: list[LineageEdge]


@strawberry.type(description="One `dsflow status --json` entry: a query or a generator")
class StatusEntry:
    address: str
    state: str
    restarts: int | None
    uptime_seconds: float | None
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    batch_latency_ms: float | None = strawberry.field(description="the newest micro-batch with records: its trigger "
                                                      "execution (null in real-time mode or before one)")
    event_time_lag_ms: float | None = strawberry.field(description="that batch's end minus the newest event time "
                                                       "it read (null without a watermark)")
    record_latency_p99_ms: float | None = strawberry.field(description="a real-time query: the 99th percentile "
                                                           "latency of its records written in the last minute, "
                                                           "source to sink (null otherwise)")
    details: JSON


@strawberry.type(description="The authenticated caller")
class WhoAmI:
    user: str
    roles: list[str]


def _relation_type(r: cat.CatalogRelation) -> Relation:
    return Relation(address=r.address, name=r.name, fqn=r.fqn, kind=r.kind, database=r.database, schema=r.schema_,
                    store=r.store, topic=r.topic, columns=[Column(name=c.name, type=c.type) for c in r.columns],
                    key_format=r.key_format, value_format=r.value_format, primary_key=list(r.primary_key),
                    owner=r.owner)


def _query_type(q: cat.CatalogQuery) -> ContinuousQuery:
    return ContinuousQuery(address=q.address, name=q.name, sql=q.sql, sink=q.sink, sources=list(q.sources),
                           state=q.state, status=_scrubbed(q.status), owner=q.owner)


def _scrubbed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    return scrub(value) if isinstance(value, str) else value


def _relation(info: Info, address: str) -> Relation:
    context, user = _context(info)
    found = context.full().relation(address)
    if found is None:
        raise _not_found(f"relation {address}")
    if not context.access.can_see(user, found.address):
        raise _forbidden(context, user, found.address)
    return _relation_type(found)


def _status_entry(entry: dict[str, Any]) -> StatusEntry:
    def number(key: str) -> float | None:
        value = entry.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    restarts = entry.get("restarts")
    return StatusEntry(address=str(entry.get("address", "")), state=str(entry.get("state", "unknown")),
                       restarts=restarts if isinstance(restarts, int) else None,
                       uptime_seconds=number("uptime_seconds"),
                       input_rows_per_second=number("input_rows_per_second"),
                       processed_rows_per_second=number("processed_rows_per_second"),
                       batch_latency_ms=number("batch_latency_ms"), event_time_lag_ms=number("event_time_lag_ms"),
                       record_latency_p99_ms=number("record_latency_p99_ms"),
                       details=_scrubbed(entry))


@strawberry.type(name="Query", description="The deployed project environment, as the caller may see it (read only)")
class Root:
    @strawberry.field
    def stores(self, info: Info) -> list[Store]:
        return [Store(**s.model_dump()) for s in _visible(info)[0].stores]

    @strawberry.field
    def databases(self, info: Info) -> list[Database]:
        return [Database(**d.model_dump()) for d in _visible(info)[0].databases]

    @strawberry.field
    def schemas(self, info: Info) -> list[Schema]:
        return [Schema(**s.model_dump()) for s in _visible(info)[0].schemas]

    @strawberry.field
    def relations(self, info: Info) -> list[Relation]:
        return [_relation_type(r) for r in _visible(info)[0].relations]

    @strawberry.field(description="one relation by address (relation.db.schema.name) or db.schema.name")
    def relation(self, info: Info, address: str) -> Relation | None:
        return _relation(info, address)

    @strawberry.field
    def queries(self, info: Info) -> list[ContinuousQuery]:
        return [_query_type(q) for q in _visible(info)[0].queries]

    @strawberry.field(description="one query by name or address (query.<name>)")
    def query(self, info: Info, name: str) -> ContinuousQuery | None:
        context, user = _context(info)
        found = context.full().query(name)
        if found is None:
            raise _not_found(f"query {name}")
        if not context.access.can_see(user, found.address):
            raise _forbidden(context, user, found.address)
        return _query_type(found)

    @strawberry.field
    def lineage(self, info: Info) -> Lineage:
        graph = cat.lineage(_visible(info)[0])
        return Lineage(nodes=[LineageNode(**n.model_dump()) for n in graph.nodes],
                       edges=[LineageEdge(**e.model_dump()) for e in graph.edges])

    @strawberry.field(description="status entries of the queries and generators the caller may see")
    def status(self, info: Info) -> list[StatusEntry]:
        context, user = _context(info)
        entries = cat.visible_status(context.loaded_inputs().statuses, context.access, user)
        return [_status_entry(e) for e in entries]

    @strawberry.field(description="the event log, oldest first: events of objects the caller may see, of `object` "
                                  "only when given, after `since` (ISO 8601) when given")
    async def events(self, info: Info, object: str | None = None, since: str | None = None) -> list[Event]:
        from starlette.concurrency import run_in_threadpool

        from dsflow.errors import DsflowError

        context, user = _context(info)
        if context.events is None:
            return []
        try:
            found = await run_in_threadpool(context.events, since, object)
        except DsflowError as err:
            raise GraphQLError(err.message, extensions={"code": err.code}) from None
        return [Event(time=e.time, id=e.id, environment=e.environment, object=e.object, kind=e.kind, actor=e.actor,
                      detail=_scrubbed(e.detail)) for e in found if context.access.can_see(user, e.object)]

    @strawberry.field
    def whoami(self, info: Info) -> WhoAmI:
        context, user = _context(info)
        return WhoAmI(user=user, roles=sorted(context.access.roles_of(user)))


def _unexpected(error: GraphQLError) -> bool:
    """A failure no resolver meant (a bug, an unreadable state): its text is not shown; refusals are."""
    return error.original_error is not None and not isinstance(error.original_error, GraphQLError)


class _Schema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        unexpected = [e for e in errors if _unexpected(e)]  # a refusal is an answer, not a server log entry
        if unexpected:
            super().process_errors(unexpected, execution_context)


class _DepthLimit(QueryDepthLimiter):
    def __init__(self) -> None:
        super().__init__(max_depth=8)


class _AliasLimit(MaxAliasesLimiter):
    def __init__(self) -> None:
        super().__init__(max_alias_count=30)


class _TokenLimit(MaxTokensLimiter):
    def __init__(self) -> None:
        super().__init__(max_token_count=2000)


class _Masked(MaskErrors):
    def __init__(self) -> None:
        super().__init__(should_mask_error=_unexpected, error_message="internal error (see the server log)")


schema = _Schema(query=Root, extensions=[_DepthLimit, _AliasLimit, _TokenLimit, _Masked])
"""Extensions are passed as classes: strawberry makes a fresh one per request (old and new releases alike)."""


def schema_sdl() -> str:
    """The schema in GraphQL's schema language, as published in docs/graphql.schema.graphql."""
    return schema.as_str() + "\n"


def router(get_context: Callable[..., Any], path: str = "/graphql") -> Any:
    """The FastAPI router serving POST `path`; `get_context` is a FastAPI dependency (it may depend on the
    authentication dependency, which answers 401 first) returning a GraphQLContext or a dict with keys user,
    access and inputs (a catalog.Inputs or a function returning one). The inputs (state, status) are read in a
    worker thread before the resolvers run, so no resolver does I/O on the event loop. No GET, no IDE page, no
    websocket (the schema has no subscriptions)."""
    try:
        from cross_web import HTTPException
    except ImportError:  # strawberry releases before cross_web
        from strawberry.http.exceptions import HTTPException  # type: ignore[attr-defined, no-redef]  # older ones
    from fastapi import Depends
    from fastapi.responses import JSONResponse
    from fastapi.routing import APIWebSocketRoute
    from starlette.concurrency import run_in_threadpool
    from strawberry.fastapi import GraphQLRouter

    class Router(GraphQLRouter):
        async def run(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super().run(*args, **kwargs)
            except HTTPException as err:  # not a GraphQL request: the API's error shape, not strawberry's text
                body = {"error": {"code": BAD_REQUEST, "message": scrub(str(err.reason)),
                                  "hint": 'POST JSON {"query": "...", "variables": {...}} (docs/graphql.md)'}}
                return JSONResponse(body, status_code=err.status_code)

    async def context(base: Any = Depends(get_context)) -> dict[str, Any]:
        prepared = _as_context(base)
        if prepared.user and prepared.access is not None:
            await run_in_threadpool(prepared.full)
        return {**(base if isinstance(base, dict) else {}), "_graphql": prepared}

    served = Router(schema, path=path, graphql_ide=None, allow_queries_via_get=False, context_getter=context)
    served.routes[:] = [r for r in served.routes if not isinstance(r, APIWebSocketRoute)]
    return served


if __name__ == "__main__":  # python -m dsflow.server.graphql > docs/graphql.schema.graphql
    print(schema_sdl(), end="")
