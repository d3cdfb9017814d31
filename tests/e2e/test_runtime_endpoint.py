"""Apply and destroy talk to the runtime supervisor over its endpoint on 127.0.0.1 with its token file
(runtime/endpoint.py), and the supervisor runs in the foreground as deploy/'s systemd unit and container entrypoint
run it.

The supervisors here look at the state every ten minutes (DSFLOW_RUNTIME_TICK=600), so a look that comes sooner was
asked for. The project holds one stream (a topic on the test broker) and no query: nothing here needs Spark.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.runtime import control
from dsflow.runtime.endpoint import TOKEN_FILE
from support.projects import make_project
from support.streaming import CONFIG
from support.waiting import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SQL = "CREATE STREAM events (id BIGINT) WITH ('value.format' = 'json');\n"
MORE = SQL + "CREATE STREAM more_events (id BIGINT) WITH ('value.format' = 'json');\n"
SLOW_TICK = "600"


@pytest.fixture
def project(tmp_path, broker, monkeypatch) -> Path:
    """A project whose dev environment names the test broker itself (no --var: the unit and entrypoint pass none)."""
    monkeypatch.setenv("DSFLOW_RUNTIME_TICK", SLOW_TICK)
    config = CONFIG.format(prefix=f"ep{os.getpid()}_").replace("bootstrap: 127.0.0.1:9092", f"bootstrap: {broker}")
    return make_project(tmp_path, {"dsflow.yml": config, "sql/all.sql": SQL})


class Ran:
    """A finished `dsflow` process: its exit code and its stdout and stderr together."""

    def __init__(self, done: subprocess.CompletedProcess):
        self.exit_code, self.output = done.returncode, done.stdout + done.stderr


def _dsflow(root: Path, *args: str) -> Ran:
    """The real executable (error rendering and exit codes are `dsflow.cli.main`'s)."""
    return Ran(subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "COLUMNS": "300"}))


def _request(port: int, path: str, method: str = "GET", token: str | None = None) -> tuple[int, dict, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, headers=headers,
                                     data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read()
            return answer.status, dict(answer.headers), json.loads(body) if path.startswith("/v1/") else {}
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read() or b"{}")


def test_apply_and_destroy_ask_the_supervisor_to_look_with_its_token(project) -> None:
    options = operations.Options(project, None, {})
    loaded = operations.load(options)
    assert _dsflow(project, "apply", "--auto-approve", "--no-runtime").exit_code == 0
    found, started = control.up(loaded, options)
    assert started
    try:
        run_dir = loaded.workspace.run_dir
        token_path = run_dir / TOKEN_FILE
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        token = token_path.read_text().strip()
        assert len(token) >= 40 and token not in json.dumps(found)
        port = found["port"]
        wait_for(lambda: control.info(loaded)["ticks"] >= 1, 60, "the first look")

        status, _, _ = _request(port, "/metrics")
        assert status == 200  # the scrape needs no token
        for wrong in (None, "", token[:-1] + ("x" if token[-1] != "x" else "y")):
            status, headers, body = _request(port, "/v1/look", "POST", wrong)
            assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer"), (wrong, body)
            assert TOKEN_FILE in body["error"]
        assert _request(port, "/v1/look", "GET", token)[0] == 405
        assert _request(port, "/v1/nothing", "GET", token)[0] == 404
        assert control.info(loaded)["ticks"] == 1, "a refused request made the supervisor look"

        answer = control.look_now(loaded, "test")
        assert answer == {"looked": True, "looks": 2, "asked_by": "test"}  # long before the next tick
        assert control.info(loaded)["ticks"] == 2

        (project / "sql" / "all.sql").write_text(MORE)
        applied = _dsflow(project, "apply", "--auto-approve")
        assert applied.exit_code == 0, applied.output
        assert f"Runtime supervisor (pid {found['pid']}) looked at the new state." in applied.output
        shown = json.loads(_dsflow(project, "runtime", "status", "--json").output)
        assert shown["looks"] == 3 and shown["last_asked"]["by"] == "apply", shown

        token_path.write_text("not-the-token")  # replaced under the supervisor: it refuses, apply only warns
        applied = _dsflow(project, "apply", "--auto-approve")
        assert applied.exit_code == 0 and "DSF-E273" in applied.output and "HTTP 401" in applied.output
        token_path.write_text(token)

        destroyed = _dsflow(project, "destroy", "--auto-approve")
        assert destroyed.exit_code == 0, destroyed.output
        assert "looked at the new state" in destroyed.output
        assert control.info(loaded)["ticks"] == 4
    finally:
        control.down(loaded)
    assert control.info(loaded) is None and not token_path.exists()
    assert "not running" in _dsflow(project, "runtime", "status").output


