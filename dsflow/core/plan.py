"""Diffing the desired resources against the deployed state into a frozen Plan.

The plan is data: it can be saved as JSON, rendered, and applied. Apply never re-decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.address import Address, Kind
from dsflow.core.forcing import forced_change, held, is_paused
from dsflow.core.graph import Graph
from dsflow.core.imports import imported_state, importable, with_import
from dsflow.core.moves import find_moves, moved_state, with_move
from dsflow.core.removals import forget_change
from dsflow.core.contracts import version_reason
from dsflow.core.bluegreen import DEFAULT_CATCH_UP_SECONDS, Retirement
from dsflow.core.bluegreen_plan import retired, with_blue_green
from dsflow.core.categories import REALTIME, Category, effect_text, is_replay_override, query_category
from dsflow.core.changes import (Action, Change, DataLoss, Estimate, Observation, Observations,  # noqa: F401
                                 Skipped)  # (re-exported)
from dsflow.core.physical import (SINK_AFTER_REPLAY, ColumnChange, column_change, log_noun, log_size,
                                  physical_object)
from dsflow.core.resources import Resource, access_only, fingerprint
from dsflow.core.settings import named_query_settings, restarting_stores
from dsflow.core.state import DeployedResource, State

PLAN_FORMAT_VERSION = 1


class Plan(BaseModel):
    """The ordered changes that bring the deployed state to the desired project."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    format_version: int = Field(PLAN_FORMAT_VERSION, description="the plan JSON format (docs/plan-json.md)")
    project: str = Field(description="the project's name from dsflow.yml")
    environment: str = Field(description="the environment planned (--env)")
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            description="when the plan was made, ISO 8601 UTC")
    state_lineage: str = Field(description="lineage of the state planned against; empty before the first apply")
    state_serial: int = Field(description="serial of the state planned against; apply refuses if it moved")
    mode: str = Field("normal", description="normal, destroy or refresh-only",
                      json_schema_extra={"enum": ["normal", "destroy", "refresh-only"]})
    targets: list[str] = Field(default_factory=list, description="the --target addresses, sorted")
    excluded: list[str] = Field(default_factory=list, description="what --exclude leaves as deployed: each excluded "
                                "address and everything downstream of it, sorted")
    replace: list[str] = Field(default_factory=list, description="the --replace addresses, sorted: deployed queries "
                               "rebuilt from the earliest offsets in a new checkpoint")
    reset_checkpoint: list[str] = Field(default_factory=list, description="the --reset-checkpoint addresses, sorted: "
                                        "deployed queries started in a new checkpoint at their sources' end offsets")
    paused: list[str] = Field(default_factory=list, description="the deployed queries `dsflow pause` stopped, sorted: "
                              "left stopped on their checkpoints (not drift), their changes held until "
                              "`dsflow resume`")
    desired_fingerprint: str = Field("", description="hash of every desired resource; apply refuses if it moved")
    changes: list[Change] = Field(description="every resource in apply order (deletes first), no-ops included")
    retired: list[Retirement] = Field(default_factory=list, description="the old versions kept by blue/green "
                                      "deployments that this apply removes (core/bluegreen.py): their logs deleted "
                                      "and checkpoints removed, after the changes")
    observations: Observations = Field(default_factory=Observations,
                                       description="what the refresh saw, once, before planning: the plan was made "
                                                   "from it alone, and apply checks it still holds")

    @property
    def actionable(self) -> list[Change]:
        """What apply carries out: every change but a no-op (an import that matches its declaration is recorded)."""
        return [c for c in self.changes if c.action is not Action.NOOP or c.imported is not None]

    @property
    def destroying(self) -> list[Change]:
        """The changes that delete records (Change.destroys)."""
        return [c for c in self.changes if c.destroys is not None]

    @property
    def has_changes(self) -> bool:
        return bool(self.actionable or self.retired)

    def summary(self) -> dict[str, int]:
        counts = {a.value: 0 for a in Action if a not in (Action.NOOP, Action.REFRESH, Action.FORGET)}
        if any(c.action is Action.FORGET for c in self.changes):
            counts[Action.FORGET.value] = 0
        if self.mode == "refresh-only":
            counts = {Action.REFRESH.value: 0}
        if any(c.imported is not None for c in self.changes):
            counts["import"] = 0
        for change in self.actionable:
            if change.imported is not None:
                counts["import"] += 1
            if change.action is not Action.NOOP:  # a refresh outside refresh-only: an interrupted deployment's
                counts[change.action.value] = counts.get(change.action.value, 0) + 1
        return counts


