"""`dsflow serve` authentication against a real server on 127.0.0.1: tokens, login, rate limit, revocation, and
what the identity store keeps at rest (hashes only)."""

from __future__ import annotations

import json
import sqlite3

import pytest
import requests
from support.projects import make_project
from support.serving import SERVER_FILES, LiveServer, add_users, deploy_recorded

from dsflow.server.identity import MAX_FAILURES


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("auth"), SERVER_FILES)
    deploy_recorded(root)
    with LiveServer(root) as server:
        server.tokens = add_users(server)
        yield server


def _get(live, path: str, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return requests.get(live.url + path, headers=headers, timeout=30)


def test_health_needs_no_token(live) -> None:
    answer = _get(live, "/api/v1/health")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


@pytest.mark.parametrize("token", [None, "", "nonsense", "dsf_000000000000_" + "x" * 43])
def test_401_without_a_valid_token(live, token) -> None:
    answer = _get(live, "/api/v1/whoami", token)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "DSF-E325"
    assert answer.headers["WWW-Authenticate"] == "Bearer"


def test_a_token_with_a_wrong_secret_is_refused(live) -> None:
    token = live.tokens["alice"]
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert _get(live, "/api/v1/whoami", forged).status_code == 401


def test_whoami_gives_the_deployed_roles(live) -> None:
    assert _get(live, "/api/v1/whoami", live.tokens["erin"]).json() == {
        "user": "erin", "roles": ["analyst", "engineer", "public"]}
    assert _get(live, "/api/v1/whoami", live.tokens["nobody"]).json() == {"user": "nobody", "roles": ["public"]}


def test_login_gives_a_session_token(live) -> None:
    answer = requests.post(live.url + "/api/v1/auth/login",
                           json={"username": "alice", "password": "alice-password"}, timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["token"].startswith("dsf_") and body["expires_at"]
    assert _get(live, "/api/v1/whoami", body["token"]).json()["user"] == "alice"


def test_wrong_password_is_401_and_the_sixth_attempt_429(live) -> None:
    def attempt(password: str) -> requests.Response:
        return requests.post(live.url + "/api/v1/auth/login", json={"username": "erin", "password": password},
                             timeout=30)

    for _ in range(MAX_FAILURES):
        answer = attempt("wrong")
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "DSF-E326"
    throttled = attempt("erin-password")  # even the right password: the name is throttled for a minute
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "DSF-E327"
    assert 1 <= int(throttled.headers["Retry-After"]) <= 61
    other = requests.post(live.url + "/api/v1/auth/login", json={"username": "root", "password": "root-password"},
                          timeout=30)
    assert other.status_code == 200  # per user name


def test_unknown_user_is_told_the_same_as_a_wrong_password(live) -> None:
    answer = requests.post(live.url + "/api/v1/auth/login", json={"username": "mallory", "password": "x"},
                           timeout=30)
    assert answer.status_code == 401
    assert answer.json()["error"]["message"] == "wrong user name or password"


def test_tokens_are_stored_hashed(live) -> None:
    token, info = live.identity.create_token("root", "hashed-check")
    secret = token.split("_", 2)[2]
    raw = live.identity.path.read_bytes()
    assert secret.encode() not in raw and token.encode() not in raw
    with sqlite3.connect(live.identity.path) as db:
        stored, = db.execute("SELECT hash FROM tokens WHERE id = ?", (info.id,)).fetchone()
        passwords = [h for (h,) in db.execute("SELECT password_hash FROM users")]
    assert stored.startswith("$argon2")
    assert all(h.startswith("$argon2") for h in passwords) and b"root-password" not in raw
    assert _get(live, "/api/v1/whoami", token).status_code == 200


def test_a_revoked_token_stops_working(live) -> None:
    token, info = live.identity.create_token("alice", "to-revoke")
    assert _get(live, "/api/v1/whoami", token).status_code == 200
    live.identity.revoke(info.id)
    assert _get(live, "/api/v1/whoami", token).status_code == 401
    listed = {t.id: t for t in live.identity.tokens("alice")}
    assert listed[info.id].revoked and listed[info.id].last_used is not None


def test_cli_users_and_tokens(live, tmp_path) -> None:
    from click.testing import CliRunner

    from dsflow.cli import cli

    root = str(live.app.state.server.options.project_dir)
    runner = CliRunner()
    added = runner.invoke(cli, ["-C", root, "users", "add", "carol"], input="carol-pass\n")
    assert added.exit_code == 0, added.output
    created = runner.invoke(cli, ["-C", root, "tokens", "create", "carol", "--name", "ci"])
    assert created.exit_code == 0, created.output
    token = created.stdout.strip().splitlines()[0]
    assert token.startswith("dsf_")
    assert _get(live, "/api/v1/whoami", token).json()["user"] == "carol"
    listing = runner.invoke(cli, ["-C", root, "tokens", "list", "--user", "carol"])
    assert token not in listing.output and token.split("_")[1] in listing.output
    revoked = runner.invoke(cli, ["-C", root, "tokens", "revoke", token.split("_")[1]])
    assert revoked.exit_code == 0
    assert _get(live, "/api/v1/whoami", token).status_code == 401
    assert "carol" in runner.invoke(cli, ["-C", root, "users", "list"]).output
    assert runner.invoke(cli, ["-C", root, "users", "remove", "carol"]).exit_code == 0


def _call(live, method: str, path: str, token: str | None, **kw) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return requests.request(method, live.url + path, headers=headers, timeout=30, **kw)


def test_user_management_needs_manage_users_and_works_through_the_api(live) -> None:
    root, alice = live.tokens["root"], live.tokens["alice"]
    for method, path, body in [("GET", "/api/v1/users", None),
                               ("POST", "/api/v1/users", {"name": "x1", "password": "p"}),
                               ("DELETE", "/api/v1/users/erin", None), ("GET", "/api/v1/tokens?user=erin", None),
                               ("POST", "/api/v1/users/erin/tokens", {"name": "t"})]:
        denied = _call(live, method, path, alice, json=body)
        assert denied.status_code == 403, (method, path, denied.text)
        assert denied.json()["error"]["code"] == "DSF-E328" and "MANAGE_USERS" in denied.json()["error"]["message"]
        assert _call(live, method, path, None, json=body).status_code == 401
    assert live.identity.users() and "x1" not in {u["name"] for u in live.identity.users()}  # nothing was done

    added = _call(live, "POST", "/api/v1/users", root, json={"name": "frank", "password": "frank-password"})
    assert added.status_code == 201 and added.json()["name"] == "frank"
    assert "frank" in {u["name"] for u in _call(live, "GET", "/api/v1/users", root).json()}
    again = _call(live, "POST", "/api/v1/users", root, json={"name": "frank", "password": "p"})
    assert again.status_code == 400 and again.json()["error"]["code"] == "DSF-E321"
    bad = _call(live, "POST", "/api/v1/users", root, json={"name": "-no", "password": "p"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "DSF-E320"

    created = _call(live, "POST", "/api/v1/users/frank/tokens", root, json={"name": "ci"})
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    assert _call(live, "GET", "/api/v1/whoami", token).json()["user"] == "frank"
    listed = _call(live, "GET", "/api/v1/tokens?user=frank", root).json()
    assert [t["name"] for t in listed] == ["ci"] and all("token" not in t for t in listed)
    assert token not in json.dumps(listed) and token.split("_", 2)[2] not in live.identity.path.read_bytes().decode(
        "latin-1")

    assert _call(live, "DELETE", "/api/v1/users/root", root).json()["error"]["code"] == "DSF-E338"
    assert _call(live, "DELETE", "/api/v1/users/frank", root).status_code == 204
    assert _call(live, "GET", "/api/v1/whoami", token).status_code == 401  # its tokens went with it
    missing = _call(live, "DELETE", "/api/v1/users/frank", root)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "DSF-E322"


def test_every_user_manages_its_own_tokens_only(live) -> None:
    alice = live.tokens["alice"]
    mine = _call(live, "POST", "/api/v1/users/alice/tokens", alice, json={"name": "laptop"})
    assert mine.status_code == 201
    token, token_id = mine.json()["token"], mine.json()["id"]
    assert token_id in {t["id"] for t in _call(live, "GET", "/api/v1/tokens", alice).json()}
    erins = next(t.id for t in live.identity.tokens("erin"))
    refused = _call(live, "DELETE", f"/api/v1/tokens/{erins}", alice)
    assert refused.status_code == 403 and "MANAGE_USERS" in refused.json()["error"]["message"]
    assert _call(live, "DELETE", "/api/v1/tokens/000000000000", alice).status_code == 403  # no id probing
    assert _call(live, "DELETE", "/api/v1/tokens/000000000000", live.tokens["root"]).status_code == 404
    assert _call(live, "DELETE", f"/api/v1/tokens/{token_id}", alice).status_code == 204
    assert _call(live, "GET", "/api/v1/whoami", token).status_code == 401
    assert _call(live, "GET", "/api/v1/whoami", alice).status_code == 200  # the others still work
