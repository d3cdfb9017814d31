"""The web page of `dsflow serve` in a real headless chromium (Debian's, driven by Playwright) over a real server,
broker and Spark query driver: log in, follow a query from the lineage graph to its status with the keyboard, read
a materialized view and compare it with the view's real content, preview the plan of the working tree, tail a
stream; a second user bound to a narrow role sees only what was granted and which changes it may not apply.
One project, server and browser for the whole file; each test gets its own browser context.

Screenshots go to each test's tmp dir (their paths are printed: pytest -s shows them).
"""

from __future__ import annotations

import collections
import json
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import pytest
from playwright.sync_api import expect

from support.browser import chromium
from dsflow.engine import adhoc, operations
from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.core.safety import Allowance
from support.projects import make_project
from support.servers import free_port
from support.waiting import wait_for

pytestmark = pytest.mark.integration

USER, PASSWORD = "alice", "correct horse battery staple"
QUERY = "query.analytics.public.user_counts"
VIEW = "relation.analytics.public.user_counts"
EVENTS = [{"id": i, "viewtime": i, "userid": f"user_{i * i % 7}", "pageid": f"p{i % 3}"} for i in range(70)]
CONFIG = """\
name: webtest
default:
  database: analytics
  schema: public
  store: kafka_main
runtime:
  trigger_interval: 1 second
  spark_conf:
    spark.sql.shuffle.partitions: "1"
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
    vars:
      bootstrap: 127.0.0.1:9092
"""
SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);

CREATE MATERIALIZED VIEW user_counts
  CONSTRAINT rare EXPECT (views < 15) ON VIOLATION WARN
  AS SELECT userid, COUNT(*) AS views FROM pageviews GROUP BY userid;
"""
VIEWER, VIEWER_PASSWORD = "bob", "bob's own password"
ACCESS = f"""\
roles:
  - name: viewer
    grants:
      - {{privilege: USAGE, on: database.analytics}}
      - {{privilege: USAGE, on: schema.analytics.public}}
      - {{privilege: SELECT, on: {VIEW}}}
users:
  - name: {USER}
    roles: [orgadmin]
  - name: {VIEWER}
    roles: [viewer]
"""
ADDED = "CREATE STREAM clicks (id BIGINT, userid VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 1);\n"


@dataclass(frozen=True)
class Served:
    """The deployed project behind the running server."""

    url: str
    options: operations.Options
    token: str

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        return httpx.request(method, f"{self.url}api/v1/{path}", headers={"Authorization": f"Bearer {self.token}"},
                             timeout=60, **kwargs)


def _view_rows(options: operations.Options) -> dict[str, int]:
    _, rows = adhoc.view_query(operations.load(options).project, "SELECT userid, views FROM user_counts")
    return {str(u): int(v) for u, v in rows}


def _deploy(options: operations.Options, broker: str) -> None:
    """Apply the project (a real Spark query driver), feed the stream and wait until the view holds it all."""
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    topic = loaded.project.relation("analytics.public.pageviews").topic
    produce_json_lines(broker, topic, [json.dumps(e) for e in EVENTS], key_field="userid")
    expected = dict(collections.Counter(e["userid"] for e in EVENTS))

    def filled() -> bool:
        try:
            return _view_rows(options) == expected
        except Exception:  # noqa: BLE001 - the snapshot file or table does not exist yet
            return False

    wait_for(filled, 240, "the materialized view to hold every event", interval=1)


@contextmanager
def _serve(options: operations.Options) -> Iterator[str]:
    import uvicorn

    from dsflow.server.app import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(options), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/"
    wait_for(lambda: _answers(f"{url}api/v1/health"), 30, "the server to answer", interval=0.2)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def served(tmp_path_factory, broker: str) -> Iterator[Served]:
    from dsflow.server.identity import IdentityStore, identity_path

    work = tmp_path_factory.mktemp("web")
    root = make_project(work, {"dsflow.yml": CONFIG.format(prefix=f"w{uuid.uuid4().hex[:8]}_"),
                               "sql/all.sql": SQL, "access.yml": ACCESS})
    options = operations.Options(root, None, {"bootstrap": broker})
    try:
        _deploy(options, broker)
        (root / "sql" / "clicks.sql").write_text(ADDED)  # the working tree now differs from what is deployed
        identity = IdentityStore(identity_path(operations.load(options).workspace))
        identity.add_user(USER, PASSWORD)
        identity.add_user(VIEWER, VIEWER_PASSWORD)
        token, _ = identity.create_token(USER)
        with _serve(options) as url:
            yield Served(url, options, token)
    finally:
        (root / "sql" / "clicks.sql").unlink(missing_ok=True)
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True), allowance=Allowance(everything=True))


@pytest.fixture(scope="session")
def browser() -> Iterator:
    with chromium() as browser:
        yield browser


@pytest.fixture()
def page(served: Served, browser) -> Iterator:
    """A fresh page in its own browser context (its own sessionStorage); fails the test if the page's script
    raised."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    yield page
    context.close()
    assert not errors, f"the page raised: {errors}"


