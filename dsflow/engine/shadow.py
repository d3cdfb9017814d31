"""`dsflow shadow start|diff|stop|promote`: a candidate version of a deployed query run on the same sources into a
shadow topic, compared with the live version's output (core/shadow.py), and removed.

Start runs the project's version of a deployed query whose declaration changed, as a query of its own (its name and
run folder end with `__shadow`, its checkpoint is its own, its sink is `<live topic>__shadow`, created with the
live topic's size; its dead letters go to `<dead-letter topic>__shadow`). Its sources start where the live
version's output began (the live version's first read offsets, when recorded), so both outputs cover the same
input. It is recorded in `State.shadows`, never as a resource: plan, apply and the runtime supervisor leave it alone.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.core import shadow as core
from dsflow.core.address import Address, Kind
from dsflow.core.engines import StartAt, engine
from dsflow.core.model import Project, Query, Relation
from dsflow.core.shadow import Cut, ShadowDiff, ShadowRun
from dsflow.core.state import DeployedResource, State
from dsflow.errors import DsflowError
from dsflow.engine import topics
from dsflow.engine.workspace import Workspace
from dsflow.runtime.locking import lock_patiently

READ_IDLE_SECONDS = 10.0
"""A topic is read until it gave as many records as its offsets span (a log whose store tells), or until no record
arrived for this long (a quiet cut: nothing more is being written)."""


def resolve(project: Project, state: State, name: str) -> str:
    """The deployed query NAME means: its address, a name or fqn of a query, or the relation it writes."""
    if name.startswith("query."):
        return name
    fqn = name.removeprefix("relation.")
    writer = next((q for q in project.queries if q.sink == fqn or q.sink.endswith("." + fqn)), None)
    named = next((q for q in project.queries if q.fqn == fqn or q.fqn.endswith("." + fqn)), None)
    found = writer if name.startswith("relation.") else named or writer
    return f"query.{found.fqn}" if found is not None else f"query.{fqn}"


def _deployed(state: State, address: str) -> DeployedResource:
    deployed = state.resources.get(address)
    if deployed is None or Address.parse(address).kind is not Kind.QUERY:
        raise DsflowError("DSF-E940", f"{address} is not a deployed query",
                          hint="name a query 'dsflow status' lists (or the relation it writes), such as "
                               "query.db.schema.name")
    return deployed


def _run(state: State, address: str) -> ShadowRun:
    run = state.shadows.get(address)
    if run is None:
        raise DsflowError("DSF-E943", f"{address} has no shadow run",
                          hint=f"start one with 'dsflow shadow start {address}'")
    return run


def _candidate(project: Project, backend: Any, address: str, deployed: DeployedResource) -> tuple[Query, str]:
    """The project's query at `address` and its data hash; DSF-E941 when it is the deployed version."""
    from dsflow.adapters.state import redactor
    from dsflow.core.resources import project_resources

    resource = next((r for r in project_resources(project, redactor(project, backend)) if str(r.address) == address),
                    None)
    if resource is None:
        raise DsflowError("DSF-E941", f"{address} is no longer in the project: there is no candidate to run",
                          hint="a shadow runs the project's changed version of a deployed query")
    if resource.data_hash == deployed.data_hash:
        raise DsflowError("DSF-E941", f"{address} in the project is the deployed version ({deployed.data_hash}): "
                          "there is no candidate to run", hint="change the query's SQL or settings first; "
                          "'dsflow plan' shows what differs")
    query = next(q for q in project.queries if f"query.{q.fqn}" == address)
    return query, resource.data_hash


def _sink(project: Project, query: Query) -> Relation:
    """The query's sink relation; DSF-E942 unless it is a stream or changelog on a store of logs."""
    relation = project.relation(query.sink)
    store = project.store(relation.store) if relation is not None else None
    if relation is None or store is None or relation.kind not in ("stream", "changelog") \
            or store.type not in topics.STREAMING:
        kind = relation.kind if relation is not None else "relation"
        raise DsflowError("DSF-E942", f"query.{query.fqn} writes a {kind} that is not a log: a shadow run needs a "
                          f"stream or changelog on a {topics.log_stores_text()} store",
                          location=query.location, hint="shadow runs compare topics; compare a table's query "
                                                        "with 'dsflow test' instead")
    return relation


