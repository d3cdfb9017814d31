"""The thin facade the CLI calls: load, plan, apply, destroy and status for one environment."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsflow.core import gcpause
from dsflow.core.bluegreen import DEFAULT_CATCH_UP_SECONDS
from dsflow.core.address import Address, Kind
from dsflow.core.graph import Graph
from dsflow.core.model import Project
from dsflow.core.observing import Questions, questions
from dsflow.core.plan import Action, Plan, PlanOptions, make_plan
from dsflow.core.resources import Resource, project_resources, with_current_markers
from dsflow.core.safety import Allowance, check_partitions, check_prevented, check_table_places
from dsflow.errors import Diagnostic, ProjectError, Severity
from dsflow.load.project import check_project
from dsflow.engine.contracts import check_contracts
from dsflow.engine.workspace import Workspace

if TYPE_CHECKING:  # apply and executors bring the Spark translation (sqlglot), which plan does not need
    from dsflow.engine.apply import ApplyResult
# refresh.py and adapters/process.py (subprocess) are imported where used: `plan --no-refresh` needs neither


@dataclass(frozen=True)
class Options:
    """Which project and environment a command works on."""

    project_dir: Path
    environment: str | None = None
    variables: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Loaded:
    project: Project
    workspace: Workspace
    warnings: tuple[Diagnostic, ...] = ()
    """What loading warned of (a join whose state grows without bound, DSF-W001, ...): plan prints it."""


def load(options: Options) -> Loaded:
    """The project, or ProjectError with every diagnostic; its warnings are kept (Loaded.warnings)."""
    result = check_project(options.project_dir, options.environment, options.variables)
    if result.errors or result.project is None:
        raise ProjectError(diagnostics=result.diagnostics)
    warned = tuple(d for d in result.diagnostics if d.severity is Severity.WARNING)
    return Loaded(result.project, Workspace.of(result.project), warned)


def load_what_runs(options: Options) -> tuple[Loaded, ProjectError | None]:
    """The project for commands that look at or stop what runs (status, runtime down/status): loaded whole when it
    validates; else its dsflow.yml settings alone (its state and run folder), with the error that stopped the
    full load. Stopping what runs never needs the project to be valid: those commands work from the state."""
    from dsflow.load.project import load_settings

    try:
        return load(options), None
    except ProjectError as err:
        project = load_settings(options.project_dir, options.environment, options.variables)  # raises if it fails
        return Loaded(project, Workspace.of(project)), err


def resource_graph(project: Project) -> Graph:
    return Graph.from_dependencies({r.address: r.depends_on for r in project_resources(project)})


@dataclass(frozen=True)
class Forced:
    """Changes asked for by name (core/forcing.py): `--replace` and `--reset-checkpoint` addresses; and how replays
    are carried out (`--blue-green`, `--catch-up-timeout`: core/bluegreen.py)."""

    replace: frozenset[str] = frozenset()
    reset_checkpoint: frozenset[str] = frozenset()
    blue_green: bool = False
    catch_up_seconds: int = DEFAULT_CATCH_UP_SECONDS


def plan(loaded: Loaded, destroy: bool = False, do_refresh: bool = True, refresh_only: bool = False,
         targets: frozenset[str] = frozenset(), excludes: frozenset[str] = frozenset(),
         forced: Forced = Forced(), imports: Mapping[str, str] | None = None) -> Plan:
    """Observe the live systems once (a refresh, unless told not to; replay estimates in any case), then make the
    plan once from the project, the state and what was observed; the plan carries the observations. `imports`:
    more imports than the project's `import:` entries (`dsflow import ADDRESS ID`)."""
    with gcpause.paused():  # see dsflow/core/gcpause.py
        return _plan(loaded, destroy, do_refresh, refresh_only, targets, excludes, forced, imports or {})


