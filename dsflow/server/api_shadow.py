"""Shadow runs over the API: the diff of a query's shadow with its live output (`dsflow shadow diff --json`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from dsflow.core.access import Privilege
from dsflow.core.shadow import ShadowDiff
from dsflow.server.context import API, ApiError, Caller, Server, caller, server_of

router = APIRouter(prefix=API)


@router.get("/queries/{name}/shadow/diff", tags=["queries"], response_model=ShadowDiff,
            responses={404: {"description": "no such deployed query, or it has no shadow run (DSF-E943)"},
                       400: {"description": "no aligned cut within `wait` seconds (DSF-E944)"}})
def shadow_diff(name: str, wait: float = Query(10.0, ge=0, le=60), me: Caller = Depends(caller),
                server: Server = Depends(server_of)) -> dict[str, Any]:
    """The shadow's output against the live query's over the input both have read: rows only in one side, keys
    whose values differ, counts. Its rows are the query's sink rows: SELECT on the sink relation, as reading it."""
    from dsflow.engine import shadow

    loaded = server.loaded()
    address = shadow.resolve(loaded.project, me.state, name)
    deployed = me.state.resources.get(address)
    run = me.state.shadows.get(address)
    if deployed is None or not me.access.can_see(me.user, address):
        raise ApiError(404, "DSF-E329", f"no deployed query {address}", hint="see GET /api/v1/queries")
    sink = f"relation.{deployed.data.get('sink')}" if deployed.data.get("sink") else None
    me.require(Privilege.SELECT, sink or address)
    if run is None:
        raise ApiError(404, "DSF-E943", f"{address} has no shadow run",
                       hint=f"start one with 'dsflow shadow start {address}'")
    return shadow.diff(loaded.project, loaded.workspace, address, wait).model_dump(mode="json")
