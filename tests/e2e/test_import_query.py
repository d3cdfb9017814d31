"""Importing a running query (issue 42 item 4, core/imports.py, engine/refresh.py `observe_drivers`) with a real
driver on the session's broker: the state loses the query's entry (an older copy of the state file put back), and
`dsflow import query.NAME CHECKPOINT` (or RUN_DIR) takes the driver that still runs it back, as it is, known by its
identity (adapters/process.py): nothing stopped or started, the records keep flowing. A changed declaration is then
planned by the usual categories against what runs (a stateless filter: keep checkpoint, on the running driver's
checkpoint), checked by id in the sink topic; a run folder whose driver is gone is refused before anything is
applied. A member of a live shared application (`runtime.isolation: shared`) is imported the same way from its run
folder, without restarting it or the application's other query: the same host PID, the same Spark run id of both
members, every id once in both sinks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.adapters import process
from dsflow.adapters.spark import apps
from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.cli import cli
from dsflow.core.categories import Category
from dsflow.core.plan import Action
from dsflow.engine import operations
from dsflow.engine.executors import driver_identity
from dsflow.errors import ProjectError
from test_data_loss import _ids, _project, _wait_ids

pytestmark = pytest.mark.integration

SQL = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json');\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT id FROM events;\n")
QUERY = "query.default.public.copied"


def _produce(broker: str, topic: str, ids: range) -> None:
    produce_json_lines(broker, topic, [json.dumps({"id": i}) for i in ids])


def test_dsflow_import_takes_a_running_driver_back_and_plans_a_change_against_it(tmp_path: Path, broker: str):
    root, options, prefix = _project(tmp_path, SQL, broker)
    source, sink = f"{prefix}_events", f"{prefix}_copied"
    args = ["-C", str(root), "--var", f"bootstrap={broker}"]
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _produce(broker, source, range(10))
        _wait_ids(broker, sink, set(range(10)))
        backend = loaded.workspace.state_backend()
        deployed = backend.read().resources[QUERY]
        run_dir, pid = deployed.outputs["run_dir"], deployed.outputs["pid"]
        backend.write(backend.read().without(QUERY))  # an older copy of the state, put back

        lost = operations.plan(operations.load(options))
        assert [(c.address, c.action) for c in lost.actionable] == [(QUERY, Action.CREATE)], "it lost the entry"
        by_checkpoint = [*args, "import", QUERY, deployed.outputs["checkpoint"], "--auto-approve"]
        result = CliRunner().invoke(cli, by_checkpoint)  # the checkpoint names the driver of its run folder
        assert result.exit_code == 0, result.output + repr(result.exception)
        assert f"<= {QUERY}  (import {run_dir})" in result.output and "1 to import" in result.output
        assert f"driver pid {pid} runs version {deployed.outputs['version'][:12]}" in result.output
        entry = backend.read().resources[QUERY]
        assert (entry.outputs["pid"], entry.outputs["checkpoint"]) == (pid, deployed.outputs["checkpoint"])
        assert (entry.data_hash, entry.data) == (deployed.data_hash, deployed.data)
        assert process.is_running(pid, driver_identity(run_dir)), "imported as it is: the same driver runs on"
        assert not operations.plan(operations.load(options)).actionable
        _produce(broker, source, range(10, 20))
        _wait_ids(broker, sink, set(range(20)))

        (root / "rel.sql").write_text(SQL.replace("{p}", prefix).replace("FROM events", "FROM events WHERE id >= 0"))
        loaded = operations.load(options)
        plan = operations.plan(loaded)
        [change] = plan.actionable
        assert (change.address, change.action, change.category) == (QUERY, Action.UPDATE, Category.KEEP_CHECKPOINT)
        assert operations.apply(loaded, plan).ok
        entry = backend.read().resources[QUERY]
        assert entry.outputs["checkpoint"] == deployed.outputs["checkpoint"]
        assert entry.outputs["version"] == change.data_hash != deployed.outputs["version"]
        _produce(broker, source, range(20, 30))
        _wait_ids(broker, sink, set(range(30)))
        ids = _ids(broker, sink)
        assert set(ids) == set(range(30)) and len(ids) < 40, "resumed on its checkpoint: nothing read again from 0"
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))

    refused = CliRunner().invoke(cli, [*args, "import", QUERY, run_dir, "--auto-approve"])
    assert refused.exit_code == 1
    assert "DSF-E868" in str(getattr(refused.exception, "code", "")) + refused.output + str(refused.exception)


SHARED = ("name: {name}\ndefault:\n  store: k\nruntime:\n  isolation: shared\n"
          "environments:\n  dev:\n    vars: {{bootstrap: 'unset:1'}}\n")
NEIGHBOUR = "CREATE STREAM kept WITH ('topic' = '{p}_kept') AS SELECT id FROM events WHERE id >= 0;\n"


def _members(app_dir: Path) -> dict[str, tuple]:
    """Each member's generation and Spark run id (new at every start of it), as its host reports them."""
    return {name: (q.get("generation"), q.get("run_id"), q.get("state")) for name, q in apps.reported(app_dir).items()}