def _plan(loaded: Loaded, destroy: bool, do_refresh: bool, refresh_only: bool, targets: frozenset[str],
          excludes: frozenset[str], forced: Forced = Forced(), imports: Mapping[str, str] | None = None) -> Plan:
    """Observe once (what to ask derived from the project and the state alone), then plan once from what was seen."""
    from dsflow.adapters.state import redactor

    backend = loaded.workspace.state_backend()
    state = backend.read()
    resources = project_resources(loaded.project, redactor(loaded.project, backend))
    state = with_current_markers(loaded.project, state, resources)  # a state written before keyed markers
    _check_targets(targets, loaded.project, state)
    _check_targets(excludes, loaded.project, state, "--exclude")
    _check_forced(forced, resources, state, targets, excludes)
    if not destroy and not refresh_only:
        check_contracts(loaded.project, resources, state, targets, excludes)
    options = PlanOptions(destroy=destroy, refresh_only=refresh_only, targets=targets, excludes=excludes,
                          replace=forced.replace, reset_checkpoint=forced.reset_checkpoint,
                          blue_green=forced.blue_green, catch_up_seconds=forced.catch_up_seconds,
                          store_types={s.name: s.type for s in loaded.project.stores},
                          moves={m.to_address: m.from_address for m in loaded.project.moves},
                          removed={r.address: r.keep_running for r in loaded.project.removals},
                          imports={**{i.address: i.id for i in loaded.project.imports}, **(imports or {})})
    refreshing = (do_refresh or refresh_only) and not destroy
    asked = Questions() if refresh_only else questions(resources, state, options, counting=do_refresh or destroy)
    if refreshing or asked:
        from dsflow.engine.refresh import observe

        options = replace(options, observations=observe(loaded.project, state, asked, refreshing))
    the_plan = make_plan(loaded.project.name, loaded.project.environment, resources, state, options)
    _check_imports(loaded.project, the_plan, state, options)
    _check_imported_tables(loaded.project, the_plan, {str(r.address): r for r in resources}, state, options)
    _check_existing_sizes(loaded.project, the_plan)
    check_prevented(the_plan)
    check_partitions(the_plan)
    check_table_places(the_plan, state)
    _check_schema_evolution(loaded.project, the_plan)
    return the_plan


def _check_schema_evolution(project: Project, the_plan: Plan) -> None:
    """DSF-E841 when the plan evolves a query sink's registry subject in place and the refresh saw the registry
    refuse the new schema (Observations.schema_refusals)."""
    from dsflow.errors import DsflowError

    for change in the_plan.changes:
        why = the_plan.observations.schema_refusals.get(change.address)
        if why is None or change.action is not Action.UPDATE or not change.before or not change.after \
                or change.before.get("columns") == change.after.get("columns"):
            continue
        relation = project.relation(Address.parse(change.address).name)
        raise DsflowError("DSF-E841", why, location=relation.location if relation is not None else None,
                          hint="undo the column change, or set the relation's 'value.schema.compatibility' to a rule "
                               "that allows it")


def _check_imports(project: Project, the_plan: Plan, state, options: PlanOptions) -> None:
    """DSF-E868, every one at once: an import of a log or table the refresh did not see (it does not exist, or
    --no-refresh)."""
    from dsflow.core.imports import missing
    from dsflow.errors import Diagnostic, ProjectError

    if not options.imports or the_plan.mode != "normal":
        return
    wanted = {c.address: c for c in the_plan.changes if c.action is not Action.DELETE}
    found = []
    for address in missing(options.imports, wanted, state, the_plan.observations):
        relation = project.relation(Address.parse(address).name)
        seen = the_plan.observations.resources.get(address)
        why = seen.detail if seen is not None else "the plan was made without a refresh (--no-refresh)"
        found.append(Diagnostic("DSF-E868", f"import {address} ({options.imports[address]}): nothing to import: {why}",
                                relation.location if relation is not None else None,
                                hint="check the store and the name, run the plan with a refresh, or drop the import "
                                     "to create the log or table instead"))
    if found:
        raise ProjectError(diagnostics=found)


def _check_imported_tables(project: Project, the_plan: Plan, wanted: Mapping[str, Resource], state,
                           options: PlanOptions) -> None:
    """DSF-E869, every one at once and before anything is applied: an imported table that cannot take the
    declaration's rows as it is (a column type, the key, a required column; core/imports.py `refusal`), or a
    running query whose run folder does not record the declaration it was started from."""
    from dsflow.core.imports import refusals
    from dsflow.errors import Diagnostic, ProjectError

    found = []
    planned = {c.address for c in the_plan.changes if c.imported is not None}
    for address, why in refusals(options.imports, wanted, state, options.observations).items():
        if address not in planned:
            continue
        relation = project.relation(Address.parse(address).name)
        found.append(Diagnostic("DSF-E869", f"import {address} ({options.imports[address]}): it cannot be "
                                f"imported as it is: {why}", relation.location if relation else None,
                                hint="change the declaration to fit the table, or change the table (ALTER TABLE); "
                                     "then plan again"))
    if found:
        raise ProjectError(diagnostics=found)


