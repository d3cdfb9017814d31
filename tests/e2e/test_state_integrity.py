"""State that cannot be silently emptied, locks that say who holds them, and the redaction key (issue 25), on
every backend against its real store: a local folder, a moto S3 server, PostgreSQL on 127.0.0.1.

- a stored document without a lineage (`{}`) is refused (DSF-E910), never read as an empty state, and a
  compare-and-swap write does not replace it; a missing state reads as empty, without a lineage;
- every lock records host, PID, command and time; a holder on this host whose process is gone is named as such,
  with the force-unlock command and its lock id;
- temporary files are removed, also those a killed writer left;
- the redaction key is made once, kept apart from the state, and markers made with it replace the unkeyed
  markers of older states without a planned change.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsflow.adapters.kafka.admin import list_topics
from dsflow.adapters.state import BACKENDS, make_backend
from dsflow.adapters.state.base import LockInfo
from dsflow.adapters.state.postgres import keys_table, locks_table
from dsflow.core.model import StateSettings
from dsflow.core.plan import PlanOptions, make_plan
from dsflow.core.resources import project_resources, with_current_markers
from dsflow.core.secrets import LegacyRedactor, Redactor, is_legacy_mark
from dsflow.core.state import State
from dsflow.errors import DsflowError
from dsflow.load.project import load_project
from support.projects import applied, make_project
from support.waiting import wait_for
from support.pgserver import DSN as PG_DSN
from support.state_children import SPAWN, legacy_rewrite, redaction_key, take_lock_and_die

pytestmark = pytest.mark.integration



@pytest.fixture(autouse=True)
def _aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture(scope="module")
def s3_bucket(s3_endpoint: str) -> str:
    _s3(s3_endpoint).create_bucket(Bucket=(name := f"dsflow-integrity-{uuid.uuid4().hex[:8]}"))
    return name


@pytest.fixture(scope="module")
def pg_table() -> Iterator[str]:
    import psycopg2

    table = f"t{uuid.uuid4().hex[:10]}_state"
    yield table
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}, {locks_table(table)}, {keys_table(table)}")
    conn.close()


@pytest.fixture(params=sorted(BACKENDS))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[StateSettings, Path, str]:
    environment = f"e{uuid.uuid4().hex[:8]}"
    if request.param == "s3":
        settings = StateSettings(backend="s3", project="p", bucket=request.getfixturevalue("s3_bucket"),
                                 endpoint_url=request.getfixturevalue("s3_endpoint"), region="us-east-1")
    elif request.param == "postgres":
        settings = StateSettings(backend="postgres", project="p", dsn=PG_DSN, table=request.getfixturevalue("pg_table"))
    else:
        settings = StateSettings(backend="local", project="p")
    return settings, tmp_path, environment


def _s3(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def _store_raw(target, body: str) -> None:
    """Put `body` where the backend keeps the state, as another tool (or a careless hand) would."""
    settings, root, environment = target
    backend = make_backend(*target)
    if settings.backend == "local":
        backend.path.parent.mkdir(parents=True, exist_ok=True)
        backend.path.write_text(body)
    elif settings.backend == "s3":
        _s3(settings.endpoint_url).put_object(Bucket=settings.bucket, Key=backend.key, Body=body.encode())
    else:
        import psycopg2

        backend.read()  # the tables exist
        with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {settings.table} (project, environment, serial, body) VALUES (%s, %s, 0, %s)",
                        ("p", environment, body))
        conn.close()


def _raw(target) -> str | None:
    settings, root, environment = target
    backend = make_backend(*target)
    if settings.backend == "local":
        return backend.path.read_text() if backend.path.exists() else None
    if settings.backend == "s3":
        try:
            found = _s3(settings.endpoint_url).get_object(Bucket=settings.bucket, Key=backend.key)
            return found["Body"].read().decode()
        except Exception:  # noqa: BLE001 - NoSuchKey
            return None
    import psycopg2

    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT body::text FROM {settings.table} WHERE project = 'p' AND environment = %s", (environment,))
        row = cur.fetchone()
    conn.close()
    return row[0] if row else None


def test_a_state_without_lineage_is_refused_never_read_as_empty(target) -> None:
    _store_raw(target, "{}")
    backend = make_backend(*target)
    with pytest.raises(DsflowError) as err:
        backend.read()
    assert err.value.code == "DSF-E910" and "no lineage" in err.value.message
    first = State(lineage="L1", serial=1, environment=target[2])
    with pytest.raises(DsflowError) as err:  # the compare step reads it too: `{}` is not "nothing stored"
        backend.write(first, expected_serial=0)
    assert err.value.code == "DSF-E910"
    assert json.loads(_raw(target)) == {}, "the document must be left as it was"


def test_a_missing_state_reads_empty_and_a_stored_one_always_has_a_lineage(target) -> None:
    backend = make_backend(*target)
    missing = backend.read()
    assert (missing.lineage, missing.serial, missing.resources) == ("", 0, {})
    with pytest.raises(DsflowError) as err:
        backend.write(State(serial=1, environment=target[2]), expected_serial=0)
    assert err.value.code == "DSF-E911" and _raw(target) is None
    empty = State(lineage="L1", serial=1, environment=target[2])  # deployed, then everything destroyed
    backend.write(empty, expected_serial=0)
    assert backend.read() == empty
    with pytest.raises(DsflowError) as err:  # a writer that read "missing" cannot replace the stored empty state
        backend.write(State(lineage="L2", serial=1, environment=target[2]), expected_serial=0)
    assert err.value.code == "DSF-E804"


def test_every_lock_records_its_holder(target) -> None:
    backend = make_backend(*target)
    with backend.lock("apply") as held:
        holder = backend.lock_holder()
        assert holder == held
        assert (holder.host, holder.pid, holder.operation) == (socket.gethostname(), os.getpid(), "apply")
        assert holder.command and holder.created > 0 and not holder.gone()
        with pytest.raises(DsflowError) as err:
            with make_backend(*target).lock("destroy"):
                pass
        text = f"{err.value.message} {err.value.hint}"
        assert err.value.code == "DSF-E802" and held.id in text and f"pid {held.pid}" in text
        assert holder.command in text and "no longer running" not in text


def test_a_lock_whose_process_died_on_this_host_says_so_and_names_the_release(target) -> None:
    child = SPAWN.Process(target=take_lock_and_die, args=(target,))
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    backend = make_backend(*target)
    if target[0].backend == "postgres":  # the dead process's session ended: PostgreSQL released the lock
        with backend.lock("apply"):
            pass
        return
    holder = backend.lock_holder()
    assert holder is not None and holder.pid == child.pid and holder.gone()
    with pytest.raises(DsflowError) as err:
        with backend.lock("apply"):
            pass
    assert err.value.code == "DSF-E802"
    assert f"pid {child.pid}) is no longer running on this host" in err.value.message
    assert f"dsflow force-unlock {holder.id}" in err.value.hint
    backend.force_unlock(holder.id)
    with backend.lock("apply"):
        pass


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_postgres_session_that_outlived_its_dsflow_process(pg_table: str) -> None:
    """A PostgreSQL session kept by something else (a pooler) holds the lock for a dsflow process that is gone."""
    import psycopg2

    backend = make_backend(StateSettings(backend="postgres", project="p", dsn=PG_DSN, table=pg_table), Path("."),
                           f"e{uuid.uuid4().hex[:8]}")
    backend.read()
    session = psycopg2.connect(PG_DSN)
    session.autocommit = True
    try:
        with session.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", (backend.lock_key,))
            assert cur.fetchone()[0]
            with pytest.raises(DsflowError) as err:  # no record at all: the session is named
                with backend.lock("apply"):
                    pass
            assert err.value.code == "DSF-E802" and f"PostgreSQL session {session.get_backend_pid()}" in \
                err.value.message
            dead = _dead_pid()
            cur.execute(f"INSERT INTO {locks_table(pg_table)} (project, environment, lock_id, who, operation, "
                        "created, pid, backend_pid, host, command) VALUES ('p', %s, 'L-1', 'ana@here', 'apply', "
                        "extract(epoch from now()) - 60, %s, pg_backend_pid(), %s, 'dsflow apply')",
                        (backend.environment, dead, socket.gethostname()))
            with pytest.raises(DsflowError) as err:
                with backend.lock("apply"):
                    pass
        assert f"pid {dead} running 'dsflow apply')" in err.value.message
        assert "no longer running on this host" in err.value.message
        assert "dsflow force-unlock L-1" in err.value.hint
    finally:
        session.close()


def test_old_lock_records_are_still_read() -> None:
    old = LockInfo.from_json('{"id": "x", "who": "ana@elsewhere", "operation": "apply", "created": 1.0, "pid": 4}')
    assert old is not None and old.host_name == "elsewhere" and not old.gone()
    assert LockInfo.from_json('{"id": "x", "who": "a@b", "operation": "apply", "created": 1.0, "pid": 4, '
                              '"future": 1}') is not None
    assert LockInfo.from_json("[]") is None and LockInfo.from_json("") is None


def test_local_temporary_files_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = (StateSettings(backend="local", project="p"), tmp_path, "dev")
    backend = make_backend(*target)
    backend.write(State(lineage="L1", serial=1, environment="dev"))
    dead = _dead_pid()
    left = [backend.directory / f"dev.tmp{dead}", backend.directory / f"dev.backup.tmp{dead}"]
    alive = backend.directory / f"dev.tmp{os.getppid()}"  # a live writer's file is not touched
    for path in [*left, alive]:
        path.write_text("{}")
    backend.write(State(lineage="L1", serial=2, environment="dev"), expected_serial=1)
    assert not any(p.exists() for p in left) and alive.exists()
    alive.unlink()

    def fail(*_args) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("dsflow.adapters.state.local.os.replace", fail)
    with pytest.raises(OSError):
        backend.write(State(lineage="L1", serial=3, environment="dev"), expected_serial=2)
    monkeypatch.undo()
    assert sorted(p.name for p in backend.directory.iterdir()) == ["dev.json", "dev.json.backup", "dev.json.wlock"]
    assert backend.read().serial == 2


def test_the_redaction_key_is_made_once_and_kept_apart_from_the_state(target) -> None:
    results = SPAWN.Queue()
    children = [SPAWN.Process(target=redaction_key, args=(target, results)) for _ in range(3)]
    for child in children:
        child.start()
    keys = {results.get(timeout=30) for _ in children}
    for child in children:
        child.join(10)
    backend = make_backend(*target)
    assert len(keys) == 1 and backend.redaction_key() in keys and len(backend.redaction_key()) == 32
    key = backend.redaction_key()
    backend.write(State(lineage="L1", serial=1, environment=target[2]))
    assert key.hex() not in _raw(target)
    if target[0].backend == "local":
        assert stat.S_IMODE(backend.key_path.stat().st_mode) == 0o600
        backend.key_path.write_text("not hex")
        with pytest.raises(DsflowError) as err:
            backend.redaction_key()
        assert err.value.code == "DSF-E912"
        assert not list(backend.directory.glob("*tmp*"))


SECRET_STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ env_var('H3_BOOT') }}"
    properties:
      ssl.key.password: "{{ env_var('H3_PW') }}"
"""
SQL = {"sql/a.sql": "CREATE STREAM s (id BIGINT) WITH ('topic' = 's', 'value.format' = 'json');\n"
                    "CREATE STREAM t AS SELECT id FROM s;\n"}


