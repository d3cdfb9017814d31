"""Apply walks a frozen plan in order and records state after every change.

An interrupted apply leaves state describing exactly what was done, so planning and applying
again converges. A plan made against another state (lineage or serial) is refused, and so is one whose changes
rely on live facts that are no longer what the plan's observations say (engine/refresh.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone

from dsflow.adapters.state import redactor
from dsflow.core.address import Address
from dsflow.core.bluegreen import redirected, redirects
from dsflow.core.events import event
from dsflow.core.model import Project
from dsflow.core.plan import Action, Change, Plan, pinned, pinned_to, recreates
from dsflow.core.plan import desired_fingerprint
from dsflow.core.resources import fingerprint, has_secrets, project_resources, with_current_markers
from dsflow.core.secrets import Redactor, scrub
from dsflow.core.safety import Allowance, check_data_loss
from dsflow.core.state import DeployedResource, ForgottenEntry, LedgerEntry, PendingChange, State
from dsflow.errors import DsflowError
from dsflow.engine import bluegreen, bluegreen_forward, bluegreen_resume, eventlog, failpoints
from dsflow.engine.refresh import check_still_observed
from dsflow.engine.executors import GONE, LEDGER_STARTED, LEDGER_STOPPED, Context, run_change
from dsflow.runtime.locking import lock_patiently
from dsflow.engine.workspace import Workspace


@dataclass
class ApplyResult:
    """What an apply did: changes that succeeded, the one that failed, and those not run."""

    done: list[Change] = field(default_factory=list)
    failed: tuple[Change, DsflowError | Exception] | None = None
    skipped: list[Change] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed is None


def check_plan_is_current(plan: Plan, state: State, project: Project, redactor: Redactor = Redactor()) -> None:
    """Refuse a saved plan if state moved on or the project's resources changed since it was made."""
    if plan.state_lineage != state.lineage or plan.state_serial != state.serial:
        raise DsflowError("DSF-E820", f"the plan was made against state serial {plan.state_serial}, "
                          f"but the state is now at serial {state.serial}", hint="run 'dsflow plan' again")
    desired = project_resources(project, redactor)
    if plan.desired_fingerprint and plan.mode != "destroy" and plan.desired_fingerprint != desired_fingerprint(desired):
        raise DsflowError("DSF-E821", "the project files changed since the plan was made",
                          hint="run 'dsflow plan' again")
    current = {str(r.address): r for r in desired}
    for change in plan.changes:
        if change.action in (Action.DELETE, Action.FORGET, Action.REFRESH):
            continue
        resource = current.get(change.address)
        deployed = state.resources.get(change.moved_from or change.address)
        if resource is not None and (change.action is not Action.REPLACE or not recreates(deployed)):
            resource = pinned(resource, deployed)  # as make_plan saw it: core/plan.pinned
        if resource is not None and change.imported is not None and change.before is not None:
            resource = pinned_to(resource, change.before)  # as imported: the log's own size where undeclared
        if resource is not None and change.action is Action.CREATE and change.after is not None:
            resource = pinned_to(resource, change.after)  # an undeclared size taken from a log adopted as it is
        if resource is None or resource.data_hash != change.data_hash or resource.metadata_hash != change.metadata_hash:
            raise DsflowError("DSF-E821", f"the project changed since the plan was made ({change.address})",
                              hint="run 'dsflow plan' again")


