"""Where the planner marks blue/green replays and the kept old versions it removes (core/bluegreen.py): called by
core/plan.py's make_plan, kept apart so the planner's own module stays the diff of its resources."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Protocol

from dsflow.core.address import Address, Kind
from dsflow.core.bluegreen import (BLUE_GREEN_EFFECT, EXACT, MICRO_BATCHES, REALTIME_DEPLOYED, REALTIME_NEW, RUN_NOTE,
                                   TABLE_KINDS, BlueGreen, Retirement, interrupted, interrupted_text, planned,
                                   retirements, wanted_blue_green)
from dsflow.core.categories import Category, effect_text
from dsflow.core.changes import Action, Change, Observations
from dsflow.core.resources import Resource
from dsflow.core.state import State
from dsflow.core.stores import Capability, kinds_that


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
    marked = [_blue_green(c, wanted, state, options, readers) if c.category is Category.REPLAY
              and c.action is Action.REPLACE and f"relation.{(c.after or {}).get('sink')}" not in touched else c
              for c in changes]
    forwarded = {r: c.address for c in marked if c.blue_green is not None and c.blue_green.interrupted is not None
                 and c.blue_green.interrupted.action == "roll forward" for r in c.blue_green.readers}
    return [_left_to(forwarded[c.address], c) if c.drift and c.address in forwarded else _rolled_back(c, state)
            for c in marked]


def _left_to(query: str, change: Change) -> Change:
    """A reader whose recorded driver the interrupted switch stopped (the drift the refresh saw): the roll forward
    of `query` starts it on the new log, or again on its new checkpoint; nothing else restarts it."""
    return change.model_copy(update={"action": Action.NOOP, "drift": False, "category": None, "effect": None,
                                     "reason": f"{change.reason}: left to the roll forward of {query}"})


def _intent(change: Change, state: State) -> dict:
    pending = state.pending
    return dict(pending.intent) if pending is not None and pending.address == change.address else {}


def _rolled_back(change: Change, state: State) -> Change:
    """A change carried out without blue/green whose query an apply was killed deploying blue/green: its effect
    says the deployment is rolled back first (engine/bluegreen_resume.py). A query with no change of its own (its
    SQL reverted) is refreshed instead of left alone, so that apply rolls the deployment back all the same."""
    if change.blue_green is not None:
        return change
    found = interrupted(_intent(change, state), change.data_hash, False)
    if found is None:
        return change
    if change.action is Action.NOOP:
        return change.model_copy(update={"action": Action.REFRESH, "reason": "an interrupted blue/green deployment",
                                         "effect": interrupted_text(found)})
    effect = f"{change.effect}; first, " if change.effect else "first, "
    return change.model_copy(update={"effect": effect + interrupted_text(found)})


def _blue_green(change: Change, wanted: Mapping[str, Resource], state: State, options: PlanOptions,
                readers: Callable[[Address], list[str]]) -> Change:
    address = f"relation.{(change.after or {}).get('sink')}"
    sink, deployed = wanted.get(address), state.resources.get(address)
    intent = _intent(change, state)
    prior = interrupted(intent, change.data_hash, True)
    forward = prior is not None and prior.action == "roll forward"  # finished whether asked for again or not
    if sink is None or deployed is None or not wanted_blue_green({**sink.data, **sink.metadata},
                                                                 options.blue_green or forward, options.store_types):
        return change
    if forward:  # the deployment as it was frozen: its version, logs and readers
        plan = BlueGreen.model_validate(intent[RUN_NOTE]["plan"]).model_copy(update={"interrupted": prior})
    else:
        relocate = options.store_types.get(str(sink.data.get("store", ""))) in kinds_that(Capability.RELOCATE)
        plan = planned(address, sink.data, deployed.outputs, state.deployments.get(change.address),
                       readers(sink.address), options.observations.consumer_groups.get(address, []),
                       options.catch_up_seconds, relocate=relocate and sink.data.get("kind") in TABLE_KINDS,
                       prior=prior)
    query = state.resources.get(change.address)
    if not forward and query is not None and query.data.get("trigger") == "realtime":
        plan = plan.model_copy(update={"phases": [MICRO_BATCHES, *plan.phases]})  # engine/bluegreen.py restarts it
    guarantee = REALTIME_DEPLOYED.format(old=plan.old_log) if MICRO_BATCHES in plan.phases else EXACT
    effect = BLUE_GREEN_EFFECT.format(replay=effect_text(Category.REPLAY, change.override), new=plan.new_log,
                                      old=plan.old_log, guarantee=guarantee)
    effect += REALTIME_NEW if (change.after or {}).get("trigger") == "realtime" else ""
    return change.model_copy(update={"blue_green": plan, "effect": effect})


def retired(desired: list[Resource], state: State, options: PlanOptions) -> list[Retirement]:
    """The kept old versions of blue/green deployments this plan removes ('deploy.retention' of their relation as
    desired, else as deployed), within --target and --exclude."""
    keep = {k: v.metadata.get("deploy_retention_ms") for k, v in state.resources.items() if k.startswith("relation.")}
    keep |= {str(r.address): r.metadata.get("deploy_retention_ms") for r in desired
             if r.address.kind is Kind.RELATION}
    found = retirements(state.deployments, keep, options.now or datetime.now(timezone.utc), options.destroy)
    return [r for r in found if (not options.targets or r.query in options.targets)
            and r.query not in options.excludes]
