"""Apply's side of a blue/green replay (core/bluegreen.py): it walks the phases the plan froze on the change.

The new version runs in a folder and checkpoint of its own, writing its own log, while the deployed version keeps
writing the old one. Once both are past the sources' end offsets taken when the new one was built, the deployed
version is stopped: where it stopped is the cut. The new version is run to exactly the cut (its reads capped: the
`until` of core/engines.py StartAt), so the old log holds exactly what came before the cut and the new log's
readers start right after it. Anything that fails before the deployed version is stopped leaves production as it was
(DSF-E961/E962); a failure after it restarts the deployed version on its checkpoint (DSF-E963). A table's deployment
(the plan's `kept_as`) writes a versioned table and switches in one transaction of renames: engine/bluegreen_tables.py.
Spark's real-time mode cannot stop at given offsets: a new version in it is built and cut in micro-batches and
resumes in real-time mode at the cut (in a checkpoint of its own); a deployed version in it is first restarted in
micro-batches on a new checkpoint, its offsets carried (`_into_micro_batches`, recorded in the state at once), as
a switch out of real-time mode does: what it wrote after its last real-time checkpoint may be written again.
Readers of a lake table move by the tables' positions (a table version, a snapshot) in place of a log's offsets:
engine/bluegreen_lake.py.

A query in a shared Spark application (`runtime.isolation: shared`) builds its new version in a driver of its own
(the application runs the deployed one under the query's name); its deployed version is stopped inside the
application (the other queries go on) and the new one, resumed after the switch, is placed in a shared application
on its own checkpoint. A reader in a shared application is followed, stopped and started again there; a restart of
the deployed version (a failure after the cut) goes back into its application.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.core.address import Address
from dsflow.core.bluegreen import (MICRO_BATCHES, MICRO_BATCHES_NOTE, RUN_NOTE, SWITCH_NOTE, SWITCHED_NOTE, Deployment,
                                   Retirement, compared, in_micro_batches, reached, redirected)
from dsflow.core.categories import Category
from dsflow.core.engines import StartAt, engine
from dsflow.core.plan import Action, Change
from dsflow.core.resources import fingerprint
from dsflow.core.state import DeployedResource, State
from dsflow.errors import DsflowError
from dsflow.engine import failpoints
from dsflow.engine import bluegreen_lake as lake
from dsflow.engine import bluegreen_resume as resume
from dsflow.engine import bluegreen_runs as runs
from dsflow.engine import bluegreen_tables as tables
from dsflow.engine.executors import (LEDGER_STARTED, Context, QueryExecutor, RelationExecutor, driver_identity,
                                     runs_now, start_recorded, write_declared)

Ledger = Callable[[State, Change, dict | None, dict | None], State]


class Failed(DsflowError):
    """A blue/green deployment that stopped before its readers switched; `state` records it (phase failed)."""

    def __init__(self, error: DsflowError, state: State):
        super().__init__(error.code, error.message, hint=error.hint)
        self.state = state


class _Deploying:
    """One deployment under way: the change, the projects before and after the switch, and what it recorded."""

    def __init__(self, ctx: Context, change: Change, current: Callable[[], State]):
        assert change.blue_green is not None  # only changes the plan marked come here
        self.ctx, self.change, self.plan, self.current = ctx, change, change.blue_green, current
        self.name = Address.parse(change.address).name
        self.log: DeployedResource | None = None
        """The new log, once created."""
        self.read_from: dict[str, dict[str, int]] = {}
        """The first offsets the new version read from (what a later replay checks is still held)."""
        self.new_ends: dict[str, dict[str, int]] = {}
        """The new log's end offsets at the cut (a lake table's position), by the name its readers know it by:
        where they start."""
        self.old_ends: dict[str, dict[str, int]] = {}
        """The old log's end offsets (a lake table's position) once the deployed version stopped: what each reader
        reads to before it moves."""
        self.stopped_readers: dict[str, dict[str, Any]] = {}
        """Readers stopped before a catalog swap (a lake table's): what stopping them returned."""
        self.query = next(q for q in ctx.project.queries if q.fqn == self.name)
        sink = Address.parse(self.plan.sink).name
        self.table = tables.is_table(self.plan)
        """A table's deployment: production keeps its name, the new version takes it at the switch."""
        self.new_project = tables.beside(ctx.project, self.plan) if self.table else \
            redirected(ctx.project, {sink: self.plan.new_log})
        self.final_project = ctx.project if self.table else self.new_project
        """What the new version runs in after the switch."""
        self.realtime = self.query.trigger == "realtime"
        """A new version in Spark's real-time mode: built, caught up and run to the cut in micro-batches (that mode
        cannot stop at given offsets), it resumes in real-time mode at the switch, its offsets carried."""
        self.build_project = in_micro_batches(self.new_project, self.name) if self.realtime else self.new_project
        """What the new version runs in until the switch."""
        self.moved = False
        """The deployed version ran in real-time mode: this apply restarted it in micro-batches."""
        now = _now()
        self.record = Deployment(query=change.address, sink=self.plan.sink, version=self.plan.version,
                                 old_log=self.plan.old_log, new_log=self.plan.new_log, phase="build",
                                 started_at=now, updated_at=now, consumers=self.plan.consumers)

    def phase(self, phase: str, **update: Any) -> None:
        self.record = self.record.model_copy(update={"phase": phase, "updated_at": _now(), **update})
        self.ctx.note({"blue_green": {"phase": phase, "version": self.plan.version, "new_log": self.plan.new_log}})

    def failed(self, error: DsflowError, state: State | None = None) -> Failed:
        self.record = self.record.model_copy(update={"phase": "failed", "updated_at": _now(),
                                                     "error": f"{error.code}: {error.message}"})
        return Failed(error, (state or self.current()).with_pending(None).with_deployment(self.record))


def deploy(ctx: Context, change: Change, current: Callable[[], State], ledger: Ledger) -> State:
    """Carry out the blue/green replay `change` (its `blue_green`); the state after the switch. `current`: the state
    as apply holds it now (notes included); `ledger`: apply's recording of a query version stopped and started."""
    prior = change.blue_green.interrupted if change.blue_green is not None else None
    restarted, moved = None, ctx.resumed.get(MICRO_BATCHES_NOTE) or {}
    if prior is not None and prior.action != "resume":  # an apply killed during it: engine/bluegreen_resume.py
        restarted = resume.roll_back(ctx, change.address, current(), restart=True)
        ctx = dataclasses.replace(ctx, resumed={} if not moved else {MICRO_BATCHES_NOTE: moved})
    run = _Deploying(ctx, change, current)
    if run.table or run.plan.relocate:
        try:
            lake.check_readers(ctx.project, run.plan)
            if run.table:
                tables.check(ctx.project, run.plan)
        except DsflowError as err:
            raise run.failed(_untouched(err, run)) from err
    deployed = restarted or current().resources[change.address]
    if deployed.data.get("trigger") == "realtime":  # the plan's first phase (core/bluegreen.py MICRO_BATCHES)
        deployed = _into_micro_batches(run, deployed, ledger)
    elif moved.get("stopped"):  # an apply killed after it: recorded in micro-batches already
        run.record = run.record.model_copy(update={"micro_batches_from": _offsets(moved["stopped"]) or None})
    candidate = runs.Run(ctx.workspace.run_dir / "blue_green" / run.name,
                     ctx.workspace.checkpoint(run.name, f"{change.data_hash or 'v'}-bg{run.plan.version}"),
                     _source_topics(ctx.project, run.query))
    ctx.note(resume.run_note(run.plan, candidate.run_dir, candidate.checkpoint, change.data_hash))
    run.phase("build")
    log = run.log = _create_log(run)
    ctx.note(resume.run_note(run.plan, candidate.run_dir, candidate.checkpoint, change.data_hash, log.outputs))
    built_to = _ends(ctx.project, candidate.topics)
    run.read_from = {} if change.override and change.override.isdigit() else _first(ctx.project, candidate.topics)
    try:
        runs.start(run, run.build_project, candidate, _replay_start(change, built_to))
        run.phase("catch_up", built_to=built_to)
        runs.wait(candidate, built_to, run.plan.catch_up_seconds, "the new version")
        failpoints.pause_at("blue_green.caught_up")
        old = runs.Run.of(deployed.outputs, candidate.topics)
        runs.wait(old, built_to, run.plan.catch_up_seconds, f"the deployed version of {change.address}")
    except DsflowError as err:
        _abandon(run, candidate, log)
        raise run.failed(_untouched(err, run), current().with_resource(deployed)) from err
    state = _switch(run, candidate, deployed, ledger)
    return state.model_copy(update={"serial": max(state.serial, current().serial)})  # notes wrote meanwhile


def _switch(run: _Deploying, candidate: runs.Run, deployed: DeployedResource, ledger: Ledger) -> State:
    """Stop the deployed version (past what the new one caught up to): where it stopped is the cut. Bring the new
    one to it, compare, move the readers (a table: rename it), resume the new version."""
    run.phase("compare")  # noted first: a kill from here on finds the deployed version stopped (rolled back)
    stopped = QueryExecutor()._stop(deployed)
    cut = {t: {str(p): int(o) for p, o in parts.items()} for t, parts in (stopped["stop_offsets"] or {}).items()}
    try:
        if not reached(candidate.committed(), cut):
            runs.bring_to(run, candidate, cut)
        candidate.stop()
        run.phase("compare", cut=cut)
        run.phase("compare", compared=_compared(run))
        failpoints.pause_at("blue_green.compared")
        _drain_readers(run)
        _note_switch(run, stopped)
        run.phase("switch")  # noted first: a kill from here on is rolled forward (engine/bluegreen_forward.py)
        failpoints.pause_at("blue_green.switching")
        if run.table:  # a kill from here on may have renamed
            stop_readers(run)
            swapped(run, stopped, tables.swap(run.ctx.project, run.plan))
    except DsflowError as err:
        candidate.stop()
        state = _restarted(run, deployed)
        raise run.failed(DsflowError("DSF-E963", f"blue/green deployment of {run.change.address} failed before "
                                     f"its readers switched ({err.code}: {err.message}); the deployed version was "
                                     f"restarted on its checkpoint writing {run.plan.old_log}"), state) from err
    state = _switched_readers(run, run.current(), ledger)
    return _resumed(run, candidate, deployed, stopped, state, ledger)


def _compared(run: _Deploying) -> dict[str, int]:
    if run.table:
        return tables.compare(run.ctx.project, run.plan)
    return lake.compare(run.ctx.project, run.new_project, run.plan) if run.plan.relocate else _compare(run)


def _replay_start(change: Change, until: dict[str, dict[str, int]]) -> StartAt:
    """Where the new version starts (a replay: the earliest offset, or the override's timestamp), read up to `until`."""
    if change.override and change.override.isdigit():
        return StartAt(timestamp=int(change.override), until=until)
    return StartAt(position="earliest", until=until)


def _into_micro_batches(run: _Deploying, deployed: DeployedResource, ledger: Ledger) -> DeployedResource:
    """The deployed version, in real-time mode, restarted in micro-batches (its own SQL, from its recorded spec) on a
    new checkpoint, its offsets carried from its last real-time checkpoint: that mode's stop interrupts its running
    batch and cannot come at given offsets, so it could not be cut; what it wrote after that checkpoint may be
    written again (at-least-once), as by a switch out of real-time mode. Recorded in the state at once (its entry as
    if applied in micro-batches, the ledger), so that a kill from here on leaves it so and the next plan deploys
    from micro-batches. The checkpoint and the stop are noted first: an apply killed before the record reuses them
    (a driver it left in the run folder stopped first). Its entry as it runs now."""
    noted = run.ctx.resumed.get(MICRO_BATCHES_NOTE) or {}
    data = {k: v for k, v in deployed.data.items() if k != "trigger"}
    version, run_dir = fingerprint(data), Path(deployed.outputs["run_dir"])
    checkpoint = Path(noted.get("checkpoint") or
                      run.ctx.workspace.checkpoint(run.name, f"{version}-mb{run.plan.version}"))
    run.phase(MICRO_BATCHES)
    run.ctx.note({MICRO_BATCHES_NOTE: {"checkpoint": str(checkpoint)}, RUN_NOTE: None})  # a rolled back one's gone
    stopped = noted.get("stopped") or QueryExecutor()._stop(deployed)
    run.ctx.note({MICRO_BATCHES_NOTE: {"checkpoint": str(checkpoint), "stopped": stopped}})
    process.stop(process.holder(driver_identity(run_dir)), driver_identity(run_dir))
    carried = _offsets(stopped)
    try:
        started = engine().start_in_micro_batches(run.ctx.project, deployed, version, checkpoint,
                                                  StartAt(offsets=carried))
    except DsflowError as err:  # raised before its spec was written over: started again as it ran
        raise run.failed(DsflowError("DSF-E963", f"the deployed version of {run.change.address} could not be "
                                     f"restarted in micro-batches ({err.code}: {err.message}); it was started again "
                                     "in real-time mode on its checkpoint, nothing built"),
                         _restarted(run, deployed)) from err
    entry = deployed.model_copy(update={"data": data, "data_hash": version, "outputs": {
        **deployed.outputs, "pid": started["pid"], "version": version, "checkpoint": str(checkpoint),
        "topics": started["topics"]}})
    write_declared(run_dir, _as_change(entry))  # what `dsflow import` takes a running driver back as
    opened = {"version": version, "category": Category.CARRY_OFFSETS.value, "checkpoint": str(checkpoint),
              "start_offsets": carried or None, "source_logs": deployed.outputs.get("logs") or None}
    run.ctx.record(ledger(run.current(), _as_change(entry), stopped, opened).with_resource(entry))
    run.moved = True
    run.record = run.record.model_copy(update={"micro_batches_from": carried or None})
    failpoints.pause_at("blue_green.micro_batches")
    return entry


def _offsets(stopped: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Where a stopped version's checkpoint ended, by log (what `QueryExecutor._stop` returned)."""
    return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in (stopped.get("stop_offsets") or {}).items()}


def _create_log(run: _Deploying) -> DeployedResource:
    """The new version's own log, sized as the old one."""
    sink = run.current().resources[run.plan.sink]
    resumed = {k: v for k, v in run.ctx.resumed.items()
               if k in ("topic_existed", "table_existed")}  # an interrupted attempt's
    ctx = dataclasses.replace(run.ctx, project=run.new_project, resumed=resumed)
    made = Change(address=run.plan.sink, action=Action.CREATE, reason="blue/green", after=sink.data)
    outputs = RelationExecutor().create(ctx, made)
    return DeployedResource(address=run.plan.sink, data_hash=sink.data_hash, metadata_hash=sink.metadata_hash,
                            data=sink.data, metadata=sink.metadata, outputs=outputs)


def _compare(run: _Deploying) -> dict[str, int]:
    """The two logs' records at the cut, compared as (key, value) multisets."""
    from dsflow.engine import topics

    sink = run.new_project.relation(Address.parse(run.plan.sink).name)
    assert sink is not None  # the plan's sink is the project's relation
    store = run.ctx.project.store(sink.store)
    assert store is not None
    found = []
    for log in (run.plan.old_log, run.plan.new_log):
        held = _held(run.new_project if log == run.plan.new_log else run.ctx.project, log)
        target = topics.Target(store.type, log, store.bootstrap_servers, dict(store.properties), None, store.name)
        found.append([(r.get("key"), r.get("value")) for r in topics.records(target, True, held, 10.0, raw=True)]
                     if held else [])
    return compared(found[0], found[1])


def _drain_readers(run: _Deploying) -> None:
    """Wait until every reader read the old log (a lake table) to its end (the deployed version is stopped: it ends
    there)."""
    if not run.plan.readers:
        return
    on_lake = lake.moves_readers(run.ctx.project, run.plan)
    if not run.old_ends:
        run.old_ends = lake.ends(run.ctx.project, run.ctx.project, run.plan) if on_lake else \
            _ends(run.ctx.project, [run.plan.old_log])
    for reader in run.plan.readers:
        entry = run.current().resources.get(reader)
        if entry is None:
            continue
        runs.wait(runs.Run.of(entry.outputs), run.old_ends, run.plan.catch_up_seconds,
              f"reader {reader} (reading {run.plan.old_log} to its end)", lake.reached if on_lake else reached)


def _note_switch(run: _Deploying, stopped: dict[str, Any]) -> None:
    """What finishing the switch needs, noted before anything in it moves (core/bluegreen.py SWITCH_NOTE)."""
    if run.new_ends or not run.plan.readers:  # noted again after a swap: the positions of before the renames
        pass
    elif lake.moves_readers(run.ctx.project, run.plan):
        run.new_ends = lake.ends(run.new_project, run.final_project, run.plan)
    elif not (run.table or run.plan.relocate):
        run.new_ends = _ends(run.new_project, [run.plan.new_log])
    run.ctx.note({SWITCH_NOTE: {"record": run.record.model_dump(mode="json"), "stopped": stopped,
                                "new_ends": run.new_ends, "old_ends": run.old_ends, "read_from": run.read_from}})


def stop_readers(run: _Deploying, done: Mapping[str, Any] | None = None) -> None:
    """Before a catalog swap: each reader not switched yet (`done`) stopped, having read the old table to its end,
    so that no running reader finds the new table's snapshots under the name it reads."""
    for reader in run.plan.readers:
        entry = run.current().resources.get(reader)
        if entry is not None and reader not in (done or {}) and reader not in run.stopped_readers:
            run.stopped_readers[reader] = QueryExecutor()._stop(entry)


def swapped(run: _Deploying, stopped: dict[str, Any], views: list[str]) -> None:
    """A table's transaction of renames committed: the views it defined again recorded, and noted with the rest of
    the switch (a roll forward after a kill from here on finds them there)."""
    run.phase("switch", views=views)
    _note_switch(run, stopped)


def _switched_readers(run: _Deploying, state: State, ledger: Ledger,
                      done: Mapping[str, dict[str, Any]] | None = None) -> State:
    """Each reader stopped and started in a new checkpoint on the new log at its end (the cut), its other sources
    where it stopped; each noted once started (SWITCHED_NOTE). `done`: readers an interrupted switch noted as
    switched already (engine/bluegreen_forward.py): recorded as they run, restarted there if their driver ended."""
    if not run.plan.readers:
        return state
    ctx = dataclasses.replace(run.ctx, project=run.final_project, resumed={})
    noted = dict(done or {})
    for reader in run.plan.readers:
        entry = state.resources.get(reader)
        if entry is None:
            continue
        first = not noted
        noted[reader] = _still_switched(ctx, entry, noted[reader]) if reader in noted else \
            _switch_reader(run, ctx, entry)
        run.ctx.note({SWITCHED_NOTE: noted})
        if first:
            failpoints.pause_at("blue_green.switched_one")
        state = ledger(state, _as_change(entry), noted[reader]["stopped"], noted[reader]["started"])
        state = state.with_resource(entry.model_copy(update={"outputs": noted[reader]["outputs"]}))
    run.record = run.record.model_copy(update={"switched": {r: n["offsets"] for r, n in noted.items()}})
    return state


def _switch_reader(run: _Deploying, ctx: Context, entry: DeployedResource) -> dict[str, Any]:
    """One reader moved to the new log at the cut (a lake table: after its position there): its new outputs, ledger
    entries and start offsets."""
    stopped = run.stopped_readers.get(entry.address) or QueryExecutor()._stop(entry)
    carried = {t: {str(p): int(o) for p, o in parts.items()}
               for t, parts in (stopped["stop_offsets"] or {}).items() if t != run.plan.old_log}
    start = StartAt(offsets={**carried, **run.new_ends})
    checkpoint = ctx.workspace.checkpoint(Address.parse(entry.address).name, f"{entry.data_hash}-bg{run.plan.version}")
    outputs = QueryExecutor()._start(ctx, _as_change(entry), checkpoint, start, Category.CARRY_OFFSETS, None,
                                     entry.outputs.get("read_from") or {})
    started = outputs.pop(LEDGER_STARTED)
    return {"offsets": start.offsets, "outputs": outputs, "stopped": stopped, "started": {**started,
                                                                                         "category": "blue_green"}}


def _still_switched(ctx: Context, entry: DeployedResource, noted: dict[str, Any]) -> dict[str, Any]:
    """A reader switched before the kill, as it runs now (a driver an earlier roll forward started counts): started
    again on its new checkpoint if its driver ended, or its shared application no longer runs it."""
    outputs = noted["outputs"]
    found = runs_now(ctx.workspace, outputs) or \
        start_recorded(ctx.project, ctx.workspace, entry.model_copy(update={"outputs": outputs}))
    return {**noted, "outputs": {**outputs, **found}}


def _resumed(run: _Deploying, candidate: runs.Run, deployed: DeployedResource, stopped: dict[str, Any], state: State,
             ledger: Ledger) -> State:
    """The new version resumed from its checkpoint in the query's own folder; the relation on its new log; the old
    log and checkpoint kept."""
    ctx = dataclasses.replace(run.ctx, project=run.final_project, resumed={})
    checkpoint, start = candidate.checkpoint, StartAt()
    if run.realtime:  # another kind of checkpoint: a new one at the cut, where the micro-batches stopped
        checkpoint = candidate.checkpoint.with_name(f"{candidate.checkpoint.name}-rt")
        start = StartAt(offsets=candidate.committed() or run.record.cut or {})
    outputs = QueryExecutor()._start(ctx, run.change, checkpoint, start, Category.REPLAY, None, run.read_from)
    if checkpoint != candidate.checkpoint:
        shutil.rmtree(candidate.checkpoint, ignore_errors=True)  # a roll forward starts at the recorded cut
    failpoints.pause_at("blue_green.resumed")
    state = ledger(state, run.change, stopped, outputs.pop(LEDGER_STARTED))
    state = state.with_resource(DeployedResource(
        address=run.change.address, depends_on=run.change.depends_on, data_hash=run.change.data_hash or "",
        metadata_hash=run.change.metadata_hash or "", data=run.change.after or {},
        metadata=run.change.after_metadata or {}, outputs=outputs))
    sink = state.resources[run.plan.sink]
    assert run.log is not None  # created in the build phase
    switched = {"blue_green": {"version": run.plan.version, "previous": run.plan.kept_as or run.plan.old_log}}
    made = {"created_by_dsflow": bool(run.log.outputs.get("created_by_dsflow", True))} if run.table else \
        run.log.outputs  # a table keeps its production place; the new one is dsflow's if it made it
    made = {**made, "topic": run.plan.new_log} if run.plan.relocate else made  # the relation's path moves
    state = state.with_resource(sink.model_copy(update={"outputs": {**sink.outputs, **made, **switched}}))
    kept = {"log": run.plan.old_log, "checkpoint": str(deployed.outputs.get("checkpoint", "")),
            "store": str(sink.data.get("store", "")), "kind": str(sink.data.get("kind", "")),
            "created_by_dsflow": str(bool(sink.outputs.get("created_by_dsflow", True))).lower()}
    if run.table:
        kept = {**tables.kept(run.ctx.project, run.plan, sink.outputs), "checkpoint": kept["checkpoint"]}
    elif run.plan.relocate:
        kept |= lake.kept(sink.outputs)
    run.phase("keep_old", kept=kept)
    shutil.rmtree(candidate.run_dir, ignore_errors=True)
    return state.with_deployment(run.record)


def retire(ctx: Context, retired: list[Retirement], state: State) -> State:
    """Each kept old version removed: its log deleted if dsflow created it, its checkpoint folder removed."""
    for gone in retired:
        record = state.deployments.get(gone.query)
        kept = record.kept if record is not None else {}
        if kept.get("table"):
            tables.retire(ctx.project, kept)
        elif kept.get("created_by_dsflow") == "true":
            outputs = {"topic": gone.log, "store": kept.get("store", ""), "created_by_dsflow": True,
                       **({"table": kept["location"], "format": kept["format"]} if kept.get("location") else {})}
            RelationExecutor().delete(ctx, DeployedResource(address=gone.sink, data_hash="", metadata_hash="",
                                                            data={"kind": kept.get("kind", "stream")},
                                                            outputs=outputs))
        if gone.checkpoint:
            shutil.rmtree(gone.checkpoint, ignore_errors=True)
        if record is not None:
            state = state.with_deployment(record.model_copy(update={"kept": {}, "updated_at": _now()}))
    return state


def _restarted(run: _Deploying, deployed: DeployedResource) -> State:
    """The deployed version (and readers stopped before a catalog swap) started again on its recorded spec and
    checkpoint, in its own driver or its shared application (production restored)."""
    state = run.current()
    for entry in [deployed] + [state.resources[r] for r in run.stopped_readers if r in state.resources]:
        started = start_recorded(run.ctx.project, run.ctx.workspace, entry)
        state = state.with_resource(entry.model_copy(update={"outputs": {**entry.outputs, **started}}))
    return state


def _abandon(run: _Deploying, candidate: runs.Run, log: DeployedResource) -> None:
    """The new version stopped, its log deleted and its checkpoint removed: nothing of it is left running."""
    candidate.stop()
    ctx = dataclasses.replace(run.ctx, project=run.new_project, resumed={})
    try:
        if run.table:  # by its own name: the recorded data still names the production table
            tables.drop_new(run.ctx.project, run.plan, bool(log.outputs.get("created_by_dsflow")))
        else:
            RelationExecutor().delete(ctx, log)
    except DsflowError:
        pass  # a log left behind is named by the failed deployment; the next one takes another version
    shutil.rmtree(candidate.checkpoint, ignore_errors=True)
    shutil.rmtree(candidate.run_dir, ignore_errors=True)


def _untouched(err: DsflowError, run: _Deploying) -> DsflowError:
    moved = " (in micro-batches since this apply restarted it out of real-time mode)" if run.moved else ""
    return DsflowError(err.code, f"{err.message}; production untouched: {run.change.address} still runs its deployed "
                       f"version{moved} writing {run.plan.old_log}, and its readers still read it", hint=err.hint)


def _as_change(entry: DeployedResource) -> Change:
    return Change(address=entry.address, action=Action.UPDATE, reason="blue/green switch", after=entry.data,
                  after_metadata=entry.metadata, data_hash=entry.data_hash, metadata_hash=entry.metadata_hash,
                  depends_on=entry.depends_on)


def _source_topics(project: Any, query: Any) -> list[str]:
    found = []
    for source in query.sources:
        relation = project.relation(source.relation)
        assert relation is not None  # a loaded project's sources name its relations
        found.append(relation.topic)
    return found


def _ends(project: Any, logs: list[str]) -> dict[str, dict[str, int]]:
    """The logs' end offsets now, from their store; DSF-E962 when a store cannot say them."""
    from dsflow.adapters.objects import end_offsets

    found = end_offsets(project, logs)
    if found is None:
        raise DsflowError("DSF-E962", f"the end offsets of {', '.join(logs)} could not be read")
    return {log: {str(p): int(o) for p, o in parts.items()} for log, parts in found.items()}


def _held(project: Any, log: str) -> int:
    from dsflow.adapters.objects import positions

    found = (positions(project, [log]) or {}).get(log, {})
    return sum(max(0, end - first) for first, end in found.values())


def _first(project: Any, logs: list[str]) -> dict[str, dict[str, int]]:
    from dsflow.adapters.objects import positions

    return {log: {str(p): first for p, (first, _) in parts.items()}
            for log, parts in (positions(project, logs) or {}).items()}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def status_of(state: State, address: str) -> dict[str, Any] | None:
    """Where the blue/green deployment of a query stands: an apply under way (its pending note), else the last one
    recorded."""
    pending = state.pending
    if pending is not None and pending.address == address and pending.intent.get("blue_green"):
        return {**pending.intent["blue_green"], "under_way": True}
    record = state.deployments.get(address)
    if record is None:
        return None
    return {"phase": record.phase, "version": record.version, "new_log": record.new_log, "old_log": record.old_log,
            **({"kept": record.kept["log"]} if record.kept.get("table") else {}),
            **({"micro_batches_from": record.micro_batches_from} if record.micro_batches_from else {}),
            **({"error": record.error} if record.error else {})}
