"""Continuous queries followed through `dsflow serve` (a real server process with its own Spark, as
tests/integration/test_query_follow.py runs the CLI's) by `dsflow --server URL query --follow`: their rows arrive as
Server-Sent Events and are printed, and when a client leaves (Ctrl-C) the server stops its query and removes its
temporary checkpoint. Two clients follow at once (each query a session of its own on the server's one Spark
context): the one left keeps getting rows after the other stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import requests
from support.projects import make_project
from support.servers import local_server
from support.serving import SERVER_FILES, deploy_recorded, server_config
from support.waiting import wait_for

from dsflow.engine import operations, topics
from dsflow.server.identity import IdentityStore, identity_path

pytestmark = pytest.mark.integration


def test_follow_streams_rows_until_the_client_leaves(tmp_path, broker) -> None:
    root = make_project(tmp_path, {**SERVER_FILES, "dsflow.yml": server_config(broker)})
    deploy_recorded(root)
    loaded = operations.load(operations.Options(root))
    target = topics.resolve(loaded.project, "analytics.public.pageviews")
    topics.create(target, 1, 1, None)
    topics.produce(target, [json.dumps({"id": i, "userid": f"u{i}"}) for i in range(3)], None)
    store = IdentityStore(identity_path(loaded.workspace))
    store.add_user("alice", "alice-password")
    token = store.create_token("alice")[0]
    temp = tmp_path / "server-tmp"
    temp.mkdir()
    os.environ["TMPDIR"], old = str(temp), os.environ.get("TMPDIR")  # the server's temporary checkpoints go here
    try:
        with local_server("dsflow-serve", lambda port: [sys.executable, "-m", "dsflow.cli", "-C", str(root),
                                                        "serve", "--port", str(port)]) as port:
            url = f"http://127.0.0.1:{port}"
            _follow_twice_with_the_cli(url, token, temp, target)
            refused = requests.post(url + "/api/v1/queries/follow", json={"sql": "SELECT id FROM payments"},
                                    headers={"Authorization": f"Bearer {token}"}, timeout=60)
            assert refused.status_code == 403  # checked before anything runs
    finally:
        os.environ.pop("TMPDIR") if old is None else os.environ.update(TMPDIR=old)


def _follow_twice_with_the_cli(url: str, token: str, temp, target) -> None:
    """`dsflow --server URL query --follow` twice at once: each prints the rows the server streams; Ctrl-C ends
    the first cleanly, and the second still gets the rows produced after that."""
    first = _follow(url, token, "SELECT id, userid FROM pageviews")
    second = _follow(url, token, "SELECT id FROM pageviews")
    try:
        rows_first, rows_second = _rows(first, 3), _rows(second, 3)
        assert len(list(temp.glob("dsflow-follow-*"))) == 2, "each followed query keeps its checkpoint while it runs"
        err = _interrupt(first)
        assert sorted((r["id"], r["userid"]) for r in rows_first) == [(0, "u0"), (1, "u1"), (2, "u2")], err
        topics.produce(target, [json.dumps({"id": i, "userid": f"u{i}"}) for i in (3, 4)], None)
        rows_second += _rows(second, 2)
        assert sorted(r["id"] for r in rows_second) == [0, 1, 2, 3, 4]
    finally:
        for cli in (first, second):
            if cli.poll() is None:
                _interrupt(cli)
    wait_for(lambda: not list(temp.glob("dsflow-follow-*")), 120, "the server to stop the followed queries")


def _follow(url: str, token: str, sql: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "dsflow.cli", "--server", url, "query", "--follow", "--from", "earliest",
               "--json", sql]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DSFLOW_TOKEN": token})


def _rows(cli: subprocess.Popen, count: int) -> list[dict]:
    rows = []
    for line in cli.stdout:
        rows.append(json.loads(line))
        if len(rows) >= count:
            break
    assert len(rows) == count, cli.stderr.read() if cli.poll() is not None else "the output ended"
    return rows


def _interrupt(cli: subprocess.Popen) -> str:
    """Ctrl-C: the CLI ends cleanly (exit 0); its standard error."""
    cli.send_signal(signal.SIGINT)
    _, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    return err
