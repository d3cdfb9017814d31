"""Every state backend against its real store: a local folder, a moto S3 server, PostgreSQL on 127.0.0.1.

Each backend must round-trip state, refuse a stale write (DSF-E804), fail fast on a lock held by another
process (DSF-E802, naming the holder), force-unlock only by the holder's id, and let exactly one of two
racing writers win.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters.state import BACKENDS, StateBackend, make_backend
from dsflow.adapters.state.postgres import events_table, keys_table, locks_table
from dsflow.cli import cli
from dsflow.core.events import event
from dsflow.core.model import StateSettings
from dsflow.core.state import DeployedResource, LedgerEntry, State
from dsflow.errors import DsflowError
from support import pgserver
from support.pgserver import DSN as PG_DSN
from support.state_children import SPAWN, append_events, hold_lock, race, try_lock

pytestmark = pytest.mark.integration



@pytest.fixture(autouse=True)
def _aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture(scope="module")
def s3_bucket(s3_endpoint: str) -> str:
    import boto3

    name = f"dsflow-state-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def pg_table() -> Iterator[str]:
    """A state table unique to this test run, dropped (with its lock table) at the end."""
    import psycopg2

    table = f"t{uuid.uuid4().hex[:10]}_state"
    yield table
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}, {locks_table(table)}, {keys_table(table)}, {events_table(table)}")
    conn.close()


@pytest.fixture(params=sorted(BACKENDS))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[StateSettings, Path, str]:
    """(settings, project root, environment) for one backend; a fresh environment per test."""
    environment = f"e{uuid.uuid4().hex[:8]}"
    if request.param == "s3":
        settings = StateSettings(backend="s3", project="p", bucket=request.getfixturevalue("s3_bucket"),
                                 endpoint_url=request.getfixturevalue("s3_endpoint"), region="us-east-1")
    elif request.param == "postgres":
        settings = StateSettings(backend="postgres", project="p", dsn=PG_DSN, table=request.getfixturevalue("pg_table"))
    else:
        settings = StateSettings(backend="local", project="p")
    return settings, tmp_path, environment


def _state(environment: str, serial: int, lineage: str = "L1", marker: str = "x") -> State:
    resource = DeployedResource(address="relation.db.public.s", data_hash="d", metadata_hash="m",
                                data={"columns": [{"name": "id", "type": "BIGINT"}], "marker": marker},
                                outputs={"topic": "s", "created": True})
    ledger = [LedgerEntry(query="query.db.public.q", version="v1", checkpoint="/c/v1", started_at="2024-01-01T00:00:00",
                          start_offsets={"t": {"0": 5}})]
    return State(lineage=lineage, serial=serial, project="p", environment=environment,
                 resources={resource.address: resource}, ledger=ledger)


def test_read_empty_write_read_back(target) -> None:
    backend = make_backend(*target)
    assert isinstance(backend, StateBackend)
    assert backend.read() == State(environment=target[2])
    state = _state(target[2], 1)
    backend.write(state, expected_serial=0)
    assert backend.read() == state
    assert make_backend(*target).read() == state
    later = _state(target[2], 2, marker="y")
    backend.write(later)  # without expected_serial: no check, as before
    assert make_backend(*target).read() == later


def test_event_log_is_appended_beside_the_state_and_read_since(target) -> None:
    backend = make_backend(*target)
    assert backend.read_events() == []
    state = _state(target[2], 1)
    backend.write(state, expected_serial=0)
    first = event("query.db.public.q", "apply", "alice@h", target[2], action="create", state_serial=1)
    second = event("relation.db.public.s", "apply_failed", "api:bob", target[2], error="boom")
    backend.append_events([first, second])
    assert make_backend(*target).read() == state  # the state is not rewritten by the log
    assert make_backend(*target).read_events() == [first, second]
    assert make_backend(*target).read_events(since=first.time) == ([second] if second.time > first.time else [])
    assert make_backend(*target).read_events(since=second.time) == []
    queue = SPAWN.Queue()
    writers = [SPAWN.Process(target=append_events, args=(target, name, 5, queue)) for name in ("a", "b")]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert [queue.get(timeout=5) for _ in writers] == [5, 5]
    found = make_backend(*target).read_events()
    assert len(found) == 12 and len({e.id for e in found}) == 12
    assert [e.key for e in found] == sorted(e.key for e in found)
    for name in ("a", "b"):  # each writer's events, in its order
        assert [e.detail["n"] for e in found if e.object.endswith("." + name)] == list(range(5))
    assert make_backend(*target).read() == state


def test_stale_write_is_refused(target) -> None:
    backend = make_backend(*target)
    backend.write(_state(target[2], 1), expected_serial=0)
    backend.write(_state(target[2], 2), expected_serial=1)
    with pytest.raises(DsflowError) as err:
        backend.write(_state(target[2], 2, marker="stale"), expected_serial=1)
    assert err.value.code == "DSF-E804" and "serial 1" in err.value.message and "serial 2" in err.value.message
    with pytest.raises(DsflowError) as err:
        backend.write(_state(target[2], 3, lineage="L2"), expected_serial=2)
    assert err.value.code == "DSF-E804" and "lineage" in err.value.message
    with pytest.raises(DsflowError) as err:
        make_backend(*target).write(_state(target[2], 1), expected_serial=0)
    assert err.value.code == "DSF-E804"
    assert backend.read() == _state(target[2], 2)


def _in_child(func, *args) -> tuple:
    results = SPAWN.Queue()
    child = SPAWN.Process(target=func, args=(*args, results))
    child.start()
    try:
        return results.get(timeout=60)
    finally:
        child.join(10)


def test_lock_held_elsewhere_fails_fast_naming_the_holder(target) -> None:
    backend = make_backend(*target)
    with backend.lock("apply") as held:
        assert backend.lock_holder() == held
        code, text, elapsed = _in_child(try_lock, target)
        assert code == "DSF-E802", text
        assert elapsed < 5
        assert held.id in text and held.who in text and "'apply'" in text and f"pid {held.pid}" in text
    assert backend.lock_holder() is None
    assert _in_child(try_lock, target)[0] == "acquired"


def test_force_unlock_needs_the_holders_id(target) -> None:
    backend = make_backend(*target)
    with pytest.raises(DsflowError) as err:
        backend.force_unlock("nobody")
    assert err.value.code == "DSF-E803" and "not locked" in err.value.message
    results = SPAWN.Queue()
    holder = SPAWN.Process(target=hold_lock, args=(target, results))
    holder.start()
    try:
        info = results.get(timeout=60)
        assert backend.lock_holder() == info
        with pytest.raises(DsflowError) as err:
            backend.force_unlock("wrong-id")
        assert err.value.code == "DSF-E803" and info.id in err.value.message
        assert backend.lock_holder() == info
        backend.force_unlock(info.id)
        assert backend.lock_holder() is None
        with backend.lock("after force-unlock") as mine:
            assert backend.lock_holder() == mine
    finally:
        holder.kill()
        holder.join(10)


def test_racing_writers_exactly_one_wins(target) -> None:
    backend = make_backend(*target)
    backend.write(_state(target[2], 1), expected_serial=0)
    for round_ in range(1, 4):
        barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
        markers = [f"w{round_}{i}" for i in range(2)]
        writers = [SPAWN.Process(target=race, args=(target, _state(target[2], round_ + 1, marker=marker), round_,
                                                    marker, barrier, results)) for marker in markers]
        for writer in writers:
            writer.start()
        outcomes = dict(results.get(timeout=60) for _ in writers)
        for writer in writers:
            writer.join(10)
        winners = [m for m, outcome in outcomes.items() if outcome == "won"]
        assert len(winners) == 1, outcomes
        assert set(outcomes.values()) == {"won", "DSF-E804"}
        stored = backend.read()
        assert stored.serial == round_ + 1
        assert stored.resources["relation.db.public.s"].data["marker"] == winners[0]


def test_state_show_on_an_s3_project(tmp_path: Path, s3_endpoint: str, s3_bucket: str) -> None:
    root = tmp_path / "s3proj"
    root.mkdir()
    (root / "dsflow.yml").write_text(
        "name: s3proj\nstate:\n  backend: s3\n"
        f"  bucket: {s3_bucket}\n  prefix: projects/s3proj\n  endpoint_url: {s3_endpoint}\n  region: us-east-1\n")
    loaded = operations.load(operations.Options(root))
    backend = loaded.workspace.state_backend()
    assert backend.key == "projects/s3proj/dev.json"
    state = _state("dev", 1)
    backend.write(state, expected_serial=0)
    result = CliRunner().invoke(cli, ["-C", str(root), "state", "show"])
    assert result.exit_code == 0, result.output
    assert State.model_validate_json(result.output) == state
    assert not (root / ".dsflow" / "state").exists()


def test_state_settings_are_checked(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    root.mkdir()
    (root / "dsflow.yml").write_text("name: bad\nstate:\n  backend: s3\n  dsn: x\n")
    result = CliRunner().invoke(cli, ["-C", str(root), "validate"])
    assert result.exit_code == 1
    assert "DSF-E012" in result.output and "not a setting of the s3 state backend: dsn" in result.output
    assert "needs bucket" in result.output


def test_dsn_password_from_env_var_stays_out_of_state(tmp_path: Path, pg_table: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg2

    password = f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv("DSFLOW_TEST_PG_PASSWORD", password)
    root = tmp_path / "pgproj"
    root.mkdir()
    dsn = "postgresql://postgres:{{ env_var('DSFLOW_TEST_PG_PASSWORD') }}@127.0.0.1:%s/test"
    (root / "dsflow.yml").write_text(f"name: pgproj\nstate:\n  backend: postgres\n  dsn: \"{dsn % pgserver.PORT}\"\n"
                                     f"  table: {pg_table}\n")
    loaded = operations.load(operations.Options(root))
    assert password not in repr(loaded.project) and password not in loaded.project.model_dump_json()
    backend = loaded.workspace.state_backend()
    backend.write(_state("dev", 1).model_copy(update={"project": "pgproj"}), expected_serial=0)
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT body::text, lineage FROM {pg_table} WHERE project = 'pgproj' AND environment = 'dev'")
        body, lineage = cur.fetchone()
    conn.close()
    assert lineage == "L1" and password not in body
    shown = CliRunner().invoke(cli, ["-C", str(root), "state", "show"])
    assert shown.exit_code == 0 and password not in shown.output and '"pgproj"' in shown.output
    (root / "dsflow.yml").write_text(f"name: pgproj\nstate:\n  backend: postgres\n  dsn: \"{dsn % 1}\"\n")
    with pytest.raises(DsflowError) as err:
        operations.load(operations.Options(root)).workspace.state_backend().read()
    assert err.value.code == "DSF-E805" and password not in str(err.value)


CONTRACTED = ("CREATE STREAM views (userid VARCHAR, viewtime BIGINT, pageid VARCHAR) WITH ('contract' = 'enforced') "
              "AS\n  SELECT userid, viewtime, pageid FROM pageviews;\n")


def test_validate_compares_contracts_with_a_postgres_state_and_creates_nothing(tmp_path: Path, pg_table: str) -> None:
    """validate reads a server-kept state (read only): a breaking change to a deployed contract fails it; where the
    state table does not exist yet, validate passes and creates no table."""
    import psycopg2

    from dsflow.core.resources import project_resources
    from dsflow.core.plan import make_plan
    from support.projects import DEFAULT_CONFIG, PAGEVIEWS, applied, make_project

    def project(table: str) -> Path:
        config = DEFAULT_CONFIG + f"state:\n  backend: postgres\n  dsn: \"{PG_DSN}\"\n  table: {table}\n"
        return make_project(tmp_path / table, {"dsflow.yml": config, "sql/sources.sql": PAGEVIEWS,
                                               "sql/q.sql": CONTRACTED})

    root = project(pg_table)
    loaded = operations.load(operations.Options(root))
    plan = make_plan(loaded.project.name, loaded.project.environment, project_resources(loaded.project), State())
    loaded.workspace.state_backend().write(applied(plan), expected_serial=0)
    (root / "sql/q.sql").write_text(CONTRACTED.replace(", pageid VARCHAR", "").replace(", pageid FROM", " FROM"))
    result = CliRunner().invoke(cli, ["-C", str(root), "validate"])
    assert result.exit_code == 1 and "DSF-E896" in result.output and "'pageid' dropped" in result.output, result.output
    fresh = f"t{uuid.uuid4().hex[:10]}_state"
    other = project(fresh)
    (other / "sql/q.sql").write_text((root / "sql/q.sql").read_text())
    assert CliRunner().invoke(cli, ["-C", str(other), "validate"]).exit_code == 0
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s), to_regclass(%s)", (fresh, locks_table(fresh)))
        assert cur.fetchone() == (None, None)
    conn.close()


def test_postgres_lock_of_a_dead_process_is_released(pg_table: str) -> None:
    target = (StateSettings(backend="postgres", project="p", dsn=PG_DSN, table=pg_table), Path("."), "dead")
    results = SPAWN.Queue()
    holder = SPAWN.Process(target=hold_lock, args=(target, results))
    holder.start()
    info = results.get(timeout=60)
    backend = make_backend(*target)
    assert backend.lock_holder() == info
    holder.kill()
    holder.join(10)
    deadline = time.monotonic() + 5
    while backend.lock_holder() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.lock_holder() is None
    with backend.lock("next"):
        pass
