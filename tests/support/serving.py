"""A real `dsflow serve` application on 127.0.0.1 (uvicorn in a background thread) over a project in a tmp dir,
for the server tests; and a deployed state recorded the way apply records it, for tests that need no broker.

    root = make_project(tmp, SERVER_FILES)
    deploy_recorded(root)                       # the state an apply of the plan would record (no executors)
    with LiveServer(root) as server: requests.get(server.url + "/api/v1/health")
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

from support.projects import DEFAULT_CONFIG, applied
from support.servers import free_port

from dsflow.engine import operations

ROLES = """\
roles:
  - name: analyst
    grants:
      - {privilege: USAGE, on: database.analytics}
      - {privilege: USAGE, on: schema.analytics.public}
      - {privilege: SELECT, on: relation.analytics.public.pageviews}
      - {privilege: SELECT, on: relation.analytics.public.counts}
  - name: engineer
    inherits: [analyst]
    grants:
      - {privilege: CREATE, on: schema.analytics.public}
      - {privilege: USAGE, on: store.kafka_main}
      - {privilege: MANAGE, on: query.analytics.public.counts}
users:
  - name: alice
    roles: [analyst]
  - name: erin
    roles: [engineer]
  - name: root
    roles: [orgadmin]
"""

SQL = """\
CREATE STREAM pageviews (id BIGINT, userid VARCHAR) WITH ('topic' = 'pageviews', 'value.format' = 'json');
CREATE STREAM payments (id BIGINT, amount DOUBLE) WITH ('topic' = 'payments', 'value.format' = 'json');
CREATE MATERIALIZED VIEW counts AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
"""

SERVER_FILES = {"security/roles.yml": ROLES, "sql/pipeline.sql": SQL}
"""A project with two streams, a materialized view (its query), roles, grants and users bound to them."""
USERS = ("alice", "erin", "root", "nobody")
"""Users of the identity store: nobody has no binding (only `public`)."""


def server_config(bootstrap: str) -> str:
    """tests/support/projects.py's dsflow.yml with `bootstrap` and a topic prefix of its own: the session's broker is
    shared,
    and two tests' `pageviews` must not be one topic."""
    prefix = f"srv{uuid.uuid4().hex[:8]}_"
    return DEFAULT_CONFIG.replace("127.0.0.1:9092", bootstrap).replace(
        "  dev:\n", f"  dev:\n    topic_prefix: \"{prefix}\"\n")


def deploy_recorded(root: Path, environment: str | None = None) -> None:
    """Record in the project's state what an apply of its plan records (tests/support/projects.py `applied`), without
    creating topics or starting queries: the catalog, grants and bindings are what the server reads."""
    loaded = operations.load(operations.Options(root, environment))
    backend = loaded.workspace.state_backend()
    state = backend.read()
    the_plan = operations.plan(loaded, do_refresh=False)
    backend.write(applied(the_plan, state), expected_serial=state.serial)


class LiveServer:
    """`create_app` served by uvicorn on a free 127.0.0.1 port in a daemon thread."""

    def __init__(self, root: Path, environment: str | None = None, variables: dict[str, str] | None = None):
        import uvicorn

        from dsflow.server.app import create_app

        self.app = create_app(operations.Options(root, environment, variables))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="dsflow-test-server", daemon=True)

    @property
    def identity(self):
        return self.app.state.server.identity

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *_) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def add_users(server: LiveServer, names=USERS) -> dict[str, str]:
    """Each user with password '<name>-password' and a service token; returns name -> token."""
    tokens = {}
    for name in names:
        server.identity.add_user(name, f"{name}-password")
        tokens[name] = server.identity.create_token(name, "tests")[0]
    return tokens


def sse_events(lines):
    """(event, data) of Server-Sent Events lines, data parsed as JSON."""
    event = None
    for line in lines:
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event:
            yield event, json.loads(line.split(":", 1)[1])
            event = None