@dataclass(frozen=True)
class PlanOptions:
    """How to plan: what the refresh saw, which resources to target, and the plan's mode."""

    observations: Observations = Observations()
    """Everything the refresh saw (engine/refresh.py observe), the plan's only view of the live systems: drift, the
    logs new relations name, in-place growth, replay estimates, record counts, source logs deleted and created
    again."""
    store_types: Mapping[str, str] = field(default_factory=dict)
    """Store name -> type, to name a relation's physical object."""
    moves: Mapping[str, str] = field(default_factory=dict)
    """The project's `moved:` entries: new address -> the address it was deployed at (core/moves.py)."""
    imports: Mapping[str, str] = field(default_factory=dict)
    """The `import:` entries (and `dsflow import`): address -> the ID of the log to adopt as it is (core/imports.py)."""
    removed: Mapping[str, bool] = field(default_factory=dict)
    """The project's `removed:` entries: address -> keep_running. A deployed one that left the project is forgotten,
    not deleted (core/removals.py)."""
    destroy: bool = False
    refresh_only: bool = False
    targets: frozenset[str] = frozenset()
    excludes: frozenset[str] = frozenset()
    """The --exclude addresses: each, and everything that depends on it (desired or deployed), is left as it is."""
    replace: frozenset[str] = frozenset()
    """The --replace addresses: deployed queries rebuilt from scratch (a new checkpoint, sources from the earliest)."""
    reset_checkpoint: frozenset[str] = frozenset()
    """The --reset-checkpoint addresses: deployed queries given a new checkpoint at their sources' end offsets."""
    blue_green: bool = False
    """--blue-green: every replay of a query writing a log is carried out beside the deployed version
    (core/bluegreen.py); without it, only those whose sink says 'deploy' = 'blue_green'."""
    catch_up_seconds: int = DEFAULT_CATCH_UP_SECONDS
    """--catch-up-timeout: the bound of a blue/green deployment's catch-up and switch."""
    now: datetime | None = None
    """When the plan is made (a kept old version's retention is measured to it); None: the clock now."""


def make_plan(project: str, environment: str, desired: list[Resource], state: State,
              options: PlanOptions | None = None) -> Plan:
    """Diff desired resources against state; deletes come first, in reverse dependency order. Pure: the live systems
    are seen only through `options.observations`, which the plan carries."""
    options = options or PlanOptions()
    mode = "destroy" if options.destroy else "refresh-only" if options.refresh_only else "normal"
    wanted, graph = wanted_resources(desired, options)
    excluded = _downstream(options.excludes, graph, state)
    common = dict(project=project, environment=environment, state_lineage=state.lineage, state_serial=state.serial,
                  mode=mode, targets=sorted(options.targets), excluded=sorted(excluded),
                  replace=sorted(options.replace), reset_checkpoint=sorted(options.reset_checkpoint),
                  paused=sorted(k for k, v in state.resources.items() if is_paused(v) and k not in excluded),
                  desired_fingerprint=desired_fingerprint(desired), observations=options.observations)
    if options.refresh_only:
        return Plan(changes=_refresh_changes(state, options.observations.resources), **common)
    common["retired"] = retired(desired, state, options)
    wanted = {k: v for k, v in wanted.items() if k not in excluded}
    state = state.model_copy(update={"resources": {k: v for k, v in state.resources.items() if k not in excluded}})
    moves = find_moves(options.moves, wanted, state)
    state, renamed = moved_state(state, moves)  # planned as if each move had been made: see core/moves.py
    adopted = importable(options.imports, wanted, state, options.observations)
    state = imported_state(state, wanted, adopted)  # and each import: see core/imports.py
    forward = _forward_changes(wanted, graph, state, options, (moves, renamed))
    forward = [with_import(c, options.imports, adopted, options.store_types) for c in forward]
    deletes = _delete_changes(wanted, state, options)
    forward = [_with_replay_note(c, wanted) for c in forward]
    changes = [_with_version(_with_object(_with_data_loss(c, state, options), state, graph, options, wanted),
                             wanted, state)
               for c in deletes + forward]
    changes = with_blue_green(changes, wanted, state, options, lambda a: readers(a, graph, wanted))
    common["paused"] = sorted(c.address for c in forward  # left stopped: not one deleted, replaced or reset
                              if c.action is Action.NOOP and is_paused(state.resources.get(c.address)))
    return Plan(changes=changes, **common)


