"""Apply walks a frozen plan in order and records state after every change.

An interrupted apply leaves state describing exactly what was done, so planning and applying
again converges. A plan made against another state (lineage or serial) is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dsflow.core.address import Address
from dsflow.core.model import Project
from dsflow.core.plan import Action, Change, Plan
from dsflow.core.resources import project_resources
from dsflow.core.state import DeployedResource, State
from dsflow.errors import DsflowError
from dsflow.executors import Context, run_change
from dsflow.workspace import Workspace


@dataclass
class ApplyResult:
    """What an apply did: changes that succeeded, the one that failed, and those not run."""

    done: list[Change] = field(default_factory=list)
    failed: tuple[Change, DsflowError | Exception] | None = None
    skipped: list[Change] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed is None


def check_plan_is_current(plan: Plan, state: State, project: Project) -> None:
    """Refuse a saved plan if state moved on or the project's resources changed since it was made."""
    if plan.state_lineage != state.lineage or plan.state_serial != state.serial:
        raise DsflowError("DSF-E820", f"the plan was made against state serial {plan.state_serial}, "
                          f"but the state is now at serial {state.serial}", hint="run 'dsflow plan' again")
    current = {str(r.address): r for r in project_resources(project)}
    for change in plan.changes:
        if change.action is Action.DELETE:
            continue
        resource = current.get(change.address)
        if resource is None or resource.data_hash != change.data_hash or resource.metadata_hash != change.metadata_hash:
            raise DsflowError("DSF-E821", f"the project changed since the plan was made ({change.address})",
                              hint="run 'dsflow plan' again")


def apply_plan(plan: Plan, project: Project, workspace: Workspace,
               on_event: Callable[[str, Change], None] = lambda *_: None) -> ApplyResult:
    """Carry out every actionable change in order, saving state after each one."""
    backend = workspace.state_backend()
    result = ApplyResult()
    with backend.lock("apply"):
        state = backend.read()
        check_plan_is_current(plan, state, project)
        state = state.with_lineage().model_copy(update={"project": project.name, "environment": project.environment})
        ctx = Context(project, workspace)
        pending = list(plan.actionable)
        for index, change in enumerate(pending):
            on_event("start", change)
            try:
                state = _apply_one(ctx, change, state)
            except (DsflowError, Exception) as err:  # noqa: BLE001 - reported with the change that failed
                result.failed = (change, err)
                result.skipped = pending[index + 1:]
                on_event("failed", change)
                break
            finally:
                backend.write(state)
            result.done.append(change)
            on_event("done", change)
        backend.write(state)
    return result


def _apply_one(ctx: Context, change: Change, state: State) -> State:
    deployed = state.resources.get(change.address)
    outputs = run_change(ctx, change, deployed)
    if outputs is None:
        return state.without(change.address)
    return state.with_resource(DeployedResource(
        address=change.address, depends_on=change.depends_on, data_hash=change.data_hash or "",
        metadata_hash=change.metadata_hash or "", data=change.after or {}, metadata=change.after_metadata or {},
        outputs=outputs,
    ))


def addresses(changes: list[Change]) -> list[Address]:
    return [Address.parse(c.address) for c in changes]
