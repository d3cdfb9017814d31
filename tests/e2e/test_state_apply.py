"""`dsflow apply` on every state backend, as real processes: the lock keeps a second apply out (naming the
holder), the serial check catches an apply that lost a race, and the state lands whole in the backend
with no secret in it.

Topics-only projects keep these fast; the backends are real: a local folder, a moto S3 server on
127.0.0.1 (fixture `s3_endpoint`), and the session's PostgreSQL (tests/support/pgserver.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import list_topics
from dsflow.adapters.state.postgres import keys_table, locks_table
from dsflow.engine.failpoints import PAUSE_AFTER_NOTE, RESUME_FILE
from dsflow.cli import cli
from dsflow.core.state import State
from support.waiting import wait_for
from support.pgserver import DSN as PG_DSN

pytestmark = pytest.mark.integration

SECRET_ENV = "DSFLOW_TEST_STATE_SECRET"
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass(frozen=True)
class Backend:
    """One state backend as a project's `state:` section, and how to read what it stores, raw."""

    name: str
    section: str
    stored: Callable[[str, str], str | None]  # (project name, environment) -> the stored state text


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in AWS.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def pg_table() -> Iterator[str]:
    import psycopg2

    table = f"t{uuid.uuid4().hex[:10]}_state"
    yield table
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}, {locks_table(table)}, {keys_table(table)}")
    conn.close()


def _local(tmp_path: Path) -> Backend:
    def stored(project: str, environment: str) -> str | None:
        path = tmp_path / project / ".dsflow" / "state" / f"{environment}.json"
        return path.read_text() if path.exists() else None

    return Backend("local", "state:\n  backend: local\n", stored)


def _s3(endpoint: str) -> Backend:
    import boto3

    bucket = f"dsflow-apply-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    client.create_bucket(Bucket=bucket)

    def stored(project: str, environment: str) -> str | None:
        try:
            return client.get_object(Bucket=bucket, Key=f"ci/{project}/{environment}.json")["Body"].read().decode()
        except client.exceptions.NoSuchKey:
            return None

    section = f"state:\n  backend: s3\n  bucket: {bucket}\n  prefix: ci/{{{{ project_name }}}}\n" \
              f"  endpoint_url: {endpoint}\n  region: us-east-1\n"
    return Backend("s3", section, stored)


def _postgres(table: str) -> Backend:
    import psycopg2

    def stored(project: str, environment: str) -> str | None:
        with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT body::text FROM {table} WHERE project = %s AND environment = %s",
                        (project, environment))
            row = cur.fetchone()
        conn.close()
        return row[0] if row else None

    return Backend("postgres", f"state:\n  backend: postgres\n  dsn: \"{PG_DSN}\"\n  table: {table}\n", stored)