def test_a_state_with_unkeyed_markers_migrates_without_a_planned_change(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"stores/kafka.yml": SECRET_STORE, **SQL})
    environ = {"H3_BOOT": "broker.internal:9093", "H3_PW": "hunter2-pw"}
    project = load_project(root, environ=environ)
    legacy = project_resources(project, LegacyRedactor())
    old_state = applied(make_plan("p", "dev", legacy, State(), PlanOptions()))
    assert "sensitive:" + "" in old_state.model_dump_json() and "sensitive:hmac:" not in old_state.model_dump_json()
    keyed = project_resources(project, Redactor(os.urandom(32)))
    assert make_plan("p", "dev", keyed, old_state, PlanOptions()).actionable, "without migration: changes"
    migrated = with_current_markers(project, old_state, keyed)
    assert make_plan("p", "dev", keyed, migrated, PlanOptions()).actionable == []
    assert "sensitive:hmac:" in migrated.model_dump_json()
    rotated = load_project(root, environ={**environ, "H3_PW": "rotated-pw"})
    still_old = with_current_markers(rotated, old_state, project_resources(rotated, Redactor(b"k" * 32)))
    changes = make_plan("p", "dev", project_resources(rotated, Redactor(b"k" * 32)), still_old,
                        PlanOptions()).actionable
    assert {c.address for c in changes} >= {"store.kafka_main"}, "a secret changed since must still show"