def apply_plan(plan: Plan, project: Project, workspace: Workspace,
               on_event: Callable[[str, Change], None] = lambda *_: None,
               allowance: Allowance = Allowance(), actor: str | None = None) -> ApplyResult:
    """Carry out every actionable change in order, saving state after each one; nothing at all when the plan
    destroys records the user did not allow (check_data_loss). Each change applied or failed, and each query version
    started or stopped, is an event of the environment's log, by `actor` (the OS user when None)."""
    check_data_loss(plan, allowance)
    backend = workspace.state_backend()
    result = ApplyResult()
    log = _EventWriter(backend, project.environment, actor or eventlog.local_actor())
    with lock_patiently(backend, "destroy" if plan.mode == "destroy" else "apply"):  # a supervisor's restart ends
        state = backend.read()
        markers = redactor(project, backend)
        check_plan_is_current(plan, state, project, markers)
        check_still_observed(plan, project)  # the live facts its changes rely on (DSF-E827)
        writer = _StateWriter(backend, state.serial)
        state = _migrated(project, state, markers)
        state = state.with_lineage().model_copy(update={"project": project.name, "environment": project.environment})
        interrupted = state.pending
        pending = list(plan.actionable)
        for index, change in enumerate(pending):
            on_event("start", change)
            resumed = interrupted.intent if interrupted and interrupted.address == change.address else {}
            state = state.with_pending(PendingChange(address=change.address, action=change.action.value,
                                                     intent=dict(resumed)))
            writer.write(state)
            holder = _IntentRecorder(writer, state)
            ctx = Context(redirected(project, redirects(state.resources)), workspace, note=holder.note,
                          resumed=resumed, record=holder.record)  # relations a blue/green switch moved, on it
            before = state
            try:
                seen = plan.observations.resources.get(change.address)
                if change.blue_green is not None:  # carried out beside the deployed version: engine/bluegreen.py
                    deploy = bluegreen_forward.finish if bluegreen_forward.rolls_forward(change) else bluegreen.deploy
                    state = deploy(ctx, change, holder.current, _record_ledger).with_pending(None)
                elif _only_rolled_back(change):  # its SQL reverted: the deployment's leftovers removed alone
                    state = _rolled_back(ctx, change, holder.state)[1].with_pending(None)
                else:
                    ctx, rolled = _rolled_back(ctx, change, holder.state)
                    state = _apply_one(ctx, change, rolled, seen.running if seen else None).with_pending(None)
            except (DsflowError, Exception) as err:  # noqa: BLE001 - reported with the change that failed
                state = err.state if isinstance(err, bluegreen.Failed) else holder.state
                result.failed = (change, err)
                result.skipped = pending[index + 1:]
                on_event("failed", change)
                break
            except BaseException:  # Ctrl-C: the change stays pending with what its executor noted (a topic it
                state = holder.state  # was creating), so the next apply resumes it rather than adopting the topic
                raise
            finally:
                writer.write(state)
                log.changed(change, before, state, result.failed)
            result.done.append(change)
            on_event("done", change)
        if result.ok and plan.retired:  # kept old versions of blue/green deployments: engine/bluegreen.py
            state = bluegreen.retire(Context(redirected(project, redirects(state.resources)), workspace),
                                     plan.retired, state)
        writer.write(state)
    return result


def _migrated(project: Project, state: State, markers: Redactor) -> State:
    """A state written before 2026-11-25, as this apply writes it back: the unkeyed markers of unchanged secrets
    become keyed ones (core/resources.py), and a topic records no bootstrap address that came from env_var()."""
    if not has_secrets(project):
        return state
    state = with_current_markers(project, state, project_resources(project, markers))
    secret_bootstraps = {s.bootstrap_servers for s in project.stores if "bootstrap_servers" in s.sensitive}
    if not secret_bootstraps:
        return state
    resources = {key: entry.model_copy(update={"outputs": {k: v for k, v in entry.outputs.items() if k != "bootstrap"}})
                 if entry.outputs.get("bootstrap") in secret_bootstraps else entry
                 for key, entry in state.resources.items()}
    return state.model_copy(update={"resources": resources})


def migrate_state(project: Project, workspace: Workspace) -> bool:
    """Store a state written before keyed markers the way `_migrated` rewrites it, when there is nothing else to
    apply (an apply with changes does it on its first write); True if it was rewritten. The serial stays: the
    entries mean the same, so a plan saved before still applies."""
    backend = workspace.state_backend()
    state = backend.read()
    if not state.lineage or _migrated(project, state, redactor(project, backend)) == state:
        return False
    with backend.lock("apply"):
        state = backend.read()
        migrated = _migrated(project, state, redactor(project, backend))
        if migrated == state:
            return False
        backend.write(migrated, expected_serial=state.serial)
        backend.write(migrated, expected_serial=state.serial)  # again: the local backup copy holds the old one
    return True


