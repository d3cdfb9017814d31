"""The privilege matrix of issue 23: for every (user, privilege, object, action) of a generated project, the REST
API and GraphQL answer allowed or denied exactly as a reference computed from the declared grants says (plain
Python over the declarations of tests/support/access_matrix.py, not dsflow.core.access), with 401 without credentials
and
403 naming the missing privilege.

The project is deployed for real (`dsflow apply`, DSFLOW_RUNTIME=off) against the session's broker; its two query
drivers are stopped right after the apply (the catalog, grants and plans need no running query), so `status` says
"stopped". The working tree is then changed (a store, databases, schemas, relations, a query, a generator, a role,
a grant, a revoke, a binding, an update and a delete) so that `POST /plan` has one change needing each kind of
privilege, and every user's authorization of each change is compared with the reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import pytest

from support.access_matrix import (DROPPED, INSERT, NEW_OWNER, ORG, PRIVILEGES, RELATIONS, ROLES, SOURCES, UNBOUND,
                                    USERS, V2_RELATIONS, Reference, kind_of, objects, owner_of, write_project)



def dsflow(root: Path, broker: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}", *args],
                          input=stdin, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "DSFLOW_RUNTIME": "off", "COLUMNS": "300"})


def stop_query_drivers(root: Path) -> None:
    """The deployed queries stay deployed; their drivers stop (nothing here needs them, the machine is small)."""
    from dsflow.adapters import process
    from dsflow.engine.executors import query_identity

    state = json.loads((root / ".dsflow" / "state" / "dev.json").read_text())
    for address, resource in state["resources"].items():
        if address.startswith("query."):
            outputs = resource["outputs"]
            process.stop(outputs.get("pid"), query_identity(outputs), timeout=1)  # mid-start: no graceful stop


@dataclass(frozen=True)
class Served:
    """The running server, a token per user, and the reference."""

    url: str
    tokens: dict[str, str]
    ref: Reference


@pytest.fixture(scope="module")
def served(broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    import uvicorn

    from dsflow.engine import operations
    from dsflow.adapters.kafka.devbroker import free_port
    from dsflow.server.app import create_app
    from dsflow.server.identity import IdentityStore, identity_path

    root = tmp_path_factory.mktemp("privmatrix") / "project"
    prefix = f"pm{uuid.uuid4().hex[:8]}_"
    write_project(root, prefix, v2=False)
    ran = dsflow(root, broker, "apply", "--auto-approve")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    stop_query_drivers(root)
    with ThreadPoolExecutor(4) as pool:  # one record in each topic no query writes: a read finds one at once
        for ran in pool.map(lambda fqn: dsflow(root, broker, "topic", "produce", fqn,
                                               stdin='{"id": 1, "amount": 5, "who": "x"}\n'), SOURCES):
            assert ran.returncode == 0, ran.stdout + ran.stderr
    write_project(root, prefix, v2=True)  # the working tree the plans are made of
    options = operations.Options(root, None, {"bootstrap": broker})
    identity = IdentityStore(identity_path(operations.load(options).workspace))

    def token(user: str) -> str:
        identity.add_user(user, f"pw-{user}")
        return identity.create_token(user)[0]

    with ThreadPoolExecutor(4) as pool:  # argon2 hashing takes ~0.5 s a hash here and lets go of the GIL
        tokens = dict(zip(ALL_USERS, pool.map(token, ALL_USERS), strict=True))
    server = uvicorn.Server(uvicorn.Config(create_app(options), host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield Served(f"http://127.0.0.1:{server.config.port}", tokens, Reference(USERS))
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def http(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=60) as client:
        yield client


def auth(served: Served, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {served.tokens[user]}"}


ALL_USERS = [*USERS, UNBOUND]
DEPLOYED = [a for a in objects() if a != ORG]

GRAPHQL_LISTS = """
  stores { address } databases { address } schemas { address } relations { address }
  queries { address sinkRelation { address } sourceRelations { address } }
  lineage { nodes { id } edges { source target } } status { address } whoami { user roles }