def _shot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def _log_in(page, served: Served, user: str = USER, password: str = PASSWORD) -> None:
    page.goto(served.url)
    page.fill("#username", user)
    page.fill("#password", password)
    page.press("#password", "Enter")
    page.wait_for_selector("#app:not([hidden])")
    page.wait_for_selector(f'#graph a.node[data-id="{QUERY if user == USER else VIEW}"]')


def _tab_to(page, selector: str, limit: int = 40) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{limit} Tab presses never reached {selector}")


def test_keyboard_from_login_to_a_querys_status_through_the_graph(served: Served, page, tmp_path: Path) -> None:
    page.goto(served.url)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    _shot(page, tmp_path, "login")
    _log_in(page, served)
    assert page.text_content("#whoami").startswith(USER)
    lineage = served.api("GET", "lineage").json()
    drawn = page.eval_on_selector_all("#graph a.node", "nodes => nodes.map(n => n.dataset.id)")
    assert sorted(drawn) == sorted(n["id"] for n in lineage["nodes"])
    assert page.locator("#graph path.edge").count() == len(lineage["edges"])

    page.focus("#main")
    _tab_to(page, f'#graph a.node[data-id="{QUERY}"]')
    focus_ring = page.evaluate("getComputedStyle(document.activeElement.querySelector('rect')).strokeWidth")
    assert focus_ring == "4px", "the focused node shows no focus ring"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "detail-title"
    assert "analytics.public.user_counts" in page.text_content("#detail-title")
    assert page.get_attribute(f'#graph a.node[data-id="{QUERY}"]', "aria-current") == "true"
    expect(page.locator("#detail-state")).to_have_text("running")
    entry = next(e for e in served.api("GET", "status").json() if e["address"] == QUERY)
    assert entry["state"] == "running"
    assert re.fullmatch(r"\d+\.\d", page.text_content("#detail-rate"))
    assert "COUNT(*)" in page.text_content("#detail-sql").upper()
    assert page.text_content("#detail-sink").endswith("user_counts")
    expect(page.locator("#detail-history li")).to_have_count(1)  # the one version deployed
    row = page.locator(f'#query-table tr[data-address="{QUERY}"]')
    assert row.get_attribute("class") == "selected" and row.locator("td").first.text_content() == "running"
    expect(row.locator("td").nth(2)).to_have_text("0", timeout=60_000)  # lag: the query has read every event
    assert page.text_content("#detail-lag").startswith("0 record(s)")
    page.click(f'#graph a.node[data-id="{VIEW}"]')  # a relation's node shows the relation
    assert "user_counts" in page.text_content("#detail-title") and "views BIGINT" in page.text_content("#detail-sql")
    page.focus(f'#query-table tr[data-address="{QUERY}"] button')
    page.keyboard.press("Enter")  # the list selects the query too
    assert page.evaluate("document.activeElement.id") == "detail-title"
    expect(page.locator("#detail-sql")).to_contain_text("COUNT(*)")
    page.click("#shadow-diff")  # the query runs no shadow: the API's answer says so (docs/shadow.md)
    expect(page.locator("#detail-shadow")).to_contain_text("DSF-E943")
    rule = next(e for e in served.api("GET", "status").json() if e["address"] == QUERY)["expectations"]["rare"]
    assert rule["action"] == "warn" and rule["failed"] >= 3  # users 1, 2 and 4 reach 20 views, past the rule
    expect(page.locator("#detail-expectations")).to_have_text(
        f"rare (WARN): {rule['passed']} passed, {rule['failed']} failed")
    updated = page.text_content("#status-updated")
    expect(page.locator("#status-updated")).not_to_have_text(updated, timeout=10_000)  # polled, not reloaded
    _shot(page, tmp_path, "query-status")