def _check_existing_sizes(project: Project, the_plan: Plan) -> None:
    """DSF-E420, every one at once and before anything is applied: a new relation declares another size than the
    log it names, which exists already (apply would neither shrink nor reshuffle it, and would stop half-way)."""
    from dsflow.core.physical import log_size, physical_object
    from dsflow.core.plan import size_conflicts
    from dsflow.errors import Diagnostic, ProjectError
    from dsflow.load.sizing import partitions_key

    types = {s.name: s.type for s in project.stores}
    found = []
    observations = the_plan.observations.resources
    for change in size_conflicts(the_plan):
        relation = project.relation(Address.parse(change.address).name)
        store = project.store(relation.store) if relation is not None else None
        assert relation is not None and store is not None and change.after is not None  # refresh looked at its log
        key = partitions_key(store)
        where, size = physical_object(change.after, types), observations[change.address].size
        found.append(Diagnostic(
            "DSF-E420", f"'{relation.fqn}' declares '{key}' = {relation.partitions}, but the {where} exists "
            f"already with {log_size({**change.after, 'partitions': size}, types)}; nothing was applied",
            relation.location, hint=f"remove '{key}' to take the {where} as it is, declare '{key}' = {size}, or "
                                    "set 'topic' to a name that does not exist yet"))
    if found:
        raise ProjectError(diagnostics=found)


def _check_targets(targets: frozenset[str], project: Project | None, state, option: str = "--target",
                   desired: set[str] | None = None) -> None:
    if not targets:  # nothing to check; the resources of a big project are not cheap to list
        return
    if desired is None:
        assert project is not None  # either the project or its resources' addresses
        desired = {str(r.address) for r in project_resources(project)}
    known = desired | set(state.resources)
    for target in sorted(targets):
        if target not in known:
            from dsflow.errors import DsflowError
            from dsflow.core.suggest import did_you_mean

            raise DsflowError("DSF-E024", f"{option} '{target}' names no resource of the project or the state",
                              hint=did_you_mean(target, known))


def _check_forced(forced: Forced, resources, state, targets: frozenset[str], excludes: frozenset[str]) -> None:
    """DSF-E024 for an address the project and the state do not know; DSF-E828 for one that is not a query both
    declare and deploy, that --exclude leaves out or --target does not reach, or that is named by both options."""
    from dsflow.errors import DsflowError

    for option, addresses in (("--replace", forced.replace), ("--reset-checkpoint", forced.reset_checkpoint)):
        if not addresses:
            continue  # listing the resources' addresses is not free in a big project
        _check_targets(addresses, None, state, option, {str(r.address) for r in resources})
        for address in sorted(addresses):
            why = None
            if Address.parse(address).kind is not Kind.QUERY or address not in state.resources:
                why = "is not a deployed query"
            elif address not in {str(r.address) for r in resources}:
                why = "is no longer in the project (its delete stops it)"
            elif address in (forced.replace & forced.reset_checkpoint):
                why = "is named by both --replace and --reset-checkpoint"
            elif excludes and address in excludes:
                why = "is left out by --exclude"
            elif targets and address not in targets:
                why = "is not one of the --target addresses"
            if why:
                raise DsflowError("DSF-E828", f"{option} {address} {why}",
                                  hint="name a deployed query of the project once, such as "
                                       "query.db.schema.name ('dsflow status' lists them)")


def apply(loaded: Loaded, the_plan: Plan, on_event=lambda *_: None, allowance: Allowance | None = None,
          actor: str | None = None) -> ApplyResult:
    """Apply the plan; `allowance` is the data loss the user acknowledged (core/safety.py; none by default);
    `actor` is who the event log names (the OS user when None)."""
    from dsflow.engine.apply import apply_plan

    return apply_plan(the_plan, loaded.project, loaded.workspace, on_event, allowance or Allowance(), actor)


def migrate_state(loaded: Loaded) -> bool:
    """A state written before keyed secret markers, rewritten with them (apply.migrate_state)."""
    from dsflow.engine.apply import migrate_state

    return migrate_state(loaded.project, loaded.workspace)