def desired_fingerprint(desired: list[Resource]) -> str:
    return fingerprint(sorted([str(r.address), r.data_hash, r.metadata_hash] for r in desired))


def wanted_resources(desired: list[Resource], options: PlanOptions) -> tuple[dict[str, Resource], Graph]:
    """The resources the plan brings about, by address (none for a destroy; with --target, the targets and what
    they depend on), and the dependency graph of all it was given."""
    wanted = {} if options.destroy else {str(r.address): r for r in desired}
    graph = Graph.from_dependencies({r.address: r.depends_on for r in wanted.values()})
    return (_targeted(wanted, graph, options.targets) if options.targets else wanted), graph


def _targeted(wanted: dict[str, Resource], graph: Graph, targets: frozenset[str]) -> dict[str, Resource]:
    keep: set[str] = set()
    for target in targets:
        if target in wanted:
            keep.add(target)
            keep |= {str(a) for a in graph.ancestors(Address.parse(target))}
    return {k: v for k, v in wanted.items() if k in keep}


def _downstream(addresses: frozenset[str], graph: Graph, state: State) -> frozenset[str]:
    """The addresses, and everything that depends on them in the project or in what is deployed."""
    if not addresses:
        return frozenset()
    deployed = _deployed_graph(state.resources)
    found = set(addresses)
    for address in addresses:
        found |= {str(a) for known in (graph, deployed) for a in known.descendants(Address.parse(address))}
    return frozenset(found)


def _deployed_graph(resources: Mapping[str, Any]) -> Graph:
    return Graph.from_dependencies({Address.parse(k): [Address.parse(d) for d in v.depends_on]
                                    for k, v in resources.items()})


def _refresh_changes(state: State, observations: Mapping[str, Observation]) -> list[Change]:
    return [
        Change(address=key, action=Action.REFRESH, reason=f"drift: {obs.detail}", drift=True,
               depends_on=state.resources[key].depends_on, before=state.resources[key].data,
               observed=obs.detail)
        for key, obs in sorted(observations.items()) if not obs.healthy and key in state.resources
    ]


def _forward_changes(wanted: dict[str, Resource], graph: Graph, state: State, options: PlanOptions,
                     moved: tuple[Mapping[str, str], frozenset[str]] = ({}, frozenset())) -> list[Change]:
    replaced: dict[str, str] = {}
    restarting = restarting_stores({k: r.metadata for k, r in wanted.items()},
                                   {k: v.metadata for k, v in state.resources.items()})
    changes = []
    for address in graph.order():
        if str(address) not in wanted:
            continue
        resource = wanted[str(address)]
        pinned = _pinned(resource, state)
        change = _change_for(pinned, state, options, replaced, graph, restarting)
        if change.action is Action.REPLACE and pinned is not resource and recreates(state.resources[change.address]):
            change = _change_for(resource, state, options, replaced, graph, restarting)  # takes the size inferred now
        change = with_move(change, *moved, options.store_types)
        if change.address in options.replace or change.address in options.reset_checkpoint:
            change = forced_change(change, resource, wanted, options.observations, change.address in options.replace,
                                   replaced)
        elif is_paused(state.resources.get(change.address)):
            change = held(change)
        if change.action is Action.REPLACE:
            replaced[change.address] = change.reason
        changes.append(change)
    return changes


def recreates(deployed: DeployedResource | None) -> bool:
    """Whether replacing the deployed resource deletes its object and creates a new one, which takes the size
    inferred now: not a log dsflow adopted (it never deletes those), which keeps its size."""
    return deployed is not None and deployed.outputs.get("created_by_dsflow", True) is not False


def _pinned(resource: Resource, state: State) -> Resource:
    return pinned(resource, state.resources.get(str(resource.address)))


def pinned(resource: Resource, deployed: DeployedResource | None) -> Resource:
    """`resource` with its keep_deployed fields at their deployed values: a topic sized from its source keeps the
    size it was created with when the source is resized (a broker cannot shrink it, and recreating it loses records)."""
    return resource if deployed is None else pinned_to(resource, deployed.data)