def test_the_view_browser_shows_the_views_real_rows(served: Served, page, tmp_path: Path) -> None:
    _log_in(page, served)
    page.select_option("#view-select", VIEW)
    page.focus("#view-select")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("#view-table:not([hidden]) tbody tr")
    columns = page.eval_on_selector_all("#view-table thead th", "cells => cells.map(c => c.textContent)")
    rows = page.eval_on_selector_all("#view-table tbody tr",
                                     "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    shown = {r[columns.index("userid")]: int(r[columns.index("views")]) for r in rows}
    assert shown == _view_rows(served.options) == dict(collections.Counter(e["userid"] for e in EVENTS))
    assert f"{len(shown)} row(s)" in page.text_content("#view-summary")
    _shot(page, tmp_path, "view")


def test_the_plan_preview_shows_each_change_and_whether_it_may_be_applied(served: Served, page,
                                                                          tmp_path: Path) -> None:
    _log_in(page, served)
    page.click("#plan-run")
    page.wait_for_selector("#plan-table:not([hidden]) tbody tr")
    expected = served.api("POST", "plan", json={}).json()
    changes = [c for c in expected["plan"]["changes"] if c["action"] != "no-op"]
    rows = page.eval_on_selector_all("#plan-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => "
                                                             "c.textContent))")
    assert [(r[0], r[1]) for r in rows] == [(c["address"], c["action"]) for c in changes]
    added = next(r for r in rows if r[0] == "relation.analytics.public.clicks")
    assert added[1] == "create" and added[3] == "yes"
    assert "you may apply" in page.text_content("#plan-summary")
    page.check("#plan-all")
    assert page.locator("#plan-table tbody tr").count() == len(expected["plan"]["changes"])
    _shot(page, tmp_path, "plan")


def test_the_topic_tail_streams_a_streams_records_until_stopped(served: Served, page, tmp_path: Path) -> None:
    _log_in(page, served)
    page.select_option("#tail-select", "relation.analytics.public.pageviews")
    page.check("#tail-beginning")
    page.click("#tail-start")
    expect(page.locator("#tail-records li")).to_have_count(len(EVENTS))
    texts = page.eval_on_selector_all("#tail-records li", "items => items.map(i => i.textContent)")
    assert sorted(int(re.search(r'"id":\s*(\d+)', t).group(1)) for t in texts) == [e["id"] for e in EVENTS]
    assert page.text_content("#tail-summary") == f"{len(EVENTS)} record(s) received."
    _shot(page, tmp_path, "tail")
    page.click("#tail-stop")
    assert page.is_enabled("#tail-start") and not page.is_enabled("#tail-stop")
    assert page.evaluate("document.activeElement.id") == "tail-start"  # the focus is not lost with the button


def test_a_wrong_password_is_refused_and_a_pasted_token_logs_in(served: Served, page) -> None:
    page.goto(served.url)
    page.fill("#username", USER)
    page.fill("#password", "wrong")
    page.click("#login-form button")
    expect(page.locator("#login-error")).to_contain_text("DSF-E")
    assert page.is_hidden("#app")
    page.fill("#token", served.token)
    page.press("#token", "Enter")
    expect(page.locator("#whoami")).to_contain_text(USER)
    page.click("#logout")
    assert page.is_hidden("#app") and page.evaluate("sessionStorage.length") == 0
    assert page.locator("#graph *, #query-table tbody tr, #whoami:not(:empty)").count() == 0  # nothing left over


def test_a_viewer_sees_only_what_was_granted_and_which_changes_are_refused(served: Served, page,
                                                                            tmp_path: Path) -> None:
    _log_in(page, served, VIEWER, VIEWER_PASSWORD)
    login = httpx.post(f"{served.url}api/v1/auth/login", json={"username": VIEWER, "password": VIEWER_PASSWORD})
    lineage = httpx.get(f"{served.url}api/v1/lineage",
                        headers={"Authorization": f"Bearer {login.json()['token']}"}).json()
    drawn = page.eval_on_selector_all("#graph a.node", "nodes => nodes.map(n => n.dataset.id)")
    assert sorted(drawn) == sorted(n["id"] for n in lineage["nodes"])
    assert VIEW in drawn and "relation.analytics.public.pageviews" not in drawn
    assert page.eval_on_selector_all("#tail-select option", "o => o.map(x => x.value)") == [""]
    assert page.is_disabled("#tail-start")
    page.click("#view-form button")
    expect(page.locator("#view-table tbody tr")).to_have_count(len({e["userid"] for e in EVENTS}))
    page.click("#plan-run")
    added = page.locator('#plan-table tr[data-address="relation.analytics.public.clicks"]')
    expect(added).to_have_attribute("data-allowed", "false")
    assert re.search(r"no: .*bob.*lacks CREATE on schema\.analytics\.public", added.locator("td").nth(2).text_content())
    assert "refused" in page.text_content("#plan-summary")
    _shot(page, tmp_path, "viewer-plan")


def test_the_events_section_shows_the_event_log_newest_first_and_only_what_each_user_may_see(
        served: Served, page, tmp_path: Path) -> None:
    """The Events section (issue 42 item 6) against the API's answer for the same user: alice sees the apply of
    every object, newest first; bob sees the events of what his grants let him see (the view and its query), none
    of the stream's."""
    _log_in(page, served)
    page.wait_for_selector("#event-table tbody tr")
    logged = served.api("GET", "events").json()
    rows = page.eval_on_selector_all("#event-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => "
                                                               "c.textContent))")
    assert [(r[1], r[2]) for r in rows] == [(e["kind"], e["object"]) for e in reversed(logged)]
    assert {QUERY, "relation.analytics.public.pageviews"} <= {r[2] for r in rows}
    _shot(page, tmp_path, "events")
    page.click("#logout")
    _log_in(page, served, VIEWER, VIEWER_PASSWORD)
    page.wait_for_selector("#event-table tbody tr")
    objects = page.eval_on_selector_all("#event-table tbody tr", "rows => rows.map(r => r.cells[2].textContent)")
    token = httpx.post(f"{served.url}api/v1/auth/login", json={"username": VIEWER, "password": VIEWER_PASSWORD})
    his = httpx.get(f"{served.url}api/v1/events", headers={"Authorization": f"Bearer {token.json()['token']}"})
    assert objects == [e["object"] for e in reversed(his.json())]
    assert VIEW in objects and "relation.analytics.public.pageviews" not in objects


def test_the_page_is_served_without_credentials_under_a_strict_content_security_policy(served: Served) -> None:
    for path in ("", "web/app.js", "web/graph.js", "web/style.css"):
        answer = httpx.get(f"{served.url}{path}", timeout=30)
        assert answer.status_code == 200, path
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(f"{served.url}api/v1/lineage", timeout=30).status_code == 401


def test_a_server_without_the_pages_files_says_which_are_missing(tmp_path: Path) -> None:
    from fastapi import FastAPI

    from dsflow.errors import DsflowError
    from dsflow.server.web import mount

    (tmp_path / "index.html").write_text("<!doctype html>")
    with pytest.raises(DsflowError) as raised:
        mount(FastAPI(), tmp_path)
    assert raised.value.code == "DSF-E360" and "app.js, graph.js, style.css" in raised.value.message


def test_the_graph_puts_each_node_one_layer_after_its_longest_path(served: Served, page) -> None:
    page.goto(served.url)
    layout = page.evaluate("""() => {
      const ids = ["a", "b", "c", "d", "e"];
      const edges = [["a", "b"], ["b", "c"], ["a", "c"], ["c", "d"], ["e", "e"]];
      const {place} = positions(ids.map((id) => ({id, label: id})),
                                edges.map(([source, target]) => ({source, target})));
      return Object.fromEntries(ids.map((id) => [id, place.get(id).col]));
    }""")
    assert layout == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 0}  # c after b, not beside it; a cycle stays drawn


