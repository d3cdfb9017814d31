"""The roll forward of a blue/green deployment an apply was killed in during its switch (core/bluegreen.py
`interrupted`, action 'roll forward'): the switch finished from what it noted before anything moved.

Before its switch a deployment notes (SWITCH_NOTE) its record so far (cut, compare), what stopping the deployed
version returned, the new log's end offsets at the cut and the offsets the new version first read; once each
reader has started on the new log, that reader's new outputs (SWITCHED_NOTE). The next apply then:

    a log      readers not noted as switched are switched as the switch does (read to the old log's end, which the
               stopped deployed version no longer writes, then restarted on the new log at the noted cut); readers
               noted are recorded as they run, started again on their new checkpoint if their driver ended
    a table    the catalog says whether the transaction of renames committed (the kept name and not the new one
               exist): committed, nothing is renamed again; not committed, the renames are done now
    a path     nothing moved before the state write that records the switch
    readers    of a lake table, as of a log, from the tables' positions noted (`old_ends`, `new_ends`); a swapped
               table's readers not switched yet are stopped before the renames are done now

and then the new version resumes from its checkpoint writing the production relation (a driver a killed apply had
started there already is stopped first: it runs in the query's own folder), and the deployment is recorded in
`keep_old`, as after a switch that was not interrupted. A table's swap is noted again once it committed, with the
views it re-pointed, so they are recorded whichever apply renamed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from dsflow.core.bluegreen import RUN_NOTE, SWITCH_NOTE, SWITCHED_NOTE, Deployment
from dsflow.core.plan import Change
from dsflow.core.state import DeployedResource, State
from dsflow.engine import bluegreen as bg
from dsflow.engine import bluegreen_runs as runs
from dsflow.engine import bluegreen_tables as tables
from dsflow.engine.executors import Context


def rolls_forward(change: Change) -> bool:
    """The plan marked this blue/green change as the roll forward of a switch an apply was killed in."""
    prior = change.blue_green.interrupted if change.blue_green is not None else None
    return prior is not None and prior.action == "roll forward"


def finish(ctx: Context, change: Change, current: Callable[[], State], ledger: bg.Ledger) -> State:
    """The interrupted switch of `change` finished; the state after it (as deploy() returns it)."""
    noted, switch = ctx.resumed[RUN_NOTE], ctx.resumed[SWITCH_NOTE]
    done = dict(ctx.resumed.get(SWITCHED_NOTE) or {})
    run = bg._Deploying(dataclasses.replace(ctx, resumed={}), change, current)
    run.record = Deployment.model_validate(switch["record"])
    run.read_from, run.new_ends = switch.get("read_from") or {}, switch.get("new_ends") or {}
    run.old_ends = switch.get("old_ends") or {}
    sink = current().resources[run.plan.sink]
    run.log = DeployedResource(address=run.plan.sink, data_hash=sink.data_hash, metadata_hash=sink.metadata_hash,
                               data=sink.data, metadata=sink.metadata, outputs=noted.get("log") or {})
    candidate = runs.Run(Path(noted["run_dir"]), Path(noted["checkpoint"]),
                        bg._source_topics(run.ctx.project, run.query))
    deployed = current().resources[change.address]
    run.phase("switch")
    if run.table and not tables.swapped(run.ctx.project, run.plan):
        bg.stop_readers(run, done)
        bg.swapped(run, switch["stopped"], tables.swap(run.ctx.project, run.plan))
    bg._drain_readers(run)
    state = bg._switched_readers(run, current(), ledger, done)
    state = bg._resumed(run, candidate, deployed, switch["stopped"], state, ledger)
    return state.model_copy(update={"serial": max(state.serial, current().serial)})