"""


def described(address: str) -> str:
    """The privilege a refusal to show `address` names: SELECT for a relation, MANAGE for a query."""
    return {"relation": "SELECT", "query": "MANAGE"}.get(kind_of(address), "USAGE")


def names_missing(message: str, missing: list[tuple[str, str]]) -> bool:
    return bool(missing) and all(f"{p} on {a}" in message for p, a in missing)


ENDPOINTS = [("GET", "/api/v1/whoami", None), ("GET", "/api/v1/catalog", None),
             ("GET", "/api/v1/relations/sales.public.orders", None), ("GET", "/api/v1/queries", None),
             ("GET", "/api/v1/queries/sales.public.big_orders", None), ("GET", "/api/v1/lineage", None),
             ("GET", "/api/v1/status", None), ("GET", "/api/v1/metrics", None),
             ("GET", "/api/v1/topics/sales.public.orders/records?limit=1&timeout=1", None),
             ("POST", "/api/v1/plan", {"refresh": False}), ("POST", "/api/v1/apply", {"plan": {}}),
             ("POST", "/api/v1/views/query", {"sql": "SELECT 1"}),
             ("GET", "/api/v1/topics/sales.public.orders/tail", None),
             ("POST", "/api/v1/queries/follow", {"sql": "SELECT id FROM sales.public.orders"}),
             ("POST", "/graphql", {"query": "{ whoami { user } }"})]


def test_every_endpoint_answers_401_without_or_with_bad_credentials(served: Served, http: httpx.Client) -> None:
    assert http.get("/api/v1/health").json() == {"status": "ok"}
    bad = [{}, {"Authorization": "Bearer dsf_0123456789ab_" + "x" * 40}, {"Authorization": "Bearer nonsense"},
           {"Authorization": "Basic " + "cm9vdDpwdy1yb290"}]
    for method, path, body in ENDPOINTS:
        for headers in bad:
            answer = http.request(method, path, json=body, headers=headers)
            assert answer.status_code == 401, (method, path, headers, answer.text)
            assert answer.json()["error"]["code"] == "DSF-E325" and "Traceback" not in answer.text


def test_whoami_gives_the_bound_roles_with_inherited_ones_and_public(served: Served, http: httpx.Client) -> None:
    for user in ALL_USERS:
        expected = sorted(served.ref.roles(user))
        assert http.get("/api/v1/whoami", headers=auth(served, user)).json() == {"user": user, "roles": expected}
        answer = http.post("/graphql", json={"query": "{ whoami { user roles } }"}, headers=auth(served, user))
        assert answer.json() == {"data": {"whoami": {"user": user, "roles": expected}}}


def test_catalog_lineage_and_status_list_exactly_what_each_user_may_see(served: Served, http: httpx.Client) -> None:
    """REST and GraphQL lists against the reference's visibility of every deployed object, per user."""
    for user in ALL_USERS:
        visible = {a for a in DEPLOYED if served.ref.visible(user, a)}
        rest = http.get("/api/v1/catalog", headers=auth(served, user)).json()
        listed = {item["address"] for group in rest.values() for item in group}
        assert listed == visible, (user, sorted(listed ^ visible))
        assert all(item["owner"] == owner_of(item["address"]) for group in rest.values() for item in group)
        graph = http.get("/api/v1/lineage", headers=auth(served, user)).json()
        flowing = {a for a in visible if kind_of(a) in ("relation", "query")}
        assert {n["id"] for n in graph["nodes"]} == flowing, user
        assert all({e["source"], e["target"]} <= flowing for e in graph["edges"])
        status = http.get("/api/v1/status", headers=auth(served, user)).json()
        assert {e["address"] for e in status} == {a for a in visible if kind_of(a) == "query"}, user
        assert all(e["state"] == "stopped" for e in status)
        answer = http.post("/graphql", json={"query": "{" + GRAPHQL_LISTS + "}"}, headers=auth(served, user)).json()
        data = answer["data"]
        listed = {item["address"] for key in ("stores", "databases", "schemas", "relations", "queries")
                  for item in data[key]}
        assert listed == visible, (user, sorted(listed ^ visible))
        assert {n["id"] for n in data["lineage"]["nodes"]} == flowing
        assert {e["address"] for e in data["status"]} == {a for a in visible if kind_of(a) == "query"}
        check_query_fields(served, user, data["queries"], answer.get("errors", []))


