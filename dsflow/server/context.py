"""What every endpoint of `dsflow serve` shares: the served environment, the caller, and API errors.

    Server     one project environment: the loaded project (reloaded for plan and apply), the deployed state,
               the access model built from it (cached by state lineage and serial), the identity store
    Caller     an authenticated request: its user, the access model and the state it was checked against
    ApiError   an error answer {"error": {code, message, hint}} with an HTTP status
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dsflow.engine import operations
from dsflow.core.access import AccessModel, Privilege, records_of
from dsflow.core.secrets import scrub
from dsflow.core.state import State
from dsflow.server.identity import IdentityStore, identity_path

API = "/api/v1"


class ApiError(Exception):
    """An error answer: HTTP status, stable code, message and hint (headers such as Retry-After)."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.hint, self.headers = status, code, message, hint, headers


class ScrubbedJSON(JSONResponse):
    """JSON whose text has every secret value dsflow knows replaced (core/secrets.py)."""

    def render(self, content: Any) -> bytes:
        return scrub(json.dumps(content, ensure_ascii=False, allow_nan=False, default=str)).encode("utf-8")


def error_body(code: str, message: str, hint: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": scrub(message), "hint": scrub(hint) if hint else hint, **extra}}


FOLLOW_LIMIT = 4
"""At most this many continuous queries are followed at once (they share the server process's Spark context and
its two cores' worth of local tasks)."""


class Slots:
    """A count of things running at once, bounded by `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0
        self._lock = threading.Lock()

    def full(self) -> bool:
        with self._lock:
            return self.used >= self.limit

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.used -= 1


class Server:
    """The project environment `dsflow serve` serves; loaded on first use."""

    def __init__(self, options: operations.Options):
        self.options = options
        self._loaded: operations.Loaded | None = None
        self._identity: IdentityStore | None = None
        self._access: tuple[tuple[str, int], AccessModel] | None = None
        self._lock = threading.Lock()
        self.follows = Slots(FOLLOW_LIMIT)
        """Continuous queries followed at once: each a session of its own on the server's one Spark context."""

    def loaded(self) -> operations.Loaded:
        with self._lock:
            if self._loaded is None:
                self._loaded = operations.load(self.options)
            return self._loaded

    def reload(self) -> operations.Loaded:
        """The project as checked out now (plan and apply read the working tree)."""
        fresh = operations.load(self.options)
        with self._lock:
            self._loaded = fresh
        return fresh

    @property
    def identity(self) -> IdentityStore:
        if self._identity is None:
            self._identity = IdentityStore(identity_path(self.loaded().workspace))
        return self._identity

    def state(self) -> State:
        return self.loaded().workspace.state_backend().read()

    def access(self, state: State) -> AccessModel:
        """The access model of the DEPLOYED state (never the working tree), rebuilt when the state moves."""
        key = (state.lineage, state.serial)
        cached = self._access
        if cached is not None and cached[0] == key:
            return cached[1]
        model = AccessModel.from_records(records_of(state.resources.values()))
        self._access = (key, model)
        return model

    def statuses(self) -> list[dict[str, Any]]:
        """`dsflow status --json` entries without dead-letter counts (those ask the broker)."""
        return operations.status(self.loaded(), with_dead_letters=False)


@dataclass(frozen=True)
class Caller:
    """An authenticated request: who, and the access model of the state it is checked against."""

    user: str
    access: AccessModel
    state: State

    def require(self, privilege: Privilege | str, address: str) -> None:
        """403 (DSF-E328) naming the missing privilege unless the caller holds `privilege` on `address`."""
        decision = self.access.check(self.user, privilege, address)
        if not decision.allowed:
            raise ApiError(403, "DSF-E328", decision.message,
                           hint="ask a securityadmin to grant it to one of your roles (docs/server.md#authorization)")

    @property
    def roles(self) -> list[str]:
        return sorted(self.access.roles_of(self.user))


bearer = HTTPBearer(auto_error=False, scheme_name="token",
                    description="a service token (`dsflow tokens create USER`) or a session token from "
                                "POST /api/v1/auth/login")


def server_of(request: Request) -> Server:
    return request.app.state.server


def caller(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Caller:
    """The authenticated caller; 401 (DSF-E325) without a valid bearer token."""
    server = server_of(request)
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None:
        raise ApiError(401, "DSF-E325", "authentication required: send 'Authorization: Bearer <token>'",
                       hint="create a token with 'dsflow tokens create USER' or log in at POST /api/v1/auth/login",
                       headers=challenge)
    user = server.identity.authenticate(credentials.credentials)
    if user is None:
        raise ApiError(401, "DSF-E325", "the token is not valid: unknown, revoked or expired",
                       hint="create a new one with 'dsflow tokens create USER' or log in again", headers=challenge)
    state = server.state()
    return Caller(user, server.access(state), state)
