"""`dsflow pause QUERY` and `dsflow resume QUERY`: stop a deployed query keeping its checkpoint and offsets, and
start it again on them.

Pause stops the query as apply's planned stop does (between two micro-batches, core/categories.py
STOP_GRACE_SECONDS) and records it in the state as paused (`outputs.paused`, with when and the offsets of its last
committed batch). Refresh then sees it as paused, not as drift; the plan leaves it stopped and holds its changes
(core/forcing.py); the runtime supervisor leaves it alone (runtime/supervisor.py `supervised`). Resume starts the
recorded version again on the same checkpoint, in its own driver or its shared application, as the supervisor's
restart does: it resumes from the last committed batch, so nothing is read twice or skipped.
"""

from __future__ import annotations

from datetime import datetime, timezone

from dsflow.core.address import Address, Kind
from dsflow.core.forcing import is_paused
from dsflow.core.model import Project
from dsflow.core.state import DeployedResource, State
from dsflow.errors import DsflowError
from dsflow.engine import eventlog
from dsflow.engine.workspace import Workspace
from dsflow.runtime.locking import lock_patiently

PAUSED_KEYS = ("paused", "paused_at", "paused_offsets")
"""What pause adds to a query's outputs; resume removes them."""


def pause(project: Project, workspace: Workspace, address: str) -> DeployedResource:
    """Stop the deployed query at `address` and record it paused; DSF-E828 if it is not deployed or already paused."""
    from dsflow.engine.executors import QueryExecutor

    backend = workspace.state_backend()
    with lock_patiently(backend, "pause"):
        state = backend.read()
        deployed = _deployed(state, address, want_paused=False)
        stopped = QueryExecutor()._stop(deployed)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        outputs = {**deployed.outputs, "pid": None, "paused": True, "paused_at": now,
                   "paused_offsets": stopped["stop_offsets"]}
        entry = _record(backend, state, deployed.model_copy(update={"outputs": outputs}))
    eventlog.emit(backend, project.environment, address, "pause", eventlog.local_actor(),
                  stop_offsets=stopped["stop_offsets"], checkpoint=deployed.outputs.get("checkpoint"))
    return entry


def resume(project: Project, workspace: Workspace, address: str) -> DeployedResource:
    """Start the paused query at `address` again on its checkpoint (its recorded version and spec); DSF-E828 if it
    is not deployed or not paused."""
    from dsflow.engine.executors import start_recorded

    backend = workspace.state_backend()
    with lock_patiently(backend, "resume"):
        state = backend.read()
        deployed = _deployed(state, address, want_paused=True)
        started = start_recorded(project, workspace, deployed)
        outputs = {k: v for k, v in deployed.outputs.items() if k not in PAUSED_KEYS} | started
        entry = _record(backend, state, deployed.model_copy(update={"outputs": outputs}))
    eventlog.emit(backend, project.environment, address, "resume", eventlog.local_actor(), pid=started.get("pid"),
                  checkpoint=deployed.outputs.get("checkpoint"))
    return entry


def _deployed(state: State, address: str, want_paused: bool) -> DeployedResource:
    deployed = state.resources.get(address)
    if deployed is None or Address.parse(address).kind is not Kind.QUERY:
        raise DsflowError("DSF-E828", f"{address} is not a deployed query",
                          hint="name one 'dsflow status' lists, such as query.db.schema.name")
    if is_paused(deployed) != want_paused:
        raise DsflowError("DSF-E828", f"{address} is {'not ' if want_paused else ''}paused",
                          hint="'dsflow status' shows which queries are paused")
    return deployed


def _record(backend, state: State, entry: DeployedResource) -> DeployedResource:
    backend.write(state.with_resource(entry), expected_serial=state.serial)
    return entry