def check_query_fields(served: Served, user: str, queries: list[dict], errors: list[dict]) -> None:
    """A query's sinkRelation and sourceRelations: shown when the caller may see them, else a GraphQL error
    naming the missing privilege (and null)."""
    for index, query in enumerate(queries):
        name = query["address"].partition(".")[2]
        for field, relations in (("sinkRelation", [name]), ("sourceRelations", [RELATIONS[name][3]])):
            hidden = [r for r in relations if not served.ref.visible(user, f"relation.{r}")]
            errs = [e for e in errors if e["path"] == ["queries", index, field]]
            if not hidden:
                assert query[field] is not None and not errs, (user, name, field, errs)
                continue
            assert query[field] is None and len(errs) == 1, (user, name, field, query[field])
            missing = served.ref.missing(user, "SELECT", f"relation.{hidden[0]}")
            assert errs[0]["extensions"]["code"] == "DSF-E350" and names_missing(errs[0]["message"], missing)


def test_one_relation_or_query_answers_403_naming_the_missing_privilege(served: Served, http: httpx.Client) -> None:
    """GET /relations/{address}, GET /queries/{name} and GraphQL relation(...)/query(...): 200 (data) when the
    reference says the user may see it, else 403 (a GraphQL error) naming what it lacks; 404 (DSF-E351) for
    what is not deployed."""
    targets = [a for a in DEPLOYED if kind_of(a) in ("relation", "query")]
    fields = " ".join(f'r{i}: {"relation(address" if kind_of(a) == "relation" else "query(name"}: "{a}") {{ address }}'
                      for i, a in enumerate(targets))
    for user in ALL_USERS:
        answer = http.post("/graphql", json={"query": "{ " + fields + ' gone: relation(address: "x.y.z") '
                                             "{ address } }"}, headers=auth(served, user)).json()
        errors = {e["path"][0]: e for e in answer.get("errors", [])}
        assert errors.pop("gone")["extensions"]["code"] == "DSF-E351"
        for i, address in enumerate(targets):
            kind, name = address.split(".", 1)
            rest = http.get(f"/api/v1/{'relations' if kind == 'relation' else 'queries'}/{name}",
                            headers=auth(served, user))
            if served.ref.visible(user, address):
                assert rest.status_code == 200 and rest.json()["address"] == address, (user, address, rest.text)
                assert answer["data"][f"r{i}"] == {"address": address} and f"r{i}" not in errors
                continue
            missing = served.ref.missing(user, described(address), address)
            assert rest.status_code == 403, (user, address, rest.text)
            assert rest.json()["error"]["code"] == "DSF-E328" and names_missing(rest.json()["error"]["message"],
                                                                                  missing), (user, rest.text, missing)
            error = errors[f"r{i}"]
            assert answer["data"][f"r{i}"] is None and error["extensions"]["code"] == "DSF-E350"
            assert error["message"] == rest.json()["error"]["message"]


def test_reading_a_topic_needs_select_and_usage_on_its_namespaces(served: Served, http: httpx.Client) -> None:
    """GET /topics/{relation}/records for every user and relation: allowed exactly when the reference gives SELECT
    (with USAGE on its database and schema). Not the relation the working tree dropped: the server decodes a topic
    with the checked-out declaration of its relation, and answers 404 without one."""
    for user in ALL_USERS:
        for address in (a for a in DEPLOYED if kind_of(a) == "relation" and a != f"relation.{DROPPED}"):
            fqn = address.partition(".")[2]
            timeout = 5 if fqn in SOURCES else 0.2  # a query's sink stays empty: its driver was stopped
            answer = http.get(f"/api/v1/topics/{fqn}/records", params={"limit": 1, "timeout": timeout},
                              headers=auth(served, user))
            missing = served.ref.missing(user, "SELECT", address)
            if not missing:
                assert answer.status_code == 200, (user, address, answer.text)
                assert len(answer.json()["records"]) == (1 if fqn in SOURCES else 0)
            else:
                assert answer.status_code == 403, (user, address, answer.text)
                error = answer.json()["error"]
                assert error["code"] == "DSF-E328" and names_missing(error["message"], missing), (user, error)