def pinned_to(resource: Resource, data: Mapping[str, Any]) -> Resource:
    """`resource` with its keep_deployed fields at their values in `data` (deployed, or a log adopted as it is)."""
    if not resource.keep_deployed:
        return resource
    kept = {k: data[k] for k in resource.keep_deployed if k in data}
    if all(resource.data.get(k) == v for k, v in kept.items()):
        return resource
    return dataclasses.replace(resource, data={**resource.data, **kept})


def _change_for(resource: Resource, state: State, options: PlanOptions, replaced: dict[str, str],
                graph: Graph, restarting: Mapping[str, list[str]] | None = None) -> Change:
    key = str(resource.address)
    deployed = state.resources.get(key)
    common = dict(address=key, depends_on=[str(d) for d in resource.depends_on], after=resource.data,
                  after_metadata=resource.metadata, data_hash=resource.data_hash,
                  metadata_hash=resource.metadata_hash)
    kind = resource.address.kind
    if deployed is None and kind is Kind.RELATION and key in options.observations.resources:
        return _new_log(resource, options.observations.resources[key], options, common)
    if deployed is None:
        category = Category.NEW if kind is Kind.QUERY else None
        return Change(action=Action.CREATE, reason="not yet deployed",
                      effect=_effect(kind, Action.CREATE, resource.data),
                      category=category, **common)
    common["before"] = deployed.data
    upstream = _replaced_upstream(resource, graph, replaced)
    if kind is Kind.QUERY:
        return query_change(resource, deployed, state, options, upstream, common, restarting or {}, replaced)
    if kind is Kind.BINDING and deployed.data_hash != resource.data_hash:
        return Change(action=Action.UPDATE, reason="roles changed (in place)", **common)
    if deployed.data_hash != resource.data_hash:
        fields = _changed_fields(deployed.data, resource.data)
        if key in options.observations.growable and grows_only(deployed.data, resource.data):
            return _grown(deployed.data, resource.data, options, common)
        columns = None
        if kind is Kind.RELATION and not upstream:
            columns = column_change(deployed.data, resource.data, resource.metadata.get("schema_compatibility"),
                                    deployed.outputs.get("column_history"))
        if columns is not None and columns.refused is None:
            return _evolved(columns, deployed.data, options, common)
        extra = _relation_extra(resource, graph) if kind is Kind.RELATION else {}
        why = columns.refused if columns is not None else f"{', '.join(fields)} changed"
        return Change(action=Action.REPLACE, reason=f"{why} (forces replacement)",
                      effect=_effect(kind, Action.REPLACE, resource.data), **extra, **common)
    if upstream and kind in (Kind.DATAGEN, Kind.RELATION, Kind.GRANT):  # a re-created table lost its grants
        return Change(action=Action.REPLACE, reason=f"upstream {upstream} is replaced",
                      effect=_effect(kind, Action.REPLACE, resource.data), **common)
    observed = options.observations.resources.get(key)
    if observed is not None and not observed.healthy:
        return Change(action=Action.UPDATE, reason=f"drift: {observed.detail}", drift=True,
                      effect=_effect(kind, Action.UPDATE, resource.data), **common)
    if deployed.metadata_hash != resource.metadata_hash and access_only(deployed.metadata, resource.metadata):
        return Change(action=Action.UPDATE, reason="owner changed (in place)", effect=OWNERSHIP_EFFECT, **common)
    if deployed.metadata_hash != resource.metadata_hash and kind is Kind.FUNCTION:
        return Change(action=Action.UPDATE, reason=function_reason(deployed.metadata, resource.metadata),
                      effect=_effect(kind, Action.UPDATE), **common)
    if deployed.metadata_hash != resource.metadata_hash:
        fields = _changed_fields(deployed.metadata, resource.metadata)
        if kind is Kind.RELATION and resource.data.get("kind") == "changelog" and "key_format" in fields:
            return Change(action=Action.REPLACE, reason="'key.format' of a changelog changed: its keys identify its "
                          "rows, and rows under the old keys would never be superseded (forces replacement)",
                          effect=_effect(kind, Action.REPLACE, resource.data), **_relation_extra(resource, graph),
                          **common)
        return Change(action=Action.UPDATE, reason=f"{', '.join(fields)} changed (in place)",
                      effect=_effect(kind, Action.UPDATE, resource.data), **common)
    return Change(action=Action.NOOP, reason="up to date", **common)