def _target(project: Project, relation: Relation, name: str) -> topics.Target:
    store = project.store(relation.store)
    assert store is not None  # _sink checked it
    registry = project.schema_registry(store.schema_registry)
    return topics.Target(store.type, name, store.bootstrap_servers, dict(store.properties), relation, store.name,
                         registry.client_config() if registry else {})


def shadow_project(project: Project, query: Query, relation: Relation, topic: str) -> tuple[Project, Query]:
    """The project as the shadow's driver sees it: the sink relation on the shadow topic (its own registry subject
    when the live one names one), the query renamed `<name>__shadow` with its own dead-letter topic."""
    subject = f"{topic}-value" if relation.value_subject else None
    sink = relation.model_copy(update={"topic": topic, "value_subject": subject})
    renamed = query.model_copy(update={"fqn": f"{query.fqn}{core.SUFFIX}",
                                       "dlq_topic": f"{project.dlq_topic(query)}{core.SUFFIX}"})
    relations = tuple(sink if r.fqn == relation.fqn else r for r in project.relations)
    queries = tuple(renamed if q.fqn == query.fqn else q for q in project.queries)
    return project.model_copy(update={"relations": relations, "queries": queries}), renamed


def start(project: Project, workspace: Workspace, name: str) -> ShadowRun:
    """Start the candidate version of the deployed query NAME into its shadow topic and record it in the state;
    DSF-E940 (not deployed), E941 (no candidate), E942 (not a log sink), E943 (a shadow runs, or its topic exists)."""
    backend = workspace.state_backend()
    with lock_patiently(backend, "shadow"):
        state = backend.read()
        address = resolve(project, state, name)
        deployed = _deployed(state, address)
        if address in state.shadows:
            raise DsflowError("DSF-E943", f"{address} has a shadow run already (topic {state.shadows[address].topic})",
                              hint=f"'dsflow shadow diff {address}' compares it; 'dsflow shadow stop {address}' "
                                   "removes it")
        query, version = _candidate(project, backend, address, deployed)
        relation = _sink(project, query)
        run = _prepared(project, workspace, deployed, query, relation, version, _live_topic(state, deployed, relation))
        state = state.with_shadow(address, run)
        backend.write(state, expected_serial=state.serial - 1)  # its topic is recorded before its driver starts
        try:
            outputs = _launch(project, workspace, run, query, relation)
        except BaseException:
            _remove(project, run, relation)
            backend.write(state.with_shadow(address, None), expected_serial=state.serial)
            raise
        run = run.model_copy(update={"outputs": outputs})
        backend.write(state.with_shadow(address, run), expected_serial=state.serial)
    return run


def _live_topic(state: State, deployed: DeployedResource, relation: Relation) -> str:
    """The topic the deployed version writes (the candidate may name another)."""
    sink = state.resources.get(f"relation.{deployed.data.get('sink')}")
    return str(sink.data.get("topic") or relation.topic) if sink is not None else relation.topic


def _prepared(project: Project, workspace: Workspace, deployed: DeployedResource, query: Query, relation: Relation,
              version: str, live_topic: str) -> ShadowRun:
    """The shadow's record, its topic created (DSF-E943 when that topic exists already: it would mix in old rows)."""
    topic = core.shadow_topic(live_topic)
    target = _target(project, relation, topic)
    with topics.store_errors(target.store, target.store_type, target.settings):
        if topics.describe(target) is not None:
            raise DsflowError("DSF-E943", f"topic {topic} exists already: a shadow's topic holds only its own rows",
                              hint=f"delete it ('dsflow topic delete {topic}') if no one needs it, then start again")
        live = topics.describe(_target(project, relation, live_topic)) or {}
        topics.create(target, live.get("partitions") or relation.partitions, None, None)
    name = f"{query.fqn}{core.SUFFIX}"
    read_from = {t: {str(p): int(o) for p, o in parts.items()}
                 for t, parts in (deployed.outputs.get("read_from") or {}).items()}
    return ShadowRun(query=f"query.{query.fqn}", live_version=deployed.data_hash, candidate_version=version,
                     kind="changelog" if relation.kind == "changelog" else "stream", live_topic=live_topic,
                     topic=topic, store=relation.store, start_offsets=read_from or None,
                     checkpoint=str(workspace.checkpoint_root / "shadows" / name / f"{version}-{uuid.uuid4().hex[:8]}"),
                     started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     outputs={"run_dir": str(workspace.run_dir / "shadows" / name)})