REQUIREMENTS = {  # (kind, action) -> what a change needs, from its address and attributes
    ("store", "create"): lambda a, d: [("CREATE_STORE", ORG)],
    ("database", "create"): lambda a, d: [("CREATE_DATABASE", ORG)],
    ("schema", "create"): lambda a, d: [("CREATE", f"database.{a.split('.')[1]}")],
    ("relation", "create"): lambda a, d: [("CREATE", "schema." + ".".join(a.split(".")[1:3])),
                                          ("USAGE", f"store.{d['store']}")],
    ("query", "create"): lambda a, d: [("CREATE", "schema." + ".".join(d["sink"].split(".")[:2]))]
    + [("INSERT", f"relation.{d['sink']}")] * (d["statement"] == "insert")
    + [("SELECT", f"relation.{s[0]}") for s in d["sources"]],
    ("datagen", "create"): lambda a, d: [("INSERT", f"relation.{d['relation']}")],
}


def required(change: dict) -> list[tuple[str, str]]:
    """What a change of the plan asks of its author (DeltaStream: organization privileges create top-level objects
    and roles and manage grants; CREATE on a namespace creates in it; anything else needs ownership)."""
    kind = kind_of(change["address"])
    if kind == "role":
        return [("CREATE_ROLE", ORG)]
    if kind in ("grant", "binding"):
        return [("MANAGE_GRANTS", ORG)]
    rule = REQUIREMENTS.get((kind, change["action"]))
    return rule(change["address"], change["after"]) if rule else [("OWNERSHIP", change["address"])]


EXPECTED_CHANGES = {
    ("store.kafka_new", "create"), ("database.newdb", "create"), ("database.sales", "update"),
    ("schema.hr.extra", "create"), ("schema.newdb.public", "create"), ("schema.sales.extra", "create"),
    *((f"relation.{r}", "create") for r in V2_RELATIONS), ("query.sales.public.cust_copy", "create"),
    (INSERT[2], "create"),
    (f"relation.{NEW_OWNER[0]}", "update"), (f"relation.{DROPPED}", "delete"), (f"query.{DROPPED}", "delete"),
    *((f"datagen.gen_{r.rsplit('.', 1)[1]}", "create") for r in SOURCES), ("role.newrole", "create"),
    ("binding.newbie", "create"), ("grant.newrole.usage.database.sales", "create"),
    ("grant.public.usage.database.hr", "delete"), (f"grant.hrview.select.relation.{DROPPED}", "delete")}
"""v2's changes: one needing each privilege the plan can ask for"""


def test_plan_authorizes_each_change_exactly_as_the_grants_say(served: Served, http: httpx.Client) -> None:
    """POST /plan for every user: the same changes, and for each whether the user may make it and what it lacks."""
    for user in ALL_USERS:
        answer = http.post("/api/v1/plan", json={"refresh": False}, headers=auth(served, user))
        assert answer.status_code == 200, answer.text
        changes = {c["address"]: c for c in answer.json()["plan"]["changes"] if c["action"] not in ("no-op",)}
        assert {(c["address"], c["action"]) for c in changes.values()} == EXPECTED_CHANGES
        verdicts = answer.json()["authorization"]
        assert {v["address"] for v in verdicts} == set(changes)
        for verdict in verdicts:
            needs = required(changes[verdict["address"]])
            missing = {m for p, a in needs for m in served.ref.missing(user, p, a)}
            got = {(m["privilege"], m["on"]) for m in verdict["missing"]}
            assert verdict["allowed"] == (not missing) and got == missing, (user, verdict, sorted(missing))
            assert not missing or names_missing(verdict["message"], sorted(missing))


