"""Every REST endpoint of `dsflow serve` once with an allowed and a denied caller, against a real server on
127.0.0.1 over a real project: the catalog, relations, queries, lineage, status, metrics, plan, apply of a saved
plan (a refused change, a stale plan), a materialized view, a topic's records and its tail (real tansu broker)."""

from __future__ import annotations

import json
import textwrap
import threading

import pytest
import requests
from support.projects import make_project
from support.serving import SERVER_FILES, LiveServer, add_users, deploy_recorded, server_config, sse_events
from support.waiting import wait_for

from dsflow.engine import operations, topics
from dsflow.adapters.sqlite import mv

PAGEVIEWS = "relation.analytics.public.pageviews"
PAYMENTS = "relation.analytics.public.payments"
COUNTS = "relation.analytics.public.counts"
QUERY = "query.analytics.public.counts"


def _config(bootstrap: str) -> str:
    return server_config(bootstrap)


@pytest.fixture(scope="module")
def live(tmp_path_factory, broker):
    root = make_project(tmp_path_factory.mktemp("api"), {**SERVER_FILES, "dsflow.yml": _config(broker)})
    deploy_recorded(root)
    project = operations.load(operations.Options(root)).project
    database = mv.database_path(root, project.state_path, project.environment)
    table = project.relation("analytics.public.counts").topic
    mv.ensure_table(database, table, [("userid", "VARCHAR"), ("n", "BIGINT")], ["userid"])
    mv.write_batch(database, table, ["userid", "n"], ["userid"], [("u1", 3), ("u2", 5)], "ck", 0)
    target = topics.resolve(project, "analytics.public.pageviews")
    topics.create(target, 1, 1, None)
    topics.produce(target, [json.dumps({"id": 1, "userid": "u1"})], None)
    with LiveServer(root) as server:
        server.tokens = add_users(server)
        server.project = project
        yield server


