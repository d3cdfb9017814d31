"""Property-based fuzzing of `dsflow serve` from its published OpenAPI document (schemathesis) against a real
server on 127.0.0.1: whatever the request, no 500, no traceback and no secret value in the answer.

Bounded: 30 examples per operation. The topic tail is left out (a stream that runs until the client leaves)."""

from __future__ import annotations

import json
import os
import secrets

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from support.projects import REPO, make_project
from support.serving import SERVER_FILES, LiveServer, add_users, deploy_recorded, server_config

from dsflow.core.secrets import registered

SECRET = "fuzz-" + secrets.token_hex(12)
SECRET_ENV = "DSFLOW_FUZZ_SASL_PASSWORD"
STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
    properties:
      security.protocol: SASL_PLAINTEXT
      sasl.mechanism: PLAIN
      sasl.username: fuzz
      sasl.password: "{{ env_var('DSFLOW_FUZZ_SASL_PASSWORD') }}"
"""

schema = schemathesis.openapi.from_dict(json.loads((REPO / "docs" / "openapi.json").read_text()))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    os.environ[SECRET_ENV] = SECRET
    root = make_project(tmp_path_factory.mktemp("fuzz"), {
        **SERVER_FILES, "stores/kafka.yml": STORE, "dsflow.yml": server_config("127.0.0.1:1")})  # no broker there
    deploy_recorded(root)
    with LiveServer(root) as server:
        server.tokens = add_users(server, ("root", "alice"))
        yield server


@schema.exclude(path_regex=r"/tail$").parametrize()
@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
def test_no_500_no_traceback_no_secret(case, live) -> None:
    user = "alice" if case.operation.path.startswith("/api/v1/topics") else "root"
    headers = {**(case.headers or {}), "Authorization": f"Bearer {live.tokens[user]}"}
    response = case.call(base_url=live.url, headers=headers, timeout=60)
    text = response.text
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {text[:500]}"
    assert "Traceback" not in text and 'File "' not in text
    assert SECRET in registered()
    leaked = [s for s in registered() if s in text]
    assert not leaked, f"{case.method} {case.formatted_path} answered a secret value"
    case.validate_response(response, checks=[schemathesis.checks.response_schema_conformance])  # as documented



def test_every_other_operation_answers_401_without_a_valid_token(live) -> None:
    document = json.loads((REPO / "docs" / "openapi.json").read_text())
    bad = live.tokens["alice"][:-2] + "xx"
    for path, methods in document["paths"].items():
        if path in ("/api/v1/health", "/api/v1/auth/login"):
            continue
        url = live.url + path.replace("{address}", "relation.analytics.public.pageviews").replace(
            "{relation}", "pageviews").replace("{name}", "analytics.public.counts")
        for method in methods:
            for headers in ({}, {"Authorization": f"Bearer {bad}"}, {"Authorization": "Basic cm9vdDpyb290"}):
                answer = requests.request(method, url, headers=headers, json={}, timeout=30)
                assert answer.status_code == 401, f"{method} {path} {headers}: {answer.status_code}"
                assert answer.json()["error"]["code"] == "DSF-E325"