def _launch(project: Project, workspace: Workspace, run: ShadowRun, query: Query, relation: Relation
            ) -> dict[str, Any]:
    """The candidate started by the engine as the query `<name>__shadow`; the outputs to record."""
    seen, renamed = shadow_project(project, query, relation, run.topic)
    run_dir = Path(run.outputs["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    identity = engine().driver_identity(run_dir)
    process.stop(process.holder(identity), identity)  # one an interrupted start left behind
    start = StartAt(offsets=run.start_offsets) if run.start_offsets else StartAt()
    outputs = engine().start(seen, workspace.run_dir / "apps", renamed, run.candidate_version, Path(run.checkpoint),
                             run_dir, start, None)
    return {**outputs, "run_dir": str(run_dir), "checkpoint": run.checkpoint, "version": run.candidate_version}


def stop(project: Project, workspace: Workspace, name: str) -> ShadowRun:
    """Stop the shadow of NAME, delete its topic (one dsflow created) and its checkpoint, and forget it; the run as
    it was recorded (what was deleted)."""
    backend = workspace.state_backend()
    with lock_patiently(backend, "shadow"):
        state = backend.read()
        address = resolve(project, state, name)
        run = _run(state, address)
        query = next((q for q in project.queries if f"query.{q.fqn}" == address), None)
        relation = project.relation(query.sink) if query is not None else None
        _remove(project, run, relation)
        backend.write(state.with_shadow(address, None), expected_serial=state.serial)
    return run


def _remove(project: Project, run: ShadowRun, relation: Relation | None) -> None:
    """The shadow's driver stopped, its checkpoint and run folder removed, its topic deleted if dsflow made it."""
    import shutil

    if run.outputs.get("pid") is not None:
        engine().stop(dict(run.outputs), None)
    elif run.outputs.get("run_dir"):
        identity = engine().driver_identity(run.outputs["run_dir"])
        process.stop(process.holder(identity), identity)
    shutil.rmtree(run.checkpoint, ignore_errors=True)
    if run.outputs.get("run_dir"):
        shutil.rmtree(run.outputs["run_dir"], ignore_errors=True)
    store = project.store(run.store)
    if run.created_topic and store is not None:
        sink = relation if relation is not None and relation.store == run.store else None
        target = topics.Target(store.type, run.topic, store.bootstrap_servers, dict(store.properties), sink,
                               store.name)
        with topics.store_errors(target.store, target.store_type, target.settings):
            topics.delete(target)


def promotable(project: Project, workspace: Workspace, name: str) -> str:
    """The address of the deployed query NAME whose shadow runs the version the project declares now: what
    `dsflow shadow promote` applies. DSF-E943 without a shadow; DSF-E945 when the project's version is another
    than the shadow's (a promotion would apply what no shadow was compared for)."""
    state = workspace.state_backend().read()
    address = resolve(project, state, name)
    run = _run(state, address)
    deployed = _deployed(state, address)
    _, version = _candidate(project, workspace.state_backend(), address, deployed)
    if version != run.candidate_version:
        raise DsflowError("DSF-E945", f"{address}: the project declares version {version[:12]}, but its shadow runs "
                          f"{run.candidate_version[:12]}; promoting would apply a version no shadow was compared "
                          "for; nothing was changed",
                          hint=f"'dsflow shadow stop {address}' and start it again on this version, or put the "
                               "shadowed version back in the project")
    return address


def diff(project: Project, workspace: Workspace, name: str, wait: float = 60.0) -> ShadowDiff:
    """The shadow's output against the live version's over the same input (core/shadow.py): read at two quiet,
    aligned cuts, waited for up to `wait` seconds (DSF-E944 when none came)."""
    state = workspace.state_backend().read()
    address = resolve(project, state, name)
    run = _run(state, address)
    deployed = _deployed(state, address)
    query = next((q for q in project.queries if f"query.{q.fqn}" == address), None)
    relation = project.relation(query.sink) if query is not None else None
    if relation is None or relation.store != run.store:
        raise DsflowError("DSF-E942", f"{address}: the project no longer declares its sink in store {run.store}: "
                          f"the topics {run.live_topic} and {run.topic} cannot be read", hint=f"'dsflow shadow stop "
                                                                                             f"{address}'")
    live_side = (Path(deployed.outputs.get("checkpoint", "")), list(deployed.outputs.get("topics") or []))
    shadow_side = (Path(run.checkpoint), list(run.outputs.get("topics") or []))
    deadline = time.monotonic() + wait
    while True:
        live, shadow = _cut(*live_side), _cut(*shadow_side)
        if live is not None and shadow is not None and core.aligned(live, shadow):
            found = _read_both(project, relation, run, live_side, shadow_side, live, shadow)
            if found is not None:
                return core.diff(run, live, shadow, *found)
        if time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    raise DsflowError("DSF-E944", f"{address}: the live and shadow versions did not stop at the same source offsets "
                      f"within {wait:g} s ({_where(live, shadow)}): their outputs cover different input",
                      hint="wait for the shadow to catch up (or for the sources to pause), then diff again with a "
                           "longer --wait")


def _where(live: Cut | None, shadow: Cut | None) -> str:
    if live is None or shadow is None:
        return f"{'live' if live is None else 'shadow'} is running a batch"
    return core.not_aligned_text(live, shadow)


def _cut(checkpoint: Path, sources: list[str]) -> Cut | None:
    """The side's cut when no batch runs (its last planned batch is committed), else None."""
    committed = engine().last_committed_batch(checkpoint) if checkpoint.is_dir() else None
    planned = engine().last_planned_batch(checkpoint) if checkpoint.is_dir() else None
    if planned != committed:
        return None
    offsets = engine().committed_offsets(checkpoint) if checkpoint.is_dir() else None
    return Cut(batch=committed, offsets=core.positions(sources, offsets))


def _read_both(project: Project, relation: Relation, run: ShadowRun, live_side: tuple[Path, list[str]],
               shadow_side: tuple[Path, list[str]], live: Cut, shadow: Cut) -> tuple[list, list] | None:
    """Both topics' records, or None when a side ran a batch while they were read (the cuts moved)."""
    live_records = _records(project, _target(project, relation, run.live_topic))
    shadow_records = _records(project, _target(project, relation, run.topic))
    if _cut(*live_side) != live or _cut(*shadow_side) != shadow:
        return None
    return live_records, shadow_records


def _records(project: Project, target: topics.Target) -> list[tuple[str | None, Any]]:
    """(key, value) of every record of the topic, in each partition's order, values decoded with the relation's
    formats."""
    with topics.store_errors(target.store, target.store_type, target.settings):
        expected = _held(project, target)
        found = list(topics.records(target, True, expected, READ_IDLE_SECONDS)) if expected != 0 else []
    return [(r.get("key"), r.get("value")) for r in found]  # a partition's (shard's) records come in their order


def _held(project: Project, target: topics.Target) -> int | None:
    """How many records the topic's offsets span now (its store kind's `positions`), the most a read can give: it
    stops there instead of waiting for the idle time; None when the store cannot say."""
    from dsflow.adapters.objects import objects_for

    store = project.store(target.store)
    objects = objects_for(store.type) if store is not None else None
    if store is None or objects is None or not hasattr(objects, "positions"):
        return None
    now = objects.positions(store, [target.name]).get(target.name) or {}
    if not all(isinstance(first, int) and isinstance(end, int) for first, end in now.values()):
        return None
    return sum(end - first for first, end in now.values())