def test_arrow_keys_walk_the_graph_along_its_edges(served: Served, page) -> None:
    _log_in(page, served)
    lineage = served.api("GET", "lineage").json()
    downstream = collections.defaultdict(set)
    upstream = collections.defaultdict(set)
    for edge in lineage["edges"]:
        downstream[edge["source"]].add(edge["target"])
        upstream[edge["target"]].add(edge["source"])
    boxes = {n["id"]: page.eval_on_selector(f'#graph a.node[data-id="{n["id"]}"] rect',
                                            "r => [Number(r.getAttribute('x')), Number(r.getAttribute('y'))]")
             for n in lineage["nodes"]}
    moved = 0
    for node in lineage["nodes"]:
        x, y = boxes[node["id"]]
        below = [i for i, (bx, by) in boxes.items() if bx == x and by > y]
        above = [i for i, (bx, by) in boxes.items() if bx == x and by < y]
        expected = {"ArrowRight": downstream[node["id"]], "ArrowLeft": upstream[node["id"]],
                    "ArrowDown": {min(below, key=lambda i: boxes[i][1])} if below else set(),
                    "ArrowUp": {max(above, key=lambda i: boxes[i][1])} if above else set()}
        for key, targets in expected.items():
            page.focus(f'#graph a.node[data-id="{node["id"]}"]')
            page.keyboard.press(key)
            focused = page.evaluate("document.activeElement.dataset ? document.activeElement.dataset.id : null")
            if targets:
                assert focused in targets, f"{key} from {node['id']} went to {focused}, not one of {targets}"
                moved += 1
            else:
                assert focused == node["id"], f"{key} from {node['id']} moved to {focused} with nowhere to go"
    ends = {e["source"] for e in lineage["edges"]} | {("to", e["target"]) for e in lineage["edges"]}
    assert lineage["edges"] and moved >= len(ends)  # Right from every source, Left from every target
    page.focus(f'#graph a.node[data-id="{QUERY}"]')
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Enter")  # the arrows end on a node that Enter opens, as Tab does
    assert page.evaluate("document.activeElement.id") == "detail-title"
