"""Diffing the desired resources against the deployed state into a frozen Plan.

The plan is data: it can be saved as JSON, rendered, and applied. Apply never re-decides.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.address import Address, Kind
from dsflow.core.graph import Graph
from dsflow.core.resources import Resource
from dsflow.core.state import State

PLAN_FORMAT_VERSION = 1


class Action(str, Enum):
    """What apply does to one resource."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    NOOP = "no-op"

    @property
    def symbol(self) -> str:
        return {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "no-op": " "}[self.value]


class Change(BaseModel):
    """One planned change, with the reason (for display only) and its effect on query state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str
    action: Action
    reason: str
    effect: str | None = Field(None, description="what happens to a query's checkpoint and offsets")
    depends_on: list[str] = Field(default_factory=list)
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    after_metadata: dict[str, Any] | None = None
    data_hash: str | None = None
    metadata_hash: str | None = None
    drift: bool = False


class Observation(BaseModel):
    """What a refresh saw of a deployed resource in the real system."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str
    healthy: bool
    detail: str = ""


class Plan(BaseModel):
    """The ordered changes that bring the deployed state to the desired project."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = PLAN_FORMAT_VERSION
    project: str
    environment: str
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    state_lineage: str
    state_serial: int
    changes: list[Change]

    @property
    def actionable(self) -> list[Change]:
        return [c for c in self.changes if c.action is not Action.NOOP]

    @property
    def has_changes(self) -> bool:
        return bool(self.actionable)

    def summary(self) -> dict[str, int]:
        counts = {a.value: 0 for a in Action if a is not Action.NOOP}
        for change in self.actionable:
            counts[change.action.value] += 1
        return counts


def make_plan(
    project: str,
    environment: str,
    desired: list[Resource],
    state: State,
    observations: dict[str, Observation] | None = None,
    destroy: bool = False,
) -> Plan:
    """Diff desired resources against state; deletes come first, in reverse dependency order."""
    observations = observations or {}
    wanted = {} if destroy else {str(r.address): r for r in desired}
    graph = Graph.from_dependencies({r.address: r.depends_on for r in wanted.values()})
    forward = _forward_changes(wanted, graph, state, observations)
    deletes = _delete_changes(wanted, state)
    return Plan(project=project, environment=environment, state_lineage=state.lineage,
                state_serial=state.serial, changes=deletes + forward)


def _forward_changes(wanted: dict[str, Resource], graph: Graph, state: State,
                     observations: dict[str, Observation]) -> list[Change]:
    replaced: dict[str, str] = {}
    changes = []
    for address in graph.order():
        resource = wanted[str(address)]
        change = _change_for(resource, state, observations, replaced, graph)
        if change.action is Action.REPLACE:
            replaced[change.address] = change.reason
        changes.append(change)
    return changes


def _change_for(resource: Resource, state: State, observations: dict[str, Observation],
                replaced: dict[str, str], graph: Graph) -> Change:
    key = str(resource.address)
    deployed = state.resources.get(key)
    common = dict(address=key, depends_on=[str(d) for d in resource.depends_on], after=resource.data,
                  after_metadata=resource.metadata, data_hash=resource.data_hash,
                  metadata_hash=resource.metadata_hash)
    kind = resource.address.kind
    if deployed is None:
        return Change(action=Action.CREATE, reason="not yet deployed", effect=_effect(kind, Action.CREATE), **common)
    common["before"] = deployed.data
    if deployed.data_hash != resource.data_hash:
        fields = _changed_fields(deployed.data, resource.data)
        return Change(action=Action.REPLACE, reason=f"{', '.join(fields)} changed (forces replacement)",
                      effect=_effect(kind, Action.REPLACE), **common)
    upstream = _replaced_upstream(resource, graph, replaced)
    if upstream and kind in (Kind.QUERY, Kind.DATAGEN, Kind.RELATION):
        return Change(action=Action.REPLACE, reason=f"upstream {upstream} is replaced",
                      effect=_effect(kind, Action.REPLACE), **common)
    observed = observations.get(key)
    if observed is not None and not observed.healthy:
        return Change(action=Action.UPDATE, reason=f"drift: {observed.detail}", drift=True,
                      effect=_effect(kind, Action.UPDATE), **common)
    if deployed.metadata_hash != resource.metadata_hash:
        fields = _changed_fields(deployed.metadata, resource.metadata)
        return Change(action=Action.UPDATE, reason=f"{', '.join(fields)} changed (in place)",
                      effect=_effect(kind, Action.UPDATE), **common)
    return Change(action=Action.NOOP, reason="up to date", **common)


def _replaced_upstream(resource: Resource, graph: Graph, replaced: dict[str, str]) -> str | None:
    for dependency in graph.dependencies(resource.address):
        if str(dependency) in replaced:
            if resource.address.kind is Kind.RELATION and dependency.kind is not Kind.STORE:
                continue
            return str(dependency)
    return None


def _delete_changes(wanted: dict[str, Resource], state: State) -> list[Change]:
    gone = {k: v for k, v in state.resources.items() if k not in wanted}
    graph = Graph.from_dependencies({Address.parse(k): [Address.parse(d) for d in v.depends_on]
                                     for k, v in gone.items()})
    ordered = list(reversed(graph.order()))
    return [
        Change(address=str(a), action=Action.DELETE, reason="no longer in the project",
               effect=_effect(a.kind, Action.DELETE), depends_on=gone[str(a)].depends_on,
               before=gone[str(a)].data)
        for a in ordered
    ]


def _changed_fields(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [k for k in keys if before.get(k) != after.get(k)] or ["definition"]


def _effect(kind: Kind, action: Action) -> str | None:
    if kind is Kind.QUERY:
        return {
            Action.CREATE: "new checkpoint; sources read from their starting position",
            Action.REPLACE: "old query stopped; new checkpoint, sources read again from their starting position",
            Action.UPDATE: "restarted on the same checkpoint; resumes from its committed offsets",
            Action.DELETE: "query stopped; its checkpoint is kept on disk",
        }[action]
    if kind is Kind.RELATION:
        return {
            Action.CREATE: "topic created unless it already exists",
            Action.REPLACE: "topic deleted (if dsflow created it) and created again: its records are lost",
            Action.UPDATE: "topic ensured (created again if missing); no records touched",
            Action.DELETE: "topic deleted if dsflow created it",
        }[action]
    return None