def _new_log(resource: Resource, observed: Observation, options: PlanOptions, common: dict[str, Any]) -> Change:
    """A relation not yet deployed whose log the refresh looked at. A log that exists already is adopted as it is:
    a size the relation does not declare is the log's own (a declared size that differs is DSF-E420:
    `size_conflicts`); its records are kept, and dsflow, which did not create it, never deletes it."""
    noun = log_noun(resource.data, options.store_types)
    if observed.size is None:
        return Change(action=Action.CREATE, reason="not yet deployed", observed=observed.detail,
                      effect=f"{noun} created with {log_size(resource.data, options.store_types)}", **common)
    adopted = pinned_to(resource, {"partitions": observed.size})  # an undeclared size: the log's own
    common = {**common, "after": adopted.data, "data_hash": adopted.data_hash}
    return Change(action=Action.CREATE, reason=f"not yet deployed; its {noun} exists already (adopted)",
                  observed=observed.detail,
                  effect=f"{noun} adopted as it is ({log_size(adopted.data, options.store_types)}): its records are "
                         "kept and read; dsflow did not create it, so no plan deletes it", **common)


def size_conflicts(plan: Plan, observations: Mapping[str, Observation] | None = None) -> list[Change]:
    """The relations the plan creates over a log that exists already with another size than they declare: apply
    would stop half-way on them (a log is neither shrunk nor silently resized), so planning refuses them (DSF-E420,
    engine/operations.py names where each is declared). `observations`: the plan's own unless given."""
    observations = plan.observations.resources if observations is None else observations
    return [c for c in plan.changes if c.action is Action.CREATE and c.after is not None
            and (found := observations.get(c.address)) is not None and found.size is not None
            and c.after.get("partitions") != found.size]


def _evolved(columns: ColumnChange, deployed: dict[str, Any], options: PlanOptions, common: dict[str, Any]) -> Change:
    """A relation's columns changed compatibly: updated in place, its topic or table and records kept."""
    where = physical_object(deployed, options.store_types)
    if columns.rule == "ADD COLUMN":
        return Change(action=Action.UPDATE, reason=f"{columns.evolution.describe()} (in place: ALTER TABLE ADD COLUMN)",
                      effect=f"{where} and its rows kept; rows written before read the new column(s) as null", **common)
    subject = deployed.get("value_subject")
    registry = f"; registry subject {subject} takes the new schema as a new version ({columns.rule})" if subject else ""
    return Change(action=Action.UPDATE,
                  reason=f"{columns.evolution.describe()} (in place, compatible under {columns.rule})",
                  effect=f"{where} and its records kept; records written from now on carry the new columns, earlier "
                         f"ones read an added column as null{registry}", **common)