def _foreground(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _serves_as(loaded, pid: int) -> dict:
    """The environment's supervisor once it serves, which must be the process started (exec keeps the PID)."""
    found = wait_for(lambda: control.info(loaded), 120, "the supervisor to serve")
    assert found["pid"] == pid, "the foreground supervisor is not the process that was started"
    return found


def _stops_on_sigterm(proc: subprocess.Popen, loaded) -> str:
    os.kill(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "supervisor started" in output and "supervisor stopped" in output, output
    assert control.info(loaded) is None and not (loaded.workspace.run_dir / TOKEN_FILE).exists()
    return output


def test_the_systemd_units_command_runs_the_supervisor_in_the_foreground(project) -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read(REPO / "deploy" / "dsflow-runtime@.service")
    service = unit["Service"]
    assert service["Type"] == "simple" and service["KillMode"] == "process" and service["KillSignal"] == "SIGTERM"
    argv = shlex.split(service["ExecStart"].replace("%i", "dev"))
    assert argv[0].endswith("/bin/dsflow")
    argv = [sys.executable, "-m", "dsflow.cli", *argv[1:]]  # this test's dsflow in place of the unit's venv
    loaded = operations.load(operations.Options(project, "dev", {}))
    proc = _foreground(argv, project, {})
    try:
        _serves_as(loaded, proc.pid)
        again = _dsflow(project, "runtime", "up", "--foreground")
        assert again.exit_code == 1 and "DSF-E270" in again.output and str(proc.pid) in again.output
        assert control.look_now(loaded, "systemctl")["looked"]
    finally:
        if proc.poll() is None:
            _stops_on_sigterm(proc, loaded)


def test_the_container_entrypoint_applies_then_becomes_the_supervisor(project) -> None:
    entrypoint = REPO / "deploy" / "entrypoint.sh"
    assert os.access(entrypoint, os.X_OK)
    bin_dir = project.parent / "bin"
    bin_dir.mkdir()
    (bin_dir / "dsflow").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m dsflow.cli \"$@\"\n")
    (bin_dir / "dsflow").chmod(0o755)
    env = {"DSFLOW_PROJECT": str(project), "DSFLOW_ENV": "dev", "DSFLOW_METRICS_PORT": "0",
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    options = operations.Options(project, "dev", {})
    loaded = operations.load(options)
    proc = _foreground(["/bin/sh", str(entrypoint)], project, env)
    try:
        found = _serves_as(loaded, proc.pid)
        state = loaded.workspace.state_backend().read()
        assert "relation.analytics.public.events" in state.resources, "the entrypoint did not apply"
        assert _request(found["port"], "/metrics")[0] == 200
    finally:
        if proc.poll() is None:
            output = _stops_on_sigterm(proc, loaded)
            assert "Apply complete" in output
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def test_a_look_asked_mid_look_waits_for_the_next_one() -> None:
    """`Looks` alone: a look already under way when the request came may have read the state before the change, so
    the answer waits for the next look, which begins at once instead of after the tick."""
    import threading

    from dsflow.runtime.endpoint import Looks

    looks, under_way, finish = Looks(), threading.Event(), threading.Event()
    began: list[int] = []

    def loop() -> None:
        for number in range(1, 4):
            looks.begin()
            began.append(number)
            if number == 1:
                under_way.set()
                finish.wait(30)
            looks.end()
            looks.pause(600)

    threading.Thread(target=loop, daemon=True).start()
    under_way.wait(30)
    answers: list[dict] = []
    asking = threading.Thread(target=lambda: answers.append(looks.ask("test", wait=30)))
    asking.start()
    wait_for(lambda: looks.last_asked is not None, 30, "the request")
    finish.set()  # look 1 ends: not the one asked for
    asking.join(30)
    assert answers == [{"looked": True, "looks": 2, "asked_by": "test"}] and began[:2] == [1, 2]
    assert looks.ask("again", wait=0.5)["looks"] == 3  # look 3 begins at once: no 600 s tick waited
    assert looks.ask("late", wait=0.2) == {"looked": False, "looks": 3, "asked_by": "late"}  # the loop ended
