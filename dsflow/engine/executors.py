"""What apply does for each kind of resource: one executor per kind, registered in one dict.

An executor turns a planned change into effects on real systems and returns the outputs to
record in state (a PID, a checkpoint, whether dsflow created a topic). It never re-decides.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from dsflow.adapters import process
from dsflow.core.address import Address, Kind
from dsflow.core.categories import STOP_GRACE_SECONDS, Category
from dsflow.core.engines import Handoff, StartAt, engine
from dsflow.core.model import Project
from dsflow.core.plan import Action, Change
from dsflow.core.resources import access_only
from dsflow.core.safety import check_same_logs
from dsflow.core.state import DeployedResource
from dsflow.errors import DsflowError
from dsflow.engine.workspace import Workspace

LEDGER_STARTED = "_ledger_started"
LEDGER_STOPPED = "_ledger_stopped"
GONE = "_gone"
DATAGEN_MODULE = "dsflow.datagen"


def query_identity(outputs: dict[str, Any]) -> process.Identity:
    """The identity of the process running a deployed query (adapters/process.py), as its engine knows it: its
    shared application's host, or its own driver (a cold one or a standby that took it over)."""
    return engine().identity(outputs)


def driver_identity(run_dir: str | Path | None) -> process.Identity:
    """The identity of the driver process of a query's run folder (its engine's)."""
    return engine().driver_identity(run_dir)


def datagen_identity(run_dir: str | Path | None) -> process.Identity:
    """The identity of a generator's process, kept in its run folder beside its progress file."""
    folder = Path(run_dir) if run_dir else None
    legacy = (DATAGEN_MODULE, str(folder / "progress.json")) if folder is not None else (DATAGEN_MODULE,)
    return process.Identity(folder, "datagen", legacy)


@dataclass(frozen=True)
class Context:
    """What executors may use: the project, its paths, and a way to note intent before acting."""

    project: Project
    workspace: Workspace
    note: Callable[[dict[str, Any]], None] = lambda _: None
    resumed: dict[str, Any] = field(default_factory=dict)
    """What an earlier, interrupted attempt at the same change noted."""
    record: Callable[[Any], None] = lambda _: None
    """Writes a state (core/state.py State) a step of the change reached, the change still pending: a blue/green
    deployment's restart of its deployed version in micro-batches (engine/bluegreen.py), which a kill must find
    recorded."""


class Executor(Protocol):
    def create(self, ctx: Context, change: Change) -> dict[str, Any]: ...

    def update(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]: ...

    def delete(self, ctx: Context, deployed: DeployedResource) -> dict[str, Any] | None: ...