class _StateWriter:
    """Every state write of one apply is a compare-and-swap on the serial it last read or wrote.

    The lock keeps two applies apart; this also catches a writer that raced in without it (one whose
    lock was force-unlocked under it, or another tool): the backend refuses with DSF-E804 and stores
    nothing, so the state stays whole and names the other writer's changes.
    """

    def __init__(self, backend, serial: int):
        self.backend = backend
        self.serial = serial

    def write(self, state: State) -> None:
        self.backend.write(state, expected_serial=self.serial)
        self.serial = state.serial


class _EventWriter:
    """The events of one apply: a change applied or failed, and the query versions it started and stopped."""

    def __init__(self, backend, environment: str, actor: str):
        self.backend, self.environment, self.actor = backend, environment, actor

    def changed(self, change: Change, before: State, after: State,
                failed: tuple[Change, DsflowError | Exception] | None) -> None:
        made = [event(change.address, "apply", self.actor, self.environment, action=change.action.value,
                      moved_from=change.moved_from, state_serial=after.serial)]
        if failed is not None:
            error = failed[1]
            made = [event(change.address, "apply_failed", self.actor, self.environment, action=change.action.value,
                          error=scrub(str(error))[:2000], code=getattr(error, "code", None))]
        made += _version_events(change, before, after, self.actor, self.environment)
        eventlog.record(self.backend, made)


def _version_events(change: Change, before: State, after: State, actor: str, environment: str) -> list:
    """'stop' for a query version the change closed in the ledger, 'start' for one it opened."""
    made = []
    old = {(e.query, e.version, e.started_at): e for e in before.ledger}
    for entry in after.history(change.address):
        was = old.get((entry.query, entry.version, entry.started_at))
        if was is None:
            made.append(event(entry.query, "start", actor, environment, version=entry.version,
                              category=entry.category, checkpoint=entry.checkpoint, forced=entry.forced,
                              start_offsets=entry.start_offsets, skipped_records=entry.skipped_records))
        elif was.stopped_at is None and entry.stopped_at is not None:
            made.append(event(entry.query, "stop", actor, environment, version=entry.version,
                              stop_offsets=entry.stop_offsets, forgotten=bool(entry.forgotten_at) or None))
    return sorted(made, key=lambda e: e.kind != "stop")


class _IntentRecorder:
    """Saves what an executor notes (a PID, whether a topic existed) before it acts on it."""

    def __init__(self, writer: _StateWriter, state: State):
        self.writer = writer
        self.state = state

    def current(self) -> State:
        return self.state

    def note(self, intent: dict) -> None:
        pending = self.state.pending
        assert pending is not None  # an executor notes while its change is pending
        merged = pending.model_copy(update={"intent": {**pending.intent, **intent}})
        self.state = self.state.with_pending(merged)
        self.writer.write(self.state)
        failpoints.pause_after_note(pending.address)

    def record(self, state: State) -> None:
        """A state a step of the change reached, written now with the change still pending (its notes kept)."""
        self.state = state.with_pending(self.state.pending)
        self.writer.write(self.state)


def _rolled_back(ctx: Context, change: Change, state: State) -> tuple[Context, State]:
    """A blue/green deployment of this query an apply was killed in, rolled back before the change is carried out
    without it (the plan said so: engine/bluegreen_resume.py); alone (a query with no change of its own), the
    deployed version is started again if the kill left it stopped at the cut."""
    if not ctx.resumed.get(bluegreen_resume.RUN_NOTE):
        return ctx, state
    restarted = bluegreen_resume.roll_back(ctx, change.address, state, restart=_only_rolled_back(change))
    return dataclasses.replace(ctx, resumed={}), state.with_resource(restarted) if restarted is not None else state


def _only_rolled_back(change: Change) -> bool:
    """The plan's refresh of a query with no change of its own whose blue/green deployment an apply was killed in
    (core/bluegreen_plan.py)."""
    return change.action is Action.REFRESH and not change.drift and change.address.startswith("query.")