def test_apply_refuses_a_plan_with_any_change_the_caller_may_not_make(served: Served, http: httpx.Client) -> None:
    """POST /apply of the saved plan: 403 naming every refused change, for each user the reference refuses one;
    nothing is applied (the state's serial does not move)."""
    plan = http.post("/api/v1/plan", json={"refresh": False}, headers=auth(served, "root")).json()["plan"]
    serial = plan.get("state_serial")
    for user in ALL_USERS:
        refused = [c["address"] for c in plan["changes"] if c["action"] != "no-op"
                   and any(served.ref.missing(user, p, a) for p, a in required(c))]
        if not refused:
            assert "orgadmin" in served.ref.roles(user)  # the one user who may apply it all: not applied here
            continue
        answer = http.post("/api/v1/apply", json={"plan": plan}, headers=auth(served, user))
        assert answer.status_code == 403, (user, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "DSF-E332" and all(a in error["message"] for a in refused), (user, error)
    again = http.post("/api/v1/plan", json={"refresh": False}, headers=auth(served, "root")).json()["plan"]
    assert again.get("state_serial") == serial


def test_the_matrix_has_both_answers_for_every_privilege(served: Served, http: httpx.Client) -> None:
    """The probes above are worth something: for every privilege a REST or GraphQL action needs (directly or as
    the USAGE on a namespace around it), some user is allowed and some user is refused. MANAGE_USERS guards the
    identity store, which only the CLI manages: no endpoint asks for it."""
    plan = http.post("/api/v1/plan", json={"refresh": False}, headers=auth(served, "root")).json()["plan"]
    probes = {(described(a), a) for a in DEPLOYED if kind_of(a) in ("relation", "query")}
    probes |= {need for c in plan["changes"] if c["action"] != "no-op" for need in required(c)}
    answers: dict[str, set[bool]] = {}
    for privilege, address in probes:
        for user in ALL_USERS:
            for p, a in [*served.ref.missing(user, privilege, address), (privilege, address)]:
                answers.setdefault(p, set()).add(served.ref.allowed(user, p, a))
    expected = {*(p for ps in PRIVILEGES.values() for p in ps), "OWNERSHIP"} - {"MANAGE_USERS"}
    assert {p for p, seen in answers.items() if seen == {True, False}} == expected, answers
    granted_all = [(r, on) for r, (_, grants) in ROLES.items() for p, on in grants if p == "ALL"]
    assert {kind_of(on) for _, on in granted_all} == {"schema", "database", "store", ORG}


def test_graphql_answers_what_is_not_a_graphql_request_in_the_api_error_shape(served: Served,
                                                                              http: httpx.Client) -> None:
    headers = auth(served, "alice")
    for answer in (http.post("/graphql", content=b"{not json", headers={**headers, "Content-Type": "application/json"}),
                   http.post("/graphql", json={}, headers=headers),
                   http.get("/graphql", params={"query": "{ whoami { user } }"}, headers=headers)):
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "DSF-E353", answer.text
    invalid = http.post("/graphql", json={"query": "mutation { x }"}, headers=headers)
    assert invalid.status_code == 200 and invalid.json()["data"] is None and invalid.json()["errors"]


def test_tailing_a_topic_or_following_a_query_needs_select_too(served: Served, http: httpx.Client) -> None:
    """The streams check before they start: GET /topics/{relation}/tail opens (its `ready` event) exactly when the
    reference gives SELECT; POST /queries/follow over a relation is refused (403 naming what is missing) exactly
    when it does not (an allowed follow would start Spark: not here)."""
    for user in ALL_USERS:
        for address in (a for a in DEPLOYED if kind_of(a) == "relation" and a != f"relation.{DROPPED}"):
            fqn = address.partition(".")[2]
            missing = served.ref.missing(user, "SELECT", address)
            with http.stream("GET", f"/api/v1/topics/{fqn}/tail", headers=auth(served, user)) as tail:
                if missing:
                    assert tail.status_code == 403 and names_missing(tail.read().decode(), missing), (user, fqn)
                else:
                    assert tail.status_code == 200, (user, fqn)
                    assert next(tail.iter_lines()).startswith("event: ready")
            if missing:
                follow = http.post("/api/v1/queries/follow", json={"sql": f"SELECT id FROM {fqn}"},
                                   headers=auth(served, user))
                assert follow.status_code == 403 and names_missing(follow.json()["error"]["message"], missing)
