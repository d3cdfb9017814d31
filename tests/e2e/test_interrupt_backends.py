"""Ctrl-C at random points of an apply, on every state backend (a local folder, S3 on moto, PostgreSQL): the
apply stops within seconds, leaves no lock and a state that says what was done, and the next plan and apply
converge (no change left, every topic dsflow created recorded and destroyed by `destroy`).

The random point is an apply step drawn with a fixed seed: the apply is paused right after it records its intent
for that resource (the failpoint the kill -9 test uses), then gets SIGINT; so the signal lands mid-step every
time, never after the apply has finished.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import list_topics
from dsflow.engine.failpoints import PAUSE_AFTER_NOTE
from support.waiting import wait_for
from support.pgserver import DSN as PG_DSN

pytestmark = pytest.mark.integration

STREAMS = 6
POINTS_PER_BACKEND = 2
SEED = 25
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def s3_bucket(s3_endpoint: str) -> str:
    import boto3

    name = f"dsflow-sigint-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", **_aws_keys()).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def pg_table():
    import psycopg2

    table = f"t{uuid.uuid4().hex[:10]}_sigint"
    yield table
    from dsflow.adapters.state.postgres import keys_table, locks_table

    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}, {locks_table(table)}, {keys_table(table)}")
    conn.close()


def _aws_keys() -> dict[str, str]:
    return {"aws_access_key_id": AWS["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": AWS["AWS_SECRET_ACCESS_KEY"]}


def _state_yaml(backend: str, request: pytest.FixtureRequest) -> str:
    if backend == "s3":
        return (f"state:\n  backend: s3\n  bucket: {request.getfixturevalue('s3_bucket')}\n  prefix: sigint\n"
                f"  endpoint_url: {request.getfixturevalue('s3_endpoint')}\n  region: us-east-1\n")
    if backend == "postgres":
        return f"state:\n  backend: postgres\n  dsn: {PG_DSN}\n  table: {request.getfixturevalue('pg_table')}\n"
    return "state:\n  backend: local\n"


def _project(tmp_path: Path, prefix: str, state: str) -> Path:
    root = tmp_path / prefix
    root.mkdir()
    (root / "dsflow.yml").write_text(f"name: {prefix}\ndefault:\n  store: k\n{state}")
    (root / "stores.yml").write_text("stores:\n  - name: k\n    type: kafka\n"
                                     "    bootstrap_servers: \"{{ var('bootstrap') }}\"\n")
    (root / "p.sql").write_text("".join(
        f"CREATE STREAM {prefix}_s{i} (id BIGINT) WITH ('topic' = '{prefix}_s{i}', 'value.format' = 'json');\n"
        for i in range(STREAMS)))
    return root


def _dsflow(root: Path, broker: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}", *args]


@pytest.mark.parametrize("backend", ["local", "s3", "postgres"])
def test_ctrl_c_at_random_steps_then_plan_converges(tmp_path: Path, broker: str, backend: str,
                                                    request: pytest.FixtureRequest) -> None:
    env = {**os.environ, **AWS}
    os.environ.update(AWS)  # the in-process loads below read the S3 state too
    # in apply order (the streams have no dependencies: by address), so each apply resumes and goes further
    points = sorted(random.Random(f"{SEED}-{backend}").sample(range(STREAMS), POINTS_PER_BACKEND))
    prefix = f"ci{backend[:2]}{uuid.uuid4().hex[:5]}"
    root = _project(tmp_path, prefix, _state_yaml(backend, request))
    options = operations.Options(root, None, {"bootstrap": broker})
    for step, point in enumerate(points):
        address = f"relation.default.public.{prefix}_s{point}"
        paused = subprocess.Popen(_dsflow(root, broker, "apply", "--auto-approve"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env={**env, PAUSE_AFTER_NOTE: address})
        loaded = operations.load(options)
        backend_state = loaded.workspace.state_backend()
        wait_for(lambda backend_state=backend_state, address=address:
                 (p := backend_state.read().pending) is not None and p.address == address, 120,
                 f"the apply to pause at {address}", interval=0.05)
        paused.send_signal(signal.SIGINT)
        try:
            code = paused.wait(30)
        except subprocess.TimeoutExpired:
            paused.kill()
            pytest.fail(f"{backend}: Ctrl-C at {address} was not honoured within 30 s")
        output = paused.stdout.read()
        assert code != 0, f"{backend}: the apply finished despite Ctrl-C at {address}: {output}"
        assert "Traceback" not in output, output

        again = subprocess.run(_dsflow(root, broker, "plan"), capture_output=True, text=True, env=env)
        assert again.returncode == 0, f"{backend} step {step}: plan after Ctrl-C failed: {again.stdout}{again.stderr}"
    loaded = operations.load(options)
    result = operations.apply(loaded, operations.plan(loaded))
    assert result.ok, result.failed
    assert not operations.plan(loaded).has_changes
    state = loaded.workspace.state_backend().read()
    assert state.pending is None
    recorded = {k.rsplit(".", 1)[-1] for k in state.resources if k.startswith("relation.")}
    assert recorded == {f"{prefix}_s{i}" for i in range(STREAMS)}
    assert all(state.resources[k].outputs["created_by_dsflow"] for k in state.resources if k.startswith("relation."))
    assert recorded <= set(list_topics(broker))
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert not {t for t in list_topics(broker) if t.startswith(prefix)}
