"""Interrupted applies: kill -9 and Ctrl-C mid-way, then plan and apply again converge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import list_topics
from dsflow.engine.failpoints import PAUSE_AFTER_NOTE
from support.identities import running as running_processes
from support.waiting import wait_for

pytestmark = pytest.mark.integration

SQL = """
CREATE STREAM {p}_src (id BIGINT, v VARCHAR) WITH ('topic' = '{p}_src', 'value.format' = 'json');
CREATE STREAM {p}_a (id BIGINT) WITH ('topic' = '{p}_a', 'value.format' = 'json');
CREATE STREAM {p}_b (id BIGINT) WITH ('topic' = '{p}_b', 'value.format' = 'json');
CREATE STREAM {p}_out WITH ('topic' = '{p}_out') AS SELECT id, v FROM {p}_src WHERE id > 0;
"""


def _project(tmp_path: Path, prefix: str) -> Path:
    root = tmp_path / prefix
    root.mkdir()
    (root / "dsflow.yml").write_text(f"name: {prefix}\ndefault:\n  store: k\nruntime:\n  spark_conf:\n"
                                     "    spark.driver.memory: 512m\n")
    (root / "stores.yml").write_text("stores:\n  - name: k\n    type: kafka\n"
                                     "    bootstrap_servers: \"{{ var('bootstrap') }}\"\n")
    (root / "p.sql").write_text(SQL.format(p=prefix))
    return root


def _dsflow(root: Path, broker: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}", *args]


def _state_file(root: Path) -> Path:
    return root / ".dsflow" / "state" / "dev.json"


def _pending_pid(root: Path) -> int | None:
    try:
        pending = json.loads(_state_file(root).read_text()).get("pending") or {}
    except (OSError, ValueError):
        return None
    return (pending.get("intent") or {}).get("pid")


def _drivers_for(root: Path) -> list[int]:
    """The live query drivers of the project, found by their identity (adapters/process.py)."""
    return running_processes(root, "driver")


def test_kill_9_during_apply_then_apply_again_converges(tmp_path: Path, broker: str) -> None:
    root = _project(tmp_path, "killed")
    env = {**os.environ, PAUSE_AFTER_NOTE: "query.default.public.killed_out"}
    apply = subprocess.Popen(_dsflow(root, broker, "apply", "--auto-approve"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env)
    wait_for(lambda: _pending_pid(root) is not None, 60, "the apply's recorded intent", interval=0.05)
    os.kill(apply.pid, signal.SIGKILL)
    apply.wait()
    orphan = _pending_pid(root)

    locked = subprocess.run(_dsflow(root, broker, "apply", "--auto-approve"), capture_output=True, text=True)
    assert locked.returncode == 1 and "DSF-E802" in locked.stderr and "'apply'" in locked.stderr
    lock_id = json.loads((root / ".dsflow" / "state" / "dev.lock").read_text())["id"]
    assert subprocess.run(_dsflow(root, broker, "force-unlock", lock_id)).returncode == 0

    again = subprocess.run(_dsflow(root, broker, "apply", "--auto-approve"), capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    try:
        assert orphan not in _drivers_for(root), "the driver of the interrupted apply was left running"
        assert len(_drivers_for(root)) == 1
        loaded = operations.load(operations.Options(root, None, {"bootstrap": broker}))
        assert not operations.plan(loaded).has_changes
        state = loaded.workspace.state_backend().read()
        assert state.pending is None
        assert all(r.outputs["created_by_dsflow"] for k, r in state.resources.items() if k.startswith("relation."))
    finally:
        done = subprocess.run(_dsflow(root, broker, "destroy", "--auto-approve"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _wait_until_destroyed(broker, "killed_", {})
    assert not _drivers_for(root)


def test_ctrl_c_during_apply_leaves_state_consistent(tmp_path: Path, broker: str) -> None:
    root = _project(tmp_path, "sigint")
    apply = subprocess.Popen(_dsflow(root, broker, "apply", "--auto-approve"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    wait_for(lambda: _state_file(root).exists() and len(json.loads(_state_file(root).read_text())["resources"]) >= 2,
             60, "two resources in the state", interval=0.05)
    apply.send_signal(signal.SIGINT)
    assert apply.wait(60) != 0
    assert not (root / ".dsflow" / "state" / "dev.lock").exists(), "Ctrl-C left the state locked"
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker}))
    recorded = set(loaded.workspace.state_backend().read().resources)
    assert recorded, "nothing recorded"
    topics = set(list_topics(broker))
    for address in recorded:
        if address.startswith("relation."):
            assert address.rsplit(".", 1)[-1] in topics
    result = operations.apply(loaded, operations.plan(loaded))
    assert result.ok, result.failed
    assert not operations.plan(loaded).has_changes
    owned = {k: r.outputs.get("created_by_dsflow") for k, r in loaded.workspace.state_backend().read().resources.items()
             if k.startswith("relation.")}
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert not _drivers_for(root), "a driver outlived destroy (its reads would create the topics again on tansu)"
    _wait_until_destroyed(broker, "sigint_", owned)


def test_ctrl_c_after_a_noted_intent_keeps_it_for_the_next_apply(tmp_path: Path, broker: str) -> None:
    """Ctrl-C between an executor's note ("the topic did not exist") and the state write after its change: the change
    stays pending with that note, so the next apply resumes it and still owns the topic it creates. Paused after the
    note, the topic is then made by hand, as if the interrupted apply had made it before the signal: an apply that
    lost the note would see it existing and adopt it as not its own, and destroy would leave it behind."""
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

    root = _project(tmp_path, "sigpause")
    relation = "relation.default.public.sigpause_a"
    apply = subprocess.Popen(_dsflow(root, broker, "apply", "--auto-approve"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env={**os.environ, PAUSE_AFTER_NOTE: relation})
    try:
        wait_for(lambda: _pending_intent(root, relation) is not None, 60, "the topic's noted intent", interval=0.05)
        apply.send_signal(signal.SIGINT)
        assert apply.wait(60) != 0
    finally:
        apply.kill()
    assert _pending_intent(root, relation) == {"topic_existed": False}, "Ctrl-C dropped the executor's note"
    ensure_topic(broker, TopicSpec("sigpause_a", 1, 1, {}))
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker}))
    assert operations.apply(loaded, operations.plan(loaded)).ok
    assert loaded.workspace.state_backend().read().resources[relation].outputs["created_by_dsflow"] is True
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    _wait_until_destroyed(broker, "sigpause_", {})


def _pending_intent(root: Path, address: str) -> dict | None:
    try:
        pending = json.loads(_state_file(root).read_text()).get("pending") or {}
    except (OSError, ValueError):
        return None
    return pending.get("intent") or None if pending.get("address") == address else None


def _wait_until_destroyed(broker: str, prefix: str, owned: dict[str, object]) -> None:
    """Until the broker lists no topic of the project (tansu lists a deleted topic for a moment); the failure names
    the topics left and what the state said of each before destroy."""
    left: set[str] = set()

    def gone() -> bool:
        left.clear()
        left.update(t for t in list_topics(broker) if t.startswith(prefix))
        return not left

    try:
        wait_for(gone, 30, "the destroyed topics to leave the broker's metadata")
    except AssertionError as err:
        raise AssertionError(f"{err}: still listed {sorted(left)}; created_by_dsflow before destroy: {owned}") from None