def status(loaded: Loaded, with_dead_letters: bool = True) -> list[dict[str, Any]]:
    """Every deployed query and generator, with what its process and status file say now, and what the runtime
    supervisor recorded (uptime, restarts, last exit and error, next retry: dsflow/runtime/records.py)."""
    from dsflow.adapters import process
    from dsflow.engine.bluegreen import status_of
    from dsflow.engine.executors import datagen_identity, query_identity
    from dsflow.engine.refresh import query_status
    from dsflow.runtime.records import status_fields

    state = loaded.workspace.state_backend().read()
    entries = []
    waiting = _standby(loaded, state)
    for key, deployed in sorted(state.resources.items()):
        kind, pid = Address.parse(key).kind, deployed.outputs.get("pid")
        if kind is Kind.QUERY:
            info = query_status(deployed)
            running = process.is_running(pid, query_identity(deployed.outputs))
            state_name = info.get("state", "unknown")
            if not running and state_name in ("running", "starting", "unknown"):
                state_name = "stopped"
            run_dir = Path(deployed.outputs["run_dir"]) if deployed.outputs.get("run_dir") else None
            runtime = status_fields(run_dir, pid, running, str(deployed.outputs.get("version", "")))
            shared = {"app": deployed.outputs["app"]} if deployed.outputs.get("app") else {}  # several share a PID
            shared = shared or {"standby": waiting}  # in its own driver: what a restart of it would become
            if shared and running and isinstance(info.get("started_at"), (int, float)):
                runtime["uptime_seconds"] = round(max(0.0, time.time() - info["started_at"]), 1)  # the query's own
            state_name = runtime.pop("runtime_state", state_name)
            if deployed.outputs.get("paused"):  # dsflow pause: stopped on its checkpoint, left alone
                state_name, runtime["paused_at"] = "paused", deployed.outputs.get("paused_at")
            deployment = status_of(state, key)  # a blue/green deployment of it: engine/bluegreen.py
            entries.append({**info, **shared, "address": key, "state": state_name,
                            "pid": pid, **runtime, **(dead_letters(loaded.project, Address.parse(key).name)
                                          if with_dead_letters else {}),
                            **({"blue_green": deployment} if deployment else {})})
        elif kind is Kind.DATAGEN:
            running = process.is_running(pid, datagen_identity(deployed.outputs.get("run_dir")))
            runtime = status_fields(loaded.workspace.datagen_dir(Address.parse(key).name), pid, running)
            entries.append({"address": key, "state": runtime.pop("runtime_state", "running" if running else "stopped"),
                            "pid": pid, **runtime})
    return entries


def _standby(loaded: Loaded, state) -> dict[str, Any] | None:
    """The environment's waiting standby driver (runtime.standby: PID and state), when a query runs in its own
    driver and one waits."""
    from dsflow.core.engines import engine

    root = loaded.workspace.run_dir / "standby"
    if not root.is_dir() or not any(Address.parse(k).kind is Kind.QUERY and not r.outputs.get("app_dir")
                                    for k, r in state.resources.items()):
        return None
    found = engine().standbys.describe(root)
    return {"pid": found["pid"], "state": found["state"]} if found else None


def dead_letters(project: Project, query_name: str) -> dict[str, Any]:
    """The query's dead-letter topic (stream) and how many records it holds (records that did not decode), asked
    of the `commands` facet of its first source store that keeps dead letters (Capability.DEAD_LETTERS); {} when
    the query has none, {"dlq_topic": ...} when the store cannot be asked."""
    from dsflow.core import stores as registry

    query = next((q for q in project.queries if q.fqn == query_name), None)
    stores = []
    for source in query.sources if query else ():
        relation = project.relation(source.relation)
        assert relation is not None  # a loaded project's sources name its relations
        stores.append(project.store(relation.store))
    store = next((s for s in stores if registry.can(s, registry.Capability.DEAD_LETTERS)), None)
    commands = registry.facet(store.type, "commands") if store is not None else None
    topic = commands.dead_letter_topic(project, query) if commands is not None else None
    if not topic:
        return {}
    assert commands is not None  # it named the topic
    try:
        count = commands.dead_letter_count(store, topic)
    except Exception:  # noqa: BLE001 - status shows what it can; the broker may be down
        return {"dlq_topic": topic}
    return {"dlq_topic": topic, "dead_letters": count or 0}