def test_a_member_of_a_live_shared_application_is_imported_without_restarting_it_or_its_neighbour(
        tmp_path: Path, broker: str):
    root, options, prefix = _project(tmp_path, SQL + NEIGHBOUR, broker)
    (root / "dsflow.yml").write_text(SHARED.format(name=prefix))
    source, sinks = f"{prefix}_events", (f"{prefix}_copied", f"{prefix}_kept")
    args = ["-C", str(root), "--var", f"bootstrap={broker}"]
    app_dir = None
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _produce(broker, source, range(10))
        for sink in sinks:
            _wait_ids(broker, sink, set(range(10)))
        backend = loaded.workspace.state_backend()
        deployed = backend.read().resources[QUERY]
        app_dir, host, run_dir = Path(deployed.outputs["app_dir"]), deployed.outputs["pid"], deployed.outputs["run_dir"]
        assert backend.read().resources["query.default.public.kept"].outputs["app_dir"] == str(app_dir), "one app"
        members = _members(app_dir)
        assert {m[2] for m in members.values()} == {"running"} and len(members) == 2
        backend.write(backend.read().without(QUERY))  # an older copy of the state, put back

        declared = Path(run_dir) / "declared.json"
        recorded = declared.read_text()
        declared.unlink()  # the same check as for a driver of its own: the declaration it started from is needed
        with pytest.raises(ProjectError) as unrecorded:
            operations.plan(operations.load(options), imports={QUERY: run_dir})
        assert [d.code for d in unrecorded.value.diagnostics] == ["DSF-E869"]
        declared.write_text(recorded)

        (root / "import.yml").write_text(f"import:\n  - to: {QUERY}\n    id: {run_dir}\n")
        loaded = operations.load(options)
        plan = operations.plan(loaded)
        [change] = plan.actionable
        assert (change.address, change.action, change.imported) == (QUERY, Action.NOOP, run_dir)
        assert f"imported (the shared application {app_dir.name}, host pid {host}, runs version" in change.reason
        assert "nothing restarted" in (change.effect or "") and "offsets kept" in (change.effect or "")
        _produce(broker, source, range(10, 20))  # flowing while the import is applied
        assert operations.apply(loaded, plan).ok
        entry = backend.read().resources[QUERY]
        assert (entry.data_hash, entry.data) == (deployed.data_hash, deployed.data)
        assert {k: entry.outputs[k] for k in ("pid", "app", "app_dir", "app_query", "checkpoint", "version")} == \
            {k: deployed.outputs[k] for k in ("pid", "app", "app_dir", "app_query", "checkpoint", "version")}
        assert not operations.plan(operations.load(options)).actionable, "the entry stays and does nothing"
        _produce(broker, source, range(20, 30))
        for sink in sinks:
            _wait_ids(broker, sink, set(range(30)))
            assert sorted(_ids(broker, sink)) == list(range(30)), f"{sink}: every id once, none lost or doubled"
        assert apps.host_pid(app_dir) == host and process.is_running(host, apps.host_identity(app_dir))
        assert _members(app_dir) == members, "neither member was restarted (same generation and Spark run id)"

        backend.write(backend.read().without(QUERY))
        (root / "import.yml").unlink()
        apps.remove(app_dir, deployed.outputs["app_query"])  # stopped in its application, which runs on
        refused = CliRunner().invoke(cli, [*args, "import", QUERY, deployed.outputs["checkpoint"], "--auto-approve"])
        assert refused.exit_code == 1 and process.is_running(host, apps.host_identity(app_dir))
        assert "DSF-E868" in str(getattr(refused.exception, "code", "")) + refused.output + str(refused.exception)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
        if app_dir is not None:  # a member the state lost is not destroyed with it: its host is stopped here
            process.stop(apps.host_pid(app_dir), apps.host_identity(app_dir))