class RecordOnly:
    """Logical objects (stores, namespaces, bindings): recorded in state, nothing to touch yet."""

    def create(self, ctx: Context, change: Change) -> dict[str, Any]:
        return {}

    def update(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        return dict(deployed.outputs)

    def delete(self, ctx: Context, deployed: DeployedResource) -> None:
        return None


class PushedDown:
    """Resources a store kind carries out itself where it enforces them (its `objects` facet's executor named
    `facet`, adapters/objects.py); recorded only where no kind does."""

    facet = ""

    def _executor(self) -> Executor:
        from dsflow.adapters.objects import pushed_down

        return pushed_down(self.facet) or RecordOnly()

    def create(self, ctx: Context, change: Change) -> dict[str, Any]:
        return self._executor().create(ctx, change)

    def update(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        return self._executor().update(ctx, change, deployed)

    def replace(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        executor = self._executor()
        if hasattr(executor, "replace"):
            return executor.replace(ctx, change, deployed)
        executor.delete(ctx, deployed)
        return executor.create(ctx, change)

    def delete(self, ctx: Context, deployed: DeployedResource) -> dict[str, Any] | None:
        return self._executor().delete(ctx, deployed)


class GrantExecutor(PushedDown):
    """A grant: pushed down to the store that keeps the view it is on, where that store kind enforces grants."""

    facet = "grants"


class RoleExecutor(PushedDown):
    """A role: mapped to the store's roles where grants are pushed down."""

    facet = "roles"


class BindingExecutor(PushedDown):
    """A user binding: a login of the user in the store, member of its roles', where grants are pushed down."""

    facet = "logins"


class RelationExecutor:
    """Relations by their store's kind: the executor its `objects` facet gives (a topic, a stream, a table, a
    slot, a view's table in a store); a view without a store is kept by the local views' `objects` facet
    (core/stores.py LOCAL_VIEWS: a snapshot table in SQLite)."""

    def create(self, ctx: Context, change: Change) -> dict[str, Any]:
        return self._pick(ctx, change.after).create(ctx, change)

    def update(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        """In place; columns evolved in place add the columns before to `column_history` (for the _TRANSITIVE
        rules of core/evolution.py)."""
        outputs = self._pick(ctx, change.after, deployed.outputs).update(ctx, change, deployed)
        history = list(deployed.outputs.get("column_history") or [])
        if change.before and change.after and change.before.get("columns") != change.after.get("columns"):
            history.append(change.before.get("columns"))
        return outputs | ({"column_history": history} if history else {})

    def delete(self, ctx: Context, deployed: DeployedResource) -> dict[str, Any] | None:
        return self._pick(None, deployed.data, deployed.outputs).delete(ctx, deployed)

    def _pick(self, ctx: Context | None, data: dict[str, Any] | None,
              outputs: dict[str, Any] | None = None) -> Executor:
        """Asked of the store kinds (adapters/objects.py) with the store's type in the project (None when
        deleting: the store may be gone, and what was recorded decides)."""
        from dsflow.adapters.objects import executor, local_views

        store = ctx.project.store((data or {}).get("store") or "") if ctx is not None else None
        found = executor(data, outputs, store.type if store is not None else None)
        if found is None and (data or {}).get("kind") == "materialized_view":
            return local_views()
        if found is None:
            raise DsflowError("DSF-E810", f"no store kind carries out relations of kind {(data or {}).get('kind')} "
                              f"in store '{(data or {}).get('store')}'")
        return found


class QueryExecutor:
    """A continuous query: run by the engine (core/engines.py; Spark: one background driver process per query, or a
    shared application), started as its category says."""

    def create(self, ctx: Context, change: Change) -> dict[str, Any]:
        checkpoint = ctx.workspace.checkpoint(Address.parse(change.address).name, _fresh_version_dir(change))
        return self._start(ctx, change, checkpoint, StartAt(), Category.NEW, read_from=None)

    def update(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        """In place, keep checkpoint, or drift repair: the new version resumes from the same checkpoint."""
        parked = self._park(ctx, change, deployed)
        stopped = self._stop(deployed, parked)
        category = change.category or Category.IN_PLACE
        outputs = self._start(ctx, change, Path(deployed.outputs["checkpoint"]), StartAt(), category, parked,
                              read_from=deployed.outputs.get("read_from") or {})
        return {**outputs, LEDGER_STOPPED: stopped}

    def replace(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        """Carry offsets or replay: stop the old version, start the new one on a fresh checkpoint. Offsets are
        carried only to the logs they were read from: checked again here, before anything stops (DSF-E824)."""
        if change.category is Category.CARRY_OFFSETS:
            from dsflow.adapters.objects import identities

            recorded = deployed.outputs.get("logs") or {}
            check_same_logs(change.address, recorded, identities(ctx.project, recorded))
        parked = self._park(ctx, change, deployed)
        stopped = self._stop(deployed, parked)
        start = _start_at(change, stopped["stop_offsets"] or {})
        if change.category is Category.RESET_CHECKPOINT:
            start = _at_end(ctx, deployed)
        checkpoint = ctx.workspace.checkpoint(Address.parse(change.address).name, _fresh_version_dir(change))
        carried = change.category is Category.CARRY_OFFSETS  # its sink holds what the versions before it read
        read_from = deployed.outputs.get("read_from") or {} if carried else start.offsets or None
        outputs = self._start(ctx, change, checkpoint, start, change.category or Category.REPLAY, parked, read_from)
        if change.category is Category.RESET_CHECKPOINT:
            outputs[LEDGER_STARTED]["skipped_records"] = _skipped(stopped["stop_offsets"], start.offsets)
        return {**outputs, LEDGER_STOPPED: stopped}

    def delete(self, ctx: Context, deployed: DeployedResource) -> dict[str, Any]:
        return {LEDGER_STOPPED: self._stop(deployed)}

    def _start(self, ctx: Context, change: Change, checkpoint: Path, start: StartAt, category: Category,
               parked: int | None = None, read_from: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
        """Start the query's new version: in its parked driver (`parked`, its PID) if that driver takes it, else
        in a driver of its own or its shared application (the engine's `start`). `read_from`: the first offsets
        its result was read from, by source log (kept from the version before); None: asked now of the sources
        that start at their earliest offset (what a later replay checks is still held: engine/refresh.py)."""
        name = Address.parse(change.address).name
        query = next(q for q in ctx.project.queries if q.fqn == name)
        if read_from is None:
            read_from = ctx.resumed.get("read_from")
        if read_from is None:
            read_from = first_offsets(ctx.project, query, start)  # noted with the PID, the one note of a start
        run_dir = ctx.workspace.query_dir(name)
        run_dir.mkdir(parents=True, exist_ok=True)
        if parked is None:
            _stop_orphan(run_dir)
        if ctx.resumed.get("pid") != parked:
            process.stop(ctx.resumed.get("pid"), driver_identity(run_dir))
        write_declared(run_dir, change)
        shared = engine().start(ctx.project, ctx.workspace.run_dir / "apps", query, change.data_hash or "v",
                                checkpoint, run_dir, start, parked)
        pid, topics = shared.pop("pid"), shared.pop("topics")
        ctx.note({"pid": pid, "read_from": read_from})
        logs = source_logs(ctx.project, query)
        started = {"version": change.data_hash or "v", "category": category.value, "checkpoint": str(checkpoint),
                   "start_offsets": start.offsets or None, "start_timestamp": start.timestamp,
                   "source_logs": logs or None, "forced": change.forced}
        return {"pid": pid, "version": change.data_hash or "v", "checkpoint": str(checkpoint), "run_dir": str(run_dir),
                "topics": topics, "logs": logs, **({"read_from": read_from} if read_from else {}),
                LEDGER_STARTED: started, **shared}

    def _park(self, ctx: Context, change: Change, deployed: DeployedResource) -> int | None:
        """Ask the deployed version's own driver to stop its query between batches and wait for the new version
        (the engine's `park`; Spark: adapters/spark/reload.py): its PID if it did, None if the new version starts
        elsewhere (a shared application, another run folder) or the driver did not answer."""
        outputs, name = deployed.outputs, Address.parse(change.address).name
        query = next((q for q in ctx.project.queries if q.fqn == name), None)
        if outputs.get("app_dir") or not outputs.get("run_dir") or query is None \
                or engine().isolation(ctx.project, query) == "shared" \
                or Path(outputs["run_dir"]) != ctx.workspace.query_dir(name):
            return None
        pid, identity = outputs.get("pid"), driver_identity(outputs["run_dir"])
        reply = engine().park(Path(outputs["run_dir"]), pid, lambda: process.is_running(pid, identity),
                              STOP_GRACE_SECONDS + 30)
        return pid if reply is not None else None

    def _stop(self, deployed: DeployedResource, parked: int | None = None) -> dict[str, Any]:
        """Stop the deployed version (already stopped when its driver is `parked`); its version and the offsets its
        checkpoint committed last."""
        engine().stop(dict(deployed.outputs), parked)
        checkpoint = Path(deployed.outputs.get("checkpoint", ""))
        offsets = engine().committed_offsets(checkpoint) if checkpoint.is_dir() else None
        topics = deployed.outputs.get("topics", [])
        by_topic = dict(zip(topics, offsets, strict=False)) if offsets else None
        return {"version": deployed.outputs.get("version"), "stop_offsets": by_topic}


DECLARED = "declared.json"
"""In a query's run folder: the declaration its running version was started from (address, data and metadata as the
plan had them, secrets as markers, and their hashes), so `dsflow import` can take a running driver back into a state
that lost its entry with the plan's usual categories (core/imports.py)."""


def write_declared(run_dir: Path, change: Change) -> None:
    (run_dir / DECLARED).write_text(json.dumps({
        "address": change.address, "data_hash": change.data_hash, "metadata_hash": change.metadata_hash,
        "data": change.after, "metadata": change.after_metadata, "depends_on": change.depends_on}, indent=2))


def relaunch_driver(project: Project | None, deployed: DeployedResource, handoff: Handoff | None = None) -> int:
    """Start a deployed query's driver again on its recorded spec and checkpoint (the runtime supervisor's restart:
    same version, resuming from the checkpoint's last commit; the engine's `relaunch`); the secrets it names come
    from the project as loaded now, each from the same setting of the same store (DSF-E275 when the project no
    longer gives one). With `handoff`, a warm standby driver is offered the spec first (runtime/standby.py)."""
    return engine().relaunch(project, deployed, handoff)


def runs_now(workspace: Workspace, outputs: dict[str, Any]) -> dict[str, Any] | None:
    """What runs a deployed query's recorded version now, as outputs to record (`pid`, and a shared application's
    `app*` keys): its own driver (by the run folder's identity), or its shared application when that lists it live
    (a host alone does not say its query runs: the query may have been stopped in it); None if nothing runs it."""
    found = engine().running_driver(Path(outputs["run_dir"]), workspace.run_dir / "apps")
    if found is None:
        return None
    return {k: found[k] for k in ("pid", "app", "app_dir", "app_query") if k in found}


def start_recorded(project: Project, workspace: Workspace, deployed: DeployedResource) -> dict[str, Any]:
    """A deployed query's recorded spec started again on its checkpoint, where it runs: in a shared application
    (placed again: its old one may have stopped with its last query), else in its own driver; the outputs to
    record."""
    if deployed.outputs.get("app_dir"):
        return engine().start_again(project, workspace.run_dir / "apps", deployed)
    return {"pid": relaunch_driver(project, deployed)}


def source_logs(project: Project, query) -> dict[str, str]:
    """The identity of each source's log (a topic's id, a stream's ARN and creation time), asked of its store;
    sources whose store gives none are left out."""
    from dsflow.adapters.objects import identities

    topics = []
    for source in query.sources:
        relation = project.relation(source.relation)
        assert relation is not None  # a loaded project's sources name its relations
        topics.append(relation.topic)
    return identities(project, topics)


def first_offsets(project: Project, query, start: StartAt) -> dict[str, dict[str, int]]:
    """The first offset of each partition now, of the sources that start at their earliest offset (not at given
    offsets or a timestamp), by log; {} when none does or a store cannot say its offsets. Asked before the query
    starts: a record retention deletes in between is counted as read."""
    from dsflow.adapters.objects import positions

    if start.offsets or start.timestamp is not None:
        return {}
    logs = set()
    for source in query.sources:
        relation = project.relation(source.relation)
        assert relation is not None  # a loaded project's sources name its relations
        if (start.position or source.starting_position) == "earliest":
            logs.add(relation.topic)
    now = positions(project, sorted(logs)) if logs else None
    return {log: {p: first for p, (first, _) in parts.items()} for log, parts in (now or {}).items()}


def _fresh_version_dir(change: Change) -> str:
    return f"{change.data_hash or 'v'}-{uuid.uuid4().hex[:8]}"


def _start_at(change: Change, carried: dict[str, dict[str, int]]) -> StartAt:
    if change.category is Category.CARRY_OFFSETS:
        return StartAt(offsets=carried)
    if change.override and change.override.isdigit():
        return StartAt(timestamp=int(change.override))
    return StartAt(position="earliest")


def _at_end(ctx: Context, deployed: DeployedResource) -> StartAt:
    """Where a reset checkpoint starts: each source's end offsets right after the old version stopped (noted first,
    so an apply interrupted here and run again starts where this one would have); a store that cannot say its
    offsets starts at its latest position when the new version starts."""
    from dsflow.adapters.objects import end_offsets

    ends = ctx.resumed.get("reset_offsets")
    if ends is None:
        ends = end_offsets(ctx.project, list(deployed.outputs.get("topics") or []))
        ctx.note({"reset_offsets": ends})
    return StartAt(offsets=ends) if ends else StartAt(position="latest")


def _skipped(stopped: dict[str, dict[str, int | str]] | None,
             ends: dict[str, dict[str, int]]) -> int | None:
    """Records between where the old version stopped and where the reset version starts; None if not known."""
    if not stopped or not ends:
        return None
    return sum(max(0, end - int(stopped.get(topic, {}).get(partition, end)))
               for topic, parts in ends.items() for partition, end in parts.items())


def _stop_orphan(run_dir: Path) -> None:
    """A driver left running by an interrupted apply (started, never recorded in the state) is stopped first: the
    process this run directory's identity names, also one that had not written its status file yet."""
    identity = driver_identity(run_dir)
    process.stop(process.holder(identity), identity)


class DatagenExecutor:
    """A background data generator feeding a relation's topic; a restart continues its ids."""

    def create(self, ctx: Context, change: Change) -> dict[str, Any]:
        name = Address.parse(change.address).name
        run_dir = ctx.workspace.datagen_dir(name)
        process.stop(ctx.resumed.get("pid"), datagen_identity(run_dir), timeout=15)
        pid = launch_datagen(ctx.project, ctx.workspace, name)
        ctx.note({"pid": pid})
        gen = next(g for g in ctx.project.datagens if g.name == name)
        relation = ctx.project.relation(gen.relation)
        assert relation is not None  # a loaded project's datagens feed its relations
        return {"pid": pid, "topic": relation.topic, "run_dir": str(run_dir)}

    def update(self, ctx: Context, change: Change, deployed: DeployedResource) -> dict[str, Any]:
        self.delete(ctx, deployed)
        return self.create(ctx, change)

    def delete(self, ctx: Context, deployed: DeployedResource) -> None:
        process.stop(deployed.outputs.get("pid"), datagen_identity(deployed.outputs.get("run_dir")), timeout=15)


def launch_datagen(project: Project, workspace: Workspace, name: str) -> int:
    """Start generator `name` in the background, continuing its ids from its progress file (apply's create and
    the runtime supervisor's restart)."""
    from dsflow.datagen import BOOTSTRAP_ENV, PROPERTIES_ENV, SECRETS_ENV, read_progress

    gen = next(g for g in project.datagens if g.name == name)
    relation = project.relation(gen.relation)
    assert relation is not None  # a loaded project's datagens feed its relations
    store = project.store(relation.store)
    assert store is not None  # and its relations name its stores
    run_dir = workspace.datagen_dir(name)
    run_dir.mkdir(parents=True, exist_ok=True)
    progress = run_dir / "progress.json"
    start_seq = read_progress(str(progress))
    args = ["--topic", relation.topic, "--generator", gen.generator,
            "--rate", str(gen.rate), "--seed", str(gen.seed), "--start-seq", str(start_seq),
            "--progress-file", str(progress)]
    if gen.count is not None:
        args += ["--count", str(max(0, gen.count - start_seq))]
    for column in relation.columns:
        args += ["--column", f"{column.name}:{column.type}"]
    for key in relation.primary_key:
        args += ["--key", key]
    secrets = [v for k, v in store.properties.items() if k in store.sensitive]
    secrets += [store.bootstrap_servers] if "bootstrap_servers" in store.sensitive else []
    env = {PROPERTIES_ENV: json.dumps(dict(store.properties)), BOOTSTRAP_ENV: store.bootstrap_servers,
           SECRETS_ENV: json.dumps(secrets)}  # nothing of the store on the command line (`ps`)
    return process.launch(DATAGEN_MODULE, args, run_dir / "datagen.log", datagen_identity(run_dir), env=env)


EXECUTORS: dict[Kind, Executor] = {
    Kind.STORE: RecordOnly(),
    Kind.DATABASE: RecordOnly(),
    Kind.SCHEMA: RecordOnly(),
    Kind.ROLE: RoleExecutor(),
    Kind.BINDING: BindingExecutor(),
    Kind.GRANT: GrantExecutor(),
    Kind.RELATION: RelationExecutor(),
    Kind.FUNCTION: RecordOnly(),  # code in the project's files, registered by each query's driver
    Kind.VIEW: RecordOnly(),  # a named SELECT, inlined into the queries that read it (sql/views.py)
    Kind.QUERY: QueryExecutor(),
    Kind.DATAGEN: DatagenExecutor(),
}


def run_change(ctx: Context, change: Change, deployed: DeployedResource | None) -> dict[str, Any] | None:
    """Carry out one change; returns outputs to record (a resource that is gone returns only ledger keys)."""
    executor = EXECUTORS[Address.parse(change.address).kind]
    if change.action is Action.CREATE:
        return executor.create(ctx, change)
    if change.action is Action.UPDATE and deployed is not None and change.after == deployed.data \
            and access_only(deployed.metadata, change.after_metadata or {}):
        return dict(deployed.outputs)  # only the owner changed: recorded, nothing restarted (core/resources.py)
    current = cast(DeployedResource, deployed)  # the other actions act on a resource the state holds
    if change.action is Action.UPDATE:
        return executor.update(ctx, change, current)
    if change.action is Action.REPLACE:
        if hasattr(executor, "replace"):
            return executor.replace(ctx, change, current)
        executor.delete(ctx, current)
        return executor.create(ctx, change)
    if change.action is Action.DELETE:
        return {GONE: True, **(executor.delete(ctx, current) or {})}
    if change.action is Action.REFRESH:
        return {**current.outputs, "observed": change.observed}
    if change.action is Action.FORGET:  # out of state; only a query the entry does not keep running is stopped
        stops = isinstance(executor, QueryExecutor) and not change.keep_running
        return {GONE: True, **((executor.delete(ctx, current) or {}) if stops else {})}
    raise DsflowError("DSF-E810", f"cannot apply action {change.action} to {change.address}")
