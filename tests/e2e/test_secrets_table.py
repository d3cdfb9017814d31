"""No secret value in clear anywhere (issue 25): a project whose broker address, client settings and state DSN
password come from env_var() is applied to the real broker with its state in PostgreSQL; then every place a
value could surface is searched for each secret: the state row and its neighbours (lock and key tables), the
saved plan and `plan --json`, every command's output, every file under the project (logs, run files, spec
files, checkpoints), the command lines of the processes dsflow started (the data generator, the query driver and
its JVM and Python workers), and error texts (DSF-E702 for a broker that is down, a refresh that cannot reach it).

The table lists each secret with where it goes; a hit fails the test naming the secret and the place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsflow.adapters.kafka.devbroker import free_port
from dsflow.adapters.state.postgres import keys_table, locks_table
from dsflow.core.state import State
from support.waiting import wait_for
from support import pgserver
from support.pgserver import DSN as PG_DSN

pytestmark = pytest.mark.integration

RUN = uuid.uuid4().hex[:10]
SECRETS = {  # env var -> (value, where the project uses it); the broker address is added per test (its port)
    "H3_CLIENT_ID": (f"client-id-{RUN}", "store property client.id"),
    "H3_KEY_PASSWORD": (f"key-pw-{RUN}", "store property ssl.key.password (unused on the plaintext test broker)"),
    "H3_RACK": (f"rack-{RUN}", "store property client.rack"),
    "H3_PG_PASSWORD": (f"pg-pw-{RUN}", "state.dsn password (trust auth ignores it)"),
}
BOOTSTRAP_ENV = "H3_BOOTSTRAP"


@pytest.fixture()
def pg_table() -> Iterator[str]:
    import psycopg2

    table = f"t{uuid.uuid4().hex[:10]}_state"
    yield table
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}, {locks_table(table)}, {keys_table(table)}")
    conn.close()


def _project(root: Path, table: str) -> Path:
    root.mkdir()
    (root / "dsflow.yml").write_text(
        "name: secretsproj\ndefault:\n  database: analytics\n  schema: public\n  store: k\n"
        "runtime:\n  trigger_interval: 1 second\n"
        "state:\n  backend: postgres\n"
        "  dsn: \"postgresql://postgres:{{ env_var('H3_PG_PASSWORD') }}@127.0.0.1:" + pgserver.PORT + "/test\"\n"
        f"  table: {table}\n")
    (root / "stores.yml").write_text(
        "stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: \"{{ env_var('H3_BOOTSTRAP') }}\"\n"
        "    properties:\n      client.id: \"{{ env_var('H3_CLIENT_ID') }}\"\n"
        "      ssl.key.password: \"{{ env_var('H3_KEY_PASSWORD') }}\"\n"
        "      client.rack: \"{{ env_var('H3_RACK') }}\"\n"
        "databases:\n  - name: analytics\n    schemas: [public]\n"
        "datagen:\n  - name: feed\n    relation: pageviews\n    generator: pageviews\n    rate: 20\n")
    (root / "p.sql").write_text(
        f"CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)\n"
        f"WITH ('topic' = 'pv_{RUN}', 'value.format' = 'json', 'timestamp' = 'viewtime');\n"
        f"CREATE STREAM copied WITH ('topic' = 'copied_{RUN}') AS SELECT id, pageid FROM pageviews;\n")
    return root


class Run:
    """Runs dsflow commands as processes with the secrets in their environment; keeps every output."""

    def __init__(self, root: Path, bootstrap: str):
        self.root = root
        self.env = {**os.environ, BOOTSTRAP_ENV: bootstrap, **{k: v for k, (v, _) in SECRETS.items()}}
        self.outputs: dict[str, str] = {}

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(self.root), *args], capture_output=True,
                              text=True, env=env or self.env, timeout=300)
        self.outputs[f"dsflow {' '.join(args)} #{len(self.outputs)}"] = done.stdout + done.stderr
        return done


def _stored(table: str) -> dict[str, str]:
    """Everything the backend keeps for the project: state rows, lock rows, key rows, as text."""
    import psycopg2

    found = {}
    with psycopg2.connect(PG_DSN) as conn, conn.cursor() as cur:
        for name in (table, locks_table(table), keys_table(table)):
            cur.execute(f"SELECT to_jsonb(t)::text FROM {name} t")
            found[f"table {name}"] = "\n".join(row[0] for row in cur.fetchall())
    conn.close()
    return found


def _command_lines(pids: list[int]) -> str:
    """The command lines of the processes dsflow started and of every process they started."""
    import psutil

    lines = []
    for pid in pids:
        try:
            procs = [psutil.Process(pid)]
            procs += procs[0].children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for proc in procs:
            try:
                lines.append(" ".join(proc.cmdline()))
            except psutil.Error:  # a short-lived child ended meanwhile
                continue
    return "\n".join(lines)


def _query_running(run: Run) -> bool:
    done = run("status", "--json")
    entries = {e["address"]: e for e in json.loads(done.stdout)} if done.returncode == 0 else {}
    query = entries.get("query.analytics.public.copied", {})
    return query.get("state") == "running" and (query.get("batch_id") or 0) >= 1 \
        and entries.get("datagen.feed", {}).get("state") == "running"


def test_no_secret_value_in_state_plans_outputs_logs_processes_or_errors(tmp_path: Path, broker: str,
                                                                         pg_table: str) -> None:
    bootstrap = f"PLAINTEXT://{broker}"
    table = {**SECRETS, BOOTSTRAP_ENV: (bootstrap, "bootstrap_servers"),
             "broker address": (broker, "bootstrap_servers without its scheme")}
    root = _project(tmp_path / "project", pg_table)
    run = Run(root, bootstrap)
    texts: dict[str, str] = {}
    try:
        planned = run("plan", "--out", str(tmp_path / "plan.json"))
        assert planned.returncode == 0, planned.stdout + planned.stderr
        applied = run("apply", str(tmp_path / "plan.json"))
        assert applied.returncode == 0, applied.stdout + applied.stderr
        wait_for(lambda: _query_running(run), 240, "the query to run a batch and the generator to run")
        state = State.model_validate_json(run("state", "show").stdout)
        pids = [state.resources[a].outputs["pid"] for a in ("datagen.feed", "query.analytics.public.copied")]
        texts["ps of the generator, the driver and their children"] = _command_lines(pids)
        assert "spark" in texts["ps of the generator, the driver and their children"].lower()  # the JVM is in it
        assert run("plan", "--json", "--detailed-exitcode").returncode == 0, "a second plan must show no change"
        for args in (["status"], ["history", "query.analytics.public.copied"], ["plan", "--format", "markdown"]):
            run(*args)

        dead = f"PLAINTEXT://127.0.0.1:{free_port()}"
        table["dead broker address"] = (dead, "bootstrap_servers of a broker that is down")
        down = {**run.env, BOOTSTRAP_ENV: dead}
        printed = run("topic", "print", "pageviews", "--limit", "1", env=down)
        assert printed.returncode == 1 and "DSF-E702" in printed.stdout + printed.stderr
        refreshed = run("plan", "--json", env=down)
        assert refreshed.returncode in (0, 1) and dead.split("//")[1] not in refreshed.stdout
        texts.update(_stored(pg_table))
        assert "sensitive:hmac:" in texts[f"table {pg_table}"]
        key = json.loads(texts[f"table {keys_table(pg_table)}"])["key"]
    finally:
        destroyed = run("destroy", "--auto-approve")
    assert destroyed.returncode == 0, destroyed.stdout + destroyed.stderr
    texts.update(run.outputs)
    texts["saved plan"] = (tmp_path / "plan.json").read_text()
    texts.update({f"file {p.relative_to(root)}": p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()})
    assert any("datagen.log" in place for place in texts) and any("driver.log" in place for place in texts)

    hits = [(name, place) for name, (value, _) in table.items() for place, text in texts.items() if value in text]
    hits += [("the redaction key", place) for place, text in texts.items()
             if key in text and not place.startswith(f"table {keys_table(pg_table)}")]
    assert hits == [], f"secret values found (secret, place): {hits}"
