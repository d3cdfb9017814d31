"""docs/openapi.json is the OpenAPI document of `dsflow serve`'s REST API as the code defines it now.

Regenerate it after changing an endpoint: python -m dsflow.server.app > docs/openapi.json
(or: dsflow serve --print-openapi > docs/openapi.json)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from support.projects import REPO

from dsflow.server.app import openapi_document

DOC = REPO / "docs" / "openapi.json"


def test_published_openapi_document_is_current() -> None:
    assert json.loads(DOC.read_text()) == openapi_document(), \
        "docs/openapi.json is out of date: python -m dsflow.server.app > docs/openapi.json"


def test_serve_prints_the_same_document() -> None:
    from dsflow.cli import cli

    result = CliRunner().invoke(cli, ["serve", "--print-openapi"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(DOC.read_text())


def test_every_endpoint_but_health_and_login_needs_the_token() -> None:
    document = json.loads(DOC.read_text())
    open_paths = {path for path, methods in document["paths"].items()
                  if any("security" not in op for op in methods.values())}
    assert open_paths == {"/api/v1/health", "/api/v1/auth/login"}
    assert document["components"]["securitySchemes"]["token"]["scheme"] == "bearer"