def grows_only(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Only a stream's partitions changed, and upward: what a store that can add partitions does in place (a
    changelog is replaced: its keys would move to other partitions, and a key's older rows could outlive newer)."""
    return (_changed_fields(before, after) == ["partitions"] and after.get("kind") == "stream"
            and after["partitions"] > before["partitions"])


def _grown(before: dict[str, Any], after: dict[str, Any], options: PlanOptions, common: dict[str, Any]) -> Change:
    where = physical_object(before, options.store_types)
    return Change(action=Action.UPDATE,
                  reason=f"partitions raised {before['partitions']} -> {after['partitions']} (in place: partitions "
                         "added)",
                  effect=f"{where} and its records kept; queries reading it read the new partitions from offset 0 "
                         "without a restart; records with a key may go to another partition from now on", **common)


def _relation_extra(resource: Resource, graph: Graph) -> dict[str, Any]:
    downstream = sorted(str(a) for a in graph.descendants(resource.address) if a.kind is Kind.QUERY)
    return {"category": Category.REPLACE_RELATION, "affected": downstream}


def _replaced_upstream(resource: Resource, graph: Graph, replaced: dict[str, str]) -> str | None:
    for dependency in graph.dependencies(resource.address):
        if str(dependency) in replaced:
            if resource.address.kind is Kind.RELATION and dependency.kind is not Kind.STORE:
                continue
            return str(dependency)
    return None


def deleted(wanted: Mapping[str, Resource], state: State, targets: frozenset[str]) -> dict[str, DeployedResource]:
    """The deployed resources the plan deletes: those not wanted (with --target, only the targets and what depends
    on them)."""
    gone = {k: v for k, v in state.resources.items() if k not in wanted}
    if targets:
        deployed = _deployed_graph(state.resources)
        reach = set(targets) | {str(a) for t in targets for a in deployed.descendants(Address.parse(t))}
        gone = {k: v for k, v in gone.items() if k in reach}
    return gone


def _delete_changes(wanted: dict[str, Resource], state: State, options: PlanOptions) -> list[Change]:
    """What left the project, in reverse dependency order: deleted, or forgotten if a `removed:` entry names it."""
    gone = deleted(wanted, state, options.targets)
    ordered = list(reversed(_deployed_graph(gone).order()))
    return [
        forget_change(str(a), a.kind, gone[str(a)], options.removed[str(a)],
                      options.observations.record_counts.get(str(a)), options.store_types)
        if str(a) in options.removed else
        Change(address=str(a), action=Action.DELETE, reason="no longer in the project",
               effect=_effect(a.kind, Action.DELETE, gone[str(a)].data), depends_on=gone[str(a)].depends_on,
               before=gone[str(a)].data)
        for a in ordered
    ]


def _with_replay_note(change: Change, wanted: dict[str, Resource]) -> Change:
    """A replay says what stays in its sink: what it wrote before is there, and is written again."""
    if change.category is not Category.REPLAY or change.after is None:
        return change
    sink = wanted.get(f"relation.{change.after.get('sink')}")
    note = SINK_AFTER_REPLAY.get((sink.data if sink else {}).get("kind", ""))
    return change.model_copy(update={"effect": f"{change.effect}; {note}"}) if note else change


def _with_object(change: Change, state: State, graph: Graph, options: PlanOptions,
                 wanted: Mapping[str, Resource]) -> Change:
    """A relation change names its physical object; a delete or move lists the queries it affects."""
    address = Address.parse(change.address)
    if address.kind is not Kind.RELATION or change.action is Action.FORGET or (
            change.action is Action.NOOP and change.imported is None):
        return change
    update: dict[str, Any] = {"physical": physical_object(change.after or change.before or {}, options.store_types)}
    if change.action is Action.DELETE:
        update["affected"] = sorted(k for k, v in state.resources.items()
                                    if k.startswith("query.") and change.address in v.depends_on)
    elif change.moved_from is not None:
        update["affected"] = sorted(str(a) for a in graph.descendants(address) if a.kind is Kind.QUERY)
    elif change.action in (Action.UPDATE, Action.REPLACE):
        update["affected"] = change.affected or readers(address, graph, wanted)
    if change.action in (Action.UPDATE, Action.REPLACE, Action.DELETE):
        update["consumers"] = options.observations.consumer_groups.get(change.address, [])
    return change.model_copy(update=update)


def readers(address: Address, graph: Graph, wanted: Mapping[str, Resource]) -> list[str]:
    """The project's queries downstream of a relation in the dependency graph that read it: not the queries that
    only write it."""
    name = address.name
    return sorted(str(a) for a in graph.descendants(address) if a.kind is Kind.QUERY and not (
        (found := wanted.get(str(a))) is not None and found.data.get("sink") == name
        and name not in {s[0] for s in found.data.get("sources", [])}))


def _with_version(change: Change, wanted: Mapping[str, Resource], state: State) -> Change:
    """A relation created or deleted beside other versions of its model says so (dbt's model versions)."""
    if not change.address.startswith("relation.") or change.action not in (Action.CREATE, Action.DELETE):
        return change
    if change.action is Action.CREATE:
        if (change.after_metadata or {}).get("version") is None:
            return change
        note = version_reason(change.address, True, {k: v.metadata for k, v in state.resources.items()})
    else:
        note = version_reason(change.address, False, {k: r.metadata for k, r in wanted.items()
                                                      if r.metadata.get("version") is not None})
    return change.model_copy(update={"reason": f"{change.reason}; {note}"}) if note else change


def _with_data_loss(change: Change, state: State, options: PlanOptions) -> Change:
    """The change, with what it destroys when it deletes or replaces a relation whose object dsflow created."""
    deployed = state.resources.get(change.address)
    if change.action not in (Action.DELETE, Action.REPLACE) or deployed is None:
        return change
    if Address.parse(change.address).kind is not Kind.RELATION:
        return change
    prevented = bool(deployed.metadata.get("prevent_destroy") or (change.after_metadata or {}).get("prevent_destroy"))
    if not deployed.outputs.get("created_by_dsflow", True):
        if change.action is Action.DELETE:
            return change.model_copy(update={"effect": f"{physical_object(deployed.data, options.store_types)} "
                                                       "kept: dsflow did not create it"})
        return change
    loss = DataLoss(object=physical_object(deployed.data, options.store_types),
                    records=options.observations.record_counts.get(change.address), prevented=prevented)
    return change.model_copy(update={"destroys": loss})


def function_reason(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Why a user-defined function changed, in words: its code (module file), its signature, or where it is."""
    what = []
    if before.get("source_hash") != after.get("source_hash"):
        what.append(f"code of {after.get('path')} changed")
    if (before.get("parameters"), before.get("returns")) != (after.get("parameters"), after.get("returns")):
        what.append("signature changed")
    if (before.get("target"), before.get("path")) != (after.get("target"), after.get("path")):
        what.append(f"now {after.get('target')}")
    return f"{'; '.join(what) or 'definition changed'} (in place)"


def _changed_fields(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [k for k in keys if before.get(k) != after.get(k)] or ["definition"]


OWNERSHIP_EFFECT = "ownership recorded; nothing deployed is touched (a query keeps running)"


def _effect(kind: Kind, action: Action, data: dict[str, Any] | None = None) -> str | None:
    if kind is Kind.RELATION and (data or {}).get("kind") in ("table", "materialized_view"):
        return {
            Action.CREATE: "table created (columns from the query's output) unless it already exists",
            Action.REPLACE: "table deleted (if dsflow created it) and created again: its rows are lost",
            Action.UPDATE: "table ensured (created again if missing); no rows touched",
            Action.DELETE: "table deleted if dsflow created it",
        }[action]
    if kind is Kind.QUERY:
        return {
            Action.CREATE: "new checkpoint; sources read from their starting position",
            Action.REPLACE: "old query stopped; new checkpoint, sources read again from their starting position",
            Action.UPDATE: "restarted on the same checkpoint; resumes from its committed offsets",
            Action.DELETE: "query stopped; its checkpoint is kept on disk",
        }[action] + (REALTIME if (data or {}).get("trigger") == "realtime" and action is not Action.DELETE else "")
    if kind is Kind.VIEW:
        return {
            Action.CREATE: "recorded; nothing deployed: the queries reading it hold its SELECT",
            Action.UPDATE: "recorded; the queries reading it change with it (their SQL holds it: their own changes)",
            Action.DELETE: "forgotten (no query reads it)",
        }.get(action)
    if kind is Kind.FUNCTION:
        return {
            Action.CREATE: "recorded; each query calling it registers it in its Spark session",
            Action.UPDATE: "recorded; the queries calling it restart on their checkpoints with the new version",
            Action.DELETE: "forgotten (no query calls it)",
        }.get(action)
    if kind is Kind.RELATION:
        return {
            Action.CREATE: "topic created unless it already exists",
            Action.REPLACE: "topic deleted (if dsflow created it) and created again: its records are lost",
            Action.UPDATE: "topic ensured (created again if missing); no records touched",
            Action.DELETE: "topic deleted if dsflow created it",
        }[action]
    return None


def query_change(resource: Resource, deployed, state: State, options: PlanOptions, upstream: str | None,
                 common: dict[str, Any], restarting: Mapping[str, list[str]] | None = None,
                 replaced: Mapping[str, str] | None = None) -> Change:
    """A deployed query's change: its action and category from the rules in core/categories.py; `restarting`: the
    changed settings a running query uses, by store name (`restarting_stores`); `replaced`: what this plan replaces
    before it (a replay of a source rebuilt first shows no estimate: what it will hold is not known yet)."""
    key = str(resource.address)
    override = resource.metadata.get("start_position")
    seen = options.observations
    observed = seen.resources.get(key)
    rollback = _rollback_version(state, key, deployed.data_hash, resource.data_hash)
    stores = {s: (restarting or {})[s] for s in _stores_of(deployed.depends_on, state) if s in (restarting or {})}
    decided = decide_query(deployed.data, resource.data, deployed.metadata, resource.metadata, override, upstream,
                           stores)
    stream = writes_a_stream(resource, state)
    if upstream is None and deployed.data == resource.data and access_only(deployed.metadata, resource.metadata):
        return Change(action=Action.UPDATE, reason="owner changed (in place)", effect=OWNERSHIP_EFFECT, **common)
    if decided is None:
        if observed is not None and not observed.healthy:
            return Change(action=Action.UPDATE, reason=f"drift: {observed.detail}", drift=True,
                          category=Category.IN_PLACE,
                          effect=effect_text(Category.IN_PLACE, None, stream and may_repeat(deployed, resource,
                                                                                             Category.IN_PLACE)),
                          **common)
        return Change(action=Action.NOOP, reason="up to date", **common)
    action, category, reason, used_override = decided
    reason += _trigger_switch(deployed.data, resource.data)
    foreign = category is Category.CARRY_OFFSETS and key in seen.foreign_logs
    if foreign:
        category, used_override = Category.REPLAY, None
        reason += f"; {seen.foreign_logs[key]}: offsets cannot be carried to another log, so it replays"
    if rollback:
        reason = f"rollback to version {rollback}; {reason}"
    rebuilt = any(f"relation.{s[0]}" in (replaced or {}) for s in resource.data.get("sources", []))
    estimate = seen.estimates.get(key) if category is Category.REPLAY and (foreign or not rebuilt) else None
    return Change(action=action, reason=reason, category=category, override=used_override, estimate=estimate,
                  rollback_of=rollback, effect=effect_text(category, used_override, stream and may_repeat(
                      deployed, resource, category)) + _realtime(deployed.data, resource.data), **common)


def _trigger_switch(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The reason's words when a query moves to or from real-time mode (another source and sink, another
    checkpoint: core/categories.py `checkpoint_compatible`)."""
    was, now = before.get("trigger", "micro-batch"), after.get("trigger", "micro-batch")
    if was == now:
        return ""
    return (f" ({was} -> {now}: real-time mode reads and writes through Spark's own connector, whose checkpoint "
            "the other mode cannot resume)")


def _realtime(before: dict[str, Any], after: dict[str, Any]) -> str:
    return REALTIME if "realtime" in (before.get("trigger"), after.get("trigger")) else ""


def writes_a_stream(query: Resource, state: State) -> bool:
    """The query's sink, as deployed, is a stream: its records are appended to a log, at-least-once (a changelog's
    are upserts by key, a view's and a table's batches are recorded with their rows)."""
    sink = state.resources.get(str(Address(Kind.RELATION, query.data.get("sink", ""))))
    return sink is not None and sink.data.get("kind") == "stream"


def may_repeat(deployed: Any, resource: Resource, category: Category) -> bool:
    """A restart of a query writing a stream may write a batch again: unless both versions are exactly-once (each
    task's records and the batch id in one transaction of its log store, a replayed batch skipped) and the new one
    resumes on the same checkpoint. Carried offsets start a new checkpoint, and with it a new ledger of written
    batches: a batch the old version wrote but did not commit in its checkpoint is read and written again."""
    exactly = all(r.data.get("delivery_guarantee") == "exactly-once" for r in (deployed, resource))
    return not exactly or category is Category.CARRY_OFFSETS


def decide_query(before: dict[str, Any], after: dict[str, Any], before_meta: dict[str, Any],
                 after_meta: dict[str, Any], override: str | None, upstream: str | None,
                 stores: Mapping[str, list[str]] | None = None) -> tuple[Action, Category, str, str | None] | None:
    """None when nothing changed; else the action, category, reason and deciding override. A change of a setting
    the query runs with restarts it in place; the reason names it (core/settings.py)."""
    if upstream is None and before == after:
        if before_meta == after_meta:
            return None
        fields = _changed_fields(before_meta, after_meta)
        if "start_position" in fields and is_replay_override(override):
            return Action.REPLACE, Category.REPLAY, f"'start.position' set to '{override}'", override
        named = named_query_settings(fields, before_meta, after_meta, stores or {})
        return Action.UPDATE, Category.IN_PLACE, f"{', '.join(named)} changed (in place)", None
    category, used = query_category(before, after, override, upstream is not None)
    if upstream is not None and before == after:
        reason = f"upstream {upstream} is replaced"
    else:
        reason = f"{', '.join(_changed_fields(before, after))} changed"
    if used:
        reason += f"; overridden by 'start.position' = '{used}'"
    action = Action.UPDATE if category is Category.KEEP_CHECKPOINT else Action.REPLACE
    return action, category, reason, used


def _rollback_version(state: State, key: str, current: str, wanted: str) -> str | None:
    if current == wanted:
        return None
    return next((e.version for e in reversed(state.history(key)) if e.version == wanted), None)


def _stores_of(depends_on: list[str], state: State) -> list[str]:
    """The stores of the deployed relations a deployed query reads or writes."""
    relations = [state.resources.get(d) for d in depends_on if d.startswith("relation.")]
    return sorted({r.data["store"] for r in relations if r is not None and r.data.get("store")})
