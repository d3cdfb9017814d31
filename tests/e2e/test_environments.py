"""Two environments of one project on one broker never touch each other's topics, state or checkpoints.
Secrets from env_var() never reach state, plans, JSON output or logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import list_topics
from dsflow.cli import cli

pytestmark = pytest.mark.integration

CONFIG = """
name: twins
default:
  store: k
environments:
  dev:
    topic_prefix: "dev."
  prod:
    topic_prefix: "prod."
"""


def _project(tmp_path: Path, broker: str) -> Path:
    root = tmp_path / "twins"
    root.mkdir()
    (root / "dsflow.yml").write_text(CONFIG)
    (root / "stores.yml").write_text(f"""
stores:
  - name: k
    type: kafka
    bootstrap_servers: "{broker}"
    properties:
      client.id: "{{{{ env_var('TWINS_CLIENT_SECRET') }}}}"
""")
    (root / "p.sql").write_text("CREATE STREAM orders (id BIGINT) WITH ('value.format' = 'json');\n"
                                "CREATE STREAM big_orders AS SELECT id FROM orders WHERE id > 100;")
    return root


def test_two_environments_share_a_broker_without_touching_each_other(tmp_path: Path, broker: str, monkeypatch) -> None:
    monkeypatch.setenv("TWINS_CLIENT_SECRET", "s3cr3t-value-never-shown")
    root = _project(tmp_path, broker)
    dev = operations.load(operations.Options(root, "dev"))
    prod = operations.load(operations.Options(root, "prod"))
    assert operations.apply(dev, operations.plan(dev)).ok
    assert operations.apply(prod, operations.plan(prod)).ok
    assert {"dev.orders", "prod.orders", "dev.big_orders", "prod.big_orders"} <= set(list_topics(broker))
    _wait_until_running(prod)
    assert dev.workspace.state_backend().path != prod.workspace.state_backend().path
    assert dev.workspace.checkpoint_root != prod.workspace.checkpoint_root

    assert operations.apply(dev, operations.plan(dev, destroy=True)).ok
    topics = set(list_topics(broker))
    assert "dev.orders" not in topics and "prod.orders" in topics and "prod.big_orders" in topics
    assert not operations.plan(prod).has_changes

    runner = CliRunner()
    outputs = [runner.invoke(cli, ["-C", str(root), "--env", "prod", *args]).output
               for args in (["plan", "--json"], ["plan", "--format", "markdown"], ["state", "show"],
                            ["status", "--json"], ["plan", "--show-unchanged"])]
    files = [p.read_text(errors="replace") for p in (root / ".dsflow").rglob("*") if p.is_file()]
    assert json.loads(outputs[0])["changes"]
    for text in outputs + files:
        assert "s3cr3t-value-never-shown" not in text
    assert operations.apply(prod, operations.plan(prod, destroy=True)).ok


def _wait_until_running(loaded: operations.Loaded, timeout: float = 120.0) -> None:
    """Until the prod query's driver has started its query, so its log and status exist to be searched."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = [e for e in operations.status(loaded) if e["address"].startswith("query.")]
        if entries and all(e["state"] == "running" for e in entries):
            return
        time.sleep(1)
    raise AssertionError(f"query not running: {operations.status(loaded)}")
