"""What a refresh looks at, derived from the project's resources and the state alone, without any I/O.

engine/refresh.py `observe` asks the live systems exactly this, once, before the one plan (core/plan.py `make_plan`,
which sees the systems only through the `Observations` that result). The questions may cover a little more than the
plan then uses (the replay estimate of a changed query that keeps its checkpoint), never less: every replacement,
replay or delete the plan can decide comes from a resource whose definition changed, from what depends on one, or
from a resource the project no longer declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsflow.core.address import Address, Kind
from dsflow.core.bluegreen import wanted_blue_green
from dsflow.core.categories import is_replay_override
from dsflow.core.graph import Graph
from dsflow.core.moves import find_moves, moved_state
from dsflow.core.physical import column_change
from dsflow.core.plan import PlanOptions, deleted, grows_only, pinned, recreates, wanted_resources
from dsflow.core.resources import Resource
from dsflow.core.state import DeployedResource, State


@dataclass(frozen=True)
class Questions:
    """What to ask the live systems besides drift, each with the deployed entry it concerns (moves made)."""

    growing: Mapping[str, tuple[dict[str, Any], int]] = field(default_factory=dict)
    """Relation address -> (deployed data, partitions wanted): a stream that only gains partitions. Can its store add
    them in place, and how many has its log now?"""
    replays: Mapping[str, tuple[DeployedResource, str | None]] = field(default_factory=dict)
    """Query address -> (deployed entry, the replay's start: 'earliest' or epoch ms; None: earliest): what would a
    replay re-read? Every deployed query whose definition, or anything upstream of it, changed."""
    carried: Mapping[str, DeployedResource] = field(default_factory=dict)
    """Query address -> deployed entry with the identities of the source logs its offsets were read from: is each
    the same log still?"""
    counted: Mapping[str, DeployedResource] = field(default_factory=dict)
    """Relation address -> deployed entry of an object dsflow created that the plan may delete or replace: how many
    records does it hold?"""
    evolving: tuple[str, ...] = ()
    """Relation addresses whose columns change compatibly: would the registry take the new schema?"""
    skipping: Mapping[str, DeployedResource] = field(default_factory=dict)
    """Query address -> deployed entry of a query whose checkpoint is reset (--reset-checkpoint): how many records do
    its sources hold past its last committed batch?"""
    consumed: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    """Relation address -> deployed data of a relation the plan may update, replace or delete: which consumer groups
    outside the project read its log?"""

    adopting: tuple[str, ...] = ()
    """Relation addresses of the tables an import adopts (declared, not deployed): does each exist, with which
    columns, and can it take the declaration's rows as it is?"""
    running: Mapping[str, str] = field(default_factory=dict)
    """Query address -> the run folder an import names (declared, not deployed): does a driver of its own run the
    query there, which version, on which checkpoint?"""

    def __bool__(self) -> bool:
        return bool(self.growing or self.replays or self.carried or self.counted or self.evolving or self.skipping
                    or self.consumed or self.adopting or self.running)


def questions(desired: list[Resource], state: State, options: PlanOptions, counting: bool = True) -> Questions:
    """What the refresh must measure for the plan of `desired` against `state` under `options` (its mode, targets and
    moves; its observations are not read). Without `counting` (--no-refresh), only replay estimates: growth, record
    counts, source-log identities and the registry are looked at with a refresh."""
    wanted, graph = wanted_resources(desired, options)
    moved, _ = moved_state(state, find_moves(options.moves, wanted, state))
    changed = {key for key, resource in wanted.items() if _changed(resource, moved.resources.get(key))}
    reach = _downstream(changed, graph) & set(wanted)
    deployed = {key: moved.resources[key] for key in sorted(reach) if key in moved.resources}
    queries = {key: entry for key, entry in deployed.items() if key.startswith("query.")}
    replays = {key: (entry, _start(wanted[key])) for key, entry in queries.items()}
    replays |= {key: (moved.resources[key], None) for key in sorted(options.replace) if key in moved.resources}
    skipping = {key: moved.resources[key] for key in sorted(options.reset_checkpoint) if key in moved.resources}
    if not counting:
        return Questions(replays=replays, skipping=skipping)
    growing = {key: (entry.data, pinned(wanted[key], entry).data["partitions"]) for key, entry in deployed.items()
               if key in changed and key.startswith("relation.") and _grows(wanted[key], entry)}
    growing |= {key: (wanted[key].data, wanted[key].data["partitions"]) for key in sorted(options.imports)
                if key in wanted and key not in moved.resources and "partitions" in wanted[key].data
                and wanted[key].data.get("kind") != "table"}
    evolving = tuple(key for key, entry in deployed.items() if key in changed and _evolves(wanted[key], entry))
    carried = {key: entry for key, entry in queries.items() if entry.outputs.get("logs")}
    maybe_gone = {**deployed, **deleted(wanted, moved, options.targets)}
    counted = {key: entry for key, entry in sorted(maybe_gone.items())
               if Address.parse(key).kind is Kind.RELATION and recreates(entry)}
    consumed = {key: entry.data for key, entry in sorted(maybe_gone.items())
                if Address.parse(key).kind is Kind.RELATION and (key in changed or key not in wanted)}
    consumed |= _blue_green_sinks(queries, wanted, moved, options)
    adopting = tuple(key for key in sorted(options.imports)
                     if key in wanted and key not in moved.resources and wanted[key].data.get("kind") == "table")
    running = {key: options.imports[key] for key in sorted(options.imports)
               if key.startswith("query.") and key in wanted and key not in moved.resources}
    return Questions(growing=growing, replays=replays, carried=carried, counted=counted, evolving=evolving,
                     skipping=skipping, consumed=consumed, adopting=adopting, running=running)


def _blue_green_sinks(queries: Mapping[str, DeployedResource], wanted: Mapping[str, Resource], state: State,
                      options: PlanOptions) -> dict[str, dict[str, Any]]:
    """The deployed logs a changed query writes that a blue/green replay may move to a new log: whose consumer
    groups must move?"""
    found = {}
    for key in queries:
        sink = f"relation.{wanted[key].data.get('sink')}" if key in wanted else ""
        resource, deployed = wanted.get(sink), state.resources.get(sink)
        if resource is not None and deployed is not None and wanted_blue_green(
                {**resource.data, **resource.metadata}, options.blue_green, options.store_types):
            found[sink] = deployed.data
    return found


def _changed(resource: Resource, deployed: DeployedResource | None) -> bool:
    """The deployed resource's definition changed in a way that may replace it or replay it (a metadata change
    otherwise updates in place): its data, a changelog's key format, a query's replay start."""
    if deployed is None:
        return False
    if pinned(resource, deployed).data_hash != deployed.data_hash:
        return True
    kind = resource.address.kind
    if kind is Kind.RELATION:
        return deployed.metadata.get("key_format") != resource.metadata.get("key_format")
    start = resource.metadata.get("start_position")
    return kind is Kind.QUERY and deployed.metadata.get("start_position") != start and is_replay_override(start)


def _downstream(roots: set[str], graph: Graph) -> set[str]:
    """The roots and everything that depends on them, directly or through others."""
    reach: set[str] = set()
    for root in sorted(roots):
        if root not in reach:
            reach.add(root)
            reach |= {str(a) for a in graph.descendants(Address.parse(root))}
    return reach


def _grows(relation: Resource, deployed: DeployedResource) -> bool:
    return grows_only(deployed.data, pinned(relation, deployed).data)


def _start(query: Resource) -> str | None:
    """Where a replay of the query starts: its 'start.position' when that asks for a replay, else the earliest."""
    start = query.metadata.get("start_position")
    return start if is_replay_override(start) else None


def _evolves(resource: Resource, deployed: DeployedResource) -> bool:
    """A query sink's log whose columns change compatibly under its rule: its registry subject takes a new version."""
    if resource.address.kind is not Kind.RELATION or not resource.data.get("value_subject"):
        return False
    columns = column_change(deployed.data, resource.data, resource.metadata.get("schema_compatibility"),
                            deployed.outputs.get("column_history"))
    return columns is not None and columns.refused is None
