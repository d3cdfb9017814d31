"""What the next apply does with a blue/green deployment an apply was killed in (core/bluegreen.py `interrupted`).

The deployment notes in the change's pending intent what it has made, before it makes it: its plan, the new
version's run folder, checkpoint and SQL hash (`blue_green_run`), the log or table it created (`log`), and its phase
(`blue_green`). The plan made after the kill says which of these happens:

    resume     the same blue/green change (same SQL), killed in build or catch up: deploy() goes on with the same
               version; the new version's driver left running is stopped (SIGTERM, its batch finished) and started
               again on its own checkpoint and log, so what it wrote is neither lost nor written again
    roll fwd   killed in the switch of the same change: the switch is finished (engine/bluegreen_forward.py)
    refuse     killed in the switch, but the change planned now is another (its SQL changed, or it is not a replay
               any more): readers may have moved, so apply refuses the change (DSF-E966) and touches nothing
    roll back  anything else: the new version's driver stopped, its log or table deleted (if this deployment
               created it), its checkpoint and run folder removed; killed past the catch up (the deployed version
               stopped at the cut), the deployed version started again on its checkpoint (in its own driver or
               its shared application). The change is then
               carried out as planned (a blue/green one under a version not taken before).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.core.address import Address
from dsflow.core.bluegreen import BLUE_GREEN, RESUMABLE, RUN_NOTE, BlueGreen, redirected
from dsflow.core.state import DeployedResource, State
from dsflow.engine import bluegreen_tables as tables
from dsflow.engine.executors import Context, RelationExecutor, driver_identity, runs_now, start_recorded
from dsflow.errors import DsflowError


def run_note(plan: BlueGreen, run_dir: Path, checkpoint: Path, data_hash: str | None,
             log: dict[str, Any] | None = None) -> dict[str, Any]:
    """The note a deployment makes before it builds anything (and again once its log exists)."""
    return {RUN_NOTE: {"plan": plan.model_dump(mode="json"), "run_dir": str(run_dir), "checkpoint": str(checkpoint),
                       "data_hash": data_hash, "log": log}}


def roll_back(ctx: Context, address: str, state: State, restart: bool) -> DeployedResource | None:
    """The interrupted deployment's new version removed; with `restart`, the deployed version started again if it
    was stopped at the cut. The deployed entry as it runs now (its new PID), or None if unchanged."""
    run, noted = ctx.resumed.get(RUN_NOTE), ctx.resumed.get(BLUE_GREEN) or {}
    if not run:
        return None
    plan = BlueGreen.model_validate(run["plan"])
    if noted.get("phase") == "switch":
        raise DsflowError("DSF-E966", f"an apply was killed during the switch of the blue/green deployment "
                          f"v{plan.version} of {address}: its readers may have moved to {plan.new_log} already, and "
                          "the change planned now is not the one it was switching, so it is neither rolled forward "
                          "nor rolled back; nothing was touched",
                          hint=f"apply the deployment's SQL again to roll it forward (or --exclude {address} for the "
                               "rest); else finish the switch by hand (docs/plan.md, 'An apply killed during a "
                               "deployment')")
    run_dir = Path(run["run_dir"])
    process.stop(process.holder(driver_identity(run_dir)), driver_identity(run_dir))
    if run.get("log"):
        _delete_log(ctx, plan, state, run["log"])
    shutil.rmtree(run["checkpoint"], ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    deployed = state.resources.get(address)
    if not restart or deployed is None or noted.get("phase") in RESUMABLE:
        return None
    if runs_now(ctx.workspace, deployed.outputs) is not None:
        return None
    started = start_recorded(ctx.project, ctx.workspace, deployed)  # its own driver or its shared application
    return deployed.model_copy(update={"outputs": {**deployed.outputs, **started}})


def _delete_log(ctx: Context, plan: BlueGreen, state: State, outputs: dict[str, Any]) -> None:
    if plan.kept_as is not None:  # a swapped table's: by its own name
        tables.drop_new(ctx.project, plan, bool(outputs.get("created_by_dsflow")))
        return
    sink = state.resources.get(plan.sink)
    moved = redirected(ctx.project, {Address.parse(plan.sink).name: plan.new_log})
    RelationExecutor().delete(dataclasses.replace(ctx, project=moved, resumed={}), DeployedResource(
        address=plan.sink, data_hash="", metadata_hash="", data=sink.data if sink is not None else {},
        outputs=outputs))