def test_an_old_state_is_rewritten_without_its_clear_secrets_by_the_next_apply(tmp_path: Path, broker: str) -> None:
    topic = f"migrated_{uuid.uuid4().hex[:8]}"
    root = make_project(tmp_path, {
        "stores/kafka.yml": "stores:\n  - name: kafka_main\n    type: kafka\n"
                            "    bootstrap_servers: \"{{ env_var('H3_BOOT') }}\"\n"
                            "    properties:\n      client.id: \"{{ env_var('H3_CLIENT') }}\"\n",
        "sql/a.sql": f"CREATE STREAM s (id BIGINT) WITH ('topic' = '{topic}', 'value.format' = 'json');\n"})
    environ = {"H3_BOOT": broker, "H3_CLIENT": f"client-{uuid.uuid4().hex[:8]}"}
    env = {**os.environ, **environ}

    def dsflow(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), *args], env=env,
                              capture_output=True, text=True, timeout=120)

    assert dsflow("apply", "--auto-approve").returncode == 0
    child = SPAWN.Process(target=legacy_rewrite, args=(root, environ, broker))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    state_dir = root / ".dsflow" / "state"
    old = (state_dir / "dev.json").read_text()
    assert broker in old and "sensitive:hmac:" not in old and environ["H3_CLIENT"] not in old
    planned = dsflow("plan", "--detailed-exitcode")
    assert planned.returncode == 0, planned.stdout + planned.stderr  # unchanged secrets: no change planned
    assert dsflow("apply", "--auto-approve").returncode == 0
    for name in ("dev.json", "dev.json.backup"):
        text = (state_dir / name).read_text()
        assert broker not in text and "sensitive:hmac:" in text, name
        assert not any(is_legacy_mark(v) for v in json.loads(text)["resources"]["store.kafka_main"]["data"].values())
    assert dsflow("plan", "--detailed-exitcode").returncode == 0
    assert dsflow("destroy", "--auto-approve").returncode == 0  # the topic's address now comes from the store
    wait_for(lambda: topic not in list_topics(broker), 30, f"topic {topic} to be deleted")