def call(live, method: str, path: str, user: str | None, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {live.tokens[user]}"} if user else {}
    return requests.request(method, live.url + path, headers=headers, timeout=60, **kwargs)


def denied(answer: requests.Response, privilege: str, on: str) -> None:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "DSF-E328"
    assert f"{privilege} on {on}" in error["message"], error["message"]


def test_catalog_is_filtered_by_the_grants(live) -> None:
    alice = call(live, "GET", "/api/v1/catalog", "alice").json()
    assert {r["address"] for r in alice["relations"]} == {PAGEVIEWS, COUNTS}
    assert [q["address"] for q in alice["queries"]] == [QUERY]  # SELECT on its sink shows it
    pageviews = next(r for r in alice["relations"] if r["address"] == PAGEVIEWS)
    assert pageviews["columns"] == [{"name": "id", "type": "BIGINT"}, {"name": "userid", "type": "VARCHAR"}]
    assert pageviews["value_format"] == "json" and pageviews["schema"] == "public"
    root = call(live, "GET", "/api/v1/catalog", "root").json()
    assert {r["address"] for r in root["relations"]} == {PAGEVIEWS, PAYMENTS, COUNTS}
    assert [s["name"] for s in root["stores"]] == ["kafka_main"]
    nobody = call(live, "GET", "/api/v1/catalog", "nobody").json()
    assert nobody["relations"] == [] and nobody["queries"] == [] and nobody["stores"] == []
    assert call(live, "GET", "/api/v1/catalog", None).status_code == 401


def test_one_relation(live) -> None:
    answer = call(live, "GET", f"/api/v1/relations/{PAGEVIEWS}", "alice")
    assert answer.status_code == 200 and answer.json()["topic"].endswith("_pageviews")  # the test's topic prefix
    assert call(live, "GET", "/api/v1/relations/analytics.public.pageviews", "alice").json()["address"] == PAGEVIEWS
    denied(call(live, "GET", f"/api/v1/relations/{PAYMENTS}", "alice"), "SELECT", PAYMENTS)
    missing = call(live, "GET", "/api/v1/relations/relation.analytics.public.nope", "root")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "DSF-E329"


def test_queries_list_and_detail(live) -> None:
    listed = call(live, "GET", "/api/v1/queries", "erin").json()
    assert [q["address"] for q in listed] == [QUERY]
    assert "COUNT" in listed[0]["sql"].upper() and listed[0]["sink"] == "analytics.public.counts"
    detail = call(live, "GET", "/api/v1/queries/analytics.public.counts", "erin")
    assert detail.status_code == 200 and detail.json()["history"] == []
    assert detail.json()["state"] == "stopped"  # recorded, never started
    assert call(live, "GET", "/api/v1/queries", "nobody").json() == []
    denied(call(live, "GET", f"/api/v1/queries/{QUERY}", "nobody"), "MANAGE", QUERY)


def test_lineage(live) -> None:
    lineage = call(live, "GET", "/api/v1/lineage", "alice").json()
    assert {n["id"] for n in lineage["nodes"]} == {PAGEVIEWS, COUNTS, QUERY}
    assert {(e["source"], e["target"]) for e in lineage["edges"]} == {(PAGEVIEWS, QUERY), (QUERY, COUNTS)}
    assert call(live, "GET", "/api/v1/lineage", "nobody").json() == {"nodes": [], "edges": []}


def test_status_and_metrics(live) -> None:
    status = call(live, "GET", "/api/v1/status", "erin").json()
    assert [(e["address"], e["state"]) for e in status] == [(QUERY, "stopped")]
    assert call(live, "GET", "/api/v1/status", "nobody").json() == []
    metrics = call(live, "GET", "/api/v1/metrics", "erin")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'dsflow_query_up{query="analytics.public.counts"} 0.0' in metrics.text
    assert "analytics.public.counts" not in call(live, "GET", "/api/v1/metrics", "nobody").text


def test_view_query(live) -> None:
    answer = call(live, "POST", "/api/v1/views/query", "alice",
                  json={"sql": "SELECT userid, n FROM counts ORDER BY userid"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"columns": ["userid", "n"], "rows": [["u1", 3], ["u2", 5]]}
    denied(call(live, "POST", "/api/v1/views/query", "nobody", json={"sql": "SELECT * FROM counts"}), "SELECT", COUNTS)
    bad = call(live, "POST", "/api/v1/views/query", "alice", json={"sql": "DROP TABLE counts"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "DSF-E720"


def test_topic_records_and_tail(live) -> None:
    project = live.project
    target = topics.resolve(project, "analytics.public.pageviews")  # holds one record (the fixture)
    answer = call(live, "GET", "/api/v1/topics/pageviews/records?limit=1&timeout=10", "alice")
    assert answer.status_code == 200, answer.text
    assert [r["value"] for r in answer.json()["records"]] == [{"id": 1, "userid": "u1"}]
    denied(call(live, "GET", f"/api/v1/topics/{PAYMENTS}/records?limit=1&timeout=1", "alice"), "SELECT", PAYMENTS)
    denied(call(live, "GET", "/api/v1/topics/pageviews/tail", "nobody"), "USAGE", "database.analytics")
    with call(live, "GET", "/api/v1/topics/pageviews/tail?from_beginning=true", "alice", stream=True) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = sse_events(stream.iter_lines(decode_unicode=True))
        assert next(events)[0] == "ready"
        event, data = next(events)  # the record produced before: the consumer reads now, so no later one is missed
        assert event == "record" and data["value"] == {"id": 1, "userid": "u1"}
        topics.produce(target, [json.dumps({"id": 2, "userid": "u2"})], None)
        event, data = next(e for e in events if e[0] != "ping")
        assert event == "record" and data["value"] == {"id": 2, "userid": "u2"}
    with call(live, "GET", "/api/v1/topics/pageviews/tail", "alice", stream=True) as stream:
        events = sse_events(stream.iter_lines(decode_unicode=True))
        assert next(events)[0] == "ready"  # sent once the reader is positioned at the end: what follows is read
        topics.produce(target, [json.dumps({"id": 3, "userid": "u3"})], None)
        event, data = next(e for e in events if e[0] != "ping")
        assert event == "record" and data["value"] == {"id": 3, "userid": "u3"}
    wait_for(lambda: not any(t.name == "dsflow-serve-stream" for t in threading.enumerate()), 60,
             "the tail's reader to stop once the client left")  # the server runs in this process



def test_follow_is_refused_without_select_on_its_sources(live) -> None:
    answer = call(live, "POST", "/api/v1/queries/follow", "alice", json={"sql": "SELECT id FROM payments"})
    denied(answer, "SELECT", PAYMENTS)


def test_graphql_needs_a_token(live) -> None:
    assert call(live, "POST", "/graphql", None, json={"query": "{ whoami { user } }"}).status_code == 401


DATABASES = """\
databases:
  - name: sandbox
"""


@pytest.fixture
def apply_live(tmp_path):
    root = make_project(tmp_path, {**SERVER_FILES, "dsflow.yml": _config("127.0.0.1:1")})
    deploy_recorded(root)
    with LiveServer(root) as server:
        server.tokens = add_users(server, ("erin", "root"))
        server.root = root
        yield server


def _saved_plan(live, user: str) -> dict:
    answer = call(live, "POST", "/api/v1/plan", user, json={"refresh": False})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_plan_says_which_changes_the_caller_may_make(apply_live) -> None:
    (apply_live.root / "databases.yml").write_text(textwrap.dedent(DATABASES))
    erin = _saved_plan(apply_live, "erin")
    assert [(c["action"], c["address"]) for c in erin["plan"]["changes"] if c["action"] != "no-op"] == [
        ("create", "database.sandbox"), ("create", "schema.sandbox.public")]
    by_address = {a["address"]: a for a in erin["authorization"]}
    assert not by_address["database.sandbox"]["allowed"]
    assert by_address["database.sandbox"]["missing"] == [{"privilege": "CREATE_DATABASE", "on": "organization"}]
    assert "lacks CREATE_DATABASE on organization" in by_address["database.sandbox"]["message"]
    assert all(a["allowed"] for a in _saved_plan(apply_live, "root")["authorization"])


def test_apply_refuses_a_change_the_caller_may_not_make_then_a_stale_plan(apply_live) -> None:
    (apply_live.root / "databases.yml").write_text(textwrap.dedent(DATABASES))
    plan = _saved_plan(apply_live, "root")["plan"]
    refused = call(apply_live, "POST", "/api/v1/apply", "erin", json={"plan": plan})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "DSF-E332"
    message = refused.json()["error"]["message"]
    assert "create database.sandbox" in message and "lacks CREATE_DATABASE on organization" in message
    assert "database.sandbox" not in operations.load(operations.Options(apply_live.root)).workspace \
        .state_backend().read().resources
    applied = call(apply_live, "POST", "/api/v1/apply", "root", json={"plan": plan, "start_runtime": False})
    assert applied.status_code == 200, applied.text
    assert applied.json()["ok"] and {c["address"] for c in applied.json()["done"]} == {
        "database.sandbox", "schema.sandbox.public"}
    again = call(apply_live, "POST", "/api/v1/apply", "root", json={"plan": plan})
    assert again.status_code == 409 and again.json()["error"]["code"] == "DSF-E820"
    assert call(apply_live, "POST", "/api/v1/apply", None, json={"plan": plan}).status_code == 401
    bad = call(apply_live, "POST", "/api/v1/apply", "root", json={"plan": {"format_version": 1}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "DSF-E812"


def test_cli_through_the_server(live, tmp_path) -> None:
    from click.testing import CliRunner

    from dsflow.cli import cli

    runner = CliRunner()
    env = {"DSFLOW_TOKEN": live.tokens["alice"], "DSFLOW_SERVER": live.url}
    elsewhere = str(tmp_path)  # no project here: everything comes from the server
    status = runner.invoke(cli, ["-C", elsewhere, "status", "--json"], env=env)
    assert status.exit_code == 0, status.output
    assert [e["address"] for e in json.loads(status.stdout)] == [QUERY]  # she may SELECT from its sink
    query = runner.invoke(cli, ["-C", elsewhere, "query", "--json", "SELECT userid, n FROM counts ORDER BY userid"],
                          env=env)
    assert query.exit_code == 0, query.output
    assert json.loads(query.stdout) == [{"userid": "u1", "n": 3}, {"userid": "u2", "n": 5}]
    printed = runner.invoke(cli, ["-C", elsewhere, "topic", "print", "pageviews", "--limit", "1", "--timeout", "10"],
                            env=env)
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.stdout.splitlines()[0])["value"] == {"id": 1, "userid": "u1"}
    refused = runner.invoke(cli, ["-C", elsewhere, "query", "SELECT * FROM counts"],
                            env={**env, "DSFLOW_TOKEN": live.tokens["nobody"]})
    assert refused.exit_code == 1 and "DSF-E328" in str(refused.exception)
    saved = tmp_path / "plan.json"
    planned = runner.invoke(cli, ["-C", elsewhere, "plan", "--no-refresh", "--out", str(saved)], env=env)
    assert planned.exit_code == 0, planned.output
    applied = runner.invoke(cli, ["-C", elsewhere, "apply", str(saved)], env=env)
    assert applied.exit_code == 0, applied.output  # nothing to change: allowed to anyone
    assert "Apply complete: 0 change(s)." in applied.output
    no_token = runner.invoke(cli, ["-C", elsewhere, "status"], env={**env, "DSFLOW_TOKEN": ""})
    assert no_token.exit_code == 1 and "DSF-E336" in str(no_token.exception)


@pytest.fixture
def broker_live(tmp_path, broker):
    root = make_project(tmp_path, {**SERVER_FILES, "dsflow.yml": _config(broker)})
    deploy_recorded(root)
    with LiveServer(root) as server:
        server.tokens = add_users(server, ("erin", "alice", "root"))
        server.root = root
        yield server


def test_a_caller_with_the_grants_applies_what_they_cover_and_nothing_more(broker_live, broker) -> None:
    from dsflow.adapters.kafka.admin import list_topics

    pipeline = broker_live.root / "sql" / "pipeline.sql"
    pipeline.write_text(pipeline.read_text() + "CREATE STREAM clicks (id BIGINT) WITH ('topic' = 'clicks', "
                                               "'value.format' = 'json');\n")
    erin = _saved_plan(broker_live, "erin")
    assert [(a["action"], a["address"], a["allowed"]) for a in erin["authorization"]] == [
        ("create", "relation.analytics.public.clicks", True)]  # CREATE on the schema, USAGE on the store
    refused = call(broker_live, "POST", "/api/v1/apply", "alice", json={"plan": erin["plan"], "start_runtime": False})
    assert refused.status_code == 403
    assert "lacks CREATE on schema.analytics.public" in refused.json()["error"]["message"]
    applied = call(broker_live, "POST", "/api/v1/apply", "erin", json={"plan": erin["plan"], "start_runtime": False})
    assert applied.status_code == 200, applied.text
    assert [c["address"] for c in applied.json()["done"]] == ["relation.analytics.public.clicks"]
    state = operations.load(operations.Options(broker_live.root, None, {})).workspace.state_backend().read()
    topic = state.resources["relation.analytics.public.clicks"].outputs["topic"]
    assert topic.endswith("clicks") and topic in list_topics(broker)  # made on the broker by erin's apply

    pipeline.write_text(pipeline.read_text().replace(
        "CREATE STREAM payments (id BIGINT, amount DOUBLE) WITH ('topic' = 'payments', 'value.format' = 'json');\n",
        ""))
    deleting = _saved_plan(broker_live, "erin")
    by_address = {a["address"]: a for a in deleting["authorization"]}
    assert not by_address[PAYMENTS]["allowed"]  # erin owns nothing there: deleting needs ownership
    answer = call(broker_live, "POST", "/api/v1/apply", "erin",
                  json={"plan": deleting["plan"], "allow_destroy": [PAYMENTS], "start_runtime": False})
    assert answer.status_code == 403 and f"delete {PAYMENTS}" in answer.json()["error"]["message"]
    assert PAYMENTS in operations.load(operations.Options(broker_live.root, None, {})).workspace \
        .state_backend().read().resources


def test_events_are_served_under_the_grants(broker_live, broker) -> None:
    """The event log (issue 42 item 6) through REST, GraphQL, `dsflow query` on sys.events and `dsflow --server
    events`: erin's apply through the API is an event by api:erin; each caller sees only the events of objects it
    may see (alice: the query writing into a view she may read, not payments nor erin's new stream)."""
    from click.testing import CliRunner

    from dsflow.cli import cli
    from dsflow.core.events import event

    clicks = "relation.analytics.public.clicks"
    pipeline = broker_live.root / "sql" / "pipeline.sql"
    pipeline.write_text(pipeline.read_text() + "CREATE STREAM clicks (id BIGINT) WITH ('topic' = 'clicks', "
                                               "'value.format' = 'json');\n")
    applied = call(broker_live, "POST", "/api/v1/apply", "erin",
                   json={"plan": _saved_plan(broker_live, "erin")["plan"], "start_runtime": False})
    assert applied.status_code == 200, applied.text
    backend = operations.load(operations.Options(broker_live.root, None, {})).workspace.state_backend()
    crash = event(QUERY, "crash", "supervisor", "dev", pid=1, exit="killed by signal 9")
    burst = event(PAYMENTS, "dead_letters", "supervisor", "dev", new=3, total=3)
    backend.append_events([crash, burst])

    def rest(user: str, **params) -> list[dict]:
        answer = call(broker_live, "GET", "/api/v1/events", user, params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()

    everything = rest("root")
    assert [(e["object"], e["kind"], e["actor"]) for e in everything] == [
        (clicks, "apply", "api:erin"), (QUERY, "crash", "supervisor"), (PAYMENTS, "dead_letters", "supervisor")]
    assert everything[0]["detail"]["action"] == "create" and everything[1] == crash.model_dump(mode="json")
    assert rest("alice") == [everything[1]]
    assert rest("root", object="payments") == [everything[2]]
    assert rest("root", since=crash.time) == [everything[2]]
    bad = call(broker_live, "GET", "/api/v1/events", "root", params={"since": "yesterday"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "DSF-E724"
    assert call(broker_live, "GET", "/api/v1/events", None).status_code == 401

    def graphql(user: str) -> list[dict]:
        answer = call(broker_live, "POST", "/graphql", user,
                      json={"query": "{ events { time id environment object kind actor detail } }"})
        assert answer.status_code == 200 and "errors" not in answer.json(), answer.text
        return answer.json()["data"]["events"]

    assert graphql("root") == everything and graphql("alice") == [everything[1]]
    assert call(broker_live, "POST", "/graphql", "erin", json={"query": f'{{ events(object: "{QUERY}") {{ kind }} }}'}
                ).json()["data"]["events"] == [{"kind": "crash"}]  # MANAGE on the query

    def sys_events(user: str) -> list[list]:
        answer = call(broker_live, "POST", "/api/v1/views/query", user,
                      json={"sql": "SELECT object, kind FROM sys.events ORDER BY time"})
        assert answer.status_code == 200, answer.text
        return answer.json()["rows"]

    assert sys_events("root") == [[e["object"], e["kind"]] for e in everything]
    assert sys_events("alice") == [[QUERY, "crash"]]
    env = {"DSFLOW_TOKEN": broker_live.tokens["alice"], "DSFLOW_SERVER": broker_live.url}
    ran = CliRunner().invoke(cli, ["events", "--json"], env=env)
    assert ran.exit_code == 0, ran.output
    assert [json.loads(line) for line in ran.stdout.splitlines()] == [everything[1]]