@pytest.fixture(params=["local", "s3", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "s3":
        return _s3(request.getfixturevalue("s3_endpoint"))
    if request.param == "postgres":
        return _postgres(request.getfixturevalue("pg_table"))
    return _local(tmp_path)


def _project(tmp_path: Path, backend: Backend, broker: str, stem: str) -> tuple[Path, str]:
    """A topics-only project with a secret store property; returns its root and name."""
    name = f"{stem}_{backend.name}_{uuid.uuid4().hex[:6]}"
    root = tmp_path / name
    root.mkdir()
    (root / "dsflow.yml").write_text(f"name: {name}\ndefault:\n  store: k\n"
                                     + backend.section.replace("{{ project_name }}", name))
    (root / "stores.yml").write_text(
        f"stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: \"{broker}\"\n"
        f"    properties:\n      client.id: \"{{{{ env_var('{SECRET_ENV}') }}}}\"\n")
    (root / "p.sql").write_text(
        f"CREATE STREAM a (id BIGINT) WITH ('topic' = '{name}_a', 'value.format' = 'json');\n"
        f"CREATE STREAM b (id BIGINT) WITH ('topic' = '{name}_b', 'value.format' = 'json');\n")
    return root, name


def _dsflow(root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "dsflow.cli", "-C", str(root), *args]


def _env(secret: str, **extra: str) -> dict[str, str]:
    return {**os.environ, **AWS, SECRET_ENV: secret, **extra}


def _run(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_dsflow(root, *args), capture_output=True, text=True, env=env, timeout=120)


def _loaded(root: Path) -> operations.Loaded:
    return operations.load(operations.Options(root))


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)


def test_a_second_apply_fails_fast_naming_the_holder(tmp_path: Path, broker: str, backend: Backend,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_ENV, secret)
    root, name = _project(tmp_path, backend, broker, "held")
    first = subprocess.Popen(_dsflow(root, "apply", "--auto-approve"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL,
                             env=_env(secret, **{PAUSE_AFTER_NOTE: "relation.default.public.a"}))
    try:
        state_backend = _loaded(root).workspace.state_backend()
        holder = wait_for(state_backend.lock_holder, 60, "the first apply holds the lock")
        assert holder.pid == first.pid and holder.operation == "apply"
        wait_for(lambda: state_backend.read().pending, 60, "the first apply recorded its intent")

        second = _run(root, _env(secret), "apply", "--auto-approve")
        assert second.returncode == 1, second.stdout + second.stderr
        assert "DSF-E802" in second.stderr and holder.id in second.stderr
        assert f"pid {first.pid}" in second.stderr and "'apply'" in second.stderr and holder.who in second.stderr
        assert f"dsflow force-unlock {holder.id}" in second.stderr
    finally:
        _stop(first)

    if backend.name == "postgres":  # the dead holder's session ended, and the advisory lock with it
        wait_for(lambda: state_backend.lock_holder() is None, 60, "postgres released the dead holder's lock")
    else:
        assert state_backend.lock_holder() == holder
        wrong = _run(root, _env(secret), "force-unlock", "not-the-id")
        assert wrong.returncode == 1 and "DSF-E803" in wrong.stderr
        assert _run(root, _env(secret), "force-unlock", holder.id).returncode == 0
    again = _run(root, _env(secret), "apply", "--auto-approve")
    assert again.returncode == 0, again.stdout + again.stderr
    state = state_backend.read()
    assert state.pending is None and {f"relation.default.public.{n}" for n in "ab"} <= set(state.resources)
    assert {f"{name}_a", f"{name}_b"} <= set(list_topics(broker))
    assert _run(root, _env(secret), "destroy", "--auto-approve").returncode == 0


def test_an_apply_that_lost_a_race_writes_nothing(tmp_path: Path, broker: str, backend: Backend,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Apply A pauses holding the lock; its lock is force-unlocked and apply B runs to the end; when A
    goes on, its next write is refused (DSF-E804) and the backend keeps B's state, whole."""
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_ENV, secret)
    root, name = _project(tmp_path, backend, broker, "race")
    resume = tmp_path / f"resume-{backend.name}"
    first = subprocess.Popen(_dsflow(root, "apply", "--auto-approve"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=_env(secret, **{PAUSE_AFTER_NOTE: "relation.default.public.a",
                                                            RESUME_FILE: str(resume)}))
    try:
        state_backend = _loaded(root).workspace.state_backend()
        holder = wait_for(state_backend.lock_holder, 60, "apply A holds the lock")
        wait_for(lambda: state_backend.read().pending, 60, "apply A recorded its intent")
        assert _run(root, _env(secret), "force-unlock", holder.id).returncode == 0

        second = _run(root, _env(secret), "apply", "--auto-approve")
        assert second.returncode == 0, second.stdout + second.stderr
        after_b = state_backend.read()
        assert after_b.pending is None and len(after_b.resources) == 5

        resume.touch()
        out, err = first.communicate(timeout=120)
    finally:
        _stop(first)
    assert first.returncode == 1, out + err
    assert "DSF-E804" in err and f"is now at serial {after_b.serial}" in err, err
    assert state_backend.read() == after_b
    assert State.model_validate_json(backend.stored(name, "dev")) == after_b
    assert not operations.plan(_loaded(root)).has_changes
    assert _run(root, _env(secret), "destroy", "--auto-approve").returncode == 0


@pytest.mark.parametrize("shared", ["s3", "postgres"])
def test_cli_apply_keeps_state_in_the_shared_backend_without_secrets(
        tmp_path: Path, broker: str, shared: str, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_ENV, secret)
    backend = _s3(request.getfixturevalue("s3_endpoint")) if shared == "s3" else _postgres(
        request.getfixturevalue("pg_table"))
    root, name = _project(tmp_path, backend, broker, "e2e")
    runner = CliRunner()
    # the commands of the CI guide (docs/ci.md): a markdown plan saved as JSON, then the saved plan applied
    planned = runner.invoke(cli, ["-C", str(root), "plan", "--format", "markdown", "--out", str(tmp_path / "plan.json"),
                                  "--detailed-exitcode"])
    assert planned.exit_code == 3, planned.output
    assert planned.output.startswith(f"### dsflow plan: `{name}` (dev)")
    applied = runner.invoke(cli, ["-C", str(root), "apply", str(tmp_path / "plan.json")])
    assert applied.exit_code == 0, applied.output

    stored = backend.stored(name, "dev")
    assert stored is not None
    state = State.model_validate_json(stored)
    assert (state.project, state.environment, state.pending) == (name, "dev", None)
    assert {f"relation.default.public.{n}" for n in "ab"} <= set(state.resources)
    assert "sensitive:" in stored and secret not in stored
    assert not (root / ".dsflow" / "state").exists(), "a shared backend must not write local state"
    assert {f"{name}_a", f"{name}_b"} <= set(list_topics(broker))

    outputs = [runner.invoke(cli, ["-C", str(root), *args]) for args in
               (["plan", "--json", "--detailed-exitcode"], ["plan", "--format", "markdown"], ["state", "show"],
                ["status", "--json"])]
    assert outputs[0].exit_code == 0 and json.loads(outputs[0].output)["state_serial"] == state.serial
    assert State.model_validate_json(outputs[2].output) == state
    texts = [o.output for o in outputs] + [applied.output, planned.output, (tmp_path / "plan.json").read_text()]
    texts += [p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()]
    for text in texts:
        assert secret not in text

    destroyed = runner.invoke(cli, ["-C", str(root), "destroy", "--auto-approve"])
    assert destroyed.exit_code == 0, destroyed.output
    assert State.model_validate_json(backend.stored(name, "dev")).resources == {}