def _apply_one(ctx: Context, change: Change, state: State, running: dict[str, Any] | None = None) -> State:
    """One change carried out and recorded; `running`: what the refresh saw of a running query it imports."""
    if change.moved_from is not None and change.address not in state.resources:  # a move: the entry follows
        state = state.with_move(change.moved_from, change.address)
    if change.imported is not None and change.address not in state.resources:
        state = _imported(ctx, change, state) if running is None else _running_query(change, state, running)
        if change.action is Action.NOOP:
            return state
    deployed = state.resources.get(change.address)
    outputs = dict(run_change(ctx, change, deployed) or {})
    if change.imported is not None and deployed is not None and change.action is Action.UPDATE:
        outputs = {"created_by_dsflow": False, **outputs, "imported": change.imported}  # still not dsflow's
    state = _record_ledger(state, change, outputs.pop(LEDGER_STOPPED, None), outputs.pop(LEDGER_STARTED, None))
    if outputs.pop(GONE, False):
        return _forgotten(state, change) if change.action is Action.FORGET else state.without(change.address)
    if change.action is Action.REFRESH:
        assert deployed is not None  # a refresh is of a resource the state holds
        return state.with_resource(deployed.model_copy(update={"outputs": outputs}))
    return state.with_resource(DeployedResource(
        address=change.address, depends_on=change.depends_on, data_hash=change.data_hash or "",
        metadata_hash=change.metadata_hash or "", data=change.after or {}, metadata=change.after_metadata or {},
        outputs=outputs,
    ))


def _imported(ctx: Context, change: Change, state: State) -> State:
    """The state with an imported log recorded as it is (change.before: the declaration with the log's size), noted
    by its store kind as a create of what exists already notes it (not created by dsflow); the change's own action,
    if any, then runs against it."""
    before = change.before or {}
    adopt = change.model_copy(update={"action": Action.CREATE, "after": before})
    outputs = dict(run_change(ctx, adopt, None) or {})
    return state.with_resource(DeployedResource(
        address=change.address, depends_on=change.depends_on, data_hash=fingerprint(before),
        metadata_hash=change.metadata_hash or "", data=before, metadata=change.after_metadata or {},
        outputs={**outputs, "created_by_dsflow": False, "imported": change.imported}))


def _running_query(change: Change, state: State, running: dict[str, Any]) -> State:
    """The state with a running query recorded as its run folder records it (the declaration its version was
    started from, its driver's outputs): nothing started or stopped; the change's own action, if any, then runs
    against it (a new version on its checkpoint, ...)."""
    return state.with_resource(DeployedResource(
        address=change.address, depends_on=change.depends_on, data_hash=running["data_hash"],
        metadata_hash=running.get("metadata_hash") or "", data=running["data"], metadata=running.get("metadata") or {},
        outputs={**running["outputs"], "imported": change.imported}))


def _forgotten(state: State, change: Change) -> State:
    """The state without a forgotten resource, which it records (`State.forgotten`, and a query's ledger)."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kept = "kept" if change.keep_running is None else "running" if change.keep_running else "stopped"
    entry = ForgottenEntry(address=change.address, forgotten_at=now, object=change.physical, kept=kept,
                           data=change.before or {}, state_serial=state.serial + 1)
    ledger = list(state.ledger)
    for index in range(len(ledger) - 1, -1, -1):
        if ledger[index].query == change.address:
            ledger[index] = ledger[index].model_copy(update={"forgotten_at": now})
            break
    state = state.model_copy(update={"forgotten": [*state.forgotten, entry], "ledger": ledger})
    return state.without(change.address)


def _record_ledger(state: State, change: Change, stopped: dict | None, started: dict | None) -> State:
    """Close the query's open ledger entry with where it stopped; open one for the version that started."""
    if stopped is None and started is None:
        return state
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    entries = list(state.ledger)
    if stopped is not None:
        for index in range(len(entries) - 1, -1, -1):
            entry = entries[index]
            if entry.query == change.address and entry.stopped_at is None:
                entries[index] = entry.model_copy(update={"stopped_at": now, "stop_offsets": stopped["stop_offsets"]})
                break
    if started is not None:
        entries.append(LedgerEntry(query=change.address, started_at=now, state_serial=state.serial + 1, **started))
    return state.with_ledger(entries)


def addresses(changes: list[Change]) -> list[Address]:
    return [Address.parse(c.address) for c in changes]
