"""Read endpoints: health, login, whoami, catalog, relations, queries, lineage, status and metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.events import Event
from dsflow.errors import DsflowError
from dsflow.server import catalog as cat
from dsflow.server.context import API, ApiError, Caller, Server, caller, server_of
from dsflow.server.identity import LoginThrottled

router = APIRouter(prefix=API)


class Login(BaseModel):
    """A user name and password (`dsflow users add`)."""

    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=200)
    password: str = Field(min_length=1, max_length=1000)


class Session(BaseModel):
    """A session token (shown once) and when it expires."""

    token: str
    expires_at: str


class WhoAmI(BaseModel):
    """The caller and its roles as the deployed bindings give them (inherited ones and `public` included)."""

    user: str
    roles: list[str]


@router.get("/health", tags=["server"])
def health() -> dict[str, str]:
    """Whether the server answers (no authentication)."""
    return {"status": "ok"}


@router.post("/auth/login", tags=["auth"], response_model=Session,
             responses={401: {"description": "wrong user name or password"},
                        429: {"description": "too many failed logins; see Retry-After"}})
def login(body: Login, server: Server = Depends(server_of)) -> Session:
    """A session token for a user name and password; 5 failures per user name per minute answer 429."""
    try:
        token, expires = server.identity.login(body.username, body.password)
    except LoginThrottled as err:
        raise ApiError(429, "DSF-E327", f"too many failed logins for '{body.username}'",
                       hint=f"try again in {err.retry_after} s", headers={"Retry-After": str(err.retry_after)}) from err
    except DsflowError as err:
        raise ApiError(401, err.code, err.message, err.hint, headers={"WWW-Authenticate": "Bearer"}) from None
    return Session(token=token, expires_at=expires)


@router.get("/whoami", tags=["auth"], response_model=WhoAmI)
def whoami(me: Caller = Depends(caller)) -> WhoAmI:
    """The caller's user name and roles."""
    return WhoAmI(user=me.user, roles=me.roles)


def inputs(server: Server, me: Caller) -> cat.Inputs:
    return cat.Inputs(project=server.loaded().project, state=me.state, statuses=server.statuses())


@router.get("/catalog", tags=["catalog"], response_model=cat.Catalog)
def catalog(me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """What the caller may see of the deployed stores, databases, schemas, relations and queries."""
    return cat.catalog_for(inputs(server, me), me.access, me.user).to_json()


def visible_or_raise(me: Caller, address: str, found: Any) -> None:
    """404 (DSF-E329) for an object that is not deployed, 403 (DSF-E328) for one the caller may not see."""
    if found is None:
        raise ApiError(404, "DSF-E329", f"no deployed object {address}", hint="see GET /api/v1/catalog")
    if not me.access.can_see(me.user, address):
        raise ApiError(403, "DSF-E328", cat.denial(me.access, me.user, address),
                       hint="ask a securityadmin to grant it to one of your roles")


def relation_address(name: str) -> str:
    return name if name.startswith("relation.") else f"relation.{name}"


@router.get("/relations/{address}", tags=["catalog"], response_model=cat.CatalogRelation)
def relation(address: str, me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """One deployed relation (`relation.db.schema.name` or `db.schema.name`) with its columns and formats."""
    address = relation_address(address)
    found = cat.full_catalog(inputs(server, me)).relation(address)
    visible_or_raise(me, address, found)
    assert found is not None  # visible_or_raise: 404 when none
    return found.model_dump(mode="json", by_alias=True)


def _query_json(query: cat.CatalogQuery) -> dict[str, Any]:
    return {"name": query.name, "address": query.address, "sql": query.sql, "sink": query.sink,
            "sources": query.sources, "state": query.state, "status": query.status}


@router.get("/queries", tags=["catalog"])
def queries(me: Caller = Depends(caller), server: Server = Depends(server_of)) -> list[dict[str, Any]]:
    """The deployed continuous queries the caller may see, with their SQL and status."""
    return [_query_json(q) for q in cat.catalog_for(inputs(server, me), me.access, me.user).queries]


@router.get("/queries/{name}", tags=["catalog"])
def query(name: str, me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """One query (`query.db.schema.name` or `db.schema.name`): SQL, status and every version it ran."""
    found = cat.full_catalog(inputs(server, me)).query(name)
    address = found.address if found else (name if name.startswith("query.") else f"query.{name}")
    visible_or_raise(me, address, found)
    assert found is not None  # visible_or_raise: 404 when none
    history = [e.model_dump(mode="json") for e in me.state.history(address)]
    return {**_query_json(found), "history": history}


@router.get("/lineage", tags=["catalog"], response_model=cat.Lineage)
def lineage(me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """The data flow between the relations and queries the caller may see."""
    return cat.lineage_for(inputs(server, me), me.access, me.user).model_dump(mode="json")


@router.get("/events", tags=["runtime"], response_model=list[Event],
            responses={400: {"description": "`since` is not a time (DSF-E724)"}})
def events(object: str | None = None, since: str | None = None, me: Caller = Depends(caller),
           server: Server = Depends(server_of)) -> list[dict[str, Any]]:
    """The environment's event log (`dsflow events --json`), oldest first: only events of objects the caller may
    see; `object` narrows it to one object, `since` (ISO 8601) to the events after that time."""
    from dsflow.engine import eventlog

    backend = server.loaded().workspace.state_backend()
    try:
        found = eventlog.read(backend, since, object, lambda address: me.access.can_see(me.user, address))
    except DsflowError as err:
        raise ApiError(400, err.code, err.message, err.hint) from None
    return [e.model_dump(mode="json") for e in found]


@router.get("/status", tags=["runtime"])
def status(me: Caller = Depends(caller), server: Server = Depends(server_of)) -> list[dict[str, Any]]:
    """`dsflow status --json` entries of the queries and generators the caller may see."""
    return cat.visible_status(server.statuses(), me.access, me.user)


@router.get("/metrics", tags=["runtime"], response_class=PlainTextResponse)
def metrics(me: Caller = Depends(caller), server: Server = Depends(server_of)) -> PlainTextResponse:
    """The status of the caller's visible queries and generators in the Prometheus text format."""
    from prometheus_client import CollectorRegistry, generate_latest

    from dsflow.core.secrets import scrub
    from dsflow.runtime.metrics import StatusCollector

    entries = cat.visible_status(server.statuses(), me.access, me.user)
    registry = CollectorRegistry()
    registry.register(StatusCollector(lambda: entries))
    return PlainTextResponse(scrub(generate_latest(registry).decode()), media_type="text/plain; version=0.0.4")
