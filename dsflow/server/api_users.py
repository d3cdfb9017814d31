"""Users and service tokens over the API: what `dsflow users` and `dsflow tokens` do on the server's machine.

Managing users (list, add, remove, and any user's tokens) needs MANAGE_USERS on the organization (DeltaStream's
`useradmin`, inherited by `orgadmin`); every user may create, list and revoke its own service tokens.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.access import ORGANIZATION, Privilege
from dsflow.server.context import API, ApiError, Caller, Server, caller, server_of

router = APIRouter(prefix=API)
USER_PATH = Path(min_length=1, max_length=64, description="a user name")


class NewUser(BaseModel):
    """A user name (1 to 64 letters, digits, `_`, `.`, `@`, `-`) and its password."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1000)


class User(BaseModel):
    """A user of `dsflow serve` (never its password)."""

    name: str
    created: str | None


class NewToken(BaseModel):
    """A label for a new service token."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=200, description="what the token is for")


class Token(BaseModel):
    """What is listed of a service token: never the token itself."""

    id: str
    user: str
    name: str
    kind: str
    created: str | None
    expires: str | None
    last_used: str | None
    revoked: bool


class CreatedToken(Token):
    """A new service token: `token` is shown this once (it is stored hashed)."""

    token: str


def _may_manage(me: Caller, user: str | None = None) -> None:
    """MANAGE_USERS on the organization, unless the caller acts on its own tokens."""
    if user is None or user != me.user:
        me.require(Privilege.MANAGE_USERS, ORGANIZATION)


@router.get("/users", tags=["users"], response_model=list[User])
def list_users(me: Caller = Depends(caller), server: Server = Depends(server_of)) -> list[dict[str, Any]]:
    """Every user (needs MANAGE_USERS)."""
    _may_manage(me)
    return server.identity.users()


@router.post("/users", tags=["users"], status_code=201, response_model=User,
             responses={400: {"description": "a bad user name, or the user exists"}})
def add_user(body: NewUser, me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """Add a user (needs MANAGE_USERS). Its roles come from the project's bindings (`users:` in YAML)."""
    _may_manage(me)
    server.identity.add_user(body.name, body.password)
    return next(u for u in server.identity.users() if u["name"] == body.name)


@router.delete("/users/{name}", tags=["users"], status_code=204, responses={404: {"description": "no such user"}})
def remove_user(name: str = USER_PATH, me: Caller = Depends(caller), server: Server = Depends(server_of)) -> Response:
    """Remove a user and every token it holds (needs MANAGE_USERS; not oneself)."""
    _may_manage(me)
    if name == me.user:
        raise ApiError(400, "DSF-E338", f"user '{name}' cannot remove itself",
                       hint="ask another user with MANAGE_USERS, or use 'dsflow users remove' on the server")
    server.identity.remove_user(name)
    return Response(status_code=204)


@router.get("/tokens", tags=["users"], response_model=list[Token])
def list_tokens(user: str | None = Query(None, max_length=64, description="whose tokens (default: the caller's)"),
                me: Caller = Depends(caller), server: Server = Depends(server_of)) -> list[dict[str, Any]]:
    """Service tokens of a user (default: the caller's own; another user's needs MANAGE_USERS)."""
    who = user or me.user
    _may_manage(me, who)
    return [asdict(t) for t in server.identity.tokens(who)]


@router.post("/users/{name}/tokens", tags=["users"], status_code=201, response_model=CreatedToken,
             responses={404: {"description": "no such user"}})
def create_token(body: NewToken | None = None, name: str = USER_PATH, me: Caller = Depends(caller),
                 server: Server = Depends(server_of)) -> dict[str, Any]:
    """A new service token for a user (oneself, or anyone with MANAGE_USERS); the token is in this answer only."""
    _may_manage(me, name)
    token, info = server.identity.create_token(name, (body or NewToken()).name)
    return {**asdict(info), "token": token}


@router.delete("/tokens/{token_id}", tags=["users"], status_code=204, responses={404: {"description": "no such token"}})
def revoke_token(token_id: str = Path(min_length=1, max_length=64), me: Caller = Depends(caller),
                 server: Server = Depends(server_of)) -> Response:
    """Revoke a service token at once (one's own, or anyone's with MANAGE_USERS)."""
    owner = next((t.user for t in server.identity.tokens(None, kind=None) if t.id == token_id), None)
    if owner is None:
        _may_manage(me)  # do not tell a caller without the privilege which token ids exist
        raise ApiError(404, "DSF-E323", f"no token '{token_id}'", hint="see GET /api/v1/tokens")
    _may_manage(me, owner)
    server.identity.revoke(token_id)
    return Response(status_code=204)
