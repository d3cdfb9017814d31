"""Where the planner marks blue/green replays and the kept old versions it removes (core/bluegreen.py): called by
core/plan.py's make_plan, kept apart so the planner's own module stays the diff of its resources."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Protocol

from dsflow.core.address import Address, Kind
from dsflow.core.bluegreen import BLUE_GREEN_EFFECT, Retirement, planned, retirements, wanted_blue_green
from dsflow.core.categories import Category, effect_text
from dsflow.core.changes import Action, Change, Observations
from dsflow.core.resources import Resource
from dsflow.core.state import State


class PlanOptions(Protocol):
    """What of core/plan.py's PlanOptions this module reads (named here: plan.py imports this module)."""

    @property
    def blue_green(self) -> bool: ...
    @property
    def catch_up_seconds(self) -> int: ...
    @property
    def store_types(self) -> Mapping[str, str]: ...
    @property
    def observations(self) -> Observations: ...
    @property
    def now(self) -> datetime | None: ...
    @property
    def destroy(self) -> bool: ...
    @property
    def targets(self) -> frozenset[str]: ...
    @property
    def excludes(self) -> frozenset[str]: ...


def with_blue_green(changes: list[Change], wanted: Mapping[str, Resource], state: State, options: PlanOptions,
                    readers: Callable[[Address], list[str]]) -> list[Change]:
    """Each replay of a deployed query writing a deployed log that blue/green is asked for, carried out beside the
    deployed version, unless the plan also changes that log; `readers`: the project's queries reading a relation."""
    touched = {c.address for c in changes if c.action is not Action.NOOP and c.address.startswith("relation.")}
    return [_blue_green(c, wanted, state, options, readers) if c.category is Category.REPLAY
            and c.action is Action.REPLACE and f"relation.{(c.after or {}).get('sink')}" not in touched else c
            for c in changes]


def _blue_green(change: Change, wanted: Mapping[str, Resource], state: State, options: PlanOptions,
                readers: Callable[[Address], list[str]]) -> Change:
    address = f"relation.{(change.after or {}).get('sink')}"
    sink, deployed = wanted.get(address), state.resources.get(address)
    if sink is None or deployed is None or not wanted_blue_green({**sink.data, **sink.metadata}, options.blue_green,
                                                                 options.store_types):
        return change
    plan = planned(address, sink.data, deployed.outputs, state.deployments.get(change.address),
                   readers(sink.address), options.observations.consumer_groups.get(address, []),
                   options.catch_up_seconds)
    return change.model_copy(update={"blue_green": plan, "effect": BLUE_GREEN_EFFECT.format(
        replay=effect_text(Category.REPLAY, change.override), new=plan.new_log, old=plan.old_log)})


def retired(desired: list[Resource], state: State, options: PlanOptions) -> list[Retirement]:
    """The kept old versions of blue/green deployments this plan removes ('deploy.retention' of their relation as
    desired, else as deployed), within --target and --exclude."""
    keep = {k: v.metadata.get("deploy_retention_ms") for k, v in state.resources.items() if k.startswith("relation.")}
    keep |= {str(r.address): r.metadata.get("deploy_retention_ms") for r in desired
             if r.address.kind is Kind.RELATION}
    found = retirements(state.deployments, keep, options.now or datetime.now(timezone.utc), options.destroy)
    return [r for r in found if (not options.targets or r.query in options.targets)
            and r.query not in options.excludes]
