"""`dsflow serve`'s HTTP application: the REST API (docs/server.md), GraphQL and the web page over one project
environment, every request but the health check authenticated, every answer checked against the deployed grants.

    app = create_app(operations.Options(Path("project"), "dev"))   # uvicorn.run(app, host="127.0.0.1")

Errors are {"error": {"code": "DSF-Exxx", "message": ..., "hint": ...}}: 401 without valid credentials, 403 naming
the missing privilege, 404 for an unknown object, 409 for a plan the state moved past, 422 for a bad body, never a
traceback; every answer has the secret values dsflow knows scrubbed (core/secrets.py).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from dsflow.engine import operations
from dsflow.errors import DsflowError, ProjectError
from dsflow.server.context import ApiError, Caller, ScrubbedJSON, Server, caller, error_body, server_of

log = logging.getLogger("dsflow.server")
VERSION = "1"

CONFLICT = ("DSF-E80", "DSF-E81", "DSF-E82", "DSF-E83")
"""State and apply errors: the state moved, is locked, or the plan cannot be applied as it is (409)."""
UPSTREAM = ("DSF-E70", "DSF-E255")
"""A store did not answer as asked (502)."""
NOT_FOUND = ("DSF-E767", "DSF-E329", "DSF-E322", "DSF-E323")


def http_status(err: DsflowError) -> int:
    code = err.code
    if code.startswith(NOT_FOUND):
        return 404
    if code in ("DSF-E811", "DSF-E812"):
        return 422
    if code.startswith(CONFLICT):
        return 409
    if code.startswith(UPSTREAM):
        return 502
    return 400


def create_app(options: operations.Options | None = None) -> FastAPI:
    """The application over `options`' project environment (loaded on the first request); without options, an
    app for its OpenAPI document only."""
    app = FastAPI(title="dsflow", version=VERSION, default_response_class=ScrubbedJSON, docs_url=None, redoc_url=None,
                  description="The REST API of `dsflow serve` (docs/server.md). Every endpoint but /api/v1/health "
                              "needs `Authorization: Bearer <token>`.")
    app.state.server = Server(options) if options is not None else None
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]  # FastAPI's way to replace the document
    _handlers(app)
    from dsflow.server import api_actions, api_read, api_shadow, api_users, graphql, streams, web

    for module in (api_read, api_actions, api_users, streams, api_shadow):
        app.include_router(module.router)
    app.include_router(graphql.router(graphql_context), include_in_schema=False)
    web.mount(app)
    return app


def graphql_context(me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """What dsflow/server/graphql.py's resolvers get: the caller, its access model and the catalog's inputs."""
    from dsflow.engine import eventlog
    from dsflow.server.api_read import inputs

    def events(since: str | None, object_: str | None) -> list:
        return eventlog.read(server.loaded().workspace.state_backend(), since, object_)

    return {"user": me.user, "access": me.access, "inputs": lambda: inputs(server, me), "events": events}


def openapi_document() -> dict:
    """The OpenAPI document of the REST API (docs/openapi.json)."""
    return create_app(None).openapi()


ERROR_SCHEMA = {"title": "Error", "type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message", "hint"], "properties": {
        "code": {"type": "string", "description": "a stable code, DSF-Ennn (docs/errors.md)"},
        "message": {"type": "string"}, "hint": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}
ERROR_ANSWERS = {"401": "no valid bearer token (DSF-E325)", "403": "a privilege is missing (DSF-E328)",
                 "422": "the request does not match this schema (DSF-E330)"}


def _openapi(app: FastAPI) -> dict:
    """FastAPI's document with the error answers as this API gives them ({"error": {code, message, hint}})."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        schemas["Error"] = ERROR_SCHEMA
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for operation in (op for methods in document["paths"].values() for op in methods.values()):
            answers = operation.setdefault("responses", {})
            for status, description in ERROR_ANSWERS.items():
                if status == "422" and status not in answers or status != "422" and "security" not in operation:
                    continue
                answers[status] = {"description": answers.get(status, {}).get("description", description),
                                   "content": error}
        app.openapi_schema = document
    return app.openapi_schema


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    def api_error(_: Request, err: ApiError) -> ScrubbedJSON:
        return ScrubbedJSON(error_body(err.code, err.message, err.hint), status_code=err.status, headers=err.headers)

    @app.exception_handler(ProjectError)
    def project_error(_: Request, err: ProjectError) -> ScrubbedJSON:
        more = f"; and {len(err.errors) - 5} more" if len(err.errors) > 5 else ""
        body = error_body(err.code, "the project does not load: " + "; ".join(
            str(d).replace("\n", " ") for d in err.errors[:5]) + more, "run 'dsflow validate' in the project",
            diagnostics=[d.to_dict() for d in err.diagnostics])
        return ScrubbedJSON(body, status_code=400)

    @app.exception_handler(DsflowError)
    def dsflow_error(_: Request, err: DsflowError) -> ScrubbedJSON:
        return ScrubbedJSON(error_body(err.code, err.message, err.hint), status_code=http_status(err))

    @app.exception_handler(RequestValidationError)
    def invalid(_: Request, err: RequestValidationError) -> ScrubbedJSON:
        found = err.errors()
        problems = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in found[:5]]
        problems += [f"and {len(found) - 5} more"] if len(found) > 5 else []
        return ScrubbedJSON(error_body("DSF-E330", "invalid request: " + "; ".join(problems),
                                       "see the request's schema in docs/openapi.json"), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    def http_error(_: Request, err: StarletteHTTPException) -> ScrubbedJSON:
        code = "DSF-E340" if err.status_code in (404, 405) else "DSF-E330"
        message = {404: "no such endpoint", 405: "method not allowed"}.get(err.status_code, str(err.detail))
        return ScrubbedJSON(error_body(code, message, "see docs/server.md"), status_code=err.status_code,
                            headers=getattr(err, "headers", None))

    @app.exception_handler(Exception)
    def unexpected(_: Request, err: Exception) -> ScrubbedJSON:
        log.error("internal error: %s", type(err).__name__, exc_info=err)
        return ScrubbedJSON(error_body("DSF-E331", "internal server error", "see the server's log"), status_code=500)


if __name__ == "__main__":  # python -m dsflow.server.app > docs/openapi.json (tests/unit/test_openapi_doc.py checks it)
    import json

    print(json.dumps(openapi_document(), indent=2))
