"""Endpoints that act: plan the working tree, apply a saved plan, query materialized views."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from dsflow.engine import eventlog, operations
from dsflow.core.access import Privilege, acts
from dsflow.core.secrets import scrub
from dsflow.server.context import API, ApiError, Caller, Server, caller, server_of

router = APIRouter(prefix=API)


class PlanRequest(BaseModel):
    """What to plan: the working tree's changes, or the removal of everything deployed."""

    model_config = ConfigDict(extra="forbid")

    destroy: bool = Field(False, description="plan the removal of everything deployed")
    refresh: bool = Field(True, description="look for drift on the live systems first")


class ApplyRequest(BaseModel):
    """A saved plan (`dsflow plan --json` / POST /api/v1/plan's `plan`) and the data loss acknowledged."""

    model_config = ConfigDict(extra="forbid")

    plan: dict[str, Any] = Field(description="the plan JSON, as saved")
    allow_data_loss: bool = Field(False, description="let every change delete the records it destroys")
    allow_destroy: list[str] = Field(default_factory=list, max_length=1000,
                                     description="addresses whose destroyed records are acknowledged")
    start_runtime: bool = Field(True, description="start the runtime supervisor after applying (unless "
                                                  "DSFLOW_RUNTIME=off on the server)")


class ViewQuery(BaseModel):
    """One SELECT over materialized views."""

    model_config = ConfigDict(extra="forbid")

    sql: str = Field(min_length=1, max_length=100_000)


def authorization(me: Caller, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Per change of the plan (no-ops and drift refreshes left out: core/access.py `acts`): whether the caller may
    make it, and if not, what it lacks."""
    refused = {(r.address, r.action): r for r in me.access.authorize_plan(me.user, plan)}
    out = []
    for change in plan.get("changes", ()):
        if not acts(change):
            continue
        refusal = refused.get((change["address"], change["action"]))
        missing = refusal.decision.missing if refusal else ()
        out.append({"address": change["address"], "action": change["action"], "allowed": refusal is None,
                    "missing": [{"privilege": p.value, "on": on} for p, on in missing],
                    "message": refusal.decision.message if refusal else ""})
    return out


@router.post("/plan", tags=["plan"])
def plan(body: PlanRequest | None = None, me: Caller = Depends(caller),
         server: Server = Depends(server_of)) -> dict[str, Any]:
    """The plan of the project as checked out on the server (as `dsflow plan --json`), and for each change whether
    the caller may apply it."""
    body = body or PlanRequest()
    loaded = server.reload()
    data = operations.plan(loaded, destroy=body.destroy, do_refresh=body.refresh).model_dump(mode="json")
    return {"plan": data, "authorization": authorization(me, data)}


@router.post("/apply", tags=["plan"], responses={403: {"description": "the caller may not make a change"},
                                                 409: {"description": "the plan is stale or destroys records"}})
def apply(body: ApplyRequest, me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """Apply a saved plan with the CLI's checks (lineage, serial, changed files, data loss) after checking that the
    caller may make every change in it (403 naming each refused change)."""
    from dsflow.core.plan_schema import plan_from_json
    from dsflow.core.safety import Allowance, check_data_loss

    the_plan = plan_from_json(json.dumps(body.plan), "the plan")
    refused = me.access.authorize_plan(me.user, the_plan.model_dump(mode="json"))
    if refused:
        raise ApiError(403, "DSF-E332", "nothing was applied: the plan has changes the caller may not make: "
                       + "; ".join(f"{r.action} {r.address}: {r.decision.message}" for r in refused),
                       hint="ask for the privileges named, or remove those changes from the project")
    loaded = server.reload()
    if not the_plan.has_changes:
        operations.migrate_state(loaded)
        return {"ok": True, "done": [], "failed": None, "skipped": []}
    allowance = Allowance(everything=body.allow_data_loss, addresses=frozenset(body.allow_destroy))
    check_data_loss(the_plan, allowance)
    result = operations.apply(loaded, the_plan, allowance=allowance, actor=eventlog.api_actor(me.user))
    failed = None
    if result.failed:
        change, error = result.failed
        failed = {"address": change.address, "action": change.action.value, "error": scrub(str(error))}
    elif body.start_runtime:
        _start_runtime(loaded, server)
    return {"ok": result.ok, "done": [{"address": c.address, "action": c.action.value} for c in result.done],
            "failed": failed, "skipped": [{"address": c.address, "action": c.action.value} for c in result.skipped]}


def _start_runtime(loaded: operations.Loaded, server: Server) -> None:
    """As `dsflow apply` does: the runtime supervisor keeps the applied queries up (unless DSFLOW_RUNTIME=off)."""
    if os.environ.get("DSFLOW_RUNTIME", "").lower() == "off":
        return
    from dsflow.errors import DsflowError
    from dsflow.runtime.control import ensure_started, info, look_now

    try:
        started = ensure_started(loaded, server.options)
        if (started is None or not started[1]) and info(loaded) is not None:
            look_now(loaded, "server apply")  # a running supervisor looks at the new state at once
    except DsflowError:
        pass  # the apply succeeded; `dsflow runtime status` says why nothing watches the queries


def json_value(value: Any) -> Any:
    """A view's cell as JSON: dates as ISO text, decimals as numbers, bytes as text."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, float) and value != value:
        return None
    return value


@router.post("/views/query", tags=["views"])
def view_query(body: ViewQuery, me: Caller = Depends(caller), server: Server = Depends(server_of)) -> dict[str, Any]:
    """Run one SELECT over materialized views (SELECT needed on every view it reads), or over the system tables
    sys.events, sys.queries and sys.relations (rows of the objects the caller may see)."""
    from dsflow.engine import adhoc

    system = adhoc.system_select(body.sql)
    if system is not None:
        from dsflow.adapters.sqlite import systables

        backend = server.loaded().workspace.state_backend()
        columns, rows = systables.query(backend, system, lambda address: me.access.can_see(me.user, address))
        return {"columns": list(columns), "rows": [[json_value(v) for v in row] for row in rows]}
    project = server.loaded().project
    for relation in adhoc.relations_read(project, body.sql):
        me.require(Privilege.SELECT, f"relation.{relation.fqn}")
    columns, rows = adhoc.view_query(project, body.sql)
    return {"columns": list(columns), "rows": [[json_value(v) for v in row] for row in rows]}
